//! `partop fleet --kubernetes plan|apply`: a rollout through the cluster's own partition
//! managers. The plan (`exec::cluster_rollout::plan`) printed node by node (the engine, the pods
//! evicted and the budgets that allow it now, the capacity after, the DCM profile's diff) and
//! saved; the apply checks every verb it needs and every node against its plan before anything
//! changes, asks the one typed confirmation, and runs `exec::rollout` with the cluster engine.
//! Printing and wiring only.

use crate::cli::args::{FleetArgs, FleetCmd};
use crate::cli::exit;
use crate::cli::out::out;
use crate::domain::cluster_rollout::{ClusterPlanSet, NodePlan, Target, parse_layout};
use crate::domain::text::escape_controls as esc;
use crate::exec::cluster_rollout::{ClusterEngine, Planned, Reach};
use crate::exec::k8s::Limits;
use crate::exec::rollout::{self, NodeStart, Outcome, Progress, Start};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;

/// An error from the cluster as said on the terminal: node, pod and label names and the API
/// server's words are outside strings, escaped like every other output path.
fn said(e: String) -> anyhow::Error {
    anyhow::Error::msg(esc(&e).into_owned())
}

/// `partop fleet --kubernetes plan|apply`.
pub fn action(a: &FleetArgs, action: &FleetCmd, settings: &crate::config::Settings) -> Result<u8> {
    if let Some(l) = &a.selector {
        crate::domain::label_selector::check(l)
            .map_err(|e| exit::Usage(format!("-l {}: {}", esc(l), esc(&e))))?;
    }
    let t = crate::collect::cluster::Target {
        kubeconfig: a.kubeconfig.clone(),
        context: a.context.clone(),
        selector: a.selector.clone(),
    };
    match action {
        FleetCmd::Plan {
            compute,
            memory,
            layout,
            mig_config,
            out: file,
        } => {
            if compute.is_some() || memory.is_some() {
                return Err(exit::Usage(
                    "with --kubernetes the layout is one word: --layout cpx_nps4 (or --mig-config NAME)".into(),
                )
                .into());
            }
            let target = match (layout, mig_config) {
                (Some(l), None) => {
                    let (compute, memory) = parse_layout(l)
                        .map_err(|e| exit::Usage(format!("--layout {}", esc(&e))))?;
                    Target::Layout { compute, memory }
                }
                (None, Some(m)) => Target::MigConfig { name: m.clone() },
                _ => {
                    return Err(exit::Usage(
                        "with --kubernetes, say what the nodes take: --layout <compute>_<memory> (through DCM) or --mig-config NAME (through the MIG manager)".into(),
                    )
                    .into());
                }
            };
            plan(&t, &target, file, &reach(a)?)
        }
        FleetCmd::Apply {
            set,
            parallel,
            yes,
            confirmed,
            resume,
        } => {
            if settings.read_only {
                out(&crate::cli::out::read_only_refusal("rolled out"))?;
                return Ok(exit::USAGE);
            }
            let op = Operator {
                answer: crate::cli::fleet_apply::Answer::of(*yes, confirmed.as_deref()),
                parallel: usize::from(*parallel),
                again: crate::cli::out::fleet_resume_command(
                    &settings.journal,
                    &crate::cli::fleet_apply::ssh_options(a),
                    Some(&t),
                    set,
                ),
            };
            apply(
                &t,
                crate::cli::fleet_nodes::transport(a, 1),
                set,
                *resume,
                &settings.fleet_journal(),
                op,
            )
        }
    }
}

/// How nodes no manager owns are reached: `--ssh NODE=DEST` (each destination checked as the
/// fleet checks a node word), `--ssh-user` for the others' InternalIP.
pub fn reach(a: &FleetArgs) -> Result<Reach> {
    let mut dests = std::collections::BTreeMap::new();
    for w in &a.ssh {
        let (node, dest) = w
            .split_once('=')
            .filter(|(n, d)| !n.is_empty() && !d.is_empty())
            .ok_or_else(|| exit::Usage(format!("--ssh {}: give NODE=DEST", esc(w))))?;
        crate::collect::fleet::spec(dest, &a.remote_partop)
            .map_err(|e| exit::Usage(format!("--ssh {}: {}", esc(node), esc(&e))))?;
        dests.insert(node.to_string(), dest.to_string());
    }
    if let Some(u) = &a.ssh_user
        && (u.is_empty()
            || u.contains(['@', ' '])
            || u.starts_with('-')
            || u.chars().any(char::is_control))
    {
        return Err(exit::Usage(format!("--ssh-user {}: not a user name", esc(u))).into());
    }
    Ok(Reach {
        transport: crate::cli::fleet_nodes::transport(a, dests.len().max(1)),
        dests,
        user: a.ssh_user.clone(),
        partop: a.remote_partop.clone(),
    })
}

