//! Read commands of the fake amd-smi: version, list, static, metric, process, partition,
//! monitor. Built as JSON values (insertion-ordered like the real dicts), then printed as Python
//! would (`--json`) or in the human layout.

use super::Flavor;
use super::args::Args;
use crate::collect::clock;
use crate::sim::human;
use crate::sim::load;
use crate::sim::pyjson::dumps;
use crate::sim::rules::Logical;
use crate::sim::scenario::Kind;
use crate::sim::state::SimState;
use serde_json::{Map, Value, json};
use std::io::Write;

fn vu(value: impl Into<Value>, unit: &str) -> Value {
    json!({"value": value.into(), "unit": unit})
}

const NA: &str = "N/A";

/// `amd-smi version`.
pub fn version(state: &SimState, args: &Args, out: &mut dyn Write) -> i32 {
    let line = Flavor::version_line(&state.rocm);
    if args.json {
        let mut m = Map::new();
        for part in line.split('|') {
            if let Some((k, v)) = part.split_once(':') {
                let key = match k.trim() {
                    "AMDSMI Tool" => "tool",
                    "AMDSMI Library version" => "amdsmi_library_version",
                    "ROCm version" => "rocm_version",
                    "amdgpu version" => "amdgpu_version",
                    _ => "amd_hsmp_driver_version",
                };
                m.insert(key.into(), Value::String(v.trim().into()));
            }
        }
        let _ = write!(out, "{}", dumps(&Value::Array(vec![Value::Object(m)])));
    } else {
        let _ = writeln!(out, "{line}");
    }
    0
}

/// Selected logical GPUs, or the error object/line for an unknown one.
fn select<'a>(logical: &'a [Logical], args: &Args) -> Result<Vec<&'a Logical>, String> {
    if args.gpus.is_empty() || args.gpus.iter().any(|g| g == "all") {
        return Ok(logical.iter().collect());
    }
    let mut v = Vec::new();
    for g in &args.gpus {
        match g
            .parse::<u32>()
            .ok()
            .and_then(|i| logical.iter().find(|l| l.index == i))
        {
            Some(l) => v.push(l),
            None => return Err(g.clone()),
        }
    }
    Ok(v)
}

fn uuid(state: &SimState, l: &Logical, flavor: Flavor) -> String {
    let g = &state.gpus[l.phys];
    let dev = state
        .product()
        .device_id
        .trim_start_matches("0x")
        .to_string();
    let tail = &g.serial[g.serial.len().saturating_sub(12)..].to_ascii_lowercase();
    let p = if flavor.rocm7 {
        l.shape.partition_id
    } else {
        0
    };
    format!(
        "{}ff{dev}-0000-1000-80{:02x}-{tail}",
        &g.serial[2..4].to_ascii_lowercase(),
        p
    )
}

