//! Who holds each GPU: every process with `/dev/kfd` or a GPU render node open, found by reading
//! the `/proc/PID/fd` links (never by opening the devices: holding them blocks repartitioning),
//! with the render node's minor mapped to its logical GPU, the KFD per-process files, the visible-
//! device variables from the environment, and known node agents labelled. Merged into a snapshot
//! so processes amd-smi does not list still show up.

use super::kfd::{self, KfdNode};
use crate::domain::provenance::{Missing, SourceKind, note};
use crate::domain::snapshot::{GpuUse, Process, Snapshot};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Node agents that hold GPUs by design (and must be stopped around a repartition).
pub const AGENTS: &[(&str, &str)] = &[
    ("gpuagent", "gpuagent (AMD GPU agent)"),
    ("amd-metrics-exporter", "AMD Device Metrics Exporter"),
    ("amd-metrics-exp", "AMD Device Metrics Exporter"),
    ("k8s-device-plugin", "AMD GPU device plugin (Kubernetes)"),
    ("amdgpu-device-plugin", "AMD GPU device plugin (Kubernetes)"),
    ("rdcd", "ROCm Data Center daemon"),
];

/// Variables that say which GPUs a process may see.
pub const VISIBLE_VARS: &[&str] = &[
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
];

/// Where to look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// `/proc`.
    pub proc_root: PathBuf,
    /// `/sys`.
    pub sys_root: PathBuf,
    /// `/dev` (the simulator uses its own directory of device files).
    pub dev_root: PathBuf,
    /// Where DRM fdinfo is read, `PID/fdinfo/FD` under it: `/proc`; on the simulated node its
    /// kernel twin's copy (`STATE.fdinfo`), since its device files are not DRM devices and
    /// the kernel's own fdinfo of them has no `drm-*` lines.
    pub fdinfo_root: PathBuf,
}

impl Roots {
    /// The real host.
    pub fn host() -> Self {
        Self {
            proc_root: "/proc".into(),
            sys_root: "/sys".into(),
            dev_root: "/dev".into(),
            fdinfo_root: "/proc".into(),
        }
    }
}

/// One process holding GPU device files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holder {
    /// PID.
    pub pid: u32,
    /// `/dev/kfd` open.
    pub kfd: bool,
    /// Render minors open (129 = renderD129).
    pub render_minors: Vec<u32>,
    /// Each render-node fd and its minor (for fdinfo).
    pub drm_fds: Vec<(u32, u32)>,
    /// comm.
    pub comm: Option<String>,
    /// Visible-device variables, when the environment was readable.
    pub visible: BTreeMap<String, String>,
    /// Why the environment could not be read.
    pub environ_error: Option<String>,
    /// Known agent description.
    pub agent: Option<String>,
    /// Its open files are hidden from this user: seen through KFD's process list only.
    pub files_hidden: bool,
}

/// An fd's target: a symlink on a real /proc; a fixture tree stores it as the file's text.
fn target(p: &Path) -> Option<String> {
    match std::fs::read_link(p) {
        Ok(t) => Some(t.to_string_lossy().into_owned()),
        Err(e) if e.raw_os_error() == Some(22) => crate::collect::small_file::proc_text(p)
            .ok()
            .map(|s| s.trim().to_string()),
        Err(_) => None,
    }
}

/// The agent a process is, by comm or command line.
pub fn agent_of(comm: &str, cmdline: &str) -> Option<String> {
    let exe = cmdline
        .split_whitespace()
        .next()
        .unwrap_or("")
        .rsplit('/')
        .next()
        .unwrap_or("");
    AGENTS
        .iter()
        .find(|(n, _)| comm == *n || exe == *n)
        .map(|(_, d)| (*d).to_string())
}

/// Scans every process's open files for GPU device nodes.
pub fn scan(roots: &Roots) -> Vec<Holder> {
    scan_all(roots, &mut Swept::default())
}

/// The processes a sweep has looked at: (pid, inode of its `/proc/PID` directory). procfs gives
/// each process's directory its own inode, so a reused pid reads as a new process and is looked
/// at again; an inode procfs renumbered only costs one more look.
#[derive(Debug, Default, Clone)]
pub struct Swept(std::collections::HashSet<(u32, u64)>, Denied);

/// The processes whose open files a scan could not read (another user's, without root or
/// CAP_SYS_PTRACE): any of them may hold a GPU, so their number is said, never taken as none.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Denied(std::collections::BTreeSet<u32>);

impl Denied {
    /// How many, among the processes still alive at the last look.
    pub fn count(&self) -> u32 {
        u32::try_from(self.0.len()).unwrap_or(u32::MAX)
    }

