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
use common::control_plane::ControlPlane;
use common::env::SimEnv;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use partop::domain::k8s_ops;
use partop::domain::plan::Plan;
use partop::sim::kubelet::NodeAgent;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A simulated Kubernetes node (kubelet twin) with one training pod on GPU 0.
const SIM_NODE: &str = "name = \"k8s-resume\"\ndescription = \"t\"\nproduct = \"mi300x\"\ngpus = 2\ncompute = \"SPX\"\nmemory = \"NPS1\"\nrocm = \"7.0.2\"\nseed = 5\nreload_secs = 6\ntime_scale = 0.01\n\n[[workload]]\nname = \"trainer\"\nkind = \"batch\"\ngpu = 0\nvram_gb = 20\nbusy = 80\ncomm = \"python3\"\n\n[kubernetes]\n";

/// The one control plane and the twin's node agent, which follows the current case's
/// simulated node (its state file) and counts each pod's finished deletions.
struct Cluster {
    cp: ControlPlane,
    rt: tokio::runtime::Runtime,
    c: kube::Client,
    host: String,
    state: Arc<Mutex<PathBuf>>,
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

async fn namespace(c: &kube::Client, ns: &str) {
    if ns != "default" {
        let n: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
        Api::all(c.clone())
            .create(&PostParams::default(), &n)
            .await
            .unwrap();
    }
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    Api::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
}

async fn ready(c: &kube::Client, name: &str) -> bool {
    Api::<Pod>::namespaced(c.clone(), "sim")
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|p| p.status)
        .and_then(|s| s.conditions)
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn host_of(e: &SimEnv) -> String {
    let sock = e.node.state.with_extension("kubelet.sock");
    common::wait_until("the kubelet twin's socket", || sock.exists());
    let o = common::run(e.cmd().args(["snapshot", "--json"]), "");
    let snap: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    snap["host"].as_str().unwrap().to_string()
}

impl Cluster {
    fn start(first: &SimEnv) -> Self {
        let cp = ControlPlane::start();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let host = host_of(first);
        let state = Arc::new(Mutex::new(first.node.state.clone()));
        let gone: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
        let c = rt.block_on(async {
            let c = partop::collect::cluster::client(&partop::collect::cluster::Target {
                kubeconfig: Some(cp.admin()),
                ..Default::default()
            })
            .await
            .unwrap();
            namespace(&c, "default").await;
            namespace(&c, "sim").await;
            let st = Arc::clone(&state);
            let mut agent = NodeAgent::new(
                c.clone(),
                &host,
                Arc::new(move || partop::sim::kubelet::advertised(&st.lock().unwrap())),
                false,
            );
            let (st, count) = (Arc::clone(&state), Arc::clone(&gone));
            agent.on_gone = Some(Arc::new(move |ns: &str, name: &str| {
                *count
                    .lock()
                    .unwrap()
                    .entry(format!("{ns}/{name}"))
                    .or_default() += 1;
                partop::sim::kubelet::stop_pod(&st.lock().unwrap(), ns, name);
            }));
            tokio::spawn(agent.run());
            c
        });
        Self {
            cp,
            rt,
            c,
            host,
            state,
            gone,
        }
    }

    /// Makes `e` the node's simulated node, its trainer a running pod again; returns the plan
    /// to DPX once the kubelet shows the pod on its GPU.
    fn arm(&self, e: &SimEnv) -> (PathBuf, Plan) {
        assert_eq!(host_of(e), self.host);
        self.rt.block_on(async {
            // A case that failed may have left its pod: it goes first, so the next case starts
            // from the same node (the failure is said by that case).
            let api = Api::<Pod>::namespaced(self.c.clone(), "sim");
            if api.get_opt("trainer").await.unwrap().is_some() {
                let _ = api.delete("trainer", &Default::default()).await;
                until("a left pod is gone", || async {
                    api.get_opt("trainer").await.unwrap().is_none()
                })
                .await;
            }
            *self.state.lock().unwrap() = e.node.state.clone();
            self.gone.lock().unwrap().clear();
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "trainer", "namespace": "sim", "labels": {"app": "trainer"}},
                "spec": {"nodeName": self.host, "containers": [{"name": "c", "image": "partop/sim",
                    "resources": {"limits": {"amd.com/gpu": "1"}}}]},
            }))
            .unwrap();
            Api::<Pod>::namespaced(self.c.clone(), "sim")
                .create(&PostParams::default(), &pod)
                .await
                .unwrap();
            until("the trainer pod runs", || ready(&self.c, "trainer")).await;
        });
        let plan = || {
            let p = e.plan("--compute DPX", "p.json");
            let plan: Plan = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (p, plan)
        };
        let (mut path, mut p) = plan();
        common::wait_until("the trainer holds its GPU in the plan", || {
            (path, p) = plan();
            p.kubernetes
                .as_ref()
                .is_some_and(|k| k.pods.iter().any(|p| p.label() == "sim/trainer"))
        });
        (path, p)
    }

    /// What is wrong with the node after a finished run: cordoned, tainted, partop's
    /// annotation left, the pod evicted other than once, the trainer back.
    fn left_wrong(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        let node: Node = self
            .rt
            .block_on(Api::all(self.c.clone()).get(&self.host))
            .unwrap();
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
        let evicted = self
            .gone
            .lock()
            .unwrap()
            .get("sim/trainer")
            .copied()
            .unwrap_or(0);
        if evicted != 1 {
            wrong.push(format!(
                "the pod's deletion finished {evicted} times, not once"
            ));
        }
        wrong
    }
}

