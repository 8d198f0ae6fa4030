//! The journal in words, for the monitor's Journal view and `partop journal`: one line per
//! entry, an apply's steps named from its journaled plan and counted from 1 as the apply's own
//! log counts them (`step 3 of 9: set memory mode NPS1 · done`). Pure: entries in, text out;
//! every string from the journal is escaped (a journal is a file anyone with write access
//! could have edited).

use crate::domain::journal::{Close, Entry, EvictEvent, Run, RunEvent, RunLine, Runs, StepKey};
use crate::domain::text::escape_controls;
use serde_json::Value;

/// A JSON scalar in words.
pub fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "—".into(),
        Value::String(s) => escape_controls(s).into_owned(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        other => other.to_string(),
    }
}

/// `key: value` lines of a JSON value, nested keys joined with dots.
pub fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                let k = escape_controls(k);
                let key = if prefix.is_empty() {
                    k.into_owned()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, out);
            }
        }
        Value::Array(a) if a.is_empty() => out.push((prefix.to_string(), "none".into())),
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            out.push((
                prefix.to_string(),
                a.iter().map(scalar).collect::<Vec<_>>().join(", "),
            ));
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), x, out);
            }
        }
        other => out.push((prefix.to_string(), scalar(other))),
    }
}

/// The targets in a few words: `pid 4242 python3 (svc-ml, 18.0 GiB)`, a model, a run.
pub fn targets_summary(v: &Value) -> String {
    // Every string through `scalar`, which escapes it.
    let text = |t: &Value, k: &str| t.get(k).filter(|x| x.is_string()).map(scalar);
    let one = |t: &Value| -> String {
        if let Some(pid) = t.get("pid").and_then(Value::as_u64) {
            let name = text(t, "name").unwrap_or_default();
            let model = text(t, "model");
            format!(
                "pid {pid} {}",
                model.map_or_else(|| name.to_string(), |m| format!("{name} [{m}]"))
            )
            .trim_end()
            .to_string()
        } else if let Some(m) = text(t, "model") {
            format!("model {m}")
        } else if let Some(f) = text(t, "fingerprint") {
            format!("plan {f}")
        } else {
            scalar(t)
        }
    };
    match v {
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_u64) => format!(
            "pid {}",
            a.iter().map(scalar).collect::<Vec<_>>().join(", ")
        ),
        Value::Array(a) if a.len() == 1 => one(&a[0]),
        Value::Array(a) => format!("{} targets", a.len()),
        Value::Object(_) => one(v),
        other => scalar(other),
    }
}

