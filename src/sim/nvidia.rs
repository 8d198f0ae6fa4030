//! A fake `nvidia-smi` for rehearsing MIG changes with no NVIDIA hardware (and for the MIG
//! executor's tests): a state file of GPUs, MIG mode, GPU/compute instances and the processes
//! on them (real pids, checked against /proc), with the tool's rules: a MIG mode change with
//! clients goes pending (and says so, with exit status 0, as the real one does); instances need
//! MIG on and free slices; instances in use cannot be destroyed. `-q -x` prints the same XML
//! shape as the real capture.

use crate::domain::mig::{MigProfile, table_profiles};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// A process on the fake GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvSimProc {
    /// PID (a real process).
    pub pid: u32,
    /// Its start time (identity).
    pub start_ticks: Option<u64>,
    /// GPU instance (MIG).
    pub gi: Option<u32>,
    /// Memory, MiB.
    pub used_mib: u64,
}

/// A GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvSimInstance {
    /// GPU instance id.
    pub gi: u32,
    /// Profile id.
    pub profile: u32,
    /// Compute instance id, when one exists.
    pub ci: Option<u32>,
}

/// One fake GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvSimGpu {
    /// `0000:00:06.0`.
    pub bdf: String,
    /// Product.
    pub name: String,
    /// UUID.
    pub uuid: String,
    /// Memory, MiB.
    pub mem_total_mib: u64,
    /// MIG mode now.
    pub mig: bool,
    /// MIG mode after a reset.
    pub mig_pending: bool,
    /// Instances.
    pub instances: Vec<NvSimInstance>,
    /// Processes.
    pub procs: Vec<NvSimProc>,
}

/// The fake node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvSimState {
    /// Driver version printed.
    pub driver: String,
    /// GPUs.
    pub gpus: Vec<NvSimGpu>,
}

impl NvSimState {
    /// `n` GPUs of `product` with MIG off.
    pub fn new(product: &str, n: u32) -> Self {
        Self {
            driver: "580.159.04 (partop simulator)".into(),
            gpus: (0..n)
                .map(|i| NvSimGpu {
                    bdf: format!("0000:{:02x}:00.0", 0x18 + i * 0x10),
                    name: product.into(),
                    uuid: format!("GPU-5a1e0000-0000-4000-8000-{i:012x}"),
                    mem_total_mib: if product.contains("H100") {
                        81_559
                    } else {
                        143_771
                    },
                    mig: false,
                    mig_pending: false,
                    instances: vec![],
                    procs: vec![],
                })
                .collect(),
        }
    }

    /// Loads the state file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let t = crate::collect::small_file::operator_text(path).map_err(|e| {
            format!(
                "{}: {e}; create one with `partop sim nvidia-init --state {}`",
                path.display(),
                path.display()
            )
        })?;
        serde_json::from_str(&t).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Saves it (atomically).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        crate::exec::safe_file::replace(
            path,
            serde_json::to_string_pretty(self)
                .unwrap_or_default()
                .as_bytes(),
        )
        .map_err(|e| e.to_string())
    }

    fn live(&mut self) {
        for g in &mut self.gpus {
            g.procs.retain(|p| {
                super::state::process_start(p.pid)
                    .is_some_and(|t| p.start_ticks.is_none_or(|s| s == t))
            });
        }
    }
}

fn profiles(g: &NvSimGpu) -> Vec<MigProfile> {
    table_profiles(&g.name).unwrap_or_default()
}

