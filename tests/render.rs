//! Rendered screens, as text, for every view at 80x24 and 200x60 on recorded SPX/NPS1,
//! DPX/NPS2 and CPX/NPS4 nodes, a stale source, the help overlay and a live finding. Review
//! changes with `cargo insta review`.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::nodes::{T, pin, recorded};
use partop::domain::findings::Thresholds;
use partop::domain::snapshot::Health;
use partop::ui::command::Command;
use partop::ui::keymap::Keymap;
use partop::ui::state::{Msg, State, update};
use partop::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::path::Path;
use std::sync::Arc;

fn theme() -> Theme {
    Theme::load("default", Path::new("/nonexistent")).0
}

fn state_for(node: &str, w: u16, h: u16) -> State {
    let (km, _) = Keymap::load("default", None, false);
    let mut s = State::new(km, Thresholds::default(), 1000);
    s.scenario = Some(node.to_string());
    let snap = Arc::new(recorded(node));
    for _ in 0..6 {
        update(&mut s, Msg::Snapshot(Arc::clone(&snap)));
    }
    update(&mut s, Msg::Resize(w, h));
    update(&mut s, Msg::Tick(T + 2000));
    s
}

fn draw(s: &State, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    let th = theme();
    t.draw(|f| partop::ui::view::render(f, s, &th)).unwrap();
    format!("{}", t.backend())
}

const VIEWS: [(Command, &str); 5] = [
    (Command::ViewOverview, "overview"),
    (Command::ViewGpus, "gpus"),
    (Command::ViewProcesses, "processes"),
    (Command::ViewDetail, "detail"),
    (Command::ViewFindings, "findings"),
];

fn all_views(node: &str) {
    for (w, h) in [(80, 24), (200, 60)] {
        for (cmd, name) in VIEWS {
            let mut s = state_for(node, w, h);
            // Detail shows the second logical GPU (a secondary where there is one).
            update(&mut s, Msg::Command(Command::SelectNext));
            update(&mut s, Msg::Command(cmd));
            insta::assert_snapshot!(format!("{node}__{name}__{w}x{h}"), draw(&s, w, h));
        }
    }
}

#[test]
fn spx_nps1_views() {
    all_views("spx-nps1-one-model");
}

#[test]
fn dpx_nps2_views() {
    all_views("dpx-nps2-two-models");
}

#[test]
fn cpx_nps4_views() {
    all_views("cpx-nps4-small-models");
}

#[test]
fn stale_source_is_marked_and_its_error_shown() {
    for (w, h) in [(80, 24), (200, 60)] {
        let mut s = state_for("dpx-nps2-two-models", w, h);
        let mut snap = (*s.snapshot.clone().unwrap()).clone();
        let m = snap
            .sources
            .iter_mut()
            .find(|x| x.name == "amd-smi metric")
            .unwrap();
        m.status = Health::Stale;
        m.last_ok_ms = Some(T - 40_000);
        m.error = Some("timed out after 10s: `amd-smi metric -u -p -t -m --json -g all` (stopped; the last good values stay on screen)".into());
        update(&mut s, Msg::Snapshot(Arc::new(snap)));
        update(&mut s, Msg::Tick(T + 2000));
        let text = draw(&s, w, h);
        assert!(text.contains("metric STALE 42s"), "{text}");
        insta::assert_snapshot!(format!("stale_metric__{w}x{h}"), text);
    }
}

#[test]
fn help_overlay() {
    for (w, h) in [(80, 24), (200, 60)] {
        let mut s = state_for("dpx-nps2-two-models", w, h);
        update(&mut s, Msg::Command(Command::ViewProcesses));
        update(&mut s, Msg::Command(Command::ToggleHelp));
        let text = draw(&s, w, h);
        assert!(text.contains("Filter processes by text"), "{text}");
        insta::assert_snapshot!(format!("help__{w}x{h}"), text);
    }
}

#[test]
fn noisy_neighbour_finding() {
    let mut s = state_for("noisy-neighbour", 100, 30);
    let mut later = recorded("noisy-neighbour");
    pin(&mut later, T + 45_000);
    update(&mut s, Msg::Snapshot(Arc::new(later)));
    update(&mut s, Msg::Tick(T + 46_000));
    update(&mut s, Msg::Command(Command::ViewFindings));
    let text = draw(&s, 100, 30);
    assert!(
        text.contains("noisy neighbour · GPU 1 (0000:05:00.1)"),
        "{text}"
    );
    insta::assert_snapshot!("noisy_neighbour__100x30", text);
}

#[test]
fn monochrome_keeps_partitions_and_staleness_apart_without_colour() {
    let th = Theme::load("monochrome", Path::new("/nonexistent")).0;
    let mut s = state_for("dpx-nps2-two-models", 80, 24);
    let mut snap = (*s.snapshot.clone().unwrap()).clone();
    snap.sources[1].status = Health::Stale;
    update(&mut s, Msg::Snapshot(Arc::new(snap)));
    let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
    t.draw(|f| partop::ui::view::render(f, &s, &th)).unwrap();
    let buf = t.backend().buffer();
    let mut stale_reversed = false;
    for x in 0..80 {
        let c = &buf[(x, 2)];
        if c.symbol() == "S" && c.modifier.contains(ratatui::style::Modifier::REVERSED) {
            stale_reversed = true;
        }
        assert!(
            matches!(c.fg, ratatui::style::Color::Reset),
            "colour used at ({x},2)"
        );
    }
    assert!(stale_reversed, "STALE must stand out in monochrome");
}

#[test]
fn kill_dialog() {
    for (w, h) in [(80, 24), (200, 60)] {
        let mut s = state_for("dpx-nps2-two-models", w, h);
        s.own_pid = 1;
        update(&mut s, Msg::Command(Command::ViewProcesses));
        update(&mut s, Msg::Command(Command::KillProcess));
        let text = draw(&s, w, h);
        assert!(
            text.contains("[> Cancel <]") && text.contains("Send SIGTERM to 1"),
            "{text}"
        );
        insta::assert_snapshot!(format!("kill_dialog__{w}x{h}"), text);
    }
}