/// All read commands.
pub fn read(state: &SimState, flavor: Flavor, args: &Args, out: &mut dyn Write) -> i32 {
    let logical = state.logical();
    let sel = match select(&logical, args) {
        Ok(s) => s,
        Err(g) => {
            let msg = format!("Can not find a device: GPU '{g}'");
            if args.json {
                let _ = writeln!(out, "{}", json!({"error": msg, "code": -3}));
            } else {
                let _ = writeln!(out, "{msg} Error code: -3");
            }
            return if flavor.rocm7 { 253 } else { 0 };
        }
    };
    let t = load::elapsed(state, clock::now_ms());
    let ld = load::node_load(state, &logical, t);
    let cmd = args.command.as_deref().unwrap_or("");
    let items: Vec<Value> = match cmd {
        "list" => sel
            .iter()
            .map(|l| list_entry(state, l, flavor, args))
            .collect(),
        "static" => sel
            .iter()
            .map(|l| static_entry(state, l, flavor, args))
            .collect(),
        "metric" => sel
            .iter()
            .map(|l| metric_entry(state, &logical, l, flavor, args, &ld))
            .collect(),
        "process" => sel
            .iter()
            .map(|l| process_entry(state, l, flavor, t))
            .collect(),
        "monitor" => sel
            .iter()
            .map(|l| monitor_row(state, &logical, l, flavor, &ld))
            .collect(),
        "partition" => return partition(state, flavor, args, &sel, out),
        _ => {
            // The default view (no command): the list, human.
            let _ = writeln!(out, "{}", Flavor::version_line(&state.rocm));
            sel.iter()
                .map(|l| list_entry(state, l, flavor, args))
                .collect()
        }
    };
    if args.json {
        let wrap = flavor.rocm7 && matches!(cmd, "static" | "metric");
        let v = if wrap {
            json!({"gpu_data": items})
        } else {
            Value::Array(items)
        };
        let _ = write!(out, "{}", dumps(&v));
    } else if cmd == "monitor" {
        let heads = [
            "GPU",
            "XCP",
            "POWER",
            "GPU_T",
            "MEM_T",
            "GFX_CLK",
            "GFX%",
            "MEM%",
            "VRAM_USED",
            "VRAM_TOTAL",
        ];
        let keys = [
            "gpu",
            "xcp",
            "power_usage",
            "hotspot_temperature",
            "memory_temperature",
            "gfx_clk",
            "gfx",
            "mem",
            "vram_used",
            "vram_total",
        ];
        let rows: Vec<Vec<String>> = items
            .iter()
            .map(|r| keys.iter().map(|k| cell(&r[*k])).collect())
            .collect();
        let _ = write!(out, "{}", human::table(&heads, &rows));
    } else {
        let _ = write!(out, "{}", human::gpus(&items));
    }
    0
}