    /// Whether `pid`'s files were hidden.
    pub fn contains(&self, pid: u32) -> bool {
        self.0.contains(&pid)
    }
}

impl Swept {
    /// The processes whose open files were hidden, as of the last scan or sweep.
    pub const fn denied(&self) -> &Denied {
        &self.1
    }
}

/// `/proc`'s processes as (pid, directory inode), from one directory listing (no stat).
fn listing(roots: &Roots) -> Option<Vec<(u32, u64)>> {
    use std::os::unix::fs::DirEntryExt as _;
    let procs = std::fs::read_dir(&roots.proc_root).ok()?;
    let own = std::process::id();
    Some(
        procs
            .flatten()
            .filter_map(|e| {
                let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
                (pid != own).then(|| (pid, e.ino()))
            })
            .collect(),
    )
}

/// Every process's open files, like [`scan`], remembering what was looked at for the next
/// [`sweep`].
pub fn scan_all(roots: &Roots, swept: &mut Swept) -> Vec<Holder> {
    let Some(procs) = listing(roots) else {
        return Vec::new();
    };
    let targets = Targets::of(roots);
    let mut denied = Denied::default();
    let mut out: Vec<Holder> = procs
        .iter()
        .filter_map(|&(pid, _)| look(roots, &targets, pid, &mut denied))
        .collect();
    out.extend(hidden_kfd(roots, &denied, &out));
    swept.0 = procs.into_iter().collect();
    swept.1 = denied;
    out.sort_by_key(|h| h.pid);
    out
}

/// The periodic scan between complete ones: the processes the last sweep did not see (new
/// ones, reused pids) and the `known` holders are looked at; a process seen before, holding
/// no GPU then, is not (ROCm processes show at once in KFD's process list; one that opens only
/// a render node later is found by the next complete scan, or at once by the kill dialog,
/// staging, a plan or a drain, which scan everything). On a host of 2,000 long-lived
/// processes this is one directory listing instead of ~16,000 `readlink`s.
pub fn sweep(roots: &Roots, swept: &mut Swept, known: &[u32]) -> Vec<Holder> {
    let Some(procs) = listing(roots) else {
        return Vec::new();
    };
    let targets = Targets::of(roots);
    // Those hidden before stay hidden while they live (a sweep does not look at them again).
    let alive: std::collections::HashSet<u32> = procs.iter().map(|p| p.0).collect();
    let mut denied = Denied(
        swept
            .1
            .0
            .iter()
            .copied()
            .filter(|pid| alive.contains(pid))
            .collect(),
    );
    let mut out: Vec<Holder> = procs
        .iter()
        .filter(|p| known.contains(&p.0) || !swept.0.contains(p))
        .filter_map(|&(pid, _)| look(roots, &targets, pid, &mut denied))
        .collect();
    out.extend(hidden_kfd(roots, &denied, &out));
    swept.0 = procs.into_iter().collect();
    swept.1 = denied;
    out.sort_by_key(|h| h.pid);
    out
}

/// [`scan_with`], noting a process whose open files are hidden.
fn look(roots: &Roots, targets: &Targets, pid: u32, denied: &mut Denied) -> Option<Holder> {
    match scan_with(roots, targets, pid) {
        Err(Hid) => {
            denied.0.insert(pid);
            None
        }
        Ok(h) => {
            // A reused pid, readable now.
            denied.0.remove(&pid);
            h
        }
    }
}

/// The processes KFD lists (its per-process directory is readable by anyone) whose open files
/// are hidden from this user: each holds /dev/kfd (KFD lists only processes that opened it), so
/// each is a holder, seen with what KFD and /proc still show (name, VRAM, CUs), its files not.
fn hidden_kfd(roots: &Roots, denied: &Denied, found: &[Holder]) -> Vec<Holder> {
    kfd_pids(&roots.sys_root)
        .into_iter()
        .filter(|pid| denied.contains(*pid) && !found.iter().any(|h| h.pid == *pid))
        .map(|pid| hidden_holder(roots, pid))
        .collect()
}

