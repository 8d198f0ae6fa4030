//! One merge policy for a node read two ways, by the kernel and by amd-smi. Whichever reader ran
//! this tick gives the layout (which GPUs and partitions exist, their modes) and the process
//! list; for each value both can give, [`PREFER`] names the reader whose value is taken when it
//! has one, the other's filling in when it has none. The kernel wins what changes (power,
//! temperatures, per-partition busy, engine use): its read is newer and, for busy on secondary
//! partitions, the only one. amd-smi wins what only the firmware knows well (market name,
//! serial, slot, hive, the profiles and memory modes offered, partition UUIDs). Provenance
//! follows the value, so each shows where and when it was read.
//!
//! Kernel first merges amd-smi's last identity read into each kernel sample; amd-smi every tick
//! (`partop record`) merges the kernel's sample into amd-smi's. Both go through [`merge`].

use crate::domain::provenance::Provenance;
use crate::domain::snapshot::Snapshot;

/// A reader of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// sysfs, KFD, fdinfo, `gpu_metrics`.
    Kernel,
    /// The amd-smi CLI.
    AmdSmi,
}

/// For each value both readers can give: whose is taken when it has one.
pub const PREFER: &[(&str, Reader)] = &[
    // A physical GPU.
    ("product", Reader::AmdSmi),
    ("product_key", Reader::Kernel),
    ("serial", Reader::AmdSmi),
    ("oam_id", Reader::AmdSmi),
    ("hive", Reader::AmdSmi),
    ("profiles", Reader::AmdSmi),
    ("memory_caps", Reader::AmdSmi),
    ("power_cap_watts", Reader::Kernel),
    ("power_watts", Reader::Kernel),
    ("hotspot_celsius", Reader::Kernel),
    ("mem_celsius", Reader::Kernel),
    ("vbios_version", Reader::AmdSmi),
    ("driver_version", Reader::Kernel),
    ("gfx_clocks_mhz", Reader::Kernel),
    ("counters", Reader::Kernel),
    // A logical GPU.
    ("uuid", Reader::AmdSmi),
    ("profile", Reader::AmdSmi),
    ("gfx_busy_percent", Reader::Kernel),
    ("xcc_busy_percent", Reader::Kernel),
    ("kfd_id", Reader::Kernel),
    // A process on a GPU.
    ("engine_percent", Reader::Kernel),
    ("gtt_bytes", Reader::AmdSmi),
    // The node: how the driver is reloaded depends on the amd-smi version.
    ("reload", Reader::AmdSmi),
];

/// Whose value `field` takes (the kernel's for a field not in the table: it is newer).
pub fn prefer(field: &str) -> Reader {
    PREFER
        .iter()
        .find(|(f, _)| *f == field)
        .map_or(Reader::Kernel, |(_, r)| *r)
}

/// A value that may be missing.
trait Value {
    fn present(&self) -> bool;
}

impl<T> Value for Option<T> {
    fn present(&self) -> bool {
        self.is_some()
    }
}

impl Value for String {
    fn present(&self) -> bool {
        !self.is_empty()
    }
}

impl<T> Value for Vec<T> {
    fn present(&self) -> bool {
        !self.is_empty()
    }
}

impl Value for crate::domain::snapshot::DeviceCounters {
    fn present(&self) -> bool {
        !self.is_empty()
    }
}

impl<K, V> Value for std::collections::BTreeMap<K, V> {
    fn present(&self) -> bool {
        !self.is_empty()
    }
}

/// One field of a merge: the side of `base` (read by `base_is`) and of the other reader.
struct Field<'a, T> {
    name: &'static str,
    base: &'a mut T,
    other: &'a T,
}

/// Takes the other reader's value of `f` where the policy says so; true when it did.
fn take<T: Value + Clone>(base_is: Reader, f: Field<'_, T>) -> bool {
    let wanted = if prefer(f.name) == base_is {
        !f.base.present()
    } else {
        true
    };
    if wanted && f.other.present() {
        f.base.clone_from(f.other);
        true
    } else {
        false
    }
}

/// Like [`take`], moving the value's provenance with it.
fn take_traced<T: Value + Clone>(
    base_is: Reader,
    f: Field<'_, T>,
    base_prov: &mut Provenance,
    other_prov: &Provenance,
) {
    let name = f.name;
    if take(base_is, f) {
        match other_prov.get(name) {
            Some(o) => {
                base_prov.insert(name.into(), o.clone());
            }
            None => {
                base_prov.remove(name);
            }
        }
    }
}

