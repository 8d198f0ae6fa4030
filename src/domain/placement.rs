//! Where served models go on a layout: the remap after a repartition (each model to a logical
//! GPU that fits its memory, keeping its identity where it still exists) and the placement
//! advisor (which compute x memory mode serves a set of models best on this node). Pure; used
//! by the planner and the staging screen.

use super::layout::LayoutRow;
use super::layout::shapes;
use super::models::Want;
use super::modes::{ComputeMode, MemoryMode};
use super::product::{Product, Profile};
use serde::{Deserialize, Serialize};

/// What one model needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Need {
    /// Model name.
    pub name: String,
    /// Placement rule.
    pub want: Want,
    /// HBM per logical GPU, MiB.
    pub mem_mb: u64,
    /// Logical GPUs it spans.
    pub tp: u32,
    /// Where it runs now (BDFs), preferred if they still exist and fit.
    pub prefer: Vec<String>,
}

/// Where a model goes, or why it cannot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placed {
    /// Model name.
    pub name: String,
    /// Its logical GPUs in the layout (empty: does not fit).
    pub to: Vec<LayoutRow>,
    /// Why it does not fit.
    pub reason: Option<String>,
}

/// GB to MiB. partop's GB is 1024 MiB, as amd-smi and ROCm report HBM (a "192 GB" MI300X is
/// 196,608 MiB), so a registry's figures compare directly with what the tools show.
pub fn gb_to_mb(gb: f64) -> u64 {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "GB of HBM"
    )]
    let mb = (gb.max(0.0) * 1024.0).ceil() as u64;
    mb
}

/// How far a partition may fall short of a model's stated need and still hold it: 1% of the
/// partition. The hardware gives a little less than the nominal sizes the docs and the
/// registry speak in (an MI300X has 196,592 MiB, 16 short of 192 GiB, so a CPX partition is
/// 23.998 GiB where the docs say 24): `memory_gb = 24` holds on it. A real shortfall (a 24 GiB
/// model on 23 GiB) is still refused.
pub const SIZE_TOLERANCE: f64 = 0.01;

/// Whether a logical GPU of `have_mb` MiB holds a need of `need_mb` MiB, within
/// [`SIZE_TOLERANCE`]. Every size comparison of placement goes through here.
#[expect(clippy::cast_precision_loss, reason = "MiB of HBM")]
pub fn holds(have_mb: u64, need_mb: u64) -> bool {
    need_mb as f64 <= have_mb as f64 * (1.0 + SIZE_TOLERANCE)
}

/// What a process holding `bytes` of HBM needs, in the registry's unit: whole GiB (1024 MiB,
/// as amd-smi gives HBM), rounded up beyond [`SIZE_TOLERANCE`]. A server holding 64.0 GiB, or
/// 64.3 as its KV cache moves, needs `memory_gb = 64`, and a 64 GiB partition [`holds`] it.
#[expect(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "GiB of HBM"
)]
pub fn whole_gib_held(bytes: u64) -> u64 {
    let gib = bytes as f64 / f64::from(1u32 << 30);
    let whole = gib.floor();
    let g = if gib - whole <= whole * SIZE_TOLERANCE {
        whole
    } else {
        whole + 1.0
    };
    (g as u64).max(1)
}

/// MiB as GiB with one decimal, the unit every table shows (`23.9 GiB`, never a floored `23 GB`).
pub fn gib_mb(mb: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let g = mb as f64 / 1024.0;
    format!("{g:.1} GiB")
}

