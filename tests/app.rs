//! The headless app tier: the whole monitor loop (`ui::app::run_with`) over a ratatui
//! `TestBackend` with scripted input, through the real effect runner, the real executors and,
//! for staging, the real collector task on a simulated node and a real detached `partop apply`.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::nodes::recorded;
use common::{Node, partop, quick, run, wait_until};
use partop::collect::task::Request;
use partop::domain::findings::Thresholds;
use partop::domain::snapshot::{GpuUse, Process, Snapshot};
use partop::ui::command::Command;
use partop::ui::effect::{EffectRunner, ExecSettings, LocalNode};
use partop::ui::keymap::Keymap;
use partop::ui::state::{Msg, State};
use partop::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{mpsc, watch};

fn exec(dir: &Path, sim_state: Option<PathBuf>) -> ExecSettings {
    ExecSettings::Local(local(dir, sim_state))
}

fn local(dir: &Path, sim_state: Option<PathBuf>) -> LocalNode {
    LocalNode {
        journal: dir.join("from-config/journal.jsonl"),
        proc_root: "/proc".into(),
        models: sim_state
            .as_deref()
            .map(partop::sim::session::registry_path),
        model_log_dir: dir.join("models"),
        sim_state,
        nvidia_smi: None,
        nvidia_replay: false,
        exe: env!("CARGO_BIN_EXE_partop").into(),
        apply_dir: dir.join("apply"),
        kube: partop::collect::cluster::Target::default(),
    }
}

fn keys(tx: &mpsc::Sender<Msg>, text: &[&str]) {
    for k in text {
        let code = match *k {
            "enter" => KeyCode::Enter,
            "tab" => KeyCode::Tab,
            c => KeyCode::Char(c.chars().next().unwrap()),
        };
        tx.blocking_send(Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)))
            .unwrap();
    }
}

type App = tokio::task::JoinHandle<(State, Terminal<TestBackend>)>;

/// Starts the app loop on `rt` with the given snapshots and runner; returns its handle.
fn start(
    rt: &tokio::runtime::Runtime,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    runner: EffectRunner,
    rx: mpsc::Receiver<Msg>,
) -> App {
    rt.spawn(async move {
        let (km, _) = Keymap::load("default", None, false);
        let state = State::new(km, Thresholds::default(), 1000);
        let theme = Theme::load("default", Path::new("/nonexistent")).0;
        let mut term = Terminal::new(TestBackend::new(160, 45)).unwrap();
        let s =
            partop::ui::app::run_with(&mut term, state, &theme, snapshots, runner, rx, |_| Ok(()))
                .await
                .unwrap();
        (s, term)
    })
}

fn screen(t: &Terminal<TestBackend>) -> String {
    format!("{}", t.backend())
}

#[test]
fn a_kill_confirmed_in_the_dialog_reaches_the_process_and_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let mut victim = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = victim.id();
    let mut snap = recorded("dpx-nps2-two-models");
    snap.processes.push(Process {
        pid,
        name: Some("sleep".into()),
        command: Some("sleep 60".into()),
        user: Some("root".into()),
        start_ticks: partop::exec::signal::start_ticks(Path::new("/proc"), pid),
        gpus: vec![GpuUse {
            gpu_id: 0,
            vram_bytes: Some(1 << 30),
            ..GpuUse::default()
        }],
        ..Process::default()
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (snap_tx, snap_rx) = watch::channel(Arc::new(Snapshot::default()));
    let (req_tx, _req_rx) = mpsc::channel(8);
    let (tx, rx) = mpsc::channel(64);
    let runner = EffectRunner {
        exec: exec(dir.path(), None),
        requests: req_tx,
        tx: tx.clone(),
    };
    let app = start(&rt, snap_rx, runner, rx);
    snap_tx.send(Arc::new(snap)).unwrap();
    keys(
        &tx,
        &[
            "3", "/", "s", "l", "e", "e", "p", "enter", "K", "tab", "enter",
        ],
    );
    wait_until("the process to end", || {
        victim.try_wait().unwrap().is_some()
    });
    let journal = dir.path().join("from-config/journal.jsonl");
    wait_until("the result to be journaled", || {
        partop::exec::journal::read(&journal)
            .unwrap()
            .0
            .iter()
            .any(|e| e.action == "kill.sigterm.result")
    });
    // The runner sends Done right after journaling the result; give that message a moment to
    // be queued ahead of Quit (both travel the same channel, in order).
    std::thread::sleep(std::time::Duration::from_millis(200));
    tx.blocking_send(Msg::Command(Command::Quit)).unwrap();
    let (state, term) = rt.block_on(app).unwrap();
    let d = state
        .dialog
        .as_ref()
        .expect("the dialog stays open with the outcome");
    assert_eq!(d.status.get(&pid).map(String::as_str), Some("exited"));
    assert!(screen(&term).contains("exited"), "{}", screen(&term));
    let (entries, _) = partop::exec::journal::read(&journal).unwrap();
    let actions: Vec<&str> = entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        ["kill.sigterm", "kill.sigterm.sent", "kill.sigterm.result"]
    );
    assert_eq!(entries[0].targets[0]["pid"], pid);
}

