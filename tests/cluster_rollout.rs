//! Rollouts through the cluster (issue 26, item 2) against a real control plane and
//! `partop sim cluster` (its DCM and MIG-manager stand-ins, its kubelets finishing deletions):
//! `partop fleet --kubernetes plan` then `apply`, as an operator runs them. Covered: a
//! three-node DCM rollout whose second node's profile fails (the set stops, the third is
//! untouched, the journal agrees, DCM's reason is named, a resume finishes without evicting
//! again); a kubeconfig without one verb (refused before anything changes, the verb named); a
//! PodDisruptionBudget that holds a node until another replica is ready elsewhere, and a node
//! deleted mid-rollout (stops, nothing else touched); a MIG-manager rollout, and two DCM nodes
//! at once (the profile written once); a cluster plan set verified, never trusted. No mock API
//! server.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::control_plane::{ControlPlane, apply_yaml, cordoned, kube, label, node};
use common::sim_cluster::start_cluster;
use common::{fleet_journal, gather, partop, run, wait_within};
use std::io::BufRead as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn pod_exists(cp: &ControlPlane, name: &str) -> bool {
    cp.kubectl(&cp.admin(), &["get", "pod", name, "-n", "default"])
        .0
}

/// `partop --journal DIR/journal.jsonl fleet --kubernetes --kubeconfig K -l SEL ARGS`.
fn fleet(kubeconfig: &Path, dir: &Path, sel: &str, args: &[&str]) -> std::process::Command {
    let mut c = partop();
    c.arg("--journal")
        .arg(dir.join("journal.jsonl"))
        .args(["fleet", "--kubernetes", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["-l", sel])
        .args(args);
    c
}

/// The fleet journal beside `DIR/journal.jsonl`: (action, node, step).
fn journal(dir: &Path) -> Vec<(String, String, String)> {
    fleet_journal::steps(&dir.join("fleet-journal.jsonl"))
}

fn namespace_default(cp: &ControlPlane) {
    // The serviceaccount controller is not among those the test control plane runs.
    kube(
        cp,
        &["create", "serviceaccount", "default", "-n", "default"],
    );
}

fn gpu_pod(name: &str, node: &str, app: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  labels:\n    app: {app}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: c\n    image: partop/sim\n    resources:\n      limits:\n        amd.com/gpu: \"1\"\n---\n"
    )
}

/// Runs a command, each line of its stdout stamped with when it came: (exit code, lines).
fn timed(cmd: &mut std::process::Command) -> (i32, Vec<(Duration, String)>) {
    let t0 = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let lines: Vec<(Duration, String)> = std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .map(|l| (t0.elapsed(), l))
        .collect();
    (child.wait().unwrap().code().unwrap_or(-1), lines)
}

/// When a node's step was said done in `lines` (`   NODE: STEP: …`).
fn step_at(lines: &[(Duration, String)], node: &str, step: &str) -> Duration {
    let head = format!("   {node}: {step}: ");
    lines
        .iter()
        .find(|(_, l)| l.starts_with(&head))
        .unwrap_or_else(|| panic!("no {head:?} in {lines:?}"))
        .0
}

/// A node's drain (cordon done to its pods evicted and gone) and relabel (from there to the
/// kubelet advertising the new count), in seconds.
fn drain_relabel(lines: &[(Duration, String)], node: &str) -> (f64, f64) {
    let c = step_at(lines, node, "cordon");
    let e = step_at(lines, node, "evict");
    let a = step_at(lines, node, "wait_allocatable");
    ((e - c).as_secs_f64(), (a - e).as_secs_f64())
}

