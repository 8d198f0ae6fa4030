//! A repartition on a Kubernetes node interrupted anywhere resumes (issue 25, part B): against
//! a REAL control plane on loopback (etcd, kube-apiserver, kube-controller-manager) and the
//! kubelet twin, the apply is SIGKILLed (the simulated node's crash injection, as
//! `tests/resume.rs` does) at every boundary of every step the plan has (cordon, evict, taint,
//! the AMD steps, wait_allocatable, untaint, uncordon: enumerated from the plan, not picked):
//! before it acts, after it acted and before its result is journaled, and after its result.
//! Then the `--resume` command `partop journal` prints is pasted into a shell, and the node must
//! end in the target layout, uncordoned, untainted, its pod evicted once, the run closed done.
//! One control plane serves every case (the twin's Node is this host's name, so the cases run
//! one after another, each on a fresh simulated node). No mock server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests panic on failure"
)]
#![allow(clippy::print_stderr, reason = "each test says how many cases it ran")]

mod common;
use common::env::SimEnv;
use common::k8s_api::{budget, until};
use common::k8s_node::{K8sNode, apply, host_of, plan_moving_trainer, trainer_scenario};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use partop::domain::k8s_ops;
use partop::domain::plan::Plan;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

/// Makes `e` the node's simulated node, its trainer a running pod again; returns the plan to
/// DPX once the kubelet shows the pod on its GPU.
fn arm(k: &K8sNode, e: &SimEnv) -> (PathBuf, Plan) {
    assert_eq!(host_of(e), k.host);
    k.rt.block_on(async {
        // A case that failed may have left its pod: it goes first, so the next case starts
        // from the same node (the failure is said by that case).
        let api = Api::<Pod>::namespaced(k.c.clone(), "sim");
        if api.get_opt("trainer").await.unwrap().is_some() {
            let _ = api.delete("trainer", &Default::default()).await;
            until("a left pod is gone", || async {
                api.get_opt("trainer").await.unwrap().is_none()
            })
            .await;
        }
    });
    k.follow(e);
    k.run_trainer();
    plan_moving_trainer(e)
}

/// What is wrong with the node after a finished run: cordoned, tainted, partop's annotation
/// left, the pod evicted other than once, the trainer back.
fn left_wrong(k: &K8sNode) -> Vec<String> {
    let mut wrong = Vec::new();
    let node = k.node();
    let spec = node.spec.clone().unwrap_or_default();
    if spec.unschedulable == Some(true) {
        wrong.push("left cordoned".into());
    }
    if spec
        .taints
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == k8s_ops::WINDOW_TAINT_KEY)
    {
        wrong.push("left tainted".into());
    }
    if node
        .metadata
        .annotations
        .unwrap_or_default()
        .contains_key(partop::exec::k8s::CORDONED_BY_PARTOP)
    {
        wrong.push("partop's cordon annotation left".into());
    }
    let evicted = k.deletions("sim/trainer");
    if evicted != 1 {
        wrong.push(format!(
            "the pod's deletion finished {evicted} times, not once"
        ));
    }
    wrong
}

