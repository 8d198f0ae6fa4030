//! What a cluster operator applies (`deploy/kubernetes/partop.yaml`), judged by a real API
//! server: every document is accepted by a server-side dry run with strict field validation
//! (an unknown or misspelt field fails), and the roles grant exactly the verbs docs/kubernetes.md
//! says each use of partop needs, asked of the API server itself (`kubectl auth can-i`).
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::control_plane::{ControlPlane, LIMITED_USER};

fn manifest() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubernetes/partop.yaml"
    ))
    .unwrap()
}

/// The documents, and which of them need a CRD a bare control plane does not have.
fn documents() -> Vec<String> {
    manifest()
        .split("\n---\n")
        .map(str::to_string)
        .filter(|d| d.lines().any(|l| l.starts_with("kind:")))
        .collect()
}

#[test]
fn every_document_is_accepted_by_a_real_api_server() {
    let cp = ControlPlane::start();
    let dir = cp.dir.path();
    let docs = documents();
    // The namespace first (a dry run does not create it, and the rest live in it).
    let (ok, out) = cp.kubectl(&cp.admin(), &["create", "namespace", "partop"]);
    assert!(ok, "{out}");
    let mut checked = 0;
    for (i, d) in docs.iter().enumerate() {
        let f = dir.join(format!("doc-{i}.yaml"));
        std::fs::write(&f, d).unwrap();
        if d.contains("kind: ServiceMonitor") {
            // The Prometheus operator's CRD is not part of a bare control plane: checked for
            // its shape only (what the operator reads).
            for want in [
                "port: metrics",
                "app.kubernetes.io/name: partop-serve",
                "interval:",
            ] {
                assert!(d.contains(want), "ServiceMonitor lacks {want}");
            }
            continue;
        }
        let (ok, out) = cp.kubectl(
            &cp.admin(),
            &[
                "apply",
                "--dry-run=server",
                "--validate=strict",
                "-f",
                f.to_str().unwrap(),
            ],
        );
        assert!(ok, "document {i} refused:\n{d}\n{out}");
        checked += 1;
    }
    eprintln!("{checked} documents accepted by kube-apiserver, 1 shape-checked");
    assert!(checked >= 8, "only {checked} documents");
}

/// Binds `role` to the limited user (alone: the previous binding is deleted first).
fn bind(cp: &ControlPlane, role: &str) {
    let _ = cp.kubectl(
        &cp.admin(),
        &[
            "delete",
            "clusterrolebinding",
            "partop-test",
            "--ignore-not-found",
        ],
    );
    let (ok, out) = cp.kubectl(
        &cp.admin(),
        &[
            "create",
            "clusterrolebinding",
            "partop-test",
            &format!("--clusterrole={role}"),
            &format!("--user={LIMITED_USER}"),
        ],
    );
    assert!(ok, "{out}");
}

/// Whether the limited user may `verb` `resource` (`pods/eviction` asked as a subresource, not
/// as a pod called eviction) in namespace `ns` (None: every namespace); and what kubectl said.
fn can_i(cp: &ControlPlane, verb: &str, resource: &str, ns: Option<&str>) -> (bool, String) {
    let mut args = vec!["auth".to_string(), "can-i".into(), verb.into()];
    match resource.split_once('/') {
        Some((r, sub)) => args.extend([r.to_string(), format!("--subresource={sub}")]),
        None => args.push(resource.into()),
    }
    match ns {
        Some(n) => args.extend(["-n".into(), n.to_string()]),
        None => args.push("-A".into()),
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_, out) = cp.kubectl(&cp.limited(), &args);
    (out.trim().starts_with("yes"), out)
}

#[test]
fn each_role_grants_what_the_docs_say_and_nothing_wider() {
    let cp = ControlPlane::start();
    let f = cp.dir.path().join("all.yaml");
    let docs: Vec<String> = documents()
        .into_iter()
        .filter(|d| !d.contains("kind: ServiceMonitor"))
        .collect();
    std::fs::write(&f, docs.join("\n---\n")).unwrap();
    let (ok, out) = cp.kubectl(&cp.admin(), &["apply", "-f", f.to_str().unwrap()]);
    assert!(ok, "{out}");
    // (role, verb, resource, allowed): each use's needs, and what it must not have.
    let cases: &[(&str, &str, &str, bool)] = &[
        ("partop-serve", "list", "pods", true),
        ("partop-serve", "watch", "nodes", true),
        ("partop-serve", "patch", "nodes", false),
        ("partop-serve", "create", "pods/eviction", false),
        ("partop-serve", "delete", "pods", false),
        ("partop-serve", "get", "secrets", false),
        ("partop-change", "patch", "nodes", true),
        ("partop-change", "create", "pods/eviction", true),
        ("partop-change", "delete", "pods", true),
        ("partop-change", "list", "poddisruptionbudgets.policy", true),
        ("partop-change", "patch", "configmaps", true),
        ("partop-change", "delete", "nodes", false),
        ("partop-change", "create", "pods", false),
        ("partop-change", "get", "secrets", false),
        ("partop-fleet-view", "watch", "nodes", true),
        ("partop-fleet-view", "get", "pods/proxy", true),
        ("partop-fleet-view", "patch", "nodes", false),
        ("partop-fleet-view", "create", "pods/eviction", false),
    ];
    let mut bound = "";
    for (role, verb, resource, allowed) in cases {
        if *role != bound {
            bind(&cp, role);
            bound = role;
        }
        let (got, out) = can_i(&cp, verb, resource, None);
        assert_eq!(got, *allowed, "{role}: can-i {verb} {resource} said {out}");
    }
    eprintln!("{} verb checks over 3 roles", cases.len());

    // partop-change grants every permission the code asks of the API server before a change
    // (enumerated from the code's own lists, not copied here: a verb added to a step and not
    // to the role fails this): the drain around a repartition on the node, and the cluster
    // rollout through DCM and through the MIG manager.
    let mut asked: Vec<(String, String, String)> = Vec::new();
    for a in partop::domain::k8s_ops::drain_access()
        .into_iter()
        .chain(partop::domain::cluster_rollout::rollout_access(true))
        .chain(partop::domain::cluster_rollout::rollout_access(false))
    {
        let resource = if a.group.is_empty() {
            a.resource.to_string()
        } else {
            format!("{}.{}", a.resource, a.group)
        };
        let ns = a.namespace.clone().unwrap_or_default();
        let k = (
            a.verb.to_string(),
            if a.subresource.is_empty() {
                resource
            } else {
                format!("{resource}/{}", a.subresource)
            },
            ns,
        );
        if !asked.contains(&k) {
            asked.push(k);
        }
    }
    bind(&cp, "partop-change");
    let mut refused = Vec::new();
    for (verb, resource, ns) in &asked {
        let (ok, _) = can_i(
            &cp,
            verb,
            resource,
            Some(ns.as_str()).filter(|n| !n.is_empty()),
        );
        if !ok {
            refused.push(format!("{verb} {resource} {ns}"));
        }
    }
    assert!(
        refused.is_empty(),
        "partop-change lacks what partop asks before a change: {refused:?}"
    );
    eprintln!(
        "{} permissions partop asks before a change, each granted by partop-change",
        asked.len()
    );
}
