//! The Findings view's action on a reclaimable partition (issue 25, item 3): the whole monitor
//! loop (`ui::app::run_with`, scripted keys, the real effect runner) against a REAL control
//! plane on loopback (etcd, kube-apiserver, kube-controller-manager: the disruption controller
//! decides what a budget allows) and the kubelet twin's node agent, which runs the pods and
//! finishes their deletion. The pod is evicted through the Eviction API, journaled first;
//! a budget that blocks is said and never bypassed; a pod replaced between the ask and the
//! confirmation is refused. The other holders' flows (a model, a bare process) and read-only
//! are checked through the reducer. No mock server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests panic on failure"
)]
#![allow(clippy::print_stderr, reason = "the test says how many cases it ran")]

mod common;
use common::control_plane::ControlPlane;
use common::k8s_api::{admin, budget, make_pod, namespace, pod_ready, runtime, start_node, until};
use common::nodes::recorded;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use partop::collect::task::Request;
use partop::domain::findings::Thresholds;
use partop::domain::snapshot::{PodRef, Snapshot};
use partop::ui::command::Command;
use partop::ui::effect::{EffectRunner, ExecSettings, LocalNode};
use partop::ui::keymap::Keymap;
use partop::ui::state::{Effect, Msg, State, update};
use partop::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

const NODE: &str = "kfind-node";

/// Every held partition idle over a window of nothing and older than nothing: reclaimable at
/// the first sample (the rule itself is tested in `k8s_findings.rs`).
fn at_once() -> Thresholds {
    Thresholds {
        reclaim_busy: 0.0,
        reclaim_window_ms: 0,
        reclaim_min_age_ms: 0,
        ..Thresholds::default()
    }
}

/// A recorded node as the Kubernetes node `NODE`, whose partition 0 is allocated to `pod`
/// (namespace `sim`) and idle; every other partition busy, so it is the only reclaimable one.
fn node_with(pod: &str) -> Snapshot {
    let mut s = recorded("dpx-nps2-two-models");
    s.host = NODE.into();
    for (i, l) in s
        .gpus
        .iter_mut()
        .flat_map(|g| &mut g.partitions)
        .enumerate()
    {
        l.gfx_busy_percent = Some(if i == 0 { 0.0 } else { 50.0 });
        l.pods.clear();
        if i == 0 {
            l.pods.push(PodRef {
                namespace: "sim".into(),
                pod: pod.into(),
                container: "c".into(),
                resource: "amd.com/gpu".into(),
                priority_class: None,
            });
        }
    }
    s
}

fn exec(dir: &Path, kubeconfig: &Path) -> ExecSettings {
    ExecSettings::Local(LocalNode {
        journal: dir.join("journal.jsonl"),
        proc_root: "/proc".into(),
        sim_state: Some(dir.join("node.json")),
        models: None,
        model_log_dir: dir.join("models"),
        nvidia_smi: None,
        nvidia_replay: false,
        exe: env!("CARGO_BIN_EXE_partop").into(),
        apply_dir: dir.join("apply"),
        kube: partop::collect::cluster::Target {
            kubeconfig: Some(kubeconfig.to_path_buf()),
            ..Default::default()
        },
    })
}

