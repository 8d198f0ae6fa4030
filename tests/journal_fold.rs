//! The journal's one fold, as a property: any sequence of apply-run events, written by the real
//! writer (`exec::runlog::RunLog` through `exec::journal::append`, fsynced, into a real file),
//! with lines of other actions between them and torn lines (a crash mid-write: part of a line,
//! no newline) anywhere, read back by the real reader and folded, gives the state the writer
//! had: the same fold fed the typed events in memory, torn writes never having happened.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

use partop::domain::journal::{Close, RunEvent, RunKind, RunLine, Runs, StepKind};
use partop::exec::runlog::RunLog;
use proptest::prelude::*;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One thing the writer does.
#[derive(Clone, Debug)]
enum Op {
    Start(usize),
    Resume(usize, usize),
    Begin(usize, usize, usize, Option<u32>),
    End(usize, usize, usize, bool, String),
    Done(usize),
    Abandon(usize),
    /// A line of another action (a kill) between the run's lines.
    Other,
    /// A crash mid-write: the first `n` bytes of a line, no newline.
    Torn(usize, usize),
}

/// Three runs: two repartitions and a MIG run, on two nodes.
fn log(dir: &std::path::Path, r: usize) -> RunLog {
    RunLog {
        path: dir.join("journal.jsonl"),
        kind: if r == 2 { "mig" } else { "repartition" },
        run: format!("run{r}"),
        fingerprint: format!("f{r}"),
        simulated: true,
        node: format!("node{}", r % 2),
    }
}

fn op() -> impl Strategy<Value = Op> {
    let detail = "[a-zA-Z0-9 :.,/éü✓-]{0,24}";
    prop_oneof![
        (0usize..3).prop_map(Op::Start),
        (0usize..3, 0usize..8).prop_map(|(r, f)| Op::Resume(r, f)),
        (
            0usize..3,
            0usize..8,
            0usize..StepKind::ALL.len(),
            proptest::option::of(1u32..600)
        )
            .prop_map(|(r, i, k, l)| Op::Begin(r, i, k, l)),
        (
            0usize..3,
            0usize..8,
            0usize..StepKind::ALL.len(),
            any::<bool>(),
            detail
        )
            .prop_map(|(r, i, k, ok, d)| Op::End(r, i, k, ok, d)),
        (0usize..3).prop_map(Op::Done),
        (0usize..3).prop_map(Op::Abandon),
        Just(Op::Other),
        (0usize..3, 1usize..400).prop_map(|(r, n)| Op::Torn(r, n)),
    ]
}

/// The event an op journals (None for the lines of no run and the torn ones).
fn event(op: &Op) -> Option<(usize, RunEvent)> {
    let ev = match op {
        Op::Start(r) => (
            *r,
            RunEvent::Started {
                plan: serde_json::json!({"fingerprint": format!("f{r}"), "steps": []}),
                plan_file: None,
                pid: Some(std::process::id()),
                node: Some(format!("node{}", r % 2)),
                resume: Some(format!("partop apply /p{r}.json --resume")),
                steps: Some(8),
            },
        ),
        Op::Resume(r, f) => (
            *r,
            RunEvent::Resumed {
                pid: Some(std::process::id()),
                from_step: u64::try_from(*f).unwrap(),
            },
        ),
        Op::Begin(r, i, k, l) => (
            *r,
            RunEvent::StepBegun {
                idx: *i,
                key: StepKind::ALL[*k].into(),
                limit_secs: *l,
            },
        ),
        Op::End(r, i, k, ok, d) => (
            *r,
            RunEvent::StepEnded {
                idx: *i,
                key: StepKind::ALL[*k].into(),
                ok: *ok,
                detail: d.clone(),
            },
        ),
        Op::Done(r) => (*r, RunEvent::Closed(Close::Done)),
        Op::Abandon(r) => (*r, RunEvent::Closed(Close::Abandoned)),
        Op::Other | Op::Torn(..) => return None,
    };
    Some(ev)
}