#[test]
fn staging_overlay() {
    let mut s = state_for("spx-nps1-one-model", 120, 40);
    update(&mut s, Msg::Command(Command::StageChange));
    update(&mut s, Msg::Command(Command::StageCycleCompute));
    update(&mut s, Msg::Command(Command::StageCycleCompute));
    update(&mut s, Msg::Command(Command::StageCycleMemory));
    update(&mut s, Msg::Command(Command::StageCycleMemory));
    let text = draw(&s, 120, 40);
    assert!(
        text.contains("staged  DPX/NPS2") && text.contains("amd-smi set -M NPS2"),
        "{text}"
    );
    insta::assert_snapshot!(
        "staging__120x40",
        text.replace(&partop::collect::host::hostname(), "HOST")
    );
}

/// The dpx-nps2 node with its two model servers as the prober would see them: one registered
/// (healthy, busy) and one discovered.
fn with_models(w: u16, h: u16) -> State {
    use partop::domain::model_status::{ModelState, ServedModel};
    use partop::domain::models::parse;
    let mut snap = recorded("dpx-nps2-two-models");
    let reg = parse(
        "models.toml",
        "[[model]]\nname = \"llama-70b\"\nmodel = \"meta-llama/Llama-3.1-70B-Instruct\"\nport = 8000\nmemory_gb = 80\nlaunch.command = [\"vllm\", \"serve\", \"{model}\", \"--port\", \"{port}\"]\n",
    )
    .unwrap();
    let pids: Vec<u32> = snap.processes.iter().map(|p| p.pid).collect();
    let base = ServedModel {
        name: "llama-70b".into(),
        model: "meta-llama/Llama-3.1-70B-Instruct".into(),
        server: Some("vllm".into()),
        spec: Some(reg.models[0].clone()),
        pid: pids.first().copied(),
        start_ticks: None,
        gpus: vec![0],
        bdfs: vec!["0000:05:00.0".into()],
        port: Some(8000),
        state: ModelState::Healthy,
        reason: None,
        running: Some(12.0),
        waiting: Some(3.0),
        kv_cache: Some(0.46),
        tokens_per_sec: Some(1830.0),
        restarts: 1,
        log: Some("/var/log/partop/llama-70b.log".into()),
        log_tail: vec![
            "INFO:     Started server process".into(),
            "INFO 11-21 09:12:03 metrics.py: Avg generation throughput: 1830.2 tokens/s".into(),
        ],
        probed_ms: Some(T),
        latency: None,
    };
    let discovered = ServedModel {
        name: "vllm:8001".into(),
        model: "Qwen/Qwen2.5-32B-Instruct".into(),
        spec: None,
        pid: pids.get(1).copied(),
        gpus: vec![1],
        bdfs: vec!["0000:05:00.1".into()],
        port: Some(8001),
        state: ModelState::Starting,
        reason: Some("/health: HTTP 503 (loading)".into()),
        running: None,
        waiting: None,
        kv_cache: None,
        tokens_per_sec: None,
        restarts: 0,
        log: None,
        log_tail: vec![],
        ..base.clone()
    };
    snap.models = vec![base, discovered];
    let (km, _) = Keymap::load("default", None, false);
    let mut s = State::new(km, Thresholds::default(), 1000);
    let snap = Arc::new(snap);
    update(&mut s, Msg::Snapshot(snap));
    update(&mut s, Msg::Resize(w, h));
    update(&mut s, Msg::Tick(T + 2000));
    s
}

#[test]
fn models_view_and_its_confirmation() {
    for (w, h) in [(80, 24), (200, 60)] {
        let mut s = with_models(w, h);
        update(&mut s, Msg::Command(Command::ViewModels));
        let text = draw(&s, w, h);
        assert!(
            text.contains("llama-70b") && text.contains("healthy"),
            "{text}"
        );
        insta::assert_snapshot!(format!("models__{w}x{h}"), text);
        // The overview labels the logical GPU with the registry name.
        update(&mut s, Msg::Command(Command::ViewOverview));
        assert!(draw(&s, w, h).contains("llama-70b"));
    }
    let mut s = with_models(100, 30);
    update(&mut s, Msg::Command(Command::ViewModels));
    update(&mut s, Msg::Command(Command::ModelRestart));
    let text = draw(&s, 100, 30);
    assert!(
        text.contains("[> Cancel <]") && text.contains("start: HIP_VISIBLE_DEVICES=0 vllm serve"),
        "{text}"
    );
    insta::assert_snapshot!("models_restart_confirmation__100x30", text);
    // Enter on Cancel does nothing; tab then enter confirms.
    assert!(update(&mut s, Msg::Command(Command::DialogActivate)).is_empty());
    update(&mut s, Msg::Command(Command::ModelRestart));
    update(&mut s, Msg::Command(Command::DialogFocusNext));
    let e = update(&mut s, Msg::Command(Command::DialogActivate));
    assert_eq!(
        e,
        vec![partop::ui::state::Effect::Model(
            partop::ui::state::ModelAction::Restart {
                name: "llama-70b".into()
            }
        )]
    );
    // A command that cannot apply says why in the footer, instead of doing nothing silently.
    let mut s = with_models(100, 30);
    update(&mut s, Msg::Command(Command::ViewModels));
    update(&mut s, Msg::Command(Command::ModelAddToRegistry));
    assert!(s.model_ask.is_none());
    assert!(draw(&s, 100, 30).contains("llama-70b is already in the registry"));
    // Read-only: nothing opens.
    let mut s = with_models(100, 30);
    s.read_only = true;
    update(&mut s, Msg::Command(Command::ViewModels));
    update(&mut s, Msg::Command(Command::ModelRestart));
    assert!(s.model_ask.is_none());
}

