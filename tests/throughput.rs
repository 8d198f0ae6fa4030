//! Throughput per layout (issue 29): `partop models measure` keeps what the guide's replica set
//! delivered under the node's layout in this node's store; a later partop (another process: a
//! restart) shows it beside the advice, and says which candidate layouts it has no
//! measurement for.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::env::SimEnv;
use common::{quick, run};

fn guide_node() -> String {
    let members: String = (1..=8)
        .map(|k| {
            format!(
                "[[workload]]\nname = \"mistral-12b#{k}\"\nkind = \"model-server\"\ngpu = {}\nvram_gb = 40\nbusy = 90\nswing = 2\nmodel = \"mistralai/Mistral-Nemo-Instruct-2407\"\n",
                k - 1
            )
        })
        .collect();
    quick("guide", "7.0.2", "SPX", "NPS1", &members)
}

#[test]
fn a_measurement_survives_a_restart_and_shows_beside_the_advice() {
    let e = SimEnv::new(&guide_node());
    common::wait_until("the members to be listed", || {
        run(e.cmd().args(["models", "list"]), "")
            .stdout
            .contains("set mistral-12b: 8/8 healthy")
    });
    let o = run(e.cmd().args(["models", "measure", "--secs", "2"]), "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("mistral-12b: SPX/NPS1: "))
        .unwrap_or_else(|| panic!("{}", o.stdout));
    // 8 SPX servers at about 90% busy: 8 x 2,600 x 0.9 = 18,720 tokens/s (the noise swings 2
    // points of busy either way).
    let tokens: f64 = line["mistral-12b: SPX/NPS1: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();
    assert!((17_000.0..=20_500.0).contains(&tokens), "{line}");
    assert!(
        line.contains("with 8 replicas, p50 ") && line.contains(", p99 "),
        "{line}"
    );
    assert!(e.xdg().join("partop/throughput.json").is_file());

    // Another partop process (a restart) reads it back beside the advice.
    let o = run(e.cmd().args(["models", "advise"]), "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let measured = &o.stdout[o
        .stdout
        .find("measured on this node")
        .expect("the measured part")..];
    assert!(
        measured.contains("  mistral-12b:\n")
            && measured.contains("    SPX/NPS1: ")
            && measured.contains("tokens/s with 8 replicas")
            && measured.contains("    DPX/NPS2: no measurement on this node"),
        "{measured}"
    );
    // A second measurement merges with the first: the seconds add up.
    let o = run(e.cmd().args(["models", "measure", "--secs", "1"]), "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let store: partop::domain::throughput::Store = serde_json::from_str(
        &std::fs::read_to_string(e.xdg().join("partop/throughput.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(store.entries.len(), 1, "{store:?}");
    assert!(store.entries[0].secs >= 3.0, "{store:?}");
}