fn key(c: &str) -> Msg {
    let code = match c {
        "enter" => KeyCode::Enter,
        "esc" => KeyCode::Esc,
        c => KeyCode::Char(c.chars().next().unwrap()),
    };
    Msg::Key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn typed(tx: &mpsc::Sender<Msg>, text: &str) {
    for ch in text.chars() {
        tx.blocking_send(key(&ch.to_string())).unwrap();
    }
}

type App = tokio::task::JoinHandle<(State, Terminal<TestBackend>)>;

/// The monitor loop on `rt` over `snap`, its runner's messages passed through a watcher that
/// keeps what the runner said (so the test waits on the lookup and the eviction, not on time).
struct Monitor {
    app: App,
    tx: mpsc::Sender<Msg>,
    said: Arc<Mutex<Vec<String>>>,
}

fn monitor(rt: &tokio::runtime::Runtime, cp: &ControlPlane, dir: &Path, snap: Snapshot) -> Monitor {
    let (snap_tx, snap_rx) = watch::channel(Arc::new(Snapshot::default()));
    let (req_tx, mut req_rx) = mpsc::channel::<Request>(64);
    let (tx, rx) = mpsc::channel(256);
    let (runner_tx, mut runner_rx) = mpsc::channel::<Msg>(256);
    let said = Arc::new(Mutex::new(Vec::new()));
    let (fwd, keep) = (tx.clone(), Arc::clone(&said));
    rt.spawn(async move {
        while let Some(m) = runner_rx.recv().await {
            match &m {
                Msg::PodLooked(r) => keep.lock().unwrap().push(format!("looked {r:?}")),
                Msg::Evict(p) => keep.lock().unwrap().push(format!("evict {p:?}")),
                _ => {}
            }
            if fwd.send(m).await.is_err() {
                break;
            }
        }
    });
    // The collector's requests (a fresh sample after the eviction) are answered with the same
    // node, as a collector would publish it again.
    let publish = snap_tx.clone();
    rt.spawn(async move {
        let _keep = snap_tx;
        while req_rx.recv().await.is_some() {}
    });
    let runner = EffectRunner {
        exec: exec(dir, &cp.admin()),
        requests: req_tx,
        tx: runner_tx,
    };
    let app = rt.spawn(async move {
        let (km, _) = Keymap::load("default", None, false);
        let state = State::new(km, at_once(), 1000);
        let theme = Theme::load("default", Path::new("/nonexistent")).0;
        let mut term = Terminal::new(TestBackend::new(140, 40)).unwrap();
        let s =
            partop::ui::app::run_with(&mut term, state, &theme, snap_rx, runner, rx, |_| Ok(()))
                .await
                .unwrap();
        (s, term)
    });
    // The loop takes samples as they change, as from the collector.
    publish.send(Arc::new(snap)).unwrap();
    Monitor { app, tx, said }
}

impl Monitor {
    fn wait_said(&self, what: &str, prefix: &str) -> String {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = self
                .said
                .lock()
                .unwrap()
                .iter()
                .find(|s| s.starts_with(prefix))
            {
                return s.clone();
            }
            assert!(Instant::now() < end, "not within 60 s: {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn quit(self, rt: &tokio::runtime::Runtime) -> (State, String) {
        // Whatever the runner said before is queued ahead of Quit on the same channel.
        std::thread::sleep(Duration::from_millis(300));
        self.tx.blocking_send(Msg::Command(Command::Quit)).unwrap();
        let (s, t) = rt.block_on(self.app).unwrap();
        (s, format!("{}", t.backend()))
    }
}

async fn uid(c: &kube::Client, name: &str) -> Option<String> {
    Api::<Pod>::namespaced(c.clone(), "sim")
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|p| p.metadata.uid)
}

/// A screen line with a finding's age (`since 1h 0m ago`) said as `since <age> ago`, its width
/// kept (the blanks before the line's last character absorb the difference).
fn redact_age(line: &str) -> String {
    let (Some(a), Some(b)) = (line.find("· since "), line.find(" ago")) else {
        return line.to_string();
    };
    let width = line.chars().count();
    let head = format!("{}· since <age>{}", &line[..a], &line[b..]);
    let Some(last) = head.trim_end_matches(['"', '│']).rfind(|c: char| c != ' ') else {
        return head;
    };
    let (text, tail) = head.split_at(last + head[last..].chars().next().map_or(1, char::len_utf8));
    let tail_end = tail.trim_start_matches(' ');
    let pad = width.saturating_sub(text.chars().count() + tail_end.chars().count());
    format!("{text}{}{tail_end}", " ".repeat(pad))
}

/// Opens the ask on the reclaimable partition: Findings (5), act (x); waits for the lookup.
fn open_ask(m: &Monitor) -> String {
    m.tx.blocking_send(key("5")).unwrap();
    m.tx.blocking_send(key("x")).unwrap();
    m.wait_said("the API server's answer about the pod", "looked")
}

fn journal_actions(dir: &Path) -> Vec<(String, serde_json::Value, serde_json::Value)> {
    partop::exec::journal::read(&dir.join("journal.jsonl"))
        .map(|(e, _)| e)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.action, e.targets, e.outcome))
        .collect()
}

