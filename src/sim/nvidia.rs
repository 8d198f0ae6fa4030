//! A fake `nvidia-smi` for rehearsing MIG changes with no NVIDIA hardware (and for the MIG
//! executor's tests): a state file of GPUs, MIG mode, GPU/compute instances and the processes
//! on them (real pids, checked against /proc), with the tool's rules: a MIG mode change with
//! clients goes pending (and says so, with exit status 0, as the real one does); instances need
//! MIG on and a free placement (NVIDIA's start slices per profile, `-lgipp`; `-cgi ID:START`
//! asks for one, a bare `-cgi ID` takes the lowest free start, so an order that leaves no room
//! for a later large instance fails with "Insufficient Resources" as on hardware); instances in
//! use cannot be destroyed. `-q -x` prints the same XML shape as the real capture, with each
//! profile's SMs, memory and optical-flow unit.

use crate::domain::mig::{KNOWN_PRODUCTS, MEMORY_SLICES, MigProfile, table_profiles};
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
    /// First memory slice it occupies.
    #[serde(default)]
    pub start: u32,
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

/// The memory `nvidia-smi` reports for a product, MiB (measured on the lent H100 and H200).
fn memory_of(product: &str) -> u64 {
    let n = product.to_ascii_uppercase();
    if n.contains("H200") {
        143_771
    } else if n.contains("H100") {
        81_559
    } else if n.contains("80GB") {
        81_920
    } else {
        40_960
    }
}

impl NvSimState {
    /// `n` GPUs of `product` with MIG off; refused for a product partop has no profile table
    /// for (its placements and SMs would be made up).
    pub fn create(product: &str, n: u32) -> Result<Self, String> {
        if table_profiles(product).is_none() {
            return Err(format!(
                "partop has no MIG profile table for {product:?}; simulated products: {}",
                KNOWN_PRODUCTS.join(", ")
            ));
        }
        Ok(Self::new(product, n))
    }

