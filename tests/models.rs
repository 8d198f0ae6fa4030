//! Served models against the simulator's model servers (real processes answering HTTP on
//! 127.0.0.1): discovery, health and metrics, a crashed server, start/stop through the
//! registry, a model that does not fit the staged layout, registry errors, the advisor.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::{Node, partop, quick, run, wait_until};
use partop::domain::model_status::{ModelState, ServedModel};

fn cmd(node: &Node) -> std::process::Command {
    let mut c = partop();
    c.env("XDG_STATE_HOME", node.dir.path().join("xdg"))
        .env("XDG_CONFIG_HOME", node.dir.path().join("xdg"))
        .arg("--sim-state")
        .arg(&node.state);
    c
}

fn models(node: &Node, extra: &[&str]) -> Vec<ServedModel> {
    let o = run(cmd(node).args(extra).args(["models", "list", "--json"]), "");
    assert!(o.code == 0 || o.code == 3, "{}{}", o.stdout, o.stderr);
    serde_json::from_str(&o.stdout).unwrap()
}

fn healthy(node: &Node, n: usize) -> Vec<ServedModel> {
    let mut last = vec![];
    wait_until("model servers healthy", || {
        last = models(node, &[]);
        last.iter()
            .filter(|m| m.state == ModelState::Healthy)
            .count()
            == n
    });
    last
}

#[test]
fn registered_servers_are_probed_for_health_queue_and_kv_cache() {
    let node = Node::start("cpx-nps4-small-models");
    let ms = healthy(&node, 3);
    let a = ms.iter().find(|m| m.name == "llama-8b-a").unwrap();
    assert_eq!(a.server.as_deref(), Some("vllm"));
    assert_eq!(a.gpus, vec![0]);
    assert_eq!(a.bdfs, vec!["0000:05:00.0".to_string()]);
    assert!(a.running.is_some() && a.waiting.is_some(), "{a:?}");
    assert!(a.kv_cache.is_some_and(|k| (0.0..=1.0).contains(&k)));
    assert!(a.log.as_deref().unwrap().ends_with("llama-8b-a.log"));
    assert!(
        a.log_tail.iter().any(|l| l.contains(&format!(
            "Uvicorn running on http://127.0.0.1:{}",
            a.port.unwrap()
        ))),
        "{:?}",
        a.log_tail
    );
    let b = ms.iter().find(|m| m.name == "llama-8b-b").unwrap();
    assert_eq!(b.gpus, vec![1]);
}

