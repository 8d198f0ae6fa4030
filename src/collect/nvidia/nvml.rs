//! NVML through `nvml-wrapper`, which loads `libnvidia-ml.so` at run time: where there is no
//! NVIDIA driver, `Nvml::init` fails and partop carries on without it. Each read walks the
//! devices: memory, utilisation, power, temperature, clocks, MIG mode, MIG devices, and compute
//! processes. What does not change from tick to tick (driver version, each device's name, UUID,
//! PCI address, power limit, and its GPU-instance profiles: 15 NVML calls a device) is read
//! once a minute, when the device count changes, and a device's profiles again when its MIG
//! mode does; process names once per process. Every NVML call is a driver ioctl: on an H100
//! these static reads were most of what a tick asked of the driver.
//!
//! Two readings span ticks: graphics-engine activity (GPM, Hopper and later) is the difference
//! between this tick's GPM sample and the last one, per GPU and per MIG instance; XID errors
//! arrive as NVML events, drained without waiting each tick. Both borrow the NVML they came
//! from, so NVML is loaded once per process and kept for its life.

use super::node::{NvCounters, NvGpu, NvInstance, NvNode, NvProc, NvSource};
use crate::domain::mig::MigProfile;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::{EventSet, GpmSample, Nvml};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The process's NVML: GPM samples and the XID event set borrow it across ticks.
static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

/// An initialised NVML.
pub struct NvmlSource {
    nvml: &'static Nvml,
    statics: Option<(std::time::Instant, Statics)>,
    names: HashMap<u32, Option<String>>,
    /// The last GPM sample of each GPU (None) and MIG instance (Some(gi)), by device index.
    /// NVML's handles are Send but not Sync: a mutex makes the source shareable (only `read`,
    /// which has `&mut self`, touches them, so it is never contended).
    gpm: Mutex<HashMap<(u32, Option<u32>), GpmSample<'static>>>,
    xid: Mutex<Xid>,
    /// Per device index, the newest per-process utilisation sample seen (NVML µs clock).
    util_seen: HashMap<u32, u64>,
}

/// XID errors as NVML's events report them, since partop began watching.
#[derive(Default)]
struct Xid {
    /// The event set, once registered (None: not tried yet, or no device gives XID events).
    set: Option<EventSet<'static>>,
    tried: bool,
    /// Device indices registered for XID events.
    watched: Vec<u32>,
    /// Per device index: (last XID, how many).
    seen: HashMap<u32, (u64, u64)>,
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
    /// GPM (graphics-engine activity) is supported.
    gpm: bool,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NvmlSource")
    }
}

impl NvmlSource {
    /// Loads and initialises NVML, or says why it cannot.
    pub fn open() -> Result<Self, String> {
        let nvml = NVML
            .get_or_init(|| Nvml::init().map_err(|e| format!("NVML: {e}")))
            .as_ref()
            .map_err(Clone::clone)?;
        Ok(Self {
            nvml,
            statics: None,
            names: HashMap::new(),
            gpm: Mutex::new(HashMap::new()),
            xid: Mutex::new(Xid::default()),
            util_seen: HashMap::new(),
        })
    }
}

/// Graphics-engine activity, %, between the last GPM sample under `key` and one taken now;
/// the new sample is kept for the next tick. None on the first tick, or where GPM is not
/// supported (before Hopper, or in a VM without it).
fn gr_engine_active(
    nvml: &'static Nvml,
    last: &mut HashMap<(u32, Option<u32>), GpmSample<'static>>,
    key: (u32, Option<u32>),
    sample: Result<GpmSample<'static>, nvml_wrapper::error::NvmlError>,
) -> Option<f64> {
    let now = sample.ok()?;
    let before = last.insert(key, now)?;
    let now = last.get(&key)?;
    let got = nvml_wrapper::gpm::gpm_metrics_get(nvml, &before, now, &[GpmMetricId::GraphicsUtil])
        .ok()?;
    let v = got.into_iter().next()?.ok()?.value;
    (v.is_finite()).then(|| v.clamp(0.0, 100.0))
}

impl Xid {
    /// Registers every device that gives XID events, once.
    fn watch(&mut self, nvml: &'static Nvml, count: u32) {
        if self.tried {
            return;
        }
        self.tried = true;
        let Ok(mut set) = nvml.create_event_set() else {
            return;
        };
        for i in 0..count {
            let Ok(d) = nvml.device_by_index(i) else {
                continue;
            };
            if !d
                .supported_event_types()
                .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR))
            {
                continue;
            }
            match d.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(s) => {
                    set = s;
                    self.watched.push(i);
                }
                // A failed registration frees the set: start a new one for the others.
                Err(_) => match nvml.create_event_set() {
                    Ok(s) => set = s,
                    Err(_) => return,
                },
            }
        }
        if !self.watched.is_empty() {
            self.set = Some(set);
        }
    }

    /// Takes every XID event waiting now (never waits: a timeout of 0 ms).
    fn drain(&mut self) {
        let Some(set) = self.set.as_ref() else {
            return;
        };
        // Bounded: an event storm is read over the next ticks, not in one.
        for _ in 0..256 {
            let Ok(ev) = set.wait(0) else {
                break;
            };
            let (Ok(i), Some(x)) = (ev.device.index(), ev.event_data) else {
                continue;
            };
            let code = match x {
                XidError::Value(v) => v,
                XidError::Unknown => 999,
            };
            let e = self.seen.entry(i).or_insert((0, 0));
            *e = (code, e.1.saturating_add(1));
        }
    }

    /// (last XID, count) of device `i`, None where it is not watched.
    fn of(&self, i: u32) -> (Option<u64>, Option<u64>) {
        if !self.watched.contains(&i) {
            return (None, None);
        }
        let (last, n) = self.seen.get(&i).copied().unwrap_or((0, 0));
        (Some(last), Some(n))
    }
}