/// The processes in KFD's process list (`/sys/class/kfd/kfd/proc`).
pub fn kfd_pids(sys_root: &Path) -> Vec<u32> {
    std::fs::read_dir(sys_root.join("class/kfd/kfd/proc"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// A KFD process whose open files are hidden: what anyone may read of it.
fn hidden_holder(roots: &Roots, pid: u32) -> Holder {
    let dir = roots.proc_root.join(pid.to_string());
    let comm = crate::collect::small_file::text(&dir.join("comm"))
        .ok()
        .map(|s| s.trim().to_string());
    let cmdline = crate::collect::small_file::text(&dir.join("cmdline"))
        .map(|b| b.replace('\0', " "))
        .unwrap_or_default();
    Holder {
        pid,
        kfd: true,
        agent: agent_of(comm.as_deref().unwrap_or(""), &cmdline),
        comm,
        environ_error: Some(format!(
            "its open files are hidden: {}",
            crate::domain::snapshot::Hidden::WHY
        )),
        files_hidden: true,
        ..Holder::default()
    }
}

/// One process, looked at on its own (a new KFD process between scans): a holder, nothing, or
/// hidden from this user (then KFD's word is taken, as in a scan).
pub fn scan_pid_or_hidden(roots: &Roots, pid: u32) -> Option<Holder> {
    match scan_with(roots, &Targets::of(roots), pid) {
        Ok(h) => h,
        Err(Hid) => kfd_pids(&roots.sys_root)
            .contains(&pid)
            .then(|| hidden_holder(roots, pid)),
    }
}

/// A process's open files could not be read: permission denied.
struct Hid;

/// The device paths a holder's fds point at, built once per scan.
struct Targets {
    kfd: std::ffi::OsString,
    dri: std::ffi::OsString,
}

impl Targets {
    fn of(roots: &Roots) -> Self {
        Self {
            kfd: roots.dev_root.join("kfd").into_os_string(),
            dri: roots.dev_root.join("dri/renderD").into_os_string(),
        }
    }
}

/// One process's GPU device files, or `None` when it holds none (or is gone).
pub fn scan_pid(roots: &Roots, pid: u32) -> Option<Holder> {
    scan_with(roots, &Targets::of(roots), pid).ok().flatten()
}

/// [`scan_pid`] with the targets built once: the full scan calls it for every process, so an
/// fd that is not a GPU file costs one `readlink` and a byte comparison, no allocation of text.
fn scan_with(roots: &Roots, targets: &Targets, pid: u32) -> Result<Option<Holder>, Hid> {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = roots.proc_root.join(pid.to_string());
    let fds = match std::fs::read_dir(dir.join("fd")) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Err(Hid),
        Err(_) => return Ok(None),
    };
    let mut h = Holder {
        pid,
        ..Holder::default()
    };
    let dri = targets.dri.as_bytes();
    for fd in fds.flatten() {
        let t = match std::fs::read_link(fd.path()) {
            Ok(t) => t.into_os_string(),
            // A captured tree keeps the link's target as the file's text.
            Err(_) => match target(&fd.path()) {
                Some(t) => t.into(),
                None => continue,
            },
        };
        let t = t.as_bytes();
        if t == targets.kfd.as_bytes() {
            h.kfd = true;
        } else if let Some(m) = t
            .strip_prefix(dri)
            .and_then(|m| std::str::from_utf8(m).ok())
            .and_then(|m| m.parse::<u32>().ok())
        {
            if let Some(fd) = fd.file_name().to_str().and_then(|s| s.parse().ok()) {
                h.drm_fds.push((fd, m));
            }
            if !h.render_minors.contains(&m) {
                h.render_minors.push(m);
            }
        }
    }
    if !h.kfd && h.render_minors.is_empty() {
        return Ok(None);
    }
    h.render_minors.sort_unstable();
    h.drm_fds.sort_unstable();
    // Every /proc file through the one bounded reader: on a captured --proc-root any of them
    // may be /dev/zero or a FIFO.
    h.comm = crate::collect::small_file::proc_text(&dir.join("comm"))
        .ok()
        .map(|s| s.trim().to_string());
    let cmdline = crate::collect::small_file::proc_text(&dir.join("cmdline"))
        .map(|s| s.replace('\0', " "))
        .unwrap_or_default();
    h.agent = agent_of(h.comm.as_deref().unwrap_or(""), &cmdline);
    let mut env = Vec::new();
    match crate::collect::small_file::proc_read(&dir.join("environ"), &mut env) {
        Ok(()) => {
            for kv in env.split(|b| *b == 0) {
                let kv = String::from_utf8_lossy(kv);
                if let Some((k, v)) = kv.split_once('=')
                    && VISIBLE_VARS.contains(&k)
                {
                    h.visible.insert(k.to_string(), v.to_string());
                }
            }
        }
        Err(err) => h.environ_error = Some(err.to_string()),
    }
    Ok(Some(h))
}

/// Says in `snap` which gpu ids two KFD nodes claim (their use is attributed to neither): the
/// kernel source says it in its own warning; beside amd-smi it is said here.
pub fn say_shared(snap: &mut Snapshot, nodes: &[KfdNode]) {
    let shared = kfd::shared_ids(nodes);
    let Some((id, which)) = shared.iter().next() else {
        return;
    };
    let names: Vec<String> = which
        .iter()
        .map(|n| format!("{} ({}.{})", n.node, n.bdf(), n.partition()))
        .collect();
    snap.sources.push(crate::domain::snapshot::SourceStatus {
        name: "KFD topology".into(),
        status: crate::domain::snapshot::Health::Degraded,
        error: Some(format!(
            "KFD nodes {} share gpu_id {id}: {}",
            names.join(" and "),
            kfd::shared_reason(*id)
        )),
        version: None,
        last_ok_ms: Some(snap.taken_at_ms),
        took_ms: None,
        cadence: None,
    });
}

/// Says in `snap` what permissions hid from the scan (the holders merged in carry their own
/// mark): the header's line, and a source that is not `ok` while partly blind.
pub fn say_hidden(snap: &mut Snapshot, denied: &Denied) {
    let seen =
        u32::try_from(snap.processes.iter().filter(|p| p.files_hidden).count()).unwrap_or(u32::MAX);
    let h = crate::domain::snapshot::Hidden {
        processes: seen,
        unreadable: denied.count().saturating_sub(seen),
    };
    if h.processes == 0 && h.unreadable == 0 {
        return;
    }
    snap.sources.push(crate::domain::snapshot::SourceStatus {
        name: "/proc holders".into(),
        status: crate::domain::snapshot::Health::Degraded,
        error: Some(h.describe()),
        version: None,
        last_ok_ms: Some(snap.taken_at_ms),
        took_ms: None,
        cadence: None,
    });
    snap.hidden = Some(h);
}

/// Merges holders and KFD per-process use into a snapshot: adds processes amd-smi does not list,
/// marks who holds /dev/kfd and which render nodes, and fills VRAM/CU/SDMA from KFD where amd-smi
/// gave none.
pub fn merge(snap: &mut Snapshot, holders: &[Holder], nodes: &[KfdNode], sys_root: &Path) {
    let at = snap.taken_at_ms;
    let (by_minor, mut by_kfd) = amd_smi_indices(snap, nodes);
    for h in holders {
        let idx = match snap.processes.iter().position(|p| p.pid == h.pid) {
            Some(i) => i,
            None => {
                snap.processes.push(Process {
                    pid: h.pid,
                    name: h.comm.clone(),
                    ..Process::default()
                });
                snap.processes.len() - 1
            }
        };
        merge_holder(&mut snap.processes[idx], h, &by_minor, at);
    }
    // A gpu id two nodes claim names no logical GPU: its use is N/A, never the first's.
    let shared = kfd::shared_ids(nodes);
    by_kfd.retain(|id, _| !shared.contains_key(id));
    for p in &mut snap.processes {
        if let Some(uses) = kfd::process_use(sys_root, p.pid) {
            merge_kfd_use(p, uses, &by_kfd, |id| shared.contains_key(&id), at);
        }
    }
    // CU percent where the count came from KFD.
    let cus: BTreeMap<u32, u32> = snap
        .logical()
        .filter_map(|(_, l)| Some((l.gpu_id, l.cu_count?)))
        .collect();
    for p in &mut snap.processes {
        for u in &mut p.gpus {
            if u.cu_percent.is_none() {
                u.cu_percent = u
                    .cu_occupancy
                    .zip(cus.get(&u.gpu_id))
                    .map(|(c, t)| f64::from(c) * 100.0 / f64::from((*t).max(1)));
            }
        }
        p.gpus.sort_by_key(|u| u.gpu_id);
    }
}

/// Render minor and KFD gpu id → amd-smi index: from the snapshot, else from the topology.
fn amd_smi_indices(snap: &Snapshot, nodes: &[KfdNode]) -> (BTreeMap<u32, u32>, BTreeMap<u64, u32>) {
    let mut by_minor: BTreeMap<u32, u32> = BTreeMap::new();
    let mut by_kfd: BTreeMap<u64, u32> = BTreeMap::new();
    for (g, l) in snap.logical() {
        if let Some(m) = l
            .render_node
            .as_deref()
            .and_then(|r| r.strip_prefix("renderD"))
            .and_then(|m| m.parse().ok())
        {
            by_minor.insert(m, l.gpu_id);
        }
        if let Some(k) = l.kfd_id {
            by_kfd.insert(k, l.gpu_id);
        }
        for n in nodes
            .iter()
            .filter(|n| n.bdf() == g.bdf && n.partition() == l.partition_id)
        {
            by_kfd.entry(n.gpu_id).or_insert(l.gpu_id);
            if let Some(m) = n.render_minor {
                by_minor.entry(m).or_insert(l.gpu_id);
            }
        }
    }
    (by_minor, by_kfd)
}

/// What the fd scan found about process `p` (holder `h`): /dev/kfd, its visible-device
/// variables, agent label, and the render nodes it has open.
fn merge_holder(p: &mut Process, h: &Holder, by_minor: &BTreeMap<u32, u32>, at: u64) {
    p.holds_kfd = h.kfd;
    p.files_hidden = h.files_hidden;
    p.agent.clone_from(&h.agent);
    p.visible_devices.clone_from(&h.visible);
    if p.name.is_none() {
        p.name.clone_from(&h.comm);
    }
    note(
        &mut p.provenance,
        "holds_kfd",
        SourceKind::Procfs,
        "/proc/PID/fd",
        at,
        None,
    );
    let vis_missing = match (&h.environ_error, h.visible.is_empty()) {
        (Some(e), _) => Some(Missing::ReadFailed(format!(
            "{e} (needs root or the same user)"
        ))),
        (None, true) => Some(Missing::NotApplicable("none set: it sees every GPU".into())),
        (None, false) => None,
    };
    note(
        &mut p.provenance,
        "visible_devices",
        SourceKind::Procfs,
        "/proc/PID/environ",
        at,
        vis_missing,
    );
    for m in &h.render_minors {
        let Some(gid) = by_minor.get(m) else { continue };
        match p.gpus.iter_mut().find(|u| u.gpu_id == *gid) {
            Some(u) => u.render_open = true,
            None => p.gpus.push(GpuUse {
                gpu_id: *gid,
                render_open: true,
                ..GpuUse::default()
            }),
        }
    }
}

/// KFD's per-process figures for `p`, where amd-smi gave none: VRAM and CU occupancy (a GPU it
/// holds nothing on is not added), SDMA time always. A gpu id two nodes claim (`shared`) is
/// said, not attributed.
fn merge_kfd_use(
    p: &mut Process,
    uses: Vec<kfd::KfdUse>,
    by_kfd: &BTreeMap<u64, u32>,
    shared: impl Fn(u64) -> bool,
    at: u64,
) {
    for k in uses {
        let Some(gid) = by_kfd.get(&k.gpu_id) else {
            if shared(k.gpu_id) {
                note(
                    &mut p.provenance,
                    "gpus",
                    SourceKind::Sysfs,
                    &format!("/sys/class/kfd/kfd/proc/{}/vram_{}", p.pid, k.gpu_id),
                    at,
                    Some(Missing::ReadFailed(kfd::shared_reason(k.gpu_id))),
                );
            }
            continue;
        };
        let used = k.vram_bytes.unwrap_or(0) > 0 || k.cu_occupancy.unwrap_or(0) > 0;
        let u = match p.gpus.iter().position(|u| u.gpu_id == *gid) {
            Some(i) => &mut p.gpus[i],
            None if used => {
                p.gpus.push(GpuUse {
                    gpu_id: *gid,
                    ..GpuUse::default()
                });
                let n = p.gpus.len() - 1;
                &mut p.gpus[n]
            }
            None => continue,
        };
        let detail = format!("/sys/class/kfd/kfd/proc/{}", p.pid);
        if u.vram_bytes.is_none() && k.vram_bytes.is_some() {
            u.vram_bytes = k.vram_bytes;
            note(
                &mut p.provenance,
                &format!("gpu{gid}.vram_bytes"),
                SourceKind::Sysfs,
                &format!("{detail}/vram_{}", k.gpu_id),
                at,
                None,
            );
        }
        if u.cu_occupancy.is_none() && k.cu_occupancy.is_some() {
            u.cu_occupancy = k.cu_occupancy;
            note(
                &mut p.provenance,
                &format!("gpu{gid}.cu_occupancy"),
                SourceKind::Sysfs,
                &format!("{detail}/stats_{}/cu_occupancy", k.gpu_id),
                at,
                None,
            );
        }
        u.sdma_us = k.sdma_us;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_by_comm_or_exe() {
        assert!(agent_of("gpuagent", "").is_some());
        assert!(
            agent_of(
                "amd-metrics-exp",
                "/usr/bin/amd-metrics-exporter --port 5000"
            )
            .is_some()
        );
        assert!(agent_of("python3", "python3 serve.py").is_none());
    }
}
