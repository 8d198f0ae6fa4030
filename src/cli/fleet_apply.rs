//! `partop fleet plan` and `partop fleet apply`: a change planned by every node itself
//! (`partop plan` over ssh), shown node by node with the fleet's total, confirmed once for the
//! exact set of nodes and plan fingerprints, then rolled out one node (or N) at a time with
//! `partop apply` on each (its own lock and journal there), each verified before the next
//! starts; the first failure stops the rollout with that node's step and text. The fleet
//! journal on this machine records who ran what where; an interrupted rollout resumes.

use crate::cli::args::{FleetArgs, FleetCmd};
use crate::cli::out::{confirm, out};
use crate::cli::{Cli, exit};
use crate::collect::fleet::{NodeSpec, Target, Transport};
use crate::domain::journal::{RolloutEvent, RolloutNode, Rollouts};
use crate::domain::plan::Plan;
use crate::exec::journal;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One node's plan in a set.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodePlan {
    /// The node's name.
    pub node: String,
    /// The ssh destination.
    pub dest: String,
    /// The partop on it.
    pub partop: String,
    /// Its plan, as it made it.
    pub plan: Plan,
}

/// What `fleet plan` saves and `fleet apply` rolls out.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanSet {
    /// Over every node and plan fingerprint (`domain::fleet::set_fingerprint`).
    pub fingerprint: String,
    /// When it was made.
    pub created_at: String,
    /// The nodes in rollout order.
    pub nodes: Vec<NodePlan>,
}

impl PlanSet {
    fn computed(&self) -> String {
        crate::domain::fleet::set_fingerprint(
            &self
                .nodes
                .iter()
                .map(|n| (n.node.clone(), n.plan.fingerprint.clone()))
                .collect::<Vec<_>>(),
        )
    }
}

/// The fleet journal on the operator's machine: beside the audit journal (so `journal = "…"`
/// in config.toml, or `--journal`, moves both).
pub fn fleet_journal(settings: &crate::config::Settings) -> PathBuf {
    settings.journal.with_file_name("fleet-journal.jsonl")
}

/// Runs `remote` on the node with `stdin`, within `limit`: (exit code, stdout, stderr).
fn ssh_run(
    t: &Transport,
    dest: &str,
    remote: &[String],
    stdin: &str,
    limit: Duration,
) -> (Option<i32>, String, String) {
    crate::collect::fleet::run_on(t, dest, remote, stdin, limit)
}

fn ssh_nodes(nodes: Vec<NodeSpec>) -> Result<Vec<(String, String, String)>> {
    if nodes.is_empty() {
        return Err(exit::Usage(
            "no nodes: name them, or give --hosts-file or --ssh-config".into(),
        )
        .into());
    }
    nodes
        .into_iter()
        .map(|n| match n.target {
            Target::Ssh { dest, partop } => Ok((n.name, dest, partop)),
            Target::Http { addr } => Err(exit::Usage(format!(
                "{addr}: a partop serve endpoint is read only; changes go over ssh"
            ))
            .into()),
            Target::SshAmdSmi { dest, .. } => Err(exit::Usage(format!(
                "{dest}: partop is not installed there; its amd-smi is only read"
            ))
            .into()),
        })
        .collect()
}

/// What a node's own journal says of its plan: the fleet asks before it continues a node it
/// attempted, since an attempt that failed before the node's first step (ssh refused, the
/// node's partop refused before journaling) left no run there to resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeRun {
    /// No run of this plan: it starts afresh.
    None,
    /// A run of it, finished or not: `--resume` continues it (or says it is complete).
    Some,
}

/// Reads the node's journal over ssh (`partop journal --json`) for a run of `n`'s plan.
fn node_run(t: &Transport, n: &NodePlan) -> Result<NodeRun, String> {
    let remote = vec![n.partop.clone(), "journal".into(), "--json".into()];
    let (code, o, e) = ssh_run(t, &n.dest, &remote, "", Duration::from_secs(120));
    if code != Some(0) {
        return Err(format!(
            "cannot read its journal to know where it stopped: {}",
            crate::collect::fleet::ssh_reason(code, &e, false)
        ));
    }
    let (entries, _) = journal::parse(&n.node, o.as_bytes());
    Ok(
        if crate::domain::journal::Runs::of(&entries)
            .latest(
                crate::domain::journal::RunKind::Repartition,
                &n.plan.fingerprint,
            )
            .is_some()
        {
            NodeRun::Some
        } else {
            NodeRun::None
        },
    )
}

