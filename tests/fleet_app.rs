//! The fleet as an app, headless: its reducer over generated fleets (worst first, `/` over every
//! word shown, `p` only where a change can go), its screen at 80x24 and 120x40 (the NODE
//! column), and its whole loop (`ui::fleet::app::run_with`) over a `TestBackend` with scripted
//! keys, reading rehearsal nodes (simulated nodes changed as real ones are, without sshd)
//! through the real transport and rolling a change out on them through the real rollout; and
//! every monitor effect run on a node opened from the fleet (none reaches an executor).
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::screen::{Screen, Watched};
use common::{partop, quick, run};
use partop::collect::fleet::{NodeSpec, Remote, Transport};
use partop::domain::fleet::{ApplyInfo, NodeSummary};
use partop::domain::snapshot::Health;
use partop::ui::command::Command;
use partop::ui::fleet::app::{FleetRunner, Rollouts};
use partop::ui::fleet::{FleetMsg, FleetState, NodeRow, Phase, cells, command, update};
use partop::ui::keymap::Keymap;
use partop::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

const NOW: u64 = 1_800_000_000_000;

fn theme() -> Theme {
    Theme::load("default", Path::new("/nonexistent")).0
}

fn keymap() -> Keymap {
    Keymap::load("default", None, false).0
}

fn key(c: KeyCode) -> FleetMsg {
    FleetMsg::Key(KeyEvent::new(c, KeyModifiers::NONE))
}

fn typed(s: &mut FleetState, text: &str) {
    for c in text.chars() {
        update(s, key(KeyCode::Char(c)));
    }
}

/// A reporting row with these traits.
fn summary(warn: u32, info: u32, apply: bool, stale: bool) -> NodeSummary {
    NodeSummary {
        host: "h".into(),
        products: vec!["AMD Instinct MI300X".into()],
        modes: "SPX/NPS1×8".into(),
        physical: 8,
        logical: 8,
        gfx_mean: Some(12.0),
        vram_total: 192 << 30,
        findings_warn: warn,
        findings_info: info,
        health: if stale { Health::Stale } else { Health::Ok },
        taken_at_ms: NOW,
        apply: apply.then(|| ApplyInfo {
            fingerprint: "93f422974a479eb1".into(),
            step: 2,
            key: "reload".into(),
        }),
        ..NodeSummary::default()
    }
}

/// Every kind of node the worst-first order tells apart: down; reporting with 0..=2 warnings,
/// 0..=2 infos, with or without an unfinished apply, stale or fresh; not heard from yet.
fn generated_fleet() -> FleetState {
    let mut s = FleetState::new(Vec::new(), keymap(), "ssh (partop stream)".into(), 1);
    s.now_ms = NOW;
    let mut i = 0;
    for warn in 0..=2 {
        for info in 0..=2 {
            for apply in [false, true] {
                for stale in [false, true] {
                    s.row(
                        &format!("node{i:03}"),
                        summary(warn, info, apply, stale),
                        NOW,
                    );
                    i += 1;
                }
            }
        }
    }
    for d in 0..3 {
        s.reach(
            &format!("down{d}"),
            Some(format!("unreachable: reason {d}")),
            false,
        );
    }
    s.reach("waiting", None, true);
    s
}

/// Worst first by default, over every kind of node: every node down comes first, then every
/// reporting node by findings (warnings, an unfinished apply counting as one, then infos),
/// stale before fresh among equals, nodes not heard from last.
#[test]
fn worst_first_is_the_default_order() {
    let s = generated_fleet();
    assert_eq!(s.sort, partop::ui::fleet::FleetSort::Worst);
    let shown: Vec<&NodeRow> = s.order.iter().map(|i| &s.rows[*i]).collect();
    assert_eq!(shown.len(), 3 * 3 * 2 * 2 + 4, "every node shown");
    let rank = |r: &NodeRow| -> (u8, i64, i64, bool) {
        match &r.summary {
            _ if r.down.is_some() => (0, 0, 0, false),
            None => (2, 0, 0, false),
            Some(x) => (
                1,
                -(i64::from(x.findings_warn) + i64::from(x.apply.is_some())),
                -i64::from(x.findings_info),
                x.health != Health::Stale,
            ),
        }
    };
    for w in shown.windows(2) {
        assert!(
            rank(w[0]) <= rank(w[1]),
            "{} ({:?}) before {} ({:?})",
            w[0].name,
            rank(w[0]),
            w[1].name,
            rank(w[1])
        );
    }
    assert!(shown[..3].iter().all(|r| r.down.is_some()), "down first");
    assert_eq!(shown.last().unwrap().name, "waiting");
    // The most warnings, with an unfinished apply, stale: right after the nodes down.
    let top = shown[3].summary.as_ref().unwrap();
    assert_eq!(
        (top.findings_warn, top.apply.is_some(), top.findings_info),
        (2, true, 2)
    );
    assert_eq!(top.health, Health::Stale);
    println!(
        "{} nodes ordered, {} pairs checked",
        shown.len(),
        shown.len() - 1
    );
}

