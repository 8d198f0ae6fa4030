//! The cluster's side of a change on a Kubernetes node, pure (issue 25, item 4): the RBAC
//! verbs a drain needs, the Eviction body partop sends, a PodDisruptionBudget's selector
//! matched against a pod's labels, DCM's change-window taint, the allocatable comparison and
//! the exact undo of a node left cordoned or tainted. `exec::k8s` performs the verbs.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The change window's taint key, value and effect: AMD's Device Config Manager taints the node
/// `amd-dcm=up:NoExecute` while it repartitions, so the GPU operator's DaemonSet pods (the
/// metrics exporter, which holds the GPUs) leave, and removes it after.
pub const WINDOW_TAINT_KEY: &str = "amd-dcm";
/// The taint's value.
pub const WINDOW_TAINT_VALUE: &str = "up";
/// The taint's effect.
pub const WINDOW_TAINT_EFFECT: &str = "NoExecute";

/// The label of a node a DCM profile manages: DCM applies the profile it names and may revert a
/// change made by hand.
pub const DCM_PROFILE_LABEL: &str = "dcm.amd.com/gpu-config-profile";

/// The device-plugin pods' labels by default (AMD's `k8s-ds-amdgpu-dp.yaml` DaemonSet).
pub const PLUGIN_LABELS: &str = "name=amdgpu-dp-ds";

/// The kubelet's device-plugin directory: a plugin registers through the kubelet's socket
/// there, so every device plugin mounts it from the host.
pub const DEVICE_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";

/// A pod as the device-plugin check reads it.
#[derive(Debug)]
pub struct PluginPod<'a> {
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The host paths it mounts.
    pub host_paths: Vec<&'a str>,
    /// Its namespace, name and container images.
    pub names: Vec<&'a str>,
}

/// Whether a pod on the node is the AMD GPU device plugin, the pod a stale registration is
/// restarted by (deleted once, its DaemonSet starting it again): AMD's own DaemonSet's label
/// ([`PLUGIN_LABELS`]); or, whatever its labels (the GPU operator's), a pod that mounts the
/// kubelet's device-plugin directory from the host, where a plugin registers, and that is AMD's
/// by its namespace, name or image. Never another vendor's plugin (an RDMA or SR-IOV NIC's) nor
/// a CSI driver mounting the kubelet's whole directory.
pub fn is_device_plugin(p: &PluginPod<'_>) -> bool {
    let labelled = PLUGIN_LABELS.split(',').all(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        p.labels.get(k).is_some_and(|x| x == v)
    });
    let registers = p
        .host_paths
        .iter()
        .any(|h| h.trim_end_matches('/') == DEVICE_PLUGIN_DIR);
    let amd = p
        .names
        .iter()
        .any(|n| n.to_ascii_lowercase().contains("amd"));
    labelled || (registers && amd)
}

/// A pod by identity: its name and the UID it had when planned (a new pod of the same name is
/// another pod).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodId {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl std::fmt::Display for PodId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One RBAC permission a step needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// The verb (`create`, `patch`).
    pub verb: &'static str,
    /// The API group (`""` core, `policy`).
    pub group: &'static str,
    /// The resource.
    pub resource: &'static str,
    /// The subresource (`eviction`), or empty.
    pub subresource: &'static str,
    /// The namespace (None: every namespace, or cluster-scoped).
    pub namespace: Option<String>,
}

impl Access {
    const fn of(verb: &'static str, group: &'static str, resource: &'static str) -> Self {
        Self {
            verb,
            group,
            resource,
            subresource: "",
            namespace: None,
        }
    }

    /// `pods/eviction`, `poddisruptionbudgets.policy`.
    pub fn resource_text(&self) -> String {
        let mut s = self.resource.to_string();
        if !self.subresource.is_empty() {
            s = format!("{s}/{}", self.subresource);
        }
        if !self.group.is_empty() {
            s = format!("{s} ({})", self.group);
        }
        s
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource_text())?;
        if let Some(n) = &self.namespace {
            write!(f, " in {n}")?;
        }
        Ok(())
    }
}

/// What a drain around a repartition needs: the node read and patched (cordon, taint), the pods
/// listed and read, evicted, the device-plugin pod deleted, the budgets read to name them.
pub fn drain_access() -> Vec<Access> {
    let mut eviction = Access::of("create", "", "pods");
    eviction.subresource = "eviction";
    vec![
        Access::of("get", "", "nodes"),
        Access::of("patch", "", "nodes"),
        Access::of("update", "", "nodes"),
        Access::of("list", "", "pods"),
        Access::of("get", "", "pods"),
        eviction,
        Access::of("delete", "", "pods"),
        Access::of("list", "policy", "poddisruptionbudgets"),
    ]
}

