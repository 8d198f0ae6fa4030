//! Sending one signal safely. A target is first *pinned*: a pidfd is opened on its pid and the
//! start time is checked after opening, so the descriptor refers to exactly the process the
//! operator saw; every later signal goes through that descriptor (`pidfd_send_signal`), so a
//! pid reused since, even inside one clock tick, can never be hit. A target without a verified
//! start time (a recording, a process partop could not read) is refused. Permission errors are
//! explained.

use crate::domain::kill::{Sig, Target};
use rustix::fd::OwnedFd;
use rustix::io::Errno;
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
    /// Refused by partop (partop itself, pid 1, no verified identity).
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

/// Whether the target is still the same live process (by pid and start time).
pub fn alive(proc_root: &Path, t: &Target) -> bool {
    t.start_ticks
        .is_some_and(|want| start_ticks(proc_root, t.pid) == Some(want))
}

/// A target held by a pidfd opened while it was verified to be the process planned.
#[derive(Debug)]
pub struct Pinned {
    /// The target.
    pub target: Target,
    fd: OwnedFd,
}

const NO_PIDFD: &str = "this kernel has no pidfd_open (Linux 5.3 or later is needed); partop does not signal by bare pid, since a reused pid could be hit. Check the process yourself and use kill(1)";

/// Pins `t`: refuses what must never be signalled or cannot be verified, opens a pidfd, then
/// checks the start time, so the descriptor holds exactly the planned process.
pub fn pin(proc_root: &Path, t: &Target) -> Result<Pinned, Outcome> {
    if t.pid <= 1 {
        return Err(Outcome::Refused("pid 1 (init) is never signalled".into()));
    }
    if t.pid == std::process::id() {
        return Err(Outcome::Refused("this is partop itself".into()));
    }
    let Some(want) = t.start_ticks else {
        return Err(Outcome::Refused(
            "its start time is not known (a recording, or a process partop could not read), so it cannot be verified: nothing is signalled".into(),
        ));
    };
    if proc_root != Path::new("/proc") {
        return Err(Outcome::Refused(format!(
            "it was seen under {}, not this machine's /proc: nothing is signalled",
            proc_root.display()
        )));
    }
    let pid = i32::try_from(t.pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| Outcome::Failed("pid out of range".into()))?;
    let fd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(Errno::SRCH) => return Err(Outcome::Gone),
        Err(Errno::NOSYS) => return Err(Outcome::Failed(NO_PIDFD.into())),
        Err(e) => return Err(Outcome::Failed(e.to_string())),
    };
    match start_ticks(proc_root, t.pid) {
        None => Err(Outcome::Gone),
        Some(now) if now != want => Err(Outcome::Reused),
        Some(_) => Ok(Pinned {
            target: t.clone(),
            fd,
        }),
    }
}

impl Pinned {
    /// Sends `sig` through the pidfd.
    pub fn send(&self, sig: Sig) -> Outcome {
        let s = match sig {
            Sig::Term => rustix::process::Signal::TERM,
            Sig::Kill => rustix::process::Signal::KILL,
        };
        match rustix::process::pidfd_send_signal(&self.fd, s) {
            Ok(()) => Outcome::Sent,
            Err(Errno::PERM) => Outcome::PermissionDenied,
            Err(Errno::SRCH) => Outcome::Gone,
            Err(e) => Outcome::Failed(e.to_string()),
        }
    }

    /// Another handle on the same process (for a second signal later).
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Self {
            target: self.target.clone(),
            fd: self.fd.try_clone()?,
        })
    }

    /// Whether the pinned process has exited (the pidfd turns readable then).
    pub fn exited(&self) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
    }
}

/// Pins `t` and sends `sig` (for one-off signals; jobs pin first and keep the pins).
pub fn send(proc_root: &Path, t: &Target, sig: Sig) -> Outcome {
    match pin(proc_root, t) {
        Ok(p) => p.send(sig),
        Err(o) => o,
    }
}

/// A target described from /proc alone (for `partop kill` without a snapshot).
pub fn target_from_proc(proc_root: &Path, pid: u32) -> Option<Target> {
    let p = procfs::process::Process::new_with_root(proc_root.join(pid.to_string())).ok()?;
    let st = p.stat().ok()?;
    if st.state == 'Z' || st.state == 'X' {
        return None;
    }
    let user = p.uid().ok().map(|u| {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(u))
            .ok()
            .flatten()
            .map_or_else(|| u.to_string(), |x| x.name)
    });
    let mut name = Some(st.comm);
    crate::domain::text::sanitize(&mut name);
    Some(Target {
        pid,
        start_ticks: Some(st.starttime),
        user,
        name,
        ..Target::default()
    })
}
