//! `/` in every list view, headless: for each view (GPUs, Processes, Models, Findings, Journal,
//! History's process list), every word its rows show on screen is typed
//! as the filter, and the rows kept are exactly those that show that word (any case); Esc
//! brings every row back. The words are read from the drawn screen, not from the code that
//! filters, so a column the filter does not know is caught.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::nodes::{T, pin, recorded};
use partop::domain::findings::Thresholds;
use partop::domain::journal::Entry;
use partop::domain::model_status::{ModelState, ServedModel};
use partop::ui::command::Command;
use partop::ui::keymap::Keymap;
use partop::ui::state::{Msg, ProcRow, State, View, update};
use partop::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::path::Path;
use std::sync::Arc;

const W: u16 = 200;
const H: u16 = 60;

fn draw(s: &State) -> Vec<String> {
    let mut t = Terminal::new(TestBackend::new(W, H)).unwrap();
    let th = Theme::load("default", Path::new("/nonexistent")).0;
    t.draw(|f| partop::ui::view::render(f, s, &th)).unwrap();
    let buf = t.backend().buffer().clone();
    (0..H)
        .map(|y| (0..W).map(|x| buf[(x, y)].symbol().to_string()).collect())
        .collect()
}

fn press(s: &mut State, code: KeyCode) {
    update(s, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

fn type_filter(s: &mut State, text: &str) {
    press(s, KeyCode::Char('/'));
    assert!(s.editing_filter, "/ starts the filter in {:?}", s.view);
    for c in text.chars() {
        press(s, KeyCode::Char(c));
    }
    press(s, KeyCode::Enter);
}

/// A node with findings (a noisy neighbour, and idle partitions at once), two model servers and
/// a journal with a kill and a failed one.
fn node() -> State {
    let (km, e) = Keymap::load("default", None, false);
    assert!(e.is_empty());
    let th = Thresholds {
        idle_after_ms: 0,
        idle_vram_bytes: 1,
        ..Thresholds::default()
    };
    let mut s = State::new(km, th, 1000);
    update(&mut s, Msg::Resize(W, H));
    let mut snap = recorded("noisy-neighbour");
    // A second process beside the first on its GPU, so History lists more than one.
    let mut twin = snap.processes[0].clone();
    twin.pid += 7;
    twin.name = Some("trainer".into());
    twin.command = Some("python3 train.py --epochs 3".into());
    snap.processes.push(twin);
    update(&mut s, Msg::Snapshot(Arc::new(snap.clone())));
    pin(&mut snap, T + 45_000);
    let pids: Vec<u32> = snap.processes.iter().map(|p| p.pid).collect();
    let served = |name: &str, model: &str, gpu: u32, state: ModelState| {
        let mut m: ServedModel = serde_json::from_value(serde_json::json!({
            "name": name, "model": model, "gpus": [gpu], "bdfs": [], "state": "unknown",
            "restarts": gpu, "log_tail": [],
        }))
        .unwrap();
        m.state = state;
        m.pid = pids.get(gpu as usize).copied();
        m.port = Some(8000 + u16::try_from(gpu).unwrap());
        m
    };
    snap.models = vec![
        served(
            "llama-70b",
            "meta-llama/Llama-3.1-70B",
            0,
            ModelState::Healthy,
        ),
        served("vllm:8001", "Qwen/Qwen2.5-32B", 1, ModelState::Starting),
        served(
            "chat-model",
            "mistral/Mixtral-8x7B",
            2,
            ModelState::Unhealthy,
        ),
    ];
    update(&mut s, Msg::Snapshot(Arc::new(snap)));
    update(&mut s, Msg::Tick(T + 46_000));
    let entry = |i: u32, action: &str, user: &str, outcome: serde_json::Value| -> Entry {
        serde_json::from_value(serde_json::json!({
            "at": format!("2026-11-20T03:{:02}:00Z", 10 + i),
            "who": {"user": user, "uid": 1000 + i},
            "host": "gpu-node-3",
            "action": action,
            "targets": [{"pid": 4000 + i, "name": format!("worker{i}")}],
            "outcome": outcome,
        }))
        .unwrap()
    };
    let entries = vec![
        entry(
            0,
            "kill.sigterm",
            "ops",
            serde_json::json!({"still_alive": [], "waited_ms": 150}),
        ),
        entry(
            1,
            "kill.sigkill",
            "alice",
            serde_json::json!({"ok": false, "error": "EPERM"}),
        ),
        entry(
            2,
            "kill.sigterm",
            "bob",
            serde_json::json!({"still_alive": [4002], "waited_ms": 9000}),
        ),
    ];
    update(&mut s, Msg::Journal(entries, Vec::new(), None, None));
    s
}

/// The lines of each row of the current view's whole list, as drawn, found by a text only
/// that row shows: `span` lines, or with `span` 0 every line down to the next row or a blank
/// line (a wrapped row).
fn row_texts(screen: &[String], keys: &[String], span: usize) -> Vec<Option<String>> {
    let at: Vec<Option<usize>> = keys
        .iter()
        .map(|k| screen.iter().position(|l| l.contains(k.as_str())))
        .collect();
    let blank = |l: &String| l.chars().all(|c| c == ' ' || c == '│');
    at.iter()
        .map(|y| {
            let y = (*y)?;
            let end = if span > 0 {
                (y + span).min(screen.len())
            } else {
                (y + 1..screen.len())
                    .find(|e| at.contains(&Some(*e)) || blank(&screen[*e]))
                    .unwrap_or(screen.len())
            };
            Some(screen[y..end].join(" "))
        })
        .collect()
}

/// A row's words as a person reads them: split at spaces and borders, the selection mark
/// dropped, a word cut with an ellipsis read as what is left of it; sparklines, gauges and
/// lone punctuation are drawing, not words (a word has a letter or a digit).
fn words_of(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || c == '│')
        .map(|w| w.trim_start_matches('▶').trim_end_matches('…').to_string())
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .collect()
}

/// The logical GPU (its index) with the most processes: History lists them.
fn busiest_gpu(s: &State) -> usize {
    let snap = s.snapshot.as_ref().unwrap();
    snap.logical()
        .enumerate()
        .max_by_key(|(_, (_, l))| {
            snap.processes
                .iter()
                .filter(|p| p.gpus.iter().any(|u| u.gpu_id == l.gpu_id))
                .count()
        })
        .map_or(0, |(i, _)| i)
}

/// Every word every row of `view` shows filters to the rows that show it. Returns the cases
/// run.
fn every_word_filters(
    view: Command,
    keys: impl Fn(&State) -> Vec<String>,
    span: usize,
    exact: bool,
) -> usize {
    let mut s = node();
    update(&mut s, Msg::Command(view));
    if view == Command::ViewHistory {
        s.gpu_sel = busiest_gpu(&s);
    }
    let keys = keys(&s);
    assert!(
        keys.len() >= 2,
        "{view:?}: {} rows, a filter needs more",
        keys.len()
    );
    let all = row_texts(&draw(&s), &keys, span);
    assert!(
        all.iter().all(Option::is_some),
        "{view:?}: every row on screen: {all:?}"
    );
    let all: Vec<String> = all.into_iter().flatten().collect();
    let mut words: Vec<String> = all.iter().flat_map(|t| words_of(t)).collect();
    words.sort();
    words.dedup();
    let mut cases = 0;
    for word in &words {
        for typed in [word.to_lowercase(), word.to_uppercase()] {
            type_filter(&mut s, &typed);
            let shown = row_texts(&draw(&s), &keys, span);
            for (i, (before, now)) in all.iter().zip(&shown).enumerate() {
                let has = before.to_lowercase().contains(&word.to_lowercase());
                if has {
                    assert!(
                        now.is_some(),
                        "{view:?}: /{typed} hides row {i}, which shows {word:?}: {before}"
                    );
                } else if exact {
                    assert!(
                        now.is_none(),
                        "{view:?}: /{typed} keeps row {i}, which does not show {word:?}: {before}"
                    );
                }
            }
            cases += 1;
            press(&mut s, KeyCode::Esc);
            assert!(s.filter.is_empty(), "{view:?}: Esc clears the filter");
            let back = row_texts(&draw(&s), &keys, span);
            assert!(
                back.iter().all(Option::is_some),
                "{view:?}: Esc shows every row again"
            );
        }
    }
    cases
}

#[test]
fn slash_matches_every_word_shown_in_every_list_view() {
    let mut total = 0;
    // GPUs: a row is found by its BDF column.
    total += every_word_filters(
        Command::ViewGpus,
        |s| {
            s.snapshot
                .as_ref()
                .unwrap()
                .logical()
                .map(|(_, l)| format!(" {} ", l.bdf.trim_start_matches("0000:")))
                .collect()
        },
        1,
        true,
    );
    // Processes: by its pid; the filter also searches what a row cuts (the whole command
    // line, the container), so a word may keep more rows than show it, never fewer.
    total += every_word_filters(
        Command::ViewProcesses,
        |s| {
            let snap = s.snapshot.as_ref().unwrap();
            s.rows
                .iter()
                .filter_map(|r| match r {
                    ProcRow::Process { index, .. } => {
                        Some(format!(" {} ", snap.processes[*index].pid))
                    }
                    ProcRow::Heading(_) => None,
                })
                .collect()
        },
        1,
        false,
    );
    // Models: by name.
    total += every_word_filters(
        Command::ViewModels,
        |s| {
            s.snapshot
                .as_ref()
                .unwrap()
                .models
                .iter()
                .map(|m| format!("{} ", m.name))
                .collect()
        },
        1,
        true,
    );
    // Findings: by what and where (each over its lines: the finding, and what was seen,
    // wrapped).
    total += every_word_filters(
        Command::ViewFindings,
        |s| {
            s.findings
                .iter()
                .map(|f| format!("({})", f.subject))
                .collect()
        },
        0,
        true,
    );
    // Journal: by its time.
    total += every_word_filters(
        Command::ViewJournal,
        |s| {
            s.journal
                .0
                .iter()
                .map(|e| e.at[5..19].replace('T', " "))
                .collect()
        },
        1,
        true,
    );
    // History: the processes on the selected GPU (the one with the most), by pid.
    total += every_word_filters(
        Command::ViewHistory,
        |s| {
            let snap = s.snapshot.as_ref().unwrap();
            let on = |gpu: u32| {
                snap.processes
                    .iter()
                    .filter(|p| p.gpus.iter().any(|u| u.gpu_id == gpu))
                    .map(|p| format!(" {} ", p.pid))
                    .collect::<Vec<_>>()
            };
            let (_, l) = snap.logical().nth(s.gpu_sel).unwrap();
            on(l.gpu_id)
        },
        1,
        true,
    );
    println!("{total} words typed as filters over 6 list views");
    assert!(total > 100, "{total} cases");
}

#[test]
fn the_filter_belongs_to_its_view_and_the_selection_stays_on_a_kept_row() {
    let mut s = node();
    update(&mut s, Msg::Command(Command::ViewGpus));
    let n = s.snapshot.as_ref().unwrap().logical_count();
    let last = s
        .snapshot
        .as_ref()
        .unwrap()
        .logical()
        .last()
        .map(|(_, l)| l.bdf.clone())
        .unwrap();
    let id = last.trim_start_matches("0000:").to_string();
    type_filter(&mut s, &id.to_uppercase());
    assert_eq!(
        s.order(View::Gpus),
        vec![n - 1],
        "/{id} keeps its GPU alone"
    );
    assert_eq!(s.gpu_sel, n - 1, "the selection moves onto the kept row");
    // Movement stays on the rows shown.
    press(&mut s, KeyCode::Up);
    assert_eq!(s.gpu_sel, n - 1);
    // Another view's list is not filtered by it.
    update(&mut s, Msg::Command(Command::ViewFindings));
    assert_eq!(s.order(View::Findings).len(), s.findings.len());
    // A filter that keeps nothing leaves nothing to open.
    update(&mut s, Msg::Command(Command::ViewGpus));
    type_filter(&mut s, "no-such-word");
    assert!(s.order(View::Gpus).is_empty());
    assert!(s.selection_target().is_none());
    press(&mut s, KeyCode::Esc);
    assert_eq!(s.order(View::Gpus).len(), n, "Esc clears");
}