fn xml(s: &NvSimState, only: Option<usize>) -> String {
    let mut o = String::from(
        "<?xml version=\"1.0\" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v13.dtd\">\n<nvidia_smi_log>\n",
    );
    let _ = writeln!(o, "\t<driver_version>{}</driver_version>", s.driver);
    let _ = writeln!(o, "\t<attached_gpus>{}</attached_gpus>", s.gpus.len());
    for (i, g) in s.gpus.iter().enumerate() {
        if only.is_some_and(|k| k != i) {
            continue;
        }
        let on = |b: bool| if b { "Enabled" } else { "Disabled" };
        let used: u64 = g.procs.iter().map(|p| p.used_mib).sum();
        let _ = writeln!(
            o,
            "\t<gpu id=\"0000{}\">\n\t\t<product_name>{}</product_name>",
            g.bdf.to_uppercase(),
            g.name
        );
        let _ = writeln!(
            o,
            "\t\t<mig_mode>\n\t\t\t<current_mig>{}</current_mig>\n\t\t\t<pending_mig>{}</pending_mig>\n\t\t</mig_mode>",
            on(g.mig),
            on(g.mig_pending)
        );
        o.push_str("\t\t<mig_devices>\n");
        if g.instances.is_empty() {
            o.push_str("\t\t\tNone\n");
        }
        let ps = profiles(g);
        for (k, inst) in g.instances.iter().enumerate() {
            let p = ps.iter().find(|p| p.id == inst.profile);
            let mem = p.map_or(0, |p| p.memory_mib);
            let used: u64 = g
                .procs
                .iter()
                .filter(|x| x.gi == Some(inst.gi))
                .map(|x| x.used_mib)
                .sum();
            let _ = writeln!(
                o,
                "\t\t\t<mig_device>\n\t\t\t\t<index>{k}</index>\n\t\t\t\t<gpu_instance_id>{}</gpu_instance_id>\n\t\t\t\t<compute_instance_id>{}</compute_instance_id>\n\t\t\t\t<device_attributes>\n\t\t\t\t\t<shared>\n\t\t\t\t\t\t<multiprocessor_count>{}</multiprocessor_count>\n\t\t\t\t\t</shared>\n\t\t\t\t</device_attributes>\n\t\t\t\t<fb_memory_usage>\n\t\t\t\t\t<total>{mem} MiB</total>\n\t\t\t\t\t<used>{used} MiB</used>\n\t\t\t\t</fb_memory_usage>\n\t\t\t</mig_device>",
                inst.gi,
                inst.ci.map_or_else(|| "N/A".to_string(), |c| c.to_string()),
                p.map_or(0, |p| p.compute_slices * 16),
            );
        }
        o.push_str("\t\t</mig_devices>\n");
        let _ = writeln!(
            o,
            "\t\t<uuid>{}</uuid>\n\t\t<minor_number>{i}</minor_number>",
            g.uuid
        );
        let _ = writeln!(
            o,
            "\t\t<fb_memory_usage>\n\t\t\t<total>{} MiB</total>\n\t\t\t<used>{used} MiB</used>\n\t\t</fb_memory_usage>",
            g.mem_total_mib
        );
        let busy = if g.procs.is_empty() { 0 } else { 37 };
        let _ = writeln!(
            o,
            "\t\t<utilization>\n\t\t\t<gpu_util>{}</gpu_util>\n\t\t\t<memory_util>{}</memory_util>\n\t\t</utilization>",
            if g.mig {
                "N/A".to_string()
            } else {
                format!("{busy} %")
            },
            if g.mig {
                "N/A".to_string()
            } else {
                "3 %".to_string()
            }
        );
        let _ = writeln!(
            o,
            "\t\t<temperature>\n\t\t\t<gpu_temp>41 C</gpu_temp>\n\t\t\t<memory_temp>38 C</memory_temp>\n\t\t</temperature>\n\t\t<gpu_power_readings>\n\t\t\t<instant_power_draw>{} W</instant_power_draw>\n\t\t\t<current_power_limit>700.00 W</current_power_limit>\n\t\t</gpu_power_readings>",
            if g.procs.is_empty() {
                "118.20"
            } else {
                "264.70"
            }
        );
        o.push_str("\t\t<processes>\n");
        for p in &g.procs {
            let name = std::fs::read_to_string(format!("/proc/{}/comm", p.pid))
                .unwrap_or_else(|_| "?".into());
            let gi = p.gi.map_or_else(|| "N/A".to_string(), |x| x.to_string());
            let _ = writeln!(
                o,
                "\t\t\t<process_info>\n\t\t\t\t<gpu_instance_id>{gi}</gpu_instance_id>\n\t\t\t\t<compute_instance_id>{}</compute_instance_id>\n\t\t\t\t<pid>{}</pid>\n\t\t\t\t<type>C</type>\n\t\t\t\t<process_name>{}</process_name>\n\t\t\t\t<used_memory>{} MiB</used_memory>\n\t\t\t</process_info>",
                if p.gi.is_some() { "0" } else { "N/A" },
                p.pid,
                name.trim(),
                p.used_mib
            );
        }
        o.push_str("\t\t</processes>\n\t</gpu>\n");
    }
    o.push_str("</nvidia_smi_log>\n");
    o
}

