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
use crate::domain::plan::Plan;
use crate::domain::text::escape_controls as esc;
use crate::exec::rollout::{self, NodeStart, Outcome, Progress};
use anyhow::{Context, Result};
use std::path::Path;
use std::time::Duration;

pub use crate::exec::rollout::{NodePlan, PlanSet};

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
            layout: Some(_), ..
        }
        | FleetCmd::Plan {
            mig_config: Some(_),
            ..
        } => Err(exit::Usage(
            "--layout and --mig-config plan through a cluster's partition manager: add --kubernetes (over ssh: --compute and --memory)".into(),
        )
        .into()),
        FleetCmd::Plan {
            compute,
            memory,
            out: file,
            ..
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
            confirmed,
            resume,
        } => {
            if settings.read_only {
                out(&crate::cli::out::read_only_refusal("rolled out"))?;
                return Ok(exit::USAGE);
            }
            let op = Operator {
                answer: Answer::of(*yes, confirmed.as_deref()),
                parallel: usize::from(*parallel),
                again: crate::cli::out::fleet_resume_command(
                    &settings.journal,
                    &ssh_options(a),
                    None,
                    set,
                ),
            };
            apply(&t, set, *resume, &settings.fleet_journal(), op)
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
    // Every node plans at once, bounded by the concurrency.
    let results: Vec<(String, String, String, Result<Plan, String>)> = std::thread::scope(|s| {
        let sem = std::sync::Arc::new(std::sync::Mutex::new(0usize));
        let handles: Vec<_> = nodes
            .iter()
            .map(|(name, dest, partop)| {
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
                    let r = crate::exec::rollout::plan_on(t, dest, partop, compute, memory);
                    *sem.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) -= 1;
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

/// `partop fleet apply`: the set read, the rollout run by `exec::rollout`, its progress printed.
fn apply(t: &Transport, set_path: &Path, resume: bool, fj: &Path, mut op: Operator) -> Result<u8> {
    let set: PlanSet =
        crate::cli::out::read_document(set_path, false, "a plan set from `partop fleet plan`")?;
    let parallel = op.parallel;
    match rollout::execute(t, &set, set_path, parallel, resume, fj, &mut op)? {
        Outcome::NotConfirmed => {
            out("cancelled: nothing was changed\n")?;
            Ok(exit::FAILED)
        }
        Outcome::Stopped { untouched, .. } => {
            out(&format!(
                "\nrollout stopped at the first failure; untouched: {}. Fix the node (its own `partop journal` and `partop apply … --resume`), then: {}\n",
                if untouched.is_empty() {
                    "none".to_string()
                } else {
                    esc(&untouched.join(", ")).into_owned()
                },
                op.again
            ))?;
            Ok(exit::FAILED)
        }
        Outcome::Done => {
            out(&format!(
                "\nrollout done: {} node(s) applied and verified\n",
                set.nodes.len()
            ))?;
            Ok(exit::OK)
        }
    }
}

/// The operator of `partop fleet apply`: the nodes to roll out printed, the set's fingerprint
/// typed (none with --yes), each node's progress printed.
struct Operator {
    answer: Answer,
    parallel: usize,
    /// The exact command that continues the rollout.
    again: String,
}

impl rollout::Operator for Operator {
    fn confirm(
        &mut self,
        set: &PlanSet,
        todo: &[&NodePlan],
        start: &rollout::Start,
    ) -> Result<bool> {
        out(&format!(
            "plan set {}: {} node(s){}, {} at a time:\n",
            set.fingerprint,
            set.nodes.len(),
            if start.done.is_empty() {
                String::new()
            } else {
                format!(" ({} done before: skipped)", start.done.len())
            },
            self.parallel
        ))?;
        for n in todo {
            out(&format!(
                "  {}  plan {}  {} stop(s), about {} s down\n",
                n.node,
                n.plan.fingerprint,
                n.plan.stops.len(),
                n.plan.downtime_secs
            ))?;
        }
        self.answer.confirms(&set.fingerprint, todo.len())
    }

    fn resume_command(&self, _file: &Path) -> String {
        self.again.clone()
    }

    fn progress(&mut self, p: Progress) -> Result<()> {
        match p {
            Progress::Node { node, how, plan } => out(&format!(
                "\n== {}: {} plan {}\n",
                esc(&node),
                match how {
                    NodeStart::Resume => "resuming its run of",
                    NodeStart::ApplyAgain => {
                        "no run on the node yet (its last attempt stopped before its first step): applying"
                    }
                    NodeStart::Apply | NodeStart::Unknown(_) => "applying",
                },
                esc(&plan)
            )),
            // What the node said (its step lines, its error) is the node's text: escaped.
            Progress::Applied { node, steps } => {
                for l in steps {
                    out(&format!("   {}: {}\n", esc(&node), esc(&l)))?;
                }
                out(&format!("   {}: applied and verified\n", esc(&node)))
            }
            Progress::Step { node, text } => out(&format!("   {}: {}\n", esc(&node), esc(&text))),
            Progress::Failed { node, error } => {
                out(&format!("   {}: {}\n", esc(&node), esc(&error)))
            }
        }
    }
}

/// The options of `fleet` a pasted resume needs to reach the nodes as this run did.
pub(crate) fn ssh_options(a: &FleetArgs) -> Vec<String> {
    let mut o: Vec<String> = crate::cli::fleet_rollouts::fleet_options(a)
        .into_iter()
        .map(|o| o.to_string_lossy().into_owned())
        .collect();
    // A path given relative to where the rollout ran: absolute, so the pasted command finds it
    // from anywhere.
    if let Some(i) = o.iter().position(|w| w == "--ssh-config")
        && let Some(p) = o.get_mut(i + 1)
        && let Ok(abs) = std::path::absolute(&*p)
    {
        *p = abs.display().to_string();
    }
    o
}

/// How a rollout's one confirmation is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The operator types the set's fingerprint here.
    Ask,
    /// `--yes`: not asked (scripts).
    Yes,
    /// `--confirmed FP`: typed elsewhere (the fleet view); the set read must hold exactly it.
    Confirmed(String),
}

impl Answer {
    /// From `--yes` and `--confirmed`.
    pub fn of(yes: bool, confirmed: Option<&str>) -> Self {
        match (yes, confirmed) {
            (_, Some(fp)) => Self::Confirmed(fp.to_string()),
            (true, None) => Self::Yes,
            (false, None) => Self::Ask,
        }
    }

    /// Whether the set of `fingerprint` (verified against its content) is confirmed for
    /// `nodes` nodes; a fingerprint confirmed elsewhere that is not the set's is said.
    ///
    /// # Errors
    /// The answer could not be read or said.
    pub fn confirms(&self, fingerprint: &str, nodes: usize) -> Result<bool> {
        match self {
            Self::Ask => confirm_set(fingerprint, nodes),
            Self::Yes => Ok(true),
            Self::Confirmed(fp) if fp == fingerprint => Ok(true),
            Self::Confirmed(fp) => {
                out(&format!(
                    "the set read holds {fingerprint}, not the {} confirmed: nothing is rolled out\n",
                    crate::domain::text::escape_controls(fp)
                ))?;
                Ok(false)
            }
        }
    }
}

/// The one confirmation of a plan set (over ssh or through the cluster): its fingerprint typed
/// exactly, naming how many nodes it rolls out on.
///
/// # Errors
/// The answer could not be read.
pub fn confirm_set(fingerprint: &str, nodes: usize) -> Result<bool> {
    confirm(
        &format!(
            "\nType the plan set's fingerprint ({fingerprint}) to roll it out on these {nodes} node(s): "
        ),
        fingerprint,
    )
}
