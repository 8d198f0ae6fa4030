//! Replica sets: one registry entry served as many servers, one per logical GPU, each on its
//! own port from a range (AMD's guide runs 8 vLLM servers on SPX, 16 on DPX, behind nginx).
//! Pure: the registry parser reads a set's `replicas`, `ports` and `gpus` here; the collector
//! expands a set into its members on the current layout; the planner re-expands it on the
//! staged one (what each set becomes); the executor resolves a member's name to its launch.

use super::layout::LayoutRow;
use super::models::{ModelSpec, Registry, Want};
use super::placement::{gb_to_mb, holds};
pub use super::replica_set::{Count, MEMBER_SEP, Member, ReplicaSet, parse_count, parse_ports};
use serde::{Deserialize, Serialize};

/// The spec of member `index` of set `set`, placed on `bdf` (or anywhere free that holds it):
/// its own name, port and health and metrics URLs; the set's launch, with `{port}` and
/// `{name}` its own.
pub fn member_spec(set: &ModelSpec, index: u32, bdf: Option<&str>) -> Option<ModelSpec> {
    let r = set.replicas.as_ref()?;
    if index == 0 || index > r.max_members() {
        return None;
    }
    let port = u16::try_from(u32::from(r.ports.0) + index - 1).ok()?;
    let base = format!("http://127.0.0.1:{port}");
    let mut m = set.clone();
    m.name = format!("{}{MEMBER_SEP}{index}", set.name);
    m.port = port;
    m.health_url = format!("{base}/health");
    m.metrics_url = format!("{base}/metrics");
    m.want = bdf.map_or(Want::AnyFree(0.0), |b| Want::Gpu(b.to_string()));
    // It keeps the set's settings (`replicas`): the planner re-expands the set from a member.
    m.member = Some(Member {
        set: set.name.clone(),
        index,
    });
    Some(m)
}

/// The logical GPUs a set's members take on `rows`, in logical GPU order, skipping `taken`:
/// those within the set's `gpus` that hold its memory; all of them for `fill`, the first N
/// otherwise; never more than the port range has ports.
pub fn places<'a>(set: &ModelSpec, rows: &'a [LayoutRow], taken: &[String]) -> Vec<&'a LayoutRow> {
    let Some(r) = set.replicas.as_ref() else {
        return vec![];
    };
    let need = gb_to_mb(set.memory_gb);
    let mut fit: Vec<&LayoutRow> = rows
        .iter()
        .filter(|row| !taken.contains(&row.bdf))
        .filter(|row| r.gpus.is_empty() || r.gpus.iter().any(|g| row.bdf.starts_with(g)))
        .filter(|row| holds(row.vram_mb, need))
        .collect();
    fit.sort_by_key(|row| row.gpu_id);
    let n = match r.count {
        Count::Exactly(n) => n.min(r.max_members()),
        Count::Fill => r.max_members(),
    };
    fit.truncate(n as usize);
    fit
}

/// The registry as served on `rows`: each set replaced by its members (member k on the k-th
/// logical GPU of [`places`]), other entries as they are. `taken` are logical GPUs the set
/// may not use (held by what is not a member).
pub fn expand(registry: &Registry, rows: &[LayoutRow], taken: &[String]) -> Vec<ModelSpec> {
    let mut out = Vec::new();
    for m in &registry.models {
        if m.replicas.is_none() {
            out.push(m.clone());
            continue;
        }
        for (k, row) in places(m, rows, taken).iter().enumerate() {
            let index = u32::try_from(k + 1).unwrap_or(u32::MAX);
            out.extend(member_spec(m, index, Some(&row.bdf)));
        }
    }
    out
}

/// The logical GPUs (BDFs) of `snap` that a set may not fill: those held by processes that are
/// not a member of any set (a member is known by its port, in a set's range).
pub fn taken_by_others(snap: &super::snapshot::Snapshot, registry: &Registry) -> Vec<String> {
    let rows = super::layout::layout_rows(snap);
    let in_a_set = |port: u16| {
        registry.models.iter().any(|m| {
            m.replicas
                .as_ref()
                .is_some_and(|r| (r.ports.0..=r.ports.1).contains(&port))
        })
    };
    snap.processes
        .iter()
        .filter(|p| {
            let port = p.command.as_deref().and_then(|c| {
                let (server, _) = super::served::model_of(c)?;
                super::served::port_of(c, server)
            });
            !port.is_some_and(in_a_set)
        })
        .flat_map(|p| p.gpus.iter().filter(|u| !u.attached_only()))
        .filter_map(|u| rows.iter().find(|r| r.gpu_id == u.gpu_id))
        .map(|r| r.bdf.clone())
        .collect()
}