/// The outcome in a few words.
pub fn outcome_summary(v: &Value) -> String {
    let Value::Object(m) = v else {
        return scalar(v);
    };
    if let Some(e) = m.get("error").filter(|e| !e.is_null()) {
        return format!("failed: {}", scalar(e));
    }
    for k in ["state", "detail", "step", "result"] {
        if let Some(x) = m.get(k).filter(|x| !x.is_null()) {
            return scalar(x);
        }
    }
    if let Some(still) = m.get("still_alive").and_then(Value::as_array) {
        let waited = m.get("waited_ms").and_then(Value::as_u64).unwrap_or(0);
        return if still.is_empty() {
            format!("all exited within {:.1}s", waited as f64 / 1000.0)
        } else {
            format!("{} still running", still.len())
        };
    }
    // Per pid (`{"4242": {"outcome": "sent"}}`).
    if !m.is_empty() && m.keys().all(|k| k.parse::<u32>().is_ok()) {
        return m
            .iter()
            .map(|(pid, o)| {
                let what = o.get("outcome").map_or_else(|| scalar(o), scalar);
                format!("pid {pid}: {what}")
            })
            .collect::<Vec<_>>()
            .join(", ");
    }
    if let Some(ok) = m.get("ok").and_then(Value::as_bool) {
        return if ok { "ok".into() } else { "failed".into() };
    }
    let mut kv = Vec::new();
    flatten("", v, &mut kv);
    kv.iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// `step 3 of 9: set memory mode NPS1`: the 0-based index the journal keeps, counted from 1 as
/// the apply's log (`[3/9]`) and the resume message count, named by the step's title in the
/// run's confirmed plan (else its key), as the one fold gives them.
fn step_name(idx: usize, key: &StepKey, run: Option<&Run>) -> String {
    let n = idx.saturating_add(1);
    let of = run
        .and_then(Run::total)
        .map(|t| format!(" of {t}"))
        .unwrap_or_default();
    let title = run.and_then(|r| r.title(idx)).map_or_else(
        || escape_controls(key.as_str()).replace('_', " "),
        |t| escape_controls(t).into_owned(),
    );
    format!("step {n}{of}: {title}")
}

/// One entry in words, with what the fold of the journal tells of its run.
fn sentence(e: &Entry, runs: &Runs) -> String {
    if let Some(ev) = EvictEvent::decode(e) {
        return evict_sentence(&ev);
    }
    match RunLine::decode(e).filter(|l| !l.run.is_empty()) {
        Some(line) => run_sentence(&line, runs.run(&line.run)),
        // Not a run's line, or one an older partop journaled without a run id.
        None => format!(
            "{} {} → {}",
            escape_controls(&e.action),
            targets_summary(&e.targets),
            outcome_summary(&e.outcome)
        ),
    }
}

/// One line of a Findings eviction in words.
fn evict_sentence(ev: &EvictEvent) -> String {
    let esc = |s: &str| escape_controls(s).into_owned();
    match ev {
        EvictEvent::Begun {
            id,
            namespace,
            pod,
            uid,
            node,
            gpu,
        } => format!(
            "eviction {} of pod {}/{} (uid {}) on node {}, holding GPU {} · begins",
            esc(id),
            esc(namespace),
            esc(pod),
            esc(uid),
            esc(node),
            esc(gpu)
        ),
        EvictEvent::Ended {
            id,
            pod,
            ok,
            detail,
        } => format!(
            "eviction {} of pod {} · {}: {}",
            esc(id),
            esc(pod),
            if *ok { "evicted and gone" } else { "FAILED" },
            esc(detail)
        ),
    }
}

/// One line of an apply run in words.
fn run_sentence(line: &RunLine, run: Option<&Run>) -> String {
    let kind = line.kind;
    let id = escape_controls(&line.run);
    match &line.event {
        RunEvent::Started { steps, .. } => format!(
            "{kind} {id} started: plan {}, {} step(s)",
            if line.fingerprint.is_empty() {
                "?".into()
            } else {
                escape_controls(&line.fingerprint)
            },
            steps.map_or_else(|| "?".into(), |n| n.to_string())
        ),
        RunEvent::StepBegun {
            idx,
            key,
            limit_secs,
        } => {
            let name = step_name(*idx, key, run);
            let limit = limit_secs
                .map(|l| format!(" (may take up to {l} s)"))
                .unwrap_or_default();
            format!("{kind} {id} {name} · begins{limit}")
        }
        RunEvent::StepEnded {
            idx,
            key,
            ok,
            detail,
        } => {
            let name = step_name(*idx, key, run);
            let detail = if detail.is_empty() {
                String::new()
            } else {
                format!(": {}", escape_controls(detail))
            };
            let how = if *ok { "done" } else { "FAILED" };
            format!("{kind} {id} {name} · {how}{detail}")
        }
        RunEvent::Resumed { from_step, .. } => {
            let of = run
                .and_then(|r| r.steps)
                .map(|t| format!(" of {t}"))
                .unwrap_or_default();
            format!(
                "{kind} {id} resumed at step {}{of}",
                from_step.saturating_add(1)
            )
        }
        RunEvent::Closed(Close::Done) => format!("{kind} {id} finished: every step done"),
        RunEvent::Closed(Close::Abandoned) => {
            format!("{kind} {id} closed as abandoned (the node was restored by hand)")
        }
    }
}

/// Every entry in words, in the order given (the monitor lists them newest first), each run's
/// line with what `runs`, the fold of the journal as written, tells of its run.
pub fn words(entries: &[Entry], runs: &Runs) -> Vec<String> {
    entries.iter().map(|e| sentence(e, runs)).collect()
}

/// Who acted, in a few words (the real user; `SUDO_USER` first where it was set).
pub fn who(e: &Entry) -> String {
    escape_controls(
        &e.who
            .sudo_user
            .clone()
            .or_else(|| e.who.user.clone())
            .unwrap_or_else(|| format!("uid {}", e.who.uid)),
    )
    .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_read_as_words_not_json() {
        assert_eq!(
            targets_summary(&json!([{"pid": 42, "name": "python3", "model": "llama"}])),
            "pid 42 python3 [llama]"
        );
        assert_eq!(targets_summary(&json!([1, 2])), "pid 1, 2");
        assert_eq!(
            outcome_summary(&json!({"still_alive": [], "waited_ms": 150})),
            "all exited within 0.1s"
        );
        assert_eq!(
            outcome_summary(&json!({"ok": false, "error": "boom"})),
            "failed: boom"
        );
        let mut kv = Vec::new();
        flatten("", &json!({"a": {"b": 1, "c": [1, 2]}, "d": null}), &mut kv);
        assert_eq!(
            kv,
            [
                ("a.b".to_string(), "1".to_string()),
                ("a.c".into(), "1, 2".into()),
                ("d".into(), "—".into())
            ]
        );
    }
}

#[cfg(test)]
mod words_tests {
    use super::*;
    use serde_json::json;

    fn entry(action: &str, targets: Value, outcome: Value) -> Entry {
        Entry {
            at: "2026-01-01T00:00:00Z".into(),
            who: crate::domain::journal::Who::default(),
            host: "h".into(),
            action: action.into(),
            simulated: true,
            targets,
            outcome,
        }
    }

    #[test]
    fn a_run_reads_as_named_steps_counted_from_one() {
        let titles: Vec<Value> = (1..=9)
            .map(|i| json!({"key": format!("k{i}"), "title": format!("title {i}")}))
            .collect();
        let run = |t: Value| {
            let mut t = t;
            t["run"] = json!("r1");
            t["fingerprint"] = json!("f00d");
            t
        };
        let mut entries = vec![entry(
            "repartition.start",
            run(json!({"plan": {"steps": titles}})),
            json!({"steps": 9}),
        )];
        for i in 0..9u64 {
            entries.push(entry(
                "repartition.step",
                run(json!({"step": i, "key": format!("k{}", i + 1)})),
                json!({"state": "begin"}),
            ));
            entries.push(entry(
                "repartition.step",
                run(json!({"step": i, "key": format!("k{}", i + 1)})),
                json!({"ok": i != 8, "detail": "x"}),
            ));
        }
        entries.push(entry(
            "repartition.resume",
            run(json!({})),
            json!({"from_step": 2}),
        ));
        // Newest first, as the monitor lists them, with the fold of the journal as written: the
        // words do not depend on the order they are listed in.
        let runs = Runs::of(&entries);
        entries.reverse();
        let w = words(&entries, &runs);
        for i in 1..=9 {
            let name = format!("repartition r1 step {i} of 9: title {i}");
            assert!(w.iter().any(|l| l == &format!("{name} · begins")), "{w:?}");
        }
        assert!(w.contains(&"repartition r1 step 9 of 9: title 9 · FAILED: x".to_string()));
        assert!(w.contains(&"repartition r1 resumed at step 3 of 9".to_string()));
        // A step whose run start is not in the journal (rotated away): named by its key.
        let lone = [entry(
            "repartition.step",
            json!({"run": "r2", "fingerprint": "f", "step": 2, "key": "set_memory"}),
            json!({"ok": true, "detail": ""}),
        )];
        let lone = words(&lone, &Runs::of(&lone));
        assert_eq!(lone, ["repartition r2 step 3: set memory · done"]);
    }

    #[test]
    fn strings_from_the_journal_are_escaped() {
        let e = [entry(
            "kill.sigterm\u{1b}[2J",
            json!([{"pid": 7, "name": "a\u{1b}b", "model": "m\u{7}"}]),
            json!({"detail": "x\u{9b}y"}),
        )];
        let w = words(&e, &Runs::of(&e));
        assert!(!w[0].chars().any(|c| c.is_control()), "{w:?}");
        assert!(w[0].contains("pid 7 a\\x1bb [m\\x07]"), "{w:?}");
    }
}
