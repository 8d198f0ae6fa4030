//! Plain-text rendering of a snapshot for `partop snapshot` (the JSON form is the snapshot's own
//! serialisation). Pure: takes a snapshot, returns a string.

pub mod journal;

use crate::domain::snapshot::{Health, Snapshot};
use std::fmt::Write as _;

pub use crate::domain::text::gib;

fn opt<T: std::fmt::Display>(v: Option<T>, suffix: &str) -> String {
    v.map_or_else(|| "N/A".to_string(), |v| format!("{v}{suffix}"))
}

/// The readable table, then the findings one sample shows, each as a whole sentence.
pub fn table(s: &Snapshot, findings: &[crate::domain::findings::Finding]) -> String {
    let mut o = String::new();
    let sim = if s.simulated {
        "  [SIMULATED NODE]"
    } else {
        ""
    };
    let _ = writeln!(o, "host {}  taken {}{sim}", s.host, s.taken_at);
    for src in &s.sources {
        let h = match src.status {
            Health::Ok => "ok",
            Health::Degraded => "degraded",
            Health::Pending => "pending",
            Health::Stale => "STALE",
            Health::Down => "DOWN",
        };
        let _ = write!(o, "source {:<16} {h:<8}", src.name);
        if let Some(v) = &src.version {
            let _ = write!(o, " {v}");
        }
        if let Some(e) = &src.error {
            let _ = write!(o, "  ! {e}");
        }
        o.push('\n');
    }
    if let Some(h) = &s.hidden {
        let _ = writeln!(o, "hidden {}", h.describe());
    }
    for g in &s.gpus {
        let modes = g.modes_label();
        let _ = writeln!(
            o,
            "\n{}  {}  {}  power {}  hotspot {}  hbm {}",
            g.bdf,
            g.product,
            modes,
            opt(g.power_watts.map(|v| format!("{v:.0}")), " W"),
            opt(g.hotspot_celsius.map(|v| format!("{v:.0}")), " C"),
            opt(g.hbm_bytes.map(gib), " GiB"),
        );
        let _ = writeln!(
            o,
            "  {:>4} {:<14} {:>4} {:>5} {:>18} {:>6}  render",
            "GPU", "BDF", "XCDS", "CUS", "VRAM used/total GiB", "GFX%"
        );
        for l in &g.partitions {
            let xcds = if l.xcds.is_empty() {
                "?".to_string()
            } else {
                format!("{}-{}", l.xcds[0], l.xcds[l.xcds.len() - 1])
            };
            let vram = format!(
                "{}/{}",
                opt(l.vram_used_bytes.map(gib), ""),
                opt(l.vram_capacity_bytes().map(gib), "")
            );
            let _ = writeln!(
                o,
                "  {:>4} {:<14} {:>4} {:>5} {:>18} {:>6}  {}",
                l.gpu_id,
                l.bdf,
                xcds,
                opt(l.cu_count, ""),
                vram,
                opt(l.gfx_busy_percent.map(|v| format!("{v:.0}")), ""),
                l.render_node.as_deref().unwrap_or("N/A"),
            );
        }
    }
    let _ = writeln!(
        o,
        "\n{:>8} {:<16} {:>6} {:>10} {:>8}",
        "PID", "NAME", "GPU", "VRAM GiB", "CUs"
    );
    if s.processes.is_empty() {
        let _ = writeln!(o, "  (no GPU processes)");
    }
    for p in &s.processes {
        let mark = process_mark(p);
        if p.gpus.is_empty() {
            // Holding /dev/kfd alone is a stop in every repartition plan: it is listed too.
            let _ = writeln!(
                o,
                "{:>8} {:<16} {:>6} {:>10} {:>8}{mark}",
                p.pid,
                p.name.as_deref().unwrap_or("N/A"),
                if p.holds_kfd { "kfd" } else { "-" },
                "-",
                "-",
            );
        }
        for u in &p.gpus {
            let _ = writeln!(
                o,
                "{:>8} {:<16} {:>6} {:>10} {:>8}{mark}",
                p.pid,
                p.name.as_deref().unwrap_or("N/A"),
                u.gpu_id,
                opt(u.vram_bytes.map(gib), ""),
                opt(u.cu_occupancy, ""),
            );
        }
    }
    findings_text(&mut o, findings);
    o
}

