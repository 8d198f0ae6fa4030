//! The partition managers of a Kubernetes cluster, their contracts as documented and nothing
//! more: AMD's Device Config Manager (a profile in the `gpu-config-profiles` ConfigMap,
//! validated, chosen by the node label `dcm.amd.com/gpu-config-profile`, reported in
//! `…-state` and in events) and NVIDIA's MIG manager (a mig-parted config chosen by
//! `nvidia.com/mig.config`, reported in `nvidia.com/mig.config.state`). Pure: what a profile or
//! a config asks of a node, or why it is refused. Read by both sides of the contract: the
//! simulated cluster's stand-ins (`sim::cluster` applies a profile, through the simulated
//! node's amd-smi where there is one, and writes the labels and events) and a cluster rollout's
//! planner (`domain::cluster_rollout`: the profile it writes, the capacity a config gives).

use super::mig_profiles::{MEMORY_SLICES, table_profiles};
use super::{ComputeMode, MemoryMode};
use serde::Deserialize;
use std::collections::BTreeMap;

/// DCM's ConfigMap: where it is, the key of its document.
pub const DCM_NAMESPACE: &str = "kube-amd-gpu";
pub const DCM_CONFIGMAP: &str = "default-dcm-config";
pub const DCM_KEY: &str = "config.json";
/// The taint DCM's documented flow puts on a node before a profile (its pods evicted).
pub const DCM_TAINT: &str = "amd-dcm=up:NoExecute";
/// The MIG manager's ConfigMap (the GPU operator's default).
pub const MIG_NAMESPACE: &str = "gpu-operator";
pub const MIG_CONFIGMAP: &str = "default-mig-parted-config";
pub const MIG_KEY: &str = "config.yaml";
/// The GPU every simulated NVIDIA node has (a profile table partop knows).
pub const MIG_PRODUCT: &str = "NVIDIA H100 80GB HBM3";

/// DCM's `config.json`.
#[derive(Debug, Deserialize)]
pub struct DcmConfig {
    #[serde(rename = "gpu-config-profiles", default)]
    pub profiles: BTreeMap<String, DcmProfile>,
}

/// One profile.
#[derive(Debug, Deserialize)]
pub struct DcmProfile {
    #[serde(rename = "skippedGPUs", default)]
    pub skipped: Option<Skipped>,
    #[serde(default)]
    pub profiles: Vec<DcmPart>,
}

/// GPUs a profile leaves alone.
#[derive(Debug, Deserialize)]
pub struct Skipped {
    #[serde(default)]
    pub ids: Vec<u32>,
}

/// One part of a profile: these modes on so many GPUs.
#[derive(Debug, Deserialize)]
pub struct DcmPart {
    #[serde(rename = "computePartition")]
    pub compute: String,
    #[serde(rename = "memoryPartition")]
    pub memory: String,
    #[serde(rename = "numGPUsAssigned")]
    pub gpus: u32,
}

/// Why DCM refuses or fails, with the event reason it gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The event's reason (`InvalidComputeType`, `NonExistentProfile`, …).
    pub reason: &'static str,
    /// Its message.
    pub message: String,
}

fn refuse(reason: &'static str, message: String) -> Refusal {
    Refusal { reason, message }
}