fn gpu_index(args: &[String]) -> Option<usize> {
    args.iter()
        .position(|a| a == "-i" || a == "--id")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

/// Runs one fake `nvidia-smi` call. Returns (exit status, stdout, stderr).
#[expect(
    clippy::too_many_lines,
    reason = "one command after another, as the tool has them"
)]
pub fn main(path: &Path, args: &[String]) -> (i32, String, String) {
    let mut s = match NvSimState::load(path) {
        Ok(s) => s,
        Err(e) => return (9, String::new(), format!("{e}\n")),
    };
    s.live();
    let has = |f: &str| args.iter().any(|a| a == f);
    let i = gpu_index(args);
    if has("-q") && has("-x") {
        return (0, xml(&s, i), String::new());
    }
    let mig_cmd = args.first().is_some_and(|a| a == "mig");
    if !mig_cmd && let Some(pos) = args.iter().position(|a| a == "-mig") {
        let on = args.get(pos + 1).is_some_and(|v| v == "1");
        let mut out = String::new();
        for (k, g) in s.gpus.iter_mut().enumerate() {
            if i.is_some_and(|x| x != k) {
                continue;
            }
            let id = format!("0000{}", g.bdf.to_uppercase());
            if !on && !g.instances.is_empty() {
                return (
                    1,
                    String::new(),
                    format!("Unable to disable MIG Mode for GPU {id}: In use by another client\n"),
                );
            }
            g.mig_pending = on;
            if g.procs.is_empty() {
                g.mig = on;
                let _ = writeln!(
                    out,
                    "{} MIG Mode for GPU {id}",
                    if on { "Enabled" } else { "Disabled" }
                );
            } else {
                let _ = writeln!(
                    out,
                    "Warning: MIG mode is in pending {} state for GPU {id}:In use by another client\n{id} is currently being used by one or more other processes (e.g. CUDA application or a monitoring application such as another instance of nvidia-smi). Please first kill all processes using the device and retry the command or reboot the system to make MIG mode effective.",
                    if on { "enable" } else { "disable" }
                );
            }
        }
        out.push_str("All done.\n");
        if let Err(e) = s.save(path) {
            return (9, String::new(), e);
        }
        return (0, out, String::new());
    }
    if !mig_cmd {
        return (
            2,
            String::new(),
            format!("partop's fake nvidia-smi does not know {args:?}\n"),
        );
    }
    let k = i.unwrap_or(0);
    let Some(g) = s.gpus.get_mut(k) else {
        return (6, String::new(), format!("No GPU with index {k}\n"));
    };
    let ps = profiles(g);
    if has("-lgip") || has("-lgi") {
        if !g.mig {
            return (6, "No MIG-enabled devices found.\n".into(), String::new());
        }
        let mut o = String::new();
        if has("-lgip") {
            o.push_str("+-----------------------------------------------------------------------------+\n| GPU instance profiles:                                                      |\n| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |\n|                              Free/Total   GiB              CE    JPEG  OFA  |\n|=============================================================================|\n");
            for p in &ps {
                let used = g.instances.iter().filter(|x| x.profile == p.id).count();
                let _ = writeln!(
                    o,
                    "|   {k}  MIG {:<13} {:>3}     {}/{}        {:.2}       No     {}     ?     ?  |",
                    p.name,
                    p.id,
                    p.max_instances as usize - used.min(p.max_instances as usize),
                    p.max_instances,
                    p.memory_mib as f64 / 1024.0,
                    p.compute_slices * 16
                );
            }
        } else {
            o.push_str("+-------------------------------------------------------+\n| GPU instances:                                        |\n| GPU   Name             Profile  Instance   Placement  |\n|                          ID       ID       Start:Size |\n|=======================================================|\n");
            for x in &g.instances {
                let n = ps
                    .iter()
                    .find(|p| p.id == x.profile)
                    .map_or("?", |p| p.name.as_str());
                let _ = writeln!(
                    o,
                    "|   {k}  MIG {n:<13} {:>3}       {:>3}          ?:?     |",
                    x.profile, x.gi
                );
            }
        }
        return (0, o, String::new());
    }
    if let Some(pos) = args.iter().position(|a| a == "-cgi") {
        let list: Vec<u32> = args
            .get(pos + 1)
            .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
            .unwrap_or_default();
        let with_ci = has("-C");
        let mut out = String::new();
        let mut err = String::new();
        for id in list {
            let Some(p) = ps.iter().find(|p| p.id == id) else {
                let _ = writeln!(
                    err,
                    "Unable to create a GPU instance on GPU  {k} using profile {id}: Invalid Argument"
                );
                continue;
            };
            if !g.mig {
                let _ = writeln!(
                    err,
                    "Unable to create a GPU instance on GPU  {k} using profile {id}: Not Supported"
                );
                continue;
            }
            let (c, m): (u32, u32) = g
                .instances
                .iter()
                .filter_map(|x| ps.iter().find(|p| p.id == x.profile))
                .fold((0, 0), |(c, m), p| {
                    (c + p.compute_slices, m + p.memory_slices)
                });
            let same = g.instances.iter().filter(|x| x.profile == id).count() as u32;
            if c + p.compute_slices > 7 || m + p.memory_slices > 8 || same >= p.max_instances {
                let _ = writeln!(
                    err,
                    "Unable to create a GPU instance on GPU  {k} using profile {id}: Insufficient Resources"
                );
                continue;
            }
            let gi = (1..)
                .find(|n| !g.instances.iter().any(|x| x.gi == *n))
                .unwrap_or(1);
            g.instances.push(NvSimInstance {
                gi,
                profile: id,
                ci: with_ci.then_some(0),
            });
            let _ = writeln!(
                out,
                "Successfully created GPU instance ID {gi:>2} on GPU {k:>2} using profile MIG {} (ID {id:>2})",
                p.name
            );
            if with_ci {
                let _ = writeln!(
                    out,
                    "Successfully created compute instance ID  0 on GPU {k:>2} GPU instance ID {gi:>2} using profile MIG {} (ID  0)",
                    p.name
                );
            }
        }
        if let Err(e) = s.save(path) {
            return (9, out, e);
        }
        if !err.is_empty() {
            err.push_str("Failed to create GPU instances: Insufficient Resources\n");
            return (3, out, err);
        }
        return (0, out, String::new());
    }
    if has("-dci") || has("-dgi") {
        let ci = has("-dci");
        let mut out = String::new();
        let mut err = String::new();
        let busy: Vec<Option<u32>> = g.procs.iter().map(|p| p.gi).collect();
        for x in &mut g.instances {
            if busy.contains(&Some(x.gi)) {
                let _ = writeln!(
                    err,
                    "Unable to destroy {} instance ID {:>2} from GPU {k:>2}: In use by another client",
                    if ci { "compute" } else { "GPU" },
                    x.gi
                );
                continue;
            }
            if ci {
                if x.ci.take().is_some() {
                    let _ = writeln!(
                        out,
                        "Successfully destroyed compute instance ID  0 from GPU {k:>2} GPU instance ID {:>2}",
                        x.gi
                    );
                }
            } else if x.ci.is_some() {
                let _ = writeln!(
                    err,
                    "Unable to destroy GPU instance ID {:>2} from GPU {k:>2}: In use by another client",
                    x.gi
                );
            }
        }
        if !ci {
            let before = g.instances.len();
            g.instances
                .retain(|x| x.ci.is_some() || busy.contains(&Some(x.gi)));
            for _ in g.instances.len()..before {
                let _ = writeln!(out, "Successfully destroyed GPU instance");
            }
        }
        if let Err(e) = s.save(path) {
            return (9, out, e);
        }
        return if err.is_empty() {
            (0, out, String::new())
        } else {
            (19, out, err)
        };
    }
    (
        2,
        String::new(),
        format!("partop's fake nvidia-smi does not know {args:?}\n"),
    )
}