#[test]
fn servers_missing_from_the_registry_are_discovered_with_device_and_port() {
    let node = Node::start("cpx-nps4-small-models");
    let empty = node.dir.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let mut ms = vec![];
    wait_until("discovered servers", || {
        ms = models(&node, &["--models", empty.to_str().unwrap()]);
        ms.len() == 3 && ms.iter().all(|m| m.state == ModelState::Healthy)
    });
    let st = partop::sim::state::SimState::load(&node.state).unwrap();
    let port = st.workloads[1].port;
    let m = ms
        .iter()
        .find(|m| m.name == format!("vllm:{port}"))
        .unwrap();
    assert!(m.spec.is_none());
    assert_eq!(m.model, "meta-llama/Llama-3.1-8B-Instruct");
    assert_eq!(m.gpus, vec![1]);
    // The UI's "add to registry" and `models add` produce an entry that validates.
    let o = run(
        cmd(&node)
            .args(["--models", empty.to_str().unwrap()])
            .args([
                "models",
                "add",
                &st.workloads[1].pid.unwrap().to_string(),
                "--write",
            ]),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let reg =
        partop::domain::models::parse("e", &std::fs::read_to_string(&empty).unwrap()).unwrap();
    assert_eq!(reg.models[0].port, port);
}

#[test]
fn a_crashed_server_is_seen_and_a_restart_counted() {
    let node = Node::start("cpx-nps4-small-models");
    healthy(&node, 3);
    // In-process collector (it keeps what it saw between samples, as the monitor does), running
    // the partop binary's fake amd-smi.
    let n = partop::node::open_with(
        &partop::node::SourceArgs {
            sim_state: Some(node.state.clone()),
            timeout: 10.0,
            ..partop::node::SourceArgs::default()
        },
        std::path::Path::new(env!("CARGO_BIN_EXE_partop")),
    )
    .unwrap();
    let mut c = n.collector();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let find = |s: &partop::domain::Snapshot| {
        s.models
            .iter()
            .find(|m| m.name == "mistral-7b")
            .cloned()
            .unwrap()
    };
    let before = find(&rt.block_on(c.sample()));
    assert_eq!(before.state, ModelState::Healthy);
    let pid = before.pid.unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let mut after = before.clone();
    wait_until("crash seen", || {
        after = find(&rt.block_on(c.sample()));
        after.state == ModelState::Stopped
    });
    assert_eq!(
        after.reason.as_deref(),
        Some(format!("exited (was pid {pid}); partop saw it running").as_str())
    );
    // Started again through the registry: a new pid is a restart.
    let o = run(
        cmd(&node).args(["models", "start", "mistral-7b", "--yes"]),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("mistral-7b healthy after"),
        "{}",
        o.stdout
    );
    let again = find(&rt.block_on(c.sample()));
    assert_eq!(
        again.state,
        ModelState::Healthy,
        "{}\n{}\n{:?}",
        o.stdout,
        node.sim("status").stdout,
        std::fs::read_to_string(again.log.as_deref().unwrap())
    );
    assert_eq!(again.restarts, 1);
    assert_ne!(again.pid, Some(pid));
    // Its old logical GPU was free: it goes back there (best fit, lowest index).
    assert_eq!(again.gpus, vec![2]);
    // Stop: SIGTERM, journaled.
    let o = run(
        cmd(&node).args(["models", "stop", "mistral-7b", "--yes"]),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let j = partop::exec::journal::read(&node.dir.path().join("xdg/partop/journal.jsonl"))
        .unwrap()
        .0;
    let actions: Vec<&str> = j.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "model.start",
            "model.start.result",
            "model.stop",
            "model.stop.result"
        ],
        "journal first: each action before it acts, then its result"
    );
    // Its port taken meanwhile by another program: the start fails, and the server's own
    // words (in its log) say why.
    let port = before.port.unwrap();
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let o = run(
        cmd(&node).args(["models", "start", "mistral-7b", "--yes"]),
        "",
    );
    assert_ne!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let said = format!("{}{}", o.stdout, o.stderr);
    // Refused before anything starts (issue 28): a second server on a taken port would fail,
    // or the program on it would answer the health check in the server's place.
    assert!(
        said.contains(&format!(
            "port {port} is already served by pid {}",
            std::process::id()
        )) && said.contains("nothing was started"),
        "{said}"
    );
    drop(squatter);
    // Dry run and read-only change nothing.
    let o = run(
        cmd(&node).args(["models", "start", "mistral-7b", "--dry-run"]),
        "",
    );
    assert!(o.stdout.contains("HIP_VISIBLE_DEVICES=2 "), "{}", o.stdout);
    let o = run(
        cmd(&node).args(["--read-only", "models", "start", "mistral-7b", "--yes"]),
        "",
    );
    assert_eq!(o.code, 2);
}

const BIG: &str = "[[workload]]\nname = \"big\"\nkind = \"model-server\"\ngpu = 0\nvram_gb = 100\nbusy = 40\nmodel = \"org/big-70b\"\n[[workload]]\nname = \"small\"\nkind = \"model-server\"\ngpu = 1\nvram_gb = 10\nbusy = 40\nmodel = \"org/small-7b\"\n";

#[test]
fn a_model_that_does_not_fit_the_staged_layout_is_said_before_confirmation() {
    let node = Node::start(&quick("fit", "7.0.2", "SPX", "NPS1", BIG));
    healthy(&node, 2);
    let o = run(
        cmd(&node).args(["plan", "--compute", "CPX", "--memory", "NPS4", "--json"]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let plan: partop::domain::plan::Plan = serde_json::from_str(&o.stdout).unwrap();
    let big = plan.models.iter().find(|m| m.name == "big").unwrap();
    assert!(big.to.is_empty());
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.starts_with("model big does not fit the staged layout (needs 100.0 GiB")),
        "{:?}",
        plan.warnings
    );
    let small = plan.models.iter().find(|m| m.name == "small").unwrap();
    assert_eq!(small.to[0].bdf, "0000:26:00.0");
    assert_eq!(small.to[0].gpu_id, 8);
    let text = run(
        cmd(&node).args(["plan", "--compute", "CPX", "--memory", "NPS4"]),
        "",
    );
    assert!(text.stdout.contains("does not fit"), "{}", text.stdout);
    let p = node.dir.path().join("p.json");
    std::fs::write(&p, &o.stdout).unwrap();
    let o = run(
        cmd(&node)
            .arg("apply")
            .arg(&p)
            .args(["--yes", "--grace", "3"]),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("big not relaunched"), "{}", o.stdout);
    assert!(
        o.stdout.contains("small healthy on logical GPU 8"),
        "{}",
        o.stdout
    );
    let ms = models(&node, &[]);
    let big = ms.iter().find(|m| m.name == "big").unwrap();
    assert_eq!(big.state, ModelState::Stopped);
}