/// One kill point: the apply killed at `at`, then resumed with the printed command.
fn one(k: &K8sNode, at: &str) -> Result<(), String> {
    let e = SimEnv::new(&trainer_scenario("k8s-resume"));
    let (path, p) = arm(k, &e);
    let status = apply(&e, &k.cp.admin(), &path, &[])
        .env(partop::exec::apply::CRASH_ENV, at)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    if std::os::unix::process::ExitStatusExt::signal(&status) != Some(9) {
        return Err(format!("the apply was not killed ({status})"));
    }
    let cmd = e.printed_resume();
    let o = common::run(
        e.pasted(&cmd).env("KUBECONFIG", k.cp.admin()),
        // The confirmation typed as an operator would (a simulated node asks for `yes`).
        "yes\n",
    );
    if o.code != 0 {
        return Err(format!(
            "`{cmd}` exited {}:\n{}{}",
            o.code, o.stdout, o.stderr
        ));
    }
    if e.modes().0 != "DPX" {
        return Err(format!("ends in {:?}, not DPX", e.modes()));
    }
    let mut wrong = left_wrong(k);
    let runs = partop::exec::journal::runs(&e.journal());
    match runs.iter().rev().find(|r| r.fingerprint == p.fingerprint) {
        Some(r) if r.closed == Some(partop::domain::journal::Close::Done) => {}
        Some(r) => wrong.push(format!("the run is {:?}, not done", r.closed)),
        None => wrong.push("no run in the journal".into()),
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

#[test]
fn a_kubernetes_repartition_killed_at_every_step_boundary_resumes_uncordoned_and_untainted() {
    let first = SimEnv::new(&trainer_scenario("k8s-resume"));
    let k = K8sNode::start(&first, false);
    let (_, p) = arm(&k, &first);
    // The pod of this first arming is evicted by the first case's node, not this one's.
    k.rt.block_on(async {
        Api::<Pod>::namespaced(k.c.clone(), "sim")
            .delete("trainer", &Default::default())
            .await
            .unwrap();
        until("the first pod is gone", || async {
            Api::<Pod>::namespaced(k.c.clone(), "sim")
                .get_opt("trainer")
                .await
                .unwrap()
                .is_none()
        })
        .await;
    });
    drop(first);
    let keys: Vec<String> = p.steps.iter().map(|s| s.key.to_string()).collect();
    for cluster in [
        "cordon",
        "evict",
        "taint",
        "wait_allocatable",
        "untaint",
        "uncordon",
    ] {
        assert!(keys.iter().any(|x| x == cluster), "{cluster} in {keys:?}");
    }
    // Every boundary of every step, from the plan: before it acts, after it acted (its
    // result not journaled), after its result (not after the last: the run is done).
    let mut points = Vec::new();
    for n in 1..=p.steps.len() {
        for when in ["begin", "acted", "end"] {
            if !(n == p.steps.len() && when == "end") {
                points.push(format!("{when}:{n}"));
            }
        }
    }
    let t0 = Instant::now();
    let mut failed = Vec::new();
    for at in &points {
        let n: usize = at.split(':').nth(1).unwrap().parse().unwrap();
        let t = Instant::now();
        let r = one(&k, at);
        eprintln!(
            "{at} ({}): {:?} in {:.1} s",
            keys[n - 1],
            r,
            t.elapsed().as_secs_f64()
        );
        if let Err(e) = r {
            failed.push(format!("killed at {at} ({}): {e}", keys[n - 1]));
        }
    }
    eprintln!(
        "{} kill points over the {} steps ({}) in {:.0} s",
        points.len(),
        keys.len(),
        keys.join(", "),
        t0.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Whether the node is marked unschedulable now.
fn cordoned(k: &K8sNode) -> bool {
    k.node().spec.and_then(|s| s.unschedulable) == Some(true)
}

/// Two operators on one Kubernetes node: a second `partop apply` while the first waits at a
/// cluster step (its eviction held back by a PodDisruptionBudget) is refused by the node's lock,
/// naming the holder, and changes nothing; the first finishes once the budget allows. A cordon
/// someone else made is never undone by partop's uncordon, whether the run finishes at once or
/// is killed after its cordon step and resumed. 3 cases.
#[test]
fn a_second_operator_is_refused_by_the_lock_and_anothers_cordon_is_never_undone() {
    let e = SimEnv::new(&trainer_scenario("k8s-resume"));
    let k = K8sNode::start(&e, false);
    let (path, _) = arm(&k, &e);
    let pdbs = k.rt.block_on(budget(&k.c, "sim", "trainer", 1, 1));
    let first = apply(&e, &k.cp.admin(), &path, &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until("the first apply waits at its evict step", || {
        e.journal().iter().any(|x| {
            x.action == "repartition.step"
                && x.targets["key"] == "evict"
                && x.outcome["state"] == "begin"
        })
    });
    // 1. The second operator: refused by the lock, naming who holds it; nothing of its own
    //    journaled, the node as the first left it.
    let before = e.journal().len();
    let o = common::run(&mut apply(&e, &k.cp.admin(), &path, &[]), "");
    let said = format!("{}{}", o.stdout, o.stderr);
    assert_ne!(o.code, 0, "{said}");
    assert!(
        said.contains("another change is running on this node")
            && said.contains(&format!("pid {}", first.id())),
        "the holder is named:\n{said}"
    );
    assert_eq!(
        e.journal().len(),
        before,
        "the refused apply journaled nothing"
    );
    assert!(cordoned(&k), "the first's cordon stands");
    // The budget allows: the first goes on and finishes, and uncordons what it cordoned.
    k.rt.block_on(pdbs.delete("trainer-pdb", &Default::default()))
        .unwrap();
    let out = first.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(left_wrong(&k).is_empty(), "{:?}", left_wrong(&k));
    drop(e);

    // 2. and 3. Someone else cordoned the node: a finished run and a run killed after its
    //    cordon step, then resumed, both leave it cordoned, and say so.
    let (ok, text) = k.cp.kubectl(&k.cp.admin(), &["cordon", &k.host]);
    assert!(ok, "{text}");
    for crash in [None, Some("end:1")] {
        let e = SimEnv::new(&trainer_scenario("k8s-resume"));
        let (path, _) = arm(&k, &e);
        let mut c = apply(&e, &k.cp.admin(), &path, &[]);
        if let Some(at) = crash {
            c.env(partop::exec::apply::CRASH_ENV, at);
        }
        let o = common::run(&mut c, "");
        let mut said = format!("{}{}", o.stdout, o.stderr);
        if crash.is_some() {
            assert_ne!(o.code, 0, "killed: {said}");
            let r = common::run(&mut apply(&e, &k.cp.admin(), &path, &["--resume"]), "");
            assert_eq!(r.code, 0, "resumed: {}{}", r.stdout, r.stderr);
            said.push_str(&r.stdout);
            said.push_str(&r.stderr);
        } else {
            assert_eq!(o.code, 0, "{said}");
        }
        assert_eq!(e.modes().0, "DPX");
        assert!(
            cordoned(&k),
            "another's cordon is never undone ({crash:?}):\n{said}"
        );
        assert!(
            said.contains("was cordoned before partop: left cordoned"),
            "the uncordon says why it left the node cordoned ({crash:?}):\n{said}"
        );
    }
    eprintln!("3 cases: the lock's refusal, another's cordon kept on a finished and a resumed run");
}