/// `/` matches every word shown: for every node of the generated fleet and every word of its
/// row on screen (name, product, modes, GFX, VRAM, models, findings, data, state, `DOWN`, the
/// reason, `connecting…`), typed as shown and in lower case, the filter keeps that node.
#[test]
fn the_filter_matches_every_word_shown() {
    let mut s = generated_fleet();
    let mut cases = 0;
    let rows = s.rows.clone();
    for r in &rows {
        let words: Vec<String> = cells(r, s.now_ms, 0)
            .iter()
            .flat_map(|c| c.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .collect();
        assert!(!words.is_empty(), "{}", r.name);
        for w in words {
            for typed_as in [w.clone(), w.to_lowercase()] {
                update(&mut s, key(KeyCode::Char('/')));
                typed(&mut s, &typed_as);
                update(&mut s, key(KeyCode::Enter));
                assert!(
                    s.order.iter().any(|i| s.rows[*i].name == r.name),
                    "/{typed_as} hides {} although the word is on its row",
                    r.name
                );
                update(&mut s, FleetMsg::Command(Command::Cancel));
                assert_eq!(s.order.len(), s.rows.len(), "Esc clears the filter");
                cases += 1;
            }
        }
    }
    // `/DOWN` keeps exactly the nodes that are down.
    update(&mut s, key(KeyCode::Char('/')));
    typed(&mut s, "DOWN");
    update(&mut s, key(KeyCode::Enter));
    assert_eq!(s.order.len(), 3);
    assert!(s.order.iter().all(|i| s.rows[*i].down.is_some()));
    assert!(cases > 600, "{cases} words filtered");
    println!("{cases} words filtered");
}

/// Tagging with space, and `p` only where a change can go: on a fleet of `partop serve`
/// endpoints the footer and the help do not offer it and the key says why; on nodes over ssh
/// it opens the stage on the tagged nodes, and `c`, `m`, Enter ask every node to plan.
#[test]
fn p_is_offered_only_where_a_change_can_go() {
    let theme = theme();
    let draw = |s: &FleetState| {
        let mut t = Terminal::new(TestBackend::new(120, 30)).unwrap();
        t.draw(|f| partop::ui::fleet::render(f, s, &theme)).unwrap();
        format!("{}", t.backend())
    };
    let served: Vec<NodeRow> = (1..=3)
        .map(|i| NodeRow::connecting(&format!("127.0.0.1:1900{i}"), false))
        .collect();
    let mut s = FleetState::new(served, keymap(), "partop serve /events".into(), 1);
    let text = draw(&s);
    assert!(!text.contains("p stage"), "{text}");
    command(&mut s, Command::ToggleHelp);
    assert!(
        !draw(&s).contains("Stage a change"),
        "help offers no staging"
    );
    command(&mut s, Command::ToggleHelp);
    update(&mut s, key(KeyCode::Char('p')));
    assert!(s.stage.is_none());
    let n = s.notice.clone().unwrap();
    assert!(n.contains("read only here"), "{n}");
    assert!(draw(&s).contains("read only here"));

    let ssh: Vec<NodeRow> = ["a", "b", "c"]
        .iter()
        .map(|n| NodeRow::connecting(n, true))
        .collect();
    let mut s = FleetState::new(ssh, keymap(), "ssh (partop stream)".into(), 1);
    assert!(draw(&s).contains("p stage a change"));
    update(&mut s, key(KeyCode::Char(' ')));
    update(&mut s, key(KeyCode::Char(' ')));
    assert_eq!(s.tagged.len(), 2);
    assert!(update(&mut s, key(KeyCode::Char('p'))).is_empty());
    assert_eq!(s.stage.as_ref().unwrap().nodes, ["a", "b"]);
    // Nothing chosen: Enter says what to do and plans nothing.
    assert!(update(&mut s, key(KeyCode::Enter)).is_empty());
    for c in ['c', 'c', 'm'] {
        update(&mut s, key(KeyCode::Char(c)));
    }
    let e = update(&mut s, key(KeyCode::Enter));
    assert_eq!(
        e,
        [partop::ui::fleet::FleetEffect::Plan {
            nodes: vec!["a".into(), "b".into()],
            compute: Some(partop::domain::ComputeMode::Dpx),
            memory: Some(partop::domain::MemoryMode::Nps1),
        }]
    );
    // While the nodes plan, q does not leave.
    assert!(command(&mut s, Command::Quit).is_empty());
    // Read only: staging is gone from the keys.
    let ro = Keymap::load("default", None, true).0;
    let mut r = FleetState::new(vec![NodeRow::connecting("a", true)], ro, "ssh".into(), 1);
    assert!(update(&mut r, key(KeyCode::Char('p'))).is_empty());
    assert!(r.stage.is_none());
}

/// The NODE column keeps the names: at 80x24 and 120x40, fifteen `partop serve` endpoints on
/// one host and three rehearsal nodes are each shown with their distinguishing end (the port,
/// the node's directory), not cut to `127.0.0.1:1…`.
#[test]
fn node_names_keep_their_distinguishing_part() {
    let mut rows: Vec<NodeRow> = (1..=15)
        .map(|i| NodeRow::connecting(&format!("127.0.0.1:190{i:02}"), false))
        .collect();
    for n in ["n01", "n02", "n03"] {
        rows.push(NodeRow::connecting(
            &format!("rehearse:/var/tmp/partop-rehearsal/{n}/node.json"),
            true,
        ));
    }
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    for (w, h) in [(80u16, 24u16), (120, 40)] {
        let mut s = FleetState::new(rows.clone(), keymap(), "ssh (partop stream)".into(), 1);
        s.now_ms = NOW;
        for (i, n) in names.iter().enumerate().take(15) {
            let mut x = summary(u32::from(i % 3 == 0), 0, false, false);
            x.taken_at_ms = NOW;
            s.row(n, x, NOW);
        }
        s.size = (w, h);
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| partop::ui::fleet::render(f, &s, &theme()))
            .unwrap();
        let text = format!("{}", t.backend());
        let shown = usize::from(h) - 9;
        for i in s.order.iter().take(shown) {
            let n = &s.rows[*i].name;
            let end: String = n
                .chars()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            assert!(
                text.lines()
                    .any(|l| l.contains(&end) && !l.contains("127.0.0.1:1…")),
                "{n}: its end {end:?} is not on screen at {w}x{h}:\n{text}"
            );
        }
        if w >= 120 {
            // Wide enough: every name whole.
            for i in s.order.iter().take(shown) {
                assert!(text.contains(&s.rows[*i].name), "{w}x{h}: {text}");
            }
        }
        insta::assert_snapshot!(format!("fleet_node_column__{w}x{h}"), text);
    }
}

/// `partop sim start` of a quick scenario, at `state`.
fn sim_node(state: &Path, scenario: &str) {
    common::sim_start(state, scenario);
}

fn modes(state: &Path) -> String {
    let o = run(
        partop()
            .env("PARTOP_SIM_AMD_SMI_COST", "off")
            .arg("--sim-state")
            .arg(state)
            .args(["snapshot", "--json"]),
        "",
    );
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    format!(
        "{}/{}",
        v["gpus"][0]["compute_partition"].as_str().unwrap_or("?"),
        v["gpus"][0]["memory_partition"].as_str().unwrap_or("?")
    )
}