#[test]
fn mig_staging_overlay_and_confirmation() {
    // The H200 as NVML reported it on the lent machine (a PyTorch process on it).
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nvidia-smi/h200-nvml-record.json");
    let node: partop::collect::nvidia::NvNode =
        serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
    let (gpus, processes) = partop::collect::nvidia::assemble(&node, T);
    let snap = partop::domain::Snapshot {
        host: "h200-node".into(),
        taken_at_ms: T,
        gpus,
        processes,
        ..partop::domain::Snapshot::default()
    };
    let (km, _) = Keymap::load("default", None, false);
    let mut s = State::new(km, Thresholds::default(), 1000);
    update(&mut s, Msg::Snapshot(Arc::new(snap)));
    update(&mut s, Msg::Resize(110, 36));
    update(&mut s, Msg::Tick(T + 1000));
    update(&mut s, Msg::Command(Command::StageChange));
    assert!(s.mig_staging.is_some(), "p on an NVIDIA GPU stages MIG");
    let text = draw(&s, 110, 36);
    assert!(
        text.contains("7x 1g.18gb") && (0..7).all(|k| text.contains(&format!("-cgi 19:{k} -C"))),
        "{text}"
    );
    insta::assert_snapshot!("mig_staging__110x36", text);
    update(&mut s, Msg::Command(Command::StageCycleCompute));
    update(&mut s, Msg::Command(Command::StageConfirm));
    let key = |s: &mut State, c: ratatui::crossterm::event::KeyCode| {
        update(
            s,
            Msg::Key(ratatui::crossterm::event::KeyEvent::new(
                c,
                ratatui::crossterm::event::KeyModifiers::NONE,
            )),
        )
    };
    for ch in "yes".chars() {
        key(&mut s, ratatui::crossterm::event::KeyCode::Char(ch));
    }
    assert!(
        key(&mut s, ratatui::crossterm::event::KeyCode::Enter).is_empty(),
        "needs the host name"
    );
    for _ in 0..3 {
        key(&mut s, ratatui::crossterm::event::KeyCode::Backspace);
    }
    for ch in "h200-node".chars() {
        key(&mut s, ratatui::crossterm::event::KeyCode::Char(ch));
    }
    match key(&mut s, ratatui::crossterm::event::KeyCode::Enter).as_slice() {
        [partop::ui::state::Effect::MigApply(p)] => {
            assert_eq!(p.after, vec!["2g.35gb".to_string(); 3]);
            // One instance a command, each at its memory slice.
            assert!(p.steps.iter().any(|st| {
                st.commands == [0, 2, 4].map(|k| format!("nvidia-smi mig -i 0 -cgi 14:{k} -C"))
            }));
        }
        other => panic!("{other:?}"),
    }
    assert!(s.mig_staging.is_none());
}

#[test]
fn banners_for_a_replay_an_unfinished_apply_and_an_apply_that_died() {
    let mut s = state_for("dpx-nps2-two-models", 120, 30);
    s.replay = Some("of gpu-node-3 recorded 2026-11-20T03:12:00Z".into());
    let unfinished =
        "repartition 4ba9c0de1f23 failed at step 4 (reload) · partop apply /root/p.json --resume";
    update(
        &mut s,
        Msg::Journal(Vec::new(), Vec::new(), Some(unfinished.into()), None),
    );
    let screen = draw(&s, 120, 30);
    assert!(
        screen.contains("REPLAY of gpu-node-3 recorded 2026-11-20T03:12:00Z · look only"),
        "{screen}"
    );
    assert!(
        screen.contains("UNFINISHED APPLY repartition 4ba9c0de1f23 failed at step 4 (reload) · partop apply /root/p.json --resume"),
        "{screen}"
    );
    // An apply followed by the monitor whose process ended without finishing.
    let plan = partop::domain::plan::plan(
        &recorded("dpx-nps2-two-models"),
        &partop::domain::plan::Draft {
            gpus: vec![],
            compute: None,
            memory: Some(partop::domain::MemoryMode::Nps1),
        },
        partop::domain::plan::Reload::ResetReload,
        120,
        10,
    )
    .unwrap();
    let mut p = partop::ui::stage::Progress::new(plan, "/state/apply/abc.log".into());
    p.pid = Some(4242);
    s.applying = Some(p);
    update(
        &mut s,
        Msg::Journal(
            Vec::new(),
            Vec::new(),
            None,
            Some("pid 4242 signal: 9 (SIGKILL); last line: [3/7] set memory mode NPS1".into()),
        ),
    );
    assert_eq!(s.applying.as_ref().unwrap().finished, Some(false));
    let screen = draw(&s, 200, 50);
    assert!(
        screen.contains("the apply process ended without finishing: pid 4242 signal: 9 (SIGKILL)"),
        "{screen}"
    );
}

#[test]
fn read_only_models_view_offers_no_action() {
    let mut s = state_for("dpx-nps2-two-models", 120, 30);
    // As the monitor sets it up: the flag, and a keymap loaded without mutating commands.
    s.read_only = true;
    s.keymap = Keymap::load("default", None, true).0;
    update(&mut s, Msg::Command(Command::ViewModels));
    let screen = draw(&s, 120, 30);
    assert!(
        screen.contains("read-only: no restart, stop or add"),
        "{screen}"
    );
    assert!(!screen.contains("R restart"), "{screen}");
}

/// Draws, as the app loop does before a key is read (a pane learns how far it can scroll when
/// it is drawn), then runs `cmds`, and returns the frame after them.
fn after(s: &mut State, w: u16, h: u16, cmds: &[Command]) -> String {
    draw(s, w, h);
    for c in cmds {
        update(s, Msg::Command(*c));
        draw(s, w, h);
    }
    draw(s, w, h)
}

