//! amd-smi version detection (`amd-smi version`), and what each version implies: the JSON family
//! and how the driver is reloaded after a memory-mode change.

use serde::{Deserialize, Serialize};

/// Which JSON family to expect (both are accepted anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Family {
    /// ROCm 6.2-6.4: top-level arrays.
    Rocm6,
    /// ROCm 7.0+: `{"gpu_data": [...]}` and the four-array partition object.
    Rocm7,
}

/// How a memory-mode change reaches the hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadMethod {
    /// 6.3/6.4: `set -M` reloads the driver itself.
    InsideSetMemory,
    /// 7.0-7.11: `amd-smi reset -r`.
    ResetReload,
    /// 7.12+: `modprobe -r amdgpu && modprobe amdgpu`.
    Modprobe,
}

/// A parsed `amd-smi version` line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmdSmiVersion {
    /// `AMDSMI Tool` (`25.4.2+aca1101`, `26.0.2+39589fda`).
    pub tool: String,
    /// Library version.
    pub library: Option<String>,
    /// ROCm version (`6.4.1`), when printed.
    pub rocm: Option<String>,
    /// amdgpu driver version (free text with the upstream driver).
    pub amdgpu: Option<String>,
}

fn major_minor(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split(|c: char| !c.is_ascii_digit());
    let a = it.next()?.parse().ok()?;
    let b = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    Some((a, b))
}

impl AmdSmiVersion {
    /// Parses the human one-liner (`AMDSMI Tool: 25.4.2+aca1101 | AMDSMI Library version: ...`),
    /// or the 7.x default-view header `AMD-SMI 26.0.2+39589fda ...`. `None` if neither matches.
    pub fn parse(text: &str) -> Option<Self> {
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with("AMDSMI Tool:") {
                let mut v = Self::default();
                for part in line.split('|') {
                    let Some((k, val)) = part.split_once(':') else {
                        continue;
                    };
                    let val = val.trim();
                    let known = (val != "N/A" && !val.is_empty()).then(|| val.to_string());
                    match k.trim() {
                        "AMDSMI Tool" => v.tool = val.to_string(),
                        "AMDSMI Library version" => v.library = known,
                        "ROCm version" => v.rocm = known,
                        "amdgpu version" => v.amdgpu = known,
                        _ => {}
                    }
                }
                return Some(v);
            }
            if let Some(rest) = line.strip_prefix("AMD-SMI ") {
                let tool = rest.split_whitespace().next()?.to_string();
                return Some(Self {
                    tool,
                    ..Self::default()
                });
            }
        }
        None
    }

    /// ROCm (major, minor): printed, or inferred from the tool version (24.x = 6.2/6.3,
    /// 25.x = 6.4, 26.x = 7.0/7.1, 27+ = newer).
    pub fn rocm_major_minor(&self) -> Option<(u32, u32)> {
        if let Some(r) = self.rocm.as_deref().and_then(major_minor) {
            return Some(r);
        }
        let (tool, minor) = major_minor(&self.tool)?;
        Some(match tool {
            0..=24 => (6, 3),
            25 => (6, 4),
            26 => (7, minor.min(1)),
            _ => (7, 12),
        })
    }

    /// The JSON family.
    pub fn family(&self) -> Family {
        match self.rocm_major_minor() {
            Some((m, _)) if m >= 7 => Family::Rocm7,
            _ => Family::Rocm6,
        }
    }

    /// How to reload the driver after `set -M`.
    pub fn reload_method(&self) -> ReloadMethod {
        match self.rocm_major_minor() {
            Some((6, _)) | None => ReloadMethod::InsideSetMemory,
            Some((7, m)) if m <= 11 => ReloadMethod::ResetReload,
            Some(_) => ReloadMethod::Modprobe,
        }
    }

    /// Short label for the header.
    pub fn label(&self) -> String {
        match &self.rocm {
            Some(r) => format!("{} (ROCm {r})", self.tool),
            None => self.tool.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_64_line() {
        let v = AmdSmiVersion::parse("AMDSMI Tool: 25.4.2+aca1101 | AMDSMI Library version: 25.4.0 | ROCm version: 6.4.1 | amdgpu version: 6.12.12 | amd_hsmp version: N/A").unwrap();
        assert_eq!(v.tool, "25.4.2+aca1101");
        assert_eq!(v.rocm.as_deref(), Some("6.4.1"));
        assert_eq!(v.family(), Family::Rocm6);
        assert_eq!(v.reload_method(), ReloadMethod::InsideSetMemory);
    }

    #[test]
    fn rocm_na_falls_back_to_tool_major() {
        let v = AmdSmiVersion::parse("AMDSMI Tool: 26.0.2+39589fda | AMDSMI Library version: 26.0.2 | ROCm version: N/A | amdgpu version: Linuxver").unwrap();
        assert_eq!(v.rocm, None);
        assert_eq!(v.family(), Family::Rocm7);
        assert_eq!(v.reload_method(), ReloadMethod::ResetReload);
        let late = AmdSmiVersion {
            tool: "27.0.0".into(),
            rocm: Some("7.13.0".into()),
            ..Default::default()
        };
        assert_eq!(late.reload_method(), ReloadMethod::Modprobe);
    }

    #[test]
    fn garbage_is_none() {
        assert!(AmdSmiVersion::parse("command not found").is_none());
    }
}