/// Merges `other` into `base` (read this tick by `base_is`), matching GPUs and partitions by
/// BDF and processes by pid. Sources are left to the caller.
pub fn merge(base: &mut Snapshot, base_is: Reader, other: &Snapshot) {
    // Each named field of `$b` taken from `$o` by the policy; `traced` moves provenance too.
    macro_rules! traced {
        ($b:expr, $o:expr; $($f:ident),+) => {$(
            take_traced(
                base_is,
                Field { name: stringify!($f), base: &mut $b.$f, other: &$o.$f },
                &mut $b.provenance,
                &$o.provenance,
            );
        )+};
    }
    macro_rules! plain {
        ($b:expr, $o:expr; $($f:ident),+) => {$(
            take(base_is, Field { name: stringify!($f), base: &mut $b.$f, other: &$o.$f });
        )+};
    }
    for g in &mut base.gpus {
        let Some(og) = other.gpus.iter().find(|x| x.bdf == g.bdf) else {
            continue;
        };
        traced!(g, og; product, product_key, serial, oam_id, hive, profiles, memory_caps,
            power_cap_watts, power_watts, hotspot_celsius, mem_celsius);
        plain!(g, og; vbios_version, driver_version, gfx_clocks_mhz, counters);
        for l in &mut g.partitions {
            let Some(ol) = og.partitions.iter().find(|x| x.bdf == l.bdf) else {
                continue;
            };
            traced!(l, ol; uuid, profile, gfx_busy_percent, kfd_id);
            plain!(l, ol; xcc_busy_percent);
        }
    }
    for p in &mut base.processes {
        let Some(op) = other.processes.iter().find(|x| x.pid == p.pid) else {
            continue;
        };
        for u in &mut p.gpus {
            let Some(ou) = op.gpus.iter().find(|x| x.gpu_id == u.gpu_id) else {
                continue;
            };
            plain!(u, ou; engine_percent, gtt_bytes);
        }
    }
    plain!(base, other; reload);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::snapshot::{LogicalGpu, PhysicalGpu};

    fn node(product: &str, power: Option<f64>, busy: Option<f64>, uuid: Option<&str>) -> Snapshot {
        Snapshot {
            gpus: vec![PhysicalGpu {
                bdf: "0000:05:00.0".into(),
                product: product.into(),
                power_watts: power,
                partitions: vec![LogicalGpu {
                    bdf: "0000:05:00.0".into(),
                    gfx_busy_percent: busy,
                    uuid: uuid.map(Into::into),
                    ..LogicalGpu::default()
                }],
                ..PhysicalGpu::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn the_same_policy_holds_whichever_reader_is_the_base() {
        let kernel = node("", Some(312.0), Some(98.0), None);
        let amd = node("AMD Instinct MI300X", Some(300.0), None, Some("uuid-1"));
        let mut k = kernel.clone();
        merge(&mut k, Reader::Kernel, &amd);
        let mut a = amd.clone();
        merge(&mut a, Reader::AmdSmi, &kernel);
        for s in [&k, &a] {
            let g = &s.gpus[0];
            assert_eq!(g.product, "AMD Instinct MI300X", "amd-smi's market name");
            assert_eq!(g.power_watts, Some(312.0), "the kernel's power");
            assert_eq!(g.partitions[0].gfx_busy_percent, Some(98.0));
            assert_eq!(g.partitions[0].uuid.as_deref(), Some("uuid-1"));
        }
    }

    #[test]
    fn the_other_reader_fills_a_missing_value_and_nothing_is_invented() {
        let kernel = node("", None, None, None);
        let amd = node("MI300X", Some(300.0), None, None);
        let mut k = kernel;
        merge(&mut k, Reader::Kernel, &amd);
        assert_eq!(k.gpus[0].power_watts, Some(300.0), "filled from amd-smi");
        assert_eq!(k.gpus[0].partitions[0].gfx_busy_percent, None);
        assert_eq!(k.gpus[0].partitions[0].uuid, None);
    }

    #[test]
    fn what_only_the_kernel_reads_survives_an_amd_smi_base() {
        // `partop record` and `--source amd-smi` take amd-smi as the base: the kernel's
        // per-XCC busy, clocks, counters and versions still reach the exporter.
        let mut a = node("MI300X", Some(300.0), None, Some("u"));
        let mut k = node("", Some(310.0), Some(50.0), None);
        k.gpus[0].vbios_version = Some("113-M3000100-103".into());
        k.gpus[0].driver_version = Some("6.14.14".into());
        k.gpus[0].gfx_clocks_mhz = vec![2100; 8];
        k.gpus[0].counters.ecc_correctable = Some(3);
        k.gpus[0].partitions[0].xcc_busy_percent = vec![50.0; 8];
        merge(&mut a, Reader::AmdSmi, &k);
        let g = &a.gpus[0];
        assert_eq!(g.vbios_version.as_deref(), Some("113-M3000100-103"));
        assert_eq!(g.driver_version.as_deref(), Some("6.14.14"));
        assert_eq!(g.gfx_clocks_mhz.len(), 8);
        assert_eq!(g.counters.ecc_correctable, Some(3));
        assert_eq!(g.partitions[0].xcc_busy_percent.len(), 8);
        assert_eq!(g.partitions[0].uuid.as_deref(), Some("u"));
    }

    #[test]
    fn every_field_has_one_owner() {
        let mut names: Vec<&str> = PREFER.iter().map(|(f, _)| *f).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len(), "a field named twice in PREFER");
    }
}