/// The fleet's nodes for these simulated nodes' states: rehearsal nodes.
fn rehearsal_specs(states: &[PathBuf]) -> Vec<NodeSpec> {
    states
        .iter()
        .map(|p| {
            partop::collect::fleet::spec(&format!("rehearse:{}", p.display()), "partop").unwrap()
        })
        .collect()
}

/// The transport the command line would build, its ssh control files under `dir`.
fn transport(dir: &Path) -> Transport {
    Transport {
        ssh: "ssh".into(),
        ssh_config: None,
        control_dir: dir.join("ssh"),
        connect_timeout: Duration::from_secs(5),
        refresh: 1,
        concurrency: 8,
        local: env!("CARGO_BIN_EXE_partop").into(),
    }
}

/// The nodes' rows read through the real transport, sent to the fleet as it gets them.
fn feed_rows(
    rt: &tokio::runtime::Runtime,
    nodes: &[NodeSpec],
    t: &Transport,
    tx: &mpsc::Sender<FleetMsg>,
) -> tokio::task::JoinHandle<()> {
    let (nodes, t, tx) = (nodes.to_vec(), t.clone(), tx.clone());
    rt.spawn(async move {
        let (etx, mut erx) = mpsc::channel(256);
        let tasks = partop::collect::fleet::spawn(&nodes, &t, &etx);
        while let Some(e) = erx.recv().await {
            if tx.send(FleetMsg::Node(e)).await.is_err() {
                break;
            }
        }
        drop(tasks);
    })
}

/// Runs the fleet's loop until it quits, after `keys`: a quit is asked every 200 ms (the view
/// refuses it while the nodes plan or the rollout runs), so the loop returns once the job the
/// keys started has ended. Returns the state and the last screen.
fn phase(
    rt: &tokio::runtime::Runtime,
    state: FleetState,
    runner: &FleetRunner,
    rx: &mut mpsc::Receiver<FleetMsg>,
    keys: &[FleetMsg],
) -> (FleetState, String) {
    for k in keys {
        runner.tx.blocking_send(k.clone()).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let quitter = {
        let (tx, stop) = (runner.tx.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let _ = tx.blocking_send(FleetMsg::Command(Command::Quit));
            }
        })
    };
    let (s, text) = rt.block_on(async {
        let mut term = Terminal::new(TestBackend::new(120, 40)).unwrap();
        let theme = theme();
        let run = partop::ui::fleet::app::run_with(&mut term, state, &theme, runner, rx);
        let s = tokio::time::timeout(Duration::from_secs(180), run)
            .await
            .expect("the job ends within 3 minutes")
            .unwrap();
        (s, format!("{}", term.backend()))
    });
    stop.store(true, Ordering::Relaxed);
    quitter.join().unwrap();
    // The quits asked after the loop returned are not for the next phase.
    while rx.try_recv().is_ok() {}
    (s, text)
}

const ONE: &str = "\n[[workload]]\nname = \"a\"\nkind = \"batch\"\ngpu = 0\npartition = 0\nvram_gb = 10\nbusy = 40\ncomm = \"python3\"\n";

