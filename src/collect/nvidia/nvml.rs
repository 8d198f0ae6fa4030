//! NVML through `nvml-wrapper`, which loads `libnvidia-ml.so` at run time: where there is no
//! NVIDIA driver, `Nvml::init` fails and partop carries on without it. Each read walks the
//! devices: memory, utilisation, power, temperature, clocks, MIG mode, MIG devices, and compute
//! processes. What does not change from tick to tick (driver version, each device's name, UUID,
//! PCI address, power limit, and its GPU-instance profiles: 15 NVML calls a device) is read
//! once a minute, when the device count changes, and a device's profiles again when its MIG
//! mode does; process names once per process. Every NVML call is a driver ioctl: on an H100
//! these static reads were most of what a tick asked of the driver.

use super::node::{NvCounters, NvGpu, NvInstance, NvNode, NvProc, NvSource};
use crate::domain::mig::MigProfile;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;

/// An initialised NVML.
pub struct NvmlSource {
    nvml: Nvml,
    statics: Option<(std::time::Instant, Statics)>,
    names: std::collections::HashMap<u32, Option<String>>,
}

/// How long static facts are kept before they are read again.
const STATIC_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The facts of the node that do not change from tick to tick.
struct Statics {
    driver: Option<String>,
    devices: Vec<DeviceStatic>,
}

struct DeviceStatic {
    bdf: String,
    name: String,
    uuid: Option<String>,
    power_limit_w: Option<f64>,
    /// MIG mode (current, pending) the profiles were read under.
    mig: Option<(u32, u32)>,
    profiles: Vec<MigProfile>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NvmlSource")
    }
}

impl NvmlSource {
    /// Loads and initialises NVML, or says why it cannot.
    pub fn open() -> Result<Self, String> {
        Nvml::init()
            .map(|nvml| Self {
                nvml,
                statics: None,
                names: std::collections::HashMap::new(),
            })
            .map_err(|e| format!("NVML: {e}"))
    }
}

fn mib(b: u64) -> u64 {
    b >> 20
}

fn procs(
    list: Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>,
    nvml: &Nvml,
    names: &mut std::collections::HashMap<u32, Option<String>>,
) -> Vec<NvProc> {
    list.into_iter()
        .map(|p| NvProc {
            pid: p.pid,
            name: names
                .entry(p.pid)
                .or_insert_with(|| nvml.sys_process_name(p.pid, 64).ok())
                .clone(),
            used_mib: match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(mib(b)),
                UsedGpuMemory::Unavailable => None,
            },
            gi: p.gpu_instance_id,
        })
        .collect()
}

/// A device's GPU-instance profiles (MIG-capable devices; unsupported indices fail).
fn profiles_of(d: &nvml_wrapper::Device<'_>, mem_total: Option<u64>) -> Vec<MigProfile> {
    // Profile indices 0..14 (NVML_GPU_INSTANCE_PROFILE_*).
    (0..15)
        .filter_map(|k| d.profile_info(k).ok())
        .filter(|p| p.instance_count > 0)
        .map(|p| MigProfile {
            id: p.id,
            name: format!(
                "{}g.{}gb{}",
                p.slice_count,
                p.memory_size_mb.div_ceil(1024),
                if p.ofa_count > 0 && p.slice_count == 1 {
                    "+me"
                } else {
                    ""
                }
            ),
            compute_slices: p.slice_count,
            // Eighths of the GPU's memory (what -lgip calls memory slices).
            memory_slices: mem_total.map_or(0, |t| {
                let eighth = (mib(t) / 8).max(1);
                u32::try_from((p.memory_size_mb + eighth / 2) / eighth).unwrap_or(0)
            }),
            max_instances: p.instance_count,
            memory_mib: p.memory_size_mb,
            sms: p.multiprocessor_count,
            ofa: p.ofa_count,
            // NVML's possible placements need root; the table's (or the standard ones) serve.
            placements: vec![],
        })
        .collect()
}

impl NvmlSource {
    /// Reads the static facts of every device.
    fn read_statics(&self, count: u32) -> Result<Statics, String> {
        let n = &self.nvml;
        let mut devices = Vec::new();
        for i in 0..count {
            let d = n
                .device_by_index(i)
                .map_err(|e| format!("NVML device {i}: {e}"))?;
            let mig = d.mig_mode().ok().map(|m| (m.current, m.pending));
            devices.push(DeviceStatic {
                bdf: d
                    .pci_info()
                    .map(|p| {
                        let b = p.bus_id.to_lowercase();
                        match b.split_once(':') {
                            Some((dom, rest)) if dom.len() == 8 => format!("{}:{rest}", &dom[4..]),
                            _ => b,
                        }
                    })
                    .unwrap_or_default(),
                name: d.name().unwrap_or_else(|_| "NVIDIA GPU".into()),
                uuid: d.uuid().ok(),
                power_limit_w: d
                    .enforced_power_limit()
                    .ok()
                    .map(|mw| f64::from(mw) / 1000.0),
                profiles: if mig.is_some() {
                    profiles_of(&d, d.memory_info().ok().map(|m| m.total))
                } else {
                    vec![]
                },
                mig,
            });
        }
        Ok(Statics {
            driver: n.sys_driver_version().ok(),
            devices,
        })
    }
}

