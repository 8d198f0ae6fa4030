//! The audit journal: one JSON line per mutating action (who, where, what, to whom, outcome),
//! appended with O_APPEND in a single write and fsynced. Journal first: every executor writes
//! its entry *before* it acts and refuses to act when that write fails, so nothing happens that
//! the journal does not hold. A torn last line (a crash mid-write) is closed with a newline
//! before the next append, so it never swallows the next entry; the reader skips torn and
//! non-UTF-8 lines with a warning and keeps everything else.

use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Who acted: the real uid and its name from the system's user database. `SUDO_USER` and
/// `SSH_CONNECTION` are environment variables anyone can set, so they are kept only as extra,
/// labelled fields, never as the actor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Who {
    /// The real uid's name from the user database (None when it has no entry).
    pub user: Option<String>,
    /// `SUDO_USER` as the environment claims it (unverified).
    pub sudo_user: Option<String>,
    /// `SSH_CONNECTION` as the environment claims it (unverified).
    pub ssh_connection: Option<String>,
    /// Real uid.
    pub uid: u32,
    /// Effective uid, when it differs from the real one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub euid: Option<u32>,
}

impl Who {
    /// The current actor: the process's real uid and its passwd name.
    pub fn current() -> Self {
        let uid = nix::unistd::getuid();
        let euid = nix::unistd::geteuid();
        Self {
            user: nix::unistd::User::from_uid(uid)
                .ok()
                .flatten()
                .map(|u| u.name),
            sudo_user: std::env::var("SUDO_USER")
                .ok()
                .map(|s| crate::domain::text::escape_controls(&s).into_owned()),
            ssh_connection: std::env::var("SSH_CONNECTION")
                .ok()
                .map(|s| crate::domain::text::escape_controls(&s).into_owned()),
            uid: uid.as_raw(),
            euid: (euid != uid).then_some(euid.as_raw()),
        }
    }

    /// How the journal shows the actor: the system's name, with the unverified claims labelled.
    pub fn describe(&self) -> String {
        let mut s = self
            .user
            .clone()
            .unwrap_or_else(|| format!("uid {}", self.uid));
        if let Some(u) = &self.sudo_user {
            s.push_str(&format!(" (SUDO_USER={u})"));
        }
        if let Some(c) = &self.ssh_connection {
            s.push_str(&format!(
                " (ssh from {})",
                c.split_whitespace().next().unwrap_or(c)
            ));
        }
        s
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
    /// What (`kill.sigterm`, `repartition.step`, …).
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

/// A journal that could not be written: the action it was for did not happen.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot write the audit journal {path}: {error}. Nothing was done: partop acts only after journaling. Free space or fix the permissions of that file, or choose another with `journal = \"…\"` in config.toml"
)]
pub struct JournalError {
    /// The file.
    pub path: String,
    /// The cause.
    pub error: String,
}

/// A new run id: each apply run journals its steps under its own id, so a resume continues
/// that run only (plans with the same fingerprint at different times stay apart).
pub fn new_run_id() -> String {
    let seed = format!(
        "{}:{}:{:?}",
        crate::collect::clock::now_ms(),
        std::process::id(),
        std::time::Instant::now()
    );
    crate::domain::fingerprint::fnv(&seed)[..12].to_string()
}

/// Appends one entry durably (written in one `write`, then fsynced). A file whose last line was
/// torn gets a newline first, so the torn fragment stays a line of its own.
pub fn append(path: &Path, e: &Entry) -> Result<(), JournalError> {
    let err = |error: std::io::Error| JournalError {
        path: path.display().to_string(),
        error: error.to_string(),
    };
    if let Some(d) = path.parent()
        && !d.as_os_str().is_empty()
    {
        std::fs::create_dir_all(d).map_err(err)?;
    }
    let mut line = serde_json::to_string(e).map_err(|x| err(std::io::Error::other(x)))?;
    line.push('\n');
    // Never through a symlink or into a FIFO, a device or a hard link (journal first: a
    // refused journal means nothing is done).
    let mut f = crate::exec::safe_file::append(path, true).map_err(err)?;
    if ends_torn(&mut f) {
        line.insert(0, '\n');
    }
    f.write_all(line.as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)
}

/// Whether the file's last byte is something other than a newline (a torn line).
fn ends_torn(f: &mut std::fs::File) -> bool {
    let Ok(end) = f.seek(SeekFrom::End(0)) else {
        return false;
    };
    if end == 0 || f.seek(SeekFrom::Start(end - 1)).is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    f.read_exact(&mut b).is_ok() && b[0] != b'\n'
}