/// Three rehearsal nodes, the second of which fails its driver reload, read through the real
/// transport and changed from the view: space tags all three, `p` stages, `c c m m` asks
/// DPX/NPS2, Enter has every node plan; a wrong fingerprint rolls nothing out; the right one
/// rolls out node by node: the first is applied and verified, the second fails at its step,
/// the third is untouched and named; the fleet journal records it. The first node, opened from
/// the fleet is the monitor, in the same loop, keys going to it; its journal is the node's
/// own, read through its transport.
#[test]
fn a_rollout_from_the_view_stops_at_the_failing_rehearsal_node() {
    let dir = tempfile::tempdir().unwrap();
    let states: Vec<PathBuf> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| dir.path().join(n).join("node.json"))
        .collect();
    sim_node(&states[0], &quick("n1", "7.0.2", "SPX", "NPS1", ONE));
    sim_node(
        &states[1],
        &quick(
            "n2",
            "7.0.2",
            "SPX",
            "NPS1",
            &format!("fail_reloads = 1\n{ONE}"),
        ),
    );
    sim_node(&states[2], &quick("n3", "7.0.2", "SPX", "NPS1", ONE));
    let nodes = rehearsal_specs(&states);
    let t = transport(dir.path());
    let journal = dir.path().join("operator/journal.jsonl");
    let rollouts = partop::cli::fleet_rollouts::CommandRollouts::with(
        env!("CARGO_BIN_EXE_partop").into(),
        &journal,
        vec!["--connect-timeout".into(), "5".into()],
        &nodes,
        &dir.path().join("sets"),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (tx, mut rx) = mpsc::channel(4096);
    let feed = feed_rows(&rt, &nodes, &t, &tx);
    let runner = FleetRunner {
        nodes: nodes.clone(),
        transport: Some(t.clone()),
        rollouts: Some(Arc::new(rollouts) as Arc<dyn Rollouts>),
        monitor_keymap: Keymap::load("default", None, true).0,
        tx: tx.clone(),
    };
    let rows = nodes
        .iter()
        .map(|n| NodeRow::connecting(&n.name, true))
        .collect();
    let state = FleetState::new(rows, keymap(), "rehearsal".into(), 1);

    // Tag all three, stage DPX/NPS2, plan.
    let mut keys = vec![key(KeyCode::Char(' ')); 3];
    keys.extend(["p", "c", "c", "m", "m"].map(|c| key(KeyCode::Char(c.chars().next().unwrap()))));
    keys.push(key(KeyCode::Enter));
    let (state, text) = phase(&rt, state, &runner, &mut rx, &keys);
    let st = state.stage.as_ref().expect("the stage stays open");
    assert_eq!(st.phase, Phase::Review, "{:?}\n{text}", st.log);
    assert_eq!(st.nodes.len(), 3);
    let set = st.staged.clone().unwrap();
    for n in &nodes {
        assert!(
            st.log
                .iter()
                .any(|l| l.starts_with(&format!("{}: plan ", n.name))),
            "{}: {:?}",
            n.name,
            st.log
        );
    }
    assert!(text.contains("enter: confirm"), "{text}");
    assert!(text.contains("compute DPX · memory NPS2"), "{text}");

    // A wrong word rolls nothing out; the fingerprint typed does.
    let mut keys = vec![key(KeyCode::Enter)];
    keys.extend("nope".chars().map(|c| key(KeyCode::Char(c))));
    keys.push(key(KeyCode::Enter));
    keys.extend((0..4).map(|_| key(KeyCode::Backspace)));
    keys.extend(set.fingerprint.chars().map(|c| key(KeyCode::Char(c))));
    keys.push(key(KeyCode::Enter));
    let (state, text) = phase(&rt, state, &runner, &mut rx, &keys);
    let st = state.stage.as_ref().unwrap();
    let Phase::Done(Err(why)) = &st.phase else {
        panic!("{:?}\n{:?}\n{text}", st.phase, st.log)
    };
    assert!(why.contains("the rollout stopped"), "{why}");
    let log = st.log.join("\n");
    assert!(
        log.contains(&format!("{}: applied and verified", nodes[0].name)),
        "{log}"
    );
    assert!(
        log.contains(&format!("{}: failed at [", nodes[1].name)),
        "{log}"
    );
    assert!(
        log.contains(&format!("untouched: {}", nodes[2].name)),
        "{log}"
    );
    assert!(text.contains("the rollout stopped"), "{text}");
    assert_eq!(modes(&states[0]), "DPX/NPS2");
    assert_eq!(modes(&states[2]), "SPX/NPS1", "the third node is untouched");
    let fj = std::fs::read_to_string(dir.path().join("operator/fleet-journal.jsonl")).unwrap();
    for a in [
        "fleet.rollout.start",
        "fleet.node.done",
        "fleet.node.failed",
        "fleet.rollout.stopped",
    ] {
        assert!(fj.contains(a), "{a} missing:\n{fj}");
    }
    // Esc closes the outcome; the rows of the three nodes came through their transport.
    let (state, _) = phase(&rt, state, &runner, &mut rx, &[key(KeyCode::Esc)]);
    assert!(state.stage.is_none());
    assert!(
        state.rows.iter().all(|r| r.summary.is_some()),
        "{:?}",
        state.rows
    );

    // Enter opens the selected node in the monitor, in the same loop function and terminal,
    // on its full stream through its transport; Esc goes to that monitor and brings the fleet
    // back (a key that did not reach it would leave the loop in the monitor: the phase's
    // quits would not end it).
    let (state, text) = phase(
        &rt,
        state,
        &runner,
        &mut rx,
        &[
            FleetMsg::Command(Command::Top),
            key(KeyCode::Enter),
            key(KeyCode::Esc),
        ],
    );
    assert!(state.notice.is_none(), "{:?}", state.notice);
    assert!(
        text.contains("Nodes: 3 of 3 shown"),
        "the fleet is back: {text}"
    );

    // The first node opened from the fleet: its own journal, through its transport.
    let (mtx, mut mrx) = mpsc::channel(8);
    let (rtx, _rrx) = mpsc::channel(8);
    let monitor = partop::ui::effect::EffectRunner {
        exec: partop::ui::effect::ExecSettings::Remote(Remote {
            name: nodes[0].name.clone(),
            target: nodes[0].target.clone(),
            transport: t,
        }),
        requests: rtx,
        tx: mtx,
    };
    let facts = partop::ui::effect::Facts {
        grace_ms: 1000,
        snapshot: None,
        followed: None,
    };
    let got = rt.block_on(async {
        monitor.run(partop::ui::state::Effect::LoadJournal, &facts);
        tokio::time::timeout(Duration::from_secs(60), mrx.recv())
            .await
            .unwrap()
            .unwrap()
    });
    let partop::ui::state::Msg::Journal(entries, bad, _, _) = got else {
        panic!("{got:?}")
    };
    assert!(bad.is_empty(), "{bad:?}");
    assert!(
        entries.iter().any(|e| e.action == "repartition.start"),
        "the node's own journal: {:?}",
        entries.iter().map(|e| &e.action).collect::<Vec<_>>()
    );
    feed.abort();
}

/// Runs the fleet's loop on a watched `w` x `h` screen while `script`, on its own thread, reads
/// the screen and sends keys as an operator would. When the script ends a quit is sent until
/// the loop has ended (after a failure, Esc too: out of a node left open). Returns the final state and what the script said.
fn scripted(
    rt: &tokio::runtime::Runtime,
    state: FleetState,
    runner: &FleetRunner,
    rx: &mut mpsc::Receiver<FleetMsg>,
    (w, h): (u16, u16),
    script: impl FnOnce(&Screen, &mpsc::Sender<FleetMsg>) -> Result<(), String> + Send + 'static,
) -> (FleetState, Result<(), String>) {
    let (backend, screen) = Watched::new(w, h);
    let ended = Arc::new(AtomicBool::new(false));
    let operator = {
        let (tx, ended) = (runner.tx.clone(), Arc::clone(&ended));
        std::thread::spawn(move || {
            let r = script(&screen, &tx);
            while !ended.load(Ordering::Relaxed) {
                if r.is_err() {
                    let _ = tx.blocking_send(key(KeyCode::Esc));
                }
                let _ = tx.blocking_send(FleetMsg::Command(Command::Quit));
                std::thread::sleep(Duration::from_millis(200));
            }
            r
        })
    };
    let s = rt.block_on(async {
        let mut term = Terminal::new(backend).unwrap();
        let theme = theme();
        let run = partop::ui::fleet::app::run_with(&mut term, state, &theme, runner, rx);
        tokio::time::timeout(Duration::from_secs(180), run)
            .await
            .expect("the script ends within 3 minutes")
            .unwrap()
    });
    ended.store(true, Ordering::Relaxed);
    let r = operator.join().unwrap();
    while rx.try_recv().is_ok() {}
    (s, r)
}