/// Writes `op` through the real writer.
fn write(dir: &std::path::Path, op: &Op) {
    let path = dir.join("journal.jsonl");
    match op {
        Op::Start(r) => log(dir, *r)
            .start_resumable(
                &serde_json::json!({"fingerprint": format!("f{r}"), "steps": []}),
                None,
                8,
                Some(&format!("partop apply /p{r}.json --resume")),
            )
            .unwrap(),
        Op::Resume(r, f) => log(dir, *r).resumed(*f).unwrap(),
        Op::Begin(r, i, k, l) => log(dir, *r)
            .step_begin_limited(*i, &StepKind::ALL[*k], *l)
            .unwrap(),
        Op::End(r, i, k, ok, d) => log(dir, *r)
            .step_end(*i, &StepKind::ALL[*k], *ok, d)
            .unwrap(),
        Op::Done(r) => log(dir, *r).done().unwrap(),
        Op::Abandon(r) => {
            let l = log(dir, *r);
            let run = partop::domain::journal::Run {
                kind: if *r == 2 {
                    RunKind::Mig
                } else {
                    RunKind::Repartition
                },
                run: l.run.clone(),
                fingerprint: l.fingerprint.clone(),
                plan: serde_json::Value::Null,
                plan_file: None,
                started_at: String::new(),
                pid: None,
                node: None,
                steps: None,
                titles: Vec::new(),
                done: Vec::new(),
                results: std::collections::BTreeMap::new(),
                failed: false,
                last: None,
                closed: None,
                resume: None,
                last_begin: None,
            };
            partop::exec::runlog::abandon(&path, &run, true).unwrap();
        }
        Op::Other => partop::exec::journal::append(
            &path,
            &partop::exec::journal::Entry::new(
                "kill.sigterm",
                true,
                serde_json::json!([{"pid": 4242, "name": "python"}]),
                serde_json::json!({"4242": {"outcome": "sent"}}),
            ),
        )
        .unwrap(),
        Op::Torn(r, n) => {
            // What a crash leaves: the start of a whole line, written without its end.
            let l = log(dir, *r);
            let (action, targets, outcome) = RunLine {
                kind: if *r == 2 {
                    RunKind::Mig
                } else {
                    RunKind::Repartition
                },
                run: l.run.clone(),
                fingerprint: l.fingerprint.clone(),
                at: String::new(),
                event: RunEvent::Closed(Close::Done),
            }
            .encode();
            let line = serde_json::to_string(&partop::exec::journal::Entry::new(
                &action, true, targets, outcome,
            ))
            .unwrap();
            let cut = (*n).min(line.len() - 1);
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(&line.as_bytes()[..cut]).unwrap();
        }
    }
}

/// The run state without the clock's stamps (the writer stamps each line as it writes it).
fn unstamped(mut runs: Runs) -> Runs {
    for r in runs.runs.iter_mut().chain(runs.unnamed.iter_mut()) {
        r.started_at.clear();
        if let Some(b) = r.last_begin.as_mut() {
            b.1.clear();
        }
    }
    runs
}

/// One sequence: written through the real writer, read back, folded; against the writer's.
fn check(ops: &[Op]) -> Result<usize, TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = Runs::default();
    for op in ops {
        write(dir.path(), op);
        if let Some((r, ev)) = event(op) {
            let l = log(dir.path(), r);
            writer.apply(&RunLine {
                kind: if r == 2 {
                    RunKind::Mig
                } else {
                    RunKind::Repartition
                },
                run: l.run,
                fingerprint: l.fingerprint,
                at: String::new(),
                event: ev,
            });
        }
    }
    let (entries, bad) = partop::exec::journal::read(&dir.path().join("journal.jsonl")).unwrap();
    // Crashes in a row with no append between them leave one torn line; the next append
    // closes it with a newline.
    let torn = ops.iter().filter(|o| matches!(o, Op::Torn(..))).count();
    let torn_lines = ops
        .iter()
        .enumerate()
        .filter(|(i, o)| {
            matches!(o, Op::Torn(..)) && (*i == 0 || !matches!(ops[i - 1], Op::Torn(..)))
        })
        .count();
    prop_assert_eq!(
        bad.len(),
        torn_lines,
        "each torn line is one skipped line: {:?}",
        bad
    );
    let others = ops.iter().filter(|o| matches!(o, Op::Other)).count();
    prop_assert_eq!(
        entries
            .iter()
            .filter(|e| e.action == "kill.sigterm")
            .count(),
        others
    );
    prop_assert_eq!(unstamped(Runs::of(&entries)), unstamped(writer));
    Ok(torn)
}

