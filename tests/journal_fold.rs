//! The journal's folds, as a property: any sequence of journal events, written by the real
//! writers (`exec::runlog`: `RunLog` for apply runs, `rollout` for fleet rollouts, `evicted` for
//! Findings evictions, `model` for model starts and stops, each through `exec::journal::append`,
//! fsynced, into a real file), with
//! lines of other actions between them and torn lines (a crash mid-write: part of any of these
//! lines, no newline) anywhere, read back by the real reader and folded, gives the state the
//! writer had: the same folds (`Runs` for runs, evictions and model launches, `Rollouts` for
//! rollouts) fed the
//! typed events in memory, torn writes never having happened. The three kinds share one file
//! here (the fleet's rollouts have their own journal): each fold passes over the others' lines.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

use partop::domain::journal::{
    Close, EvictEvent, ModelEvent, ModelStart, ModelStop, RolloutEvent, RolloutNode, Rollouts,
    RunEvent, RunKind, RunLine, Runs, StepKind,
};
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
    /// A line of fleet rollout `ro{n}`.
    Rollout(usize, RolloutEvent),
    /// A line of a Findings eviction.
    Evict(EvictEvent),
    /// A line of a model's start or stop.
    Model(ModelEvent),
    /// A line of another action (a kill) between the run's lines.
    Other,
    /// A crash mid-write of the op's line: its first `n` bytes, no newline.
    Torn(Box<Op>, usize),
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

const DETAIL: &str = "[a-zA-Z0-9 :.,/éü✓-]{0,24}";

/// The three nodes a rollout's lines name.
fn node(n: usize) -> RolloutNode {
    RolloutNode {
        node: format!("node{n}"),
        dest: format!("127.0.0.1:{}", 19000 + n),
        plan: format!("p{n}"),
    }
}

/// Any line of a fleet rollout (two rollouts, of two plan sets, over three nodes), each step of
/// a change through the cluster by its journal key.
fn rollout_event() -> impl Strategy<Value = RolloutEvent> {
    let step = prop::sample::select(
        partop::domain::cluster_rollout::Step::ALL
            .iter()
            .map(|s| s.key().to_string())
            .collect::<Vec<_>>(),
    );
    prop_oneof![
        (0usize..2, 1usize..4, 1usize..3).prop_map(|(set, n, parallel)| RolloutEvent::Started {
            set: format!("set{set}"),
            file: format!("/sets/set{set}.json"),
            nodes: (0..n).map(node).collect(),
            parallel,
        }),
        (
            0usize..3,
            proptest::option::of(any::<bool>()),
            proptest::option::of(DETAIL)
        )
            .prop_map(|(n, resume, error)| RolloutEvent::NodeStarted {
                node: node(n),
                resume,
                error,
            }),
        (0usize..3, step, any::<bool>(), proptest::option::of(DETAIL)).prop_map(
            |(n, step, done, text)| RolloutEvent::NodeStep {
                node: node(n).node,
                plan: node(n).plan,
                step,
                done,
                text,
            }
        ),
        (0usize..3).prop_map(|n| RolloutEvent::NodeDone {
            node: node(n).node,
            plan: node(n).plan,
        }),
        (0usize..3, DETAIL).prop_map(|(n, error)| RolloutEvent::NodeFailed {
            node: node(n).node,
            plan: node(n).plan,
            error,
        }),
        (0usize..2, proptest::collection::vec(0usize..3, 0..3)).prop_map(|(set, left)| {
            RolloutEvent::Stopped {
                set: format!("set{set}"),
                untouched: left.into_iter().map(|n| node(n).node).collect(),
            }
        }),
        (0usize..2).prop_map(|set| RolloutEvent::Done {
            set: format!("set{set}"),
        }),
    ]
}

/// Any line of a Findings eviction (three evictions: a result may come without its begin).
fn evict_event() -> impl Strategy<Value = EvictEvent> {
    prop_oneof![
        (0usize..3, "[a-f0-9-]{0,12}").prop_map(|(i, uid)| EvictEvent::Begun {
            id: format!("ev{i}"),
            namespace: "ml".into(),
            pod: format!("pod{i}"),
            uid,
            node: format!("node{}", i % 2),
            gpu: format!("0000:0{i}:00.1"),
        }),
        (0usize..3, any::<bool>(), DETAIL).prop_map(|(i, ok, detail)| EvictEvent::Ended {
            id: format!("ev{i}"),
            pod: format!("ml/pod{i}"),
            ok,
            detail,
        }),
    ]
}