/// The overlay's lines joined (wrapped lines read as one), for assertions on whole sentences.
fn joined(text: &str) -> String {
    text.lines()
        // The overlay's own segment: the longest between vertical borders (a card drawn
        // behind it adds borders of its own at the edges).
        .filter_map(|l| l.split('│').max_by_key(|x| x.chars().count()))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn staging_with_a_model_that_will_not_be_relaunched() {
    for (w, h) in [(80, 24), (200, 50)] {
        let mut s = with_models(w, h);
        update(&mut s, Msg::Command(Command::StageChange));
        for _ in 0..4 {
            update(&mut s, Msg::Command(Command::StageCycleCompute));
        }
        for _ in 0..3 {
            update(&mut s, Msg::Command(Command::StageCycleMemory));
        }
        let first = draw(&s, w, h);
        assert!(first.contains("staged  CPX/NPS4"), "{first}");
        // Scrolled to the models: the consequence is read whole, not cut.
        let want = "llama-70b  0000:05:00.0 -> NOT relaunched: needs 80.0 GiB, the largest free logical GPU has 24.0 GiB";
        let mut text = first;
        for _ in 0..30 {
            if joined(&text).contains(want) {
                break;
            }
            text = after(&mut s, w, h, &[Command::SelectNext]);
        }
        let j = joined(&text);
        assert!(j.contains(want), "{text}");
        insta::assert_snapshot!(
            format!("staging_model_not_relaunched__{w}x{h}"),
            text.replace(&partop::collect::host::hostname(), "HOST")
        );
    }
}

#[test]
fn log_scrolled_back() {
    use partop::ui::logbuf::LogLine;
    for (w, h) in [(80, 24), (200, 50)] {
        let mut s = state_for("dpx-nps2-two-models", w, h);
        let lines: Vec<LogLine> = (0..70u64)
            .map(|i| LogLine {
                at_ms: T + i * 1000,
                level: if i % 7 == 0 { log::Level::Warn } else { log::Level::Info },
                text: if i == 3 {
                    "applying plan 93f422974a479eb1 (detached; log /root/.local/state/partop/apply/93f422974a479eb1.log): it continues if you quit or the connection drops".into()
                } else {
                    format!("collector note {i}: reload warning on 0000:{:02x}:00.0", i % 8)
                },
            })
            .collect();
        update(&mut s, Msg::Log(lines));
        update(&mut s, Msg::Command(Command::ViewLog));
        let newest = draw(&s, w, h);
        assert!(
            newest.contains("collector note 69"),
            "follows the newest: {newest}"
        );
        let text = after(&mut s, w, h, &[Command::Top]);
        assert!(
            joined(&text).contains("it continues if you quit or the connection drops"),
            "the line that names the apply is reachable, whole: {text}"
        );
        assert!(text.contains("newer lines below"), "{text}");
        insta::assert_snapshot!(format!("log_scrolled__{w}x{h}"), text);
    }
}

#[test]
fn detail_scrolled_to_its_end() {
    for (w, h) in [(80, 24), (200, 50)] {
        let mut s = state_for("cpx-nps4-small-models", w, h);
        update(&mut s, Msg::Command(Command::SelectNext));
        update(&mut s, Msg::Command(Command::OpenDetail));
        let text = after(&mut s, w, h, &[Command::Bottom]);
        assert!(
            text.contains("Holders") || text.contains("hotspot"),
            "{text}"
        );
        assert!(!text.contains("more below"), "at the end: {text}");
        insta::assert_snapshot!(format!("detail_scrolled__{w}x{h}"), text);
    }
}

#[test]
fn overview_marks_the_selected_and_tagged_gpus() {
    for (w, h) in [(80, 24), (200, 50)] {
        let mut s = state_for("cpx-nps4-small-models", w, h);
        for _ in 0..9 {
            update(&mut s, Msg::Command(Command::SelectNext));
        }
        update(&mut s, Msg::Command(Command::TagGpu));
        for _ in 0..8 {
            update(&mut s, Msg::Command(Command::SelectNext));
        }
        update(&mut s, Msg::Command(Command::TagGpu));
        let text = draw(&s, w, h);
        assert!(text.contains("tagged 2 GPU(s)"), "{text}");
        assert!(
            text.contains("[17"),
            "the selected logical GPU is marked: {text}"
        );
        insta::assert_snapshot!(format!("overview_selected_tagged__{w}x{h}"), text);
    }
}

#[test]
fn processes_grouped_by_gpu_and_by_model() {
    for (w, h) in [(80, 24), (200, 50)] {
        let mut s = state_for("cpx-nps4-small-models", w, h);
        update(&mut s, Msg::Command(Command::ViewProcesses));
        update(&mut s, Msg::Command(Command::CycleGroup));
        let by_gpu = draw(&s, w, h);
        assert!(by_gpu.contains("▸ GPU 13 (0000:26:00.5)"), "{by_gpu}");
        insta::assert_snapshot!(format!("processes_by_gpu__{w}x{h}"), by_gpu);
        update(&mut s, Msg::Command(Command::CycleGroup));
        let by_model = draw(&s, w, h);
        assert!(
            by_model.contains("▸ Llama-3.1-8B-Instruct (vllm)")
                && by_model.contains("▸ (not a model server)"),
            "{by_model}"
        );
        insta::assert_snapshot!(format!("processes_by_model__{w}x{h}"), by_model);
    }
}

/// The fleet view at 80x24 and 200x50: totals, the selected and a tagged node, a node down
/// with its reason, an unfinished apply.
#[test]
fn fleet_view() {
    use partop::domain::fleet::{ApplyInfo, NodeSummary};
    use partop::ui::fleet::{FleetState, NodeRow};
    let snap = recorded("cpx-nps4-small-models");
    let mut base = partop::domain::fleet::summarize(&snap, &[], None);
    base.taken_at_ms = T;
    let (km, _) = Keymap::load("default", None, false);
    for (w, h) in [(80, 24), (200, 50)] {
        let mut rows = Vec::new();
        for i in 0..6 {
            rows.push(NodeRow::connecting(&format!("node{i:02}"), true));
        }
        let mut s = FleetState::new(rows, km.clone(), "ssh (partop stream)".into(), 1);
        // This picture is of the name order (worst first, the default, has its own below).
        s.sort = partop::ui::fleet::FleetSort::Name;
        for i in 0..5u32 {
            let mut r: NodeSummary = base.clone();
            r.gfx_mean = Some(f64::from(i * 20));
            if i == 2 {
                r.apply = Some(ApplyInfo {
                    fingerprint: "93f422974a479eb1".into(),
                    step: 3,
                    key: "reload".into(),
                });
                r.findings_warn = 1;
            }
            s.row(&format!("node{i:02}"), r, T);
        }
        s.reach(
            "node05",
            Some("host key mismatch: refused (the node's key is not the one in known_hosts; check it before trusting it)".into()),
            false,
        );
        s.now_ms = T + 2000;
        s.size = (w, h);
        partop::ui::fleet::command(&mut s, Command::SelectNext);
        partop::ui::fleet::command(&mut s, Command::TagNode);
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| partop::ui::fleet::render(f, &s, &theme()))
            .unwrap();
        let text = format!("{}", t.backend());
        assert!(text.contains("nodes reporting 5 of 6"), "{text}");
        assert!(text.contains("1 unfinished applies"), "{text}");
        assert!(text.contains("DOWN: host"), "{text}");
        assert!(text.contains("+node01"), "tagged: {text}");
        assert!(text.contains("▶ node02"), "the selection moved on: {text}");
        insta::assert_snapshot!(format!("fleet__{w}x{h}"), text);
        // The reason a node is down is read whole under the table when it is selected.
        partop::ui::fleet::command(&mut s, Command::Bottom);
        t.draw(|f| partop::ui::fleet::render(f, &s, &theme()))
            .unwrap();
        let text = format!("{}", t.backend());
        let joined: String = text
            .lines()
            .map(|l| l.trim_matches('"').trim())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            joined.contains("node05: DOWN: host key mismatch: refused (the node's key is not the one in known_hosts; check it before trusting it)"),
            "{text}"
        );
    }
}

