//! NVML through `nvml-wrapper`, which loads `libnvidia-ml.so` at run time: where there is no
//! NVIDIA driver, `Nvml::init` fails and partop carries on without it. Each read walks the
//! devices: memory, utilisation, power, temperature, clocks, MIG mode, the GPU-instance
//! profiles (when the driver lists them), MIG devices, and compute processes.

use super::node::{NvGpu, NvInstance, NvNode, NvProc, NvSource};
use crate::domain::mig::MigProfile;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;

/// An initialised NVML.
pub struct NvmlSource {
    nvml: Nvml,
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
            .map(|nvml| Self { nvml })
            .map_err(|e| format!("NVML: {e}"))
    }
}

fn mib(b: u64) -> u64 {
    b >> 20
}

fn procs(
    list: Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>,
    nvml: &Nvml,
) -> Vec<NvProc> {
    list.into_iter()
        .map(|p| NvProc {
            pid: p.pid,
            name: nvml.sys_process_name(p.pid, 64).ok(),
            used_mib: match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(mib(b)),
                UsedGpuMemory::Unavailable => None,
            },
            gi: p.gpu_instance_id,
        })
        .collect()
}

impl NvSource for NvmlSource {
    fn read(&mut self) -> Result<NvNode, String> {
        let n = &self.nvml;
        let count = n
            .device_count()
            .map_err(|e| format!("NVML device count: {e}"))?;
        let mut gpus = Vec::new();
        for i in 0..count {
            let d = n
                .device_by_index(i)
                .map_err(|e| format!("NVML device {i}: {e}"))?;
            let mem = d.memory_info().ok();
            let util = d.utilization_rates().ok();
            let mig = d.mig_mode().ok();
            let enabled = mig.as_ref().map(|m| m.current == 1);
            // Profile indices 0..14 (NVML_GPU_INSTANCE_PROFILE_*); unsupported ones fail.
            let profiles: Vec<MigProfile> = if mig.is_some() {
                (0..15)
                    .filter_map(|k| d.profile_info(k).ok())
                    .filter(|p| p.instance_count > 0)
                    .map(|p| MigProfile {
                        id: p.id,
                        name: format!(
                            "{}g.{}gb{}",
                            p.slice_count,
                            p.memory_size_mb.div_ceil(1024),
                            if p.jpeg_count > 0 && p.slice_count == 1 && p.instance_count == 1 {
                                "+me"
                            } else {
                                ""
                            }
                        ),
                        compute_slices: p.slice_count,
                        // Eighths of the GPU's memory (what -lgip calls memory slices).
                        memory_slices: mem.as_ref().map_or(0, |m| {
                            let eighth = (mib(m.total) / 8).max(1);
                            u32::try_from((p.memory_size_mb + eighth / 2) / eighth).unwrap_or(0)
                        }),
                        max_instances: p.instance_count,
                        memory_mib: p.memory_size_mb,
                    })
                    .collect()
            } else {
                vec![]
            };
            let mut instances = Vec::new();
            let mut processes = procs(d.running_compute_processes().unwrap_or_default(), n);
            if enabled == Some(true) {
                for k in 0..d.mig_device_count().unwrap_or(0) {
                    let Ok(m) = d.mig_device_by_index(k) else {
                        continue;
                    };
                    let attrs = m.attributes().ok();
                    let mp = procs(m.running_compute_processes().unwrap_or_default(), n);
                    let gi = mp.iter().find_map(|p| p.gi).unwrap_or(k);
                    let mm = m.memory_info().ok();
                    instances.push(NvInstance {
                        gi,
                        ci: None,
                        uuid: m.uuid().ok(),
                        profile: attrs.as_ref().map(|a| {
                            format!(
                                "{}g.{}gb",
                                a.gpu_instance_slice_count,
                                a.memory_size_mb.div_ceil(1024)
                            )
                        }),
                        mem_total_mib: mm.as_ref().map(|x| mib(x.total)),
                        mem_used_mib: mm.as_ref().map(|x| mib(x.used)),
                        sms: attrs.map(|a| a.multiprocessor_count),
                    });
                    processes.extend(mp.into_iter().map(|p| NvProc { gi: Some(gi), ..p }));
                }
            }
            gpus.push(NvGpu {
                index: i,
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
                mem_total_mib: mem.as_ref().map(|m| mib(m.total)),
                mem_used_mib: mem.as_ref().map(|m| mib(m.used)),
                util_gpu: util.as_ref().map(|u| f64::from(u.gpu)),
                util_mem: util.as_ref().map(|u| f64::from(u.memory)),
                power_w: d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                power_limit_w: d
                    .enforced_power_limit()
                    .ok()
                    .map(|mw| f64::from(mw) / 1000.0),
                temp_c: d.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
                mem_temp_c: None,
                sm_clock_mhz: d.clock_info(Clock::SM).ok(),
                mem_clock_mhz: d.clock_info(Clock::Memory).ok(),
                mig_enabled: enabled,
                mig_pending: mig.map(|m| m.pending == 1),
                instances,
                processes,
                profiles,
            });
        }
        Ok(NvNode {
            source: format!(
                "NVML (driver {})",
                n.sys_driver_version().unwrap_or_else(|_| "?".into())
            ),
            driver: n.sys_driver_version().ok(),
            gpus,
        })
    }
}