#[test]
fn any_sequence_torn_or_not_folds_to_the_writers_state() {
    let cases = 128;
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let ran = AtomicUsize::new(0);
    let torn = AtomicUsize::new(0);
    runner
        .run(&proptest::collection::vec(op(), 0..40), |ops| {
            torn.fetch_add(check(&ops)?, Ordering::SeqCst);
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    let n = ran.load(Ordering::SeqCst);
    eprintln!(
        "{n} sequences of up to 40 writer events ({} torn writes among them) folded to the writer's state",
        torn.load(Ordering::SeqCst)
    );
    assert!(n >= cases as usize, "{n} cases ran");
}

#[test]
fn every_step_kind_reads_and_writes_as_the_word_partop_always_wrote() {
    // Saved plans and old journals hold these words: each kind round-trips through serde as
    // exactly its word, and the plan step that holds it reads from the old JSON unchanged.
    let words = [
        "stop",
        "wait_idle",
        "set_memory",
        "reload",
        "wait_gpus",
        "set_compute",
        "verify",
        "relaunch",
        "mig_mode",
        "destroy",
        "create",
        "balancer_drain",
        "balancer_join",
        "cordon",
        "evict",
        "taint",
        "wait_allocatable",
        "untaint",
        "uncordon",
    ];
    assert_eq!(words.len(), StepKind::ALL.len());
    for (k, w) in StepKind::ALL.iter().zip(words) {
        assert_eq!(serde_json::to_value(k).unwrap(), serde_json::json!(w));
        assert_eq!(
            serde_json::from_value::<StepKind>(serde_json::json!(w)).unwrap(),
            *k
        );
        let step: partop::domain::mig::MigStep = serde_json::from_str(&format!(
            r#"{{"key": "{w}", "title": "t", "commands": []}}"#
        ))
        .unwrap();
        assert_eq!(step.key, *k);
    }
    eprintln!("{} step kinds round-trip as their words", words.len());
}

#[test]
fn reading_only_what_was_appended_gives_what_a_whole_read_gives() {
    // The monitor follows an apply by reading what was appended since its last read: after
    // any sequence of appends, torn writes, a file cut short and a file replaced, its answer is
    // the whole read's.
    #[derive(Clone, Debug)]
    enum Change {
        Append(Op),
        Cut(usize),
        Replace,
    }
    let change = prop_oneof![
        8 => op().prop_map(Change::Append),
        1 => (0usize..2000).prop_map(Change::Cut),
        1 => Just(Change::Replace),
    ];
    let cases = 64;
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let ran = AtomicUsize::new(0);
    let reads = AtomicUsize::new(0);
    runner
        .run(&proptest::collection::vec(change, 0..40), |changes| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("journal.jsonl");
            let mut tail = partop::exec::journal::Tail::default();
            for c in &changes {
                match c {
                    Change::Append(op) => write(dir.path(), op),
                    Change::Cut(n) => {
                        if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) {
                            let len = f.metadata().unwrap().len();
                            f.set_len(len.min(u64::try_from(*n).unwrap())).unwrap();
                        }
                    }
                    Change::Replace => {
                        let other = dir.path().join("other.jsonl");
                        std::fs::write(&other, b"").unwrap();
                        std::fs::rename(&other, &path).unwrap();
                    }
                }
                let whole = partop::exec::journal::read(&path).unwrap();
                let appended = tail.read(&path).unwrap();
                prop_assert_eq!(&appended, &whole, "after {:?}", c);
                reads.fetch_add(1, Ordering::SeqCst);
            }
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    eprintln!(
        "{} sequences, {} reads of what was appended, each equal to the whole read",
        ran.load(Ordering::SeqCst),
        reads.load(Ordering::SeqCst)
    );
}

/// What the fold says of each run, in words that read the same whatever the field types.
fn fold_summary(runs: &Runs) -> String {
    let mut o = String::new();
    for r in runs.runs.iter().chain(runs.unnamed.iter()) {
        o.push_str(&format!(
            "{} {} {} node={:?} steps={:?} done={:?} results={:?} failed={} last={:?} closed={:?} resume={:?} last_begin={:?} resume_point={} outcome={:?}\n",
            r.kind,
            r.run,
            r.fingerprint,
            r.node,
            r.steps,
            r.done,
            r.results,
            r.failed,
            r.last.as_ref().map(|l| (l.0, l.1.to_string(), l.2, l.3.clone())),
            r.closed.as_ref().map(ToString::to_string),
            r.resume,
            r.last_begin,
            r.resume_point(),
            r.outcome(),
        ));
    }
    o
}

/// A journal written by the partop before this change (an older build of this worktree, on
/// simulated nodes: an AMD apply killed at a step's begin and resumed to its end, one killed
/// after a step and closed as abandoned, one applied whole, a MIG layout applied, and one left
/// unfinished after acting) folds to the state that partop's fold gave (`.fold`, recorded from
/// it), and `partop journal` says it in the words that partop printed (`.words`).
#[test]
fn a_journal_written_before_the_typed_keys_folds_and_reads_the_same() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journal");
    let path = dir.join("written-before-jfold.jsonl");
    let (entries, bad) = partop::exec::journal::read(&path).unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    let runs = Runs::of(&entries);
    let want = std::fs::read_to_string(dir.join("written-before-jfold.fold")).unwrap();
    assert_eq!(fold_summary(&runs), want);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_partop"))
        .arg("--journal")
        .arg(&path)
        .arg("journal")
        .env("XDG_STATE_HOME", dir.join("nonexistent"))
        .env("XDG_CONFIG_HOME", dir.join("nonexistent"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let words = std::fs::read_to_string(dir.join("written-before-jfold.words")).unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), words);
    eprintln!(
        "{} lines, {} runs folded and said as before",
        entries.len(),
        runs.runs.len()
    );
}
