//! A rollout through the cluster interrupted anywhere resumes: against a REAL control plane on
//! loopback and `partop sim cluster` (its DCM and MIG-manager stand-ins, its kubelets finishing
//! deletions), `partop fleet --kubernetes apply SET --yes` is SIGKILLed at every boundary of
//! every step of every node (before it acts, after it acted and before its result is
//! journaled, after its result is journaled) and after each line of the rollout itself (its
//! start, each node's start and end): the cluster rehearsal's crash injection
//! (`PARTOP_SIM_CRASH_AT`, armed only on `sim cluster`'s nodes). The kill points are read from
//! a whole run's fleet journal, not listed by hand. After each kill, a fresh apply is refused
//! with the way to continue, that `--resume` command is run (with `--yes`), and both nodes
//! must end at the target (the manager's state `success`, the kubelet's allocatable),
//! uncordoned, with no taint or annotation of partop's, each planned pod evicted once, and the
//! fleet journal must say the rollout done, each node's steps begun only after every step
//! ahead of them was done (a resume that skipped a step, the cordon before an eviction, fails
//! here even when the nodes end right), the cordon, eviction, allocatable wait and uncordon
//! done once. One control plane and one simulated cluster serve
//! every case; each case starts from the cluster as planned (nodes, the DCM profile, fresh pods)
//! and plans again (a pod's UID is in its plan). No mock server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests panic on failure"
)]
#![allow(clippy::print_stderr, reason = "each test says how many cases it ran")]

mod common;
use common::control_plane::{ControlPlane, kube};
use common::sim_cluster::{Sim, start_sim};
use common::{partop, run};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use partop::domain::cluster::{AMD_PARTITION, DCM_PROFILE, DCM_STATE, MIG_CONFIG, MIG_STATE};
use partop::domain::cluster_rollout::{DCM_FILE, Step};
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One kind of rollout rehearsed: its two nodes, how they are selected and planned, and what
/// they are before and after.
struct Kind {
    name: &'static str,
    nodes: [&'static str; 2],
    selector: &'static str,
    plan: &'static [&'static str],
    /// The GPU resource the pods ask for.
    resource: &'static str,
    /// The allocatable before (the planned state a case starts from): resource -> count,
    /// `None` for one that must be absent.
    before: &'static [(&'static str, Option<i64>)],
    /// And after.
    after: &'static [(&'static str, Option<i64>)],
    /// The labels before (None: absent).
    labels_before: &'static [(&'static str, Option<&'static str>)],
    /// The labels after.
    labels_after: &'static [(&'static str, &'static str)],
}

const DCM: Kind = Kind {
    name: "DCM",
    nodes: ["sim-amd-0000", "sim-amd-0001"],
    selector: "feature.node.kubernetes.io/amd-gpu=true",
    plan: &["--layout", "cpx_nps4"],
    resource: "amd.com/gpu",
    before: &[("amd.com/gpu", Some(8))],
    after: &[("amd.com/gpu", Some(64))],
    labels_before: &[
        (AMD_PARTITION, Some("spx_nps1")),
        (DCM_PROFILE, None),
        (DCM_STATE, None),
    ],
    labels_after: &[(AMD_PARTITION, "cpx_nps4"), (DCM_STATE, "success")],
};

const MIG: Kind = Kind {
    name: "MIG manager",
    nodes: ["sim-nv-0002", "sim-nv-0003"],
    selector: "nvidia.com/mig.capable=true",
    plan: &["--mig-config", "all-1g.10gb"],
    resource: "nvidia.com/gpu",
    before: &[
        ("nvidia.com/gpu", Some(8)),
        ("nvidia.com/mig-1g.10gb", None),
    ],
    after: &[
        ("nvidia.com/gpu", None),
        ("nvidia.com/mig-1g.10gb", Some(56)),
    ],
    labels_before: &[(MIG_CONFIG, None), (MIG_STATE, None)],
    labels_after: &[(MIG_CONFIG, "all-1g.10gb"), (MIG_STATE, "success")],
};

/// The control plane, the simulated cluster on it, a client, and the count of each pod's
/// finished deletions (a pod evicted twice would be deleted twice: its name comes back only
/// when a case makes it again).
struct Cluster {
    // Dropped in this order: the watcher and the simulator before the control plane they use.
    rt: tokio::runtime::Runtime,
    sim: Sim,
    cp: ControlPlane,
    c: kube::Client,
    dir: tempfile::TempDir,
    /// DCM's ConfigMap as the simulator made it (each case starts from it).
    dcm: BTreeMap<String, String>,
    gone: Arc<Mutex<BTreeMap<String, u32>>>,
}

