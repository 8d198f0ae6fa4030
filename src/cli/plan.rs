//! `partop plan`: what a repartition would do on this node, as text or JSON.

use crate::cli::out::out;
use crate::cli::{SourceArgs, exit};
use crate::config::Settings;
use crate::node::open;
use anyhow::Result;
use std::io::Write;

/// `--source sysfs` reads the kernel only: no amd-smi is run, so no partition can be changed
/// and the combinations the firmware offers are not known. Planning or applying under it is
/// refused, the same words from both commands, before anything is read or confirmed.
pub fn refuse_kernel_only(src: &SourceArgs) -> Result<()> {
    if src.source == crate::collect::sysfs::SourceMode::Sysfs {
        return Err(exit::Usage(
            "--source sysfs reads the kernel only and allows no partition change (amd-smi, which makes the change, is not run): plan and apply with --source auto (the default) or --source amd-smi; nothing was planned or changed".into(),
        )
        .into());
    }
    Ok(())
}

pub fn plan(
    src: &SourceArgs,
    gpus: Vec<String>,
    compute: Option<crate::domain::ComputeMode>,
    memory: Option<crate::domain::MemoryMode>,
    json: bool,
    dcm: Option<String>,
    settings: &Settings,
) -> Result<u8> {
    use crate::domain::plan::{Draft, Reload, plan};
    if let Some(name) = &dcm {
        crate::domain::plan_k8s::check_profile_name(name).map_err(anyhow::Error::msg)?;
    }
    if compute.is_none() && memory.is_none() {
        anyhow::bail!(
            "say what to change: --compute SPX|DPX|QPX|CPX and/or --memory NPS1|NPS2|NPS4"
        );
    }
    refuse_kernel_only(src)?;
    let node = open(src)?;
    let rt = crate::cli::out::runtime()?;
    let mut collector = node.collector();
    let snap = rt.block_on(collector.sample());
    rt.shutdown_background();
    let reload = match collector
        .version()
        .map(crate::collect::amdsmi::AmdSmiVersion::reload_method)
    {
        Some(crate::collect::amdsmi::version::ReloadMethod::InsideSetMemory) => {
            Reload::InsideSetMemory
        }
        Some(crate::collect::amdsmi::version::ReloadMethod::Modprobe) => Reload::Modprobe,
        _ => Reload::ResetReload,
    };
    // A real reload of 8 MI300X is not documented anywhere; 120 s is the planning figure
    // (amd-smi's own progress bar allows 140 s). The simulator knows its own.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "seconds"
    )]
    let reload_secs = node
        .sim_state()
        .and_then(|s| crate::sim::state::SimState::load(s).ok())
        .map_or(120, |s| s.reload_secs.ceil() as u32);
    let draft = Draft {
        gpus: gpus.into_iter().filter(|g| g != "all").collect(),
        compute,
        memory,
    };
    // An apply that did not finish comes first: planning over a half-changed node misleads.
    for u in crate::exec::journal::unfinished_on(
        &settings.journal,
        &crate::exec::journal::node_id(node.sim_state()),
    ) {
        let mut e = std::io::stderr();
        let _ = writeln!(e, "partop: warning: {}", u.describe());
    }
    // A stop list made without seeing every process says so (another user's render-node
    // holders are invisible without root).
    if let Some(h) = &snap.hidden {
        let mut e = std::io::stderr();
        let _ = writeln!(
            e,
            "partop: warning: {}: the processes to stop may be incomplete; plan as root",
            h.describe()
        );
    }
    match plan(&snap, &draft, reload, reload_secs, 10) {
        Ok(p) => {
            if let Some(name) = &dcm {
                let changed: Vec<crate::domain::plan_k8s::Changed> = p
                    .changes
                    .iter()
                    .map(|c| (c.bdf.clone(), c.to.0, c.to.1))
                    .collect();
                let after = crate::domain::plan_k8s::modes_after(&snap, &changed);
                let profile = crate::domain::plan_k8s::dcm_profile(name, &after);
                out(&(serde_json::to_string_pretty(&profile)? + "\n"))?;
            } else if json {
                // The JSON plan does not carry the DCM warning (advice of the moment): said on
                // stderr beside it.
                if let Some(w) = p.kubernetes.as_ref().and_then(|k| k.dcm.as_ref()) {
                    let _ = writeln!(
                        std::io::stderr(),
                        "partop: WARNING: {}",
                        crate::domain::text::escape_controls(w)
                    );
                }
                out(&(serde_json::to_string_pretty(&p)? + "\n"))?;
            } else {
                out(&crate::report::plan_text(&p))?;
            }
            Ok(exit::OK)
        }
        Err(errors) => {
            let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
            anyhow::bail!("cannot plan this change:\n  {}", text.join("\n  "))
        }
    }
}
