//! Enriches the processes in a snapshot from /proc (under a configurable root): user, full
//! command line, start time, parent, and the container, systemd unit or Kubernetes pod from the
//! cgroup. Values that cannot be read (another user's process without root) are marked missing
//! with the reason.

use crate::domain::provenance::{Missing, SourceKind, note};
use crate::domain::snapshot::{Process, Snapshot};
use std::path::Path;

/// The cgroup parser is pure and lives in the domain; its names stay here for the callers.
pub use crate::domain::cgroup::{CgroupOwner, parse as parse_cgroup};

/// Fills user, command line, start time, parent and cgroup owner for every process.
pub fn enrich(snap: &mut Snapshot, proc_root: &Path) {
    use crate::collect::small_file::proc_read;
    use procfs::FromReadSI as _;
    // Every /proc file through the one bounded reader (never the crate's unbounded reads): on a
    // captured --proc-root any of them may be /dev/zero or a FIFO.
    let mut buf = Vec::new();
    let boot_ms = proc_read(&proc_root.join("stat"), &mut buf)
        .ok()
        .and_then(|()| procfs::KernelStats::from_read(&buf[..], procfs::current_system_info()).ok())
        .and_then(|k| k.btime.checked_mul(1000));
    let clock = Clock {
        boot_ms,
        ticks_per_second: procfs::ticks_per_second(),
        at: snap.taken_at_ms,
    };
    for p in &mut snap.processes {
        if i32::try_from(p.pid).is_err() {
            continue;
        }
        let dir = proc_root.join(p.pid.to_string());
        let Ok(proc_) = procfs::process::Process::new_with_root(dir.clone()) else {
            note(
                &mut p.provenance,
                "command",
                SourceKind::Procfs,
                "/proc",
                clock.at,
                Some(Missing::ReadFailed("the process is gone".into())),
            );
            continue;
        };
        from_stat(p, &dir, &clock, &mut buf);
        from_cmdline(p, &dir, clock.at, &mut buf);
        from_status(p, &proc_, clock.at);
        from_cgroup(p, &dir, clock.at);
    }
}

/// What turns a process's start ticks into a wall time, and when the snapshot was taken.
struct Clock {
    /// Boot time, ms since the epoch (unknown when /proc/stat cannot be read).
    boot_ms: Option<u64>,
    ticks_per_second: u64,
    at: u64,
}

/// Parent, start time (identity and wall clock) and, when no other source named it, the name.
fn from_stat(p: &mut Process, dir: &Path, clock: &Clock, buf: &mut Vec<u8>) {
    use procfs::FromRead as _;
    let Ok(st) = crate::collect::small_file::proc_read(&dir.join("stat"), buf)
        .map_err(procfs::ProcError::from)
        .and_then(|()| procfs::process::Stat::from_read(&buf[..]))
    else {
        return;
    };
    let at = clock.at;
    p.ppid = u32::try_from(st.ppid).ok();
    p.start_ticks = Some(st.starttime);
    // Checked: a captured /proc may hold any number (never a wrapped start time).
    p.started_at_ms = clock.boot_ms.and_then(|b| {
        b.checked_add(st.starttime.checked_mul(1000)? / clock.ticks_per_second.max(1))
    });
    note(
        &mut p.provenance,
        "ppid",
        SourceKind::Procfs,
        "/proc/PID/stat",
        at,
        None,
    );
    note(
        &mut p.provenance,
        "started_at_ms",
        SourceKind::Procfs,
        "/proc/PID/stat starttime + boot time",
        at,
        None,
    );
    if p.name.is_none() {
        p.name = Some(st.comm.clone());
        note(
            &mut p.provenance,
            "name",
            SourceKind::Procfs,
            "/proc/PID/stat",
            at,
            None,
        );
    }
}

/// The full command line (N/A for a kernel thread's empty one).
fn from_cmdline(p: &mut Process, dir: &Path, at: u64, buf: &mut Vec<u8>) {
    let cmdline = crate::collect::small_file::proc_read(&dir.join("cmdline"), buf).map(|()| {
        String::from_utf8_lossy(buf)
            .split('\0')
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    });
    let src = "/proc/PID/cmdline";
    match cmdline {
        Ok(c) if !c.is_empty() => {
            p.command = Some(c);
            note(
                &mut p.provenance,
                "command",
                SourceKind::Procfs,
                src,
                at,
                None,
            );
        }
        Ok(_) => note(
            &mut p.provenance,
            "command",
            SourceKind::Procfs,
            src,
            at,
            Some(Missing::NotAvailable),
        ),
        Err(e) => note(
            &mut p.provenance,
            "command",
            SourceKind::Procfs,
            src,
            at,
            Some(Missing::ReadFailed(e.to_string())),
        ),
    }
}

/// The owning user, by name where the user database knows the uid.
fn from_status(p: &mut Process, proc_: &procfs::process::Process, at: u64) {
    match proc_.uid() {
        Ok(uid) => {
            p.user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                .ok()
                .flatten()
                .map_or_else(|| Some(uid.to_string()), |u| Some(u.name));
            note(
                &mut p.provenance,
                "user",
                SourceKind::Procfs,
                "/proc/PID/status Uid",
                at,
                None,
            );
        }
        Err(e) => note(
            &mut p.provenance,
            "user",
            SourceKind::Procfs,
            "/proc/PID/status",
            at,
            Some(Missing::ReadFailed(e.to_string())),
        ),
    }
}