async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not within 30 s: {what}");
}

impl Cluster {
    fn start() -> Self {
        let cp = ControlPlane::start();
        let dir = tempfile::tempdir().unwrap();
        let sim = start_sim(
            &cp,
            &dir.path().join("sim"),
            &["--nodes", "4", "--mig-nodes", "2"],
        );
        // The serviceaccount controller is not among those the test control plane runs.
        kube(
            &cp,
            &["create", "serviceaccount", "default", "-n", "default"],
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let gone: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
        let (c, dcm) = rt.block_on(async {
            let c = partop::collect::cluster::client(&partop::collect::cluster::Target {
                kubeconfig: Some(cp.admin()),
                ..Default::default()
            })
            .await
            .unwrap();
            let (ns, name, _) = DCM_FILE;
            let dcm = Api::<ConfigMap>::namespaced(c.clone(), ns)
                .get(name)
                .await
                .unwrap()
                .data
                .unwrap_or_default();
            tokio::spawn(count_deletions(c.clone(), Arc::clone(&gone)));
            (c, dcm)
        });
        Self {
            cp,
            sim,
            rt,
            c,
            dir,
            dcm,
            gone,
        }
    }

    /// The cluster as `kind`'s plan finds it: its nodes unlabelled by the manager, in their
    /// old layout, schedulable, DCM's ConfigMap as it was, and one fresh pod on each node's
    /// GPUs (running). Returns the set planned now, in `dir`.
    fn arm(&self, kind: &Kind, dir: &Path) -> PathBuf {
        self.rt.block_on(async {
            let pods = Api::<Pod>::namespaced(self.c.clone(), "default");
            for (i, _) in kind.nodes.iter().enumerate() {
                let name = pod_name(kind, i);
                if pods.get_opt(&name).await.unwrap().is_some() {
                    let _ = pods.delete(&name, &Default::default()).await;
                    until("a pod left by a failed case is gone", || async {
                        pods.get_opt(&name).await.unwrap().is_none()
                    })
                    .await;
                }
            }
            self.gone.lock().unwrap().clear();
            let nodes = Api::<Node>::all(self.c.clone());
            for n in kind.nodes {
                let labels: serde_json::Map<String, serde_json::Value> = kind
                    .labels_before
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), serde_json::json!(v)))
                    .collect();
                let p = serde_json::json!({
                    "metadata": {"labels": labels,
                                 "annotations": {partop::exec::k8s::CORDONED_BY_PARTOP: null}},
                    "spec": {"unschedulable": false, "taints": null},
                });
                nodes
                    .patch(n, &PatchParams::default(), &Patch::Merge(&p))
                    .await
                    .unwrap();
                let res: serde_json::Map<String, serde_json::Value> = kind
                    .before
                    .iter()
                    .map(|(k, v)| {
                        (
                            (*k).to_string(),
                            serde_json::json!(v.map(|v| v.to_string())),
                        )
                    })
                    .collect();
                let p = serde_json::json!({"status": {"capacity": res, "allocatable": res}});
                nodes
                    .patch_status(n, &PatchParams::default(), &Patch::Merge(&p))
                    .await
                    .unwrap();
            }
            let (ns, name, _) = DCM_FILE;
            let cms = Api::<ConfigMap>::namespaced(self.c.clone(), ns);
            // A merge patch keeps keys the rollout added: the profile is put back by value.
            let mut cm = cms.get(name).await.unwrap();
            cm.data = Some(self.dcm.clone());
            cms.replace(name, &PostParams::default(), &cm)
                .await
                .unwrap();
            for (i, n) in kind.nodes.iter().enumerate() {
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": pod_name(kind, i), "namespace": "default",
                                 "labels": {"app": "trainer"}},
                    "spec": {"nodeName": n, "terminationGracePeriodSeconds": 5,
                             "containers": [{"name": "c", "image": "partop/sim",
                                "resources": {"limits": {kind.resource: "1"}}}]},
                }))
                .unwrap();
                pods.create(&PostParams::default(), &pod).await.unwrap();
            }
            for i in 0..kind.nodes.len() {
                let name = pod_name(kind, i);
                until("the pod runs", || async {
                    pods.get_opt(&name)
                        .await
                        .unwrap()
                        .and_then(|p| p.status)
                        .and_then(|s| s.phase)
                        .is_some_and(|ph| ph == "Running")
                })
                .await;
            }
        });
        let set = dir.join("set.json");
        let mut c = self.fleet(dir);
        c.args(["-l", kind.selector, "plan"])
            .args(kind.plan)
            .arg("--out")
            .arg(&set);
        let o = run(&mut c, "");
        assert_eq!(o.code, 0, "plan: {o:?}");
        for i in 0..kind.nodes.len() {
            assert!(
                o.stdout
                    .contains(&format!("evict default/{}", pod_name(kind, i))),
                "the plan evicts the pod: {}",
                o.stdout
            );
        }
        set
    }

    /// `partop fleet --kubernetes` with the case's journal (in `dir`) and the cluster in the
    /// environment, as the printed resume command finds them: it names the set's file only,
    /// never the `--kubeconfig`, `--context` or `--journal` the rollout was started with
    /// (`rollout::Set::resume_command`), so here they come from the environment.
    fn fleet(&self, dir: &Path) -> std::process::Command {
        let mut c = partop();
        self.env(&mut c, dir);
        c.args(["fleet", "--kubernetes"]);
        c
    }

    fn env(&self, c: &mut std::process::Command, dir: &Path) {
        c.env("KUBECONFIG", self.cp.admin())
            .env("XDG_STATE_HOME", dir)
            .env("XDG_CONFIG_HOME", dir)
            .env("PARTOP_SIM_AMD_SMI_COST", "off")
            .env_remove(partop::exec::apply::CRASH_ENV);
    }

    /// What is wrong with `kind`'s nodes after a resume that finished: not at the target, left
    /// cordoned, tainted or annotated by partop, a pod not evicted exactly once.
    fn left_wrong(&self, kind: &Kind) -> Vec<String> {
        let mut wrong = Vec::new();
        for (i, n) in kind.nodes.iter().enumerate() {
            let node: Node = self.rt.block_on(Api::all(self.c.clone()).get(n)).unwrap();
            let labels = node.metadata.labels.clone().unwrap_or_default();
            for (k, v) in kind.labels_after {
                if labels.get(*k).map(String::as_str) != Some(*v) {
                    wrong.push(format!("{n}: {k}={:?}, not {v}", labels.get(*k)));
                }
            }
            let alloc = node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.clone())
                .unwrap_or_default();
            for (r, want) in kind.after {
                let has = alloc.get(*r).and_then(|q| q.0.parse::<i64>().ok());
                if has != *want {
                    wrong.push(format!("{n}: allocatable {r}={has:?}, not {want:?}"));
                }
            }
            let spec = node.spec.clone().unwrap_or_default();
            if spec.unschedulable == Some(true) {
                wrong.push(format!("{n}: left cordoned"));
            }
            if let Some(t) = spec.taints.filter(|t| !t.is_empty()) {
                wrong.push(format!(
                    "{n}: tainted {:?}",
                    t.iter().map(|t| &t.key).collect::<Vec<_>>()
                ));
            }
            if node
                .metadata
                .annotations
                .unwrap_or_default()
                .contains_key(partop::exec::k8s::CORDONED_BY_PARTOP)
            {
                wrong.push(format!("{n}: partop's cordon annotation left"));
            }
            let pod = format!("default/{}", pod_name(kind, i));
            let gone = self.gone.lock().unwrap().get(&pod).copied().unwrap_or(0);
            if gone != 1 {
                wrong.push(format!("{pod} deleted {gone} times, not once"));
            }
        }
        wrong
    }
}

