//! Who owns a process, from the text of its `/proc/PID/cgroup` (pure; `collect::procinfo` reads
//! the file through the bounded reader and hands the text here): the Kubernetes pod UID and QoS
//! class, the container id and its runtime, or the systemd unit. The layouts understood are the
//! kubelet's two cgroup drivers (systemd: `kubepods.slice/kubepods-<qos>.slice/
//! kubepods-<qos>-pod<UID with _>.slice/<runtime>-<64 hex>.scope`; cgroupfs:
//! `/kubepods/<qos>/pod<UID>/<64 hex>`), Guaranteed pods without a QoS level, containerd
//! (`cri-containerd-`), CRI-O (`crio-`, its monitor in `crio-conmon-`), Docker and Podman, on
//! cgroup v1 and v2; a nested path (a node inside a container) is read from its innermost pod.

/// A pod's Quality of Service class, as the kubelet places it in the cgroup tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    /// Requests equal limits: directly under `kubepods`, no level of its own.
    Guaranteed,
    /// `kubepods-burstable` / `kubepods/burstable`.
    Burstable,
    /// `kubepods-besteffort` / `kubepods/besteffort`.
    BestEffort,
}

/// The container runtime a cgroup path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// `cri-containerd-<id>.scope`.
    Containerd,
    /// `crio-<id>.scope` (and its monitor, `crio-conmon-<id>.scope`).
    CriO,
    /// `docker-<id>.scope` or `/docker/<id>`.
    Docker,
    /// `libpod-<id>.scope` (Podman).
    Podman,
    /// The cgroupfs driver names the container by its bare id: the runtime is not said.
    Unnamed,
}

/// Who owns a process, from its cgroup path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupOwner {
    /// Container id, its first 12 hex digits (what `docker ps` and `crictl ps` show).
    pub container: Option<String>,
    /// The whole container id (64 hex: the pod status's `containerID` without its scheme).
    pub container_full: Option<String>,
    /// The runtime that names the container.
    pub runtime: Option<Runtime>,
    /// The process is the runtime's monitor of the container (CRI-O's conmon), not in it.
    pub monitor: bool,
    /// systemd unit (`vllm.service`).
    pub unit: Option<String>,
    /// Kubernetes pod UID (with dashes, as the API server writes it).
    pub pod: Option<String>,
    /// The pod's QoS class, where the process is in a pod.
    pub qos: Option<Qos>,
}

/// The leading hex digits of `s`, when there are at least 12 of them (a container id).
fn hex_id(s: &str) -> Option<String> {
    let id: String = s.chars().take_while(char::is_ascii_hexdigit).collect();
    (id.len() >= 12).then_some(id)
}

/// A pod UID as the API server writes it: 32 hex digits in 8-4-4-4-12 groups.
fn pod_uid(s: &str) -> Option<String> {
    let uid = s.replace('_', "-");
    let groups: Vec<&str> = uid.split('-').collect();
    let shape = [8, 4, 4, 4, 12];
    let ok = groups.len() == shape.len()
        && groups
            .iter()
            .zip(shape)
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()));
    ok.then_some(uid)
}

fn qos(word: &str) -> Option<Qos> {
    match word {
        "burstable" => Some(Qos::Burstable),
        "besteffort" => Some(Qos::BestEffort),
        _ => None,
    }
}

/// The pod of one path segment: `kubepods-<qos>-pod<UID>.slice`, `kubepods-pod<UID>.slice`
/// (systemd driver) or `pod<UID>` (cgroupfs driver).
fn pod_segment(seg: &str) -> Option<(String, Qos)> {
    if let Some(rest) = seg
        .strip_prefix("kubepods-")
        .and_then(|s| s.strip_suffix(".slice"))
    {
        let (level, uid) = rest.rsplit_once("pod")?;
        let level = level.trim_end_matches('-');
        let q = if level.is_empty() {
            Qos::Guaranteed
        } else {
            qos(level)?
        };
        return pod_uid(uid).map(|u| (u, q));
    }
    seg.strip_prefix("pod")
        .and_then(pod_uid)
        .map(|u| (u, Qos::Guaranteed))
}

/// The container of one path segment, with its runtime.
fn container_segment(seg: &str, in_pod_or_docker: bool) -> Option<(String, Runtime, bool)> {
    let named = [
        ("crio-conmon-", Runtime::CriO, true),
        ("cri-containerd-", Runtime::Containerd, false),
        ("crio-", Runtime::CriO, false),
        ("docker-", Runtime::Docker, false),
        ("libpod-", Runtime::Podman, false),
    ];
    for (prefix, rt, monitor) in named {
        if let Some(rest) = seg.strip_prefix(prefix) {
            return hex_id(rest).map(|id| (id, rt, monitor));
        }
    }
    // The cgroupfs driver (and Docker's own tree) name the container by its bare id.
    if in_pod_or_docker && seg.len() >= 64 {
        return hex_id(seg)
            .filter(|id| id.len() == seg.len())
            .map(|id| (id, Runtime::Unnamed, false));
    }
    None
}

/// Parses `/proc/PID/cgroup` (v1 or v2).
pub fn parse(text: &str) -> CgroupOwner {
    let mut o = CgroupOwner::default();
    for line in text.lines() {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        let mut in_pod = false;
        let docker_tree = path.starts_with("/docker/");
        for seg in path.split('/') {
            if let Some((uid, q)) = pod_segment(seg) {
                in_pod = true;
                // The innermost pod wins (a kind node runs pods inside a container).
                o.pod = Some(uid);
                o.qos = Some(q);
                o.container_full = None;
                o.container = None;
                o.runtime = None;
                o.monitor = false;
            } else if seg == "burstable" || seg == "besteffort" {
                // cgroupfs QoS level: the pod below says its own class.
            } else if let Some((id, rt, monitor)) = container_segment(seg, in_pod || docker_tree) {
                if o.container_full.is_none() || in_pod {
                    let rt = if docker_tree && !in_pod && rt == Runtime::Unnamed {
                        Runtime::Docker
                    } else {
                        rt
                    };
                    o.container = Some(id.chars().take(12).collect());
                    o.container_full = Some(id);
                    o.runtime = Some(rt);
                    o.monitor = monitor;
                }
            } else if seg.ends_with(".service")
                && !seg.starts_with("docker")
                && !seg.starts_with("containerd")
                && !seg.starts_with("crio")
                && !seg.starts_with("kubelet")
                && !seg.starts_with("user@")
            {
                o.unit = Some(seg.to_string());
            }
        }
        // The cgroupfs driver's QoS level sits above the pod's segment.
        if path.contains("/kubepods/burstable/") {
            o.qos = o.qos.map(|_| Qos::Burstable);
        } else if path.contains("/kubepods/besteffort/") {
            o.qos = o.qos.map(|_| Qos::BestEffort);
        }
    }
    if o.container.is_some() || o.pod.is_some() {
        o.unit = None;
    }
    o
}
