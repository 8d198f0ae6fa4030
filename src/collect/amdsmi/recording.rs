//! Recorded nodes: every amd-smi output partop reads, kept verbatim in one JSON file, with the
//! node's partition files. `partop record` writes one; `--replay FILE` reads snapshots from it
//! through the same parsers as a live node; `partop sim start FILE` builds a simulated node
//! from it, so a bug report or a rehearsal can use the operator's own node.

use super::error::AmdSmiError;
use super::runner::{RawOutput, Runner};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    /// Standard output, verbatim.
    pub stdout: String,
    /// Standard error, verbatim.
    #[serde(default)]
    pub stderr: String,
    /// Exit status.
    #[serde(default)]
    pub code: Option<i32>,
}

/// A recorded node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recording {
    /// File format.
    pub format: u32,
    /// What wrote it.
    pub recorder: String,
    /// Host it was taken on.
    pub host: String,
    /// When (RFC 3339).
    pub recorded_at: String,
    /// amd-smi outputs keyed by their arguments (`metric -u -p -t -m --json -g all`).
    pub outputs: BTreeMap<String, Recorded>,
    /// Partition files from sysfs (path → content), where readable.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// What /proc said about each GPU process (command line, user, start, owner).
    #[serde(default)]
    pub processes: BTreeMap<u32, ProcFacts>,
}

/// The /proc facts of one process, as recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcFacts {
    /// Full command line.
    pub command: Option<String>,
    /// User.
    pub user: Option<String>,
    /// Parent.
    pub ppid: Option<u32>,
    /// Start, ms since epoch.
    pub started_at_ms: Option<u64>,
    /// Container id.
    pub container_id: Option<String>,
    /// systemd unit.
    pub systemd_unit: Option<String>,
    /// Kubernetes pod UID.
    pub k8s_pod_uid: Option<String>,
}

impl ProcFacts {
    /// Takes the facts from an enriched process.
    pub fn of(p: &crate::domain::Process) -> Self {
        Self {
            command: p.command.clone(),
            user: p.user.clone(),
            ppid: p.ppid,
            started_at_ms: p.started_at_ms,
            container_id: p.container_id.clone(),
            systemd_unit: p.systemd_unit.clone(),
            k8s_pod_uid: p.k8s_pod_uid.clone(),
        }
    }

    /// Puts them back on a replayed process, marked as recorded.
    pub fn apply(&self, p: &mut crate::domain::Process) {
        p.command.clone_from(&self.command);
        p.user.clone_from(&self.user);
        p.ppid = self.ppid;
        p.started_at_ms = self.started_at_ms;
        p.container_id.clone_from(&self.container_id);
        p.systemd_unit.clone_from(&self.systemd_unit);
        p.k8s_pod_uid.clone_from(&self.k8s_pod_uid);
        for k in [
            "command",
            "user",
            "ppid",
            "started_at_ms",
            "container_id",
            "systemd_unit",
            "k8s_pod_uid",
        ] {
            crate::domain::provenance::note(
                &mut p.provenance,
                k,
                crate::domain::SourceKind::Procfs,
                "/proc (recorded)",
                0,
                None,
            );
        }
    }
}

/// Recording file problems.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// Unreadable.
    #[error("{path}: {error}")]
    Io {
        /// Path.
        path: String,
        /// Why.
        error: String,
    },
    /// Not a recording.
    #[error("{path}: not a partop recording ({error}); make one with `partop record --out FILE`")]
    Format {
        /// Path.
        path: String,
        /// Why.
        error: String,
    },
}

impl Recording {
    /// An empty recording.
    pub fn new(host: String) -> Self {
        Self {
            format: 1,
            recorder: format!("partop {}", env!("CARGO_PKG_VERSION")),
            host,
            recorded_at: crate::collect::clock::rfc3339(crate::collect::clock::now_ms()),
            ..Self::default()
        }
    }

    /// Keeps one output.
    pub fn insert(&mut self, args: &[&str], out: &RawOutput) {
        self.outputs.insert(
            args.join(" "),
            Recorded {
                stdout: out.stdout.clone(),
                stderr: out.stderr.clone(),
                code: out.code,
            },
        );
    }

    /// Reads a recording file.
    pub fn load(path: &Path) -> Result<Self, RecordingError> {
        let p = path.display().to_string();
        let text =
            crate::collect::small_file::operator_text(path).map_err(|e| RecordingError::Io {
                path: p.clone(),
                error: e.to_string(),
            })?;
        let r: Self = serde_json::from_str(&text).map_err(|e| RecordingError::Format {
            path: p.clone(),
            error: e.to_string(),
        })?;
        if r.format != 1 {
            return Err(RecordingError::Format {
                path: p,
                error: format!("format {} is not supported", r.format),
            });
        }
        Ok(r)
    }

    /// Reads the partition files under `/sys/bus/pci/devices` that exist on this host.
    pub fn add_partition_files(&mut self, sys: &Path) {
        let Ok(devs) = std::fs::read_dir(sys.join("bus/pci/devices")) else {
            return;
        };
        for d in devs.flatten() {
            for f in [
                "current_compute_partition",
                "available_compute_partition",
                "current_memory_partition",
                "available_memory_partition",
            ] {
                let p = d.path().join(f);
                if let Ok(t) = crate::collect::small_file::text(&p) {
                    self.files.insert(p.display().to_string(), t);
                }
            }
        }
    }
}

/// Where amd-smi output comes from.
#[derive(Debug, Clone)]
pub enum CommandSource {
    /// Running the tool.
    Live(Runner),
    /// A recording.
    Replay(Arc<Recording>),
}

impl CommandSource {
    /// One call.
    pub async fn call(&self, args: &[&str]) -> Result<RawOutput, AmdSmiError> {
        match self {
            Self::Live(r) => r.run(args).await,
            Self::Replay(rec) => {
                let key = args.join(" ");
                let r = rec
                    .outputs
                    .get(&key)
                    .ok_or_else(|| AmdSmiError::NotRecorded {
                        command: format!("amd-smi {key}"),
                    })?;
                Ok(RawOutput {
                    command: format!("amd-smi {key} (recorded)"),
                    code: r.code,
                    stdout: r.stdout.clone(),
                    stderr: r.stderr.clone(),
                    took: Duration::ZERO,
                })
            }
        }
    }
}