/// What a valid DCM profile asks: one compute and one memory mode for the node's GPUs (the
/// simulated node's amd-smi sets every GPU alike, so heterogeneous compute modes, which DCM
/// allows but calls "not recommended or supported", are refused here as `InvalidProfileInfo`).
///
/// # Errors
/// The profile breaks one of DCM's rules, said with DCM's event reason.
pub fn dcm_profile(
    config: &str,
    name: &str,
    node_gpus: u32,
) -> Result<(ComputeMode, MemoryMode), Refusal> {
    let c: DcmConfig = serde_json::from_str(config).map_err(|e| {
        refuse(
            "InvalidProfileInfo",
            format!("{DCM_NAMESPACE}/{DCM_CONFIGMAP} {DCM_KEY} is not DCM's format: {e}"),
        )
    })?;
    let p = c.profiles.get(name).ok_or_else(|| {
        refuse(
            "NonExistentProfile",
            format!("profile {name:?} is not in {DCM_NAMESPACE}/{DCM_CONFIGMAP}"),
        )
    })?;
    if p.profiles.is_empty() {
        return Err(refuse(
            "InvalidProfileInfo",
            format!("profile {name:?} has no partitions"),
        ));
    }
    let mut modes = Vec::new();
    for part in &p.profiles {
        let cm: ComputeMode = part.compute.parse().map_err(|_| {
            refuse(
                "InvalidComputeType",
                format!("profile {name:?}: compute partition {:?}", part.compute),
            )
        })?;
        let mm: MemoryMode = part.memory.parse().map_err(|_| {
            refuse(
                "InvalidMemoryType",
                format!("profile {name:?}: memory partition {:?}", part.memory),
            )
        })?;
        modes.push((cm, mm));
    }
    if modes.iter().any(|m| m.1 != modes[0].1) {
        return Err(refuse(
            "InvalidProfileInfo",
            format!("profile {name:?} mixes memory partitions: one memory mode per profile"),
        ));
    }
    if modes.iter().any(|m| m.0 != modes[0].0) {
        return Err(refuse(
            "InvalidProfileInfo",
            format!(
                "profile {name:?} mixes compute partitions: not recommended or supported by DCM, not simulated"
            ),
        ));
    }
    let skipped = p.skipped.as_ref().map_or(0, |s| s.ids.len());
    let assigned: u64 = p.profiles.iter().map(|x| u64::from(x.gpus)).sum();
    if assigned + skipped as u64 != u64::from(node_gpus) {
        return Err(refuse(
            "InvalidProfileInfo",
            format!(
                "profile {name:?} assigns {assigned} GPU(s) and skips {skipped}: the node has {node_gpus}"
            ),
        ));
    }
    if skipped > 0 {
        return Err(refuse(
            "InvalidProfileInfo",
            format!("profile {name:?} skips GPUs: the simulated node sets every GPU alike"),
        ));
    }
    Ok(modes[0])
}

/// A mig-parted config file (`version: v1`).
#[derive(Debug, Deserialize)]
pub struct MigParted {
    pub version: String,
    #[serde(rename = "mig-configs")]
    pub configs: BTreeMap<String, Vec<MigEntry>>,
}

/// One entry of a config: which devices, MIG on or off, which instances.
#[derive(Debug, Deserialize)]
pub struct MigEntry {
    /// `all`, or a list of device indices.
    pub devices: serde_json::Value,
    #[serde(rename = "mig-enabled")]
    pub enabled: bool,
    #[serde(rename = "mig-devices", default)]
    pub devices_per_gpu: BTreeMap<String, u32>,
}

/// Per GPU: None with MIG off, else its instances (profile name -> how many).
pub type MigLayout = Vec<Option<BTreeMap<String, u32>>>;

/// What a MIG config gives a node of `gpus` GPUs, as the device plugin's `mixed` strategy
/// advertises it: `nvidia.com/gpu` for GPUs with MIG off, `nvidia.com/mig-<profile>` for
/// each instance profile.
///
/// # Errors
/// As [`mig_layout`].
pub fn mig_config(text: &str, name: &str, gpus: u32) -> Result<BTreeMap<String, i64>, String> {
    mig_layout(text, name, gpus).map(|l| mig_resources(&l))
}

/// The resources a layout advertises under the `mixed` strategy.
pub fn mig_resources(layout: &MigLayout) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for g in layout {
        match g {
            None => *out.entry("nvidia.com/gpu".into()).or_default() += 1,
            Some(m) => {
                for (p, n) in m {
                    *out.entry(format!("nvidia.com/mig-{p}")).or_default() += i64::from(*n);
                }
            }
        }
    }
    out
}