fn cell(v: &Value) -> String {
    match v {
        Value::Object(m) => format!(
            "{} {}",
            m.get("value").map(ToString::to_string).unwrap_or_default(),
            m.get("unit").and_then(Value::as_str).unwrap_or("")
        ),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn list_entry(state: &SimState, l: &Logical, flavor: Flavor, args: &Args) -> Value {
    let g = &state.gpus[l.phys];
    let p = l.shape.partition_id;
    let kfd = load::mix(state.seed, u64::from(l.index)) % 60_000 + 2_000;
    let mut m = Map::new();
    m.insert("gpu".into(), json!(l.index));
    m.insert("bdf".into(), json!(g.bdf(p)));
    m.insert("uuid".into(), json!(uuid(state, l, flavor)));
    m.insert("kfd_id".into(), json!(kfd));
    m.insert("node_id".into(), json!(l.index + 2));
    m.insert("partition_id".into(), json!(p));
    if args.has("enumeration") {
        let minor = 128 + 8 * l.phys as u32 + p;
        m.insert("render".into(), json!(format!("renderD{minor}")));
        m.insert("card".into(), json!(format!("card{}", minor - 127)));
        m.insert("hsa_id".into(), json!(l.index + 2));
        m.insert("hip_id".into(), json!(l.index));
        m.insert(
            "hip_uuid".into(),
            json!(format!("GPU-{}", &uuid(state, l, flavor)[..8])),
        );
    }
    Value::Object(m)
}

fn static_entry(state: &SimState, l: &Logical, flavor: Flavor, args: &Args) -> Value {
    let prod = state.product();
    let g = &state.gpus[l.phys];
    let p = l.shape.partition_id;
    let primary = p == 0;
    let any = ["asic", "bus", "vram", "partition", "limit"]
        .iter()
        .any(|f| args.has(f));
    let want = |f: &str| args.has(f) || (!any && (f != "partition" || !flavor.rocm7));
    let mut m = Map::new();
    m.insert("gpu".into(), json!(l.index));
    if want("asic") {
        m.insert(
            "asic".into(),
            json!({
                "market_name": prod.market_name, "vendor_id": "0x1002",
                "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]", "subvendor_id": "0x1002",
                "device_id": prod.device_id, "subsystem_id": prod.device_id, "rev_id": "0x00",
                "asic_serial": g.serial, "oam_id": g.oam_id, "num_compute_units": l.shape.cus,
                "target_graphics_version": prod.arch,
            }),
        );
    }
    if want("bus") {
        m.insert(
            "bus".into(),
            json!({
                "bdf": g.bdf(p), "max_pcie_width": 16, "max_pcie_speed": vu(32, "GT/s"),
                "pcie_interface_version": "Gen 5", "slot_type": "OAM",
            }),
        );
    }
    if want("limit") {
        let w = |v: u32| if primary { vu(v, "W") } else { json!(NA) };
        let c = |v: u32| if primary { vu(v, "C") } else { json!(NA) };
        m.insert("limit".into(), json!({
            "max_power": w(prod.power_cap_w), "min_power": w(0), "socket_power": w(prod.power_cap_w),
            "slowdown_edge_temperature": NA, "slowdown_hotspot_temperature": c(100),
            "slowdown_vram_temperature": c(95), "shutdown_edge_temperature": NA,
            "shutdown_hotspot_temperature": c(110), "shutdown_vram_temperature": c(105),
        }));
    }
    if want("partition") {
        let key = if flavor.accel_key {
            "accelerator_partition"
        } else {
            "compute_partition"
        };
        let (c, mm) = if primary {
            (json!(g.modes.compute.name()), json!(g.modes.memory.name()))
        } else {
            (json!(NA), json!(NA))
        };
        let mut pm = Map::new();
        pm.insert(key.into(), c);
        pm.insert("memory_partition".into(), mm);
        pm.insert("partition_id".into(), json!(p));
        m.insert("partition".into(), Value::Object(pm));
    }
    if want("vram") {
        let size = if primary {
            prod.vram_mb
        } else {
            l.shape.vram_share_mb
        };
        m.insert(
            "vram".into(),
            json!({
                "type": "HBM", "vendor": NA, "size": vu(size, "MB"), "bit_width": 8192,
                "max_bandwidth": vu(5300, "GB/s"),
            }),
        );
    }
    Value::Object(m)
}

fn xcp_lists(
    prod_xcds: u32,
    logical: &[Logical],
    phys: usize,
    busy: &[f64],
    slots: usize,
    val: impl Fn(f64) -> Value,
) -> Value {
    let mut m = Map::new();
    for l in logical.iter().filter(|l| l.phys == phys) {
        let own = l.shape.xcds.len().min(slots);
        let mut v: Vec<Value> = (0..own).map(|_| val(busy[l.index as usize])).collect();
        v.resize(slots.max(own), json!(NA));
        let _ = prod_xcds;
        m.insert(format!("xcp_{}", l.shape.partition_id), Value::Array(v));
    }
    Value::Object(m)
}

fn metric_entry(
    state: &SimState,
    logical: &[Logical],
    l: &Logical,
    flavor: Flavor,
    args: &Args,
    ld: &load::NodeLoad,
) -> Value {
    let prod = state.product();
    let primary = l.shape.partition_id == 0;
    let any = ["usage", "power", "temperature", "mem-usage", "ecc"]
        .iter()
        .any(|f| args.has(f));
    let want = |f: &str| !any || args.has(f);
    let dev = ld.device[l.phys];
    let (dev_busy, umc, power) = (dev.busy, dev.umc, dev.power);
    let mut m = Map::new();
    m.insert("gpu".into(), json!(l.index));
    if want("usage") {
        if primary {
            let jpeg_slots = if flavor.rocm7 { 40 } else { 32 };
            let pct = |v: f64| vu(v, "%");
            let na_or_zero = |n: usize| {
                if flavor.rocm7 {
                    vec![json!(NA); n]
                } else {
                    vec![vu(0, "%"); n]
                }
            };
            m.insert("usage".into(), json!({
                "gfx_activity": vu(dev_busy.round(), "%"), "umc_activity": vu(umc, "%"), "mm_activity": NA,
                "vcn_activity": na_or_zero(4), "jpeg_activity": na_or_zero(32),
                "gfx_busy_inst": xcp_lists(prod.xcds, logical, l.phys, &ld.busy, 8, pct),
                "jpeg_busy": xcp_lists(prod.xcds, logical, l.phys, &ld.busy, jpeg_slots, |_| vu(0, "%")),
                "vcn_busy": xcp_lists(prod.xcds, logical, l.phys, &ld.busy, 4, |_| vu(0, "%")),
            }));
        } else {
            m.insert("usage".into(), json!(NA));
        }
    }
    if want("power") {
        let sp = if primary { vu(power, "W") } else { json!(NA) };
        m.insert(
            "power".into(),
            json!({
                "socket_power": sp, "gfx_voltage": NA, "soc_voltage": NA, "mem_voltage": NA,
                "throttle_status": NA, "power_management": "ENABLED",
            }),
        );
    }
    if want("temperature") {
        let c = |v: f64| if primary { vu(v, "C") } else { json!(NA) };
        m.insert(
            "temperature".into(),
            json!({"edge": NA, "hotspot": c(dev.hotspot), "mem": c(dev.mem_temp)}),
        );
    }
    if want("ecc") {
        m.insert("ecc".into(), json!({
            "total_correctable_count": 0, "total_uncorrectable_count": 0, "total_deferred_count": 0,
            "cache_correctable_count": 0, "cache_uncorrectable_count": 0,
        }));
    }
    if want("mem-usage") {
        let total = if primary {
            prod.vram_mb
        } else {
            l.shape.vram_share_mb
        };
        let used = ld.vram[l.index as usize] >> 20;
        let mb = |v: u64| vu(v, "MB");
        m.insert("mem_usage".into(), json!({
            "total_vram": mb(total), "used_vram": mb(used), "free_vram": mb(total.saturating_sub(used)),
            "total_visible_vram": mb(total), "used_visible_vram": mb(used),
            "free_visible_vram": mb(total.saturating_sub(used)),
            "total_gtt": mb(1_031_636), "used_gtt": mb(20), "free_gtt": mb(1_031_616),
        }));
    }
    Value::Object(m)
}

fn process_entry(state: &SimState, l: &Logical, flavor: Flavor, t: f64) -> Value {
    let mut list = Vec::new();
    for i in 0..state.workloads.len() {
        let w = &state.workloads[i];
        // Agents hold /dev/kfd without a DRM client: amd-smi's fdinfo scan does not list them.
        if w.spec.kind == Kind::Agent
            || !state.alive(i)
            || state.placement_index(i) != Some(l.index)
        {
            continue;
        }
        let vram = load::vram(state, i, t);
        let gtt: u64 = 2_134_016;
        let cpu: u64 = 211_795_968;
        let mut info = Map::new();
        info.insert(
            "name".into(),
            json!(w.spec.comm.clone().unwrap_or_else(|| w.spec.name.clone())),
        );
        info.insert("pid".into(), json!(w.pid));
        info.insert(
            "memory_usage".into(),
            json!({"gtt_mem": vu(gtt, "B"), "cpu_mem": vu(cpu, "B"), "vram_mem": vu(vram, "B")}),
        );
        info.insert("mem_usage".into(), vu(gtt + cpu + vram, "B"));
        info.insert(
            "usage".into(),
            json!({"gfx": vu(0, "ns"), "enc": vu(0, "ns")}),
        );
        if flavor.cu_occupancy {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "CU count"
            )]
            let cu = (load::busy(state, i, t) / 100.0 * f64::from(l.shape.cus)).round() as u32;
            info.insert("cu_occupancy".into(), json!(cu));
        }
        list.push(json!({"process_info": Value::Object(info)}));
    }
    if list.is_empty() {
        list.push(json!({"process_info": "No running processes detected"}));
    }
    json!({"gpu": l.index, "process_list": list})
}