/// The entry named `name`: a registry entry, or a member of a set (`set#k`, any k the port
/// range allows; placed where the caller places it).
pub fn resolve(registry: &Registry, name: &str) -> Option<ModelSpec> {
    if let Some(m) = registry.models.iter().find(|m| m.name == name) {
        return Some(m.clone());
    }
    let (set, k) = name.rsplit_once(MEMBER_SEP)?;
    let k: u32 = k.parse().ok()?;
    let set = registry
        .models
        .iter()
        .find(|m| m.name == set && m.replicas.is_some())?;
    member_spec(set, k, None)
}

/// A set as the Models view and `partop models` head its members: how many are healthy of
/// how many it has on this layout, and their tokens/s summed.
#[derive(Clone, Debug, PartialEq)]
pub struct SetSummary {
    /// The set's name.
    pub name: String,
    /// Members healthy.
    pub healthy: usize,
    /// Members on this layout.
    pub total: usize,
    /// Tokens/s of the members that report it, summed (None: none does yet).
    pub tokens_per_sec: Option<f64>,
    /// Tokens/s per member, in member order (None where unknown).
    pub per_member: Vec<Option<f64>>,
    /// Latency of the members together (their windows added up); None where none exports
    /// a latency histogram.
    pub latency: Option<super::latency::Latency>,
}

impl std::fmt::Display for SetSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}/{} healthy · {} tokens/s",
            self.name,
            self.healthy,
            self.total,
            rate_text(self.tokens_per_sec)
        )?;
        // Only the figures there are: the reasons for the others are on the members' rows.
        if let Some(l) = &self.latency {
            for (name, q) in [("TTFT", &l.ttft), ("E2E", &l.e2e)] {
                if q.p50.is_some() && q.p99.is_some() {
                    write!(f, " · {name} {} s", q.pair_text())?;
                }
            }
        }
        Ok(())
    }
}

/// Tokens/s as the guide writes them (`3,046`), or `N/A` while unknown.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a rate, rounded"
)]
pub fn rate_text(v: Option<f64>) -> String {
    let Some(v) = v.filter(|v| v.is_finite() && *v >= 0.0) else {
        return "N/A".into();
    };
    let digits = (v.round() as u64).to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The sets among `models` (members carry their set's name), in order of first member.
pub fn summaries(models: &[super::model_status::ServedModel]) -> Vec<SetSummary> {
    let mut out: Vec<SetSummary> = Vec::new();
    for m in models {
        let Some(who) = m.spec.as_ref().and_then(|s| s.member.as_ref()) else {
            continue;
        };
        let i = out
            .iter()
            .position(|s| s.name == who.set)
            .unwrap_or_else(|| {
                out.push(SetSummary {
                    name: who.set.clone(),
                    healthy: 0,
                    total: 0,
                    tokens_per_sec: None,
                    per_member: vec![],
                    latency: None,
                });
                out.len() - 1
            });
        let s = &mut out[i];
        s.total += 1;
        if m.state == super::model_status::ModelState::Healthy {
            s.healthy += 1;
        }
        s.per_member.push(m.tokens_per_sec);
        if let Some(t) = m.tokens_per_sec {
            s.tokens_per_sec = Some(s.tokens_per_sec.unwrap_or(0.0) + t);
        }
    }
    for s in &mut out {
        let parts: Vec<&super::latency::Latency> = models
            .iter()
            .filter(|m| {
                m.spec
                    .as_ref()
                    .and_then(|x| x.member.as_ref())
                    .is_some_and(|w| w.set == s.name)
            })
            .filter_map(|m| m.latency.as_ref())
            .collect();
        if !parts.is_empty() {
            s.latency = Some(super::latency::Latency::merged(parts.iter().copied()));
        }
    }
    out
}

/// What a set becomes in a repartition, for the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetChange {
    /// The set's name.
    pub name: String,
    /// Members before.
    pub before: u32,
    /// Members after.
    pub after: u32,
    /// The layout before and after, as the plan names it (`SPX`, `DPX/NPS2`).
    pub layouts: (String, String),
    /// Ports after (`8001-8016`).
    pub ports: String,
}

impl std::fmt::Display for SetChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |k: u32| if k == 1 { "replica" } else { "replicas" };
        write!(
            f,
            "{}: {} {} on {} -> {} on {}, ports {}",
            self.name,
            self.before,
            n(self.before),
            self.layouts.0,
            self.after,
            self.layouts.1,
            self.ports
        )?;
        if self.after < self.before {
            write!(
                f,
                " (shrinks: the {} surplus stop first)",
                self.before - self.after
            )?;
        }
        Ok(())
    }
}

