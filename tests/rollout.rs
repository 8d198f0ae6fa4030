//! A fleet rollout's protocol before any node is touched (`exec::rollout`): a plan set is
//! verified, never trusted (every tampering of every node's plan, every renaming, every
//! exchange of two nodes' plans is refused, naming what), and the resume decision is the fleet
//! journal's (a fresh rollout refused while one of the set is unfinished, a resume continuing
//! the newest one).
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::nodes::recorded;
use partop::domain::journal::{RolloutEvent, RolloutNode};
use partop::domain::plan::{Draft, Plan, Reload, plan};
use partop::domain::{ComputeMode, MemoryMode};
use partop::exec::rollout::{NodePlan, PlanSet, Set as _, start, verify};
use std::path::Path;

fn a_plan(compute: ComputeMode, memory: MemoryMode) -> Plan {
    plan(
        &recorded("spx-nps1-one-model"),
        &Draft {
            gpus: vec!["0000:05:00".into()],
            compute: Some(compute),
            memory: Some(memory),
        },
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap()
}

/// A set of `n` nodes as `partop fleet plan` saves it.
fn set_of(n: usize) -> PlanSet {
    let plans = [
        a_plan(ComputeMode::Dpx, MemoryMode::Nps2),
        a_plan(ComputeMode::Cpx, MemoryMode::Nps1),
    ];
    let mut s = PlanSet {
        fingerprint: String::new(),
        created_at: "2026-01-01T00:00:00Z".into(),
        nodes: (0..n)
            .map(|i| NodePlan {
                node: format!("node{i}"),
                dest: format!("root@10.0.0.{i}"),
                partop: "partop".into(),
                plan: plans[i % 2].clone(),
            })
            .collect(),
    };
    s.fingerprint = s.computed();
    s
}

/// An edit of a plan after planning, by name.
type Tampering = (&'static str, fn(&mut Plan));

/// Every way one node's plan can be edited after planning, each a field of its content.
fn tamperings() -> Vec<Tampering> {
    vec![
        ("downtime", |p| p.downtime_secs += 1),
        ("a step's argv", |p| {
            p.steps[0].commands.push("--force".into());
        }),
        ("a step dropped", |p| {
            p.steps.pop();
        }),
        ("a stop dropped", |p| {
            p.stops.clear();
            p.warnings.push("edited".into());
        }),
        ("the host", |p| p.host.push('x')),
        ("the grace", |p| p.grace_secs += 1),
    ]
}

#[test]
fn a_plan_set_is_verified_never_trusted() {
    let file = Path::new("/tmp/set.json");
    let mut cases = 0;
    for n in 1..=4 {
        let s = set_of(n);
        verify(&s, file).unwrap();
        cases += 1;
        // Every node's plan, every tampering: refused, naming the node.
        for i in 0..n {
            for (what, edit) in tamperings() {
                let mut t = s.clone();
                edit(&mut t.nodes[i].plan);
                let e = verify(&t, file).unwrap_err().to_string();
                assert!(
                    e.contains(&format!("the plan for node{i} was changed")),
                    "{what} of node{i} in a set of {n}: {e}"
                );
                cases += 1;
            }
            // A node renamed or sent elsewhere under the same plans: the set's fingerprint.
            let mut t = s.clone();
            t.nodes[i].node = format!("other{i}");
            let e = verify(&t, file).unwrap_err().to_string();
            assert!(e.contains("the set's nodes or plans changed"), "{e}");
            cases += 1;
        }
        // Every exchange of two nodes' (different) plans: each plan intact, the pairing not.
        for i in 0..n {
            for j in i + 1..n {
                if s.nodes[i].plan == s.nodes[j].plan {
                    continue;
                }
                let mut t = s.clone();
                let p = t.nodes[i].plan.clone();
                t.nodes[i].plan = t.nodes[j].plan.clone();
                t.nodes[j].plan = p;
                let e = verify(&t, file).unwrap_err().to_string();
                assert!(
                    e.contains("the set's nodes or plans changed"),
                    "plans of {i} and {j} exchanged in a set of {n}: {e}"
                );
                cases += 1;
            }
        }
    }
    let mut empty = set_of(1);
    empty.nodes.clear();
    empty.fingerprint = empty.computed();
    assert!(
        verify(&empty, file)
            .unwrap_err()
            .to_string()
            .contains("names no node")
    );
    cases += 1;
    assert!(cases > 60, "{cases} cases ran");
    eprintln!("{cases} plan sets verified");
}

fn journal_line(fj: &Path, id: &str, e: &RolloutEvent) {
    partop::exec::runlog::rollout(fj, id, e).unwrap();
}

#[test]
fn the_resume_decision_is_the_fleet_journals() {
    let dir = tempfile::tempdir().unwrap();
    let fj = dir.path().join("fleet-journal.jsonl");
    let file = Path::new("/tmp/set.json");
    let s = set_of(3);
    // Nothing journaled: a fresh rollout starts; a resume has nothing to continue.
    let fresh = start(&fj, &s, &PlanSet::resume_command(file), false).unwrap();
    assert!(!fresh.resumed && fresh.done.is_empty());
    assert!(
        start(&fj, &s, &PlanSet::resume_command(file), true)
            .unwrap_err()
            .to_string()
            .contains("no rollout of set")
    );
    // A rollout that did node0, failed node1 and never reached node2.
    let id = "r1";
    let node = |i: usize| RolloutNode {
        node: s.nodes[i].node.clone(),
        dest: s.nodes[i].dest.clone(),
        plan: s.nodes[i].plan.fingerprint.clone(),
    };
    journal_line(
        &fj,
        id,
        &RolloutEvent::Started {
            set: s.fingerprint.clone(),
            file: file.display().to_string(),
            nodes: (0..3).map(node).collect(),
            parallel: 1,
        },
    );
    for (i, ok) in [(0, true), (1, false)] {
        journal_line(
            &fj,
            id,
            &RolloutEvent::NodeStarted {
                node: node(i),
                resume: Some(false),
                error: None,
            },
        );
        journal_line(
            &fj,
            id,
            &if ok {
                RolloutEvent::NodeDone {
                    node: node(i).node,
                    plan: node(i).plan,
                }
            } else {
                RolloutEvent::NodeFailed {
                    node: node(i).node,
                    plan: node(i).plan,
                    error: "failed at [3/7]".into(),
                }
            },
        );
    }
    // Unfinished: a fresh rollout of the same set is refused, the way out named.
    let e = start(&fj, &s, &PlanSet::resume_command(file), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rollout r1") && e.contains("--resume"),
        "fresh over an unfinished rollout: {e}"
    );
    // Another set is not held back by it.
    assert!(start(&fj, &set_of(2), &PlanSet::resume_command(file), false).is_ok());
    // The resume continues r1: node0 skipped, node1 attempted (asked of the node).
    let r = start(&fj, &s, &PlanSet::resume_command(file), true).unwrap();
    assert_eq!(r.id, "r1");
    assert!(r.resumed);
    assert_eq!(r.done, vec!["node0".to_string()]);
    assert_eq!(r.attempted, vec!["node1".to_string()]);
    // Finished: a fresh rollout of the set may start again.
    journal_line(
        &fj,
        id,
        &RolloutEvent::Done {
            set: s.fingerprint.clone(),
        },
    );
    assert!(
        !start(&fj, &s, &PlanSet::resume_command(file), false)
            .unwrap()
            .resumed
    );
}

/// Every reordering of a set of four nodes (23 permutations besides the planned order) is
/// refused: the order decides which node goes first and which stay untouched after a failure,
/// so a set reordered after its confirmation is another set.
#[test]
fn a_reordered_plan_set_is_refused() {
    let file = Path::new("/tmp/set.json");
    let s = set_of(4);
    let mut cases = 0;
    let mut perm: Vec<usize> = (0..4).collect();
    // Heap's algorithm, iteratively: every permutation once.
    let mut c = [0usize; 4];
    let mut i = 0;
    let mut check = |p: &[usize]| {
        let mut t = s.clone();
        t.nodes = p.iter().map(|&k| s.nodes[k].clone()).collect();
        let identity = p.iter().enumerate().all(|(a, b)| a == *b);
        match verify(&t, file) {
            Ok(()) => assert!(identity, "the order {p:?} was accepted"),
            Err(e) => {
                assert!(!identity, "the planned order refused: {e}");
                assert!(e.to_string().contains("their order included"), "{p:?}: {e}");
                cases += 1;
            }
        }
    };
    check(&perm);
    while i < 4 {
        if c[i] < i {
            if i % 2 == 0 {
                perm.swap(0, i);
            } else {
                perm.swap(c[i], i);
            }
            check(&perm);
            c[i] += 1;
            i = 0;
        } else {
            c[i] = 0;
            i += 1;
        }
    }
    assert_eq!(cases, 23, "{cases} reorderings refused");
    eprintln!("{cases} reorderings of a four-node set refused");
}

/// A node's steps journaled through the cluster engine's lines (`fleet.node.step`, begun and
/// done) fold into where a resume continues: for every prefix of the six steps done, and the
/// step after it begun but not done (7 cases), the resume is given exactly the steps done of
/// that node, in order, and the cluster engine's resume point follows from them.
#[test]
fn a_resume_is_given_each_node_s_steps_done() {
    use partop::domain::cluster_rollout::Step;
    let file = Path::new("/tmp/set.json");
    let s = set_of(2);
    let mut cases = 0;
    for k in 0..=Step::ALL.len() {
        let dir = tempfile::tempdir().unwrap();
        let fj = dir.path().join("fleet-journal.jsonl");
        let node = |i: usize| RolloutNode {
            node: s.nodes[i].node.clone(),
            dest: s.nodes[i].dest.clone(),
            plan: s.nodes[i].plan.fingerprint.clone(),
        };
        journal_line(
            &fj,
            "r",
            &RolloutEvent::Started {
                set: s.fingerprint.clone(),
                file: file.display().to_string(),
                nodes: (0..2).map(node).collect(),
                parallel: 2,
            },
        );
        for i in 0..2 {
            journal_line(
                &fj,
                "r",
                &RolloutEvent::NodeStarted {
                    node: node(i),
                    resume: Some(false),
                    error: None,
                },
            );
        }
        let step = |i: usize, st: Step, done: bool| RolloutEvent::NodeStep {
            node: node(i).node,
            plan: node(i).plan,
            step: st.key().into(),
            done,
            text: done.then(|| "did it".to_string()),
        };
        // node0 got k steps done (and began the next); node1 got all six.
        for st in &Step::ALL[..k] {
            journal_line(&fj, "r", &step(0, *st, false));
            journal_line(&fj, "r", &step(0, *st, true));
            if let Some(other) = Step::ALL.get(k) {
                // node1's lines interleaved: never counted for node0.
                journal_line(&fj, "r", &step(1, *other, true));
            }
        }
        if let Some(next) = Step::ALL.get(k) {
            journal_line(&fj, "r", &step(0, *next, false));
        }
        let r = start(&fj, &s, &PlanSet::resume_command(file), true).unwrap();
        let done0: Vec<String> = r
            .steps
            .iter()
            .filter(|(n, _)| *n == "node0")
            .map(|(_, st)| st.clone())
            .collect();
        let want: Vec<String> = Step::ALL[..k].iter().map(|s| s.key().to_string()).collect();
        assert_eq!(done0, want, "{k} steps done");
        let parsed: Vec<Step> = done0.iter().filter_map(|x| Step::of_key(x)).collect();
        assert_eq!(
            Step::resume_at(&Step::ALL, &parsed),
            Step::resume_at(&Step::ALL, &Step::ALL[..k]),
            "{k}"
        );
        assert!(r.attempted.contains(&"node0".to_string()));
        cases += 1;
    }
    assert_eq!(cases, 7);
    eprintln!("{cases} step prefixes folded");
}