/// The Eviction partop sends: `policy/v1`, the pod's UID as precondition, and the grace period
/// and dry run in its `deleteOptions` (kube-core's `Api::evict` can drop them; this body is
/// checked against the real API server by `tests/k8s_drain.rs`).
pub fn eviction_body(pod: &PodId, grace_secs: Option<i64>, dry_run: bool) -> Value {
    let mut delete = serde_json::Map::new();
    if !pod.uid.is_empty() {
        delete.insert("preconditions".into(), json!({"uid": pod.uid}));
    }
    if let Some(g) = grace_secs {
        delete.insert("gracePeriodSeconds".into(), json!(g));
    }
    if dry_run {
        delete.insert("dryRun".into(), json!(["All"]));
    }
    json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
        "deleteOptions": Value::Object(delete),
    })
}

/// The budget a refusal's words name (`The disruption budget NAME needs …`).
pub fn budget_in_words(words: &str) -> Option<String> {
    let rest = words.split("disruption budget ").nth(1)?;
    let name = rest.split_whitespace().next()?;
    Some(name.to_string())
}

/// Each resource whose advertised count differs from the expected (`amd.com/gpu 8 (expected
/// 16)`); an absent or unreadable quantity counts as 0.
pub fn allocatable_differs(
    expected: &BTreeMap<String, i64>,
    now: &BTreeMap<String, String>,
) -> Vec<String> {
    expected
        .iter()
        .filter_map(|(r, want)| {
            let has = now
                .get(r)
                .and_then(|q| q.trim().parse::<i64>().ok())
                .unwrap_or(0);
            (has != *want).then(|| format!("{r} {has} (expected {want})"))
        })
        .collect()
}

/// Why `name` is not a Kubernetes object name of `kind` (None: it is one). Names are DNS-1123
/// subdomains (lowercase letters, digits, `-` and `.`, starting and ending with a letter or
/// digit, at most 253), a namespace a DNS-1123 label (no `.`, at most 63). Checked where a
/// name from a file or a socket is about to go into an API path, a field selector or a
/// printed command: a name with `/`, `,`, `=` or a blank would address something else.
pub fn name_problem(kind: &str, name: &str) -> Option<String> {
    let label = kind == "namespace";
    let max = if label { 63 } else { 253 };
    let ok_char =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (!label && c == '.');
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let fine = !name.is_empty()
        && name.len() <= max
        && name.chars().all(ok_char)
        && edge(name.chars().next())
        && edge(name.chars().last());
    (!fine).then(|| {
        format!(
            "{kind} {:?} is not a Kubernetes name (lowercase letters, digits, '-'{}, at most {max} characters): refused",
            crate::domain::text::escape_controls(&name.chars().take(80).collect::<String>()),
            if label { "" } else { " and '.'" }
        )
    })
}

/// The annotation that says which partop change cordoned the node (so its uncordon, a resumed
/// one included, never uncordons a node someone else cordoned).
pub const CORDONED_BY_PARTOP: &str = "partop.amd.com/cordoned";

/// The annotation that says which partop change added the change window's taint (whose key is
/// DCM's own, so the DaemonSets that tolerate DCM's window tolerate partop's): its untaint
/// lifts only its own.
pub const TAINTED_BY_PARTOP: &str = "partop.amd.com/tainted";

