//! A simulated GPU node as a node of the test's own control plane: the kubelet twin's node agent
//! (`partop::sim::kubelet::NodeAgent`, in the test's runtime) registers it under the simulated
//! node's host name, advertises what its partitions give, runs the pods bound to it and, when a
//! pod's deletion finishes, stops the simulated node's workload of that name and counts it. The
//! agent follows one simulated node at a time: a test that needs a fresh one per case moves it
//! there (`follow`), the Node and the control plane staying.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::control_plane::ControlPlane;
use super::env::SimEnv;
use super::k8s_api::{admin, make_pod, namespace, pod_ready, runtime, until};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use partop::domain::plan::Plan;
use partop::sim::kubelet::{NodeAgent, advertised, stop_pod};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// The control plane, the runtime its node agent runs on, the administrator's client (the
/// namespaces `default` and `sim` made) and the Node's name.
pub struct K8sNode {
    pub cp: ControlPlane,
    pub rt: tokio::runtime::Runtime,
    pub c: kube::Client,
    pub host: String,
    /// The state file of the simulated node the agent follows.
    state: Arc<Mutex<PathBuf>>,
    /// Each pod's (`ns/name`) finished deletions since the node was last followed.
    gone: Arc<Mutex<BTreeMap<String, u32>>>,
}

/// The scenario `name`: a simulated Kubernetes node (kubelet twin) of 2 MI300X in SPX/NPS1 whose
/// workload `trainer` (a batch job on GPU 0) is the process of the pod `run_trainer` binds.
pub fn trainer_scenario(name: &str) -> String {
    format!(
        "name = \"{name}\"\ndescription = \"t\"\nproduct = \"mi300x\"\ngpus = 2\ncompute = \"SPX\"\nmemory = \"NPS1\"\nrocm = \"7.0.2\"\nseed = 5\nreload_secs = 6\ntime_scale = 0.01\n\n[[workload]]\nname = \"trainer\"\nkind = \"batch\"\ngpu = 0\nvram_gb = 20\nbusy = 80\ncomm = \"python3\"\n\n[kubernetes]\n"
    )
}

/// The host name `e`'s simulated node goes by (its Node's name), once its kubelet twin serves.
pub fn host_of(e: &SimEnv) -> String {
    let sock = e.node.state.with_extension("kubelet.sock");
    super::wait_until("the kubelet twin's socket", || sock.exists());
    let o = super::run(e.cmd().args(["snapshot", "--json"]), "");
    let snap: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    snap["host"].as_str().unwrap().to_string()
}

/// `partop apply PLAN --yes --grace 3 FLAGS` on `e`'s node, reaching the API server with
/// `kubeconfig` as an operator's shell would (KUBECONFIG); the short grace keeps an eviction
/// within a test's time.
pub fn apply(e: &SimEnv, kubeconfig: &Path, plan: &Path, flags: &[&str]) -> Command {
    let mut c = e.cmd();
    c.env("KUBECONFIG", kubeconfig)
        .arg("apply")
        .arg(plan)
        .args(flags)
        .args(["--yes", "--grace", "3"]);
    c
}

/// `e`'s plan to DPX (its file, and the plan), made once the node's kubelet shows the trainer's
/// pod on its GPU: before, the plan has no pod to move and stops the trainer by pid.
pub fn plan_moving_trainer(e: &SimEnv) -> (PathBuf, Plan) {
    let plan = || {
        let p = e.plan("--compute DPX", "p.json");
        let plan: Plan = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        (p, plan)
    };
    let (mut path, mut p) = plan();
    super::wait_until("the trainer holds its GPU in the plan", || {
        (path, p) = plan();
        p.kubernetes
            .as_ref()
            .is_some_and(|k| k.pods.iter().any(|p| p.label() == "sim/trainer"))
    });
    (path, p)
}

impl K8sNode {
    /// Starts a control plane and the node agent of `e`'s node, and waits until its Node is
    /// registered. `stale`: the node's device plugin keeps advertising the old count after a
    /// repartition until its pod is restarted.
    pub fn start(e: &SimEnv, stale: bool) -> Self {
        let cp = ControlPlane::start();
        let rt = runtime();
        let host = host_of(e);
        let state = Arc::new(Mutex::new(e.node.state.clone()));
        let gone: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
        let c = rt.block_on(async {
            let c = admin(&cp).await;
            namespace(&c, "sim").await;
            let st = Arc::clone(&state);
            let mut agent = NodeAgent::new(
                c.clone(),
                &host,
                Arc::new(move || advertised(&st.lock().unwrap())),
                stale,
            );
            let (st, count) = (Arc::clone(&state), Arc::clone(&gone));
            agent.on_gone = Some(Arc::new(move |ns: &str, name: &str| {
                *count
                    .lock()
                    .unwrap()
                    .entry(format!("{ns}/{name}"))
                    .or_default() += 1;
                stop_pod(&st.lock().unwrap(), ns, name);
            }));
            tokio::spawn(agent.run());
            until("the Node is registered", || async {
                Api::<Node>::all(c.clone())
                    .get_opt(&host)
                    .await
                    .unwrap()
                    .is_some()
            })
            .await;
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

    /// Makes `e`'s simulated node (the same host) the one the agent follows, its deletions
    /// counted from none.
    pub fn follow(&self, e: &SimEnv) {
        *self.state.lock().unwrap() = e.node.state.clone();
        self.gone.lock().unwrap().clear();
    }

    /// Binds the pod `sim/trainer` (`app=trainer`; the simulated node's workload `trainer`
    /// becomes its process) to the node and waits until it runs.
    pub fn run_trainer(&self) {
        self.rt.block_on(async {
            make_pod(&self.c, "sim", "trainer", &self.host, &[("app", "trainer")]).await;
            until("the trainer pod runs", || {
                pod_ready(&self.c, "sim", "trainer")
            })
            .await;
        });
    }

    /// How many times the deletion of pod `ns/name` finished since the node was followed.
    pub fn deletions(&self, pod: &str) -> u32 {
        self.gone.lock().unwrap().get(pod).copied().unwrap_or(0)
    }

    /// The Node as the API server has it now.
    pub fn node(&self) -> Node {
        self.rt
            .block_on(Api::all(self.c.clone()).get(&self.host))
            .unwrap()
    }
}
