//! The Models view's latency (issue 29/27: TTFT and end-to-end p50/p99 per replica and per set)
//! and the placement advice's measurements (`A`: what this node measured under each candidate
//! layout beside the estimate, and that it has none), rendered as text on a recorded DPX/NPS2
//! node with a replica set of two. Review changes with `cargo insta review`.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::nodes::{T, recorded};
use partop::domain::findings::Thresholds;
use partop::domain::latency::{Latency, Quantiles};
use partop::domain::model_status::{ModelState, ServedModel};
use partop::domain::throughput::{Measured, Store};
use partop::ui::command::Command;
use partop::ui::keymap::Keymap;
use partop::ui::state::{Msg, State, update};
use partop::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::path::Path;
use std::sync::Arc;

fn draw(s: &State, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    let th = Theme::load("default", Path::new("/nonexistent")).0;
    t.draw(|f| partop::ui::view::render(f, s, &th)).unwrap();
    format!("{}", t.backend())
}

/// Cumulative buckets with `n` requests in each of the bounds given.
fn window(per: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut c = 0.0;
    let mut out: Vec<(f64, f64)> = per
        .iter()
        .map(|(le, n)| {
            c += n;
            (*le, c)
        })
        .collect();
    out.push((f64::INFINITY, c));
    out
}

/// The dpx-nps2 node serving a set of two replicas as the prober sees it: member 1 with a
/// minute of requests, member 2 just restarted (its histogram went down: N/A with the reason).
fn with_set(w: u16, h: u16) -> State {
    let mut snap = recorded("dpx-nps2-two-models");
    let reg = partop::domain::models::parse(
        "models.toml",
        "[[model]]\nname = \"mistral-12b\"\nmodel = \"mistralai/Mistral-Nemo-Instruct-2407\"\nreplicas = 2\nports = \"8001-8002\"\nmemory_gb = 40\nlaunch.command = [\"vllm\", \"serve\", \"{model}\", \"--port\", \"{port}\"]\n",
    )
    .unwrap();
    let rows = partop::domain::layout::layout_rows(&snap);
    let specs = partop::domain::replicas::expand(&reg, &rows, &[]);
    assert_eq!(specs.len(), 2, "{specs:?}");
    let pids: Vec<u32> = snap.processes.iter().map(|p| p.pid).collect();
    let one = Latency {
        secs: 60.0,
        ttft: Quantiles::of(window(&[(0.1, 20.0), (0.25, 70.0), (0.5, 10.0)])),
        e2e: Quantiles::of(window(&[(2.5, 10.0), (5.0, 80.0), (10.0, 10.0)])),
    };
    let two = Latency {
        secs: 60.0,
        ttft: Quantiles::between(
            &[(0.1, 50.0), (f64::INFINITY, 50.0)],
            &[(0.1, 3.0), (f64::INFINITY, 3.0)],
        ),
        e2e: Quantiles::between(
            &[(5.0, 50.0), (f64::INFINITY, 50.0)],
            &[(5.0, 3.0), (f64::INFINITY, 3.0)],
        ),
    };
    snap.models = specs
        .iter()
        .zip([one, two])
        .enumerate()
        .map(|(k, (spec, latency))| ServedModel {
            name: spec.name.clone(),
            model: spec.model.clone(),
            server: Some("vllm".into()),
            spec: Some(spec.clone()),
            pid: pids.get(k).copied(),
            start_ticks: None,
            gpus: vec![u32::try_from(k).unwrap()],
            bdfs: vec![format!("0000:05:00.{k}")],
            port: Some(spec.port),
            state: ModelState::Healthy,
            reason: None,
            running: Some(12.0),
            waiting: Some(1.0),
            kv_cache: Some(0.5),
            tokens_per_sec: Some(1_520.0),
            restarts: u32::try_from(k).unwrap(),
            log: None,
            log_tail: vec![],
            probed_ms: Some(T),
            latency: Some(latency),
        })
        .collect();
    let (km, _) = Keymap::load("default", None, false);
    let mut s = State::new(km, Thresholds::default(), 1000);
    update(&mut s, Msg::Snapshot(Arc::new(snap)));
    update(&mut s, Msg::Resize(w, h));
    update(&mut s, Msg::Tick(T + 2000));
    update(&mut s, Msg::Command(Command::ViewModels));
    s
}