/// Places `needs` on `layout`, skipping logical GPUs in `taken` (BDFs held by what keeps
/// running). Fixed placements first, then the largest models, each on the partitions it had
/// if they still exist, else the smallest free ones that fit (best fit keeps big partitions
/// for big models).
pub fn place(needs: &[Need], layout: &[LayoutRow], taken: &[String]) -> Vec<Placed> {
    let mut free: Vec<&LayoutRow> = layout.iter().filter(|r| !taken.contains(&r.bdf)).collect();
    let mut order: Vec<usize> = (0..needs.len()).collect();
    order.sort_by_key(|&i| {
        (
            !matches!(needs[i].want, Want::Gpu(_)),
            std::cmp::Reverse(needs[i].mem_mb * u64::from(needs[i].tp)),
        )
    });
    let mut out: Vec<Option<Placed>> = vec![None; needs.len()];
    for i in order {
        let n = &needs[i];
        let min = match &n.want {
            Want::AnyFree(gb) if *gb > 0.0 => gb_to_mb(*gb).max(n.mem_mb),
            _ => n.mem_mb,
        };
        let placed = match &n.want {
            Want::Gpu(bdf) => match layout.iter().find(|r| &r.bdf == bdf) {
                None => Err(format!("{bdf} does not exist in this layout")),
                Some(r) if !holds(r.vram_mb, min) => Err(format!(
                    "{bdf} has {}, it needs {}",
                    gib_mb(r.vram_mb),
                    gib_mb(min)
                )),
                Some(r) if !free.iter().any(|f| f.bdf == r.bdf) => Err(format!("{bdf} is taken")),
                Some(r) => Ok(vec![r.clone()]),
            },
            Want::AnyFree(_) => {
                let k = n.tp.max(1) as usize;
                let mut fits: Vec<&LayoutRow> = free
                    .iter()
                    .copied()
                    .filter(|r| holds(r.vram_mb, min))
                    .collect();
                // Its own partitions first, then the smallest that fit.
                fits.sort_by_key(|r| (!n.prefer.contains(&r.bdf), r.vram_mb, r.gpu_id));
                if fits.len() >= k {
                    let mut got: Vec<LayoutRow> = fits[..k].iter().map(|r| (*r).clone()).collect();
                    got.sort_by_key(|r| r.gpu_id);
                    Ok(got)
                } else {
                    let largest = free.iter().map(|r| r.vram_mb).max().unwrap_or(0);
                    Err(if k > 1 {
                        format!(
                            "needs {k} free logical GPUs of {}, {} available",
                            gib_mb(min),
                            fits.len()
                        )
                    } else {
                        format!(
                            "needs {}, the largest free logical GPU has {}",
                            gib_mb(min),
                            gib_mb(largest)
                        )
                    })
                }
            }
        };
        out[i] = Some(match placed {
            Ok(to) => {
                free.retain(|f| !to.iter().any(|t| t.bdf == f.bdf));
                Placed {
                    name: n.name.clone(),
                    to,
                    reason: None,
                }
            }
            Err(reason) => Placed {
                name: n.name.clone(),
                to: vec![],
                reason: Some(reason),
            },
        });
    }
    out.into_iter().flatten().collect()
}

/// Where a registered model would start on the node as it is now (free logical GPUs only);
/// `want` overrides the registry's placement.
pub fn place_now(
    snap: &super::snapshot::Snapshot,
    spec: &super::models::ModelSpec,
    want: Option<Want>,
) -> Placed {
    let rows = super::layout::layout_rows(snap);
    let taken: Vec<String> = snap
        .processes
        .iter()
        .flat_map(|p| p.gpus.iter().filter(|u| !u.attached_only()))
        .filter_map(|u| rows.iter().find(|r| r.gpu_id == u.gpu_id))
        .map(|r| r.bdf.clone())
        .chain(owned_by_servers(&snap.models, &spec.name))
        .collect();
    let need = Need {
        name: spec.name.clone(),
        want: want.unwrap_or_else(|| spec.want.clone()),
        mem_mb: gb_to_mb(spec.memory_gb),
        tp: spec.tensor_parallel,
        prefer: vec![],
    };
    place(&[need], &rows, &taken).remove(0)
}

/// The logical GPUs (BDFs) that running model servers own, other than `except`'s: a server
/// owns its GPUs from the moment its process runs, whatever their VRAM shows (one still
/// loading its weights holds little, and picking its GPU for another model would make both
/// fail).
pub fn owned_by_servers(models: &[super::model_status::ServedModel], except: &str) -> Vec<String> {
    use super::model_status::ModelState;
    models
        .iter()
        .filter(|m| m.name != except && m.pid.is_some())
        .filter(|m| {
            matches!(
                m.state,
                ModelState::Healthy | ModelState::Starting | ModelState::Unhealthy
            )
        })
        .flat_map(|m| m.bdfs.iter().cloned())
        .collect()
}