/// What a MIG config asks of each of a node's `gpus` GPUs.
///
/// # Errors
/// The config is absent, not mig-parted's format, names a profile the GPU does not offer, or
/// asks more of a GPU than its seven compute and eight memory slices.
pub fn mig_layout(text: &str, name: &str, gpus: u32) -> Result<MigLayout, String> {
    let c: MigParted = serde_saphyr::from_str(text).map_err(|e| {
        format!("{MIG_NAMESPACE}/{MIG_CONFIGMAP} {MIG_KEY}: not mig-parted's format: {e}")
    })?;
    if c.version != "v1" {
        return Err(format!(
            "mig-parted config version {:?}: only v1 is known",
            c.version
        ));
    }
    let entries = c
        .configs
        .get(name)
        .ok_or_else(|| format!("config {name:?} is not in {MIG_NAMESPACE}/{MIG_CONFIGMAP}"))?;
    let table = table_profiles(MIG_PRODUCT).unwrap_or_default();
    let mut per_gpu: Vec<Option<&MigEntry>> = vec![None; gpus as usize];
    for e in entries {
        let ids: Vec<usize> = match &e.devices {
            serde_json::Value::String(s) if s == "all" => (0..gpus as usize).collect(),
            serde_json::Value::Array(a) => a
                .iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|i| usize::try_from(i).ok())
                        .filter(|i| *i < gpus as usize)
                        .ok_or_else(|| {
                            format!("config {name:?}: device {v} is not one of the node's {gpus}")
                        })
                })
                .collect::<Result<_, _>>()?,
            other => {
                return Err(format!(
                    "config {name:?}: devices {other}: `all` or a list of indices"
                ));
            }
        };
        for i in ids {
            per_gpu[i] = Some(e);
        }
    }
    let mut out: MigLayout = Vec::new();
    for e in per_gpu {
        let Some(e) = e.filter(|e| e.enabled) else {
            out.push(None);
            continue;
        };
        let (mut cs, mut ms) = (0, 0);
        for (p, n) in &e.devices_per_gpu {
            let prof = table
                .iter()
                .find(|x| &x.name == p)
                .ok_or_else(|| format!("config {name:?}: {MIG_PRODUCT} has no MIG profile {p}"))?;
            if *n > prof.max_instances {
                return Err(format!(
                    "config {name:?}: {n} × {p}, at most {} on one GPU",
                    prof.max_instances
                ));
            }
            cs += prof.compute_slices * n;
            ms += prof.memory_slices * n;
        }
        if cs > 7 || ms > MEMORY_SLICES {
            return Err(format!(
                "config {name:?}: {cs} compute and {ms} memory slices on one GPU, of 7 and {MEMORY_SLICES}"
            ));
        }
        out.push(Some(e.devices_per_gpu.clone()));
    }
    Ok(out)
}

/// The ConfigMaps a simulated cluster starts with when none is there: a few DCM profiles and
/// mig-parted configs, enough to rehearse with (an operator's own replace them).
pub fn default_dcm_config(gpus: u32) -> String {
    let p = |c: &str, m: &str| {
        serde_json::json!({"skippedGPUs": {"ids": []},
            "profiles": [{"computePartition": c, "memoryPartition": m, "numGPUsAssigned": gpus}]})
    };
    serde_json::json!({
        "gpu-config-profiles": {
            "spx-nps1": p("SPX", "NPS1"),
            "dpx-nps2": p("DPX", "NPS2"),
            "cpx-nps1": p("CPX", "NPS1"),
            "cpx-nps4": p("CPX", "NPS4"),
        },
        "gpuClientSystemdServices": {"names": ["amd-metrics-exporter"]},
    })
    .to_string()
}

/// See [`default_dcm_config`].
pub const DEFAULT_MIG_CONFIG: &str = "version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        \"1g.10gb\": 7
  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        \"3g.40gb\": 2
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        \"1g.10gb\": 2
        \"2g.20gb\": 1
        \"3g.40gb\": 1
";

#[cfg(test)]
mod tests {
    use super::*;