#[test]
fn a_reclaimable_pods_eviction_is_offered_confirmed_journaled_and_a_budget_is_never_bypassed() {
    let cp = ControlPlane::start();
    let rt = runtime();
    let c = rt.block_on(async {
        let c = admin(&cp).await;
        namespace(&c, "sim").await;
        start_node(&c, NODE, &Arc::new(Mutex::new(8)), false);
        for name in ["idle", "guarded", "swapped"] {
            make_pod(&c, "sim", name, NODE, &[("app", name)]).await;
        }
        for name in ["idle", "guarded", "swapped"] {
            until("the pod runs", || pod_ready(&c, "sim", name)).await;
        }
        c
    });
    let mut cases = 0;

    // 1. Offered, confirmed by typing the pod's name, evicted through the Eviction API and
    //    gone; journaled before it was sent; the outcome on screen.
    let dir = tempfile::tempdir().unwrap();
    let m = monitor(&rt, &cp, dir.path(), node_with("idle"));
    let looked = open_ask(&m);
    let idle_uid = rt.block_on(uid(&c, "idle")).unwrap();
    assert!(
        looked.contains(&idle_uid),
        "the ask carries the pod's UID: {looked}"
    );
    // A wrong word does nothing.
    typed(&m.tx, "idl");
    m.tx.blocking_send(key("enter")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        rt.block_on(uid(&c, "idle")).is_some(),
        "not evicted on a wrong word"
    );
    typed(&m.tx, "e");
    m.tx.blocking_send(key("enter")).unwrap();
    let done = m.wait_said("the eviction's end", "evict Done");
    assert!(
        done.contains("Ok(") && done.contains("evicted and gone"),
        "{done}"
    );
    assert!(rt.block_on(uid(&c, "idle")).is_none(), "the pod is gone");
    let (state, screen) = m.quit(&rt);
    assert!(state.evict_ask.is_none());
    assert!(
        screen.contains("evicted and gone"),
        "the outcome on screen:\n{screen}"
    );
    let j = journal_actions(dir.path());
    let actions: Vec<&str> = j.iter().map(|(a, _, _)| a.as_str()).collect();
    assert_eq!(actions, ["pod.evict", "pod.evict.result"], "{j:?}");
    assert_eq!(j[0].1["uid"], idle_uid.as_str());
    assert_eq!(j[0].1["node"], NODE);
    assert_eq!(j[1].2["ok"], true);
    // `partop journal` says it in words; the one fold holds it, closed.
    let o = common::run(
        common::partop()
            .arg("--journal")
            .arg(dir.path().join("journal.jsonl"))
            .arg("journal"),
        "",
    );
    assert!(
        o.stdout.contains("of pod sim/idle (uid ") && o.stdout.contains("evicted and gone"),
        "{}{}",
        o.stdout,
        o.stderr
    );
    let entries = partop::exec::journal::read(&dir.path().join("journal.jsonl"))
        .unwrap()
        .0;
    let runs = partop::domain::journal::Runs::of(&entries);
    assert_eq!(runs.evictions.len(), 1);
    assert_eq!(runs.evictions[0].pod, "sim/idle");
    assert!(runs.evictions[0].outcome.as_ref().is_some_and(|o| o.0));
    assert!(runs.runs.is_empty(), "an eviction is not a run to resume");
    cases += 1;

    // 2. The overlay, as the operator sees it before typing (the UID, which changes per run,
    //    redacted).
    let dir = tempfile::tempdir().unwrap();
    let m = monitor(&rt, &cp, dir.path(), node_with("guarded"));
    open_ask(&m);
    let (state, screen) = m.quit(&rt);
    let ask = state.evict_ask.as_ref().expect("the ask is open");
    // The finding's age is the wall clock's against the recording's: redacted like the UID
    // (it read "since 0s ago" or "since 1h 0m ago" depending on which came first).
    let screen = screen.replace(&ask.uid, "<uid>");
    let screen: String = screen.lines().map(|l| redact_age(l) + "\n").collect();
    insta::assert_snapshot!("evict_ask__140x40", screen);
    assert!(
        journal_actions(dir.path()).is_empty(),
        "nothing journaled before the confirmation"
    );
    cases += 1;

    // 3. A budget that allows no disruption: said on screen with its name, retried, never
    //    bypassed: the pod stays.
    rt.block_on(budget(&c, "sim", "guarded", 1, 1));
    let guarded_uid = rt.block_on(uid(&c, "guarded")).unwrap();
    let m = monitor(&rt, &cp, dir.path(), node_with("guarded"));
    open_ask(&m);
    typed(&m.tx, "guarded");
    m.tx.blocking_send(key("enter")).unwrap();
    let blocked = m.wait_said("the budget's refusal", "evict Blocked");
    assert!(
        blocked.contains("sim/guarded-pdb") && blocked.contains("never bypassed"),
        "{blocked}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        rt.block_on(uid(&c, "guarded")).as_deref(),
        Some(guarded_uid.as_str()),
        "the budget's pod stays"
    );
    let (_, screen) = m.quit(&rt);
    assert!(
        screen.contains("refused by the PodDisruptionBudget"),
        "{screen}"
    );
    let j = journal_actions(dir.path());
    assert_eq!(
        j.len(),
        1,
        "journaled before it was sent, no result while retried: {j:?}"
    );
    assert_eq!(j[0].0, "pod.evict");
    cases += 1;

    // 4. The pod replaced between the ask and the confirmation (same name, a new UID): refused
    //    with the reason; the new pod is untouched.
    let dir = tempfile::tempdir().unwrap();
    let m = monitor(&rt, &cp, dir.path(), node_with("swapped"));
    open_ask(&m);
    let old = rt.block_on(uid(&c, "swapped")).unwrap();
    rt.block_on(async {
        Api::<Pod>::namespaced(c.clone(), "sim")
            .delete("swapped", &DeleteParams::default())
            .await
            .unwrap();
        until("the old pod is gone", || async {
            uid(&c, "swapped").await.is_none()
        })
        .await;
        make_pod(&c, "sim", "swapped", NODE, &[("app", "swapped")]).await;
    });
    let new = rt.block_on(uid(&c, "swapped")).unwrap();
    assert_ne!(old, new);
    typed(&m.tx, "swapped");
    m.tx.blocking_send(key("enter")).unwrap();
    let done = m.wait_said("the refusal", "evict Done");
    assert!(
        done.contains("Err(") && done.contains("is another pod now"),
        "{done}"
    );
    let (_, screen) = m.quit(&rt);
    assert!(screen.contains("not evicted"), "{screen}");
    assert_eq!(
        rt.block_on(uid(&c, "swapped")),
        Some(new),
        "the new pod is untouched"
    );
    assert!(
        journal_actions(dir.path()).is_empty(),
        "a refused pod is not journaled as evicted"
    );
    cases += 1;
    eprintln!("{cases} cases against the control plane");
}