/// Reads the journal: the entries, and a warning for each line that could not be read (torn,
/// not UTF-8, not an entry). One bad line never hides another line.
pub fn read(path: &Path) -> std::io::Result<(Vec<Entry>, Vec<String>)> {
    // Only a regular file is read, bounded: a device (/dev/zero, /dev/full) or a FIFO would
    // never end.
    let bytes = match crate::collect::small_file::operator_bytes(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("{}: {e}; it cannot be read as a journal", path.display()),
            ));
        }
    };
    Ok(parse(&path.display().to_string(), &bytes))
}

/// Parses journal bytes (see [`read`]).
pub fn parse(origin: &str, bytes: &[u8]) -> (Vec<Entry>, Vec<String>) {
    let mut entries = Vec::new();
    let mut bad = Vec::new();
    for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        let Ok(line) = std::str::from_utf8(raw) else {
            bad.push(format!(
                "{origin}:{}: skipped a line that is not UTF-8 ({} bytes)",
                i + 1,
                raw.len()
            ));
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Entry>(line) {
            Ok(mut e) => {
                // A journal anyone could edit is outside text when shown (`partop journal`,
                // the monitor's Journal view): escaped like every other.
                if crate::domain::text::json_has_controls_besides_newlines(line) {
                    let _ = crate::domain::text::escape_all(&mut e);
                }
                entries.push(e);
            }
            Err(err) => {
                // A line written by an older partop after a torn fragment holds the fragment
                // and then a whole entry: keep the entry.
                let recovered = line
                    .rfind("{\"at\":")
                    .filter(|p| *p > 0)
                    .and_then(|p| serde_json::from_str::<Entry>(&line[p..]).ok());
                let what = if recovered.is_some() {
                    "a torn fragment before an entry was skipped"
                } else {
                    "skipped an unreadable (torn?) line"
                };
                bad.push(format!(
                    "{origin}:{}: {what} ({})",
                    i + 1,
                    crate::domain::text::escape_controls(&err.to_string())
                ));
                entries.extend(recovered);
            }
        }
    }
    (entries, bad)
}

/// One apply run (AMD repartition or MIG), as the journal tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// `repartition` or `mig`.
    pub kind: String,
    /// Its id.
    pub run: String,
    /// The plan's fingerprint.
    pub fingerprint: String,
    /// The plan as confirmed (journaled at the start).
    pub plan: serde_json::Value,
    /// Where the plan file was, when it came from one.
    pub plan_file: Option<String>,
    /// When it started.
    pub started_at: String,
    /// The pid of the partop that ran it.
    pub pid: Option<u32>,
    /// The node it changes ([`node_id`]); None for runs journaled before partop recorded it.
    pub node: Option<String>,
    /// Steps done (ok), by index.
    pub done: Vec<usize>,
    /// The last step entry: index, key, ok, detail.
    pub last: Option<(usize, String, Option<bool>, String)>,
    /// It finished (done) or was abandoned.
    pub closed: Option<String>,
    /// The exact command that resumes it, as its start journaled it (every option it ran
    /// with); None for runs journaled before partop recorded it.
    pub resume: Option<String>,
    /// When the last step began and how long it may take (progress: elapsed against limit).
    pub last_begin: Option<(String, Option<u32>)>,
}

impl Run {
    /// The first step not done (where a resume continues).
    pub fn resume_point(&self) -> usize {
        self.done.iter().max().map_or(0, |s| s + 1)
    }

    /// The command that continues it: the one its start journaled, else rebuilt from the plan
    /// file (without the options an older partop did not record).
    pub fn resume_command(&self) -> String {
        if let Some(r) = &self.resume {
            return r.clone();
        }
        let sub = if self.kind == "mig" {
            "partop mig apply"
        } else {
            "partop apply"
        };
        format!(
            "{sub} {} --resume",
            self.plan_file.as_deref().unwrap_or("PLAN.json")
        )
    }

    /// Where it stopped, in a few words.
    fn stopped_at(&self) -> String {
        match &self.last {
            Some((i, key, Some(false), _)) => format!("failed at step {} ({key})", i + 1),
            Some((i, key, None, _)) => format!("stopped during step {} ({key})", i + 1),
            Some((i, key, Some(true), _)) => format!("stopped after step {} ({key})", i + 1),
            None => "stopped before its first step".into(),
        }
    }

    /// One line for a header: what, where it stopped, the command that continues it.
    pub fn headline(&self) -> String {
        format!(
            "{} {} {} · {}",
            self.kind,
            self.run,
            self.stopped_at(),
            self.resume_command()
        )
    }