#[test]
fn staging_applies_follows_the_journal_rescans_and_draws_the_new_layout() {
    let node = Node::start(&quick("app", "7.0.2", "SPX", "NPS1", ""));
    let dir = node.dir.path().to_path_buf();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let n = partop::node::open_with(
        &partop::node::SourceArgs {
            sim_state: Some(node.state.clone()),
            timeout: 10.0,
            ..partop::node::SourceArgs::default()
        },
        Path::new(env!("CARGO_BIN_EXE_partop")),
    )
    .unwrap();
    let (snap_tx, snap_rx) = watch::channel(Arc::new(Snapshot::default()));
    let (coll_tx, coll_rx) = mpsc::channel(8);
    let watcher = snap_rx.clone();
    let collector = {
        let _g = rt.enter();
        partop::collect::task::spawn(
            n.collector(),
            std::time::Duration::from_secs(1),
            snap_tx,
            coll_rx,
        )
    };
    // The app's requests go to the real collector task, counted on the way.
    let rescans = Arc::new(AtomicUsize::new(0));
    let (req_tx, mut req_rx) = mpsc::channel::<Request>(8);
    {
        let rescans = Arc::clone(&rescans);
        rt.spawn(async move {
            while let Some(r) = req_rx.recv().await {
                if matches!(r, Request::Rescan) {
                    rescans.fetch_add(1, Ordering::SeqCst);
                }
                let _ = coll_tx.send(r).await;
            }
        });
    }
    // The kernel's sample comes first; staging waits for amd-smi's identity read.
    wait_until("the first sample with amd-smi's identity", || {
        let s = watcher.borrow();
        !s.gpus.is_empty() && s.reload.is_some()
    });
    let (tx, rx) = mpsc::channel(64);
    let settings = local(&dir, Some(node.state.clone()));
    let journal = settings.journal.clone();
    let runner = EffectRunner {
        exec: ExecSettings::Local(settings),
        requests: req_tx,
        tx: tx.clone(),
    };
    let app = start(&rt, snap_rx, runner, rx);
    keys(&tx, &["p", "m", "m", "enter"]);
    let host = partop::collect::host::hostname();
    for c in host.chars() {
        tx.blocking_send(Msg::Key(KeyEvent::new(
            KeyCode::Char(c),
            KeyModifiers::NONE,
        )))
        .unwrap();
    }
    keys(&tx, &["enter"]);
    // The detached apply writes the journal the monitor was configured with (--journal).
    wait_until("the apply to finish", || {
        partop::exec::journal::read(&journal)
            .unwrap()
            .0
            .iter()
            .any(|e| e.action == "repartition.done")
    });
    wait_until("the monitor to ask the collector for a rescan", || {
        rescans.load(Ordering::SeqCst) > 0
    });
    wait_until("the new layout to be sampled", || {
        watcher.borrow().logical_count() == 16
    });
    tx.blocking_send(Msg::Command(Command::Quit)).unwrap();
    let (state, term) = rt.block_on(app).unwrap();
    collector.abort();
    let p = state.applying.as_ref().expect("the apply was followed");
    assert_eq!(p.finished, Some(true));
    assert!(
        p.steps
            .iter()
            .all(|s| s.as_ref().is_some_and(|(ok, _)| *ok))
    );
    assert_eq!(state.snapshot.as_ref().unwrap().logical_count(), 16);
    let s = screen(&term);
    assert!(s.contains("DPX/NPS2"), "{s}");
    // The default journal was not written: one file, the configured one.
    assert!(!dir.join("xdg/partop/journal.jsonl").exists());
}

#[test]
fn a_config_error_refuses_every_command() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("partop")).unwrap();
    std::fs::write(
        dir.path().join("partop/config.toml"),
        "refresh_secs = \"fast\"\n",
    )
    .unwrap();
    for args in [
        vec!["snapshot", "--sim"],
        vec!["journal"],
        vec!["kill", "--dry-run", "1"],
        vec!["plan", "--memory", "NPS2", "--sim"],
        vec!["models", "--sim"],
        vec!["--sim"],
    ] {
        let o = run(
            partop()
                .env("XDG_CONFIG_HOME", dir.path())
                .env("XDG_STATE_HOME", dir.path())
                .args(&args),
            "",
        );
        assert_eq!(o.code, 1, "{args:?}: {}{}", o.stdout, o.stderr);
        assert!(
            o.stderr.contains("config.toml:1:") && o.stderr.contains("check-config"),
            "{args:?}: {}",
            o.stderr
        );
    }
}

