//! One apply at a time per node: an exclusive `flock` on the node's lock file, held for the
//! whole apply (AMD repartition, MIG apply, model start/stop) and released by the kernel when
//! the holder exits, crashes or is killed, so a stale lock can never block a node. The holder
//! writes who it is into the file, so a second operator is told what runs and how to follow it.

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Who holds the lock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// What runs (`apply`, `mig apply`, `model start`, …).
    pub what: String,
    /// The run id or plan fingerprint.
    pub id: String,
    /// Its pid.
    pub pid: u32,
    /// Since when (RFC 3339).
    pub since: String,
    /// The journal it writes.
    pub journal: String,
}

impl Holder {
    /// A holder description for this process.
    pub fn me(what: &str, id: &str, journal: &Path) -> Self {
        Self {
            what: what.into(),
            id: id.into(),
            pid: std::process::id(),
            since: crate::collect::clock::rfc3339(crate::collect::clock::now_ms()),
            journal: journal.display().to_string(),
        }
    }
}

/// The lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another partop holds it.
    #[error(
        "another change is running on this node: {} {} since {}, pid {}. One change at a time: wait for it, follow it with `partop journal` (journal {}), or in the monitor",
        .0.what, .0.id, .0.since, .0.pid, .0.journal
    )]
    Busy(Holder),
    /// The lock file cannot be opened.
    #[error("cannot open the node's lock file {path}: {error}; no change is made without it")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        error: String,
    },
}

/// The lock, held until dropped.
#[derive(Debug)]
pub struct NodeLock {
    _lock: Flock<std::fs::File>,
}

/// The lock file of a real node: `$PARTOP_LOCK` when set (several simulated NVIDIA nodes on one
/// machine, tests), else `/run/lock/partop.lock` where that directory exists (shared by every
/// user, root included), else the state directory.
pub fn host_path() -> PathBuf {
    if let Some(p) = std::env::var_os("PARTOP_LOCK").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let run = Path::new("/run/lock");
    if run.is_dir() {
        run.join("partop.lock")
    } else {
        crate::config::paths::state_dir().join("node.lock")
    }
}

/// The lock file of a simulated node (beside its state).
pub fn sim_path(state: &Path) -> PathBuf {
    state.with_extension("apply.lock")
}

/// Takes the lock at `path` without waiting, or says who holds it.
pub fn acquire(path: &Path, me: &Holder) -> Result<NodeLock, LockError> {
    let io = |e: std::io::Error| LockError::Io {
        path: path.display().to_string(),
        error: e.to_string(),
    };
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(io)?;
    }
    let f = crate::exec::safe_file::open_rw(path, true).map_err(io)?;
    match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(mut l) => {
            let text = serde_json::to_string(me).unwrap_or_default();
            let _ = l.set_len(0);
            let _ = l.seek(SeekFrom::Start(0));
            let _ = l.write_all(text.as_bytes());
            let _ = l.sync_all();
            Ok(NodeLock { _lock: l })
        }
        Err((mut f, nix::errno::Errno::EWOULDBLOCK)) => {
            let text = bounded_text(&mut f);
            let h = serde_json::from_str(&text).unwrap_or_else(|_| Holder {
                what: "a change".into(),
                id: "?".into(),
                ..Holder::default()
            });
            Err(LockError::Busy(h))
        }
        Err((_, e)) => Err(io(std::io::Error::from(e))),
    }
}

/// Who holds the lock at `path` now, if anyone (without taking it).
pub fn holder(path: &Path) -> Option<Holder> {
    let f = crate::exec::safe_file::open_rw(path, false).ok()?;
    match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(_free) => None,
        Err((mut f, nix::errno::Errno::EWOULDBLOCK)) => {
            serde_json::from_str(&bounded_text(&mut f)).ok()
        }
        Err(_) => None,
    }
}

/// What the lock file says about its holder (a few hundred bytes; never more than 64 KiB read).
fn bounded_text(f: &mut std::fs::File) -> String {
    let mut buf = Vec::new();
    let _ = f.take(64 << 10).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}