    /// One sentence for the operator.
    pub fn describe(&self) -> String {
        let step = match &self.last {
            Some((i, key, Some(false), detail)) => {
                format!("failed at step {} ({key}): {detail}", i + 1)
            }
            Some((i, key, None, _)) => format!("stopped during step {} ({key})", i + 1),
            Some((i, key, Some(true), _)) => format!("stopped after step {} ({key})", i + 1),
            None => "stopped before its first step".into(),
        };
        format!(
            "unfinished {} {} (plan {}, started {}): {step}. Continue it with `{}`, or after restoring the node by hand close it with `partop journal --abandon {}`",
            self.kind,
            self.run,
            self.fingerprint,
            self.started_at,
            self.resume_command(),
            self.run
        )
    }
}

/// Every apply run in the journal, oldest first.
pub fn runs(entries: &[Entry]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for e in entries {
        let Some((kind, what)) = e.action.split_once('.') else {
            continue;
        };
        if kind != "repartition" && kind != "mig" {
            continue;
        }
        let Some(id) = e.targets["run"].as_str() else {
            continue;
        };
        if what == "start" {
            runs.push(Run {
                kind: kind.into(),
                run: id.into(),
                fingerprint: e.targets["fingerprint"].as_str().unwrap_or("").into(),
                plan: e.targets["plan"].clone(),
                plan_file: e.targets["plan_file"].as_str().map(str::to_string),
                started_at: e.at.clone(),
                pid: e.targets["pid"]
                    .as_u64()
                    .and_then(|p| u32::try_from(p).ok()),
                node: e.targets["node"].as_str().map(str::to_string),
                done: Vec::new(),
                last: None,
                closed: None,
                resume: e.targets["resume"].as_str().map(str::to_string),
                last_begin: None,
            });
            continue;
        }
        let Some(r) = runs.iter_mut().rev().find(|r| r.run == id) else {
            continue;
        };
        match what {
            "step" => {
                let idx = e.targets["step"]
                    .as_u64()
                    .and_then(|s| usize::try_from(s).ok())
                    .unwrap_or(0);
                let ok = e.outcome["ok"].as_bool();
                if ok == Some(true) {
                    r.done.push(idx);
                }
                if e.outcome["state"] == "begin" {
                    r.last_begin = Some((
                        e.at.clone(),
                        e.outcome["limit_secs"]
                            .as_u64()
                            .and_then(|l| u32::try_from(l).ok()),
                    ));
                }
                r.last = Some((
                    idx,
                    e.targets["key"].as_str().unwrap_or("?").into(),
                    ok,
                    e.outcome["detail"]
                        .as_str()
                        .or_else(|| e.outcome["error"].as_str())
                        .unwrap_or("")
                        .into(),
                ));
            }
            "done" | "abandoned" => r.closed = Some(what.into()),
            _ => {}
        }
    }
    runs
}

/// Which node a run changes: a simulated node by its state file, else this host. Several
/// simulated nodes (and the host) share one journal; a run of one never blocks another.
pub fn node_id(sim_state: Option<&Path>) -> String {
    sim_state.map_or_else(
        || "host".to_string(),
        |p| format!("simulated:{}", p.display()),
    )
}

/// The runs not finished nor abandoned, newest first (every node's).
pub fn unfinished(path: &Path) -> Vec<Run> {
    let Ok((entries, _)) = read(path) else {
        return Vec::new();
    };
    unfinished_in(&entries, None)
}

/// The unfinished runs of `node` (or of every node), newest first.
pub fn unfinished_in(entries: &[Entry], node: Option<&str>) -> Vec<Run> {
    let mut v: Vec<Run> = runs(entries)
        .into_iter()
        .filter(|r| r.closed.is_none())
        .filter(|r| node.is_none_or(|n| r.node.as_deref().is_none_or(|m| m == n)))
        .collect();
    v.reverse();
    v
}

/// The unfinished runs of `node`, newest first.
pub fn unfinished_on(path: &Path, node: &str) -> Vec<Run> {
    let Ok((entries, _)) = read(path) else {
        return Vec::new();
    };
    unfinished_in(&entries, Some(node))
}

/// The newest run of `kind` for `fingerprint`.
pub fn latest_run(path: &Path, kind: &str, fingerprint: &str) -> Option<Run> {
    let (entries, _) = read(path).ok()?;
    runs(&entries)
        .into_iter()
        .rev()
        .find(|r| r.kind == kind && r.fingerprint == fingerprint)
}