/// A node opened from the fleet is that node's monitor as the active app of the same loop
/// (the same terminal, input and clock: the fleet's loop function never returns meanwhile),
/// on its own samples, read only although the keymap it was given binds every mutating key
/// (staging and a kill are refused and said); Esc brings the fleet back with the sort, the
/// filter, the selection (the same node) and the rows it had.
#[test]
fn a_node_opened_from_the_fleet_is_its_read_only_monitor_in_the_same_loop() {
    let dir = tempfile::tempdir().unwrap();
    let layouts = [("n1", "SPX"), ("n2", "CPX"), ("n3", "SPX")];
    let states: Vec<PathBuf> = layouts
        .iter()
        .map(|(n, _)| dir.path().join(n).join("node.json"))
        .collect();
    for ((n, compute), state) in layouts.iter().zip(&states) {
        sim_node(state, &quick(n, "7.0.2", compute, "NPS1", ONE));
    }
    let nodes = rehearsal_specs(&states);
    let t = transport(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (tx, mut rx) = mpsc::channel(4096);
    let feed = feed_rows(&rt, &nodes, &t, &tx);
    let runner = FleetRunner {
        nodes: nodes.clone(),
        transport: Some(t),
        rollouts: None,
        // Every mutating key bound: what makes the opened node read only is the opening.
        monitor_keymap: keymap(),
        tx,
    };
    let rows = nodes
        .iter()
        .map(|n| NodeRow::connecting(&n.name, true))
        .collect();
    let state = FleetState::new(rows, keymap(), "rehearsal".into(), 1);

    // The operator's fleet: every node reporting, sorted by the next column, `/SPX`, the
    // second node kept selected.
    let (before, r) = scripted(&rt, state, &runner, &mut rx, (120, 40), |screen, tx| {
        screen.wait("three nodes reporting", |t| {
            t.matches("SPX").count() >= 2 && t.contains("CPX")
        })?;
        let mut keys = vec![
            FleetMsg::Command(Command::CycleSort),
            key(KeyCode::Char('/')),
        ];
        keys.extend("SPX".chars().map(|c| key(KeyCode::Char(c))));
        keys.extend([key(KeyCode::Enter), FleetMsg::Command(Command::SelectNext)]);
        for k in keys {
            tx.blocking_send(k).unwrap();
        }
        Ok(())
    });
    r.unwrap();
    assert_eq!(before.filter, "SPX");
    assert_eq!(before.order.len(), 2, "{:?}", before.rows);
    assert_eq!(before.sel, 1);
    assert_ne!(before.sort, partop::ui::fleet::FleetSort::Worst);
    let picked = before.selected().unwrap().to_string();
    let dir_of = |name: &str| {
        layouts
            .iter()
            .map(|(n, _)| *n)
            .find(|n| name.contains(&format!("/{n}/")))
            .unwrap()
    };
    let picked_dir = format!("{}/node.json", dir_of(&picked));
    // The rows keep reporting while the node is open, so a busy sort may reorder them: what
    // must be kept is the sort, its direction, the filter, the rows it lets through and the
    // node selected (checked below by name), not the index of a row that moved.
    let sorted = |order: &[usize]| {
        let mut o = order.to_vec();
        o.sort_unstable();
        o
    };
    let kept = (
        before.sort,
        before.desc,
        before.filter.clone(),
        sorted(&before.order),
    );

    // Enter: the node's monitor, on its own samples (its host, its workload), read only.
    let (after, r) = scripted(
        &rt,
        before,
        &runner,
        &mut rx,
        // Tall enough for the whole help.
        (140, 200),
        move |screen, tx| {
            let picked_dir = picked_dir.as_str();
            tx.blocking_send(key(KeyCode::Enter)).unwrap();
            let monitor = screen.wait_for(&["read only, via rehearsal", picked_dir, "python3"])?;
            if monitor.contains("Nodes:") {
                return Err(format!("the fleet is still drawn:\n{monitor}"));
            }
            // No mutating command is offered, in the footer or in the help (every one checked).
            tx.blocking_send(key(KeyCode::Char('?'))).unwrap();
            let help = screen.wait("the whole help", |t| {
                t.contains("Show or hide this help")
                    && t.contains("legend")
                    && !t.contains("more (Down")
            })?;
            let mutating: Vec<Command> = Command::ALL
                .iter()
                .copied()
                .filter(|c| c.danger() == partop::ui::command::Danger::Mutating)
                .collect();
            // The footer says a command by its name, the help by its line (its first words,
            // before the help wraps it).
            for c in &mutating {
                let line: String = c.doc().chars().take(40).collect();
                if monitor.contains(&c.name().replace('_', " ")) || help.contains(&line) {
                    return Err(format!("{} is offered:\n{monitor}\n{help}", c.name()));
                }
            }
            println!(
                "{} mutating commands offered neither in the footer nor the help",
                mutating.len()
            );
            tx.blocking_send(key(KeyCode::Esc)).unwrap();
            screen.wait("the help closed", |t| {
                !t.contains("Show or hide this help") && t.contains("python3")
            })?;
            tx.blocking_send(key(KeyCode::Char('p'))).unwrap();
            screen.wait_for(&["read-only: stage_change is not available"])?;
            // A kill, in the view where its key is (Processes).
            tx.blocking_send(key(KeyCode::Char('3'))).unwrap();
            tx.blocking_send(key(KeyCode::Char('K'))).unwrap();
            let refused = screen.wait_for(&["read-only: kill_process is not available"])?;
            for overlay in ["Type the", "Cancel"] {
                if refused.contains(overlay) {
                    return Err(format!("a mutation was offered ({overlay}):\n{refused}"));
                }
            }
            // Esc leaves the monitor: the fleet is drawn again, as it was left.
            tx.blocking_send(key(KeyCode::Esc)).unwrap();
            let fleet = screen.wait("the fleet back", |t| {
                t.contains("Nodes:") && !t.contains("Esc: back to the fleet")
            })?;
            if !fleet.contains("SPX") || fleet.contains("CPX") {
                return Err(format!("the filter is not the one left:\n{fleet}"));
            }
            Ok(())
        },
    );
    r.unwrap();
    assert_eq!(
        (
            after.sort,
            after.desc,
            after.filter.clone(),
            sorted(&after.order)
        ),
        kept,
        "sort, filter and the rows it lets through kept"
    );
    assert!(!after.editing);
    assert_eq!(
        after.selected(),
        Some(picked.as_str()),
        "the same node selected"
    );
    assert!(
        after.stage.is_none() && after.notice.is_none(),
        "{:?}",
        after.notice
    );
    feed.abort();
}

/// The staged change's dialog at 80x24 and 120x40, in each phase a key reaches: the modes
/// chosen, the plan shown, the fingerprint being typed after a wrong word (the prompt of one
/// node's apply, `view::stage::typed_prompt`), the rollout stopped with its reason.
#[test]
fn the_stage_dialog_in_each_phase() {
    let nodes: Vec<NodeRow> = ["node1", "node2"]
        .iter()
        .map(|n| NodeRow::connecting(n, true))
        .collect();
    let set = partop::ui::fleet::Staged {
        fingerprint: "4717ddac61b9f52c".into(),
        file: "/var/lib/partop/fleet-sets/set-1.json".into(),
    };
    for (w, h) in [(80u16, 24u16), (120, 40)] {
        let mut s = FleetState::new(nodes.clone(), keymap(), "ssh (partop stream)".into(), 1);
        s.size = (w, h);
        command(&mut s, Command::TagNode);
        command(&mut s, Command::TagNode);
        update(&mut s, key(KeyCode::Char('p')));
        typed(&mut s, "ccm");
        let mut shots = Vec::new();
        let mut draw = |s: &FleetState, what: &str| {
            let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
            t.draw(|f| partop::ui::fleet::render(f, s, &theme()))
                .unwrap();
            let text = format!("{}", t.backend());
            shots.push(format!("== {what}\n{text}"));
            text
        };
        assert!(draw(&s, "choose").contains("compute DPX · memory NPS1"));
        update(&mut s, key(KeyCode::Enter));
        for n in ["node1", "node2"] {
            update(
                &mut s,
                FleetMsg::Said(format!(
                    "{n}: plan 93f422974a479eb1 · logical GPUs 8 -> 16 · 1 to stop"
                )),
            );
        }
        update(&mut s, FleetMsg::Planned(Ok(set.clone())));
        assert!(draw(&s, "review").contains("enter: confirm"));
        update(&mut s, key(KeyCode::Enter));
        typed(&mut s, "nope");
        update(&mut s, key(KeyCode::Enter));
        let text = draw(&s, "typing");
        assert!(text.contains("type 4717ddac61b9f52c exactly"), "{text}");
        assert!(
            text.contains("Type the set's fingerprint (4717ddac61b9f52c)"),
            "{text}"
        );
        assert!(text.contains("enter rolls out · esc goes back"), "{text}");
        for _ in 0..4 {
            update(&mut s, key(KeyCode::Backspace));
        }
        typed(&mut s, &set.fingerprint);
        let e = update(&mut s, key(KeyCode::Enter));
        assert_eq!(e, [partop::ui::fleet::FleetEffect::Rollout(set.clone())]);
        update(
            &mut s,
            FleetMsg::Said("   node1: applied and verified".into()),
        );
        update(
            &mut s,
            FleetMsg::Said("   node2: failed at [4/7] reload the driver: refused (exit 1)".into()),
        );
        update(
            &mut s,
            FleetMsg::RolledOut(Err(
                "the rollout stopped: untouched: none (exit status: 1)".into()
            )),
        );
        assert!(draw(&s, "stopped").contains("the rollout stopped"));
        insta::assert_snapshot!(format!("fleet_stage__{w}x{h}"), shots.join("\n"));
        // The end as the child wrote its last lines, control characters and all (a clear
        // screen, a bell, a C1 CSI, a carriage return): drawn as visible escapes, never as
        // what a terminal would obey.
        update(
            &mut s,
            FleetMsg::RolledOut(Err(
                "the rollout stopped: node2: \u{1b}[2J\u{7} \u{9b}31mrefused\r".into(),
            )),
        );
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| partop::ui::fleet::render(f, &s, &theme()))
            .unwrap();
        let text = format!("{}", t.backend());
        assert!(
            text.contains(r"node2: \x1b[2J\x07 \x9b31mrefused\x0d"),
            "{text}"
        );
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "a control character reached the screen: {text:?}"
        );
    }
}