/// Any line of a model's start or stop (two models, three pids; a start that launched no
/// process: a unit or a container).
fn model_event() -> impl Strategy<Value = ModelEvent> {
    let start = (0usize..2, proptest::collection::vec(0u32..8, 0..3), DETAIL).prop_map(
        |(m, devices, command)| ModelStart {
            model: format!("m{m}"),
            bdfs: devices.iter().map(|d| format!("0000:0{d}:00.1")).collect(),
            devices,
            command,
        },
    );
    let stop =
        (0usize..2, proptest::option::of(1000u32..1003), DETAIL).prop_map(|(m, pid, command)| {
            ModelStop {
                model: format!("m{m}"),
                pid,
                command,
            }
        });
    let launched = prop_oneof![
        (proptest::option::of(1000u32..1003), DETAIL).prop_map(Ok),
        DETAIL.prop_map(Err),
    ];
    let stopped = prop_oneof![DETAIL.prop_map(Ok), DETAIL.prop_map(Err)];
    prop_oneof![
        start.clone().prop_map(ModelEvent::Starting),
        (start, launched).prop_map(|(m, r)| ModelEvent::Started(m, r)),
        stop.clone().prop_map(ModelEvent::Stopping),
        (stop, stopped).prop_map(|(m, r)| ModelEvent::Stopped(m, r)),
    ]
}

/// Any whole line the writers write.
fn whole_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0usize..3).prop_map(Op::Start),
        1 => (0usize..3, 0usize..8).prop_map(|(r, f)| Op::Resume(r, f)),
        1 => (
            0usize..3,
            0usize..8,
            0usize..StepKind::ALL.len(),
            proptest::option::of(1u32..600)
        )
            .prop_map(|(r, i, k, l)| Op::Begin(r, i, k, l)),
        1 => (
            0usize..3,
            0usize..8,
            0usize..StepKind::ALL.len(),
            any::<bool>(),
            DETAIL
        )
            .prop_map(|(r, i, k, ok, d)| Op::End(r, i, k, ok, d)),
        1 => (0usize..3).prop_map(Op::Done),
        1 => (0usize..3).prop_map(Op::Abandon),
        3 => (0usize..2, rollout_event()).prop_map(|(ro, ev)| Op::Rollout(ro, ev)),
        2 => evict_event().prop_map(Op::Evict),
        2 => model_event().prop_map(Op::Model),
        1 => Just(Op::Other),
    ]
}

/// Any line, whole or torn.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => whole_op(),
        2 => (whole_op(), 1usize..400).prop_map(|(op, n)| Op::Torn(Box::new(op), n)),
    ]
}

fn run_kind(r: usize) -> RunKind {
    if r == 2 {
        RunKind::Mig
    } else {
        RunKind::Repartition
    }
}

/// The event an op journals in an apply run (None for the lines of no run and the torn ones).
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
        Op::Rollout(..) | Op::Evict(_) | Op::Model(_) | Op::Other | Op::Torn(..) => return None,
    };
    Some(ev)
}

/// The kill line written between the others.
fn other_entry() -> partop::exec::journal::Entry {
    partop::exec::journal::Entry::new(
        "kill.sigterm",
        true,
        serde_json::json!([{"pid": 4242, "name": "python"}]),
        serde_json::json!({"4242": {"outcome": "sent"}}),
    )
}