/// `partop fleet plan|apply`.
pub fn action(
    _cli: &Cli,
    a: &FleetArgs,
    action: &FleetCmd,
    settings: &crate::config::Settings,
) -> Result<u8> {
    let nodes = crate::cli::fleet_nodes::nodes(a)?;
    let t = crate::cli::fleet_nodes::transport(a, nodes.len());
    match action {
        FleetCmd::Plan {
            compute,
            memory,
            out: file,
        } => plan(
            &t,
            ssh_nodes(nodes)?,
            compute.as_deref(),
            memory.as_deref(),
            file,
        ),
        FleetCmd::Apply {
            set,
            parallel,
            yes,
            resume,
        } => {
            if settings.read_only {
                out(&crate::cli::out::read_only_refusal("rolled out"))?;
                return Ok(exit::USAGE);
            }
            apply(
                &t,
                set,
                usize::from(*parallel),
                *yes,
                *resume,
                &fleet_journal(settings),
            )
        }
    }
}

fn plan(
    t: &Transport,
    nodes: Vec<(String, String, String)>,
    compute: Option<&str>,
    memory: Option<&str>,
    file: &Path,
) -> Result<u8> {
    let mut remote_args = vec!["plan".to_string(), "--gpu".into(), "all".into()];
    if let Some(c) = compute {
        remote_args.extend(["--compute".into(), c.to_string()]);
    }
    if let Some(m) = memory {
        remote_args.extend(["--memory".into(), m.to_string()]);
    }
    remote_args.push("--json".into());
    // Every node plans at once, bounded by the concurrency.
    let results: Vec<(String, String, String, Result<Plan, String>)> = std::thread::scope(|s| {
        let sem = std::sync::Arc::new(std::sync::Mutex::new(0usize));
        let handles: Vec<_> = nodes
            .iter()
            .map(|(name, dest, partop)| {
                let remote: Vec<String> = std::iter::once(partop.clone())
                    .chain(remote_args.iter().cloned())
                    .collect();
                let sem = std::sync::Arc::clone(&sem);
                s.spawn(move || {
                    loop {
                        let mut n = sem
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if *n < t.concurrency {
                            *n += 1;
                            break;
                        }
                        drop(n);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let (code, o, e) = ssh_run(t, dest, &remote, "", Duration::from_secs(120));
                    *sem.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) -= 1;
                    let r = if code == Some(0) {
                        serde_json::from_str::<Plan>(&o).map_err(|x| format!("not a plan: {x}"))
                    } else {
                        Err(crate::collect::fleet::ssh_reason(code, &e, false)
                            .replace("before a sample", "")
                            + &e.lines()
                                .last()
                                .map(|l| format!(" ({l})"))
                                .unwrap_or_default())
                    };
                    (name.clone(), dest.clone(), partop.clone(), r)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut failed = 0;
    let mut set = Vec::new();
    let (mut stops, mut lost, mut downtime) = (0usize, 0usize, 0u64);
    for (name, dest, partop, r) in results {
        match r {
            Ok(p) => {
                let not = p.models.iter().filter(|m| m.to.is_empty()).count();
                out(&format!(
                    "{name}: plan {} · logical GPUs {} -> {} · {} to stop · {} model(s) moved, {not} NOT relaunched · about {} s down\n",
                    p.fingerprint,
                    p.before.len(),
                    p.after.len(),
                    p.stops.len(),
                    p.models.len() - not,
                    p.downtime_secs
                ))?;
                for m in &p.models {
                    let to = if m.to.is_empty() {
                        format!(
                            "NOT relaunched: {}",
                            m.reason.as_deref().unwrap_or("no room")
                        )
                    } else {
                        m.to.iter()
                            .map(|r| format!("logical GPU {} ({})", r.gpu_id, r.bdf))
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    out(&format!("    {}  {} -> {to}\n", m.name, m.from.join(",")))?;
                }
                for w in &p.warnings {
                    out(&format!("    ! {w}\n"))?;
                }
                stops += p.stops.len();
                lost += not;
                downtime += u64::from(p.downtime_secs);
                set.push(NodePlan {
                    node: name,
                    dest,
                    partop,
                    plan: p,
                });
            }
            Err(e) => {
                failed += 1;
                out(&format!("{name}: cannot plan: {e}\n"))?;
            }
        }
    }
    if failed > 0 {
        out(&format!(
            "\n{failed} node(s) could not plan: nothing saved (a set covers every node named)\n"
        ))?;
        return Ok(exit::FAILED);
    }
    let mut s = PlanSet {
        fingerprint: String::new(),
        created_at: crate::collect::clock::rfc3339(crate::collect::clock::now_ms()),
        nodes: set,
    };
    s.fingerprint = s.computed();
    crate::exec::safe_file::write_atomic(
        file,
        (serde_json::to_string_pretty(&s)? + "\n").as_bytes(),
    )
    .with_context(|| format!("cannot write {}", file.display()))?;
    out(&format!(
        "\nfleet: {} node(s) · {stops} process(es) stop · {lost} model(s) NOT relaunched · about {downtime} s of downtime one node at a time\nplan set {} saved to {}: partop fleet apply {} (one confirmation covers exactly these nodes and plans)\n",
        s.nodes.len(),
        s.fingerprint,
        file.display(),
        file.display()
    ))?;
    Ok(exit::OK)
}

/// The node reads back what its plan says, within a minute (its kernel files follow a reload
/// within seconds; a node that still reads the old layout after that has not changed).
fn verify(t: &Transport, n: &NodePlan) -> Result<(), String> {
    let end = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match verify_once(t, n) {
            Ok(()) => return Ok(()),
            Err(e) if std::time::Instant::now() >= end => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_secs(2)),
        }
    }
}

/// One read-back: modes on each changed GPU and the logical GPU count.
fn verify_once(t: &Transport, n: &NodePlan) -> Result<(), String> {
    let remote = vec![n.partop.clone(), "snapshot".into(), "--json".into()];
    let (code, o, e) = ssh_run(t, &n.dest, &remote, "", Duration::from_secs(120));
    if !matches!(code, Some(0 | 3)) {
        return Err(format!("verify: snapshot failed: {}", e.trim()));
    }
    let snap: crate::domain::Snapshot =
        serde_json::from_str(&o).map_err(|x| format!("verify: not a snapshot: {x}"))?;
    for c in &n.plan.changes {
        let g = snap
            .gpus
            .iter()
            .find(|g| g.bdf == c.bdf)
            .ok_or_else(|| format!("verify: {} is gone", c.bdf))?;
        if g.compute_partition != Some(c.to.0) || g.memory_partition != Some(c.to.1) {
            return Err(format!(
                "verify: {} reads {}, expected {}/{}",
                c.bdf,
                g.modes_label(),
                c.to.0,
                c.to.1
            ));
        }
    }
    if snap.logical_count() != n.plan.after.len() {
        return Err(format!(
            "verify: {} logical GPUs, the plan expects {}",
            snap.logical_count(),
            n.plan.after.len()
        ));
    }
    Ok(())
}

/// The newest rollout of set `set` in the fleet journal, when it has not finished: its id.
fn unfinished_rollout(fj: &Path, set: &str) -> Option<String> {
    let (entries, _) = journal::read(fj).ok()?;
    Rollouts::of(&entries)
        .latest(set)
        .filter(|r| !r.finished)
        .map(|r| r.id.clone())
}

/// A node as its rollout journals it.
fn rollout_node(n: &NodePlan) -> RolloutNode {
    RolloutNode {
        node: n.node.clone(),
        dest: n.dest.clone(),
        plan: n.plan.fingerprint.clone(),
    }
}

/// Journals a rollout's line; a journal that cannot be written stops the rollout.
fn journal_or_stop(path: &Path, rollout: &str, event: &RolloutEvent) -> Result<()> {
    crate::exec::runlog::rollout(path, rollout, event)
        .map_err(|e| anyhow::anyhow!("{e}: nothing more is rolled out"))
}

fn apply(
    t: &Transport,
    set_path: &Path,
    parallel: usize,
    yes: bool,
    resume: bool,
    fj: &Path,
) -> Result<u8> {
    let text = crate::collect::small_file::operator_text(set_path)
        .with_context(|| format!("cannot read {}", set_path.display()))?;
    let set: PlanSet = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a plan set from `partop fleet plan`",
            set_path.display()
        )
    })?;
    if set.nodes.is_empty() {
        anyhow::bail!(
            "{}: the set names no node; nothing is rolled out",
            set_path.display()
        );
    }
    // Verified, never trusted: every plan intact, the set's fingerprint over exactly them.
    for n in &set.nodes {
        if !n.plan.content_intact() {
            anyhow::bail!(
                "{}: the plan for {} was changed after it was made; nothing is rolled out",
                set_path.display(),
                n.node
            );
        }
    }
    if set.computed() != set.fingerprint {
        anyhow::bail!(
            "{}: the set's nodes or plans changed since it was made (fingerprint {} now {}); nothing is rolled out",
            set_path.display(),
            set.fingerprint,
            set.computed()
        );
    }
    // What an interrupted rollout of this set finished already.
    let (rollout, done, failed): (String, Vec<String>, Vec<String>) = if resume {
        let (entries, _) = journal::read(fj).unwrap_or_default();
        let Some(r) = Rollouts::of(&entries).latest(&set.fingerprint).cloned() else {
            anyhow::bail!(
                "no rollout of set {} to resume in {}",
                set.fingerprint,
                fj.display()
            );
        };
        // A node that failed, or was started and never reported (the rollout was killed under
        // it), continues its own run on the node.
        let failed = r.attempted();
        (r.id, r.done, failed)
    } else {
        if let Some(id) = unfinished_rollout(fj, &set.fingerprint) {
            anyhow::bail!(
                "rollout {id} of set {} is unfinished in {}: its done nodes no longer match their plans. Continue it: partop fleet apply {} --resume",
                set.fingerprint,
                fj.display(),
                set_path.display()
            );
        }
        (
            format!("{}-{}", set.fingerprint, crate::collect::clock::now_ms()),
            Vec::new(),
            Vec::new(),
        )
    };
    let todo: Vec<&NodePlan> = set
        .nodes
        .iter()
        .filter(|n| !done.contains(&n.node))
        .collect();
    out(&format!(
        "plan set {}: {} node(s){}, {} at a time:\n",
        set.fingerprint,
        set.nodes.len(),
        if done.is_empty() {
            String::new()
        } else {
            format!(" ({} done before: skipped)", done.len())
        },
        parallel
    ))?;
    for n in &todo {
        out(&format!(
            "  {}  plan {}  {} stop(s), about {} s down\n",
            n.node,
            n.plan.fingerprint,
            n.plan.stops.len(),
            n.plan.downtime_secs
        ))?;
    }
    if !yes
        && !confirm(
            &format!(
                "\nType the plan set's fingerprint ({}) to roll it out on these {} node(s): ",
                set.fingerprint,
                todo.len()
            ),
            &set.fingerprint,
        )?
    {
        out("cancelled: nothing was changed\n")?;
        return Ok(exit::FAILED);
    }
    if !resume {
        journal_or_stop(
            fj,
            &rollout,
            &RolloutEvent::Started {
                set: set.fingerprint.clone(),
                file: set_path.display().to_string(),
                nodes: set.nodes.iter().map(rollout_node).collect(),
                parallel,
            },
        )?;
    }
    for chunk in todo.chunks(parallel.max(1)) {
        // A node attempted before continues its own run when the node has one; an attempt
        // that never reached its first step starts afresh (asked of the node, not guessed).
        let mut how: Vec<Result<bool, String>> = Vec::new();
        for n in chunk {
            let h = if failed.contains(&n.node) {
                node_run(t, n).map(|r| r == NodeRun::Some)
            } else {
                Ok(false)
            };
            journal_or_stop(
                fj,
                &rollout,
                &RolloutEvent::NodeStarted {
                    node: rollout_node(n),
                    resume: h.as_ref().ok().copied(),
                    error: h.as_ref().err().cloned(),
                },
            )?;
            out(&format!(
                "\n== {}: {} plan {}\n",
                n.node,
                match &h {
                    Ok(true) => "resuming its run of",
                    Ok(false) if failed.contains(&n.node) => {
                        "no run on the node yet (its last attempt stopped before its first step): applying"
                    }
                    _ => "applying",
                },
                n.plan.fingerprint
            ))?;
            how.push(h);
        }
        let results: Vec<(&NodePlan, Result<String, String>)> = std::thread::scope(|s| {
            let hs: Vec<_> = chunk
                .iter()
                .zip(how)
                .map(|(n, how)| {
                    s.spawn(move || {
                        let resume_run = match how {
                            Ok(r) => r,
                            Err(e) => {
                                return (*n, Err(format!("failed before its first step: {e}")));
                            }
                        };
                        let plan = serde_json::to_string(&n.plan).unwrap_or_default();
                        let mut remote =
                            vec![n.partop.clone(), "apply".into(), "-".into(), "--yes".into()];
                        if resume_run {
                            remote.push("--resume".into());
                        }
                        let (code, o, e) =
                            ssh_run(t, &n.dest, &remote, &plan, Duration::from_secs(3600));
                        let r = if code == Some(0) {
                            verify(t, n).map(|()| o)
                        } else {
                            // Its step: the last `[i/n]` line; its text: the end of what it said.
                            let step = o
                                .lines()
                                .rev()
                                .find(|l| l.trim_start().starts_with('['))
                                .unwrap_or("before its first step")
                                .trim()
                                .to_string();
                            // What it said on stderr (its error and what to do), else stdout.
                            let src = if e.trim().is_empty() { &o } else { &e };
                            let tail: Vec<&str> =
                                src.lines().filter(|l| !l.trim().is_empty()).collect();
                            let tail = tail[tail.len().saturating_sub(4)..].join(" / ");
                            Err(format!(
                                "failed at {step}: {} (exit {})",
                                tail.trim(),
                                code.map_or_else(|| "none".into(), |c| c.to_string())
                            ))
                        };
                        (*n, r)
                    })
                })
                .collect();
            hs.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        let mut stop = false;
        for (n, r) in results {
            match r {
                Ok(o) => {
                    for l in o.lines().filter(|l| l.trim_start().starts_with('[')) {
                        out(&format!("   {}: {l}\n", n.node))?;
                    }
                    out(&format!("   {}: applied and verified\n", n.node))?;
                    journal_or_stop(
                        fj,
                        &rollout,
                        &RolloutEvent::NodeDone {
                            node: n.node.clone(),
                            plan: n.plan.fingerprint.clone(),
                        },
                    )?;
                }
                Err(e) => {
                    out(&format!("   {}: {e}\n", n.node))?;
                    journal_or_stop(
                        fj,
                        &rollout,
                        &RolloutEvent::NodeFailed {
                            node: n.node.clone(),
                            plan: n.plan.fingerprint.clone(),
                            error: e.clone(),
                        },
                    )?;
                    stop = true;
                }
            }
        }
        if stop {
            let left: Vec<&str> = set
                .nodes
                .iter()
                .skip_while(|x| !chunk.iter().any(|c| c.node == x.node))
                .skip(chunk.len())
                .map(|x| x.node.as_str())
                .collect();
            journal_or_stop(
                fj,
                &rollout,
                &RolloutEvent::Stopped {
                    set: set.fingerprint.clone(),
                    untouched: left.iter().map(|x| (*x).to_string()).collect(),
                },
            )?;
            out(&format!(
                "\nrollout stopped at the first failure; untouched: {}. Fix the node (its own `partop journal` and `partop apply … --resume`), then: partop fleet apply {} --resume\n",
                if left.is_empty() {
                    "none".to_string()
                } else {
                    left.join(", ")
                },
                set_path.display()
            ))?;
            return Ok(exit::FAILED);
        }
    }
    journal_or_stop(
        fj,
        &rollout,
        &RolloutEvent::Done {
            set: set.fingerprint.clone(),
        },
    )?;
    out(&format!(
        "\nrollout done: {} node(s) applied and verified\n",
        set.nodes.len()
    ))?;
    Ok(exit::OK)
}