impl NvSource for NvmlSource {
    fn read(&mut self) -> Result<NvNode, String> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| format!("NVML device count: {e}"))?;
        if self
            .statics
            .as_ref()
            .is_none_or(|(t, s)| t.elapsed() >= STATIC_EVERY || s.devices.len() != count as usize)
        {
            self.statics = Some((std::time::Instant::now(), self.read_statics(count)?));
        }
        let n = &self.nvml;
        let Some((_, statics)) = self.statics.as_mut() else {
            return Err("NVML: no device facts".into());
        };
        let mut seen = Vec::new();
        let mut gpus = Vec::new();
        for i in 0..count {
            let d = n
                .device_by_index(i)
                .map_err(|e| format!("NVML device {i}: {e}"))?;
            let mem = d.memory_info().ok();
            let util = d.utilization_rates().ok();
            let mig = d.mig_mode().ok();
            let enabled = mig.as_ref().map(|m| m.current == 1);
            let st = &mut statics.devices[i as usize];
            let now_mig = mig.as_ref().map(|m| (m.current, m.pending));
            if now_mig != st.mig {
                // A MIG mode change: the profiles the device offers are read again.
                st.profiles = if now_mig.is_some() {
                    profiles_of(&d, mem.as_ref().map(|m| m.total))
                } else {
                    vec![]
                };
                st.mig = now_mig;
            }
            let mut instances = Vec::new();
            let mut processes = procs(
                d.running_compute_processes().unwrap_or_default(),
                n,
                &mut self.names,
            );
            if enabled == Some(true) {
                for k in 0..d.mig_device_count().unwrap_or(0) {
                    let Ok(m) = d.mig_device_by_index(k) else {
                        continue;
                    };
                    let attrs = m.attributes().ok();
                    let mp = procs(
                        m.running_compute_processes().unwrap_or_default(),
                        n,
                        &mut self.names,
                    );
                    let gi = mp.iter().find_map(|p| p.gi).unwrap_or(k);
                    let mm = m.memory_info().ok();
                    instances.push(NvInstance {
                        gi,
                        ci: None,
                        uuid: m.uuid().ok(),
                        // Named later by the device's own profiles: slices, SMs, memory and
                        // the optical-flow unit together (never a name made up from memory).
                        profile: None,
                        profile_id: None,
                        slices: attrs.as_ref().map(|a| a.gpu_instance_slice_count),
                        ofa: attrs.as_ref().map(|a| a.shared_ofa_count),
                        mem_total_mib: mm.as_ref().map(|x| mib(x.total)),
                        mem_used_mib: mm.as_ref().map(|x| mib(x.used)),
                        sms: attrs.map(|a| a.multiprocessor_count),
                    });
                    processes.extend(mp.into_iter().map(|p| NvProc { gi: Some(gi), ..p }));
                }
            }
            seen.extend(processes.iter().map(|p| p.pid));
            gpus.push(NvGpu {
                index: i,
                bdf: st.bdf.clone(),
                name: st.name.clone(),
                uuid: st.uuid.clone(),
                mem_total_mib: mem.as_ref().map(|m| mib(m.total)),
                mem_used_mib: mem.as_ref().map(|m| mib(m.used)),
                util_gpu: util.as_ref().map(|u| f64::from(u.gpu)),
                util_mem: util.as_ref().map(|u| f64::from(u.memory)),
                power_w: d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                power_limit_w: st.power_limit_w,
                temp_c: d.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
                mem_temp_c: None,
                sm_clock_mhz: d.clock_info(Clock::SM).ok(),
                mem_clock_mhz: d.clock_info(Clock::Memory).ok(),
                mig_enabled: enabled,
                mig_pending: mig.map(|m| m.pending == 1),
                instances,
                processes,
                profiles: st.profiles.clone(),
                counters: NvCounters {
                    energy_mj: d.total_energy_consumption().ok(),
                    pcie_replays: d.pcie_replay_counter().ok().map(u64::from),
                    enc_util: d
                        .encoder_utilization()
                        .ok()
                        .map(|u| f64::from(u.utilization)),
                    dec_util: d
                        .decoder_utilization()
                        .ok()
                        .map(|u| f64::from(u.utilization)),
                    // nvml-wrapper 0.13 has no remapped-rows call: nvidia-smi's XML gives them.
                    ..NvCounters::default()
                },
            });
        }
        self.names.retain(|pid, _| seen.contains(pid));
        Ok(NvNode {
            source: format!("NVML (driver {})", statics.driver.as_deref().unwrap_or("?")),
            driver: statics.driver.clone(),
            gpus,
        })
    }
}
