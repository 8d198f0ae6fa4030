//! A rollout staged in the live cluster view (issue 26, item 2), headless: the cluster app in
//! the one loop (`ui::cluster::app::run_staging` over a `TestBackend`, scripted keys), fed by
//! partop's own watch of a real kube-apiserver on loopback, with `partop sim cluster` (its DCM
//! stand-in, a simulated GPU node changed through its amd-smi, its kubelets finishing
//! deletions), and the command layer's own rollouts (`cli::cluster_rollouts::KubeRollouts`:
//! the planner of `fleet --kubernetes plan`, the apply path of `fleet --kubernetes apply`). No
//! mock API server. Covered: nodes tagged one by one and all shown, a layout typed, the plan in
//! the overlay (snapshot) with a node no DCM can change refused and said, the set's fingerprint
//! typed, the rollout to its end (labels set, uncordoned, the journal step for step what the
//! apply protocol writes); then a node DCM fails: the view shows its reason and undo, the set
//! stops, the next node untouched, and `partop fleet --kubernetes apply --resume` finishes
//! the view's own rollout from the view's journal.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::control_plane::{cordoned, kube, label, node};
use common::fleet_journal;
use common::k8s_api::runtime;
use common::sim_cluster::start_cluster;
use partop::cli::cluster_rollouts::KubeRollouts;
use partop::collect::cluster::{self, Target, Watch};
use partop::domain::cluster_rollout::{ClusterPlanSet, Step};
use partop::ui::cluster::rollout::ClusterRollouts;
use partop::ui::cluster::stage::NodeState;
use partop::ui::cluster::{ClusterMsg, ClusterState};
use partop::ui::command::Command;
use partop::ui::fleet::Phase;
use partop::ui::keymap::Keymap;
use partop::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What the apply protocol journals for one node that goes through every step: started, each
/// step before it acts and when done, in the engine's order, then done.
fn node_lines(n: &str) -> Vec<(String, String, String)> {
    let l = |a: &str, s: String| (a.to_string(), n.to_string(), s);
    let mut v = vec![l("fleet.node.start", String::new())];
    for s in Step::ALL {
        v.push(l("fleet.node.step", s.key().to_string()));
        v.push(l("fleet.node.step", format!("{}:done", s.key())));
    }
    v.push(l("fleet.node.done", String::new()));
    v
}

/// One scripted thing: a message to the loop, or a wait for the cluster or the journal.
enum Act<'a> {
    Send(ClusterMsg),
    Until(&'static str, Box<dyn Fn() -> bool + Send + 'a>),
}

fn key(c: KeyCode) -> Act<'static> {
    Act::Send(ClusterMsg::Key(KeyEvent::new(c, KeyModifiers::NONE)))
}

fn typed(text: &str) -> Vec<Act<'static>> {
    text.chars().map(|c| key(KeyCode::Char(c))).collect()
}

/// Tags the one node `/name` shows with the fleet's tag key.
fn tag(name: &str) -> Vec<Act<'static>> {
    let mut v = vec![key(KeyCode::Char('/'))];
    v.extend(typed(name));
    v.extend([
        key(KeyCode::Enter),
        key(KeyCode::Char(' ')),
        key(KeyCode::Esc),
    ]);
    v
}

/// One phase of the loop: `acts` scripted in order (each key 30 ms apart, each wait at most
/// three minutes), then quit. Returns the state and the last screen.
fn phase(
    rt: &tokio::runtime::Runtime,
    w: &Watch,
    state: ClusterState,
    rollouts: &Arc<dyn ClusterRollouts>,
    acts: Vec<Act<'_>>,
) -> (ClusterState, String) {
    let (tx, mut rx) = mpsc::channel(64);
    let theme = Theme::load("default", Path::new("/nonexistent")).0;
    std::thread::scope(|sc| {
        let script = tx.clone();
        sc.spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            for a in acts {
                match a {
                    Act::Send(m) => {
                        script.blocking_send(m).unwrap();
                        std::thread::sleep(Duration::from_millis(30));
                    }
                    Act::Until(what, f) => {
                        let end = Instant::now() + Duration::from_secs(180);
                        while !f() {
                            assert!(Instant::now() < end, "not within 3 min: {what}");
                            std::thread::sleep(Duration::from_millis(100));
                        }
                        // What came is reduced and drawn (the loop's frame is 200 ms).
                        std::thread::sleep(Duration::from_millis(800));
                    }
                }
            }
            // A command, not `q`: an open overlay stays on the last screen.
            script
                .blocking_send(ClusterMsg::Command(Command::Quit))
                .unwrap();
        });
        rt.block_on(async {
            let mut term = Terminal::new(TestBackend::new(140, 40)).unwrap();
            let run = partop::ui::cluster::app::run_staging(
                &mut term,
                state,
                &theme,
                w,
                None,
                Some(Arc::clone(rollouts)),
                tx,
                &mut rx,
            );
            let s = tokio::time::timeout(Duration::from_secs(600), run)
                .await
                .expect("the phase ends within ten minutes")
                .unwrap();
            (s, format!("{}", term.backend()))
        })
    })
}