/// What was typed in the view is what runs: the set file replaced after its fingerprint was
/// typed (by another valid set, its own fingerprint intact, so a self-check passes) is refused
/// by the command the view runs, and nothing is rolled out; the set typed runs. 2 cases.
#[test]
fn a_set_replaced_after_its_fingerprint_was_typed_is_not_rolled_out() {
    use partop::domain::{ComputeMode, MemoryMode};
    let dir = tempfile::tempdir().unwrap();
    let states: Vec<PathBuf> = ["n1", "n2"]
        .iter()
        .map(|n| dir.path().join(n).join("node.json"))
        .collect();
    for (s, n) in states.iter().zip(["n1", "n2"]) {
        sim_node(s, &quick(n, "7.0.2", "SPX", "NPS1", ONE));
    }
    let nodes = rehearsal_specs(&states);
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let rollouts = partop::cli::fleet_rollouts::CommandRollouts::with(
        env!("CARGO_BIN_EXE_partop").into(),
        &dir.path().join("operator/journal.jsonl"),
        vec!["--connect-timeout".into(), "5".into()],
        &nodes,
        &dir.path().join("sets"),
    );
    let quiet = |_: String| {};
    let typed = rollouts
        .plan(
            &names,
            Some(ComputeMode::Dpx),
            Some(MemoryMode::Nps1),
            &quiet,
        )
        .unwrap();
    let other = rollouts
        .plan(
            &names,
            Some(ComputeMode::Cpx),
            Some(MemoryMode::Nps1),
            &quiet,
        )
        .unwrap();
    assert_ne!(typed.fingerprint, other.fingerprint);
    let kept = std::fs::read(&typed.file).unwrap();
    std::fs::copy(&other.file, &typed.file).unwrap();
    let said = std::sync::Mutex::new(Vec::new());
    let r = rollouts.roll_out(&typed, &|l| said.lock().unwrap().push(l));
    let said = said.into_inner().unwrap().join("\n");
    assert!(r.is_err(), "{said}");
    assert!(
        said.contains(&format!(
            "the set read holds {}, not the {} confirmed: nothing is rolled out",
            other.fingerprint, typed.fingerprint
        )),
        "{said}"
    );
    for s in &states {
        assert_eq!(modes(s), "SPX/NPS1", "{}: nothing rolled out", s.display());
    }
    // The file holding the set typed again: it runs.
    std::fs::write(&typed.file, kept).unwrap();
    rollouts.roll_out(&typed, &quiet).unwrap();
    for s in &states {
        assert_eq!(modes(s), "DPX/NPS1", "{}", s.display());
    }
}