fn pod_name(kind: &Kind, i: usize) -> String {
    format!(
        "{}-{i}",
        kind.name.split(' ').next().unwrap().to_lowercase()
    )
}

/// Counts each pod's finished deletion (`namespace/name`), watching every pod.
async fn count_deletions(c: kube::Client, gone: Arc<Mutex<BTreeMap<String, u32>>>) {
    use futures_util::StreamExt as _;
    use kube::runtime::watcher;
    let api: Api<Pod> = Api::all(c);
    let mut s = std::pin::pin!(watcher(api, watcher::Config::default()));
    while let Some(ev) = s.next().await {
        if let Ok(watcher::Event::Delete(p)) = ev {
            let id = format!(
                "{}/{}",
                p.metadata.namespace.unwrap_or_default(),
                p.metadata.name.unwrap_or_default()
            );
            *gone.lock().unwrap().entry(id).or_default() += 1;
        }
    }
}

/// The fleet journal's lines of the case in `dir`.
fn fleet_journal(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("partop").join("fleet-journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The kill points of a whole run, from its fleet journal's lines: after the rollout's start,
/// each node's start and end; each step of each node begun (before it acts), acted (before its
/// result is journaled) and journaled done. Not after the rollout's last line: the rollout is
/// done there, nothing is left to resume.
fn kill_points(lines: &[serde_json::Value]) -> Vec<String> {
    let mut points = Vec::new();
    for l in lines {
        let action = l["action"].as_str().unwrap_or("");
        let what = action.strip_prefix("fleet.").unwrap_or(action);
        let node = l["targets"]["node"].as_str();
        if action == "fleet.node.step" {
            let step = l["targets"]["step"].as_str().unwrap_or("");
            let node = node.unwrap_or("");
            if l["outcome"]["ok"] == true {
                points.push(format!("acted:{node}:{step}"));
                points.push(format!("end:{node}:{step}"));
            } else {
                points.push(format!("begin:{node}:{step}"));
            }
        } else if action != "fleet.rollout.done" {
            points.push(match node {
                Some(n) => format!("end:{n}:{what}"),
                None => format!("end:{what}"),
            });
        }
    }
    points
}

/// What is wrong with node `n`'s steps in the fleet journal of the killed run and its resume:
/// a step begun before every step ahead of it was journaled done (a step skipped, a node
/// evicted before its cordon), a step never done, one not the manager's done more than once
/// (the cordon, the eviction, the waits for the kubelet and the uncordon are never done
/// again; the label and its wait are, when the manager is asked again), the node journaled
/// done before its last step.
fn steps_wrong(lines: &[serde_json::Value], n: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut done: BTreeMap<&str, usize> = BTreeMap::new();
    let mine = lines.iter().filter(|l| l["targets"]["node"] == n);
    for l in mine {
        if l["action"] == "fleet.node.done" && done.len() < Step::ALL.len() {
            wrong.push(format!("{n} journaled done after only {:?}", done.keys()));
        }
        if l["action"] != "fleet.node.step" {
            continue;
        }
        let key = l["targets"]["step"].as_str().unwrap_or("");
        if l["outcome"]["ok"] == true {
            *done
                .entry(Step::of_key(key).map_or("?", Step::key))
                .or_default() += 1;
            continue;
        }
        let ahead: Vec<&str> = Step::ALL
            .iter()
            .take_while(|s| s.key() != key)
            .map(|s| s.key())
            .filter(|k| !done.contains_key(k))
            .collect();
        if !ahead.is_empty() {
            wrong.push(format!("{n}: {key} begun before {ahead:?} were done"));
        }
    }
    for s in Step::ALL {
        let times = done.get(s.key()).copied().unwrap_or(0);
        let again = matches!(s, Step::Label | Step::WaitState);
        if times == 0 || (times > 1 && !again) {
            wrong.push(format!("{n}: {} journaled done {times} times", s.key()));
        }
    }
    wrong
}

/// The command a refused fresh apply prints to continue the rollout: the rest of the line after
/// `Continue it: `, pasted whole (what it left cordoned said before it, never after: a line
/// going on after the command was a shell syntax error, found by the kill after a cordon).
fn printed_resume(said: &str) -> Option<String> {
    let at = said.find("Continue it: ")?;
    let rest = &said[at + "Continue it: ".len()..];
    Some(rest.lines().next()?.trim().to_string())
}

/// One kill point of `kind`'s rollout: killed at `at`, then the printed resume finishes.
fn one(k: &Cluster, kind: &Kind, case: usize, at: &str) -> Result<(), String> {
    let dir = k.dir.path().join(format!("case-{case}"));
    std::fs::create_dir_all(&dir).unwrap();
    let set = k.arm(kind, &dir);
    let status = k
        .fleet(&dir)
        .arg("apply")
        .arg(&set)
        .arg("--yes")
        .env(partop::exec::apply::CRASH_ENV, at)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    if status.signal() != Some(9) {
        return Err(format!("the apply was not killed ({status})"));
    }
    let fresh = run(k.fleet(&dir).arg("apply").arg(&set).arg("--yes"), "");
    let said = format!("{}{}", fresh.stdout, fresh.stderr);
    let Some(cmd) = printed_resume(&said) else {
        return Err(format!(
            "a fresh apply after the kill is not refused with the way to continue (exit {}): {said}",
            fresh.code
        ));
    };
    let bin = Path::new(env!("CARGO_BIN_EXE_partop")).parent().unwrap();
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c").arg(format!("{cmd} --yes")).env(
        "PATH",
        format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    );
    k.env(&mut sh, &dir);
    let r = run(&mut sh, "");
    if r.code != 0 {
        return Err(format!(
            "`{cmd} --yes` exited {}: {}{}",
            r.code, r.stdout, r.stderr
        ));
    }
    let mut wrong = k.left_wrong(kind);
    let lines = fleet_journal(&dir);
    if !lines.iter().any(|l| l["action"] == "fleet.rollout.done") {
        wrong.push("the fleet journal does not say the rollout done".into());
    }
    for n in kind.nodes {
        wrong.extend(steps_wrong(&lines, n));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}\nthe resume said: {}",
            wrong.join("; "),
            r.stdout
        ))
    }
}