/// The sets the view saved.
fn sets(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn set_of(f: &Path) -> ClusterPlanSet {
    serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap()
}

/// The screen with the set's and its plans' fingerprints (pod UIDs go into them) masked.
fn masked(screen: &str, set: &ClusterPlanSet) -> String {
    let mut s = screen.to_string();
    for fp in std::iter::once(&set.fingerprint).chain(set.nodes.iter().map(|n| &n.fingerprint)) {
        s = s.replace(fp.as_str(), &"#".repeat(fp.len()));
    }
    s
}

#[test]
fn a_rollout_staged_in_the_cluster_view_runs_to_its_end_and_stops_at_a_failure() {
    // Four AMD nodes under DCM (the first a simulated GPU node) and one NVIDIA node under the
    // MIG manager, which no AMD layout can go to.
    let (cp, dir, sim) = start_cluster(&["--nodes", "5", "--gpu-nodes", "1", "--mig-nodes", "1"]);
    let d = dir.path();
    kube(
        &cp,
        &["create", "serviceaccount", "default", "-n", "default"],
    );
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  namespace: default\n  labels:\n    app: web\nspec:\n  nodeName: sim-amd-0000\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: c\n    image: partop/sim\n    resources:\n      limits:\n        amd.com/gpu: \"1\"\n";
    std::fs::write(d.join("pod.yaml"), pod).unwrap();
    kube(&cp, &["apply", "-f", d.join("pod.yaml").to_str().unwrap()]);
    let running = || {
        kube(&cp, &["get", "pod", "web-0", "-n", "default", "-o", "json"]).contains("\"Running\"")
    };
    let end = Instant::now() + Duration::from_secs(60);
    while !running() {
        assert!(Instant::now() < end, "web-0 never ran");
        std::thread::sleep(Duration::from_millis(200));
    }

    let rt = runtime();
    let t = Target {
        kubeconfig: Some(cp.admin()),
        selector: Some("partop.sim/cluster=true".into()),
        ..Target::default()
    };
    let w = rt.block_on(async {
        let c = cluster::client(&t).await.unwrap();
        let w = cluster::start(c, &t);
        w.ready(Duration::from_secs(30)).await.unwrap();
        w
    });
    let fj = d.join("fleet-journal.jsonl");
    let set_dir = d.join("sets");
    let rollouts: Arc<dyn ClusterRollouts> = Arc::new(KubeRollouts {
        target: t.clone(),
        fleet_journal: fj.clone(),
        journal: d.join("journal.jsonl"),
        dir: set_dir.clone(),
        parallel: 1,
        // No node here is unmanaged: the view reaches none over ssh.
        reach: partop::exec::cluster_rollout::Reach {
            transport: partop::collect::fleet::Transport {
                ssh: "ssh".into(),
                ssh_config: None,
                control_dir: d.join("ssh"),
                connect_timeout: Duration::from_secs(5),
                refresh: 1,
                concurrency: 1,
                local: env!("CARGO_BIN_EXE_partop").into(),
            },
            dests: Default::default(),
            user: None,
            partop: "partop".into(),
        },
    });
    let state = ClusterState::new(
        Keymap::load("default", None, false).0,
        "test cluster".into(),
    );

    // Two DCM nodes tagged with the tag key, the NVIDIA node with tag-all-shown under a filter
    // that shows only it; p; the layout typed; the plan.
    let mut acts = Vec::new();
    let wr = &w;
    acts.push(Act::Until(
        "the watch lists five nodes",
        Box::new(move || wr.view().0.len() == 5),
    ));
    acts.extend(tag("sim-amd-0000"));
    acts.extend(tag("sim-amd-0001"));
    acts.push(key(KeyCode::Char('/')));
    acts.extend(typed("sim-nv"));
    acts.extend([
        key(KeyCode::Enter),
        key(KeyCode::Char('a')),
        key(KeyCode::Esc),
    ]);
    acts.push(key(KeyCode::Char('p')));
    acts.extend(typed("cpx_nps4"));
    acts.push(key(KeyCode::Enter));
    let sd = set_dir.clone();
    acts.push(Act::Until(
        "the plan is saved",
        Box::new(move || !sets(&sd).is_empty()),
    ));
    let (s, screen) = phase(&rt, &w, state, &rollouts, acts);
    let tagged: Vec<&str> = s.tagged.iter().map(String::as_str).collect();
    assert_eq!(
        tagged,
        ["sim-amd-0000", "sim-amd-0001", "sim-nv-0004"],
        "{screen}"
    );
    let st = s.stage.as_ref().expect("the stage is open");
    assert_eq!(st.phase, Phase::Review, "{screen}");
    let planned = st.planned.as_ref().unwrap();
    assert_eq!(planned.nodes, ["sim-amd-0000", "sim-amd-0001"], "{screen}");
    assert_eq!(planned.refused.len(), 1, "{screen}");
    let file = planned.staged.as_ref().unwrap().file.clone();
    let set = set_of(&file);
    assert_eq!(
        set.fingerprint,
        planned.staged.as_ref().unwrap().fingerprint
    );
    for want in [
        "sim-amd-0000: DCM profile partop-cpx-nps4",
        "evict default/web-0 (amd.com/gpu=1) · no PodDisruptionBudget",
        "allocatable after: amd.com/gpu=64",
        "gpu-config-profiles.partop-cpx-nps4 is created",
        "refused: sim-nv-0004 advertises no AMD GPU resource",
        "1 node(s) refused (above): left out of the set",
    ] {
        assert!(
            screen.contains(want),
            "the overlay shows {want:?}:\n{screen}"
        );
    }
    // The plan is the CLI's: `fleet --kubernetes plan` prints the same lines.
    insta::assert_snapshot!("cluster_stage_plan__140x40", masked(&screen, &set));

    // Confirmed by typing the set's fingerprint (a wrong word first: refused, said); the
    // rollout runs to its end.
    let fp = set.fingerprint.clone();
    let mut acts = vec![key(KeyCode::Enter)];
    acts.extend(typed("nope"));
    acts.push(key(KeyCode::Enter));
    acts.extend((0..4).map(|_| key(KeyCode::Backspace)));
    acts.extend(typed(&fp));
    acts.push(key(KeyCode::Enter));
    let j = fj.clone();
    acts.push(Act::Until(
        "the rollout ends in the fleet journal",
        Box::new(move || {
            fleet_journal::steps(&j)
                .iter()
                .any(|x| x.0 == "fleet.rollout.done" || x.0 == "fleet.rollout.stopped")
        }),
    ));
    let (s, screen) = phase(&rt, &w, s, &rollouts, acts);
    let st = s.stage.as_ref().unwrap();
    assert_eq!(
        st.phase,
        Phase::Done(Ok(())),
        "{screen}\nsim: {}",
        sim.said.lock().unwrap()
    );
    assert!(
        st.progress.iter().all(|(_, p)| *p == NodeState::Done),
        "{:?}",
        st.progress
    );
    assert!(
        screen.contains("sim-amd-0000: done") && screen.contains("sim-amd-0001: done"),
        "{screen}"
    );
    assert!(
        screen.contains("rolled out: every node labelled"),
        "{screen}"
    );
    for n in ["sim-amd-0000", "sim-amd-0001"] {
        let x = node(&cp, n);
        assert_eq!(
            label(&x, "amd.com/compute-memory-partition"),
            "cpx_nps4",
            "{x}"
        );
        assert_eq!(
            label(&x, "dcm.amd.com/gpu-config-profile"),
            "partop-cpx-nps4"
        );
        assert_eq!(label(&x, "dcm.amd.com/gpu-config-profile-state"), "success");
        assert_eq!(x["status"]["allocatable"]["amd.com/gpu"], "64");
        assert!(!cordoned(&x), "{n} uncordoned");
    }
    assert!(
        !cordoned(&node(&cp, "sim-nv-0004")),
        "the refused node untouched"
    );
    // The journal is the apply protocol's, step for step: the set started (its file the one
    // the view saved), each node through every step in order, the set done.
    let j = fleet_journal::steps(&fj);
    let mut want = vec![(
        "fleet.rollout.start".to_string(),
        String::new(),
        String::new(),
    )];
    want.extend(node_lines("sim-amd-0000"));
    want.extend(node_lines("sim-amd-0001"));
    want.push(("fleet.rollout.done".into(), String::new(), String::new()));
    assert_eq!(j, want, "the fleet journal");
    let started: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&fj)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(started["targets"]["set"], fp.as_str(), "{started}");
    assert_eq!(
        started["targets"]["file"],
        file.display().to_string(),
        "{started}"
    );

    // A node DCM fails: the view shows its reason and undo, the set stops, the node after it
    // untouched.
    kube(
        &cp,
        &[
            "annotate",
            "node",
            "sim-amd-0002",
            "partop.sim/fail=firmware \u{1b}[2J said no",
        ],
    );
    let mut s = s;
    s.stage = None;
    s.tagged.clear();
    let before = sets(&set_dir).len();
    let mut acts = Vec::new();
    acts.extend(tag("sim-amd-0002"));
    acts.extend(tag("sim-amd-0003"));
    acts.push(key(KeyCode::Char('p')));
    acts.extend(typed("cpx_nps4"));
    acts.push(key(KeyCode::Enter));
    let sd = set_dir.clone();
    acts.push(Act::Until(
        "the second plan is saved",
        Box::new(move || sets(&sd).len() > before),
    ));
    let (s, screen) = phase(&rt, &w, s, &rollouts, acts);
    let st = s.stage.as_ref().unwrap();
    let staged = st
        .planned
        .as_ref()
        .and_then(|p| p.staged.clone())
        .unwrap_or_else(|| panic!("{screen}"));
    let mut acts = vec![key(KeyCode::Enter)];
    acts.extend(typed(&staged.fingerprint));
    acts.push(key(KeyCode::Enter));
    let j = fj.clone();
    acts.push(Act::Until(
        "the second rollout stops",
        Box::new(move || {
            fleet_journal::steps(&j)
                .iter()
                .any(|x| x.0 == "fleet.rollout.stopped")
        }),
    ));
    let (s, screen) = phase(&rt, &w, s, &rollouts, acts);
    let st = s.stage.as_ref().unwrap();
    let Phase::Done(Err(e)) = &st.phase else {
        panic!("the set stops: {:?}\n{screen}", st.phase);
    };
    assert!(
        e.contains("untouched: sim-amd-0003") && e.contains("--resume"),
        "{e}"
    );
    assert!(
        matches!(&st.progress[..], [(a, NodeState::Failed(why)), (b, NodeState::Waiting)]
            if a == "sim-amd-0002" && b == "sim-amd-0003" && why.contains("PartitionFailure")),
        "{:?}",
        st.progress
    );
    for want in [
        "sim-amd-0002: FAILED failed at wait_state",
        "firmware \\x1b[2J said no",
        "kubectl uncordon sim-amd-0002",
        "sim-amd-0003: waiting",
        "untouched: sim-amd-0003",
    ] {
        assert!(screen.contains(want), "the view shows {want:?}:\n{screen}");
    }
    assert!(
        !screen.contains('\u{1b}'),
        "DCM's words reach the screen escaped:\n{screen}"
    );
    assert!(
        cordoned(&node(&cp, "sim-amd-0002")),
        "left cordoned, said with its undo"
    );
    let n3 = node(&cp, "sim-amd-0003");
    assert!(!cordoned(&n3) && label(&n3, "dcm.amd.com/gpu-config-profile").is_empty());

    // The failure cleared, `partop fleet --kubernetes apply --resume` finishes the view's
    // rollout from the view's journal: the same protocol, the same journal.
    kube(
        &cp,
        &["annotate", "node", "sim-amd-0002", "partop.sim/fail-"],
    );
    let r = common::run(
        common::partop()
            .arg("--journal")
            .arg(d.join("journal.jsonl"))
            .args(["fleet", "--kubernetes", "--kubeconfig"])
            .arg(cp.admin())
            .args([
                "-l",
                "partop.sim/cluster=true",
                "apply",
                "--yes",
                "--resume",
            ])
            .arg(&staged.file),
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("sim-amd-0002: resuming at the step where it stopped"),
        "{}",
        r.stdout
    );
    for n in ["sim-amd-0002", "sim-amd-0003"] {
        let x = node(&cp, n);
        assert_eq!(
            label(&x, "amd.com/compute-memory-partition"),
            "cpx_nps4",
            "{x}"
        );
        assert!(!cordoned(&x));
    }
    drop(w);
}
