//! A simulated node from a recording: the recorded node's product, GPU count, modes and ROCm
//! version, and one batch workload per recorded process with its VRAM and CU occupancy, so a
//! rehearsal starts from the operator's own node.

use super::scenario::{Kind, Scenario, ScenarioError, WorkloadSpec};
use crate::collect::amdsmi::recording::Recording;
use crate::collect::pipeline::{Collector, Source};
use std::path::Path;

/// Builds a scenario from a recording file.
pub fn scenario_from_recording(path: &Path) -> Result<Scenario, ScenarioError> {
    let origin = path.display().to_string();
    let invalid = |m: String| ScenarioError::Invalid {
        origin: origin.clone(),
        message: m,
    };
    let rec = Recording::load(path).map_err(|e| invalid(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| invalid(e.to_string()))?;
    let mut c = Collector::new(Source::replay(rec.clone()));
    let snap = rt.block_on(c.sample());
    let g0 = snap
        .gpus
        .first()
        .ok_or_else(|| invalid("the recording has no GPUs".into()))?;
    let product = g0
        .product_key
        .clone()
        .ok_or_else(|| invalid(format!("unknown product {:?}", g0.product)))?;
    let compute = g0
        .compute_partition
        .ok_or_else(|| invalid("the recording does not say the compute mode".into()))?;
    let memory = g0
        .memory_partition
        .ok_or_else(|| invalid("the recording does not say the memory mode".into()))?;
    let rocm = c.version().and_then(|v| v.rocm.clone()).unwrap_or_else(|| {
        if c.version()
            .is_some_and(|v| v.family() == crate::collect::amdsmi::version::Family::Rocm6)
        {
            "6.4.1".into()
        } else {
            "7.0.2".into()
        }
    });
    let mut workloads = Vec::new();
    for p in &snap.processes {
        for u in &p.gpus {
            let Some((phys, l)) = snap.gpus.iter().enumerate().find_map(|(i, g)| {
                g.partitions
                    .iter()
                    .find(|l| l.gpu_id == u.gpu_id)
                    .map(|l| (i, l))
            }) else {
                continue;
            };
            let vram = u.vram_bytes.unwrap_or(0);
            #[expect(clippy::cast_precision_loss, reason = "GiB")]
            let vram_gb = vram as f64 / f64::from(1u32 << 30);
            if vram_gb < 0.01 {
                continue;
            }
            let busy = u.cu_percent.or(l.gfx_busy_percent).unwrap_or(0.0);
            workloads.push(WorkloadSpec {
                name: format!(
                    "{}-{}-gpu{}",
                    p.name.clone().unwrap_or_else(|| "process".into()),
                    p.pid,
                    u.gpu_id
                ),
                kind: Kind::Batch,
                #[expect(clippy::cast_possible_truncation, reason = "GPU index")]
                gpu: phys as u32,
                partition: l.partition_id,
                vram_gb: (vram_gb * 100.0).round() / 100.0,
                busy,
                swing: 5.0,
                comm: p.name.clone(),
                model: None,
                port: 0,
                ignore_sigterm: false,
                metrics: None,
            });
        }
    }
    let s = Scenario {
        fail_reloads: 0,
        name: format!(
            "recording:{}",
            path.file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default()
        ),
        description: format!("recorded on {} at {}", rec.host, rec.recorded_at),
        product,
        #[expect(clippy::cast_possible_truncation, reason = "GPU count")]
        gpus: snap.gpus.len() as u32,
        compute,
        memory,
        rocm,
        seed: 0,
        reload_secs: 6.0,
        time_scale: super::scenario::default_time_scale(),
        amd_smi_cost: crate::sim::cost::AmdSmiCost::default(),
        workloads,
        kubernetes: None,
    };
    Ok(s)
}
