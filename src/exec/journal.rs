//! The audit journal: one JSON line per mutating action (who, where, what, to whom, outcome),
//! appended with O_APPEND in a single write and fsynced. Journal first: every executor writes
//! its entry *before* it acts and refuses to act when that write fails, so nothing happens that
//! the journal does not hold. A torn last line (a crash mid-write) is closed with a newline
//! before the next append, so it never swallows the next entry; the reader skips torn and
//! non-UTF-8 lines with a warning and keeps everything else.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

pub use crate::domain::journal::{Entry, Run, Who};

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
    parse_from(origin, bytes, 0)
}

/// Parses journal bytes that begin after `skipped` lines (the line numbers of the warnings
/// count from the file's start).
fn parse_from(origin: &str, bytes: &[u8], skipped: usize) -> (Vec<Entry>, Vec<String>) {
    let mut entries = Vec::new();
    let mut bad = Vec::new();
    for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        let i = i + skipped;
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

/// Every apply run in the journal, oldest first (the one fold, `domain::journal::Runs`).
pub fn runs(entries: &[Entry]) -> Vec<Run> {
    crate::domain::journal::Runs::of(entries).runs
}

/// The journal read as it grows: the lines read so far, and where the file was read to, so
/// the next read takes only what was appended since (the monitor reads the journal every
/// second while it follows an apply). Its answer is always what [`read`] would give: a file
/// replaced or cut short is read again from its start, and a last line without its newline
/// (torn, or being written) is read each time and kept only once it is whole.
#[derive(Debug, Default)]
pub struct Tail {
    /// The file read (device, inode).
    file: Option<(u64, u64)>,
    /// Bytes read and kept: whole lines only.
    offset: u64,
    /// Lines read and kept.
    lines: usize,
    entries: Vec<Entry>,
    bad: Vec<String>,
}

impl Tail {
    /// The journal's entries and warnings, reading only what was appended since the last call.
    pub fn read(&mut self, path: &Path) -> std::io::Result<(Vec<Entry>, Vec<String>)> {
        use std::os::unix::fs::MetadataExt;
        let max = crate::collect::small_file::FILE_MAX;
        let mut f = match crate::collect::small_file::open_regular(path, max) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                *self = Self::default();
                return Ok((Vec::new(), Vec::new()));
            }
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}; it cannot be read as a journal", path.display()),
                ));
            }
        };
        let meta = f.metadata()?;
        let id = (meta.dev(), meta.ino());
        if self.file != Some(id) || meta.len() < self.offset {
            *self = Self {
                file: Some(id),
                ..Self::default()
            };
        }
        if meta.len() > max as u64 {
            return Err(std::io::Error::other(format!(
                "{}: longer than {} MiB; it cannot be read as a journal (move it away: partop starts a new one)",
                path.display(),
                max >> 20
            )));
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.take(meta.len() - self.offset).read_to_end(&mut buf)?;
        let origin = path.display().to_string();
        let whole = buf.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
        let (entries, bad) = parse_from(&origin, &buf[..whole], self.lines);
        self.entries.extend(entries);
        self.bad.extend(bad);
        self.lines += buf[..whole].iter().filter(|b| **b == b'\n').count();
        self.offset += whole as u64;
        let (rest, rest_bad) = parse_from(&origin, &buf[whole..], self.lines);
        let mut entries = self.entries.clone();
        entries.extend(rest);
        let mut bad = self.bad.clone();
        bad.extend(rest_bad);
        Ok((entries, bad))
    }
}

/// The journal at `path`, read as it grows: this process keeps one [`Tail`] per journal, so a
/// monitor that reads it every second reads only what was appended (same answer as [`read`]).
pub fn read_appended(path: &Path) -> std::io::Result<(Vec<Entry>, Vec<String>)> {
    static TAILS: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, Tail>>,
    > = std::sync::OnceLock::new();
    let mut tails = TAILS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    tails.entry(path.to_path_buf()).or_default().read(path)
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
    crate::domain::journal::Runs::of(entries).unfinished(node)
}

/// The unfinished runs of `node`, newest first.
pub fn unfinished_on(path: &Path, node: &str) -> Vec<Run> {
    let Ok((entries, _)) = read(path) else {
        return Vec::new();
    };
    unfinished_in(&entries, Some(node))
}

/// The newest run of `kind` for `fingerprint`.
pub fn latest_run(
    path: &Path,
    kind: crate::domain::journal::RunKind,
    fingerprint: &str,
) -> Option<Run> {
    let (entries, _) = read(path).ok()?;
    crate::domain::journal::Runs::of(&entries)
        .latest(kind, fingerprint)
        .cloned()
}