fn plan(
    t: &crate::collect::cluster::Target,
    target: &Target,
    file: &Path,
    reach: &Reach,
) -> Result<u8> {
    let rt = crate::cli::out::runtime()?;
    let planned = rt
        .block_on(crate::exec::cluster_rollout::plan_reaching(
            t,
            target,
            Limits::default(),
            Some(reach),
        ))
        .map_err(said);
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    let planned = planned?;
    out(&plan_text(&planned))?;
    if !planned.refused.is_empty() {
        out(&format!(
            "\n{} node(s) cannot be rolled out through the cluster: nothing saved (a set covers every node the selector names; narrow it with -l)\n",
            planned.refused.len()
        ))?;
        return Ok(exit::FAILED);
    }
    if planned.set.nodes.is_empty() && !planned.already.is_empty() {
        out("\nevery node is already at the target: nothing to roll out, nothing saved\n")?;
        return Ok(exit::OK);
    }
    if planned.set.nodes.is_empty() {
        out("\nno GPU node matched: nothing saved\n")?;
        return Ok(exit::FAILED);
    }
    crate::exec::safe_file::write_atomic(
        file,
        (serde_json::to_string_pretty(&planned.set)? + "\n").as_bytes(),
    )
    .with_context(|| format!("cannot write {}", file.display()))?;
    out(&format!(
        "\ncluster plan set {} saved to {}: partop fleet --kubernetes apply {} (one confirmation covers exactly these nodes, in this order, and this profile)\n",
        planned.set.fingerprint,
        file.display(),
        file.display()
    ))?;
    Ok(exit::OK)
}

/// The plan for reading: each node, its evictions and their budgets, the capacity after; the
/// DCM profile's diff; the nodes refused.
pub fn plan_text(p: &Planned) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "cluster rollout to {}: {} node(s) in this order",
        esc(&p.set.target.words()),
        p.set.nodes.len()
    );
    for n in &p.set.nodes {
        node_text(&mut o, n);
        for (node, d) in p.daemons.iter().filter(|(x, _)| *x == n.node) {
            let _ = writeln!(
                o,
                "    stays: {} (a DaemonSet pod on {}'s GPUs: the manager's own flow clears it)",
                esc(d),
                esc(node)
            );
        }
    }
    if let Some(pr) = &p.set.profile {
        let _ = writeln!(o, "\nDCM's ConfigMap, written before the first label:");
        for l in pr.diff() {
            let _ = writeln!(o, "  {}", esc(&l));
        }
    }
    for a in &p.already {
        let _ = writeln!(
            o,
            "already at the target: {} (its manager answered success and it advertises the capacity, or its own plan changes nothing): not in the set",
            esc(a)
        );
    }
    for r in &p.refused {
        let _ = writeln!(o, "refused: {}", esc(r));
    }
    o
}

fn node_text(o: &mut String, n: &NodePlan) {
    let after: Vec<String> = n
        .expected
        .iter()
        .map(|(r, c)| format!("{}={c}", esc(r)))
        .collect();
    let _ = writeln!(
        o,
        "{}: {} · {} pod(s) evicted · allocatable after: {} · plan {}",
        esc(&n.node),
        esc(&n.engine.words()),
        n.pods.len(),
        after.join(" "),
        n.fingerprint
    );
    for e in &n.pods {
        let asks: Vec<String> = e
            .requests
            .iter()
            .map(|(r, c)| format!("{}={c}", esc(r)))
            .collect();
        let _ = writeln!(
            o,
            "    evict {} ({}) · {}",
            esc(&e.label()),
            asks.join(" "),
            esc(&e.budget_words())
        );
    }
}