/// A ClusterRole with every verb a DCM rollout needs but `create pods/eviction`, bound to the
/// limited user.
const ALMOST: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: almost-change
rules:
- apiGroups: [\"\"]
  resources: [nodes]
  verbs: [get, patch]
- apiGroups: [\"\"]
  resources: [pods, events]
  verbs: [get, list]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list]
- apiGroups: [\"\"]
  resources: [configmaps]
  verbs: [get, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: almost-change
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: almost-change
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: limited
";

/// The manifests' ClusterRole `partop-change`, bound to the limited user.
fn partop_change() -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/partop.yaml"),
    )
    .unwrap();
    let role = text
        .split("\n---\n")
        .find(|d| d.contains("kind: ClusterRole\n") && d.contains("name: partop-change"))
        .expect("deploy/kubernetes/partop.yaml has the ClusterRole partop-change");
    format!(
        "{role}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: change-limited\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: partop-change\nsubjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: limited\n"
    )
}

#[test]
fn a_dcm_rollout_stops_at_the_failing_node_and_a_resume_finishes() {
    // Three AMD nodes under DCM, the first a simulated GPU node (changed through its amd-smi).
    let (cp, dir, sim) = start_cluster(&["--nodes", "3", "--gpu-nodes", "1"]);
    let d = dir.path();
    namespace_default(&cp);
    let pods: String = (0..3)
        .map(|i| gpu_pod(&format!("web-{i}"), &format!("sim-amd-000{i}"), "web"))
        .collect();
    apply_yaml(&cp, d, &pods);
    wait_within("the pods run", 30, || {
        kube(&cp, &["get", "pods", "-n", "default", "-o", "json"])
            .matches("\"Running\"")
            .count()
            == 3
    });
    // The second node's profile will fail (DCM's PartitionFailure), its event carrying outside
    // words with a control sequence (escaped on every output path).
    kube(
        &cp,
        &[
            "annotate",
            "node",
            "sim-amd-0001",
            "partop.sim/fail=firmware \u{1b}[2J said no",
        ],
    );
    let sel = "partop.sim/cluster=true";
    let set = d.join("set.json");
    let p = run(
        fleet(
            &cp.admin(),
            d,
            sel,
            &["plan", "--layout", "cpx_nps4", "--out"],
        )
        .arg(&set),
        "",
    );
    assert_eq!(p.code, 0, "{p:?}");
    for want in [
        "sim-amd-0000: DCM profile partop-cpx-nps4",
        "evict default/web-1 (amd.com/gpu=1) · no PodDisruptionBudget",
        "allocatable after: amd.com/gpu=64",
        "gpu-config-profiles.partop-cpx-nps4 is created",
    ] {
        assert!(
            p.stdout.contains(want),
            "the plan says {want:?}: {}",
            p.stdout
        );
    }

    // (e) Without the right to evict: refused before anything changes, the verb named.
    apply_yaml(&cp, d, ALMOST);
    let r = run(
        fleet(&cp.limited(), d, sel, &["apply", "--yes"]).arg(&set),
        "",
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("create pods/eviction") && r.stderr.contains("nothing was changed"),
        "the refused verb is named: {}",
        r.stderr
    );
    for i in 0..3 {
        let n = node(&cp, &format!("sim-amd-000{i}"));
        assert!(!cordoned(&n) && label(&n, "dcm.amd.com/gpu-config-profile").is_empty());
    }
    assert!(journal(d).is_empty(), "nothing journaled: {:?}", journal(d));
    assert!((0..3).all(|i| pod_exists(&cp, &format!("web-{i}"))));

    // (a) The rollout, by the same user with the manifests' ClusterRole `partop-change` instead
    // (what it grants is what a rollout needs): the first node changes, the second fails with
    // DCM's reason, the third is untouched.
    kube(&cp, &["delete", "clusterrolebinding", "almost-change"]);
    apply_yaml(&cp, d, &partop_change());
    let t0 = Instant::now();
    let (code, lines) = timed(fleet(&cp.limited(), d, sel, &["apply", "--yes"]).arg(&set));
    let first = t0.elapsed();
    let r = common::Out {
        code,
        stdout: lines.iter().map(|l| format!("{}\n", l.1)).collect(),
        stderr: String::new(),
    };
    assert_eq!(r.code, 1, "{r:?}\nsim: {}", sim.said.lock().unwrap());
    assert!(
        r.stdout.contains("PartitionFailure") && r.stdout.contains("simulated failure mode"),
        "DCM's own reason: {}",
        r.stdout
    );
    assert!(
        r.stdout.contains("firmware \\x1b[2J said no") && !r.stdout.contains('\u{1b}'),
        "the event's words escaped: {}",
        r.stdout
    );
    assert!(
        r.stdout.contains("kubectl uncordon sim-amd-0001"),
        "the cordon left is said with its undo: {}",
        r.stdout
    );
    assert!(r.stdout.contains("untouched: sim-amd-0002"), "{}", r.stdout);
    // The stopped rollout's own summary names the cordon from the journal, not a live read.
    assert!(
        r.stdout.contains(
            "Left cordoned by partop (or may be): sim-amd-0001 (undo: kubectl uncordon sim-amd-0001 && kubectl annotate node sim-amd-0001 partop.amd.com/cordoned-)"
        ),
        "{}",
        r.stdout
    );
    let (drain0, relabel0) = drain_relabel(&lines, "sim-amd-0000");
    let n0 = node(&cp, "sim-amd-0000");
    assert_eq!(label(&n0, "amd.com/compute-memory-partition"), "cpx_nps4");
    assert_eq!(n0["status"]["allocatable"]["amd.com/gpu"], "64");
    assert!(!cordoned(&n0));
    let n1 = node(&cp, "sim-amd-0001");
    assert!(cordoned(&n1), "the failed node stays cordoned (said)");
    assert_eq!(
        label(&n1, "dcm.amd.com/gpu-config-profile-state"),
        "failure"
    );
    let n2 = node(&cp, "sim-amd-0002");
    assert!(!cordoned(&n2));
    assert!(label(&n2, "dcm.amd.com/gpu-config-profile").is_empty());
    assert_eq!(label(&n2, "amd.com/compute-memory-partition"), "spx_nps1");
    assert!(n2["metadata"]["annotations"]["partop.amd.com/cordoned"].is_null());
    assert!(!pod_exists(&cp, "web-0") && !pod_exists(&cp, "web-1"));
    assert!(
        pod_exists(&cp, "web-2"),
        "the third node's pod is untouched"
    );
    // The journal agrees: node 0 done, node 1 failed after its label, node 2 never started.
    let j = journal(d);
    let has = |a: &str, n: &str, s: &str| j.iter().any(|x| x.0 == a && x.1 == n && x.2 == s);
    assert!(has("fleet.node.done", "sim-amd-0000", ""), "{j:?}");
    assert!(
        has("fleet.node.step", "sim-amd-0001", "evict:done"),
        "{j:?}"
    );
    assert!(
        has("fleet.node.step", "sim-amd-0001", "wait_state"),
        "{j:?}"
    );
    assert!(has("fleet.node.failed", "sim-amd-0001", ""), "{j:?}");
    assert!(!j.iter().any(|x| x.1 == "sim-amd-0002"), "{j:?}");
    assert!(j.iter().any(|x| x.0 == "fleet.rollout.stopped"), "{j:?}");
    // A fresh apply of the unfinished set is refused with the way out.
    let again = run(
        fleet(&cp.admin(), d, sel, &["apply", "--yes"]).arg(&set),
        "",
    );
    assert!(again.stderr.contains("--resume"), "{again:?}");
    assert!(
        again
            .stderr
            .contains("it left cordoned: sim-amd-0001 (undo: kubectl uncordon sim-amd-0001 && kubectl annotate node sim-amd-0001 partop.amd.com/cordoned-)"),
        "{again:?}"
    );

    // The failure cleared, the resume finishes: node 1 continues at its label (never evicted
    // again), node 2 goes through every step.
    kube(
        &cp,
        &["annotate", "node", "sim-amd-0001", "partop.sim/fail-"],
    );
    let t1 = Instant::now();
    let (code, lines) =
        timed(fleet(&cp.limited(), d, sel, &["apply", "--yes", "--resume"]).arg(&set));
    let resumed = t1.elapsed();
    assert_eq!(code, 0, "{lines:?}\nsim: {}", sim.said.lock().unwrap());
    assert!(
        lines.iter().any(|l| l
            .1
            .contains("sim-amd-0001: resuming at the step where it stopped")),
        "{lines:?}"
    );
    let (drain2, relabel2) = drain_relabel(&lines, "sim-amd-0002");
    for i in 0..3 {
        let n = node(&cp, &format!("sim-amd-000{i}"));
        assert_eq!(
            label(&n, "amd.com/compute-memory-partition"),
            "cpx_nps4",
            "{n}"
        );
        assert_eq!(label(&n, "dcm.amd.com/gpu-config-profile-state"), "success");
        assert_eq!(n["status"]["allocatable"]["amd.com/gpu"], "64");
        assert!(!cordoned(&n), "node {i} uncordoned");
    }
    let j = journal(d);
    let evicts = j
        .iter()
        .filter(|x| x.0 == "fleet.node.step" && x.1 == "sim-amd-0001" && x.2 == "evict")
        .count();
    assert_eq!(evicts, 1, "node 1 was not evicted again: {j:?}");
    assert!(j.iter().any(|x| x.0 == "fleet.rollout.done"), "{j:?}");
    assert!(!pod_exists(&cp, "web-2"));
    eprintln!(
        "three-node DCM rollout: {:.1} s to the failure (node 0 done), {:.1} s for the resume (nodes 1 and 2); node 0 (simulated GPU node, amd-smi): drain {drain0:.2} s, relabel {relabel0:.2} s; node 2 (API only): drain {drain2:.2} s, relabel {relabel2:.2} s",
        first.as_secs_f64(),
        resumed.as_secs_f64()
    );
}

#[test]
fn a_budget_holds_a_node_until_a_replica_is_ready_and_a_deleted_node_stops_the_set() {
    let (cp, dir, sim) = start_cluster(&["--nodes", "4"]);
    let d = dir.path();
    namespace_default(&cp);
    for i in 0..3 {
        kube(
            &cp,
            &["label", "node", &format!("sim-amd-000{i}"), "rollout=yes"],
        );
    }
    // web-0 on the first node, web-x outside the set; the budget wants 2 available.
    apply_yaml(
        &cp,
        d,
        &format!(
            "{}{}apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web-pdb\n  namespace: default\nspec:\n  minAvailable: 2\n  selector:\n    matchLabels:\n      app: web\n",
            gpu_pod("web-0", "sim-amd-0000", "web"),
            gpu_pod("web-x", "sim-amd-0003", "web")
        ),
    );
    wait_within("the disruption controller counted two healthy", 30, || {
        kube(
            &cp,
            &[
                "get",
                "pdb",
                "web-pdb",
                "-n",
                "default",
                "-o",
                "jsonpath={.status.currentHealthy}",
            ],
        ) == "2"
    });
    let set = d.join("set.json");
    let p = run(
        fleet(
            &cp.admin(),
            d,
            "rollout=yes",
            &["plan", "--layout", "dpx_nps2", "--out"],
        )
        .arg(&set),
        "",
    );
    assert_eq!(p.code, 0, "{p:?}");
    assert!(
        p.stdout
            .contains("evict default/web-0 (amd.com/gpu=1) · PDB web-pdb allows 0 now"),
        "{}",
        p.stdout
    );
    assert!(!p.stdout.contains("sim-amd-0003"), "{}", p.stdout);
    let t0 = Instant::now();
    let mut c = fleet(&cp.admin(), d, "rollout=yes", &["apply", "--yes"]);
    c.arg(&set).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let said = gather(&mut child);
    // The budget holds the first node: the refusal is named while it is retried.
    wait_within("the budget's refusal is said", 60, || {
        said.lock().unwrap().contains("refused by default/web-pdb")
    });
    let held = t0.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    assert!(pod_exists(&cp, "web-0"), "held, never bypassed");
    assert!(
        child.try_wait().unwrap().is_none(),
        "still waiting: {}",
        said.lock().unwrap()
    );
    // (d) The second node is deleted meanwhile; then a replica is ready elsewhere.
    kube(&cp, &["delete", "node", "sim-amd-0001"]);
    apply_yaml(&cp, d, &gpu_pod("web-y", "sim-amd-0003", "web"));
    let st = child.wait().unwrap();
    // The process is gone; its last lines may still be on their way through the readers.
    wait_within("the apply's last line is read", 20, || {
        said.lock().unwrap().contains("\nrollout ")
    });
    let text = said.lock().unwrap().clone();
    assert_eq!(
        st.code(),
        Some(1),
        "{text}\nsim: {}",
        sim.said.lock().unwrap()
    );
    assert!(
        !pod_exists(&cp, "web-0"),
        "evicted once the budget allowed it"
    );
    let n0 = node(&cp, "sim-amd-0000");
    assert_eq!(label(&n0, "amd.com/compute-memory-partition"), "dpx_nps2");
    assert!(!cordoned(&n0));
    assert!(
        text.contains("sim-amd-0001 is gone from the cluster"),
        "the deleted node is said: {text}"
    );
    assert!(text.contains("untouched: sim-amd-0002"), "{text}");
    let n2 = node(&cp, "sim-amd-0002");
    assert!(!cordoned(&n2) && label(&n2, "dcm.amd.com/gpu-config-profile").is_empty());
    assert!(pod_exists(&cp, "web-x") && pod_exists(&cp, "web-y"));
    let j = journal(d);
    assert!(!j.iter().any(|x| x.1 == "sim-amd-0002"), "{j:?}");
    assert!(
        !j.iter()
            .any(|x| x.0 == "fleet.node.step" && x.1 == "sim-amd-0001"),
        "nothing was done to the deleted node: {j:?}"
    );
    eprintln!(
        "budget: held {:.1} s until the test's replica, whole run {:.1} s",
        held.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn a_mig_manager_rollout_and_two_dcm_nodes_at_once() {
    let (cp, dir, sim) =
        start_cluster(&["--nodes", "4", "--mig-nodes", "2", "--mig-gpu-nodes", "1"]);
    let d = dir.path();
    let set = d.join("set.json");
    let sel = "nvidia.com/mig.capable=true";
    let p = run(
        fleet(
            &cp.admin(),
            d,
            sel,
            &["plan", "--mig-config", "all-1g.10gb", "--out"],
        )
        .arg(&set),
        "",
    );
    assert_eq!(p.code, 0, "{p:?}");
    assert!(
        p.stdout.contains("MIG-manager config all-1g.10gb")
            && p.stdout
                .contains("nvidia.com/gpu=0 nvidia.com/mig-1g.10gb=56"),
        "{}",
        p.stdout
    );
    let absent = run(
        fleet(
            &cp.admin(),
            d,
            sel,
            &["plan", "--mig-config", "no-such", "--out"],
        )
        .arg(d.join("x.json")),
        "",
    );
    assert_eq!(absent.code, 1, "{absent:?}");
    assert!(
        absent.stdout.contains("\"no-such\" is not in"),
        "{}",
        absent.stdout
    );
    let t0 = Instant::now();
    let r = run(
        fleet(&cp.admin(), d, sel, &["apply", "--yes", "--parallel", "2"]).arg(&set),
        "",
    );
    assert_eq!(r.code, 0, "{r:?}\nsim: {}", sim.said.lock().unwrap());
    for name in ["sim-nv-0002", "sim-nv-0003"] {
        let n = node(&cp, name);
        assert_eq!(label(&n, "nvidia.com/mig.config"), "all-1g.10gb");
        assert_eq!(label(&n, "nvidia.com/mig.config.state"), "success");
        assert_eq!(n["status"]["allocatable"]["nvidia.com/mig-1g.10gb"], "56");
        assert!(
            n["status"]["allocatable"]["nvidia.com/gpu"].is_null(),
            "{n}"
        );
        assert!(!cordoned(&n));
    }
    let mig_secs = t0.elapsed().as_secs_f64();
    // Planned again: both nodes are there already; nothing to roll out, nothing saved.
    let again = d.join("again.json");
    let p = run(
        fleet(
            &cp.admin(),
            d,
            sel,
            &["plan", "--mig-config", "all-1g.10gb", "--out"],
        )
        .arg(&again),
        "",
    );
    assert_eq!(p.code, 0, "{p:?}");
    assert_eq!(
        p.stdout.matches("already at the target: sim-nv").count(),
        2,
        "{}",
        p.stdout
    );
    assert!(
        p.stdout.contains("nothing to roll out") && !again.exists(),
        "{}",
        p.stdout
    );
    // A selector of AMD nodes only: a MIG config is refused for them with the reason.
    let amd = "feature.node.kubernetes.io/amd-gpu=true";
    let wrong = run(
        fleet(
            &cp.admin(),
            d,
            amd,
            &["plan", "--mig-config", "all-1g.10gb", "--out"],
        )
        .arg(d.join("y.json")),
        "",
    );
    assert_eq!(wrong.code, 1, "{wrong:?}");
    assert!(
        wrong.stdout.contains("a MIG config is for NVIDIA nodes"),
        "{}",
        wrong.stdout
    );
    // Two DCM nodes at once: the profile is written once (the other finds it as planned).
    let dcm = d.join("dcm.json");
    let p = run(
        fleet(
            &cp.admin(),
            d,
            amd,
            &["plan", "--layout", "dpx_nps2", "--out"],
        )
        .arg(&dcm),
        "",
    );
    assert_eq!(p.code, 0, "{p:?}");
    let r = run(
        fleet(&cp.admin(), d, amd, &["apply", "--yes", "--parallel", "2"]).arg(&dcm),
        "",
    );
    assert_eq!(r.code, 0, "{r:?}\nsim: {}", sim.said.lock().unwrap());
    assert_eq!(
        r.stdout
            .matches("written to kube-amd-gpu/default-dcm-config")
            .count(),
        1,
        "{}",
        r.stdout
    );
    assert_eq!(
        r.stdout.matches("already as planned").count(),
        1,
        "{}",
        r.stdout
    );
    for name in ["sim-amd-0000", "sim-amd-0001"] {
        let n = node(&cp, name);
        assert_eq!(label(&n, "amd.com/compute-memory-partition"), "dpx_nps2");
        assert_eq!(n["status"]["allocatable"]["amd.com/gpu"], "16");
        assert!(!cordoned(&n));
    }
    eprintln!("MIG-manager rollout of two nodes at once: {mig_secs:.1} s");
}

/// A cluster plan set is verified, never trusted (pure; no control plane): every field of every
/// node's plan edited after planning, every reordering of three nodes, the target and the DCM
/// profile edited: each refused by `apply` before it reads the cluster, naming what.
#[test]
fn a_cluster_plan_set_is_verified_never_trusted() {
    use partop::domain::cluster_rollout::{
        Budget, ClusterPlanSet, Engine, Eviction, NodePlan, ProfileChange, Target, dcm_profile,
    };
    use partop::domain::{ComputeMode, MemoryMode};
    let file = Path::new("/tmp/set.json");
    let node = |i: usize| {
        let mut p = NodePlan {
            node: format!("n{i}"),
            engine: Engine::Dcm {
                profile: "partop-cpx-nps4".into(),
            },
            pods: vec![Eviction {
                namespace: "default".into(),
                name: format!("web-{i}"),
                uid: format!("u{i}"),
                requests: [("amd.com/gpu".to_string(), 1)].into(),
                budgets: vec![Budget {
                    name: "web-pdb".into(),
                    allowed: 1,
                }],
            }],
            expected: [("amd.com/gpu".to_string(), 64)].into(),
            labels: [(
                "amd.com/compute-memory-partition".to_string(),
                "spx_nps1".to_string(),
            )]
            .into(),
            fingerprint: String::new(),
        };
        p.fingerprint = p.computed();
        p
    };
    let (profile, after) = dcm_profile(ComputeMode::Cpx, MemoryMode::Nps4, 8);
    let mut s = ClusterPlanSet {
        fingerprint: String::new(),
        created_at: "2026-11-26T00:00:00Z".into(),
        target: Target::Layout {
            compute: ComputeMode::Cpx,
            memory: MemoryMode::Nps4,
        },
        profile: Some(ProfileChange {
            profile,
            before: None,
            after,
        }),
        nodes: (0..3).map(node).collect(),
    };
    s.fingerprint = s.computed();
    partop::exec::rollout::verify(&s, file).unwrap();
    type Edit = (&'static str, fn(&mut NodePlan));
    let edits: [Edit; 9] = [
        ("the node", |p| p.node.push('x')),
        ("the engine", |p| {
            p.engine = Engine::MigManager {
                config: "all-1g.10gb".into(),
            }
        }),
        ("a pod dropped", |p| p.pods.clear()),
        ("a pod's UID", |p| p.pods[0].uid.push('x')),
        ("a pod's request", |p| {
            p.pods[0].requests.insert("amd.com/gpu".into(), 2);
        }),
        ("a budget", |p| p.pods[0].budgets[0].allowed = 5),
        ("the capacity after", |p| {
            p.expected.insert("amd.com/gpu".into(), 8);
        }),
        ("a label planned against", |p| {
            p.labels.clear();
        }),
        ("the fingerprint", |p| p.fingerprint.push('0')),
    ];
    let mut cases = 1;
    for i in 0..3 {
        for (what, edit) in &edits {
            let mut t = s.clone();
            edit(&mut t.nodes[i]);
            let e = partop::exec::rollout::verify(&t, file)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("was changed after it was made") && e.contains("nothing is rolled out"),
                "{what} of node {i}: {e}"
            );
            cases += 1;
        }
    }
    // Every reordering of the three nodes (5 besides the planned one).
    for p in [[0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
        let mut t = s.clone();
        t.nodes = p.iter().map(|&k| s.nodes[k].clone()).collect();
        let e = partop::exec::rollout::verify(&t, file)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("their order or the profile changed"),
            "{p:?}: {e}"
        );
        cases += 1;
    }
    let mut t = s.clone();
    t.profile.as_mut().unwrap().after["profiles"][0]["numGPUsAssigned"] = 4.into();
    assert!(partop::exec::rollout::verify(&t, file).is_err());
    let mut t = s.clone();
    t.target = Target::MigConfig { name: "x".into() };
    assert!(partop::exec::rollout::verify(&t, file).is_err());
    let mut t = s.clone();
    t.nodes.clear();
    t.fingerprint = t.computed();
    assert!(
        partop::exec::rollout::verify(&t, file)
            .unwrap_err()
            .to_string()
            .contains("names no node")
    );
    cases += 3;
    // A set made consistently (every fingerprint recomputed: a fingerprint is no signature)
    // whose names would address something else in an API path, a field selector or a printed
    // command: refused by name before anything is asked of the cluster (8 cases).
    type Hostile = (&'static str, fn(&mut NodePlan));
    let hostile: [Hostile; 8] = [
        ("a node with a slash", |p| p.node = "n0/../secrets".into()),
        ("a node with a comma", |p| {
            p.node = "n0,metadata.name=x".into()
        }),
        ("a node with a blank", |p| p.node = "n0 --all".into()),
        ("a node with a control", |p| p.node = "n0\u{1b}[2J".into()),
        ("a node in capitals", |p| p.node = "N0".into()),
        ("an empty node", |p| p.node = String::new()),
        ("a pod's namespace with a dot", |p| {
            p.pods[0].namespace = "a.b".into()
        }),
        ("a pod with a slash", |p| {
            p.pods[0].name = "web/eviction".into()
        }),
    ];
    for (what, edit) in &hostile {
        let mut t = s.clone();
        edit(&mut t.nodes[0]);
        t.nodes[0].fingerprint = t.nodes[0].computed();
        t.fingerprint = t.computed();
        let e = partop::exec::rollout::verify(&t, file)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("is not a Kubernetes name") && !e.contains('\u{1b}'),
            "{what}: {e}"
        );
        cases += 1;
    }
    assert_eq!(cases, 44);
    eprintln!("{cases} cluster plan sets verified");
}

/// `--read-only` removes the cluster rollout: refused before the set or the cluster is read
/// (the set named does not even exist, the kubeconfig points nowhere), with and without
/// `--resume` (2 cases).
#[test]
fn read_only_refuses_a_cluster_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let kc = d.join("nowhere.kubeconfig");
    for extra in [&[][..], &["--resume"][..]] {
        let mut c = partop();
        c.arg("--read-only")
            .arg("--journal")
            .arg(d.join("journal.jsonl"))
            .args(["fleet", "--kubernetes", "--kubeconfig"])
            .arg(&kc)
            .args(["apply", "--yes"])
            .arg(d.join("absent.json"))
            .args(extra);
        let r = run(&mut c, "");
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stdout.contains("nothing is rolled out"), "{r:?}");
        assert!(!d.join("fleet-journal.jsonl").exists());
    }
}

/// The third engine: a mixed set of DCM nodes and an AMD node no manager owns (`sim cluster
/// --unmanaged`: DCM's DaemonSet does not select it), the latter reached by the fleet's
/// rehearsal transport (`--ssh NODE=rehearse:STATE`) and changed by partop's own plan, made and
/// applied on it. Covered: without a way to reach it the node is refused at plan time saying
/// how; the plan names each node's engine; the node's own `partop apply` failing (another
/// change holds its lock) stops the set with the node's own reason, the node after it
/// untouched; `--resume` (the node's journal: no run there, so applied afresh) finishes, the
/// unmanaged node in CPX/NPS4 on its simulated GPUs, its pod evicted through the API, and
/// uncordoned.
#[test]
fn a_mixed_set_applies_an_unmanaged_node_with_partop_apply_over_the_fleet_transport() {
    let (cp, dir, sim) = start_cluster(&[
        "--nodes",
        "3",
        "--gpu-nodes",
        "2",
        "--unmanaged",
        "sim-amd-0001",
    ]);
    let d = dir.path();
    namespace_default(&cp);
    let pods: String = (0..3)
        .map(|i| gpu_pod(&format!("web-{i}"), &format!("sim-amd-000{i}"), "web"))
        .collect();
    apply_yaml(&cp, d, &pods);
    wait_within("the pods run", 30, || {
        kube(&cp, &["get", "pods", "-n", "default", "-o", "json"])
            .matches("\"Running\"")
            .count()
            == 3
    });
    let sel = "partop.sim/cluster=true";
    let set = d.join("set.json");
    let state = d.join("sim").join("sim-amd-0001").join("node.json");
    let dest = format!("sim-amd-0001=rehearse:{}", state.display());

    // No way to reach it: refused at plan time with the way out, nothing saved.
    let no = run(
        fleet(
            &cp.admin(),
            d,
            sel,
            &["plan", "--layout", "cpx_nps4", "--out"],
        )
        .arg(&set),
        "",
    );
    assert_eq!(no.code, 1, "{no:?}");
    assert!(
        no.stdout
            .contains("refused: sim-amd-0001 is not managed by AMD's Device Config Manager")
            && no.stdout.contains("--ssh sim-amd-0001=DEST"),
        "{}",
        no.stdout
    );
    assert!(!set.exists());

    let p = run(
        fleet(
            &cp.admin(),
            d,
            sel,
            &["--ssh", &dest, "plan", "--layout", "cpx_nps4", "--out"],
        )
        .arg(&set),
        "",
    );
    assert_eq!(p.code, 0, "{p:?}");
    for want in [
        "sim-amd-0000: DCM profile partop-cpx-nps4",
        "sim-amd-0001: partop apply on the rehearsal node",
        "sim-amd-0002: DCM profile partop-cpx-nps4",
        "evict default/web-1 (amd.com/gpu=1)",
    ] {
        assert!(
            p.stdout.contains(want),
            "the plan says {want:?}: {}",
            p.stdout
        );
    }
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&set).unwrap()).unwrap();
    let own = &saved["nodes"][1]["engine"];
    assert_eq!(own["kind"], "partop_apply", "{own}");
    assert_eq!(
        own["plan"]["changes"].as_array().map(Vec::len),
        Some(8),
        "the node's own plan changes its 8 GPUs: {own}"
    );

    // The node's own plan edited in the saved set, every fingerprint around it made again: the
    // plan's own fingerprint still refuses it before anything changes.
    let mut forged: partop::domain::cluster_rollout::ClusterPlanSet =
        serde_json::from_str(&std::fs::read_to_string(&set).unwrap()).unwrap();
    if let partop::domain::cluster_rollout::Engine::PartopApply { plan, .. } =
        &mut forged.nodes[1].engine
    {
        plan.downtime_secs += 1;
    }
    forged.nodes[1].fingerprint = forged.nodes[1].computed();
    forged.fingerprint = forged.computed();
    let forged_file = d.join("forged.json");
    std::fs::write(&forged_file, serde_json::to_string(&forged).unwrap()).unwrap();
    let f = run(
        fleet(&cp.admin(), d, sel, &["apply", "--yes"]).arg(&forged_file),
        "",
    );
    assert_ne!(f.code, 0, "{f:?}");
    assert!(
        f.stderr
            .contains("the plan for sim-amd-0001 was changed after it was made"),
        "{f:?}"
    );
    assert!(journal(d).is_empty() && pod_exists(&cp, "web-0"));

    // Another change holds the node's lock: its own apply refuses, and that stops the set.
    let lock = partop::exec::lock::acquire(
        &partop::exec::lock::sim_path(&state),
        &partop::exec::lock::Holder {
            what: "firmware update".into(),
            id: "fw-1".into(),
            pid: std::process::id(),
            since: "now".into(),
            journal: "-".into(),
        },
    )
    .unwrap();
    let r = run(
        fleet(&cp.admin(), d, sel, &["apply", "--yes"]).arg(&set),
        "",
    );
    assert_eq!(r.code, 1, "{r:?}\nsim: {}", sim.said.lock().unwrap());
    assert!(
        r.stdout
            .contains("another change is running on this node: firmware update fw-1"),
        "the node's own reason: {r:?}"
    );
    assert!(r.stdout.contains("untouched: sim-amd-0002"), "{}", r.stdout);
    let n0 = node(&cp, "sim-amd-0000");
    assert_eq!(label(&n0, "amd.com/compute-memory-partition"), "cpx_nps4");
    let n1 = node(&cp, "sim-amd-0001");
    assert!(
        cordoned(&n1),
        "the rollout's cordon stays on the failed node (said)"
    );
    assert!(
        label(&n1, "dcm.amd.com/gpu-config-profile").is_empty(),
        "no DCM label: {n1}"
    );
    assert_eq!(label(&n1, "amd.com/compute-memory-partition"), "spx_nps1");
    assert!(
        !pod_exists(&cp, "web-1"),
        "its pod was evicted through the API"
    );
    let n2 = node(&cp, "sim-amd-0002");
    assert!(!cordoned(&n2) && label(&n2, "dcm.amd.com/gpu-config-profile").is_empty());
    assert!(pod_exists(&cp, "web-2"));
    let j = journal(d);
    assert!(
        has_step(&j, "fleet.node.failed", "sim-amd-0001", ""),
        "{j:?}"
    );
    assert!(!j.iter().any(|x| x.1 == "sim-amd-0002"), "{j:?}");

    // Released, the resume finishes: the node's own journal has no run of the plan, so it is
    // applied afresh; then the kubelet's count, and the uncordon.
    drop(lock);
    let r = run(
        fleet(&cp.admin(), d, sel, &["apply", "--yes", "--resume"]).arg(&set),
        "",
    );
    assert_eq!(r.code, 0, "{r:?}\nsim: {}", sim.said.lock().unwrap());
    assert!(
        r.stdout
            .contains("sim-amd-0001: label: partop apply on the rehearsal node")
            && !r.stdout.contains("partop apply --resume"),
        "no run of the plan in the node's journal (its apply refused before its first step): applied afresh: {}",
        r.stdout
    );
    let st = partop::sim::state::SimState::load(&state).unwrap();
    let modes = st.modes();
    assert_eq!(modes.len(), 8);
    assert!(
        modes
            .iter()
            .all(|g| g.compute == partop::domain::ComputeMode::Cpx
                && g.memory == partop::domain::MemoryMode::Nps4),
        "the unmanaged node's GPUs are in CPX/NPS4 (changed by its own partop apply)"
    );
    for i in 0..3 {
        let n = node(&cp, &format!("sim-amd-000{i}"));
        assert_eq!(
            label(&n, "amd.com/compute-memory-partition"),
            "cpx_nps4",
            "{n}"
        );
        assert_eq!(n["status"]["allocatable"]["amd.com/gpu"], "64");
        assert!(!cordoned(&n), "node {i} uncordoned");
    }
    assert!(label(&node(&cp, "sim-amd-0001"), "dcm.amd.com/gpu-config-profile").is_empty());
    let j = journal(d);
    assert!(
        has_step(&j, "fleet.node.step", "sim-amd-0001", "label:done"),
        "{j:?}"
    );
    assert_eq!(
        j.iter()
            .filter(|x| x.0 == "fleet.node.step" && x.1 == "sim-amd-0001" && x.2 == "cordon")
            .count(),
        1,
        "cordoned once, by the rollout (the node's plan has no Kubernetes part): {j:?}"
    );
    assert_eq!(
        j.iter()
            .filter(|x| x.0 == "fleet.node.step" && x.1 == "sim-amd-0001" && x.2 == "evict")
            .count(),
        1,
        "evicted once, never again on the resume: {j:?}"
    );
    assert!(j.iter().any(|x| x.0 == "fleet.rollout.done"), "{j:?}");
}

