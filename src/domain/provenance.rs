//! Where each value came from, when, and why it is missing. Every measured field of the model
//! has an [`Origin`] in its entity's [`Provenance`] map, so no screen ever shows a number (or an
//! N/A) without being able to say where it came from.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The kind of source a value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// The amd-smi CLI (JSON output).
    AmdSmi,
    /// Kernel sysfs / KFD files.
    Sysfs,
    /// /proc.
    Procfs,
    /// partop's built-in product table (used only where the device cannot be asked).
    ProductTable,
    /// Computed by partop from other values (named in `detail`).
    Derived,
    /// Inherited from the primary partition of the same physical GPU.
    Primary,
    /// NVIDIA: NVML or nvidia-smi (named in `detail`).
    Nvidia,
}

/// Why a value is missing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason", content = "detail")]
pub enum Missing {
    /// Device-wide values exist only on the primary partition (XCP 0).
    SecondaryPartition,
    /// Reading it needs root (or the video/render groups).
    NeedsRoot,
    /// Another user's process: its open files (fd, fdinfo, environ) need root or
    /// CAP_SYS_PTRACE.
    OtherUsersFiles,
    /// This amd-smi version does not report it.
    NotReported,
    /// The tool reported "N/A".
    NotAvailable,
    /// The read failed (the error text).
    ReadFailed(String),
    /// Does not apply here (the text says why, e.g. "not in a container").
    NotApplicable(String),
    /// The source reported a value no hardware can have (NaN, negative, absurd).
    OutOfRange(String),
}

impl Missing {
    /// One line for the detail view.
    pub fn explain(&self) -> String {
        match self {
            Self::SecondaryPartition => {
                "device-wide value: shown on the primary partition only".to_string()
            }
            Self::NeedsRoot => "needs root (or membership of the video/render groups)".into(),
            Self::OtherUsersFiles => {
                "another user's process: its open files need root (or CAP_SYS_PTRACE)".into()
            }
            Self::NotReported => "not reported by this amd-smi version".into(),
            Self::NotAvailable => "the tool reported N/A".into(),
            Self::ReadFailed(e) => format!("read failed: {e}"),
            Self::NotApplicable(why) => why.clone(),
            Self::OutOfRange(why) => format!("not shown: {why}"),
        }
    }
}

/// The provenance of one field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Origin {
    /// Source kind.
    pub source: SourceKind,
    /// The command, file or rule it came from (`"amd-smi metric -m"`, a sysfs path).
    pub detail: String,
    /// When it was read, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Set when the value is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<Missing>,
}

/// Field name → origin, for one entity.
pub type Provenance = BTreeMap<String, Origin>;

/// Records a value's origin (present or missing) under `field`.
pub fn note(
    prov: &mut Provenance,
    field: &str,
    source: SourceKind,
    detail: &str,
    at_ms: u64,
    missing: Option<Missing>,
) {
    prov.insert(
        field.to_string(),
        Origin {
            source,
            detail: detail.to_string(),
            at_ms,
            missing,
        },
    );
}