fn mib(b: u64) -> u64 {
    b >> 20
}

fn procs(
    list: Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>,
    nvml: &Nvml,
    names: &mut HashMap<u32, Option<String>>,
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
            sm_util: None,
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
                gpm: d.gpm_support().unwrap_or(false),
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
        let Some((_, statics)) = self.statics.as_mut() else {
            return Err("NVML: no device facts".into());
        };
        let xid = self
            .xid
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        xid.watch(self.nvml, count);
        xid.drain();
        let mut tick = Tick {
            nvml: self.nvml,
            gpm: self
                .gpm
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            names: &mut self.names,
            util_seen: &mut self.util_seen,
        };
        let mut seen = Vec::new();
        let mut gpus = Vec::new();
        for i in 0..count {
            let d = tick
                .nvml
                .device_by_index(i)
                .map_err(|e| format!("NVML device {i}: {e}"))?;
            let g = tick.gpu(i, &d, &mut statics.devices[i as usize], xid.of(i));
            seen.extend(g.processes.iter().map(|p| p.pid));
            gpus.push(g);
        }
        self.names.retain(|pid, _| seen.contains(pid));
        Ok(NvNode {
            source: format!("NVML (driver {})", statics.driver.as_deref().unwrap_or("?")),
            driver: statics.driver.clone(),
            gpus,
        })
    }
}

/// What one read keeps across its devices: NVML, the last GPM samples, the process names
/// known, the newest utilisation sample seen per device.
struct Tick<'a> {
    nvml: &'static Nvml,
    gpm: &'a mut HashMap<(u32, Option<u32>), GpmSample<'static>>,
    names: &'a mut HashMap<u32, Option<String>>,
    util_seen: &'a mut HashMap<u32, u64>,
}

impl Tick<'_> {
    /// Device `i` now: memory, utilisation, power, temperature, clocks, MIG mode and
    /// instances, processes, counters (`xid`: its last XID and how many).
    fn gpu(
        &mut self,
        i: u32,
        d: &nvml_wrapper::Device<'static>,
        st: &mut DeviceStatic,
        xid: (Option<u64>, Option<u64>),
    ) -> NvGpu {
        let mem = d.memory_info().ok();
        let util = d.utilization_rates().ok();
        let mig = d.mig_mode().ok();
        let enabled = mig.as_ref().map(|m| m.current == 1);
        let now_mig = mig.as_ref().map(|m| (m.current, m.pending));
        if now_mig != st.mig {
            // A MIG mode change: the profiles the device offers are read again.
            st.profiles = if now_mig.is_some() {
                profiles_of(d, mem.as_ref().map(|m| m.total))
            } else {
                vec![]
            };
            st.mig = now_mig;
        }
        let mut processes = procs(
            d.running_compute_processes().unwrap_or_default(),
            self.nvml,
            self.names,
        );
        let instances = if enabled == Some(true) {
            self.instances(i, d, st.gpm, &mut processes)
        } else {
            self.sm_util(i, d, &mut processes);
            Vec::new()
        };
        let gr = (st.gpm && enabled != Some(true))
            .then(|| gr_engine_active(self.nvml, self.gpm, (i, None), d.gpm_sample()))
            .flatten();
        let fields = field_values(d);
        NvGpu {
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
            mem_temp_c: fields.mem_temp_c,
            sm_clock_mhz: d.clock_info(Clock::SM).ok(),
            mem_clock_mhz: d.clock_info(Clock::Memory).ok(),
            mig_enabled: enabled,
            mig_pending: mig.map(|m| m.pending == 1),
            instances,
            processes,
            profiles: st.profiles.clone(),
            counters: counters(d, gr, xid, &fields),
        }
    }

    /// Device `i`'s MIG instances, each with its memory, SMs and activity; their processes
    /// join `processes`, marked with their instance.
    fn instances(
        &mut self,
        i: u32,
        d: &nvml_wrapper::Device<'static>,
        gpm: bool,
        processes: &mut Vec<NvProc>,
    ) -> Vec<NvInstance> {
        let mut instances = Vec::new();
        for k in 0..d.mig_device_count().unwrap_or(0) {
            let Ok(m) = d.mig_device_by_index(k) else {
                continue;
            };
            let attrs = m.attributes().ok();
            let mp = procs(
                m.running_compute_processes().unwrap_or_default(),
                self.nvml,
                self.names,
            );
            let gi = mp.iter().find_map(|p| p.gi).unwrap_or(k);
            let mm = m.memory_info().ok();
            let gr = gpm.then(|| {
                gr_engine_active(self.nvml, self.gpm, (i, Some(gi)), d.gpm_mig_sample(gi))
            });
            instances.push(NvInstance {
                gi,
                ci: None,
                uuid: m.uuid().ok(),
                // Named later by the device's own profiles: slices, SMs, memory and the
                // optical-flow unit together (never a name made up from memory).
                profile: None,
                profile_id: None,
                slices: attrs.as_ref().map(|a| a.gpu_instance_slice_count),
                ofa: attrs.as_ref().map(|a| a.shared_ofa_count),
                mem_total_mib: mm.as_ref().map(|x| mib(x.total)),
                mem_used_mib: mm.as_ref().map(|x| mib(x.used)),
                sms: attrs.map(|a| a.multiprocessor_count),
                gr_engine_active: gr.flatten(),
            });
            processes.extend(mp.into_iter().map(|p| NvProc { gi: Some(gi), ..p }));
        }
        instances
    }

    /// Each process's SM use on device `i` (not in MIG mode): the newest of the samples since
    /// the last read.
    fn sm_util(&mut self, i: u32, d: &nvml_wrapper::Device<'static>, processes: &mut [NvProc]) {
        let since = self.util_seen.get(&i).copied();
        let Ok(samples) = d.process_utilization_stats(since) else {
            return;
        };
        let mut newest: HashMap<u32, (u64, u32)> = HashMap::new();
        for s in samples {
            let e = newest.entry(s.pid).or_insert((s.timestamp, s.sm_util));
            if s.timestamp >= e.0 {
                *e = (s.timestamp, s.sm_util);
            }
            self.util_seen
                .entry(i)
                .and_modify(|t| *t = (*t).max(s.timestamp))
                .or_insert(s.timestamp);
        }
        for p in processes {
            // No sample since the last read: it used no SM time in between.
            p.sm_util = Some(newest.get(&p.pid).map_or(0, |x| x.1.min(100)));
        }
    }
}