#[test]
fn registry_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("models.toml");
    std::fs::write(
        &f,
        "[[model]]\nname = \"a\"\nmodel = \"x\"\nport = 8000\nmemory_gb = 10\nlaunch.command = [\"vllm\", \"serve\", \"{modle}\"]\n",
    )
    .unwrap();
    let o = run(
        partop()
            .env("XDG_CONFIG_HOME", dir.path())
            .args(["check-config", "--models"])
            .arg(&f),
        "",
    );
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(
        o.stdout.contains(&format!(
            "{}:6:1: model \"a\": unknown placeholder {{modle}}",
            f.display()
        )),
        "{}",
        o.stdout
    );
    // The monitor's data path keeps going: the registry is a failed source, models discovered.
    let node = Node::start("cpx-nps4-small-models");
    let o = run(
        cmd(&node).args(["--models", f.to_str().unwrap(), "snapshot", "--json"]),
        "",
    );
    let snap: partop::domain::Snapshot = serde_json::from_str(&o.stdout).unwrap();
    let src = snap
        .sources
        .iter()
        .find(|s| s.name == "models registry")
        .unwrap();
    assert!(src.error.as_deref().unwrap().contains(":6:1:"));
    assert_eq!(snap.models.len(), 3);
}

#[test]
fn advisor_proposes_a_layout_for_the_registry() {
    let node = Node::start("cpx-nps4-small-models");
    let o = run(cmd(&node).args(["models", "advise", "--json"]), "");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let ranked: Vec<partop::domain::placement::Proposal> = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(
        (ranked[0].compute.to_string(), ranked[0].memory.to_string()),
        ("CPX".into(), "NPS4".into())
    );
    assert_eq!(ranked[0].fitted(), 3);
    let o = run(cmd(&node).args(["models", "advise"]), "");
    assert!(
        o.stdout.contains("the node is already in this layout"),
        "{}",
        o.stdout
    );
}