/// The same key on a partition held by a model (no Kubernetes) opens the Models view's stop ask;
/// by a bare process, the kill dialog; in read-only, nothing. A pod's confirmation is void when
/// the newest sample no longer shows the pod on its GPU; a pod's name is escaped in the ask.
/// Through the reducer: 5 cases.
#[test]
fn the_other_holders_flows_and_read_only() {
    let fresh = |snap: Snapshot| {
        let (km, _) = Keymap::load("default", None, false);
        let mut s = State::new(km, at_once(), 1000);
        update(&mut s, Msg::Snapshot(Arc::new(snap)));
        update(&mut s, Msg::Command(Command::ViewFindings));
        s
    };
    let pick = |s: &mut State, gpu: u32| {
        s.finding_sel = s
            .findings
            .iter()
            .position(|f| f.gpu_id == gpu && f.kind == partop::domain::findings::Kind::Reclaimable)
            .unwrap_or_else(|| panic!("a reclaimable finding on GPU {gpu}: {:?}", s.findings));
    };
    // A bare process: the kill dialog on it.
    let mut snap = recorded("dpx-nps2-two-models");
    for l in snap.gpus.iter_mut().flat_map(|g| &mut g.partitions) {
        l.gfx_busy_percent = Some(0.0);
    }
    snap.models.clear();
    let held = snap
        .processes
        .iter()
        .find(|p| p.gpus.iter().any(|u| !u.attached_only()))
        .unwrap();
    let (pid, gpu) = (held.pid, held.gpus[0].gpu_id);
    let mut s = fresh(snap.clone());
    pick(&mut s, gpu);
    let e = update(&mut s, Msg::Command(Command::FindingAct));
    assert_eq!(e, vec![Effect::ScanHolders]);
    let d = s.dialog.as_ref().expect("the kill dialog");
    assert!(d.plan.targets.iter().any(|t| t.pid == pid), "{:?}", d.plan);
    // A model with a registry entry: its stop ask.
    let mut snap = recorded("dpx-nps2-two-models");
    for l in snap.gpus.iter_mut().flat_map(|g| &mut g.partitions) {
        l.gfx_busy_percent = Some(0.0);
    }
    let p = snap.processes[0].clone();
    let spec = partop::domain::models::parse(
        "t",
        "[[model]]\nname = \"idle-model\"\nmodel = \"org/m\"\nport = 18997\nmemory_gb = 10\nlaunch.command = [\"true\"]\n",
    )
    .map(|r| r.models[0].clone())
    .expect("a registry entry");
    let bdf = snap
        .logical()
        .find(|(_, l)| l.gpu_id == p.gpus[0].gpu_id)
        .map(|(_, l)| l.bdf.clone())
        .unwrap();
    let mut served: partop::domain::model_status::ServedModel = serde_json::from_value(
        serde_json::json!({"name": "idle-model", "model": "org/m", "pid": p.pid,
            "gpus": [p.gpus[0].gpu_id], "bdfs": [bdf], "state": "healthy", "restarts": 0,
            "log_tail": []}),
    )
    .unwrap();
    served.spec = Some(spec);
    snap.models = vec![served];
    let m = &snap.models[0];
    let gpu = m.gpus[0];
    let name = m.name.clone();
    let mut s = fresh(snap);
    pick(&mut s, gpu);
    assert!(update(&mut s, Msg::Command(Command::FindingAct)).is_empty());
    let a = s.model_ask.as_ref().expect("the model's stop ask");
    assert_eq!(a.action, partop::ui::state::ModelAction::Stop { name });
    // Read-only: no action, said.
    let mut s = fresh(node_with("idle"));
    s.read_only = true;
    pick(&mut s, 0);
    assert!(update(&mut s, Msg::Command(Command::FindingAct)).is_empty());
    assert!(s.notice.as_ref().is_some_and(|n| n.0.contains("read-only")));
    // A pod no longer on its GPU when confirmed: no eviction.
    let mut s = fresh(node_with("idle"));
    pick(&mut s, 0);
    let at = match update(&mut s, Msg::Command(Command::FindingAct)).as_slice() {
        [Effect::LookupPod(at)] => at.clone(),
        other => panic!("{other:?}"),
    };
    update(&mut s, Msg::PodLooked(Ok((at, "u-1".into()))));
    assert!(s.evict_ask.is_some());
    update(&mut s, Msg::Snapshot(Arc::new(node_with("another"))));
    for c in "idle".chars() {
        update(&mut s, key(&c.to_string()));
    }
    let e = update(&mut s, key("enter"));
    assert!(e.is_empty(), "{e:?}");
    assert!(
        s.eviction
            .as_ref()
            .is_some_and(|t| t.contains("no longer holds GPU 0")),
        "{:?}",
        s.eviction
    );
    // A pod name with an escape sequence (the kubelet's words): the ask never prints it raw.
    let mut s = fresh(node_with("evil\u{1b}[31m"));
    pick(&mut s, 0);
    let at = match update(&mut s, Msg::Command(Command::FindingAct)).as_slice() {
        [Effect::LookupPod(at)] => at.clone(),
        other => panic!("{other:?}"),
    };
    update(&mut s, Msg::PodLooked(Ok((at, "u-2".into()))));
    let ask = s.evict_ask.as_ref().unwrap();
    let all = format!("{}\n{}", ask.title(), ask.lines().join("\n"));
    assert!(!all.contains('\u{1b}') && all.contains("\\x1b"), "{all}");
    eprintln!("5 reducer cases");
}