/// What an effect needs of the node it acts on. Every `Effect` is named (no `_`): a new one
/// does not compile here until it is decided, and then belongs in `every_effect`.
fn acts_through_this_machine(e: &partop::ui::state::Effect) -> bool {
    use partop::ui::state::Effect as E;
    match e {
        // A change to the node, or (a pod's lookup) this machine's cluster credentials.
        E::Kill(..)
        | E::Apply(_)
        | E::MigApply(_)
        | E::Model(_)
        | E::LookupPod(_)
        | E::Evict(..) => true,
        E::Quit
        | E::RefreshNow
        | E::LoadJournal
        | E::Rescan
        | E::ScanHolders
        | E::LoadThroughput => false,
    }
}

/// One effect of every kind (each model action), as the monitor's reducer builds them: a kill
/// of `pid`, a real plan of a recorded AMD node, a real MIG plan of the recorded H200, a pod.
fn every_effect(pid: u32) -> Vec<(&'static str, partop::ui::state::Effect)> {
    use partop::ui::state::{Effect as E, ModelAction};
    let amd = common::nodes::recorded("spx-nps1-one-model");
    let plan = partop::domain::plan::plan(
        &amd,
        &partop::domain::plan::Draft {
            gpus: vec![],
            compute: None,
            memory: Some(partop::domain::MemoryMode::Nps2),
        },
        partop::domain::plan::Reload::ResetReload,
        120,
        10,
    )
    .unwrap();
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nvidia-smi/h200-nvml-record.json");
    let nv: partop::collect::nvidia::NvNode =
        serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
    let (gpus, processes) = partop::collect::nvidia::assemble(&nv, NOW);
    let h200 = partop::domain::Snapshot {
        host: "h200-node".into(),
        taken_at_ms: NOW,
        gpus,
        processes,
        ..partop::domain::Snapshot::default()
    };
    let mig = partop::domain::mig::plan(
        &h200,
        &partop::domain::mig::MigDraft {
            gpu: 0,
            instances: vec!["2g.35gb".into(); 3],
        },
        "nvidia-smi",
    )
    .unwrap();
    let pod = partop::ui::evict_ask::PodAt {
        namespace: "sim".into(),
        pod: "idle".into(),
        node: "node-a".into(),
        gpu: "0000:05:00.1".into(),
        gpu_id: 1,
    };
    let target = partop::domain::kill::Target {
        pid,
        start_ticks: partop::exec::signal::start_ticks(Path::new("/proc"), pid),
        name: Some("sleep".into()),
        ..Default::default()
    };
    vec![
        ("quit", E::Quit),
        ("refresh", E::RefreshNow),
        (
            "kill",
            E::Kill(vec![target], partop::domain::kill::Sig::Term),
        ),
        ("journal", E::LoadJournal),
        ("apply", E::Apply(Box::new(plan))),
        ("rescan", E::Rescan),
        ("holder scan", E::ScanHolders),
        (
            "model restart",
            E::Model(ModelAction::Restart {
                name: "llama".into(),
            }),
        ),
        (
            "model stop",
            E::Model(ModelAction::Stop {
                name: "llama".into(),
            }),
        ),
        (
            "model add",
            E::Model(ModelAction::AddToRegistry {
                entry: "[[model]]\nname = \"added\"\n".into(),
            }),
        ),
        ("MIG apply", E::MigApply(Box::new(mig))),
        ("throughput", E::LoadThroughput),
        ("pod lookup", E::LookupPod(pod.clone())),
        ("eviction", E::Evict(pod, "uid-1".into())),
    ]
}

/// What came back from one effect: its messages and collector requests, after the first came
/// (or `wait` passed without any), and whether it was Quit.
struct Came {
    quit: bool,
    said: Vec<partop::ui::state::Msg>,
    asked: Vec<partop::collect::task::Request>,
}

fn run_one(
    rt: &tokio::runtime::Runtime,
    exec: &partop::ui::effect::ExecSettings,
    e: partop::ui::state::Effect,
    wait: Duration,
) -> Came {
    let (tx, mut said_rx) = mpsc::channel(64);
    let (rtx, mut asked_rx) = mpsc::channel(64);
    let runner = partop::ui::effect::EffectRunner {
        exec: exec.clone(),
        requests: rtx,
        tx,
    };
    let facts = partop::ui::effect::Facts {
        grace_ms: 1000,
        snapshot: None,
        followed: None,
    };
    rt.block_on(async {
        let quit = runner.run(e, &facts);
        let mut came = Came {
            quit,
            said: Vec::new(),
            asked: Vec::new(),
        };
        let _ = tokio::time::timeout(wait, async {
            tokio::select! {
                Some(m) = said_rx.recv() => came.said.push(m),
                Some(r) = asked_rx.recv() => came.asked.push(r),
            }
        })
        .await;
        // What else it sends right after.
        tokio::time::sleep(Duration::from_millis(200)).await;
        while let Ok(m) = said_rx.try_recv() {
            came.said.push(m);
        }
        while let Ok(r) = asked_rx.try_recv() {
            came.asked.push(r);
        }
        came
    })
}