/// `partop fleet --kubernetes apply`: the set verified, every verb asked of the API server and
/// every node not attempted before compared with its plan, all before the confirmation.
fn apply(
    t: &crate::collect::cluster::Target,
    transport: crate::collect::fleet::Transport,
    file: &Path,
    resume: bool,
    fj: &Path,
    mut op: Operator,
) -> Result<u8> {
    let parallel = op.parallel;
    let (set, outcome) = roll_out(t, transport, file, parallel, resume, fj, &mut op)?;
    match outcome {
        Outcome::NotConfirmed => {
            out("cancelled: nothing was changed\n")?;
            Ok(exit::FAILED)
        }
        Outcome::Stopped {
            untouched,
            left_cordoned,
        } => {
            out(&format!(
                "\n{}\n",
                stopped_words(&untouched, &left_cordoned, &op.again)
            ))?;
            Ok(exit::FAILED)
        }
        Outcome::Done => {
            out(&format!(
                "\nrollout done: {} node(s) changed, advertising their new capacity, uncordoned\n",
                set.nodes.len()
            ))?;
            Ok(exit::OK)
        }
    }
}

/// A stopped cluster rollout in words: the nodes untouched, those left cordoned with their
/// undo, the command that resumes it.
pub fn stopped_words(untouched: &[String], left_cordoned: &[String], again: &str) -> String {
    format!(
        "rollout stopped at the first failure; untouched: {}.{} Fix the cause named above, then: {again}",
        untouched_words(untouched),
        if left_cordoned.is_empty() {
            String::new()
        } else {
            format!(
                " Left cordoned by partop (or may be): {}.",
                esc(&left_cordoned.join(", "))
            )
        }
    )
}

/// The nodes a stopped rollout did not touch, escaped (`none` when none).
pub fn untouched_words(untouched: &[String]) -> String {
    if untouched.is_empty() {
        "none".to_string()
    } else {
        untouched
            .iter()
            .map(|u| esc(u).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The one way a saved cluster set is rolled out, for `fleet --kubernetes apply` and the live
/// cluster view: the set read and verified, every verb asked of the API server, every node not
/// attempted before compared with its plan, then `exec::rollout` with the cluster engine,
/// journaled in the fleet journal `fj`, `op` confirming and told each step; a node whose
/// engine is its own `partop apply` is reached over `transport`.
///
/// # Errors
/// A refusal before anything changed, or the fleet journal unwritable.
pub fn roll_out(
    t: &crate::collect::cluster::Target,
    transport: crate::collect::fleet::Transport,
    file: &Path,
    parallel: usize,
    resume: bool,
    fj: &Path,
    op: &mut impl rollout::Operator<ClusterPlanSet>,
) -> Result<(ClusterPlanSet, Outcome)> {
    let set: ClusterPlanSet = crate::cli::out::read_document(
        file,
        false,
        "a plan set from `partop fleet --kubernetes plan`",
    )?;
    let engine = ClusterEngine::connect(t, &set, Limits::default())
        .map_err(said)?
        .over(transport);
    let outcome = rollout::run(&engine, &set, file, parallel, resume, fj, op)?;
    Ok((set, outcome))
}

/// The operator of a cluster rollout: the nodes printed, the set's fingerprint typed (none with
/// --yes), each step printed as it is done.
struct Operator {
    answer: crate::cli::fleet_apply::Answer,
    parallel: usize,
    /// The exact command that continues the rollout.
    again: String,
}

impl rollout::Operator<ClusterPlanSet> for Operator {
    fn confirm(&mut self, set: &ClusterPlanSet, todo: &[&NodePlan], start: &Start) -> Result<bool> {
        let mut o = format!(
            "cluster plan set {} ({}): {} node(s){}, {} at a time:\n",
            set.fingerprint,
            esc(&set.target.words()),
            set.nodes.len(),
            if start.done.is_empty() {
                String::new()
            } else {
                format!(" ({} done before: skipped)", start.done.len())
            },
            self.parallel
        );
        for n in todo {
            node_text(&mut o, n);
        }
        out(&o)?;
        self.answer.confirms(&set.fingerprint, todo.len())
    }

    fn resume_command(&self, _file: &Path) -> String {
        self.again.clone()
    }

    fn progress(&mut self, p: Progress) -> Result<()> {
        match p {
            Progress::Node { node, how, plan } => out(&format!(
                "\n== {}: {} plan {plan}\n",
                esc(&node),
                match how {
                    NodeStart::Resume => "resuming at the step where it stopped:",
                    _ => "rolling out",
                }
            )),
            Progress::Step { node, text } | Progress::Failed { node, error: text } => {
                out(&format!("   {}: {}\n", esc(&node), esc(&text)))
            }
            Progress::Applied { node, .. } => out(&format!("   {}: done\n", esc(&node))),
        }
    }
}