/// The exact commands that undo what a stopped run left on the node: the taint or the cordon,
/// and partop's mark of it (a mark left behind would name a change that holds nothing).
pub fn undo_commands(node: &str, cordoned: bool, tainted: bool) -> Vec<String> {
    let node = crate::domain::text::shell_quote(node);
    let mut out = Vec::new();
    if tainted {
        out.push(format!(
            "kubectl taint nodes {node} {WINDOW_TAINT_KEY}={WINDOW_TAINT_VALUE}:{WINDOW_TAINT_EFFECT}- && kubectl annotate node {node} {TAINTED_BY_PARTOP}-"
        ));
    }
    if cordoned {
        out.push(format!(
            "kubectl uncordon {node} && kubectl annotate node {node} {CORDONED_BY_PARTOP}-"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AMD's device plugin by its label, or as the GPU operator runs it (AMD's by name,
    /// mounting the registration directory); never an RDMA or SR-IOV plugin, a CSI driver
    /// mounting the kubelet's directory, or a pod mounting something else (7 cases).
    #[test]
    fn only_amds_device_plugin_is_known_as_the_plugin_to_restart() {
        let amd: BTreeMap<String, String> =
            [("name".to_string(), "amdgpu-dp-ds".to_string())].into();
        let other: BTreeMap<String, String> = [(
            "app.kubernetes.io/name".to_string(),
            "device-plugin".to_string(),
        )]
        .into();
        let none = BTreeMap::new();
        fn pod<'a>(
            labels: &'a BTreeMap<String, String>,
            paths: &[&'a str],
            names: &[&'a str],
        ) -> PluginPod<'a> {
            PluginPod {
                labels,
                host_paths: paths.to_vec(),
                names: names.to_vec(),
            }
        }
        let dir = DEVICE_PLUGIN_DIR;
        let operator = [
            "kube-amd-gpu",
            "amd-gpu-device-plugin-x7k2p",
            "rocm/k8s-device-plugin",
        ];
        let rdma = ["kube-system", "rdma-shared-dp-ds-1", "mellanox/k8s-rdma"];
        let csi = ["kube-system", "amd-csi-node", "csi"];
        let cases = [
            (pod(&amd, &[], &[]), true),
            (pod(&other, &[dir], &operator), true),
            (
                pod(
                    &other,
                    &[dir],
                    &["kube-system", "gpu-plugin", "example/plugin"],
                ),
                false,
            ),
            (pod(&other, &[dir], &rdma), false),
            (pod(&other, &["/var/lib/kubelet"], &csi), false),
            (
                pod(&other, &["/var/lib/kubelet/pod-resources"], &operator),
                false,
            ),
            (pod(&none, &["/", "/sys"], &operator), false),
        ];
        for (i, (p, want)) in cases.iter().enumerate() {
            assert_eq!(is_device_plugin(p), *want, "case {i}: {p:?}");
        }
        assert_eq!(cases.len(), 7);
    }

    /// Names that would address something else, or are not names, are refused; real ones
    /// pass: every family (separators, blanks, controls, case, edges, length) at each place of
    /// a name (55 cases).
    #[test]
    fn only_kubernetes_names_pass() {
        let good = [
            "gpu-node-1",
            "a",
            "node.example.com",
            "sim-amd-0001",
            &"a".repeat(253),
        ];
        for g in good {
            assert_eq!(name_problem("node", g), None, "{g}");
        }
        assert_eq!(name_problem("namespace", "kube-system"), None);
        let mut cases = good.len() + 1;
        for bad in [
            "/", ",", "=", " ", "\t", "\n", "\u{1b}", "A", "_", ":", "?", "#", "%", "'",
        ] {
            for at in ["{}x", "x{}x", "x{}"] {
                let n = at.replace("{}", bad);
                assert!(name_problem("node", &n).is_some(), "{n:?}");
                cases += 1;
            }
        }
        for bad in ["", "-a", "a-", ".a", &"a".repeat(254)] {
            assert!(name_problem("pod", bad).is_some(), "{bad:?}");
            cases += 1;
        }
        assert!(name_problem("namespace", "a.b").is_some());
        assert!(name_problem("namespace", &"a".repeat(64)).is_some());
        cases += 2;
        assert_eq!(cases, 55);
    }

    #[test]
    fn the_eviction_body_carries_grace_dry_run_and_uid() {
        let p = PodId {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u-1".into(),
        };
        let b = eviction_body(&p, Some(7), true);
        assert_eq!(b["apiVersion"], "policy/v1");
        assert_eq!(b["deleteOptions"]["gracePeriodSeconds"], 7);
        assert_eq!(b["deleteOptions"]["dryRun"], json!(["All"]));
        assert_eq!(b["deleteOptions"]["preconditions"]["uid"], "u-1");
        let b = eviction_body(&p, None, false);
        assert!(b["deleteOptions"].get("gracePeriodSeconds").is_none());
        assert!(b["deleteOptions"].get("dryRun").is_none());
    }

    #[test]
    fn the_undo_names_each_thing_left() {
        assert!(undo_commands("n", false, false).is_empty());
        assert_eq!(
            undo_commands("n", true, false),
            ["kubectl uncordon n && kubectl annotate node n partop.amd.com/cordoned-"]
        );
        assert_eq!(
            undo_commands("n", true, true),
            [
                "kubectl taint nodes n amd-dcm=up:NoExecute- && kubectl annotate node n partop.amd.com/tainted-",
                "kubectl uncordon n && kubectl annotate node n partop.amd.com/cordoned-"
            ]
        );
    }
}