/// What NVML gives only through its field values (nvmlDeviceGetFieldValues), read in one call:
/// the HBM temperature (nvidia-smi dmon's `mtemp`) and the row remapper's counts. A field the
/// device does not support is None.
#[derive(Default)]
struct Fields {
    mem_temp_c: Option<f64>,
    remapped_correctable: Option<u64>,
    remapped_uncorrectable: Option<u64>,
    remap_failure: Option<bool>,
}

/// nvml.h's field ids (facts of NVML's API): memory temperature, and the row remapper's
/// correctable, uncorrectable and failure counts.
const FI_MEMORY_TEMP: u32 = 82;
const FI_REMAPPED_COR: u32 = 142;
const FI_REMAPPED_UNC: u32 = 143;
const FI_REMAPPED_FAILURE: u32 = 145;

fn field_values(d: &nvml_wrapper::Device<'static>) -> Fields {
    use nvml_wrapper::enums::device::SampleValue;
    use nvml_wrapper::structs::device::FieldId;
    let ids = [
        FI_MEMORY_TEMP,
        FI_REMAPPED_COR,
        FI_REMAPPED_UNC,
        FI_REMAPPED_FAILURE,
    ];
    let Ok(values) = d.field_values_for(&ids.map(FieldId)) else {
        return Fields::default();
    };
    let value = |id: u32| -> Option<u64> {
        let v = values
            .iter()
            .flatten()
            .find(|v| v.field.0 == id)?
            .value
            .as_ref()
            .ok()?;
        match *v {
            SampleValue::U32(x) => Some(u64::from(x)),
            SampleValue::U64(x) => Some(x),
            SampleValue::I64(x) => u64::try_from(x).ok(),
            SampleValue::F64(x) if x.is_finite() && x >= 0.0 =>
            {
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "finite, not negative; a count or degrees"
                )]
                Some(x as u64)
            }
            SampleValue::F64(_) => None,
        }
    };
    Fields {
        #[expect(clippy::cast_precision_loss, reason = "degrees Celsius")]
        mem_temp_c: value(FI_MEMORY_TEMP).map(|t| t as f64),
        remapped_correctable: value(FI_REMAPPED_COR),
        remapped_uncorrectable: value(FI_REMAPPED_UNC),
        remap_failure: value(FI_REMAPPED_FAILURE).map(|f| f != 0),
    }
}

/// The device's counters: energy, PCIe replays, encoder and decoder use, graphics activity
/// (`gr`), XIDs, the row remapper's counts (`fields`).
fn counters(
    d: &nvml_wrapper::Device<'static>,
    gr: Option<f64>,
    (xid_last, xid_count): (Option<u64>, Option<u64>),
    fields: &Fields,
) -> NvCounters {
    NvCounters {
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
        gr_engine_active: gr,
        xid_last,
        xid_count,
        remapped_correctable: fields.remapped_correctable,
        remapped_uncorrectable: fields.remapped_uncorrectable,
        remap_failure: fields.remap_failure,
    }
}
