//! Sending one signal safely: the pid must still be the process the operator saw (same start
//! time), else nothing is sent; permission errors are explained.

use crate::domain::kill::{Sig, Target};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What happened to one target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome", content = "detail")]
pub enum Outcome {
    /// The signal was delivered.
    Sent,
    /// The process had already exited: nothing sent.
    Gone,
    /// The pid now belongs to another process: nothing sent.
    Reused,
    /// Not allowed (another user's process without root).
    PermissionDenied,
    /// Refused by partop (partop itself, pid 1).
    Refused(String),
    /// Another error.
    Failed(String),
}

impl Outcome {
    /// A sentence for the operator.
    pub fn explain(&self, pid: u32) -> String {
        match self {
            Self::Sent => format!("pid {pid}: signal sent"),
            Self::Gone => format!("pid {pid}: already exited, nothing sent"),
            Self::Reused => {
                format!("pid {pid}: now belongs to a different process (pid reused), nothing sent")
            }
            Self::PermissionDenied => format!(
                "pid {pid}: permission denied: it belongs to another user; run partop with sudo to signal it"
            ),
            Self::Refused(why) => format!("pid {pid}: refused: {why}"),
            Self::Failed(e) => format!("pid {pid}: failed: {e}"),
        }
    }
}

/// The process's start time (clock ticks since boot), or None if it is gone or a zombie.
pub fn start_ticks(proc_root: &Path, pid: u32) -> Option<u64> {
    let p = procfs::process::Process::new_with_root(proc_root.join(pid.to_string())).ok()?;
    let st = p.stat().ok()?;
    (st.state != 'Z' && st.state != 'X').then_some(st.starttime)
}

/// Whether the target is still the same live process.
pub fn alive(proc_root: &Path, t: &Target) -> bool {
    start_ticks(proc_root, t.pid).is_some_and(|s| t.start_ticks.is_none_or(|want| want == s))
}

/// Sends `sig` to `t` if it is still the process it was.
pub fn send(proc_root: &Path, t: &Target, sig: Sig) -> Outcome {
    if t.pid <= 1 {
        return Outcome::Refused("pid 1 (init) is never signalled".into());
    }
    if t.pid == std::process::id() {
        return Outcome::Refused("this is partop itself".into());
    }
    match (start_ticks(proc_root, t.pid), t.start_ticks) {
        (None, _) => return Outcome::Gone,
        (Some(now), Some(want)) if now != want => return Outcome::Reused,
        _ => {}
    }
    let Ok(raw) = i32::try_from(t.pid) else {
        return Outcome::Failed("pid out of range".into());
    };
    let s = match sig {
        Sig::Term => Signal::SIGTERM,
        Sig::Kill => Signal::SIGKILL,
    };
    match kill(Pid::from_raw(raw), s) {
        Ok(()) => Outcome::Sent,
        Err(Errno::EPERM) => Outcome::PermissionDenied,
        Err(Errno::ESRCH) => Outcome::Gone,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// A target described from /proc alone (for `partop kill` without a snapshot).
pub fn target_from_proc(proc_root: &Path, pid: u32) -> Option<Target> {
    let p = procfs::process::Process::new_with_root(proc_root.join(pid.to_string())).ok()?;
    let st = p.stat().ok()?;
    let user = p.uid().ok().map(|u| {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(u))
            .ok()
            .flatten()
            .map_or_else(|| u.to_string(), |x| x.name)
    });
    Some(Target {
        pid,
        start_ticks: Some(st.starttime),
        user,
        name: Some(st.comm),
        ..Target::default()
    })
}