/// The findings section: `findings (N)` and per finding its severity, where, and what was seen
/// and what to do; `findings: none` says the check ran.
fn findings_text(o: &mut String, findings: &[crate::domain::findings::Finding]) {
    use crate::domain::findings::Severity;
    if findings.is_empty() {
        let _ = writeln!(o, "\nfindings: none");
        return;
    }
    let _ = writeln!(o, "\nfindings ({}):", findings.len());
    for f in crate::domain::findings::by_urgency(findings) {
        let word = match (f.critical(), f.severity) {
            (true, _) => "CRIT",
            (false, Severity::Warn) => "WARN",
            (false, Severity::Info) => "INFO",
        };
        // A process's finding names its pid in what it saw already.
        let head = if f.kind.about_a_process() {
            f.kind.label().to_string()
        } else {
            f.headline()
        };
        let _ = writeln!(o, "  {word} {head}: {}", f.saw);
    }
}

/// What a process row says beside its numbers ([`Process::mark`], the words the kill prompt
/// shows too).
///
/// [`Process::mark`]: crate::domain::snapshot::Process::mark
fn process_mark(p: &crate::domain::snapshot::Process) -> String {
    p.mark().map(|m| format!("  ({m})")).unwrap_or_default()
}

/// A plan as text (`partop plan`), in the order an operator reads it: what changes, the
/// layouts, who moves, the steps, what to expect.
pub fn plan_text(p: &crate::domain::plan::Plan) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "plan {} on {}  (nothing has been changed)",
        p.fingerprint, p.host
    );
    plan_changes(&mut o, p);
    plan_layouts(&mut o, p);
    plan_holders(&mut o, p);
    plan_models(&mut o, p);
    let _ = writeln!(o, "\nsteps:");
    for (i, s) in p.steps.iter().enumerate() {
        let _ = writeln!(o, "  {}. {}", i + 1, s.title);
        for c in &s.commands {
            let _ = writeln!(o, "       $ {c}");
        }
    }
    let _ = writeln!(o, "\nexpected downtime: about {} s", p.downtime_secs);
    if !p.warnings.is_empty() {
        let _ = writeln!(o, "\nwarnings:");
        for w in &p.warnings {
            let _ = writeln!(o, "  ! {w}");
        }
    }
    o
}

/// Each GPU's modes now and after.
fn plan_changes(o: &mut String, p: &crate::domain::plan::Plan) {
    let _ = writeln!(o, "\nchanges:");
    for c in &p.changes {
        let from = format!("{}/{}", opt(c.from.0, ""), opt(c.from.1, ""));
        let hive = if c.hive_only {
            "  (hive-wide memory change)"
        } else {
            ""
        };
        let _ = writeln!(o, "  {}  {from} -> {}/{}{hive}", c.bdf, c.to.0, c.to.1);
    }
}

/// The logical GPUs now and after, side by side (24 rows at most).
fn plan_layouts(o: &mut String, p: &crate::domain::plan::Plan) {
    let _ = writeln!(
        o,
        "\nlogical GPUs: {} now -> {} after",
        p.before.len(),
        p.after.len()
    );
    let n = p.before.len().max(p.after.len());
    let _ = writeln!(o, "  {:<28} {:<28}", "now (index bdf CUs GiB)", "after");
    let cell = |r: Option<&crate::domain::plan::LayoutRow>| {
        r.map_or_else(String::new, |r| {
            format!(
                "{:>3} {} {:>3} {:>5.1}",
                r.gpu_id,
                r.bdf,
                r.cus,
                r.vram_mb as f64 / 1024.0
            )
        })
    };
    for i in 0..n.min(24) {
        let _ = writeln!(
            o,
            "  {:<28} {:<28}",
            cell(p.before.get(i)),
            cell(p.after.get(i))
        );
    }
    if n > 24 {
        let _ = writeln!(o, "  … {} more", n - 24);
    }
}