fn has_step(j: &[(String, String, String)], a: &str, n: &str, s: &str) -> bool {
    j.iter().any(|x| x.0 == a && x.1 == n && x.2 == s)
}

/// A destination given with `--ssh` is checked as the fleet checks a node word before anything
/// is asked of the cluster (7 hostile words, each refused as a usage error naming it escaped):
/// an ssh option smuggled as a host, blanks, a control sequence, an empty node or destination,
/// no `=`, an empty rehearsal state; and a user name that is not one.
#[test]
fn a_hostile_ssh_destination_is_refused_before_the_cluster_is_asked() {
    let words = [
        "n1=-oProxyCommand=touch /tmp/x",
        "n1=a b",
        "n1=gpu\u{1b}[2J07",
        "=gpu07",
        "n1=",
        "n1",
        "n1=rehearse:",
    ];
    for w in words {
        let r = run(
            partop().args([
                "fleet",
                "--kubernetes",
                "--kubeconfig",
                "/nonexistent/kubeconfig",
                "--ssh",
                w,
                "plan",
                "--layout",
                "cpx_nps4",
                "--out",
                "/nonexistent/set.json",
            ]),
            "",
        );
        assert_eq!(r.code, 2, "{w:?}: {r:?}");
        assert!(
            r.stderr.contains("--ssh") && !r.stderr.contains('\u{1b}'),
            "{w:?}: {}",
            r.stderr
        );
    }
    for u in ["-oProxyCommand=x", "a@b", ""] {
        let r = run(
            partop().args([
                "fleet",
                "--kubernetes",
                "--kubeconfig",
                "/nonexistent/kubeconfig",
                &format!("--ssh-user={u}"),
                "plan",
                "--layout",
                "cpx_nps4",
                "--out",
                "/nonexistent/set.json",
            ]),
            "",
        );
        assert_eq!(r.code, 2, "{u:?}: {r:?}");
        assert!(r.stderr.contains("--ssh-user"), "{u:?}: {}", r.stderr);
    }
    eprintln!(
        "{} hostile --ssh words and 3 --ssh-user words refused",
        words.len()
    );
}