    /// `n` GPUs of `product` with MIG off.
    pub fn new(product: &str, n: u32) -> Self {
        Self {
            driver: "580.159.04 (partop simulator)".into(),
            gpus: (0..n)
                .map(|i| NvSimGpu {
                    bdf: format!("0000:{:02x}:00.0", 0x18 + i * 0x10),
                    name: product.into(),
                    uuid: format!("GPU-5a1e0000-0000-4000-8000-{i:012x}"),
                    mem_total_mib: memory_of(product),
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
                "\t\t\t<mig_device>\n\t\t\t\t<index>{k}</index>\n\t\t\t\t<gpu_instance_id>{}</gpu_instance_id>\n\t\t\t\t<compute_instance_id>{}</compute_instance_id>\n\t\t\t\t<device_attributes>\n\t\t\t\t\t<shared>\n\t\t\t\t\t\t<multiprocessor_count>{}</multiprocessor_count>\n\t\t\t\t\t\t<ofa_count>{}</ofa_count>\n\t\t\t\t\t</shared>\n\t\t\t\t</device_attributes>\n\t\t\t\t<fb_memory_usage>\n\t\t\t\t\t<total>{mem} MiB</total>\n\t\t\t\t\t<used>{used} MiB</used>\n\t\t\t\t</fb_memory_usage>\n\t\t\t</mig_device>",
                inst.gi,
                inst.ci.map_or_else(|| "N/A".to_string(), |c| c.to_string()),
                p.map_or(0, |p| p.sms),
                p.map_or(0, |p| p.ofa),
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
            "\t\t<utilization>\n\t\t\t<gpu_util>{}</gpu_util>\n\t\t\t<memory_util>{}</memory_util>\n\t\t\t<encoder_util>0 %</encoder_util>\n\t\t\t<decoder_util>0 %</decoder_util>\n\t\t</utilization>\n\t\t<pci>\n\t\t\t<replay_counter>0</replay_counter>\n\t\t\t<replay_rollover_counter>0</replay_rollover_counter>\n\t\t</pci>\n\t\t<clocks>\n\t\t\t<graphics_clock>1980 MHz</graphics_clock>\n\t\t\t<sm_clock>1980 MHz</sm_clock>\n\t\t\t<mem_clock>3201 MHz</mem_clock>\n\t\t\t<video_clock>1545 MHz</video_clock>\n\t\t</clocks>\n\t\t<remapped_rows>\n\t\t\t<remapped_row_corr>0</remapped_row_corr>\n\t\t\t<remapped_row_unc>0</remapped_row_unc>\n\t\t\t<remapped_row_pending>No</remapped_row_pending>\n\t\t\t<remapped_row_failure>No</remapped_row_failure>\n\t\t</remapped_rows>",
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

/// The memory slices the instances of `g` occupy.
fn occupied(g: &NvSimGpu, ps: &[MigProfile]) -> [bool; MEMORY_SLICES as usize] {
    let mut used = [false; MEMORY_SLICES as usize];
    for x in &g.instances {
        let size = ps
            .iter()
            .find(|p| p.id == x.profile)
            .map_or(0, |p| p.memory_slices);
        for s in x.start..(x.start + size).min(MEMORY_SLICES) {
            used[s as usize] = true;
        }
    }
    used
}

/// `-cgi` for one profile tuple (`ID`, `NAME`, either with `:START`): the instance, with a
/// compute instance when `-C`, at the start asked for, else the lowest free one its profile
/// allows. The tool's own lines on success, its error line otherwise.
fn create(
    g: &mut NvSimGpu,
    ps: &[MigProfile],
    k: usize,
    tuple: &str,
    with_ci: bool,
) -> Result<String, String> {
    let (what, at) = match tuple.split_once(':') {
        Some((w, a)) => (w, Some(a)),
        None => (tuple, None),
    };
    let unable = |why: &str| {
        format!("Unable to create a GPU instance on GPU  {k} using profile {what}: {why}\n")
    };
    let Some(p) = ps
        .iter()
        .find(|p| what.parse::<u32>().ok() == Some(p.id) || p.name == what)
    else {
        return Err(unable("Invalid Argument"));
    };
    if !g.mig {
        return Err(unable("Not Supported"));
    }
    let start = match at.map(str::parse::<u32>) {
        Some(Err(_)) => return Err(unable("Invalid Argument")),
        Some(Ok(s)) if !p.starts().contains(&s) => return Err(unable("Invalid Argument")),
        Some(Ok(s)) => Some(s),
        None => None,
    };
    let used = occupied(g, ps);
    let free = |s: u32| (s..s + p.memory_slices).all(|x| x < MEMORY_SLICES && !used[x as usize]);
    let same = g.instances.iter().filter(|x| x.profile == p.id).count() as u32;
    let start = match start {
        _ if same >= p.max_instances => None,
        Some(s) => free(s).then_some(s),
        None => p.starts().into_iter().find(|s| free(*s)),
    };
    let Some(start) = start else {
        return Err(unable("Insufficient Resources"));
    };
    let gi = (1..)
        .find(|n| !g.instances.iter().any(|x| x.gi == *n))
        .unwrap_or(1);
    g.instances.push(NvSimInstance {
        gi,
        profile: p.id,
        ci: with_ci.then_some(0),
        start,
    });
    let mut out = format!(
        "Successfully created GPU instance ID {gi:>2} on GPU {k:>2} using profile MIG {} (ID {:>2})\n",
        p.name, p.id
    );
    if with_ci {
        out.push_str(&format!(
            "Successfully created compute instance ID  0 on GPU {k:>2} GPU instance ID {gi:>2} using profile MIG {} (ID  0)\n",
            p.name
        ));
    }
    Ok(out)
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
    if has("-lgipp") {
        // Placements are the device's, MIG on or off (as NVML's possible placements are).
        let mut o = String::new();
        for p in &ps {
            let starts = p.starts();
            let list = starts.iter().map(u32::to_string).collect::<Vec<_>>();
            let _ = writeln!(
                o,
                "GPU {k:>2} Profile ID {:>2} {}: {{{}}}:{}",
                p.id,
                if starts.len() == 1 {
                    "Placement "
                } else {
                    "Placements"
                },
                list.join(","),
                p.memory_slices
            );
        }
        return (0, o, String::new());
    }
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
                    p.sms
                );
            }
        } else {
            if g.instances.is_empty() {
                return (
                    6,
                    "No GPU instances found: Not Found\n".into(),
                    String::new(),
                );
            }
            o.push_str("+-------------------------------------------------------+\n| GPU instances:                                        |\n| GPU   Name             Profile  Instance   Placement  |\n|                          ID       ID       Start:Size |\n|=======================================================|\n");
            for x in &g.instances {
                let (n, size) = ps
                    .iter()
                    .find(|p| p.id == x.profile)
                    .map_or(("?", 0), |p| (p.name.as_str(), p.memory_slices));
                let _ = writeln!(
                    o,
                    "|   {k}  MIG {n:<13} {:>3}       {:>3}          {}:{}     |",
                    x.profile, x.gi, x.start, size
                );
            }
            o.push_str("+-------------------------------------------------------+\n");
        }
        return (0, o, String::new());
    }
    if let Some(pos) = args.iter().position(|a| a == "-cgi") {
        let tuples: Vec<&str> = args
            .get(pos + 1)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let with_ci = has("-C");
        let mut out = String::new();
        let mut err = String::new();
        for tuple in tuples {
            match create(g, &ps, k, tuple, with_ci) {
                Ok(text) => out.push_str(&text),
                Err(text) => err.push_str(&text),
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