/// Who holds the affected GPUs: on a Kubernetes node the pods that move through the cluster
/// (`plan_k8s`), then the processes that must stop.
fn plan_holders(o: &mut String, p: &crate::domain::plan::Plan) {
    if let Some(k) = &p.kubernetes {
        let esc = crate::domain::text::escape_controls;
        if let Some(w) = &k.dcm {
            let _ = writeln!(o, "\nWARNING: {}", esc(w));
        }
        let _ = writeln!(
            o,
            "\npods to move off the node {} ({}), by eviction:",
            esc(&k.node),
            k.pods.len()
        );
        for m in &k.pods {
            let _ = writeln!(o, "  {:<40} {}", esc(&m.label()), m.gpus.join(","));
        }
    }
    let _ = writeln!(o, "\nmust stop ({}):", p.stops.len());
    if p.stops.is_empty() {
        let _ = writeln!(
            o,
            "  {}",
            if p.kubernetes.as_ref().is_some_and(|k| !k.pods.is_empty()) {
                "nothing else holds the affected GPUs"
            } else {
                "nothing holds the affected GPUs"
            }
        );
    }
    for s in &p.stops {
        let what = s
            .agent
            .clone()
            .map_or_else(|| format!("GPUs {:?}", s.gpus), |a| format!("agent: {a}"));
        let _ = writeln!(o, "  pid {:>7}  {:<16} {what}", s.pid, s.name);
    }
}

/// What each replica set and balancer becomes, and where each served model goes.
fn plan_models(o: &mut String, p: &crate::domain::plan::Plan) {
    if !p.sets.is_empty() {
        let _ = writeln!(o, "\nreplica sets:");
        for c in &p.sets {
            let _ = writeln!(o, "  {c}");
        }
        for b in &p.balancers {
            let _ = writeln!(o, "  {b}");
        }
    }
    if p.models.is_empty() {
        return;
    }
    let _ = writeln!(o, "\nserved models ({}):", p.models.len());
    for m in &p.models {
        let to = if let Some(r) = m.reason.as_deref().filter(|r| r.starts_with("surplus")) {
            format!("stopped first, not relaunched ({r})")
        } else if m.to.is_empty() {
            format!(
                "does not fit: {}",
                m.reason.as_deref().unwrap_or("no free logical GPU")
            )
        } else {
            m.to.iter()
                .map(|r| format!("GPU {} {}", r.gpu_id, r.bdf))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(o, "  {:<16} {} -> {to}", m.name, m.from.join(","));
    }
}

/// A MIG plan as text (the CLI and the staging overlay).
pub fn mig_plan_text(p: &crate::domain::mig::MigPlan) -> String {
    let mut o = format!(
        "MIG plan {} for GPU {} ({} {}) on {}\n  now:   {}\n  after: {}\n",
        p.fingerprint,
        p.draft.gpu,
        p.product,
        p.bdf,
        p.host,
        if p.before.is_empty() {
            "MIG off or no instances".into()
        } else {
            p.before.join(", ")
        },
        if p.after.is_empty() {
            "MIG off".into()
        } else {
            p.after.join(", ")
        }
    );
    if !p.stops.is_empty() {
        o.push_str(&format!("must stop ({}):\n", p.stops.len()));
        for s in &p.stops {
            o.push_str(&format!("  pid {:>7}  {}\n", s.pid, s.name));
        }
    }
    o.push_str("steps:\n");
    for (i, s) in p.steps.iter().enumerate() {
        o.push_str(&format!("  {}. {}\n", i + 1, s.title));
        for c in &s.commands {
            o.push_str(&format!("       $ {c}\n"));
        }
    }
    if !p.warnings.is_empty() {
        o.push_str("warnings:\n");
        for w in &p.warnings {
            o.push_str(&format!("  ! {w}\n"));
        }
    }
    o
}

/// A model figure for tables: `-` when unknown, a fraction as a percentage when `pct`.
pub fn figure(v: Option<f64>, pct: bool) -> String {
    match v {
        None => "-".into(),
        Some(x) if pct => format!("{:.0}%", x * 100.0),
        Some(x) => format!("{x:.0}"),
    }
}

/// The snapshot document of docs/json.md with the findings and the sample's age at `now_ms`:
/// what `partop snapshot --json`, `/snapshot` and `/events` carry.
pub fn snapshot_document(
    snap: &crate::domain::Snapshot,
    findings: &[crate::domain::findings::Finding],
    now_ms: u64,
) -> serde_json::Value {
    let mut v = serde_json::to_value(snap).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "findings".into(),
            serde_json::to_value(findings).unwrap_or_default(),
        );
        o.insert(
            "age_ms".into(),
            serde_json::Value::from(now_ms.saturating_sub(snap.taken_at_ms)),
        );
    }
    v
}
