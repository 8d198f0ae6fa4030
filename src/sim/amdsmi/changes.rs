//! Change commands of the fake amd-smi: `set -C`, `set -M`, `reset -r`, with the real tool's
//! prompt, banners, per-GPU lines, exception texts and exit codes, and the hardware's rules.

use super::Flavor;
use super::args::Args;
use super::texts;
use crate::collect::clock;
use crate::domain::{ComputeMode, MemoryMode};
use crate::sim::rules::{self, RuleError};
use crate::sim::state::{Reloading, SimState};
use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

/// When this process last changed the node (ms; 0: never).
static SAVED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Returns `code` once the kernel twin has published what this command changed: the kernel
/// files show a change when amd-smi returns, as the real driver's sysfs does (one wait for the
/// whole command, not one per GPU it set).
pub fn published(path: &Path, code: i32) -> i32 {
    let at = SAVED.load(std::sync::atomic::Ordering::Relaxed);
    if at > 0 {
        crate::sim::kernel::await_published(path, at);
    }
    code
}

fn save(state: &SimState, path: &Path, err: &mut dyn Write) -> bool {
    match state.save_driver(path) {
        Ok(()) => {
            SAVED.store(
                crate::collect::clock::now_ms(),
                std::sync::atomic::Ordering::Relaxed,
            );
            true
        }
        Err(e) => {
            let _ = writeln!(err, "partop sim amd-smi: {e}");
            false
        }
    }
}

/// Reads the Y/N answer like Python's `input()`: EOF raises `EOFError`.
fn confirm(stdin: &mut dyn BufRead, out: &mut dyn Write, err: &mut dyn Write) -> Result<(), i32> {
    let _ = write!(out, "{}", texts::PROMPT);
    let _ = out.flush();
    let mut line = String::new();
    // Bounded: stdin may be /dev/zero or an endless pipe.
    match std::io::Read::take(stdin, 4096).read_line(&mut line) {
        Ok(0) | Err(_) => {
            let _ = writeln!(err, "EOFError: EOF when reading a line");
            Err(1)
        }
        Ok(_) if texts::is_yes(&line) => Ok(()),
        Ok(_) => {
            let _ = writeln!(out, "{}", texts::DECLINED);
            Err(1)
        }
    }
}

/// `amd-smi set`.
pub fn set(
    state: &mut SimState,
    path: &Path,
    flavor: Flavor,
    args: &Args,
    stdin: &mut dyn BufRead,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    if let Some(c) = &args.compute {
        return set_compute(state, path, args, c, out, err);
    }
    if let Some(m) = &args.memory {
        return set_memory(state, path, flavor, args, m, stdin, out, err);
    }
    let _ = writeln!(
        err,
        "amd-smi set: error: one of the arguments -C/--compute-partition -M/--memory-partition is required"
    );
    2
}

fn targets(state: &SimState, args: &Args) -> Result<Vec<crate::sim::rules::Logical>, String> {
    let logical = state.logical();
    if args.gpus.is_empty() || args.gpus.iter().any(|g| g == "all") {
        return Ok(logical);
    }
    args.gpus
        .iter()
        .map(|g| {
            g.parse::<u32>()
                .ok()
                .and_then(|i| logical.iter().find(|l| l.index == i).cloned())
                .ok_or_else(|| g.clone())
        })
        .collect()
}