/// The monitor following an apply: the running step reads its elapsed time against its limit
/// (a hang reads as a hang, not as a step), and a failure shows the exact resume command the
/// run journaled (issue 23).
#[test]
fn progress_shows_elapsed_against_the_limit_and_the_journaled_resume_command() {
    let mut s = state_for("dpx-nps2-two-models", 120, 30);
    let plan = partop::domain::plan::plan(
        &recorded("dpx-nps2-two-models"),
        &partop::domain::plan::Draft {
            gpus: vec![],
            compute: Some(partop::domain::ComputeMode::Dpx),
            memory: Some(partop::domain::MemoryMode::Nps1),
        },
        partop::domain::plan::Reload::ResetReload,
        120,
        10,
    )
    .unwrap();
    let keys: Vec<&str> = plan.steps.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "stop",
            "wait_idle",
            "set_memory",
            "reload",
            "wait_gpus",
            "set_compute",
            "wait_gpus",
            "verify",
            "relaunch"
        ],
        "after the reload: the default layout's count, then compute, then the final count"
    );
    assert_eq!(
        plan.steps[4].count,
        Some(8),
        "the driver returns in SPX/NPS1"
    );
    assert_eq!(plan.steps[6].count, Some(16));
    let fp = plan.fingerprint.clone();
    let resume =
        "partop --sim-state /x/n.json --journal /x/j.jsonl apply /x/p.json --grace 10 --resume";
    let entry = |action: &str, targets: serde_json::Value, outcome: serde_json::Value| {
        let mut e = partop::exec::journal::Entry::new(action, true, targets, outcome);
        e.at = "2026-11-25T10:00:00Z".into();
        e
    };
    let mut t = serde_json::json!({"run": "r1", "fingerprint": fp, "resume": resume});
    let start = entry("repartition.start", t.clone(), serde_json::json!({}));
    t["step"] = serde_json::json!(4);
    t["key"] = serde_json::json!("wait_gpus");
    let begin = entry(
        "repartition.step",
        t.clone(),
        serde_json::json!({"state": "begin", "limit_secs": 300}),
    );
    let mut p = partop::ui::stage::Progress::new(plan, "/state/apply/abc.log".into());
    p.update(&[start, begin]);
    assert_eq!(p.resume.as_deref(), Some(resume));
    s.applying = Some(p);
    // 42 s after the step began.
    s.now_ms = humantime::parse_rfc3339("2026-11-25T10:00:42Z")
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let screen = draw(&s, 120, 30);
    assert!(screen.contains("running… 42s of 300s"), "{screen}");
    let p = s.applying.as_mut().unwrap();
    p.exited("pid 4242 signal: 9 (SIGKILL)".into());
    let screen = draw(&s, 160, 40);
    assert!(screen.contains("--grace 10 --resume"), "{screen}");
}

/// A finding is not left to a dim tab count: the worst one is a badge on the header's first
/// line with the key that opens the Findings view, at the smallest and a large terminal.
#[test]
fn the_worst_finding_is_a_badge_in_the_header() {
    for (w, h) in [(80, 24), (200, 50)] {
        let mut s = state_for("noisy-neighbour", w, h);
        let quiet = draw(&s, w, h);
        assert!(!quiet.contains('▲'), "no finding yet, no badge: {quiet}");
        let mut later = recorded("noisy-neighbour");
        pin(&mut later, T + 45_000);
        update(&mut s, Msg::Snapshot(Arc::new(later)));
        update(&mut s, Msg::Tick(T + 46_000));
        let text = draw(&s, w, h);
        let first = text.lines().next().unwrap();
        assert!(
            first.contains("▲ noisy neighbour on GPU 1 · 5"),
            "{w}x{h}: {first}"
        );
        insta::assert_snapshot!(format!("finding_badge__{w}x{h}"), text);
    }
}