/// The resume command `partop journal` prints for the unfinished run.
fn printed_resume(e: &SimEnv) -> String {
    let o = common::run(e.cmd().arg("journal"), "");
    let text = format!("{}{}", o.stdout, o.stderr);
    let at = text
        .find("Continue it with `")
        .unwrap_or_else(|| panic!("no resume command in `partop journal`:\n{text}"));
    let rest = &text[at + "Continue it with `".len()..];
    rest[..rest.find('`').unwrap()].to_string()
}

/// One kill point: the apply killed at `at`, then resumed with the printed command.
fn one(k: &Cluster, at: &str) -> Result<(), String> {
    let e = SimEnv::new(SIM_NODE);
    let (path, p) = k.arm(&e);
    let status = e
        .cmd()
        .env("KUBECONFIG", k.cp.admin())
        .env(partop::exec::apply::CRASH_ENV, at)
        .arg("apply")
        .arg(&path)
        .args(["--yes", "--grace", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    if std::os::unix::process::ExitStatusExt::signal(&status) != Some(9) {
        return Err(format!("the apply was not killed ({status})"));
    }
    let cmd = printed_resume(&e);
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_partop"))
        .parent()
        .unwrap()
        .to_path_buf();
    let o = common::run(
        Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("KUBECONFIG", k.cp.admin())
            .env("XDG_STATE_HOME", e.xdg())
            .env("XDG_CONFIG_HOME", e.xdg())
            .env_remove("PARTOP_SIM_STATE"),
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
    let mut wrong = k.left_wrong();
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
    let first = SimEnv::new(SIM_NODE);
    let k = Cluster::start(&first);
    let (_, p) = k.arm(&first);
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
fn cordoned(k: &Cluster) -> bool {
    let node: Node = k.rt.block_on(Api::all(k.c.clone()).get(&k.host)).unwrap();
    node.spec.and_then(|s| s.unschedulable) == Some(true)
}

/// Two operators on one Kubernetes node: a second `partop apply` while the first waits at a
/// cluster step (its eviction held back by a PodDisruptionBudget) is refused by the node's lock,
/// naming the holder, and changes nothing; the first finishes once the budget allows. A cordon
/// someone else made is never undone by partop's uncordon, whether the run finishes at once or
/// is killed after its cordon step and resumed. 3 cases.
#[test]
fn a_second_operator_is_refused_by_the_lock_and_anothers_cordon_is_never_undone() {
    let e = SimEnv::new(SIM_NODE);
    let k = Cluster::start(&e);
    let (path, _) = k.arm(&e);
    let pdbs =
        Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(k.c.clone(), "sim");
    k.rt.block_on(async {
        let pdb = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "trainer-pdb", "namespace": "sim"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}},
        }))
        .unwrap();
        pdbs.create(&PostParams::default(), &pdb).await.unwrap();
        until("the disruption controller computed the budget", || async {
            pdbs.get("trainer-pdb")
                .await
                .ok()
                .and_then(|b| b.status)
                .is_some_and(|s| s.current_healthy == Some(1))
        })
        .await;
    });
    let first = e
        .cmd()
        .env("KUBECONFIG", k.cp.admin())
        .arg("apply")
        .arg(&path)
        .args(["--yes", "--grace", "3"])
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
    let o = common::run(
        e.cmd()
            .env("KUBECONFIG", k.cp.admin())
            .arg("apply")
            .arg(&path)
            .args(["--yes", "--grace", "3"]),
        "",
    );
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
    assert!(k.left_wrong().is_empty(), "{:?}", k.left_wrong());
    drop(e);

    // 2. and 3. Someone else cordoned the node: a finished run and a run killed after its
    //    cordon step, then resumed, both leave it cordoned, and say so.
    let (ok, text) = k.cp.kubectl(&k.cp.admin(), &["cordon", &k.host]);
    assert!(ok, "{text}");
    for crash in [None, Some("end:1")] {
        let e = SimEnv::new(SIM_NODE);
        let (path, _) = k.arm(&e);
        let mut c = e.cmd();
        c.env("KUBECONFIG", k.cp.admin())
            .arg("apply")
            .arg(&path)
            .args(["--yes", "--grace", "3"]);
        if let Some(at) = crash {
            c.env(partop::exec::apply::CRASH_ENV, at);
        }
        let o = common::run(&mut c, "");
        let mut said = format!("{}{}", o.stdout, o.stderr);
        if crash.is_some() {
            assert_ne!(o.code, 0, "killed: {said}");
            let r = common::run(
                e.cmd()
                    .env("KUBECONFIG", k.cp.admin())
                    .arg("apply")
                    .arg(&path)
                    .args(["--resume", "--yes", "--grace", "3"]),
                "",
            );
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