#[test]
fn latency_per_replica_and_per_set_with_the_reason_where_there_is_none() {
    for (w, h) in [(80, 24), (200, 50)] {
        let s = with_set(w, h);
        let text = draw(&s, w, h);
        // The set heads the table: its replicas' windows added up (member 2 has none).
        assert!(
            w < 150 || text.contains("set mistral-12b: 2/2 healthy · 3,040 tokens/s · TTFT 0.16/0.47 s · E2E 3.8/9.5 s"),
            "{text}"
        );
        if w >= 150 {
            assert!(
                text.contains("TTFT p50/99") && text.contains("E2E p50/99"),
                "{text}"
            );
            assert!(
                text.contains("0.16/0.47") && text.contains("3.8/9.5"),
                "{text}"
            );
        }
        insta::assert_snapshot!(format!("models_latency__{w}x{h}"), text);
    }
    // The selected member with no window says why.
    let mut s = with_set(200, 50);
    update(&mut s, Msg::Command(Command::SelectNext));
    let text = draw(&s, 200, 50);
    assert!(
        text.contains("latency TTFT N/A (bucket le=0.1 went down from 50 to 3 (counter reset: the server restarted))"),
        "{text}"
    );
}

fn measured(layout: &str, replicas: u32, tps: f64, p99: f64, host: &str) -> Measured {
    Measured {
        node: host.into(),
        layout: layout.into(),
        model: "mistral-12b".into(),
        replicas,
        tokens_per_sec: tps,
        running: 40.0,
        waiting: 2.0,
        p50: Some(p99 * 0.7),
        p99: Some(p99),
        secs: 600.0,
        ttft_p50: None,
        ttft_p99: None,
        updated_ms: None,
    }
}

#[test]
fn the_advice_shows_what_this_node_measured_and_says_when_it_has_none() {
    let (w, h) = (120, 40);
    // With measurements (one of another node, which is not shown).
    let mut s = with_set(w, h);
    let host = s.snapshot.as_ref().unwrap().host.clone();
    update(&mut s, Msg::Command(Command::ModelAdvise));
    let advised = s.staging.as_ref().unwrap().advice_for.0.clone();
    assert!(!advised.is_empty());
    let text = draw(&s, w, h);
    assert!(text.contains("reading what this node measured"), "{text}");
    let store = Store {
        format: 1,
        entries: vec![
            measured("DPX/NPS2", 16, 3_040.0, 5.8, &host),
            measured("SPX/NPS1", 8, 2_460.0, 3.9, &host),
            measured("CPX/NPS4", 64, 9_999.0, 1.0, "another-node"),
        ],
    };
    update(&mut s, Msg::Throughput(Ok(store)));
    let text = draw(&s, w, h);
    assert!(
        text.contains("DPX/NPS2: 3,040 tokens/s with 16 replicas, p50 4.1 s, p99 5.8 s")
            && text.contains("SPX/NPS1: 2,460 tokens/s with 8 replicas"),
        "{text}"
    );
    assert!(
        !text.contains("9,999"),
        "another node's measurement: {text}"
    );
    insta::assert_snapshot!("advice_measured__120x40", text);

    // Without: it says so, for the advised layout.
    let mut s = with_set(w, h);
    update(&mut s, Msg::Command(Command::ModelAdvise));
    update(&mut s, Msg::Throughput(Ok(Store::default())));
    let text = draw(&s, w, h);
    assert!(
        text.contains("measured: mistral-12b: no measurement on this node"),
        "{text}"
    );
    insta::assert_snapshot!("advice_unmeasured__120x40", text);

    // A store that cannot be read: said, with the way out.
    let mut s = with_set(w, h);
    update(&mut s, Msg::Command(Command::ModelAdvise));
    update(
        &mut s,
        Msg::Throughput(Err(
            "/x/throughput.json: not a throughput store (...); move it away to start a new one"
                .into(),
        )),
    );
    assert!(draw(&s, w, h).contains("no measurement read: /x/throughput.json"));
}
