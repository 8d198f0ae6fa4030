//! The drop-in fake `amd-smi`: answers the commands partop (and an operator) uses, from the
//! simulated node's state, shaped as the real tool prints them for the scenario's ROCm family.
//! `partop sim amd-smi --state FILE ARGS...`, or a two-line `amd-smi` script on PATH.

pub mod args;
pub mod changes;
pub mod reads;
pub mod texts;

use super::state::SimState;
use crate::collect::clock;
use args::Args;
use std::io::{BufRead, Write};
use std::path::Path;

/// (major, minor, patch) of a version string.
pub fn rocm_tuple(v: &str) -> (u32, u32, u32) {
    let mut it = v.split('.').map(|p| p.trim().parse::<u32>().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

/// What the emulated tool does differently by version.
#[derive(Debug, Clone, Copy)]
pub struct Flavor {
    /// 7.x: `{"gpu_data"}`, partition object, `set -M` without reload.
    pub rocm7: bool,
    /// `accelerator_partition` instead of `compute_partition` (6.4.2+).
    pub accel_key: bool,
    /// `cu_occupancy` in process output (6.4.2+).
    pub cu_occupancy: bool,
    /// `reset -r` exists (7.0-7.11).
    pub reset_reload: bool,
}

impl Flavor {
    /// For a ROCm version.
    pub fn of(rocm: &str) -> Self {
        let v = rocm_tuple(rocm);
        Self {
            rocm7: v.0 >= 7,
            accel_key: v >= (6, 4, 2),
            cu_occupancy: v >= (6, 4, 2),
            reset_reload: v.0 == 7 && v.1 <= 11,
        }
    }

    /// The version line.
    pub fn version_line(rocm: &str) -> String {
        let (tool, lib) = if Self::of(rocm).rocm7 {
            ("26.0.2+39589fda", "26.0.2")
        } else {
            ("25.4.2+aca1101", "25.4.0")
        };
        format!(
            "AMDSMI Tool: {tool} | AMDSMI Library version: {lib} | ROCm version: {rocm} | amdgpu version: 6.12.12 | amd_hsmp version: N/A"
        )
    }
}

/// Where a node's fake amd-smi logs its calls: one line each, `MS PPID ARGS`.
pub fn calls_log(state_path: &Path) -> std::path::PathBuf {
    state_path.with_extension("amdsmi-calls")
}

/// Runs one fake amd-smi invocation. Returns the exit status.
pub fn main(
    state_path: &Path,
    argv: &[String],
    stdin: &mut dyn BufRead,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut state = match SimState::load(state_path) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "partop sim amd-smi: {e}");
            return 1;
        }
    };
    // What the real tool costs: the first call after the node starts (cold caches) and every
    // call after it, scaled by the node's logical GPU count.
    let first =
        crate::exec::safe_file::create_new(&state_path.with_extension("amdsmi-warm")).is_ok();
    // Every call is logged beside the state (time, caller, arguments): the rehearsal and the
    // benchmarks count what partop asks of amd-smi.
    if let Ok(mut f) = crate::exec::safe_file::append(&calls_log(state_path), false) {
        // One write per line: calls run side by side, and O_APPEND keeps a single write whole
        // where `writeln!` on a File would write the pieces separately and interleave them.
        let line = format!(
            "{} {} {}\n",
            clock::now_ms(),
            nix::unistd::getppid(),
            argv.join(" ")
        );
        let _ = f.write_all(line.as_bytes());
    }
    let (cpu, wall) = state.amd_smi_cost.of(state.logical().len(), first);
    crate::sim::cost::spend(cpu, wall, std::time::Instant::now());
    if state.settle(clock::now_ms())
        && let Err(e) = state.save_driver(state_path)
    {
        let _ = writeln!(err, "partop sim amd-smi: {e}");
    }
    let flavor = Flavor::of(&state.rocm);
    let args = match Args::parse(argv) {
        Ok(a) => a,
        Err(msg) => {
            let _ = writeln!(err, "{msg}");
            return 2;
        }
    };
    if args.has("help") {
        let _ = write!(out, "{}", args.usage());
        return 0;
    }
    let reading = state.reloading.is_some();
    let cmd = args.command.as_deref().unwrap_or("");
    if reading && cmd != "version" {
        let _ = writeln!(
            out,
            "[AMDSMI_STATUS_DRIVER_NOT_LOADED] amdgpu driver is reloading; no GPUs are available"
        );
        return 1;
    }
    match cmd {
        "version" => reads::version(&state, &args, out),
        "list" | "static" | "metric" | "process" | "monitor" | "partition" | "" => {
            reads::read(&state, flavor, &args, out)
        }
        "set" => changes::published(
            state_path,
            changes::set(&mut state, state_path, flavor, &args, stdin, out, err),
        ),
        "reset" => changes::published(
            state_path,
            changes::reset(&mut state, state_path, flavor, &args, stdin, out, err),
        ),
        other => {
            let _ = writeln!(
                err,
                "amd-smi: error: argument command: invalid choice: '{other}' (choose from 'version', 'list', 'static', 'firmware', 'bad-pages', 'metric', 'process', 'profile', 'event', 'topology', 'set', 'reset', 'monitor', 'xgmi', 'partition')"
            );
            2
        }
    }
}