fn set_compute(
    state: &mut SimState,
    path: &Path,
    args: &Args,
    value: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let prod = state.product();
    let by_index = value
        .parse::<u32>()
        .ok()
        .and_then(|i| prod.profiles.iter().find(|p| p.index == i))
        .map(|p| p.compute);
    let Some(mode) = by_index.or_else(|| {
        value
            .parse::<ComputeMode>()
            .ok()
            .filter(|m| prod.profiles.iter().any(|p| p.compute == *m))
    }) else {
        let mut choices: Vec<String> = prod
            .profiles
            .iter()
            .map(|p| p.compute.name().to_string())
            .collect();
        choices.extend(prod.profiles.iter().map(|p| p.index.to_string()));
        let _ = writeln!(
            err,
            "amd-smi set: error: argument -C/--compute-partition: invalid choice: '{value}' (choose from {})",
            choices.join(", ")
        );
        return 2;
    };
    let logical = match targets(state, args) {
        Ok(t) => t,
        Err(g) => {
            let _ = writeln!(out, "Can not find a device: GPU '{g}' Error code: -3");
            return 0;
        }
    };
    let profile = prod
        .profiles
        .iter()
        .find(|p| p.compute == mode)
        .map_or(0, |p| p.index);
    for l in logical {
        let _ = writeln!(out, "GPU: {}", l.index);
        let g = state.gpus[l.phys].clone();
        let bdf = g.bdf(l.shape.partition_id);
        if l.shape.partition_id != 0 {
            let _ = writeln!(
                out,
                "    ACCELERATOR_PARTITION: [AMDSMI_STATUS_NOT_SUPPORTED] Unable to set compute partition to {mode} (profile #{profile})\n"
            );
            continue;
        }
        let held = state.is_held(l.phys);
        let mut modes = g.modes.clone();
        match rules::set_compute(&prod, &mut modes, mode, held) {
            Ok(idx) => {
                state.gpus[l.phys].modes = modes;
                if !save(state, path, err) {
                    return 1;
                }
                let _ = writeln!(
                    out,
                    "    ACCELERATOR_PARTITION: Successfully set accelerator partition to {mode} (profile #{idx})\n"
                );
            }
            Err(RuleError::Busy) => {
                let _ = writeln!(
                    err,
                    "amdsmi.amdsmi_exception.AmdSmiLibraryException: Error code:\n30 | AMDSMI_STATUS_BUSY - Device busy\n\nThe above exception was the direct cause of the following exception:\n\nValueError: Unable to set accelerator partition to {mode} on GPU ID: {} BDF:{bdf}",
                    l.index
                );
                return 1;
            }
            Err(_) => {
                let _ = writeln!(
                    out,
                    "Attempted to set accelerator partition to {mode} (profile #{profile}) on GPU ID: {} BDF:{bdf}\n\n[AMDSMI_STATUS_SETTING_UNAVAILABLE] Please check amd-smi partition --memory --accelerator for available profiles.\nUsers may need to switch memory partition to another mode in order to enable the desired accelerator partition.",
                    l.index
                );
                let _ = writeln!(
                    err,
                    "amdsmi.amdsmi_exception.AmdSmiLibraryException: Error code:\n        55 | AMDSMI_STATUS_SETTING_UNAVAILABLE - Setting is not available\n\nThe above exception was the direct cause of the following exception:\n\nValueError: [AMDSMI_STATUS_SETTING_UNAVAILABLE] Unable to set accelerator partition to {mode} on GPU ID: {} BDF:{bdf}",
                    l.index
                );
                return 1;
            }
        }
    }
    0
}

#[expect(clippy::too_many_arguments, reason = "mirrors the CLI's inputs")]
fn set_memory(
    state: &mut SimState,
    path: &Path,
    flavor: Flavor,
    args: &Args,
    value: &str,
    stdin: &mut dyn BufRead,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let Ok(mode) = value.parse::<MemoryMode>() else {
        let _ = writeln!(
            err,
            "amd-smi set: error: argument -M/--memory-partition: invalid choice: '{value}' (choose from NPS1, NPS2, NPS4, NPS8)"
        );
        return 2;
    };
    let before = match targets(state, args) {
        Ok(t) => t,
        Err(g) => {
            let _ = writeln!(out, "Can not find a device: GPU '{g}' Error code: -3");
            return 0;
        }
    };
    let _ = write!(
        out,
        "{}",
        if flavor.rocm7 {
            texts::SET_MEMORY_WARNING_7
        } else {
            texts::SET_MEMORY_WARNING_6
        }
    );
    if let Err(code) = confirm(stdin, out, err) {
        return code;
    }
    let _ = writeln!(out);
    let prod = state.product();
    let mut modes = state.modes();
    if let Err(RuleError::Inval { valid }) = rules::set_memory(&prod, &mut modes, mode) {
        let valid = valid.iter().map(|m| m.name()).collect::<Vec<_>>().join(",");
        for l in &before {
            let _ = writeln!(
                out,
                "GPU: {}\nValid Memory partition Modes: {valid}\n    MEMORY_PARTITION: [AMDSMI_STATUS_INVAL] Unable to set memory partition to {mode}\n",
                l.index
            );
        }
        return 0;
    }
    state.set_modes(modes);
    if !save(state, path, err) {
        return 1;
    }
    if flavor.rocm7 {
        let reload_hint = if flavor.reset_reload {
            "reload driver when ready".to_string()
        } else {
            "use `sudo modprobe -r amdgpu && sudo modprobe amdgpu` to reload driver".to_string()
        };
        for l in &before {
            if l.shape.partition_id == 0 {
                let _ = writeln!(
                    out,
                    "GPU: {}\n    MEMORY_PARTITION: Successfully set memory partition to {mode}, {reload_hint}\n",
                    l.index
                );
            } else {
                let _ = writeln!(
                    out,
                    "GPU: {}\n    MEMORY_PARTITION: [AMDSMI_STATUS_NOT_SUPPORTED] Unable to set memory partition to {mode}\n",
                    l.index
                );
            }
        }
        return 0;
    }
    // 6.3/6.4: the same command reloads the driver.
    let first = before
        .first()
        .map_or_else(|| "0000:00:00.0".into(), |l| state.gpus[l.phys].bdf(0));
    let held = state.any_held() || injected_failure(state, path, err);
    progress(state, "Updating memory partition for gpu 0: ", out, held);
    if held {
        let _ = writeln!(
            out,
            "\nGPU: 0\n    MEMORY_PARTITION: [AMDSMI_STATUS_AMDGPU_RESTART_ERR] Could not successfully restart\n        driver after applying {mode} on GPU ID: 0 BDF:{first}\n"
        );
        return 0;
    }
    let mut modes = state.modes();
    let _ = rules::reload(&prod, &mut modes, false);
    state.set_modes(modes);
    if !save(state, path, err) {
        return 1;
    }
    let _ = writeln!(out);
    for l in state.logical() {
        let _ = writeln!(
            out,
            "GPU: {}\n    MEMORY_PARTITION: Successfully set memory partition to {mode}\n",
            l.index
        );
    }
    0
}