/// A launch command that forks the server and exits (`sh -c "server &"`): the server is found
/// in the launch's process group and followed; its health counts as the model's. A second
/// start is refused on the taken port, never a second server (issue 28).
#[test]
fn a_launch_that_forks_its_server_is_followed_and_never_doubled() {
    let node = Node::start("cpx-nps4-small-models");
    healthy(&node, 3);
    let o = run(
        cmd(&node).args(["models", "stop", "mistral-7b", "--yes"]),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // The node's own registry, with mistral-7b's launch wrapped in a shell that forks it.
    let reg = partop::sim::session::registry_path(&node.state);
    let text = std::fs::read_to_string(&reg).unwrap();
    let at = text.find("name = \"mistral-7b\"").unwrap();
    let line_at = at + text[at..].find("launch.command = [").unwrap();
    let line_end = line_at + text[line_at..].find('\n').unwrap();
    let words: Vec<String> =
        serde_json::from_str(text[line_at + "launch.command = ".len()..line_end].trim()).unwrap();
    let inner = words
        .iter()
        .map(|w| partop::domain::text::shell_quote(w).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let forked = format!(
        "launch.command = [\"sh\", \"-c\", {}]",
        serde_json::to_string(&format!("{inner} > /dev/null 2>&1 &")).unwrap()
    );
    let new = format!("{}{}{}", &text[..line_at], forked, &text[line_end..]);
    let own = node.dir.path().join("forking.models.toml");
    std::fs::write(&own, new).unwrap();
    let o = run(
        cmd(&node)
            .arg("--models")
            .arg(&own)
            .args(["models", "start", "mistral-7b", "--yes"]),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("exited; pid") && o.stdout.contains("mistral-7b healthy after"),
        "{}",
        o.stdout
    );
    let again = run(
        cmd(&node)
            .arg("--models")
            .arg(&own)
            .args(["models", "start", "mistral-7b", "--yes"]),
        "",
    );
    assert_ne!(again.code, 0);
    let said = format!("{}{}", again.stdout, again.stderr);
    assert!(
        said.contains("is already running (pid") || said.contains("is already served by pid"),
        "{said}"
    );
}

/// A program that takes the model's port while partop's launch is still starting (the launch
/// alive, never listening) answers `/health` 200: that is not the model's health. The start
/// fails naming the pid that answers (it once reported "healthy", issue 28).
#[test]
fn an_answer_from_another_program_while_the_launch_starts_is_not_health() {
    use std::io::{Read, Write};
    let node = Node::start("cpx-nps4-small-models");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let reg = node.dir.path().join("liar.models.toml");
    std::fs::write(
        &reg,
        format!(
            "[[model]]\nname = \"liar\"\nmodel = \"liar\"\nport = {port}\nmemory_gb = 1\nhealth_timeout_secs = 6\nlaunch.command = [\"sh\", \"-c\", \"sleep 4.321; exit 0\"]\n"
        ),
    )
    .unwrap();
    // The foreign server: this test's own thread, once the launch runs (its `sleep 4.321`).
    std::thread::spawn(move || {
        let launched = || {
            std::fs::read_dir("/proc").unwrap().flatten().any(|d| {
                std::fs::read(d.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("sleep 4.321; exit"))
            })
        };
        let t0 = std::time::Instant::now();
        while !launched() && t0.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut b = [0u8; 1024];
            let _ = s.read(&mut b);
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    let o = run(
        cmd(&node)
            .arg("--models")
            .arg(&reg)
            .args(["models", "start", "liar", "--yes"]),
        "",
    );
    let said = format!("{}{}", o.stdout, o.stderr);
    assert_ne!(o.code, 0, "{said}");
    assert!(!said.contains("liar healthy"), "{said}");
    assert!(
        said.contains(&format!("pid {}", std::process::id()))
            && said.contains("not the server partop started"),
        "{said}"
    );
}

/// `models advise` lists every layout the device offers, ranked (it listed the best and 5
/// others: SPX/NPS1 was cut), with sizes in GiB, and docs/models.md's example is its output.
#[test]
fn advise_lists_every_offered_layout_and_the_docs_example_is_true() {
    let text = |args: &[&str]| {
        let o = run(
            partop()
                .env("PARTOP_SIM_AMD_SMI_COST", "off")
                .args(["--sim", "cpx-nps4-small-models", "models", "advise"])
                .args(args),
            "",
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        o.stdout
    };
    let out = text(&[]);
    let ranked: Vec<serde_json::Value> = serde_json::from_str(&text(&["--json"])).unwrap();
    assert_eq!(ranked.len(), 7, "MI300X offers 7 compute/memory layouts");
    for r in &ranked {
        let summary = r["summary"].as_str().unwrap();
        assert!(out.contains(summary), "{summary} missing from:\n{out}");
    }
    assert!(
        out.contains("  SPX/NPS1: 8 logical GPUs of 192.0 GiB"),
        "{out}"
    );
    assert!(!out.contains(" GB"), "GiB, not GB: {out}");
    // The docs' example block is exactly this output.
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/models.md")).unwrap();
    let start = doc
        .find("$ partop --sim cpx-nps4-small-models models advise\n")
        .unwrap();
    let body = &doc[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let body = &body[..body.find("```").unwrap()];
    assert_eq!(body, out, "docs/models.md's advise example");
    eprintln!("{} layouts checked", ranked.len());
}

/// After `a` adds a discovered server, the next sample shows it registered (the collector
/// follows the registry file), and a second add of the same server (the row not yet redrawn)
/// writes nothing and is not an error.
#[test]
fn an_added_server_is_registered_at_the_next_sample_and_a_second_add_is_harmless() {
    let node = Node::start("cpx-nps4-small-models");
    healthy(&node, 3);
    let reg = node.dir.path().join("added.toml");
    std::fs::write(&reg, "").unwrap();
    let n = partop::node::open_with(
        &partop::node::SourceArgs {
            sim_state: Some(node.state.clone()),
            models: Some(reg.clone()),
            timeout: 10.0,
            ..partop::node::SourceArgs::default()
        },
        std::path::Path::new(env!("CARGO_BIN_EXE_partop")),
    )
    .unwrap();
    let mut c = n.collector();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let snap = rt.block_on(c.sample());
    let m = snap
        .models
        .iter()
        .find(|m| m.spec.is_none() && m.pid.is_some())
        .cloned()
        .expect("a discovered server");
    let entry = partop::domain::served::entry_for_model(&snap, &m).unwrap();
    let journal = node.dir.path().join("journal.jsonl");
    assert_eq!(
        partop::exec::registry::append_entry(&reg, &entry, &journal).unwrap(),
        partop::exec::registry::Added::Written
    );
    let written = std::fs::read_to_string(&reg).unwrap();
    // The same collector, next sample: the server is the registry's now.
    let snap = rt.block_on(c.sample());
    let now = snap
        .models
        .iter()
        .find(|x| x.port == m.port)
        .expect("the server is still listed");
    assert!(now.spec.is_some(), "{} still shows as discovered", now.name);
    assert_eq!(
        snap.models.iter().filter(|x| x.port == m.port).count(),
        1,
        "one row for the server"
    );
    // The second `a` (the old row): nothing written, no error.
    assert_eq!(
        partop::exec::registry::append_entry(&reg, &entry, &journal).unwrap(),
        partop::exec::registry::Added::AlreadyThere
    );
    assert_eq!(std::fs::read_to_string(&reg).unwrap(), written);
}