    /// Every DCM rule, each profile a case: valid, absent, bad compute, bad memory, mixed
    /// memory, mixed compute, wrong GPU count, skipped GPUs, not JSON.
    #[test]
    fn dcm_profiles_follow_the_documented_rules() {
        let part = |c: &str, m: &str, n: u32| serde_json::json!({"computePartition": c, "memoryPartition": m, "numGPUsAssigned": n});
        let cfg = serde_json::json!({"gpu-config-profiles": {
            "ok": {"profiles": [part("CPX", "NPS4", 8)]},
            "bad-compute": {"profiles": [part("HPX", "NPS4", 8)]},
            "bad-memory": {"profiles": [part("CPX", "NPS3", 8)]},
            "mixed-memory": {"profiles": [part("CPX", "NPS4", 4), part("CPX", "NPS1", 4)]},
            "mixed-compute": {"profiles": [part("CPX", "NPS1", 4), part("SPX", "NPS1", 4)]},
            "short": {"profiles": [part("CPX", "NPS4", 6)]},
            "skips": {"skippedGPUs": {"ids": [0]}, "profiles": [part("CPX", "NPS4", 7)]},
            "empty": {"profiles": []},
        }})
        .to_string();
        type Judged = Result<(ComputeMode, MemoryMode), &'static str>;
        let cases: [(&str, Judged); 9] = [
            ("ok", Ok((ComputeMode::Cpx, MemoryMode::Nps4))),
            ("absent", Err("NonExistentProfile")),
            ("bad-compute", Err("InvalidComputeType")),
            ("bad-memory", Err("InvalidMemoryType")),
            ("mixed-memory", Err("InvalidProfileInfo")),
            ("mixed-compute", Err("InvalidProfileInfo")),
            ("short", Err("InvalidProfileInfo")),
            ("skips", Err("InvalidProfileInfo")),
            ("empty", Err("InvalidProfileInfo")),
        ];
        for (name, want) in &cases {
            let got = dcm_profile(&cfg, name, 8).map_err(|r| r.reason);
            assert_eq!(&got, want, "{name}");
        }
        assert_eq!(
            dcm_profile("{not json", "ok", 8).map_err(|r| r.reason),
            Err("InvalidProfileInfo")
        );
        assert!(dcm_profile(&default_dcm_config(8), "cpx-nps4", 8).is_ok());
        eprintln!("{} DCM profiles judged", cases.len() + 1);
    }

    #[test]
    fn mig_configs_give_the_mixed_strategy_s_resources() {
        let r = mig_config(DEFAULT_MIG_CONFIG, "all-1g.10gb", 8).unwrap();
        assert_eq!(r, [("nvidia.com/mig-1g.10gb".to_string(), 56)].into());
        let r = mig_config(DEFAULT_MIG_CONFIG, "all-disabled", 8).unwrap();
        assert_eq!(r, [("nvidia.com/gpu".to_string(), 8)].into());
        let r = mig_config(DEFAULT_MIG_CONFIG, "all-balanced", 2).unwrap();
        assert_eq!(r.get("nvidia.com/mig-2g.20gb"), Some(&2));
        assert!(mig_config(DEFAULT_MIG_CONFIG, "absent", 8).is_err());
        let over = "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"3g.40gb\": 3\n";
        assert!(mig_config(over, "x", 8).unwrap_err().contains("at most 2"));
        let unknown = "version: v1\nmig-configs:\n  x:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices:\n        \"9g.1tb\": 1\n";
        assert!(
            mig_config(unknown, "x", 8)
                .unwrap_err()
                .contains("no MIG profile")
        );
        let part = "version: v1\nmig-configs:\n  x:\n    - devices: [0, 1]\n      mig-enabled: true\n      mig-devices:\n        \"7g.80gb\": 1\n";
        let r = mig_config(part, "x", 8).unwrap();
        assert_eq!(r.get("nvidia.com/gpu"), Some(&6));
        assert_eq!(r.get("nvidia.com/mig-7g.80gb"), Some(&2));
        assert!(mig_config("{{{", "x", 8).is_err());
    }
}