/// Waits out the reload time drawing amd-smi's bar; a failing reload gives up early.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "seconds"
)]
fn progress(state: &SimState, label: &str, out: &mut dyn Write, fails: bool) {
    let total = state.reload_secs.max(0.0);
    let budget = 140.0;
    let steps = if fails { 1 } else { total.ceil() as u32 };
    let _ = writeln!(out, "{label}");
    for s in 0..=steps {
        let done = f64::from(s).min(total);
        let _ = write!(
            out,
            "{} {}/{} secs remain\r",
            texts::bar(done, budget),
            done as u32,
            budget as u32
        );
        let _ = out.flush();
        if s < steps {
            std::thread::sleep(Duration::from_secs_f64(
                (total / f64::from(steps.max(1))).min(1.0),
            ));
        }
    }
    let _ = writeln!(out);
}

/// `amd-smi reset -r`.
pub fn reset(
    state: &mut SimState,
    path: &Path,
    flavor: Flavor,
    args: &Args,
    stdin: &mut dyn BufRead,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    if !args.has("reload-driver") {
        let _ = writeln!(
            err,
            "amd-smi reset: error: one of the reset arguments is required (only -r/--reload-driver is simulated)"
        );
        return 2;
    }
    if !flavor.reset_reload {
        let _ = writeln!(err, "amd-smi reset: error: unrecognized arguments: -r");
        return 2;
    }
    let _ = write!(out, "{}", texts::RELOAD_WARNING);
    if let Err(code) = confirm(stdin, out, err) {
        return code;
    }
    let _ = writeln!(out);
    let before = state.logical();
    if state.any_held() || injected_failure(state, path, err) {
        progress(state, "Reloading driver for all AMD GPUs: ", out, true);
        let _ = writeln!(out);
        for l in &before {
            let _ = writeln!(
                out,
                "GPU: {}\n    RELOAD_DRIVER: [AMDSMI_STATUS_AMDGPU_RESTART_ERR] Unable to successfully restart driver\n",
                l.index
            );
        }
        return 0;
    }
    if !begin_reload(state, path, err) {
        return 1;
    }
    progress(state, "Reloading driver for all AMD GPUs: ", out, false);
    finish_reload(state, path, err);
    let _ = writeln!(out);
    for l in state.logical() {
        let _ = writeln!(
            out,
            "GPU: {}\n    RELOAD_DRIVER: Successfully reloaded driver\n",
            l.index
        );
    }
    0
}

/// Consumes one injected reload failure, if the scenario asked for any.
fn injected_failure(state: &mut SimState, path: &Path, err: &mut dyn Write) -> bool {
    if state.fail_reloads == 0 {
        return false;
    }
    state.fail_reloads -= 1;
    save(state, path, err);
    true
}

/// Marks the driver as reloading (reads fail meanwhile).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "ms"
)]
pub fn begin_reload(state: &mut SimState, path: &Path, err: &mut dyn Write) -> bool {
    state.reloading = Some(Reloading {
        until_ms: clock::now_ms() + (state.reload_secs * 1000.0) as u64,
    });
    save(state, path, err)
}

/// Completes a reload (applies pending memory modes, compute back to default).
pub fn finish_reload(state: &mut SimState, path: &Path, err: &mut dyn Write) -> bool {
    state.reloading = Some(Reloading { until_ms: 0 });
    state.settle(clock::now_ms());
    save(state, path, err)
}

/// `partop sim reload`: what `modprobe -r amdgpu && modprobe amdgpu` does on the simulated node.
pub fn modprobe_reload(state_path: &Path, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mut state = match SimState::load(state_path) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "partop sim reload: {e}");
            return 1;
        }
    };
    if state.any_held() {
        let _ = writeln!(err, "modprobe: FATAL: Module amdgpu is in use.");
        let _ = writeln!(err, "holders: {}", state.holder_names().join(", "));
        return 1;
    }
    if !begin_reload(&mut state, state_path, err) {
        return 1;
    }
    progress(
        &state,
        "Reloading amdgpu (simulated modprobe -r amdgpu && modprobe amdgpu): ",
        out,
        false,
    );
    let code = if finish_reload(&mut state, state_path, err) {
        0
    } else {
        1
    };
    published(state_path, code)
}