/// The set a member belongs to, as its registry entry reads (from the member's spec, which
/// carries the set's settings).
pub fn set_spec_of(member: &ModelSpec) -> Option<ModelSpec> {
    let who = member.member.as_ref()?;
    let r = member.replicas.as_ref()?;
    let mut s = member.clone();
    s.name.clone_from(&who.set);
    s.port = r.ports.0;
    s.member = None;
    Some(s)
}

/// A member the plan stops, relaunches or both: the fields of the plan's model move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelMove {
    /// Member name.
    pub name: String,
    /// Logical GPUs now (BDFs).
    pub from: Vec<String>,
    /// Logical GPU after; empty: not relaunched.
    pub to: Vec<LayoutRow>,
    /// Why it is not relaunched.
    pub reason: Option<String>,
    /// How it is stopped.
    pub stop: String,
    /// How it is started again.
    pub launch: String,
}

/// What [`plan_sets`] gives the planner.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SetPlan {
    /// What each set becomes.
    pub changes: Vec<SetChange>,
    /// What each balancer's upstream becomes.
    pub balancers: Vec<super::balancer::BalancerChange>,
    /// Members stopped and not relaunched (first in the plan: they leave first).
    pub surplus: Vec<ModelMove>,
    /// Members relaunched.
    pub moves: Vec<ModelMove>,
}

/// What each replica set with members the plan stops becomes on the staged layout `after`:
/// members that keep running stay; the set is filled again (or cut to its count) on the logical
/// GPUs that hold it and that nothing else keeps or takes (`models`' targets), each new member
/// on the lowest free index; members left over are surplus, stopped and not relaunched, and
/// put first in `models` (they leave first). Adds the members' moves to `models`.
pub fn plan_sets(
    snap: &super::snapshot::Snapshot,
    stopped_pids: &[u32],
    before: &[LayoutRow],
    after: &[LayoutRow],
    planned: &[String],
    layouts: &(String, String),
) -> SetPlan {
    let stopped = |pid: Option<u32>| pid.is_some_and(|p| stopped_pids.contains(&p));
    let mut taken: Vec<String> = snap
        .processes
        .iter()
        .filter(|p| !stopped(Some(p.pid)))
        .flat_map(|p| p.gpus.iter().filter(|u| !u.attached_only()))
        .filter_map(|u| before.iter().find(|r| r.gpu_id == u.gpu_id))
        .map(|r| r.bdf.clone())
        .chain(planned.iter().cloned())
        .collect();
    let mut names: Vec<String> = Vec::new();
    for m in &snap.models {
        if let Some(who) = m.spec.as_ref().and_then(|s| s.member.as_ref())
            && stopped(m.pid)
            && !names.contains(&who.set)
        {
            names.push(who.set.clone());
        }
    }
    let mut changes = Vec::new();
    let mut balancers = Vec::new();
    let mut surplus = Vec::new();
    let mut moves = Vec::new();
    for name in names {
        let members: Vec<(&super::model_status::ServedModel, &ModelSpec, u32)> = snap
            .models
            .iter()
            .filter_map(|m| {
                let s = m.spec.as_ref()?;
                let who = s.member.as_ref()?;
                (who.set == name).then_some((m, s, who.index))
            })
            .collect();
        let Some(set) = members.first().and_then(|(_, s, _)| set_spec_of(s)) else {
            continue;
        };
        let Some(r) = set.replicas.clone() else {
            continue;
        };
        let kept: Vec<u32> = members
            .iter()
            .filter(|(m, _, _)| m.pid.is_some() && !stopped(m.pid))
            .map(|(_, _, k)| *k)
            .collect();
        let running_before = members.iter().filter(|(m, _, _)| m.pid.is_some()).count();
        let want = match r.count {
            Count::Exactly(n) => n.min(r.max_members()),
            Count::Fill => r.max_members(),
        };
        let room = want.saturating_sub(u32::try_from(kept.len()).unwrap_or(u32::MAX)) as usize;
        let mut rows = places(&set, after, &taken);
        rows.truncate(room);
        let free = (1..=r.max_members()).filter(|k| !kept.contains(k));
        let mut assigned = Vec::new();
        for (k, row) in free.zip(rows) {
            let old = members.iter().find(|(_, _, i)| *i == k);
            let Some(spec) = member_spec(&set, k, Some(&row.bdf)) else {
                continue;
            };
            taken.push(row.bdf.clone());
            assigned.push(k);
            moves.push(ModelMove {
                name: spec.name.clone(),
                from: old.map(|(m, _, _)| m.bdfs.clone()).unwrap_or_default(),
                stop: old.map_or_else(String::new, |(m, s, _)| {
                    s.stop_text(&m.gpus, &m.bdfs, m.pid)
                }),
                launch: spec.launch_text(&[row.gpu_id], std::slice::from_ref(&row.bdf)),
                to: vec![row.clone()],
                reason: None,
            });
        }
        let after_n = kept.len() + assigned.len();
        for (m, s, k) in &members {
            if stopped(m.pid) && !assigned.contains(k) {
                surplus.push(ModelMove {
                    name: s.name.clone(),
                    from: m.bdfs.clone(),
                    to: vec![],
                    reason: Some(format!(
                        "surplus: set {name} has {after_n} replica(s) on the new layout"
                    )),
                    stop: s.stop_text(&m.gpus, &m.bdfs, m.pid),
                    launch: String::new(),
                });
            }
        }
        if let Some(b) = set.balancer.clone() {
            balancers.push(balancer_change(
                b, &set, &members, &kept, &assigned, &stopped,
            ));
        }
        let top = kept.iter().chain(&assigned).copied().max().unwrap_or(0);
        changes.push(SetChange {
            name,
            before: u32::try_from(running_before).unwrap_or(u32::MAX),
            after: u32::try_from(after_n).unwrap_or(u32::MAX),
            layouts: layouts.clone(),
            ports: r.ports_text(top),
        });
    }
    SetPlan {
        changes,
        balancers,
        surplus,
        moves,
    }
}

