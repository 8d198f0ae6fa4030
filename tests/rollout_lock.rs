//! One rollout at a time per fleet journal (`exec::rollout::run`, the lock beside the fleet
//! journal): while `partop fleet apply` rolls a set out on rehearsal nodes, a second apply of
//! the same set from the same operator's journal, fresh or `--resume`, is refused before it
//! does anything, naming who runs and where its progress is; the first rollout finishes alone
//! (one start, one done in the fleet journal, every node in the target layout). The same
//! `run` takes the lock for the cluster engine, so `fleet --kubernetes apply` and the live
//! cluster view are held by it too.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::{partop, quick, run};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const ONE: &str = "\n[[workload]]\nname = \"a\"\nkind = \"batch\"\ngpu = 0\npartition = 0\nvram_gb = 10\nbusy = 40\ncomm = \"python3\"\n";

fn sim_node(state: &Path, name: &str) {
    // A slow reload, so the first rollout is still running when the second comes.
    let scenario =
        quick(name, "7.0.2", "SPX", "NPS1", ONE).replace("reload_secs = 0.3", "reload_secs = 3");
    common::sim_start(state, &scenario);
}

fn compute(state: &Path) -> String {
    let o = run(
        partop()
            .arg("--sim-state")
            .arg(state)
            .args(["snapshot", "--json"]),
        "",
    );
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    v["gpus"][0]["compute_partition"]
        .as_str()
        .unwrap_or("?")
        .to_string()
}

#[test]
fn a_second_rollout_from_the_same_fleet_journal_is_refused_while_one_runs() {
    let dir = tempfile::tempdir().unwrap();
    let states: Vec<PathBuf> = ["n1", "n2"]
        .iter()
        .map(|n| dir.path().join(n).join("node.json"))
        .collect();
    for (s, n) in states.iter().zip(["n1", "n2"]) {
        sim_node(s, n);
    }
    let journal = dir.path().join("operator/journal.jsonl");
    let fj = journal.with_file_name("fleet-journal.jsonl");
    let set = dir.path().join("set.json");
    let fleet = || {
        let mut c = partop();
        c.env("PARTOP_SIM_AMD_SMI_COST", "off")
            .arg("--journal")
            .arg(&journal)
            .arg("fleet");
        for s in &states {
            c.arg(format!("rehearse:{}", s.display()));
        }
        c
    };
    let o = run(
        fleet()
            // A memory mode change reloads the driver (3 s a node here): the first rollout
            // holds the lock for seconds, long past the second apply's start even under load.
            .args(["plan", "--compute", "DPX", "--memory", "NPS2", "--out"])
            .arg(&set),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);

    let first = fleet()
        .arg("apply")
        .arg(&set)
        .arg("--yes")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&fj)
        .unwrap_or_default()
        .contains("fleet.node.start")
    {
        assert!(Instant::now() < end, "the first rollout never began a node");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The same set again while it runs, fresh and as a resume: each refused, nothing journaled.
    let before = std::fs::read_to_string(&fj).unwrap();
    let mut cases = 0;
    for extra in [&[][..], &["--resume"][..]] {
        let o = run(fleet().arg("apply").arg(&set).arg("--yes").args(extra), "");
        let said = format!("{}{}", o.stdout, o.stderr);
        assert_ne!(o.code, 0, "{extra:?}: {said}");
        assert!(
            said.contains("another rollout is running from this fleet journal")
                && said.contains(&format!("pid {}", first.id()))
                && said.contains(&fj.display().to_string()),
            "{extra:?}: {said}"
        );
        cases += 1;
    }
    let now = std::fs::read_to_string(&fj).unwrap();
    assert!(
        now.starts_with(&before) && now.matches("fleet.rollout.start").count() == 1,
        "a refused apply journaled something:\n{now}"
    );
    // The refusals named the first rollout's pid: they came while it held the lock.

    let o = first.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let fj_text = std::fs::read_to_string(&fj).unwrap();
    assert_eq!(fj_text.matches("fleet.rollout.start").count(), 1);
    assert_eq!(fj_text.matches("fleet.rollout.done").count(), 1);
    for s in &states {
        assert_eq!(compute(s), "DPX", "{}", s.display());
    }
    // Released when it ended: a resume of the set is let in (and finds nothing left to do),
    // not told that the set is held.
    let o = run(
        fleet().arg("apply").arg(&set).args(["--yes", "--resume"]),
        "",
    );
    let said = format!("{}{}", o.stdout, o.stderr);
    assert!(
        !said.contains("another rollout is running"),
        "the lock outlived its rollout: {said}"
    );
    eprintln!("{cases} second applies refused while the first ran");
}