/// The advisor on a snapshot: the registered models' needs on this node's product and
/// offered profiles (the product table's when the device's are unknown).
pub fn advise_node(snap: &super::snapshot::Snapshot) -> Result<Vec<Proposal>, String> {
    let g = snap.gpus.first().ok_or("no GPUs on this node")?;
    let product = g
        .product_key
        .as_deref()
        .and_then(super::product::by_key)
        .ok_or("partop does not know this GPU's geometry")?;
    let needs: Vec<Need> = snap
        .models
        .iter()
        .filter_map(|m| m.spec.as_ref())
        .map(|s| Need {
            name: s.name.clone(),
            want: s.want.clone(),
            mem_mb: gb_to_mb(s.memory_gb),
            tp: s.tensor_parallel,
            prefer: vec![],
        })
        .collect();
    if needs.is_empty() {
        return Err("no registered models: the advice comes from models.toml".into());
    }
    let profiles = if g.profiles.is_empty() {
        product.profiles.clone()
    } else {
        g.profiles.clone()
    };
    let bdfs: Vec<String> = snap.gpus.iter().map(|g| g.bdf.clone()).collect();
    Ok(advise(&product, &profiles, &bdfs, &needs))
}

/// One layout the advisor considered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// Compute mode on every GPU.
    pub compute: ComputeMode,
    /// Memory mode.
    pub memory: MemoryMode,
    /// Logical GPUs it gives.
    pub logical: usize,
    /// HBM of each, GB.
    pub partition_gb: u64,
    /// Where each model goes.
    pub placed: Vec<Placed>,
    /// One line for the operator.
    pub summary: String,
}

impl Proposal {
    /// Models it serves.
    pub fn fitted(&self) -> usize {
        self.placed.iter().filter(|p| !p.to.is_empty()).count()
    }
}

