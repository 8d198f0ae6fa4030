//! `partop mig plan|apply` and `partop nvidia record`: MIG layouts through the same plan →
//! confirm → execute as AMD repartitions (the plan re-checked against the node, the host name
//! typed, `--dry-run` printing every command, every step journaled).

use crate::cli::out::say;
use crate::cli::{MigCmd, NvidiaCmd, SourceArgs, exit};
use crate::domain::mig::{MigDraft, MigPlan, parse_instances, plan};
use crate::exec::mig::{MigCtx, apply};
use crate::node::{NvidiaAccess, nvidia_smi, open};
use anyhow::{Context, Result, bail};
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

/// `partop mig ...`.
pub fn mig(src: &SourceArgs, action: MigCmd, settings: &crate::config::Settings) -> Result<u8> {
    match action {
        MigCmd::Plan {
            gpu,
            instances,
            json,
        } => {
            let snap = snapshot(src)?;
            let list = if instances.trim() == "none" {
                vec![]
            } else {
                parse_instances(&instances)
            };
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
                Err(e) => {
                    for x in e {
                        say(&format!("cannot plan: {x}\n"))?;
                    }
                    Ok(exit::USAGE)
                }
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
            if dry_run {
                say("dry run: nothing changed\n")?;
                return Ok(exit::OK);
            }
            if settings.read_only {
                say(&crate::cli::out::read_only_refusal("changed"))?;
                return Ok(exit::USAGE);
            }
            let ctx = MigCtx {
                smi: nvidia_smi(src),
                journal: settings.journal.clone(),
                grace: Duration::from_secs_f64(grace),
                kill_after_grace,
                proc_root: "/proc".into(),
                simulated: false,
            };
            let journal = &settings.journal;
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
            let (p, from) = if resume {
                let Some(run) = crate::exec::journal::latest_run(journal, "mig", &fp.fingerprint)
                else {
                    bail!(
                        "the journal has no run of MIG plan {}: apply it without --resume",
                        fp.fingerprint
                    );
                };
                if run.closed.is_some() {
                    say(&format!(
                        "run {} of this plan is {}\n",
                        run.run,
                        run.closed.as_deref().unwrap_or("closed")
                    ))?;
                    return Ok(exit::OK);
                }
                let journaled: MigPlan = serde_json::from_value(run.plan.clone())
                    .context("the journaled plan of this run cannot be read")?;
                if journaled != fp {
                    bail!(
                        "{} differs from the plan run {} confirmed",
                        file.display(),
                        run.run
                    );
                }
                let from = run.resume_point();
                say(&format!(
                    "resuming run {} of plan {} at step {}\n",
                    run.run,
                    journaled.fingerprint,
                    from + 1
                ))?;
                (journaled, from)
            } else {
                if let Some(u) = crate::exec::journal::unfinished_on(journal, "host").first() {
                    bail!("{}", u.describe());
                }
                // The node must still be the node the plan was made for; the re-derived plan
                // is what runs.
                let snap = snapshot(src)?;
                let now = match plan(&snap, &fp.draft, &smi_name(src)) {
                    Ok(now) if now == fp => now,
                    Ok(now) => bail!(
                        "the node changed since this plan was made (plan {}, now {}); make it again with `partop mig plan`",
                        fp.fingerprint,
                        now.fingerprint
                    ),
                    Err(e) => bail!("the plan no longer applies: {}", e.join("; ")),
                };
                if !yes
                    && !crate::cli::out::confirm(
                        &format!("Type this machine's host name ({here}) to apply: "),
                        &here,
                    )?
                {
                    say("not confirmed: nothing changed\n")?;
                    return Ok(exit::FAILED);
                }
                (now, 0)
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
            } else {
                log.start(&serde_json::to_value(&p)?, Some(&file), p.steps.len())?;
            }
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
            let n = s.read().map_err(anyhow::Error::msg)?;
            crate::exec::safe_file::write_atomic(
                &out,
                (serde_json::to_string_pretty(&n)? + "\n").as_bytes(),
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