/// Every kill point of `kind`'s rollout of two nodes (one at a time), from a whole run.
fn every_kill_point(k: &Cluster, kind: &Kind) {
    // The whole run, uninterrupted: what it journals is what is enumerated.
    let dir = k.dir.path().join(format!("{}-whole", pod_name(kind, 0)));
    std::fs::create_dir_all(&dir).unwrap();
    let set = k.arm(kind, &dir);
    let t = Instant::now();
    let o = run(k.fleet(&dir).arg("apply").arg(&set).arg("--yes"), "");
    let whole = t.elapsed().as_secs_f64();
    assert_eq!(o.code, 0, "{o:?}\nsim: {}", k.sim.said.lock().unwrap());
    let wrong = k.left_wrong(kind);
    assert!(wrong.is_empty(), "the whole run: {wrong:?}");
    let points = kill_points(&fleet_journal(&dir));
    // The full enumeration: the rollout's start; per node its start, 3 points of each of the 6
    // steps, its end.
    let full = 1 + kind.nodes.len() * (2 + 3 * Step::ALL.len());
    assert_eq!(points.len(), full, "{points:?}");
    for n in kind.nodes {
        for s in Step::ALL {
            for w in ["begin", "acted", "end"] {
                let p = format!("{w}:{n}:{}", s.key());
                assert!(points.contains(&p), "{p} in {points:?}");
            }
        }
    }
    let t0 = Instant::now();
    let mut failed = Vec::new();
    let mut ran = 0;
    for (i, at) in points.iter().enumerate() {
        let t = Instant::now();
        let r = one(k, kind, i, at);
        ran += 1;
        eprintln!(
            "{} {at}: {} in {:.1} s",
            kind.name,
            r.as_ref().map_or("FAILED", |()| "resumed"),
            t.elapsed().as_secs_f64()
        );
        if let Err(e) = r {
            failed.push(format!("killed at {at}: {e}"));
        }
    }
    eprintln!(
        "{}: {ran} kill points of {full} (a whole run {whole:.1} s) in {:.0} s",
        kind.name,
        t0.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert_eq!(ran, full);
}

/// The injection is armed only when every node of the set is a rehearsal node: one node
/// reporting a real kubelet's version (what a real kubelet writes into its Node's status,
/// whatever label it carries) and the point named on the other node never fires; the rollout
/// finishes.
fn unarmed_on_a_real_kubelet(k: &Cluster, kind: &Kind) {
    let dir = k.dir.path().join("unarmed");
    std::fs::create_dir_all(&dir).unwrap();
    let set = k.arm(kind, &dir);
    let forged = serde_json::json!({"status": {"nodeInfo": {"kubeletVersion": "v1.37.2"}}});
    k.rt.block_on(Api::<Node>::all(k.c.clone()).patch_status(
        kind.nodes[0],
        &PatchParams::default(),
        &Patch::Merge(&forged),
    ))
    .unwrap();
    let at = format!("begin:{}:cordon", kind.nodes[1]);
    let o = run(
        k.fleet(&dir)
            .arg("apply")
            .arg(&set)
            .arg("--yes")
            .env(partop::exec::apply::CRASH_ENV, &at),
        "",
    );
    assert_eq!(o.code, 0, "{at} must not fire off a rehearsal: {o:?}");
    let wrong = k.left_wrong(kind);
    assert!(wrong.is_empty(), "{wrong:?}");
}

#[test]
fn a_cluster_rollout_killed_at_every_boundary_resumes_to_the_target() {
    let k = Cluster::start();
    every_kill_point(&k, &DCM);
    every_kill_point(&k, &MIG);
    unarmed_on_a_real_kubelet(&k, &DCM);
}