/// A source that has not answered yet is `pending` in a muted style, never `DOWN` in the
/// critical one (amd-smi's first read takes 3 to 9 s on a healthy node); one whose reads failed
/// is still `DOWN`.
#[test]
fn a_source_not_answered_yet_is_pending_not_down() {
    let mut s = state_for("dpx-nps2-two-models", 120, 30);
    let mut snap = (*s.snapshot.clone().unwrap()).clone();
    let st = snap
        .sources
        .iter_mut()
        .find(|x| x.name == "amd-smi static")
        .unwrap();
    *st = partop::domain::snapshot::SourceStatus::pending(
        "amd-smi static",
        Some("amd-smi's first read is running; identity and profiles follow".into()),
    );
    update(&mut s, Msg::Snapshot(Arc::new(snap.clone())));
    let text = draw(&s, 120, 30);
    assert!(
        text.contains("static pending")
            && !text.contains("DOWN")
            && !text.contains("! amd-smi's first read"),
        "{text}"
    );
    let st = snap
        .sources
        .iter_mut()
        .find(|x| x.name == "amd-smi static")
        .unwrap();
    st.status = Health::Down;
    st.error = Some("timed out after 10s".into());
    update(&mut s, Msg::Snapshot(Arc::new(snap)));
    let text = draw(&s, 120, 30);
    assert!(
        text.contains("static DOWN") && text.contains("! timed out after 10s"),
        "{text}"
    );
}

/// The Journal view reads as words: an apply journaled by the real run log, its steps named by
/// the plan's titles and counted from 1 as the apply's log counts them, the selected entry with
/// its sentence above its fields.
#[test]
fn the_journal_view_names_steps_as_the_log_counts_them() {
    let plan = partop::domain::plan::plan(
        &recorded("dpx-nps2-two-models"),
        &partop::domain::plan::Draft {
            gpus: vec![],
            compute: None,
            memory: Some(partop::domain::MemoryMode::Nps1),
        },
        partop::domain::plan::Reload::ResetReload,
        120,
        10,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = partop::exec::runlog::RunLog {
        path: dir.path().join("journal.jsonl"),
        kind: "repartition",
        run: "4ba9c0de1f23".into(),
        fingerprint: plan.fingerprint.clone(),
        simulated: true,
        node: "sim".into(),
    };
    log.start(
        &serde_json::to_value(&plan).unwrap(),
        None,
        plan.steps.len(),
    )
    .unwrap();
    for (i, step) in plan.steps.iter().enumerate().take(3) {
        log.step_begin(i, &step.key).unwrap();
        log.step_end(
            i,
            &step.key,
            i < 2,
            if i < 2 { "ok" } else { "amd-smi said no" },
        )
        .unwrap();
    }
    let (mut entries, bad) = partop::exec::journal::read(&log.path).unwrap();
    // Stamps and the actor vary by machine and minute: fixed for the picture.
    for (i, e) in entries.iter_mut().enumerate() {
        e.at = format!("2026-11-20T03:{:02}:00Z", 10 + i);
        e.host = "gpu-node-3".into();
        e.who = partop::exec::journal::Who {
            user: Some("ops".into()),
            uid: 1000,
            ..partop::exec::journal::Who::default()
        };
    }
    let n = plan.steps.len();
    let third = format!("step 3 of {n}: {}", plan.steps[2].title);
    for (w, h) in [(80, 24), (200, 50)] {
        let mut s = state_for("dpx-nps2-two-models", w, h);
        update(
            &mut s,
            Msg::Journal(entries.clone(), bad.clone(), None, None),
        );
        update(&mut s, Msg::Command(Command::ViewJournal));
        let text = draw(&s, w, h);
        let flat = joined(&text);
        assert!(flat.contains("step 1 of"), "{w}x{h}: {text}");
        if w == 200 {
            assert!(
                text.contains(&format!("{third} · FAILED: amd-smi said no")),
                "{text}"
            );
        }
        assert!(!text.contains("step 0"), "{text}");
        insta::assert_snapshot!(format!("journal_words__{w}x{h}"), text);
    }
}

fn draw_buffer(s: &State, th: &Theme, w: u16, h: u16) -> ratatui::buffer::Buffer {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| partop::ui::view::render(f, s, th)).unwrap();
    t.backend().buffer().clone()
}

/// The screen row holding `needle`, and the row's text.
fn row_with(b: &ratatui::buffer::Buffer, needle: &str) -> Option<(u16, String)> {
    (0..b.area.height).find_map(|y| {
        let text: String = (0..b.area.width).map(|x| b[(x, y)].symbol()).collect();
        text.contains(needle).then_some((y, text))
    })
}