fn monitor_row(
    state: &SimState,
    logical: &[Logical],
    l: &Logical,
    flavor: Flavor,
    ld: &load::NodeLoad,
) -> Value {
    let prod = state.product();
    let primary = l.shape.partition_id == 0;
    let siblings: Vec<&Logical> = logical.iter().filter(|x| x.phys == l.phys).collect();
    #[expect(clippy::cast_precision_loss, reason = "small counts")]
    let dev_busy = siblings
        .iter()
        .map(|x| ld.busy[x.index as usize])
        .sum::<f64>()
        / siblings.len() as f64;
    let on = |v: Value| if primary { v } else { json!(NA) };
    #[expect(clippy::cast_precision_loss, reason = "GB display")]
    let gb = |mb: u64| vu((mb as f64 / 1024.0 * 10.0).round() / 10.0, "GB");
    let total = if primary {
        prod.vram_mb
    } else {
        l.shape.vram_share_mb
    };
    let mut row = json!({
        "gpu": l.index, "xcp": l.shape.partition_id,
        "power_usage": on(vu((140.0 + f64::from(prod.power_cap_w - 140) * 0.85 * dev_busy / 100.0).round(), "W")),
        "hotspot_temperature": on(vu(45, "C")), "memory_temperature": on(vu(40, "C")),
        "gfx_clk": on(vu(if dev_busy > 0.0 { 2100 } else { 145 }, "MHz")),
        "gfx": on(vu(dev_busy.round(), "%")), "mem": on(vu((dev_busy * 0.4).round(), "%")),
        "encoder": NA, "decoder": on(vu(0, "%")),
        "vram_used": gb(ld.vram[l.index as usize] >> 20), "vram_total": gb(total),
    });
    if !flavor.rocm7 {
        // The XCP column arrived in 7.0.
        if let Some(m) = row.as_object_mut() {
            m.shift_remove("xcp");
        }
    }
    row
}

