//! `partop mig plan|apply` and `partop nvidia record`: MIG layouts through the same plan →
//! confirm → execute as AMD repartitions (the plan re-checked against the node, the host name
//! typed, `--dry-run` printing every command, every step journaled).

use crate::cli::out::say;
use crate::cli::{MigCmd, NvidiaCmd, SourceArgs, exit};
use crate::domain::mig::{MigDraft, MigPlan, parse_instances, plan};
use crate::exec::mig::{MigEvent, MigNode, execute};
use crate::exec::protocol::{Outcome, Request, Running, Start};
use crate::node::{NvidiaAccess, nvidia_smi, open};
use anyhow::{Context, Result, bail};
use std::time::Duration;

fn snapshot(src: &SourceArgs) -> Result<crate::domain::Snapshot> {
    // MIG is NVIDIA's: read the node as one, whatever else is installed.
    let node = open(&nvidia_source(src)).map_err(|e| {
        anyhow::anyhow!("no NVIDIA GPU partop can read: {e}\n(use --source nvidia, --nvidia-smi PATH or --nvidia-replay FILE)")
    })?;
    if node.nvidia.is_none() {
        bail!(
            "this node has no NVIDIA GPU partop can read (use --source nvidia, --nvidia-smi PATH or --nvidia-replay FILE)"
        );
    }
    let rt = crate::cli::out::runtime()?;
    let mut c = node.collector();
    let s = rt.block_on(c.sample());
    if s.gpus.is_empty() {
        bail!(
            "no NVIDIA GPU partop can read ({}); NVML needs the NVIDIA driver, or pass --nvidia-smi PATH or --nvidia-replay FILE",
            s.sources
                .iter()
                .filter_map(|x| x.error.clone())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    Ok(s)
}

/// The options as a MIG command sees them: the node read as NVIDIA's.
fn nvidia_source(src: &SourceArgs) -> SourceArgs {
    let mut nv = src.clone();
    if nv.source == crate::collect::sysfs::SourceMode::Auto {
        nv.source = crate::collect::sysfs::SourceMode::Nvidia;
    }
    nv
}

fn smi_name(src: &SourceArgs) -> String {
    src.nvidia_smi
        .as_ref()
        .map_or_else(|| "nvidia-smi".into(), |p| p.display().to_string())
}

/// The node as the MIG protocol reads it: sampled as NVIDIA's when first asked.
fn mig_node(
    src: &SourceArgs,
) -> MigNode<impl Fn() -> Result<crate::domain::Snapshot, String> + '_> {
    MigNode::new(
        std::sync::Arc::new(nvidia_smi(src)),
        smi_name(src),
        crate::collect::host::hostname(),
        move || snapshot(src).map_err(|e| e.to_string()),
    )
}

/// `partop mig ...`.
pub fn mig(src: &SourceArgs, action: MigCmd, settings: &crate::config::Settings) -> Result<u8> {
    match action {
        MigCmd::Plan {
            gpu,
            instances,
            json,
        } => {
            // Refusals are errors (stderr, exit 2): with --json, stdout holds a plan or nothing.
            let list = if instances.trim() == "none" {
                vec![]
            } else {
                parse_instances(&instances).map_err(|e| exit::Usage(format!("cannot plan: {e}")))?
            };
            let snap = snapshot(src)?;
            let draft = MigDraft {
                gpu,
                instances: list,
            };
            match plan(&snap, &draft, &smi_name(src)) {
                Ok(p) => {
                    if json {
                        say(&(serde_json::to_string_pretty(&p)? + "\n"))?;
                    } else {
                        say(&crate::report::mig_plan_text(&p))?;
                    }
                    Ok(exit::OK)
                }
                Err(e) => Err(exit::Usage(
                    e.iter()
                        .map(|x| format!("cannot plan: {x}"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                )
                .into()),
            }
        }
        MigCmd::Apply(crate::cli::ApplyArgs {
            plan: file,
            yes,
            dry_run,
            resume,
            kill_after_grace,
            grace,
        }) => {
            let fp: MigPlan = crate::cli::out::read_document(
                &file,
                false,
                "a MIG plan from `partop mig plan --json`",
            )?;
            // The file is verified, never trusted: its content must be what was fingerprinted.
            crate::exec::protocol::verify(&fp, &file)?;
            let here = crate::collect::host::hostname();
            if fp.host != here {
                bail!(
                    "this plan was made for host {}, and this is {here}: plans are never applied to another node",
                    fp.host
                );
            }
            say(&crate::report::mig_plan_text(&fp))?;
            if settings.read_only && !dry_run {
                say(&crate::cli::out::read_only_refusal("changed"))?;
                return Ok(exit::USAGE);
            }
            let journal = &settings.journal;
            let node = mig_node(src);
            if dry_run {
                // The same checks as the apply: a plan the apply would refuse is refused here.
                say(&match node.check(journal, &fp, resume)? {
                    Start::Complete(run) => format!(
                        "dry run: run {} of this plan is already complete; nothing changed\n",
                        run.run
                    ),
                    Start::Resume { plan, from, run } => format!(
                        "dry run: run {} would resume at step {} ({}); nothing changed\n",
                        run.run,
                        from + 1,
                        plan.steps[from].key
                    ),
                    Start::Fresh(_) => "dry run: the node is as planned; nothing changed\n".into(),
                })?;
                return Ok(exit::OK);
            }
            let lock = crate::exec::lock::host_path();
            let req = Request {
                saved: &fp,
                file: &file,
                resume,
                journal,
                node_id: "host".into(),
                lock: &lock,
                holder: "mig apply",
                resume_command: crate::cli::out::resume_command(
                    &nvidia_source(src),
                    journal,
                    &["mig", "apply"],
                    &file,
                    kill_after_grace,
                    grace,
                ),
                simulated: false,
            };
            let mut op = Operator {
                yes,
                resume,
                here,
                steps: fp.steps.len(),
            };
            match execute(
                &node,
                &req,
                Duration::from_secs_f64(grace),
                kill_after_grace,
                &mut op,
            )? {
                Outcome::Complete(_) => Ok(exit::OK),
                Outcome::NotConfirmed => {
                    say("not confirmed: nothing changed\n")?;
                    Ok(exit::FAILED)
                }
                Outcome::Ran { result: Ok(()), .. } => {
                    say("done\n")?;
                    Ok(exit::OK)
                }
                Outcome::Ran { result: Err(e), .. } => {
                    say(&format!("{e}\n"))?;
                    Ok(exit::FAILED)
                }
            }
        }
    }
}

/// The operator of `partop mig apply`: the host name typed (none with --yes), the run's start
/// and each step printed.
struct Operator {
    yes: bool,
    resume: bool,
    here: String,
    steps: usize,
}

impl crate::exec::protocol::Operator<MigPlan> for Operator {
    type Event = MigEvent;

    fn starting(&mut self, start: &Start<MigPlan>) -> Result<()> {
        if let Start::Complete(run) = start {
            say(&format!(
                "run {} of this plan is done: nothing to resume\n",
                run.run
            ))?;
        }
        Ok(())
    }

    fn confirm(&mut self, plan: &MigPlan, _start: &Start<MigPlan>) -> Result<bool> {
        Ok(self.yes
            || crate::cli::out::confirm(
                &format!(
                    "Type this machine's host name ({}) to {} plan {}: ",
                    self.here,
                    if self.resume { "resume" } else { "apply" },
                    plan.fingerprint
                ),
                &self.here,
            )?)
    }

    fn journaled(&mut self, r: &Running<MigPlan>) -> Result<()> {
        if self.resume {
            say(&format!(
                "resuming run {} of plan {} at step {} ({})\n",
                r.log.run,
                r.plan.fingerprint,
                r.from + 1,
                r.plan.steps[r.from].key
            ))?;
        }
        say(&format!(
            "if this apply is interrupted, continue it with: {}\n",
            r.resume_command
        ))
    }

    fn progress(&mut self, e: MigEvent) {
        let _ = match e.result {
            None => say(&format!("[{}/{}] {}\n", e.idx + 1, self.steps, e.title)),
            Some(Ok(d)) => say(&format!("      ok: {d}\n")),
            Some(Err(e)) => say(&format!("      FAILED: {e}\n")),
        };
    }
}

/// `partop nvidia ...`.
pub fn nvidia(src: &SourceArgs, action: NvidiaCmd) -> Result<u8> {
    match action {
        NvidiaCmd::Record { out } => {
            let node = open(src)?;
            let access = node.nvidia.clone().unwrap_or(NvidiaAccess::Nvml);
            let mut s = access.source(&node.nvidia_smi);
            // Graphics-engine activity (GPM) is the difference of two samples: a second read a
            // second after the first carries it.
            s.read().map_err(anyhow::Error::msg)?;
            std::thread::sleep(std::time::Duration::from_secs(1));
            let n = s.read().map_err(anyhow::Error::msg)?;
            // Where and when, beside the node, as an AMD recording says them: a replay's banner
            // names the recording's host and time, not the file.
            let mut doc = serde_json::to_value(&n)?;
            if let Some(o) = doc.as_object_mut() {
                o.insert("host".into(), crate::collect::host::hostname().into());
                o.insert(
                    "recorded_at".into(),
                    crate::collect::clock::rfc3339(crate::collect::clock::now_ms()).into(),
                );
            }
            crate::exec::safe_file::write_atomic(
                &out,
                (serde_json::to_string_pretty(&doc)? + "\n").as_bytes(),
            )
            .with_context(|| format!("cannot write {}", out.display()))?;
            say(&format!(
                "recorded {} GPU(s) from {} to {}\n",
                n.gpus.len(),
                n.source,
                out.display()
            ))?;
            Ok(exit::OK)
        }
    }
}
