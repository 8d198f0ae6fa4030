//! The layering rules, enforced: the domain imports no I/O, async or terminal crate and no other
//! layer of partop; nothing below the command layer imports it; executors do not know the
//! simulator; the UI does not know the command layer, and its messages, state and reducer know
//! no executor; the top of `src/` holds only the layer roots.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

#[test]
fn domain_depends_on_nothing() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/domain");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.push(concat!(env!("CARGO_MANIFEST_DIR"), "/src/domain.rs").into());
    let forbidden = [
        "tokio",
        "ratatui",
        "crossterm",
        "procfs",
        "nix::",
        "std::fs",
        "std::process",
        "std::net",
        "crate::collect",
        "crate::sim",
        "crate::ui",
        "crate::commands",
        "crate::cli",
        "crate::config",
        "crate::exec",
        "crate::node",
        "crate::report",
        "tiny_http",
        "kube::",
        "k8s_openapi",
    ];
    for f in files {
        let text: String = std::fs::read_to_string(&f)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for bad in forbidden {
            assert!(
                !text.contains(bad),
                "{} uses {bad}: the domain must stay pure",
                f.display()
            );
        }
    }
}

/// Every `.rs` file under `src/<dir>` (and `src/<dir>.rs`), comments dropped.
fn sources(dir: &str) -> Vec<(std::path::PathBuf, String)> {
    fn walk(d: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    if root.join(dir).is_dir() {
        walk(&root.join(dir), &mut files);
    }
    let single = root.join(format!("{dir}.rs"));
    if single.exists() {
        files.push(single);
    }
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f)
                .unwrap()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            (f, text)
        })
        .collect()
}

fn forbid(layer: &str, imports: &[&str], why: &str) {
    let files = sources(layer);
    assert!(!files.is_empty(), "no sources for {layer}");
    for (f, text) in files {
        for bad in imports {
            assert!(!text.contains(bad), "{} uses {bad}: {why}", f.display());
        }
    }
}

#[test]
fn nothing_below_the_command_layer_imports_it() {
    for layer in [
        "ui", "exec", "collect", "sim", "config", "node", "report", "serve",
    ] {
        forbid(
            layer,
            &["crate::cli"],
            "the command layer sits on top; move what is shared below it",
        );
    }
}

#[test]
fn executors_do_not_know_the_simulator() {
    forbid(
        "exec",
        &["crate::sim"],
        "the simulator is reached through what the command layer hands the executor",
    );
}

#[test]
fn the_configuration_sits_below_the_executors() {
    forbid(
        "config",
        &[
            "crate::exec",
            "crate::ui",
            "crate::sim",
            "crate::node",
            "crate::report",
            "crate::serve",
        ],
        "configuration is resolved before anything acts: it reads files and the domain only (the default journal path lives in config::paths)",
    );
}

#[test]
fn executors_know_neither_the_commands_nor_the_screen() {
    forbid(
        "exec",
        &["crate::cli", "crate::ui"],
        "the change protocol runs below its callers: the command layer and the monitor hand it what it needs and print what it returns",
    );
}

#[test]
fn the_ui_reaches_the_node_only_through_effects() {
    forbid(
        "ui",
        &["crate::node", "crate::sim::session"],
        "the UI draws and reduces; the command layer wires the node",
    );
}

#[test]
fn the_monitors_messages_state_and_reducer_know_no_executor() {
    // The UI's own message types (`KillProgress`, …): the effect runner (ui/effect.rs) converts
    // the executors' at the boundary, so the model, the reducer and the views stay theirs.
    for part in [
        "ui/msg",
        "ui/state",
        "ui/update",
        "ui/derive",
        "ui/filter",
        "ui/dialog",
        "ui/stage",
        "ui/mig_stage",
        "ui/model_ask",
        "ui/rows",
        "ui/views",
        "ui/modal",
        "ui/view",
    ] {
        forbid(
            part,
            &["crate::exec", "exec::"],
            "executor types stay out of the UI's messages and state: convert them in ui/effect.rs",
        );
    }
}