/// Ranks every offered uniform layout of `gpus` physical GPUs (BDFs) for `needs`: most models
/// served first, then the most logical GPUs (isolation, and room for replicas), then memory
/// local to each partition (more NPS domains, as AMD recommends CPX with NPS4). Fixed-BDF wants are treated as "any
/// free" here: the advice is about shape, and the operator edits the registry after.
pub fn advise(
    product: &Product,
    profiles: &[Profile],
    gpus: &[String],
    needs: &[Need],
) -> Vec<Proposal> {
    let needs: Vec<Need> = needs
        .iter()
        .map(|n| Need {
            want: Want::AnyFree(0.0),
            prefer: vec![],
            ..n.clone()
        })
        .collect();
    let mut out = Vec::new();
    for p in profiles {
        for &m in &p.memory {
            let mut rows = Vec::new();
            for bdf in gpus {
                for s in shapes(product, p.compute, m) {
                    #[expect(clippy::cast_possible_truncation, reason = "logical GPU counts")]
                    rows.push(LayoutRow {
                        gpu_id: rows.len() as u32,
                        bdf: format!("{bdf}.{}", s.partition_id),
                        cus: s.cus,
                        vram_mb: s.vram_share_mb,
                    });
                }
            }
            let placed = place(&needs, &rows, &[]);
            let partition_gb = rows.first().map_or(0, |r| r.vram_mb >> 10);
            let fitted = placed.iter().filter(|x| !x.to.is_empty()).count();
            let used: usize = placed.iter().map(|x| x.to.len()).sum();
            let summary = format!(
                "{}/{}: {} logical GPUs of {}; serves {fitted} of {} model(s), {} logical GPU(s) left free",
                p.compute,
                m,
                rows.len(),
                gib_mb(rows.first().map_or(0, |r| r.vram_mb)),
                needs.len(),
                rows.len() - used
            );
            out.push(Proposal {
                compute: p.compute,
                memory: m,
                logical: rows.len(),
                partition_gb,
                placed,
                summary,
            });
        }
    }
    // Ties: memory local to each partition (more NPS domains) when the GPU is split.
    out.sort_by_key(|x| {
        let split = x.compute.partitions(product.xcds) > 1;
        (
            std::cmp::Reverse(x.fitted()),
            std::cmp::Reverse(x.logical),
            std::cmp::Reverse(if split { x.memory.domains() } else { 0 }),
        )
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::model_status::{ModelState, ServedModel};
    use crate::domain::product;

    fn rows(n: u32, gb: u64) -> Vec<LayoutRow> {
        (0..n)
            .map(|i| LayoutRow {
                gpu_id: i,
                bdf: format!("0000:{:02x}:00.{}", i / 2, i % 2),
                cus: 152,
                vram_mb: gb << 10,
            })
            .collect()
    }

    fn need(name: &str, gb: f64, prefer: &[&str]) -> Need {
        Need {
            name: name.into(),
            want: Want::AnyFree(0.0),
            mem_mb: gb_to_mb(gb),
            tp: 1,
            prefer: prefer.iter().map(|s| (*s).to_string()).collect(),
        }
    }

    #[test]
    fn keeps_a_model_on_its_partition_and_best_fits_the_rest() {
        let mut l = rows(4, 96);
        l[3].vram_mb = 48 << 10;
        let p = place(
            &[need("a", 40.0, &[]), need("b", 80.0, &["0000:01:00.0"])],
            &l,
            &[],
        );
        assert_eq!(p[1].to[0].bdf, "0000:01:00.0");
        assert_eq!(
            p[0].to[0].bdf, "0000:01:00.1",
            "48.0 GiB partition is the best fit"
        );
    }

    #[test]
    fn says_why_a_model_does_not_fit() {
        let p = place(&[need("big", 150.0, &[])], &rows(8, 24), &[]);
        assert!(p[0].to.is_empty());
        assert_eq!(
            p[0].reason.as_deref(),
            Some("needs 150.0 GiB, the largest free logical GPU has 24.0 GiB")
        );
        let fixed = Need {
            want: Want::Gpu("0000:00:00.1".into()),
            ..need("x", 10.0, &[])
        };
        let p = place(&[fixed], &rows(2, 96), &["0000:00:00.1".into()]);
        assert_eq!(p[0].reason.as_deref(), Some("0000:00:00.1 is taken"));
    }

    /// Issue 29: `memory_gb = 24` holds on an MI300X's CPX partition (196,592 MiB / 8 =
    /// 23.998 GiB); the 1% tolerance is a tolerance, not a rounding: 23 GiB still refuses 24.
    #[test]
    fn sizes_compare_within_the_stated_tolerance() {
        let cpx_mb = 196_592 / 8;
        let p = place(
            &[need("m", 24.0, &[])],
            &rows(1, 0)
                .into_iter()
                .map(|r| LayoutRow {
                    vram_mb: cpx_mb,
                    ..r
                })
                .collect::<Vec<_>>(),
            &[],
        );
        assert_eq!(p[0].reason, None, "{:?}", p[0].reason);
        assert!(holds(cpx_mb, gb_to_mb(24.0)));
        assert!(!holds(23 << 10, gb_to_mb(24.0)));
        // Every whole-GiB need against partitions from need - 2 GiB to need + 2 GiB, in 16 MiB
        // steps: holds exactly when the shortfall is within 1% of the partition.
        let mut cases = 0;
        for need_gb in 1..=192u64 {
            let need_mb = need_gb << 10;
            for have_mb in (need_mb.saturating_sub(2048)..=need_mb + 2048).step_by(16) {
                #[expect(clippy::cast_precision_loss, reason = "test sizes")]
                let within = (need_mb as f64) <= have_mb as f64 * 1.01;
                assert_eq!(holds(have_mb, need_mb), within, "{need_mb} on {have_mb}");
                if have_mb >= need_mb {
                    assert!(holds(have_mb, need_mb), "{need_mb} on {have_mb}");
                }
                cases += 1;
            }
        }
        // 257 partitions per need; 193 for 1 GiB (none below 0).
        assert_eq!(cases, 191 * 257 + 193, "{cases} cases");
    }

    /// Issue 29: a server holding 64.0 GiB was written `memory_gb = 69` (GB of 10^9 bytes) or
    /// 70 (a read with its KV cache up). Every whole GiB from 1 to 256, each read exact, +0.25%
    /// and +0.5% (a server's VRAM only grows past what it reserved at load): a partition of the
    /// entry's size holds what was read, the entry is never above the read rounded up, and an
    /// exact read (or, below 100 GiB, any of them) gives that GiB.
    #[test]
    fn a_held_size_becomes_the_gib_the_hardware_gives() {
        let mut cases = 0;
        for gib in 1..=256u64 {
            for wobble in [1.0, 1.0025, 1.005] {
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss,
                    reason = "test sizes"
                )]
                let bytes = ((gib << 30) as f64 * wobble) as u64;
                let g = whole_gib_held(bytes);
                assert!(holds(g << 10, bytes >> 20), "{gib} GiB x {wobble}: {g}");
                assert!(g <= (bytes >> 30) + 1, "{gib} GiB x {wobble}: {g}");
                if wobble == 1.0 || gib < 100 {
                    assert_eq!(g, gib, "{gib} GiB x {wobble}");
                }
                cases += 1;
            }
        }
        assert_eq!(cases, 768, "{cases} cases");
        assert_eq!(whole_gib_held(0), 1);
        assert_eq!(whole_gib_held(17_500_000_000), 17, "16.3 GiB rounds up");
    }

    fn server(name: &str, state: ModelState, pid: Option<u32>, bdf: &str) -> ServedModel {
        ServedModel {
            name: name.into(),
            model: "m".into(),
            server: Some("vllm".into()),
            spec: None,
            pid,
            start_ticks: None,
            gpus: vec![0],
            bdfs: vec![bdf.into()],
            port: Some(8001),
            state,
            reason: None,
            running: None,
            waiting: None,
            kv_cache: None,
            tokens_per_sec: None,
            restarts: 0,
            log: None,
            log_tail: vec![],
            probed_ms: None,
            latency: None,
        }
    }

    /// A running server owns its GPU whatever its VRAM shows; a stopped one, or the model being
    /// started itself, does not. All 5 states, with and without a process.
    #[test]
    fn a_running_server_owns_its_gpu() {
        use ModelState as S;
        let mut cases = 0;
        for state in [
            S::Starting,
            S::Healthy,
            S::Unhealthy,
            S::Stopped,
            S::Unknown,
        ] {
            for pid in [Some(42), None] {
                let owns =
                    pid.is_some() && matches!(state, S::Starting | S::Healthy | S::Unhealthy);
                let m = [server("a", state, pid, "0000:05:00.0")];
                assert_eq!(
                    owned_by_servers(&m, "b") == vec!["0000:05:00.0".to_string()],
                    owns,
                    "{state:?} pid {pid:?}"
                );
                assert!(owned_by_servers(&m, "a").is_empty());
                cases += 1;
            }
        }
        assert_eq!(cases, 10);
    }

    #[test]
    fn advisor_picks_the_layout_for_the_mix() {
        let mi300x = product::by_key("mi300x").unwrap();
        let gpus: Vec<String> = (0..8).map(|i| format!("0000:{i:02x}:00")).collect();
        let profiles = mi300x.profiles.clone();
        // Eight 8B FP16 models (21 GB each): CPX/NPS4 gives 64 partitions of 24 GB.
        let small: Vec<Need> = (0..8).map(|i| need(&format!("s{i}"), 21.2, &[])).collect();
        let best = &advise(&mi300x, &profiles, &gpus, &small)[0];
        assert_eq!(
            (best.compute, best.memory),
            (ComputeMode::Cpx, MemoryMode::Nps4)
        );
        assert_eq!(best.fitted(), 8);
        // Two 70B FP8 (86 GB) and a 70B FP16 (170 GB): only SPX holds the FP16 one.
        let mixed = vec![
            need("a", 86.0, &[]),
            need("b", 86.0, &[]),
            need("c", 170.0, &[]),
        ];
        let best = &advise(&mi300x, &profiles, &gpus, &mixed)[0];
        assert_eq!(
            (best.compute, best.memory),
            (ComputeMode::Spx, MemoryMode::Nps1)
        );
        assert_eq!(best.fitted(), 3);
        // Only the two FP8 ones: DPX (96 GB partitions) serves them with 16 logical GPUs.
        let best = &advise(&mi300x, &profiles, &gpus, &mixed[..2])[0];
        assert_eq!(best.compute, ComputeMode::Dpx);
        assert_eq!(best.logical, 16);
    }
}