/// A user's one-colour, one-style theme (themes/mine.toml, no `inherits`) inherits the default:
/// the selected row stays reversed and SIMULATED keeps its badge. A theme that takes every
/// style off the selection still shows `▶` on the selected row of every list.
#[test]
fn a_one_style_theme_keeps_a_visible_selection_and_the_sim_badge() {
    use ratatui::style::Modifier;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mine.toml"),
        "[palette]\nfg = \"#ffffff\"\n[styles]\n\"ui\" = { fg = \"fg\" }\n",
    )
    .unwrap();
    let (mine, errors) = Theme::load("mine", dir.path());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        mine.get("ui").fg,
        Some(ratatui::style::Color::Rgb(255, 255, 255))
    );
    let mut s = state_for("dpx-nps2-two-models", 80, 24);
    update(&mut s, Msg::Command(Command::ViewProcesses));
    update(&mut s, Msg::Command(Command::SelectNext));
    let b = draw_buffer(&s, &mine, 80, 24);
    let (y, _) = row_with(&b, "▶").expect("a row marked ▶");
    assert!(
        (1..79).all(|x| b[(x, y)].modifier.contains(Modifier::REVERSED)),
        "the selected row is reversed (inherited)"
    );
    let (hy, header) = row_with(&b, "SIMULATED").unwrap();
    let bx = u16::try_from(header.chars().position(|c| c == 'S').unwrap()).unwrap();
    assert_eq!(
        b[(bx + 1, hy)].bg,
        theme().get("header.sim").bg.unwrap(),
        "the badge keeps its background"
    );
    insta::assert_snapshot!("one_style_theme_processes__80x24", draw(&s, 80, 24));

    // No style at all on the selection: the mark alone shows it, in every list view.
    std::fs::write(
        dir.path().join("bare.toml"),
        "[styles]\n\"table.row.selected\" = \"reset\"\n",
    )
    .unwrap();
    let (bare, errors) = Theme::load("bare", dir.path());
    assert!(errors.is_empty(), "{errors:?}");
    let mut cases = 0;
    for view in [
        Command::ViewGpus,
        Command::ViewProcesses,
        Command::ViewModels,
        Command::ViewOverview,
    ] {
        let mut s = with_models(80, 24);
        update(&mut s, Msg::Command(view));
        update(&mut s, Msg::Command(Command::SelectNext));
        let b = draw_buffer(&s, &bare, 80, 24);
        let marks = (0..24)
            .filter(|y| row_with_at(&b, *y).contains('▶'))
            .count();
        assert_eq!(marks, 1, "{view:?}: exactly one row marked ▶");
        cases += 1;
    }
    assert_eq!(cases, 4, "every list view that draws rows of its own");
}

fn row_with_at(b: &ratatui::buffer::Buffer, y: u16) -> String {
    (0..b.area.width).map(|x| b[(x, y)].symbol()).collect()
}

/// The help ends with the legend of the marks and colours; scrolled to its end it is whole.
#[test]
fn help_legend() {
    for (w, h) in [(80, 24), (200, 60)] {
        let mut s = state_for("dpx-nps2-two-models", w, h);
        update(&mut s, Msg::Command(Command::ToggleHelp));
        // Drawn once so the pane knows how far it scrolls, then to the end.
        draw(&s, w, h);
        update(&mut s, Msg::Command(Command::Bottom));
        let text = draw(&s, w, h);
        for mark in ["legend", "▶", "+", "*name", "@name", "PWR* TEMP*", "stale"] {
            assert!(text.contains(mark), "{mark} not in the legend:\n{text}");
        }
        insta::assert_snapshot!(format!("help_legend__{w}x{h}"), text);
    }
}

/// The footer's hints are apart (`│`), and `q` is always among them, saying what it does.
#[test]
fn footer_hints_are_separated_and_q_says_what_it_does() {
    let mut s = state_for("dpx-nps2-two-models", 80, 24);
    update(&mut s, Msg::Command(Command::ViewProcesses));
    let text = draw(&s, 80, 24);
    let footer = text.lines().last().unwrap().to_string();
    assert!(footer.contains("/ filter│s cycle sort│"), "{footer}");
    assert!(footer.contains("q quit"), "{footer}");
    s.stops_sim = true;
    let footer = draw(&s, 80, 24).lines().last().unwrap().to_string();
    assert!(footer.contains("q quit (stops the sim)"), "{footer}");
    update(&mut s, Msg::Command(Command::OpenDetail));
    let footer = draw(&s, 80, 24).lines().last().unwrap().to_string();
    assert!(footer.contains("q back"), "{footer}");
    insta::assert_snapshot!("footer_detail__80x24", footer);
}

#[test]
fn the_gpus_view_names_every_mig_instance_whole_and_shows_the_mig_gpus_power() {
    // The H200 as NVML reported it, put in MIG mode with instances of one- and two-digit ids.
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nvidia-smi/h200-nvml-record.json");
    let mut node: partop::collect::nvidia::NvNode =
        serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
    let gis = [1u32, 5, 13];
    {
        let g = &mut node.gpus[0];
        g.mig_enabled = Some(true);
        g.mig_pending = Some(true);
        g.processes.clear();
        g.instances = gis
            .iter()
            .map(|gi| partop::collect::nvidia::NvInstance {
                gi: *gi,
                uuid: Some(format!("MIG-{gi}")),
                profile: Some("1g.18gb".into()),
                mem_total_mib: Some(16_384),
                mem_used_mib: Some(0),
                ..partop::collect::nvidia::NvInstance::default()
            })
            .collect();
    }
    let (gpus, processes) = partop::collect::nvidia::assemble(&node, T);
    let snap = partop::domain::Snapshot {
        host: "h200-node".into(),
        taken_at_ms: T,
        gpus,
        processes,
        ..partop::domain::Snapshot::default()
    };
    let (km, _) = Keymap::load("default", None, false);
    let mut s = State::new(km, Thresholds::default(), 1000);
    update(&mut s, Msg::Snapshot(Arc::new(snap)));
    update(&mut s, Msg::Resize(200, 50));
    update(&mut s, Msg::Tick(T + 1000));
    update(&mut s, Msg::Command(Command::ViewGpus));
    let text = draw(&s, 200, 50);
    for gi in gis {
        assert!(text.contains(&format!("00:06.0/gi{gi} ")), "gi{gi}: {text}");
    }
    // The MIG GPU's power and temperature are on a row (its first instance's).
    assert!(text.contains("176W*") && text.contains("41°C*"), "{text}");
}