#[test]
fn the_executor_settings_come_from_the_node() {
    // `ExecSettings` was a hand-kept copy of `node::Node`'s settings: only the node builds it
    // (`Node::exec_settings`), and the effect runner for a remote node (`ExecSettings::remote`).
    for layer in ["cli", "ui"] {
        for (f, text) in sources(layer) {
            if f.ends_with("ui/effect.rs") {
                continue;
            }
            assert!(
                !text.contains("ExecSettings {"),
                "{} builds ExecSettings by hand: use Node::exec_settings",
                f.display()
            );
        }
    }
}

#[test]
fn the_service_reads_and_never_acts() {
    forbid(
        "serve",
        &[
            "crate::ui",
            "crate::sim",
            "crate::node",
            "exec::kill",
            "exec::apply",
            "exec::models",
            "exec::mig",
            "exec::signal",
        ],
        "partop serve is read only: it samples and publishes; nothing in it may change the node",
    );
}

#[test]
fn the_top_of_src_holds_only_layer_roots() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut top: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(
        top,
        [
            "collect.rs",
            "domain.rs",
            "exec.rs",
            "lib.rs",
            "main.rs",
            "node.rs",
            "report.rs",
            "serve.rs",
            "sim.rs",
            "ui.rs"
        ],
        "a new top-level file is a new layer: put commands under src/cli/"
    );
}

/// Which modules of `layer` each module imports (`super::m`, `crate::<layer>::m`), the unit
/// tests at the bottom of a file left out; the layer's root files (`mod.rs`, `<layer>.rs`)
/// are not modules of it.
fn module_deps(
    layer: &str,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(layer);
    for (f, text) in sources(layer) {
        // Only the layer's own files, not those of its submodules' folders.
        if f.parent() != Some(root.as_path()) {
            continue;
        }
        let name = f.file_stem().unwrap().to_string_lossy().into_owned();
        if name == layer || name == "mod" {
            continue;
        }
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let mut set = BTreeSet::new();
        let full = format!("crate::{layer}::");
        for part in code
            .split("super::")
            .skip(1)
            .chain(code.split(full.as_str()).skip(1))
        {
            let m: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !m.is_empty() && m != name {
                set.insert(m);
            }
        }
        deps.insert(name, set);
    }
    deps
}

/// No module of `deps` reaches itself through its imports; returns how many were checked.
fn assert_acyclic(
    layer: &str,
    deps: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> usize {
    use std::collections::{BTreeMap, BTreeSet};
    fn visit(
        layer: &str,
        n: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if done.contains(n) {
            return;
        }
        assert!(
            !path.iter().any(|p| p == n),
            "{layer} import cycle: {} -> {n}",
            path.join(" -> ")
        );
        path.push(n.to_string());
        for d in deps.get(n).into_iter().flatten() {
            if deps.contains_key(d) {
                visit(layer, d, deps, path, done);
            }
        }
        path.pop();
        done.insert(n.to_string());
    }
    let mut done = BTreeSet::new();
    for n in deps.keys() {
        visit(layer, n, deps, &mut Vec::new(), &mut done);
    }
    done.len()
}

#[test]
fn the_domain_modules_form_no_cycle() {
    let deps = module_deps("domain");
    assert_acyclic("domain", &deps);
    assert!(deps.len() > 10, "{deps:?}");
}

/// The commands import each other one way only: what two commands share sits in a module
/// below both (`fleet_nodes` under `fleet`, `fleet_apply` and `fleet_view`), never in one of
/// them (the fleet's three files once imported each other in a circle).
#[test]
fn the_command_modules_form_no_cycle() {
    let deps = module_deps("cli");
    assert!(
        deps["fleet_view"].contains("fleet_nodes") && deps["fleet_apply"].contains("fleet_nodes"),
        "the rule reads the imports it is about: {deps:?}"
    );
    let n = assert_acyclic("cli", &deps);
    assert!(n > 15, "{n} command modules checked: {deps:?}");
}

/// The rule catches a circle: the fleet's old one (fleet -> fleet_view -> fleet), built here,
/// is refused.
#[test]
#[should_panic(expected = "cli import cycle")]
fn a_command_import_circle_is_caught() {
    let mut deps = module_deps("cli");
    deps.get_mut("fleet_view").unwrap().insert("fleet".into());
    deps.get_mut("fleet").unwrap().insert("fleet_view".into());
    assert_acyclic("cli", &deps);
}
