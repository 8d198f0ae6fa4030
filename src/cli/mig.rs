//! `partop mig plan|apply` and `partop nvidia record`: MIG layouts through the same plan →
//! confirm → execute as AMD repartitions (the plan re-checked against the node, the host name
//! typed, `--dry-run` printing every command, every step journaled).

use crate::cli::out::say;
use crate::cli::{MigCmd, NvidiaCmd, SourceArgs, exit};
use crate::domain::mig::{MigDraft, MigPlan, parse_instances, plan};
use crate::exec::mig::{MigCtx, apply};
use crate::exec::protocol::Start;
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

/// The node as the MIG protocol asks it: sampled once, when first asked (a resume of a
/// complete run never samples it).
struct MigNode<'a> {
    src: &'a SourceArgs,
    here: String,
    snap: std::cell::OnceCell<Result<crate::domain::Snapshot, String>>,
}

impl MigNode<'_> {
    fn snap(&self) -> Result<&crate::domain::Snapshot, String> {
        self.snap
            .get_or_init(|| snapshot(self.src).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl crate::exec::protocol::Node<MigPlan> for MigNode<'_> {
    // A fresh run is checked by the re-plan, which must come out identical.
    fn can_start(&self, _plan: &MigPlan) -> Vec<String> {
        Vec::new()
    }

    fn can_resume(&self, plan: &MigPlan, _stop_done: bool) -> Vec<String> {
        match self.snap() {
            Ok(s) => crate::domain::mig::still_valid(plan, s, &self.here),
            Err(e) => vec![e],
        }
    }

    fn replan(&self, saved: &MigPlan) -> Result<MigPlan, String> {
        plan(self.snap()?, &saved.draft, &smi_name(self.src)).map_err(|e| e.join("; "))
    }
}

/// Where the apply starts, after every check a real apply makes (a dry run makes the same
/// ones): the one change protocol (`exec::protocol::start`).
fn checked(
    src: &SourceArgs,
    fp: &MigPlan,
    resume: bool,
    settings: &crate::config::Settings,
) -> Result<Start<MigPlan>> {
    let node = MigNode {
        src,
        here: crate::collect::host::hostname(),
        snap: std::cell::OnceCell::new(),
    };
    Ok(crate::exec::protocol::start(
        &settings.journal,
        "host",
        fp,
        resume,
        &node,
    )?)
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
            let text = crate::collect::small_file::operator_text(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let fp: MigPlan = serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not a MIG plan from `partop mig plan --json`",
                    file.display()
                )
            })?;
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
            if dry_run {
                // The same checks as the apply: a plan the apply would refuse is refused here.
                say(&match checked(src, &fp, resume, settings)? {
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
            let run_id = crate::exec::protocol::run_id(journal, &fp, resume);
            let _lock = crate::exec::lock::acquire(
                &crate::exec::lock::host_path(),
                &crate::exec::lock::Holder::me("mig apply", &run_id, journal),
            )?;
            let start = checked(src, &fp, resume, settings)?;
            let (p, from) = match &start {
                Start::Complete(run) => {
                    say(&format!(
                        "run {} of this plan is done: nothing to resume\n",
                        run.run
                    ))?;
                    return Ok(exit::OK);
                }
                Start::Resume { plan, from, .. } => (plan.clone(), *from),
                Start::Fresh(plan) => (plan.clone(), 0),
            };
            let resume_cmd = crate::cli::out::resume_command(
                &nvidia_source(src),
                journal,
                &["mig", "apply"],
                &file,
                kill_after_grace,
                grace,
            );
            if !yes
                && !crate::cli::out::confirm(
                    &format!(
                        "Type this machine's host name ({here}) to {} plan {}: ",
                        if resume { "resume" } else { "apply" },
                        p.fingerprint
                    ),
                    &here,
                )?
            {
                say("not confirmed: nothing changed\n")?;
                return Ok(exit::FAILED);
            }

            let ctx = MigCtx {
                smi: std::sync::Arc::new(nvidia_smi(src)),
                resume: resume_cmd.clone(),
                journal: journal.clone(),
                grace: Duration::from_secs_f64(grace),
                kill_after_grace,
                proc_root: "/proc".into(),
                simulated: false,
            };
            let log = crate::exec::runlog::RunLog {
                node: "host".into(),
                path: journal.clone(),
                kind: "mig",
                run: run_id,
                fingerprint: p.fingerprint.clone(),
                simulated: false,
            };
            crate::exec::protocol::journal_start(&log, &start, Some(&file), &resume_cmd)?;
            if resume {
                say(&format!(
                    "resuming run {} of plan {} at step {} ({})\n",
                    log.run,
                    p.fingerprint,
                    from + 1,
                    p.steps[from].key
                ))?;
            }
            say(&format!(
                "if this apply is interrupted, continue it with: {resume_cmd}\n"
            ))?;
            let r = apply(&p, &ctx, &log, from, |i, title, r| {
                let _ = match r {
                    None => say(&format!("[{}/{}] {title}\n", i + 1, p.steps.len())),
                    Some(Ok(d)) => say(&format!("      ok: {d}\n")),
                    Some(Err(e)) => say(&format!("      FAILED: {e}\n")),
                };
            });
            match r {
                Ok(()) => {
                    say("done\n")?;
                    Ok(exit::OK)
                }
                Err(e) => {
                    say(&format!("{e}\n"))?;
                    Ok(exit::FAILED)
                }
            }
        }
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
