//! The audit journal: one JSON line per mutating action (who, where, what, to whom, outcome),
//! appended with O_APPEND in a single write and fsynced, so a crash mid-write loses at most that
//! line and never corrupts earlier ones; a torn last line is reported, not fatal.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Who acted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Who {
    /// `USER` (or the uid's name).
    pub user: Option<String>,
    /// `SUDO_USER`, when run through sudo.
    pub sudo_user: Option<String>,
    /// `SSH_CONNECTION`, when over SSH.
    pub ssh_connection: Option<String>,
    /// Effective uid.
    pub uid: u32,
}

impl Who {
    /// The current actor, from the environment.
    pub fn current() -> Self {
        let uid = nix::unistd::geteuid();
        Self {
            user: std::env::var("USER").ok().or_else(|| {
                nix::unistd::User::from_uid(uid)
                    .ok()
                    .flatten()
                    .map(|u| u.name)
            }),
            sudo_user: std::env::var("SUDO_USER").ok(),
            ssh_connection: std::env::var("SSH_CONNECTION").ok(),
            uid: uid.as_raw(),
        }
    }
}

/// One journal line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// RFC 3339 time.
    pub at: String,
    /// Who.
    pub who: Who,
    /// Host.
    pub host: String,
    /// What (`kill.sigterm`, `kill.sigkill`, later `repartition.*`).
    pub action: String,
    /// Whether the node is simulated.
    #[serde(default)]
    pub simulated: bool,
    /// The targets with their details.
    pub targets: serde_json::Value,
    /// What happened.
    pub outcome: serde_json::Value,
}

impl Entry {
    /// A new entry stamped now.
    pub fn new(
        action: &str,
        simulated: bool,
        targets: serde_json::Value,
        outcome: serde_json::Value,
    ) -> Self {
        Self {
            at: crate::collect::clock::rfc3339(crate::collect::clock::now_ms()),
            who: Who::current(),
            host: crate::collect::host::hostname(),
            action: action.into(),
            simulated,
            targets,
            outcome,
        }
    }
}

/// The first step of plan `fingerprint` not journaled as done under `action` (0 when none):
/// where an interrupted apply resumes (AMD `repartition.step`, MIG `mig.step`).
pub fn resume_point(path: &Path, action: &str, fingerprint: &str) -> usize {
    let Ok((entries, _)) = read(path) else {
        return 0;
    };
    entries
        .iter()
        .filter(|e| {
            e.action == action && e.targets["fingerprint"] == fingerprint && e.outcome["ok"] == true
        })
        .filter_map(|e| e.targets["step"].as_u64())
        .max()
        .map_or(0, |s| usize::try_from(s).unwrap_or(0) + 1)
}

/// The default journal file: `$XDG_STATE_HOME/partop/journal.jsonl`.
pub fn default_path() -> PathBuf {
    crate::paths::state_dir().join("journal.jsonl")
}

/// Appends one entry durably.
pub fn append(path: &Path, e: &Entry) -> std::io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut line = serde_json::to_string(e).map_err(std::io::Error::other)?;
    line.push('\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(line.as_bytes())?;
    f.sync_all()
}

/// Reads the journal: the entries, and a note for each line that could not be read.
pub fn read(path: &Path) -> std::io::Result<(Vec<Entry>, Vec<String>)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(e),
    };
    let mut entries = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(e) => entries.push(e),
            Err(err) => bad.push(format!(
                "{}:{}: unreadable entry ({err}); kept as is",
                path.display(),
                i + 1
            )),
        }
    }
    Ok((entries, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_read_and_survive_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j/journal.jsonl");
        append(
            &p,
            &Entry::new(
                "kill.sigterm",
                true,
                serde_json::json!([{"pid": 1}]),
                serde_json::json!({"1": "sent"}),
            ),
        )
        .unwrap();
        // A crash mid-write leaves a torn line; later appends still work.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"{\"at\": \"2026")
            .unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"\n")
            .unwrap();
        append(
            &p,
            &Entry::new(
                "kill.sigkill",
                true,
                serde_json::json!([]),
                serde_json::json!({}),
            ),
        )
        .unwrap();
        let (e, bad) = read(&p).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].action, "kill.sigkill");
        assert_eq!(bad.len(), 1);
        assert!(bad[0].contains("journal.jsonl:2:"), "{bad:?}");
        assert!(e[0].who.uid == nix::unistd::geteuid().as_raw());
    }
}