/// One change at a time across machines: a node cordoned by another partop change (an apply
/// run on the node itself) is not taken by the rollout: it stops at that node's cordon with
/// the holder named, nothing changed there, and neither its summary nor the refusal of a
/// fresh apply offers to uncordon the node (the cordon is not the rollout's); once the other
/// change lifted its cordon, the printed resume finishes.
#[test]
fn a_node_held_by_another_partop_change_is_neither_taken_nor_said_as_the_rollouts() {
    let (cp, dir, _sim) = start_cluster(&["--nodes", "1", "--gpu-nodes", "0"]);
    let d = dir.path();
    let sel = "partop.sim/cluster=true";
    let set = d.join("set.json");
    let p = run(
        fleet(
            &cp.admin(),
            d,
            sel,
            &["plan", "--layout", "cpx_nps4", "--out"],
        )
        .arg(&set),
        "",
    );
    assert_eq!(p.code, 0, "{p:?}");
    let other = "apply 0123456789abcdef on sim-amd-0000";
    kube(
        &cp,
        &[
            "annotate",
            "node",
            "sim-amd-0000",
            &format!("partop.amd.com/cordoned={other}"),
        ],
    );
    kube(&cp, &["cordon", "sim-amd-0000"]);
    let r = run(
        fleet(&cp.admin(), d, sel, &["apply", "--yes"]).arg(&set),
        "",
    );
    assert_eq!(r.code, 1, "{r:?}");
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(
        said.contains("is cordoned by another partop change") && said.contains(other),
        "{said}"
    );
    assert!(!said.contains("Left cordoned by partop"), "{said}");
    let n = node(&cp, "sim-amd-0000");
    assert_eq!(
        n["metadata"]["annotations"]["partop.amd.com/cordoned"], other,
        "the holder's mark is untouched"
    );
    assert_eq!(label(&n, "dcm.amd.com/gpu-config-profile"), "");
    let again = run(
        fleet(&cp.admin(), d, sel, &["apply", "--yes"]).arg(&set),
        "",
    );
    assert!(!again.stderr.contains("it left cordoned"), "{again:?}");
    let line = again
        .stderr
        .lines()
        .find_map(|l| l.split_once("Continue it: ").map(|(_, c)| c.to_string()))
        .unwrap_or_else(|| panic!("no resume command: {again:?}"));
    // The other change ends (its uncordon), and the pasted resume finishes.
    kube(&cp, &["uncordon", "sim-amd-0000"]);
    let bin = Path::new(env!("CARGO_BIN_EXE_partop")).parent().unwrap();
    let o = run(
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{line} --yes"))
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            ),
        "",
    );
    assert_eq!(o.code, 0, "`{line} --yes`: {o:?}");
    let n = node(&cp, "sim-amd-0000");
    assert_eq!(label(&n, "dcm.amd.com/gpu-config-profile-state"), "success");
    assert!(!cordoned(&n));
}