/// The line a whole op writes, in the one encoding of its kind.
fn line_of(op: &Op) -> String {
    let entry = |(action, targets, outcome): (String, serde_json::Value, serde_json::Value)| {
        partop::exec::journal::Entry::new(&action, true, targets, outcome)
    };
    let e = match op {
        Op::Rollout(ro, ev) => {
            let (action, targets, outcome) = ev.encode(&format!("ro{ro}"));
            entry((action.to_string(), targets, outcome))
        }
        Op::Evict(ev) => entry(ev.encode()),
        Op::Model(ev) => {
            let (action, targets, outcome) = ev.encode();
            entry((action.to_string(), targets, outcome))
        }
        Op::Other | Op::Torn(..) => other_entry(),
        run_op => {
            let (r, event) = event(run_op).unwrap();
            entry(
                RunLine {
                    kind: run_kind(r),
                    run: format!("run{r}"),
                    fingerprint: format!("f{r}"),
                    at: String::new(),
                    event,
                }
                .encode(),
            )
        }
    };
    serde_json::to_string(&e).unwrap()
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
                kind: run_kind(*r),
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
        Op::Rollout(ro, ev) => {
            partop::exec::runlog::rollout(&path, &format!("ro{ro}"), ev).unwrap();
        }
        Op::Evict(ev) => partop::exec::runlog::evicted(&path, ev, true).unwrap(),
        Op::Model(ev) => partop::exec::runlog::model(&path, ev, true).unwrap(),
        Op::Other => partop::exec::journal::append(&path, &other_entry()).unwrap(),
        Op::Torn(whole, n) => {
            // What a crash leaves: the start of a whole line, written without its end.
            let line = line_of(whole);
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

/// The state without the clock's stamps (the writer stamps each line as it writes it).
fn unstamped(mut runs: Runs) -> Runs {
    for r in runs.runs.iter_mut().chain(runs.unnamed.iter_mut()) {
        r.started_at.clear();
        if let Some(b) = r.last_begin.as_mut() {
            b.1.clear();
        }
    }
    for x in &mut runs.evictions {
        x.at.clear();
    }
    runs
}

/// What the writer's state became: the typed events fed to the folds in memory.
#[derive(Default)]
struct Writer {
    runs: Runs,
    rollouts: Rollouts,
}

impl Writer {
    fn did(&mut self, op: &Op) {
        match op {
            Op::Rollout(ro, ev) => self.rollouts.apply(&format!("ro{ro}"), ev),
            Op::Evict(ev) => self.runs.evicted(ev, ""),
            Op::Model(ev) => self.runs.model(ev),
            op => {
                if let Some((r, event)) = event(op) {
                    self.runs.apply(&RunLine {
                        kind: run_kind(r),
                        run: format!("run{r}"),
                        fingerprint: format!("f{r}"),
                        at: String::new(),
                        event,
                    });
                }
            }
        }
    }
}

/// The rollouts and evictions as their docs say the lines make them, computed apart from the
/// folds (each start and each begin with the lines of its id up to the next one of that id),
/// so a fold that files a line in the wrong place fails here, not only a line read wrong.
fn model(
    ops: &[Op],
) -> (
    Rollouts,
    Vec<partop::domain::journal::Eviction>,
    Vec<(String, u32)>,
) {
    let rollouts: Vec<(usize, &RolloutEvent)> = ops
        .iter()
        .filter_map(|o| match o {
            Op::Rollout(ro, ev) => Some((*ro, ev)),
            _ => None,
        })
        .collect();
    let mut model = Rollouts::default();
    for (i, (ro, ev)) in rollouts.iter().enumerate() {
        let RolloutEvent::Started { set, .. } = ev else {
            continue;
        };
        let mut r = partop::domain::journal::Rollout {
            id: format!("ro{ro}"),
            set: set.clone(),
            done: Vec::new(),
            failed: Vec::new(),
            started: Vec::new(),
            steps: Vec::new(),
            trail: Vec::new(),
            finished: false,
        };
        let own = rollouts[i + 1..]
            .iter()
            .filter(|(id, _)| id == ro)
            .take_while(|(_, ev)| !matches!(ev, RolloutEvent::Started { .. }));
        for (_, ev) in own {
            match ev {
                RolloutEvent::NodeStarted { node, .. } => r.started.push(node.node.clone()),
                RolloutEvent::NodeStep {
                    node, step, done, ..
                } => {
                    r.trail.push((node.clone(), step.clone(), *done));
                    if *done {
                        r.steps.push((node.clone(), step.clone()));
                    }
                }
                RolloutEvent::NodeDone { node, .. } => r.done.push(node.clone()),
                RolloutEvent::NodeFailed { node, .. } => r.failed.push(node.clone()),
                RolloutEvent::Done { .. } => r.finished = true,
                _ => {}
            }
        }
        model.rollouts.push(r);
    }
    let evictions: Vec<&EvictEvent> = ops
        .iter()
        .filter_map(|o| match o {
            Op::Evict(ev) => Some(ev),
            _ => None,
        })
        .collect();
    let id_of = |ev: &EvictEvent| match ev {
        EvictEvent::Begun { id, .. } | EvictEvent::Ended { id, .. } => id.clone(),
    };
    let mut evicted = Vec::new();
    for (i, ev) in evictions.iter().enumerate() {
        let EvictEvent::Begun {
            id,
            namespace,
            pod,
            uid,
            node,
            gpu,
        } = ev
        else {
            continue;
        };
        let outcome = evictions[i + 1..]
            .iter()
            .filter(|x| id_of(x) == *id)
            .take_while(|x| matches!(x, EvictEvent::Ended { .. }))
            .filter_map(|x| match x {
                EvictEvent::Ended { ok, detail, .. } => Some((*ok, detail.clone())),
                EvictEvent::Begun { .. } => None,
            })
            .last();
        evicted.push(partop::domain::journal::Eviction {
            id: id.clone(),
            pod: format!("{namespace}/{pod}"),
            uid: uid.clone(),
            node: node.clone(),
            gpu: gpu.clone(),
            at: String::new(),
            outcome,
        });
    }
    let launched = ops
        .iter()
        .filter_map(|o| match o {
            Op::Model(ModelEvent::Started(m, Ok((Some(pid), _)))) => Some((m.model.clone(), *pid)),
            _ => None,
        })
        .collect();
    (model, evicted, launched)
}

/// How many lines of each kind one sequence wrote: runs, rollouts, evictions, models, torn.
type Counts = [usize; 5];

/// One sequence: written through the real writers, read back, folded; against the writer's.
fn check(ops: &[Op]) -> Result<Counts, TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = Writer::default();
    for op in ops {
        write(dir.path(), op);
        writer.did(op);
    }
    let (entries, bad) = partop::exec::journal::read(&dir.path().join("journal.jsonl")).unwrap();
    // Crashes in a row with no append between them leave one torn line; the next append
    // closes it with a newline.
    let torn = |o: &Op| matches!(o, Op::Torn(..));
    let torn_lines = ops
        .iter()
        .enumerate()
        .filter(|(i, o)| torn(o) && (*i == 0 || !torn(&ops[i - 1])))
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
    let (rollouts, evictions, launched) = model(ops);
    prop_assert_eq!(
        &writer.runs.launched,
        &launched,
        "the fold keeps each launch"
    );
    prop_assert_eq!(
        &writer.rollouts,
        &rollouts,
        "the fold files each rollout line"
    );
    prop_assert_eq!(
        &unstamped(writer.runs.clone()).evictions,
        &evictions,
        "the fold files each eviction line"
    );
    prop_assert_eq!(unstamped(Runs::of(&entries)), unstamped(writer.runs));
    prop_assert_eq!(Rollouts::of(&entries), writer.rollouts);
    let count = |f: fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
    Ok([
        count(|o| event(o).is_some()),
        count(|o| matches!(o, Op::Rollout(..))),
        count(|o| matches!(o, Op::Evict(_))),
        count(|o| matches!(o, Op::Model(_))),
        count(|o| matches!(o, Op::Torn(..))),
    ])
}

#[test]
fn any_sequence_torn_or_not_folds_to_the_writers_state() {
    let cases = 256;
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let ran = AtomicUsize::new(0);
    let counts: [AtomicUsize; 5] = Default::default();
    runner
        .run(&proptest::collection::vec(op(), 0..60), |ops| {
            let c = check(&ops)?;
            for (n, total) in c.iter().zip(&counts) {
                total.fetch_add(*n, Ordering::SeqCst);
            }
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    let n = ran.load(Ordering::SeqCst);
    let [runs, rollouts, evictions, models, torn] = counts.map(|c| c.load(Ordering::SeqCst));
    eprintln!(
        "{n} sequences of up to 60 writer events ({runs} apply-run, {rollouts} rollout, {evictions} eviction and {models} model lines, {torn} torn writes among them) folded to the writer's state"
    );
    assert!(n >= cases as usize, "{n} cases ran");
    assert!(
        runs > 0 && rollouts > 0 && evictions > 0 && models > 0 && torn > 0,
        "every kind of line was written"
    );
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