fn resources(parts: u32) -> Vec<(&'static str, u32, u32)> {
    let shared = (parts / 4).max(1);
    vec![
        ("XCC", (8 / parts).max(1), 1),
        ("DECODER", (4 / parts).max(1), shared),
        ("DMA", (16 / parts).max(2), 1),
        ("JPEG", (32 / parts).max(4) * shared, shared),
    ]
}

fn partition(
    state: &SimState,
    flavor: Flavor,
    args: &Args,
    sel: &[&Logical],
    out: &mut dyn Write,
) -> i32 {
    let prod = state.product();
    let all = !args.has("current") && !args.has("memory") && !args.has("accelerator");
    let caps = crate::sim::rules::memory_caps(&prod)
        .iter()
        .map(|m| m.name())
        .collect::<Vec<_>>()
        .join(",");
    let mut resources_rows = Vec::new();
    let mut current = Vec::new();
    let mut memory = Vec::new();
    let mut profiles = Vec::new();
    for l in sel {
        let g = &state.gpus[l.phys];
        let primary = l.shape.partition_id == 0;
        let pid = l.shape.partition_id.to_string();
        if primary {
            let idx = prod
                .profiles
                .iter()
                .find(|p| p.compute == g.modes.compute)
                .map_or(0, |p| p.index);
            current.push(json!({"gpu_id": l.index, "memory": g.modes.memory.name(), "accelerator_type": g.modes.compute.name(), "accelerator_profile_index": idx, "partition_id": pid}));
            memory.push(json!({"gpu_id": l.index, "memory_partition_caps": caps, "current_memory_partition": g.modes.memory.name()}));
            for (pi, p) in prod.profiles.iter().enumerate() {
                let parts = p.compute.partitions(prod.xcds);
                let star = if p.compute == g.modes.compute {
                    "*"
                } else {
                    ""
                };
                let res = resources(parts);
                for (ri, (rt, inst, shared)) in res.iter().enumerate() {
                    resources_rows.push(json!({"resource_index": pi * res.len() + ri, "resource_type": rt, "resource_instances": inst, "resources_shared": shared}));
                    let first = ri == 0;
                    let e = |v: Value| if first { v } else { json!("") };
                    profiles.push(json!({
                        "gpu_id": if first && pi == 0 { json!(l.index) } else { json!("") }, "profile_index": e(json!(p.index)),
                        "memory_partition_caps": e(json!(p.memory.iter().map(|m| m.name()).collect::<Vec<_>>().join(","))),
                        "accelerator_type": e(json!(format!("{}{star}", p.compute.name()))),
                        "partition_id": e(json!(if star.is_empty() { NA.to_string() } else { (0..parts).map(|x| x.to_string()).collect::<Vec<_>>().join(",") })),
                        "num_partitions": e(json!(parts)), "num_resources": e(json!(res.len())),
                        "resource_index": pi * res.len() + ri, "resource_type": rt, "resource_instances": inst, "resources_shared": shared,
                    }));
                }
            }
        } else {
            current.push(json!({"gpu_id": l.index, "memory": NA, "accelerator_type": NA, "accelerator_profile_index": NA, "partition_id": pid}));
            memory.push(json!({"gpu_id": l.index, "memory_partition_caps": NA, "current_memory_partition": NA}));
            if flavor.rocm7 {
                // 7.0.2 prints one all-N/A profile row per secondary (ROCm/amdsmi#132).
                profiles.push(json!({"gpu_id": l.index, "profile_index": NA, "memory_partition_caps": NA, "accelerator_type": NA, "partition_id": pid, "num_partitions": NA, "num_resources": NA, "resource_index": NA, "resource_type": NA, "resource_instances": NA, "resources_shared": NA}));
                // And one all-N/A resources row (the real 7.0.2 output and its JSON both).
                resources_rows.push(json!({"resource_index": NA, "resource_type": NA, "resource_instances": NA, "resources_shared": NA}));
            }
        }
    }
    let mut doc = Map::new();
    if all || args.has("current") {
        doc.insert("current_partition".into(), Value::Array(current));
    }
    if all || args.has("memory") {
        doc.insert("memory_partition".into(), Value::Array(memory));
    }
    if all || args.has("accelerator") {
        doc.insert("partition_profiles".into(), Value::Array(profiles));
    }
    if all || args.has("accelerator") {
        doc.insert("partition_resources".into(), Value::Array(resources_rows));
    }
    if args.json {
        if flavor.rocm7 {
            let _ = write!(out, "{}", dumps(&Value::Object(doc)));
        } else {
            let rows: Vec<Value> = doc
                .get("current_partition")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let _ = write!(out, "{}", dumps(&Value::Array(rows)));
        }
        return 0;
    }
    // The human form: each section amd-smi prints, its heading and its columns (in the order
    // of the JSON keys), blank cells where a profile's later resource rows repeat nothing.
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        o => o.to_string(),
    };
    let sections: [(&str, &str, &[&str]); 4] = [
        (
            "current_partition",
            "CURRENT_PARTITION",
            &[
                "gpu_id",
                "memory",
                "accelerator_type",
                "accelerator_profile_index",
                "partition_id",
            ],
        ),
        (
            "memory_partition",
            "MEMORY_PARTITION",
            &[
                "gpu_id",
                "memory_partition_caps",
                "current_memory_partition",
            ],
        ),
        (
            "partition_profiles",
            "ACCELERATOR_PARTITION_PROFILES",
            &[
                "gpu_id",
                "profile_index",
                "memory_partition_caps",
                "accelerator_type",
                "partition_id",
                "num_partitions",
                "num_resources",
                "resource_index",
                "resource_type",
                "resource_instances",
                "resources_shared",
            ],
        ),
        (
            "partition_resources",
            "ACCELERATOR_PARTITION_RESOURCES",
            &[
                "resource_index",
                "resource_type",
                "resource_instances",
                "resources_shared",
            ],
        ),
    ];
    let mut first = true;
    for (key, heading, cols) in sections {
        let Some(Value::Array(rows)) = doc.get(key) else {
            continue;
        };
        let r: Vec<Vec<String>> = rows
            .iter()
            .map(|x| cols.iter().map(|k| text(&x[*k])).collect())
            .collect();
        let heads: Vec<String> = cols.iter().map(|c| c.to_uppercase()).collect();
        let heads: Vec<&str> = heads.iter().map(String::as_str).collect();
        let _ = writeln!(out, "{}{heading}:", if first { "" } else { "\n" });
        let _ = write!(out, "{}", human::table(&heads, &r));
        first = false;
    }
    if doc.contains_key("partition_profiles") {
        // As amd-smi ends the profiles (ROCm/amdsmi#132's output).
        let _ = write!(out, "\n\nLegend:\n  * = Current mode\n");
    }
    0
}
