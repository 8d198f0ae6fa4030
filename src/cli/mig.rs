//! `partop mig plan|apply` and `partop nvidia record`: MIG layouts through the same plan →
//! confirm → execute as AMD repartitions (the plan re-checked against the node, the host name
//! typed, `--dry-run` printing every command, every step journaled).

use crate::cli::out::say;
use crate::cli::{MigCmd, NvidiaCmd, SourceArgs, exit};
use crate::domain::mig::{MigDraft, MigPlan, parse_instances, plan};
use crate::exec::mig::{MigCtx, apply};
use crate::node::{NvidiaAccess, nvidia_smi, open};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn snapshot(src: &SourceArgs) -> Result<crate::domain::Snapshot> {
    // MIG is NVIDIA's: read the node as one, whatever else is installed.
    let mut nv = src.clone();
    if nv.source == crate::collect::sysfs::SourceMode::Auto {
        nv.source = crate::collect::sysfs::SourceMode::Nvidia;
    }
    let node = open(&nv).map_err(|e| {
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

fn smi_name(src: &SourceArgs) -> String {
    src.nvidia_smi
        .as_ref()
        .map_or_else(|| "nvidia-smi".into(), |p| p.display().to_string())
}

/// The exact command that continues a run of the plan in `file` on this node: this partop as it
/// was started, the options that choose the node, the journal and the stop policy, the plan's
/// absolute path. What partop prints for a resume is this, so pasting it works.
fn resume_command(
    src: &SourceArgs,
    file: &Path,
    settings: &crate::config::Settings,
    kill_after_grace: bool,
    grace: f64,
) -> String {
    let word = |s: &str| crate::domain::text::shell_quote(s).into_owned();
    let mut w = vec![
        word(&crate::cli::out::invoked_as()),
        "--source".into(),
        "nvidia".into(),
    ];
    if let Some(p) = &src.nvidia_smi {
        w.extend([
            "--nvidia-smi".into(),
            word(&absolute(p).display().to_string()),
        ]);
    }
    w.extend([
        "--journal".into(),
        word(&absolute(&settings.journal).display().to_string()),
        "mig".into(),
        "apply".into(),
        word(&absolute(file).display().to_string()),
        "--resume".into(),
        "--grace".into(),
        format!("{grace}"),
    ]);
    if kill_after_grace {
        w.push("--kill-after-grace".into());
    }
    w.join(" ")
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p)
        .unwrap_or_else(|_| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
}

/// The plan as it will run, and the step it starts at, after every check a real apply makes
/// (a dry run makes the same ones): a fresh apply re-plans on the node as it is and must come
/// out identical; a resume continues the journaled run, with the GPU in a state the plan can
/// have produced (`still_valid`).
fn checked(
    src: &SourceArgs,
    fp: &MigPlan,
    resume: bool,
    settings: &crate::config::Settings,
) -> Result<(MigPlan, usize, Option<String>)> {
    let journal = &settings.journal;
    let here = crate::collect::host::hostname();
    if !resume {
        if let Some(u) = crate::exec::journal::unfinished_on(journal, "host").first() {
            bail!("{}", u.describe());
        }
        // The node must still be the node the plan was made for; the re-derived plan is what
        // runs.
        let snap = snapshot(src)?;
        return match plan(&snap, &fp.draft, &smi_name(src)) {
            Ok(now) if now == *fp => Ok((now, 0, None)),
            Ok(now) => bail!(
                "the node changed since this plan was made (plan {}, now {}); make it again with `partop mig plan`",
                fp.fingerprint,
                now.fingerprint
            ),
            Err(e) => bail!("the plan no longer applies: {}", e.join("; ")),
        };
    }
    let Some(run) = crate::exec::journal::latest_run(journal, "mig", &fp.fingerprint) else {
        bail!(
            "the journal {} has no run of MIG plan {}: apply it without --resume",
            journal.display(),
            fp.fingerprint
        );
    };
    if run.closed.as_deref() == Some("abandoned") {
        bail!(
            "run {} of this plan was abandoned; make a new plan with `partop mig plan`",
            run.run
        );
    }
    let journaled: MigPlan = serde_json::from_value(run.plan.clone())
        .context("the journaled plan of this run cannot be read")?;
    if journaled != *fp {
        bail!(
            "{} differs from the plan run {} confirmed: nothing is resumed",
            fp.fingerprint,
            run.run
        );
    }
    let from = if run.closed.is_some() {
        journaled.steps.len()
    } else {
        run.resume_point()
    };
    if from < journaled.steps.len() {
        let snap = snapshot(src)?;
        let why = crate::domain::mig::still_valid(&journaled, &snap, &here);
        if !why.is_empty() {
            bail!(
                "run {} cannot be resumed on this node as it is now:\n  {}\nnothing was changed",
                run.run,
                why.join("\n  ")
            );
        }
    }
    Ok((journaled, from, Some(run.run)))
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
            if !fp.content_intact() {
                bail!(
                    "{} was changed after it was planned (fingerprint {}, content {}): nothing is applied; make it again with `partop mig plan`",
                    file.display(),
                    fp.fingerprint,
                    fp.content_fingerprint()
                );
            }
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
                let (p, from, run) = checked(src, &fp, resume, settings)?;
                say(&match run {
                    Some(run) if from >= p.steps.len() => {
                        format!(
                            "dry run: run {run} of this plan is already complete; nothing changed\n"
                        )
                    }
                    Some(run) => format!(
                        "dry run: run {run} would resume at step {} ({}); nothing changed\n",
                        from + 1,
                        p.steps[from].key
                    ),
                    None => "dry run: the node is as planned; nothing changed\n".into(),
                })?;
                return Ok(exit::OK);
            }
            let run_id = if resume {
                crate::exec::journal::latest_run(journal, "mig", &fp.fingerprint)
                    .map(|r| r.run)
                    .unwrap_or_default()
            } else {
                crate::exec::journal::new_run_id()
            };
            let _lock = crate::exec::lock::acquire(
                &crate::exec::lock::host_path(),
                &crate::exec::lock::Holder::me("mig apply", &run_id, journal),
            )?;
            let (p, from, run) = checked(src, &fp, resume, settings)?;
            if let Some(run) = &run
                && from >= p.steps.len()
            {
                say(&format!(
                    "run {run} of this plan is done: nothing to resume\n"
                ))?;
                return Ok(exit::OK);
            }
            let resume_cmd = resume_command(src, &file, settings, kill_after_grace, grace);
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
            if resume {
                log.resumed(from)?;
                say(&format!(
                    "resuming run {} of plan {} at step {} ({})\n",
                    log.run,
                    p.fingerprint,
                    from + 1,
                    p.steps[from].key
                ))?;
            } else {
                log.start_resumable(
                    &serde_json::to_value(&p)?,
                    Some(&file),
                    p.steps.len(),
                    Some(&resume_cmd),
                )?;
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