/// Ten minutes of `snap` at 1 s, ending at `T`: each logical GPU's busy and VRAM and each
/// physical GPU's power moving as a wave (a phase per GPU), its processes' CU occupancy with it.
fn ten_minutes(s: &mut State, snap: &partop::domain::Snapshot) {
    for i in 0..600u32 {
        let mut x = snap.clone();
        let t = f64::from(i) / 40.0;
        x.taken_at_ms = T - u64::from(599 - i) * 1000;
        for (k, g) in x.gpus.iter_mut().enumerate() {
            let k = f64::from(u32::try_from(k).unwrap());
            g.power_watts = Some(400.0 + 250.0 * (t + k).sin());
            g.hotspot_celsius = Some(60.0 + 15.0 * (t / 2.0 + k).sin());
            for l in &mut g.partitions {
                l.gfx_busy_percent = Some(50.0 + 45.0 * (t + k).sin());
                l.vram_used_bytes = l.vram_used_bytes.map(|b| {
                    let f = 0.6 + 0.4 * (t / 3.0).cos();
                    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    let v = (b as f64 * f) as u64;
                    v
                });
            }
        }
        for p in &mut x.processes {
            for u in &mut p.gpus {
                u.cu_percent = u.cu_percent.map(|_| 50.0 + 45.0 * (t * 1.5).cos());
            }
        }
        update(s, Msg::Snapshot(Arc::new(x)));
    }
}

fn nvidia_one_gpu() -> partop::domain::Snapshot {
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nvidia-smi/h200-nvml-record.json");
    let node: partop::collect::nvidia::NvNode =
        serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
    let (gpus, processes) = partop::collect::nvidia::assemble(&node, T);
    partop::domain::Snapshot {
        host: "h200-node".into(),
        taken_at_ms: T,
        gpus,
        processes,
        ..partop::domain::Snapshot::default()
    }
}

#[test]
fn history_charts_on_64_partitions_and_on_one_nvidia_gpu() {
    // The History view and Detail's charts after ten minutes at 1 s, at 80x24 and 200x50, on
    // the AMD node of 64 logical GPUs (CPX/NPS4) and the one-GPU H200 (4 screens each).
    let nodes = [
        ("cpx-nps4-small-models", recorded("cpx-nps4-small-models")),
        ("h200", nvidia_one_gpu()),
    ];
    let mut n = 0;
    for (name, snap) in &nodes {
        for (w, h) in [(80, 24), (200, 50)] {
            let (km, _) = Keymap::load("default", None, false);
            let mut s = State::new(km, Thresholds::default(), 1000);
            ten_minutes(&mut s, snap);
            update(&mut s, Msg::Resize(w, h));
            update(&mut s, Msg::Tick(T));
            assert_eq!(s.history.len(), 600, "ten minutes at 1 s kept");
            update(&mut s, Msg::Command(Command::ViewHistory));
            let text = draw(&s, w, h);
            assert!(
                text.contains("History · GPU 0") && text.contains("busy"),
                "{text}"
            );
            insta::assert_snapshot!(format!("{name}__history__{w}x{h}"), text);
            update(&mut s, Msg::Command(Command::ViewDetail));
            insta::assert_snapshot!(format!("{name}__detail_charts__{w}x{h}"), draw(&s, w, h));
            n += 2;
            if snap.logical_count() <= 2 {
                // A one-GPU node's overview fills the screen with the charts and processes.
                update(&mut s, Msg::Command(Command::ViewOverview));
                let text = draw(&s, w, h);
                assert!(text.contains("busiest processes"), "{text}");
                insta::assert_snapshot!(format!("{name}__overview__{w}x{h}"), text);
                n += 1;
            }
        }
    }
    assert_eq!(n, 10, "10 screens");
}

#[test]
fn gpus_filtered() {
    // `/` in GPUs keeps the rows that show the word: here the model's name, which labels the
    // logical GPUs it runs on.
    let (w, h) = (120, 30);
    let mut s = state_for("dpx-nps2-two-models", w, h);
    update(&mut s, Msg::Command(Command::ViewGpus));
    let press = |s: &mut State, c: char| {
        update(
            s,
            Msg::Key(ratatui::crossterm::event::KeyEvent::new(
                ratatui::crossterm::event::KeyCode::Char(c),
                ratatui::crossterm::event::KeyModifiers::NONE,
            )),
        );
    };
    press(&mut s, '/');
    for c in "QWEN".chars() {
        press(&mut s, c);
    }
    let typing = draw(&s, w, h);
    assert!(typing.contains("filter: QWEN"), "{typing}");
    update(
        &mut s,
        Msg::Key(ratatui::crossterm::event::KeyEvent::new(
            ratatui::crossterm::event::KeyCode::Enter,
            ratatui::crossterm::event::KeyModifiers::NONE,
        )),
    );
    let text = draw(&s, w, h);
    assert!(text.contains("filter \"QWEN\""), "{text}");
    insta::assert_snapshot!("gpus_filtered__120x30", text);
}

/// `keep` in the staging overlay says the mode each GPU ends in (issue 23): kept and re-set
/// after a reload that would give the default (DPX/NPS2 -> NPS1: the reload gives SPX), and
/// the default where the kept mode is not offered with the new memory mode (CPX/NPS4 -> NPS2).
/// 2 cases, the first a snapshot.
#[test]
fn staging_keep_says_what_each_gpu_ends_in() {
    use partop::domain::MemoryMode;
    let cases = [
        (
            "dpx-nps2-two-models",
            MemoryMode::Nps1,
            "keep → DPX, re-set after the reload",
        ),
        (
            "cpx-nps4-small-models",
            MemoryMode::Nps2,
            "keep → DPX (not offered with the new memory mode: the default)",
        ),
    ];
    for (i, (rec, memory, label)) in cases.into_iter().enumerate() {
        let mut s = state_for(rec, 120, 40);
        update(&mut s, Msg::Command(Command::StageChange));
        for _ in 0..4 {
            if s.staging.as_ref().unwrap().memory == Some(memory) {
                break;
            }
            update(&mut s, Msg::Command(Command::StageCycleMemory));
        }
        assert_eq!(s.staging.as_ref().unwrap().memory, Some(memory));
        assert_eq!(s.staging.as_ref().unwrap().compute, None, "compute is kept");
        let text = draw(&s, 120, 40);
        assert!(text.contains(label), "{rec}: {text}");
        if i == 0 {
            insta::assert_snapshot!(
                "staging_keep__120x40",
                text.replace(&partop::collect::host::hostname(), "HOST")
            );
        }
    }
}