/// A set's upstream before, during and after the change: members that keep running stay in
/// service throughout; the ones that stop are drained; every member after the change serves.
fn balancer_change(
    b: super::balancer::Balancer,
    set: &ModelSpec,
    members: &[(&super::model_status::ServedModel, &ModelSpec, u32)],
    kept: &[u32],
    assigned: &[u32],
    stopped: &dyn Fn(Option<u32>) -> bool,
) -> super::balancer::BalancerChange {
    use super::balancer::Server;
    let mut running: Vec<&(&super::model_status::ServedModel, &ModelSpec, u32)> =
        members.iter().filter(|(m, _, _)| m.pid.is_some()).collect();
    running.sort_by_key(|(_, _, k)| *k);
    let before = running
        .iter()
        .map(|(_, s, _)| Server {
            name: s.name.clone(),
            port: s.port,
            up: true,
        })
        .collect();
    let during = running
        .iter()
        .map(|(m, s, _)| Server {
            name: s.name.clone(),
            port: s.port,
            up: !stopped(m.pid),
        })
        .collect();
    let mut now: Vec<u32> = kept.iter().chain(assigned).copied().collect();
    now.sort_unstable();
    let after = now
        .iter()
        .filter_map(|k| member_spec(set, *k, None))
        .map(|s| Server {
            name: s.name,
            port: s.port,
            up: true,
        })
        .collect();
    super::balancer::BalancerChange {
        balancer: b,
        before,
        during,
        after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: u32, gb: u64) -> Vec<LayoutRow> {
        (0..n)
            .map(|i| LayoutRow {
                gpu_id: i,
                bdf: format!("0000:{:02x}:00.{}", 5 + i / 2, i % 2),
                cus: 152,
                vram_mb: gb << 10,
            })
            .collect()
    }

    fn set(count: &str, gpus: &str) -> Registry {
        let toml = format!(
            "[[model]]\nname = \"m12\"\nmodel = \"mistral\"\nmemory_gb = 30\nreplicas = {count}\nports = \"8001-8016\"\n{gpus}launch.command = [\"vllm\", \"--port\", \"{{port}}\"]\n"
        );
        super::super::models::parse("m.toml", &toml).unwrap()
    }

    /// Every count (fill, 1..20) on layouts of 4, 8 and 16 logical GPUs of 24, 48 and 96 GiB,
    /// with and without a GPU limit: members take the first fitting GPUs in order, never more
    /// than asked, than fit or than the 16 ports; names and ports follow the index.
    #[test]
    fn a_set_expands_to_the_gpus_that_hold_it() {
        let mut cases = 0;
        let counts: Vec<String> = std::iter::once("\"fill\"".to_string())
            .chain((1..=20).map(|n| n.to_string()))
            .collect();
        for count in &counts {
            for limit in ["", "gpus = [\"0000:05:00\"]\n"] {
                let reg = set(count, limit);
                for (n, gb) in [(4, 24), (8, 48), (16, 96), (32, 48)] {
                    let l = rows(n, gb);
                    let members = expand(&reg, &l, &[]);
                    let fit = if gb >= 30 { n } else { 0 };
                    let fit = if limit.is_empty() { fit } else { fit.min(2) };
                    let want = count.parse::<u32>().unwrap_or(16).min(16).min(fit);
                    assert_eq!(members.len() as u32, want, "{count} {limit:?} {n}x{gb}");
                    for (k, m) in members.iter().enumerate() {
                        let k32 = u32::try_from(k).unwrap();
                        assert_eq!(m.name, format!("m12#{}", k + 1));
                        assert_eq!(m.port, 8001 + u16::try_from(k).unwrap());
                        assert_eq!(m.want, Want::Gpu(l[k].bdf.clone()));
                        assert_eq!(m.health_url, format!("http://127.0.0.1:{}/health", m.port));
                        assert_eq!(m.member.as_ref().map(|x| x.index), Some(k32 + 1));
                        assert_eq!(resolve(&reg, &m.name).map(|r| r.port), Some(m.port));
                    }
                    cases += 1;
                }
            }
        }
        assert_eq!(cases, 21 * 2 * 4, "{cases} cases");
        let reg = set("\"fill\"", "");
        assert!(resolve(&reg, "m12#17").is_none(), "beyond the port range");
        assert!(resolve(&reg, "m12#0").is_none());
        assert!(resolve(&reg, "other#1").is_none());
    }

    #[test]
    fn bad_sets_are_refused_where_written() {
        for (bad, says) in [
            ("replicas = 0\nports = \"8001-8002\"\n", "not a count"),
            ("replicas = \"all\"\nports = \"8001-8002\"\n", "not a count"),
            ("replicas = 2\n", "needs ports"),
            ("replicas = 2\nports = \"8002-8001\"\n", "not a port range"),
            ("replicas = 2\nports = \"x\"\n", "not a port range"),
            ("ports = \"8001-8002\"\n", "go with replicas"),
            (
                "replicas = 2\nports = \"8001-8002\"\ngpu = \"0000:05:00.0\"\n",
                "gpus",
            ),
            ("replicas = 2\nports = \"7999-8002\"\n", "already used"),
        ] {
            let toml = format!(
                "[[model]]\nname = \"a\"\nmodel = \"x\"\nport = 8000\nmemory_gb = 1\nlaunch.command = [\"x\"]\n\n[[model]]\nname = \"b\"\nmodel = \"y\"\nmemory_gb = 1\n{bad}launch.command = [\"x\"]\n"
            );
            let e = super::super::models::parse("m.toml", &toml).unwrap_err();
            assert!(e.message.contains(says), "{bad:?}: {e}");
            assert!(e.line >= 8, "{bad:?}: located in the set's entry: {e}");
        }
    }

    #[test]
    fn rates_read_like_the_guide() {
        assert_eq!(rate_text(Some(3046.2)), "3,046");
        assert_eq!(rate_text(Some(999.6)), "1,000");
        assert_eq!(rate_text(Some(12.0)), "12");
        assert_eq!(rate_text(Some(1_234_567.0)), "1,234,567");
        assert_eq!(rate_text(None), "N/A");
        assert_eq!(rate_text(Some(f64::NAN)), "N/A");
    }

    #[test]
    fn the_plan_says_what_a_set_becomes() {
        let c = SetChange {
            name: "mistral-12b".into(),
            before: 16,
            after: 8,
            layouts: ("DPX/NPS2".into(), "SPX/NPS1".into()),
            ports: "8001-8008".into(),
        };
        assert_eq!(
            c.to_string(),
            "mistral-12b: 16 replicas on DPX/NPS2 -> 8 on SPX/NPS1, ports 8001-8008 (shrinks: the 8 surplus stop first)"
        );
    }
}