/// The container, systemd unit and Kubernetes pod the cgroup names; each one it does not is
/// "not applicable", said as such.
fn from_cgroup(p: &mut Process, dir: &Path, at: u64) {
    let cg = "/proc/PID/cgroup";
    let o = match crate::collect::small_file::proc_text(&dir.join("cgroup")) {
        Ok(text) => parse_cgroup(&text),
        Err(e) => {
            for k in ["container_id", "systemd_unit", "k8s_pod_uid"] {
                note(
                    &mut p.provenance,
                    k,
                    SourceKind::Procfs,
                    cg,
                    at,
                    Some(Missing::ReadFailed(e.to_string())),
                );
            }
            return;
        }
    };
    for (field, found, what) in [
        ("container_id", o.container.is_some(), "container"),
        ("systemd_unit", o.unit.is_some(), "systemd service"),
        ("k8s_pod_uid", o.pod.is_some(), "Kubernetes pod"),
    ] {
        let missing = (!found).then(|| Missing::NotApplicable(format!("not in a {what}")));
        note(
            &mut p.provenance,
            field,
            SourceKind::Procfs,
            cg,
            at,
            missing,
        );
    }
    p.container_id = o.container;
    p.systemd_unit = o.unit;
    p.k8s_pod_uid = o.pod;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_owners() {
        let k8s = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-4f5e6d7c8b9a0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0.scope";
        let o = parse_cgroup(k8s);
        assert_eq!(
            o.pod.as_deref(),
            Some("1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d")
        );
        assert_eq!(o.container.as_deref(), Some("4f5e6d7c8b9a"));
        assert_eq!(
            parse_cgroup("0::/system.slice/vllm-llama.service\n")
                .unit
                .as_deref(),
            Some("vllm-llama.service")
        );
        let d = parse_cgroup(
            "0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope",
        );
        assert_eq!(d.container.as_deref(), Some("0123456789ab"));
        assert_eq!(d.unit, None);
        assert_eq!(
            parse_cgroup("0::/user.slice/user-1000.slice/session-3.scope"),
            CgroupOwner::default()
        );
    }
}

/// The /proc facts of processes already looked at, so a steady sample reads nothing for them:
/// a process's command, user, parent, start and container do not change while it lives. The
/// cache is dropped on every full holder scan (which re-checks every process), so a pid reused
/// by another process is corrected at the next full scan at the latest.
#[derive(Debug, Default)]
pub struct Cache {
    by_pid: std::collections::HashMap<u32, crate::domain::Process>,
}

const FACTS: [&str; 8] = [
    "command",
    "container_id",
    "name",
    "ppid",
    "started_at_ms",
    "systemd_unit",
    "user",
    "k8s_pod_uid",
];

impl Cache {
    /// Forgets everything (next sample reads every process again).
    pub fn clear(&mut self) {
        self.by_pid.clear();
    }

    /// Processes known.
    pub fn len(&self) -> usize {
        self.by_pid.len()
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.by_pid.is_empty()
    }
}

/// [`enrich`] for the processes the cache does not know; the others get their cached facts.
pub fn enrich_cached(snap: &mut Snapshot, proc_root: &Path, cache: &mut Cache) {
    let mut fresh = Snapshot {
        taken_at_ms: snap.taken_at_ms,
        ..Snapshot::default()
    };
    let mut at = Vec::new();
    for (i, p) in snap.processes.iter_mut().enumerate() {
        if let Some(c) = cache.by_pid.get(&p.pid) {
            p.command.clone_from(&c.command);
            p.user.clone_from(&c.user);
            p.ppid = c.ppid;
            p.start_ticks = c.start_ticks;
            p.started_at_ms = c.started_at_ms;
            p.container_id.clone_from(&c.container_id);
            p.systemd_unit.clone_from(&c.systemd_unit);
            p.k8s_pod_uid.clone_from(&c.k8s_pod_uid);
            if p.name.is_none() {
                p.name.clone_from(&c.name);
            }
            for k in FACTS {
                if let Some(o) = c.provenance.get(k) {
                    p.provenance.insert(k.into(), o.clone());
                }
            }
        } else {
            at.push(i);
            fresh.processes.push(p.clone());
        }
    }
    if fresh.processes.is_empty() {
        return;
    }
    enrich(&mut fresh, proc_root);
    for (i, p) in at.into_iter().zip(fresh.processes) {
        // A process that vanished mid-read is not cached: it is read again if it shows again.
        if p.start_ticks.is_some() {
            cache.by_pid.insert(p.pid, p.clone());
        }
        snap.processes[i] = p;
    }
    let live: std::collections::HashSet<u32> = snap.processes.iter().map(|p| p.pid).collect();
    cache.by_pid.retain(|pid, _| live.contains(pid));
}