/// The H200 as NVML reported it on the lent machine: a MIG-capable GPU to stage on.
fn h200_node() -> Snapshot {
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nvidia-smi/h200-nvml-record.json");
    let node: partop::collect::nvidia::NvNode =
        serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
    let now = partop::collect::clock::now_ms();
    let (gpus, processes) = partop::collect::nvidia::assemble(&node, now);
    Snapshot {
        host: "h200-node".into(),
        taken_at_ms: now,
        gpus,
        processes,
        ..Snapshot::default()
    }
}

/// How a case breaks the executor's settings.
type Setup = fn(&mut LocalNode);

#[test]
fn a_mig_apply_that_fails_to_start_clears_the_flag_and_stops_following() {
    // Every way the detached `partop mig apply` can fail to start, through the real effect
    // runner: the spawn refused (a recording), the program missing, and a partop that starts
    // and refuses before it journals a run (its nvidia-smi is missing).
    let cases: [(&str, Setup); 3] = [
        ("a recording", |e| e.nvidia_replay = true),
        ("no program", |e| e.exe = "/nonexistent/partop".into()),
        ("refused before journaling", |e| {
            e.nvidia_smi = Some("/nonexistent/nvidia-smi".into());
        }),
    ];
    for (name, setup) in cases {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (snap_tx, snap_rx) = watch::channel(Arc::new(Snapshot::default()));
        let (req_tx, mut req_rx) = mpsc::channel::<Request>(8);
        rt.spawn(async move { while req_rx.recv().await.is_some() {} });
        // What the runner sends back is relayed to the app and watched on the way: the start's
        // failure, the end it reports, and every journal read after it.
        let (tx, rx) = mpsc::channel(64);
        let (relay_tx, mut relay_rx) = mpsc::channel::<Msg>(64);
        let ended = Arc::new(AtomicUsize::new(0));
        let reads_after = Arc::new(AtomicUsize::new(0));
        {
            let (tx, ended, reads_after) =
                (tx.clone(), Arc::clone(&ended), Arc::clone(&reads_after));
            rt.spawn(async move {
                while let Some(m) = relay_rx.recv().await {
                    let end = matches!(&m, Msg::MigApplyStarted(Err(_)))
                        || matches!(&m, Msg::Journal(_, _, _, Some(_)));
                    let read = matches!(&m, Msg::Journal(..));
                    if tx.send(m).await.is_err() {
                        break;
                    }
                    if ended.load(Ordering::SeqCst) > 0 && read {
                        reads_after.fetch_add(1, Ordering::SeqCst);
                    }
                    if end {
                        ended.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        let mut settings = local(dir.path(), None);
        setup(&mut settings);
        let runner = EffectRunner {
            exec: ExecSettings::Local(settings),
            requests: req_tx,
            tx: relay_tx,
        };
        let app = start(&rt, snap_rx, runner, rx);
        // The sample is taken before any key (the loop prefers a ready sample).
        snap_tx.send(Arc::new(h200_node())).unwrap();
        for c in [
            Command::StageChange,
            Command::StageCycleCompute,
            Command::StageConfirm,
        ] {
            tx.blocking_send(Msg::Command(c)).unwrap();
        }
        for c in "h200-node"
            .chars()
            .map(KeyCode::Char)
            .chain([KeyCode::Enter])
        {
            tx.blocking_send(Msg::Key(KeyEvent::new(c, KeyModifiers::NONE)))
                .unwrap();
        }
        wait_until(&format!("{name}: the failed start to be reported"), || {
            ended.load(Ordering::SeqCst) > 0
        });
        // A read the app asked for before it took in the end may still land (the runner is
        // slow on a loaded machine): those are let settle, then not counted. Then three ticks:
        // a monitor still following would read the journal at each.
        std::thread::sleep(std::time::Duration::from_millis(2000));
        reads_after.store(0, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(3200));
        tx.blocking_send(Msg::Command(Command::Quit)).unwrap();
        let (mut state, _) = rt.block_on(app).unwrap();
        assert!(
            state.mig_staging.is_none(),
            "{name}: the plan was confirmed"
        );
        assert!(
            state.mig_applying.is_none() && state.mig_process.is_none(),
            "{name}: the applying flag is cleared"
        );
        let notice = state.notice.clone().map(|n| n.0).unwrap_or_default();
        assert!(
            notice.contains("could not start the apply of MIG plan")
                || notice.contains("ended without finishing"),
            "{name}: the operator is told: {notice}"
        );
        assert_eq!(
            reads_after.load(Ordering::SeqCst),
            0,
            "{name}: no journal read after the end (no follow loop)"
        );
        // And the reducer asks for none at the next second either.
        let next = state.journal_read_ms + 1000;
        let effects = partop::ui::state::update(&mut state, Msg::Tick(next));
        assert!(
            !effects.contains(&partop::ui::state::Effect::LoadJournal),
            "{name}: {effects:?}"
        );
        assert!(
            !partop::exec::journal::read(&dir.path().join("from-config/journal.jsonl"))
                .unwrap()
                .0
                .iter()
                .any(|e| e.action == "mig.start"),
            "{name}: no run was started"
        );
    }
    eprintln!("{} ways to fail to start, each cleared", cases.len());
}
