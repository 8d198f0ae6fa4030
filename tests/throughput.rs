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

fn store_of(e: &SimEnv) -> Option<partop::domain::throughput::Store> {
    let text = std::fs::read_to_string(e.xdg().join("partop/throughput.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn serve(e: &SimEnv) -> std::process::Child {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    e.cmd()
        .env("PARTOP_THROUGHPUT_WINDOW_SECS", "10")
        .args(["--refresh", "1", "serve", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Throughput is recorded while partop runs (here `partop serve`; the monitor runs the same
/// prober), without `models measure`: each steady window (10 s here, 5 minutes by default) is
/// kept, and a restarted partop adds to what the previous one kept.
#[test]
fn throughput_is_recorded_while_partop_serves_and_survives_its_restart() {
    let e = SimEnv::new(&guide_node());
    common::wait_until("the members to be listed", || {
        run(e.cmd().args(["models", "list"]), "")
            .stdout
            .contains("set mistral-12b: 8/8 healthy")
    });
    assert!(store_of(&e).is_none(), "nothing measured yet");
    let mut child = serve(&e);
    let first = wait_for_entry(&e, 0.0);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(first.replicas, 8, "{first:?}");
    assert!((10.0..20.0).contains(&first.secs), "one window: {first:?}");
    assert!(
        (17_000.0..=20_500.0).contains(&first.tokens_per_sec),
        "8 SPX servers at about 90% busy: {first:?}"
    );
    // The simulated server's latency: about 3.5 s end to end on SPX, its first token in a
    // tenth of a second or so.
    assert!(
        first.p99.is_some_and(|p| (2.0..=10.0).contains(&p)),
        "{first:?}"
    );
    assert!(
        first.ttft_p99.is_some_and(|p| (0.05..=1.0).contains(&p)),
        "{first:?}"
    );
    assert!(first.updated_ms.is_some());

    // A restart: the next window adds to the kept one (the seconds add up, one entry).
    let mut child = serve(&e);
    let merged = wait_for_entry(&e, first.secs);
    let _ = child.kill();
    let _ = child.wait();
    let store = store_of(&e).unwrap();
    assert_eq!(store.entries.len(), 1, "{store:?}");
    assert!(
        merged.secs >= first.secs + 10.0,
        "{merged:?} after {first:?}"
    );
}

/// The store's mistral-12b SPX/NPS1 entry once it measured more than `after` seconds.
fn wait_for_entry(e: &SimEnv, after: f64) -> partop::domain::throughput::Measured {
    let mut found = None;
    common::wait_until("a recorded window in the store", || {
        found = store_of(e)
            .and_then(|s| {
                s.get(&s.entries.first()?.node.clone(), "SPX/NPS1", "mistral-12b")
                    .cloned()
            })
            .filter(|m| m.secs > after);
        found.is_some()
    });
    found.unwrap()
}

/// `models advise` beside a store it cannot believe: not JSON, a wrong shape, or an entry whose
/// figures are absurd (1e308 tokens/s, -5 waiting, an infinite p99 written as 1e999): the
/// estimate is still printed, the store's problem is said with the file and entry, and the exit
/// is 3 (partial), never the estimate and then a bare failure (4 cases).
#[test]
fn advise_beside_a_store_it_cannot_believe_is_partial_and_says_why() {
    let e = SimEnv::new("cpx-nps4-small-models");
    let entry = |tps: &str, waiting: &str, p99: &str| {
        format!(
            r#"{{"format":1,"entries":[{{"node":"n","layout":"CPX/NPS4","model":"m","replicas":1,"tokens_per_sec":{tps},"running":1,"waiting":{waiting},"p50":1,"p99":{p99},"secs":600}}]}}"#
        )
    };
    let cases = [
        ("garbage".to_string(), "not a throughput store"),
        (
            "{\"entries\":[{\"x\":1}]}".to_string(),
            "not a throughput store",
        ),
        (entry("1e308", "0", "2"), "tokens_per_sec"),
        (entry("10", "-5", "2"), "waiting -5 is outside"),
    ];
    let mut n = 0;
    for (text, said) in cases {
        std::fs::create_dir_all(e.xdg().join("partop")).unwrap();
        std::fs::write(e.xdg().join("partop/throughput.json"), &text).unwrap();
        let o = common::run(e.cmd().args(["models", "advise"]), "");
        assert_eq!(o.code, 3, "{text}: {}{}", o.stdout, o.stderr);
        assert!(
            o.stdout.contains("SPX/NPS1"),
            "the estimate stands: {}",
            o.stdout
        );
        assert!(
            o.stdout.contains("the store cannot be read") && o.stdout.contains(said),
            "{text}: {}",
            o.stdout
        );
        n += 1;
    }
    assert_eq!(n, 4);
}