/// A node opened from the fleet is `ExecSettings::Remote`: it has no local node, so no
/// executor that changes a node can be reached with it. Every `Effect` (14 cases: the 12
/// kinds, each model action) is run on it through the real effect runner: none that acts
/// through this machine reaches an executor (nothing comes back, nothing is asked of the
/// collector, the process a kill names lives on); the journal and the throughput are the
/// node's own, said as such. The same effects on this machine's node (`ExecSettings::Local`,
/// its paths in a temporary directory, a partop that does not exist) each reach their
/// executor and say so: what is watched for is what an executor does.
#[test]
fn no_effect_on_a_node_opened_from_the_fleet_reaches_an_executor() {
    use partop::ui::state::Msg;
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let remote = partop::ui::effect::ExecSettings::Remote(Remote {
        name: "node-a".into(),
        target: partop::collect::fleet::Target::Http {
            addr: "127.0.0.1:9".into(),
        },
        transport: transport(dir.path()),
    });
    let local = partop::ui::effect::ExecSettings::Local(partop::ui::effect::LocalNode {
        journal: dir.path().join("journal.jsonl"),
        proc_root: "/proc".into(),
        sim_state: Some(dir.path().join("node.json")),
        models: Some(dir.path().join("models.toml")),
        model_log_dir: dir.path().join("models"),
        nvidia_smi: None,
        nvidia_replay: false,
        exe: "/nonexistent/partop".into(),
        apply_dir: dir.path().join("apply"),
        kube: partop::collect::cluster::Target {
            kubeconfig: Some(dir.path().join("no-kubeconfig")),
            ..Default::default()
        },
    });
    let mut victim = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let cases = every_effect(victim.id());
    let kinds: std::collections::HashSet<_> = cases
        .iter()
        .map(|(_, e)| std::mem::discriminant(e))
        .collect();
    assert_eq!(
        kinds.len(),
        12,
        "one case of every Effect (acts_through_this_machine names them all)"
    );
    let mut refused = 0;
    let n = cases.len();
    for (name, e) in cases.clone() {
        let changes = acts_through_this_machine(&e);
        let came = run_one(&rt, &remote, e, Duration::from_millis(800));
        if changes {
            assert!(
                !came.quit && came.said.is_empty() && came.asked.is_empty(),
                "{name} on a remote node reached an executor: {:?} {:?}",
                came.said,
                came.asked
            );
            refused += 1;
            continue;
        }
        match name {
            "quit" => assert!(came.quit),
            "refresh" | "rescan" | "holder scan" => assert_eq!(came.asked.len(), 1, "{name}"),
            "journal" => assert!(
                matches!(&came.said[..], [Msg::Journal(e, bad, None, None)]
                    if e.is_empty() && bad[0].contains("node-a: read through partop serve at 127.0.0.1:9, which does not publish the journal")),
                "{:?}",
                came.said
            ),
            "throughput" => assert!(
                matches!(&came.said[..], [Msg::Throughput(Err(why))] if why.contains("node-a keeps its own measurements")),
                "{:?}",
                came.said
            ),
            _ => panic!("{name}: no expectation"),
        }
    }
    assert_eq!(refused, 8, "every case that acts through this machine");
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the process the kill named lives on"
    );
    assert_eq!(n, 14);
    println!("{n} effects on a remote node: {refused} refused before any executor");

    // The control: on this machine's node each of them reaches its executor.
    for (name, e) in cases {
        if !acts_through_this_machine(&e) {
            continue;
        }
        let came = run_one(&rt, &local, e, Duration::from_secs(30));
        let reached = match name {
            "kill" => came.said.iter().any(|m| matches!(m, Msg::Kill(_))),
            "apply" => came
                .said
                .iter()
                .any(|m| matches!(m, Msg::ApplyStarted(Err(e)) if e.contains("could not start"))),
            "MIG apply" => came
                .said
                .iter()
                .any(|m| matches!(m, Msg::MigApplyStarted(Err(_)))),
            "model restart" | "model stop" | "model add" => came
                .asked
                .contains(&partop::collect::task::Request::RefreshNow),
            "pod lookup" => came
                .said
                .iter()
                .any(|m| matches!(m, Msg::PodLooked(Err(_)))),
            "eviction" => came.said.iter().any(|m| matches!(m, Msg::Evict(_))),
            _ => panic!("{name}: no expectation"),
        };
        assert!(
            reached,
            "{name} on this machine's node: {:?} {:?}",
            came.said, came.asked
        );
    }
    let status = (0..50)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            victim.try_wait().unwrap()
        })
        .expect("the local kill ended the process");
    assert!(!status.success(), "{status}");
    let journal = std::fs::read_to_string(dir.path().join("journal.jsonl")).unwrap();
    assert!(journal.contains("kill.sigterm"), "{journal}");
}

/// The monitor of a node opened from the fleet (`remote_monitor`, as Enter builds it, from a
/// keymap that binds every mutating key) on a recorded node: every mutating command, from
/// every view, is refused with the words the operator sees ("read-only: … is not available")
/// and asks for no effect at all. Says how many cases ran.
#[test]
fn every_mutating_command_on_a_node_opened_from_the_fleet_is_refused_in_words() {
    use partop::ui::command::Danger;
    use partop::ui::state::Msg;
    let dir = tempfile::tempdir().unwrap();
    let remote = Remote {
        name: "node-a".into(),
        target: partop::collect::fleet::Target::Http {
            addr: "127.0.0.1:9".into(),
        },
        transport: transport(dir.path()),
    };
    let views: Vec<Command> = Command::ALL
        .iter()
        .copied()
        .filter(|c| c.name().starts_with("view_"))
        .collect();
    let mutating: Vec<Command> = Command::ALL
        .iter()
        .copied()
        .filter(|c| c.danger() == Danger::Mutating)
        .collect();
    assert!(views.len() >= 5 && !mutating.is_empty(), "{views:?}");
    let mut cases = 0;
    for v in &views {
        for c in &mutating {
            let mut s = partop::ui::fleet::app::remote_monitor(&keymap(), &remote);
            partop::ui::state::update(
                &mut s,
                Msg::Snapshot(Arc::new(common::nodes::recorded("dpx-nps2-two-models"))),
            );
            partop::ui::state::update(&mut s, Msg::Tick(common::nodes::T + 1000));
            partop::ui::state::update(&mut s, Msg::Command(*v));
            let effects = partop::ui::state::update(&mut s, Msg::Command(*c));
            assert!(
                effects.is_empty(),
                "{} in {}: {effects:?}",
                c.name(),
                v.name()
            );
            assert_eq!(
                s.notice.as_ref().map(|(t, _)| t.as_str()),
                Some(format!("read-only: {} is not available", c.name()).as_str()),
                "{} in {}",
                c.name(),
                v.name()
            );
            assert!(
                s.staging.is_none()
                    && s.mig_staging.is_none()
                    && s.model_ask.is_none()
                    && s.dialog.is_none()
                    && s.evict_ask.is_none(),
                "{} in {} opened a change",
                c.name(),
                v.name()
            );
            cases += 1;
        }
    }
    println!(
        "{cases} cases: {} mutating commands in each of {} views, every one refused in words",
        mutating.len(),
        views.len()
    );
}
