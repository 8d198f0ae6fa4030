//! Hostile conditions, second pass (issue 28): identity is exact or refused, every supported
//! version is read right and every promise kept by every command, and what partop cannot see it
//! says. Each test drives the real binary against the simulator (its kernel twin, its fake
//! amd-smi, real processes holding its device files) or a real ordinary user; each says how many
//! cases it ran.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use common::env::SimEnv;
use common::{Node, Out, partop, quick, run, wait_until};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// `partop --sim-state STATE [flags] snapshot --json`, parsed (a degraded source exits 3: the
/// document is still whole).
fn snapshot(state: &Path, flags: &str) -> Value {
    let o = run(
        partop()
            .arg("--sim-state")
            .arg(state)
            .args(flags.split_whitespace())
            .args(["snapshot", "--json"]),
        "",
    );
    assert!(
        o.code == 0 || o.code == 3,
        "snapshot {flags}: {}{}",
        o.stdout,
        o.stderr
    );
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", o.stdout))
}

/// Logical GPU number by identity (BDF with partition).
fn numbers(s: &Value) -> BTreeMap<String, u64> {
    s["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["partitions"].as_array().unwrap())
        .map(|l| {
            (
                l["bdf"].as_str().unwrap().to_string(),
                l["gpu_id"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn sysfs_error(s: &Value) -> String {
    s["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "sysfs")
        .and_then(|x| x["error"].as_str())
        .unwrap_or("")
        .to_string()
}

/// The KFD topology node directories of a twin, with the BDF.partition each describes.
fn kfd_nodes(state: &Path) -> Vec<(PathBuf, String, u64)> {
    let dir = partop::sim::kernel::root(state).join("class/kfd/kfd/topology/nodes");
    let nodes = partop::collect::kfd::topology(&partop::sim::kernel::root(state));
    nodes
        .iter()
        .map(|n| {
            (
                dir.join(n.node.to_string()),
                format!("{}.{}", n.bdf(), n.partition()),
                n.gpu_id,
            )
        })
        .collect()
}

/// Makes the twin's readers see a new layout (what the kernel does when the topology moves).
fn bump_generation(state: &Path, n: u64) {
    std::fs::write(
        partop::sim::kernel::root(state).join("class/kfd/kfd/topology/generation_id"),
        format!("{}\n", 1000 + n),
    )
    .unwrap();
}

/// A simulated device file (the simulator makes those its workloads open; a test's own holder
/// may need one no workload made).
fn device(path: PathBuf) -> PathBuf {
    if !path.exists() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "").unwrap();
    }
    path
}

/// A workload's pid once it has one.
fn pid_of(e: &SimEnv, name: &str) -> u32 {
    let mut pid = None;
    wait_until(&format!("{name} to start"), || {
        pid = e
            .state()
            .workloads
            .iter()
            .find(|w| w.spec.name == name)
            .and_then(|w| w.pid);
        pid.is_some()
    });
    pid.unwrap()
}

/// A process that holds `files` (paths opened for reading as fds 3, 4, …) and sleeps.
fn holder(files: &[PathBuf]) -> Child {
    let opens: String = files
        .iter()
        .enumerate()
        .map(|(i, f)| format!("exec {}<'{}'; ", i + 3, f.display()))
        .collect();
    let c = Command::new("sh")
        .arg("-c")
        .arg(format!("{opens}exec sleep 60"))
        .spawn()
        .unwrap();
    let pid = c.id();
    let want = files.len();
    wait_until("the holder to open its files", || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten()
                    .filter(|f| std::fs::read_link(f.path()).is_ok_and(|l| files.contains(&l)))
                    .count()
                    == want
            })
            .unwrap_or(false)
    });
    c
}

/// One batch job on GPU 1.
const BATCH: &str = "[[workload]]\nname = \"job\"\nkind = \"batch\"\ngpu = 1\nvram_gb = 5\n";

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn reap(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

fn process(s: &Value, pid: u32) -> Option<&Value> {
    s["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"].as_u64() == Some(u64::from(pid)))
}

// ---------------------------------------------------------------------------------------------
// Identity is exact or refused, never shifted silently.

/// Every KFD node of a DPX/NPS2 node made unreadable in turn (16 cases): its logical GPU is
/// missing and named, every other keeps the number amd-smi gives it (before: every later GPU
/// moved down one, so 26:00.1 was shown as GPU 2).
#[test]
fn an_unreadable_kfd_node_leaves_a_hole_never_a_shift() {
    let node = Node::start(&quick("hole", "7.0.2", "DPX", "NPS2", ""));
    // The twin stopped, so it does not repair what is broken below.
    let o = node.sim("stop");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let amd: BTreeMap<String, u64> = node
        .json("list --json")
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["bdf"].as_str().unwrap().to_string(),
                g["gpu"].as_u64().unwrap(),
            )
        })
        .collect();
    let whole = numbers(&snapshot(&node.state, "--source sysfs"));
    assert_eq!(
        whole, amd,
        "the kernel numbers logical GPUs as amd-smi does"
    );
    let nodes = kfd_nodes(&node.state);
    assert_eq!(nodes.len(), 16);
    let mut cases = 0;
    for (i, (dir, bdf, _)) in nodes.iter().enumerate() {
        let props = dir.join("properties");
        let kept = dir.join("properties.kept");
        std::fs::rename(&props, &kept).unwrap();
        std::fs::create_dir(&props).unwrap();
        bump_generation(&node.state, i as u64);
        let s = snapshot(&node.state, "--source sysfs");
        let seen = numbers(&s);
        let mut want = amd.clone();
        want.remove(bdf);
        assert_eq!(seen, want, "node {} ({bdf}) unreadable", dir.display());
        let err = sysfs_error(&s);
        let n = dir.file_name().unwrap().to_string_lossy();
        assert!(
            err.contains(&format!("KFD node {n}")) && err.contains("the others keep theirs"),
            "{err}"
        );
        std::fs::remove_dir(&props).unwrap();
        std::fs::rename(&kept, &props).unwrap();
        cases += 1;
    }
    bump_generation(&node.state, 99);
    assert_eq!(numbers(&snapshot(&node.state, "--source sysfs")), amd);
    eprintln!("{cases} unreadable-node cases");
}

/// A process's VRAM on one gpu_id, then that gpu_id given to each other KFD node in turn, read
/// by the kernel and by amd-smi with the /proc scan (15 x 2 = 30 cases): a warning names both
/// nodes, and the use is attributed to neither logical GPU (the process says why), where before
/// it landed on whichever came first.
#[test]
fn two_kfd_nodes_with_one_gpu_id_are_named_and_the_use_is_attributed_to_neither() {
    let node = Node::start(&quick("dupid", "7.0.2", "DPX", "NPS2", ""));
    assert_eq!(node.sim("stop").code, 0);
    let dev = node.state.with_extension("dev");
    let h = holder(&[device(dev.join("kfd"))]);
    let nodes = kfd_nodes(&node.state);
    let (_, bdf0, id0) = nodes[0].clone();
    let proc_dir = partop::sim::kernel::root(&node.state)
        .join("class/kfd/kfd/proc")
        .join(h.id().to_string());
    std::fs::create_dir_all(&proc_dir).unwrap();
    std::fs::write(proc_dir.join(format!("vram_{id0}")), "5368709120\n").unwrap();
    bump_generation(&node.state, 0);
    let s = snapshot(&node.state, "--source sysfs");
    let whole = numbers(&s);
    let p = process(&s, h.id()).expect("the holder is listed");
    assert_eq!(p["gpus"][0]["gpu_id"].as_u64(), whole.get(&bdf0).copied());
    assert_eq!(p["gpus"][0]["vram_bytes"].as_u64(), Some(5_368_709_120));
    let mut cases = 0;
    for (i, (dir, bdf, id)) in nodes.iter().enumerate().skip(1) {
        std::fs::write(dir.join("gpu_id"), format!("{id0}\n")).unwrap();
        bump_generation(&node.state, i as u64);
        // The kernel alone, and amd-smi with the /proc scan beside it: the same rule.
        for source in ["sysfs", "amd-smi"] {
            let s = snapshot(&node.state, &format!("--source {source}"));
            let err: String = s["sources"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|x| x["error"].as_str())
                .collect::<Vec<_>>()
                .join("; ");
            assert!(
                err.contains(&format!("share gpu_id {id0}"))
                    && err.contains(&bdf0)
                    && err.contains(bdf),
                "{source}: {err}"
            );
            let p = process(&s, h.id()).expect("the holder is still listed");
            assert!(
                p["gpus"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|u| u["vram_bytes"].as_u64().unwrap_or(0) == 0),
                "{source}: attributed to one of two nodes: {p}"
            );
            let why = p["provenance"]["gpus"]["missing"]["detail"]
                .as_str()
                .unwrap_or("");
            assert!(why.contains("claimed by two nodes"), "{source}: {p}");
            if source == "sysfs" {
                assert_eq!(numbers(&s), whole, "numbers stay");
            }
            cases += 1;
        }
        std::fs::write(dir.join("gpu_id"), format!("{id}\n")).unwrap();
    }
    reap(h);
    eprintln!("{cases} shared-gpu_id cases");
}

/// A process holding only /dev/kfd, read through each source (3 cases): listed by `snapshot`
/// with the attached-only mark, a kfd_only_holder finding, and a stop in `plan`.
#[test]
fn a_process_holding_only_kfd_is_listed_marked_and_a_finding() {
    let e = SimEnv::new("agent-holds-kfd");
    let agent = pid_of(&e, "gpuagent");
    let mut cases = 0;
    for source in ["auto", "sysfs", "amd-smi"] {
        let flags = format!("--source {source}");
        let o = run(e.cmd().args(flags.split_whitespace()).arg("snapshot"), "");
        let row = o
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&agent.to_string()))
            .unwrap_or_else(|| panic!("{source}: gpuagent not in the table:\n{}", o.stdout));
        assert!(
            row.contains("kfd") && row.contains("attached only: holds /dev/kfd"),
            "{row}"
        );
        let s = snapshot(&e.node.state, &flags);
        let f: Vec<&Value> = s["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| {
                f["subject"] == format!("pid {agent}")
                    && (f["kind"] == "kfd_only_holder" || f["kind"] == "unlisted_holder")
            })
            .collect();
        assert_eq!(f.len(), 1, "{source}: {}", s["findings"]);
        cases += 1;
    }
    let o = run(e.cmd().args(["plan", "--memory", "NPS2"]), "");
    assert!(
        o.stdout.contains(&format!("pid {agent:>7}  ")),
        "a stop in the plan: {}",
        o.stdout
    );
    eprintln!("{cases} sources");
}

/// `--sim-state` spelled relative three ways and through a symbolic link (4 cases): the same
/// holders as the real path, and `plan` lists them (before: no holder seen, and "nothing holds
/// the GPUs").
#[test]
fn a_relative_sim_state_sees_the_holders_and_plan_lists_them() {
    let node = Node::start("spx-nps1-one-model");
    let dir = node.state.parent().unwrap().to_path_buf();
    let name = node
        .state
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    let want: Vec<u64> = {
        let s = snapshot(&node.state, "");
        s["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pid"].as_u64().unwrap())
            .collect()
    };
    assert!(!want.is_empty());
    let parent_rel = format!("../{}/{name}", dir.file_name().unwrap().to_string_lossy());
    // A path through a symbolic link to the node's directory names it too (fd links are the
    // kernel's real paths).
    let link = dir.join("via-link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let linked = format!("{}/{name}", link.display());
    let mut cases = 0;
    for rel in [name.clone(), format!("./{name}"), parent_rel, linked] {
        let o = run(
            partop()
                .current_dir(&dir)
                .args(["--sim-state", &rel, "snapshot", "--json"]),
            "",
        );
        let s: Value = serde_json::from_str(&o.stdout).unwrap();
        let got: Vec<u64> = s["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(got, want, "{rel}");
        let o = run(
            partop()
                .current_dir(&dir)
                .args(["--sim-state", &rel, "plan", "--memory", "NPS2"])
                .env("XDG_STATE_HOME", dir.join("xdg"))
                .env("XDG_CONFIG_HOME", dir.join("xdg")),
            "",
        );
        assert!(
            o.stdout.contains(&format!("must stop ({})", want.len())),
            "{rel}: {}{}",
            o.stdout,
            o.stderr
        );
        cases += 1;
    }
    eprintln!("{cases} relative spellings");
}

/// Holders found in /proc only (not listed by amd-smi): a render node alone, /dev/kfd alone,
/// both (3 cases). `partop kill --dry-run` describes each one's GPUs in the words of the
/// snapshot's own description of the same process (before: "no GPU" for one on GPU 1).
#[test]
fn the_kill_prompt_says_what_the_snapshot_says() {
    let e = SimEnv::new(&quick("killdesc", "7.0.2", "DPX", "NPS2", ""));
    let dev = e.node.state.with_extension("dev");
    let render = device(dev.join("dri/renderD129"));
    let kfd = device(dev.join("kfd"));
    let mut cases = 0;
    for files in [
        vec![render.clone()],
        vec![kfd.clone()],
        vec![kfd.clone(), render.clone()],
    ] {
        let h = holder(&files);
        let s = snapshot(&e.node.state, "");
        let p: partop::domain::snapshot::Process =
            serde_json::from_value(process(&s, h.id()).expect("listed").clone()).unwrap();
        let label = p.gpu_label();
        assert_ne!(label, "no GPU", "{files:?}");
        let o = run(e.cmd().args(["kill", &h.id().to_string(), "--dry-run"]), "");
        let line = o
            .stdout
            .lines()
            .find(|l| l.contains(&format!("pid {:>7}", h.id())))
            .unwrap_or_else(|| panic!("{}{}", o.stdout, o.stderr));
        assert!(
            line.contains(&label) && !line.contains("no GPU"),
            "{files:?}: snapshot says {label:?}, prompt says {line:?}"
        );
        reap(h);
        cases += 1;
    }
    eprintln!("{cases} holder kinds");
}

// ---------------------------------------------------------------------------------------------
// Every supported version read right, every promise kept by every command.

/// `partition --json` of both families, in SPX, DPX and CPX (6 cases), parsed by the reader
/// partop uses; and a ROCm 6.4 node's amd-smi static source is ok through the binary (before:
/// degraded for ever, "invalid type: map, expected a sequence").
#[test]
fn both_shapes_of_partition_json_are_read() {
    let mut cases = 0;
    for rocm in ["6.4.1", "7.0.2"] {
        for (compute, memory) in [("SPX", "NPS1"), ("DPX", "NPS2"), ("CPX", "NPS4")] {
            let node = Node::start(&quick("shape", rocm, compute, memory, ""));
            let o = node.amd("partition -c -m --json", "");
            assert_eq!(o.code, 0, "{}", o.stderr);
            let (doc, _) = partop::collect::amdsmi::reader::parse_partition("partition", &o.stdout)
                .unwrap_or_else(|e| panic!("{rocm} {compute}: {e}\n{}", o.stdout));
            let primary = doc
                .current_partition
                .iter()
                .find(|r| r.gpu_id.0 == Some(0))
                .unwrap();
            assert_eq!(primary.accelerator_type.0.as_deref(), Some(compute));
            assert_eq!(primary.memory.0.as_deref(), Some(memory));
            cases += 1;
        }
    }
    let node = Node::start(&quick("r64", "6.4.1", "SPX", "NPS1", ""));
    let s = snapshot(&node.state, "--source amd-smi");
    for src in s["sources"].as_array().unwrap() {
        assert_eq!(src["status"], "ok", "{src}");
    }
    assert_eq!(s["gpus"][0]["compute_partition"], "SPX");
    eprintln!("{cases} family x layout cases");
}

/// A hand-run ROCm 6.x `set -M` (the reload happens inside the set) reaches the kernel twin's
/// files, so partop and its plan see the new modes (NPS2 → DPX, NPS4 → CPX: 2 cases).
#[test]
fn a_hand_run_rocm6_memory_change_reaches_the_kernel_files_twin_or_not() {
    let mut cases = 0;
    // With the kernel twin running, and after `sim stop` ended it (the documented way to free
    // the node: the kernel files once stayed at SPX/NPS1 for ever there).
    for stopped in [false, true] {
        for (memory, compute, logical) in [("NPS2", "DPX", 16), ("NPS4", "CPX", 64)] {
            let e = SimEnv::new(&quick("r6set", "6.4.1", "SPX", "NPS1", ""));
            if stopped {
                let st = e.node.state.display().to_string();
                let o = run(partop().args(["sim", "stop", "--state", &st]), "");
                assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
            }
            let o = e.node.amd(&format!("set -M {memory}"), "y\n");
            assert!(
                o.stdout
                    .contains(&format!("Successfully set memory partition to {memory}")),
                "{}",
                o.stdout
            );
            wait_until("the kernel files to follow", || {
                let s = snapshot(&e.node.state, "--source sysfs");
                s["gpus"][0]["memory_partition"] == memory
                    && s["gpus"][0]["compute_partition"] == compute
                    && numbers(&s).len() == logical
            });
            let o = run(
                e.cmd()
                    .args(["plan", "--memory", "NPS1", "--compute", "SPX"]),
                "",
            );
            assert!(
                o.stdout
                    .contains(&format!("{compute}/{memory} -> SPX/NPS1")),
                "{}{}",
                o.stdout,
                o.stderr
            );
            cases += 1;
        }
    }
    eprintln!("{cases} cases: 2 memory modes, twin running and stopped");
    assert_eq!(cases, 4);
}

/// `read_only = true` in config.toml refuses every simulator mutation (4 cases: stop, reload,
/// amd-smi set, amd-smi reset) with nothing changed; a config.toml that does not parse stops
/// every command named (9 cases), each naming the file:line:col.
#[test]
fn the_config_reaches_every_command_the_simulators_too() {
    let e = SimEnv::new(&quick("cfg", "7.0.2", "SPX", "NPS1", BATCH));
    let worker = pid_of(&e, "job");
    e.config("read_only = true\n");
    let st = e.node.state.display().to_string();
    let mut cases = 0;
    for args in [
        format!("sim stop --state {st}"),
        format!("sim reload --state {st}"),
        format!("sim amd-smi --state {st} set -M NPS2"),
        format!("sim amd-smi --state {st} reset -r"),
    ] {
        let o = run(
            partop()
                .env("XDG_CONFIG_HOME", e.xdg())
                .env("XDG_STATE_HOME", e.xdg())
                .args(args.split_whitespace()),
            "y\n",
        );
        assert_eq!(o.code, 2, "{args}: {}{}", o.stdout, o.stderr);
        assert!(
            o.stderr.contains("read_only = true in config.toml"),
            "{}",
            o.stderr
        );
        assert!(alive(worker), "{args}: the workload was stopped");
        assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
        cases += 1;
    }
    e.config("read_only = tru\n");
    let mut broken = 0;
    for args in [
        "sim list".to_string(),
        format!("sim status --state {st}"),
        format!("sim stop --state {st}"),
        format!("sim amd-smi --state {st} list --json"),
        "completions bash".into(),
        "man".into(),
        "keys".into(),
        "journal".into(),
        format!("--sim-state {st} snapshot"),
    ] {
        let o: Out = run(
            partop()
                .env("XDG_CONFIG_HOME", e.xdg())
                .env("XDG_STATE_HOME", e.xdg())
                .args(args.split_whitespace()),
            "",
        );
        assert_ne!(o.code, 0, "{args}: ran on a config it cannot read");
        assert!(o.stderr.contains("config.toml:1:"), "{args}: {}", o.stderr);
        broken += 1;
    }
    assert!(alive(worker));
    eprintln!("{cases} read-only refusals, {broken} commands stopped by a broken config");
}

/// `--source sysfs` allows no partition change: `plan`, `apply` and `apply --dry-run` (3 cases)
/// refuse before reading or confirming anything, with no "partition -a needs root" warning.
#[test]
fn source_sysfs_refuses_plan_and_apply_before_anything() {
    let e = SimEnv::new(&quick("sysfsplan", "7.0.2", "SPX", "NPS1", ""));
    let p = e.plan("--memory NPS2", "p.json");
    let mut cases = 0;
    for args in [
        vec!["plan".to_string(), "--memory".into(), "NPS2".into()],
        vec!["apply".into(), p.display().to_string()],
        vec!["apply".into(), p.display().to_string(), "--dry-run".into()],
    ] {
        let o = run(e.cmd().args(["--source", "sysfs"]).args(&args), "");
        assert_eq!(o.code, 2, "{args:?}: {}{}", o.stdout, o.stderr);
        assert!(
            o.stderr
                .contains("--source sysfs reads the kernel only and allows no partition change"),
            "{}",
            o.stderr
        );
        assert!(!o.stdout.contains("Type") && !o.stderr.contains("needs root"));
        assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
        cases += 1;
    }
    eprintln!("{cases} commands");
}

// ---------------------------------------------------------------------------------------------
// What partop cannot see, it says.

const USER: &str = "partop-hid";

/// An ordinary user (created here) to run partop as.
fn ordinary_user() -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let o = Command::new("id").args([flag, USER]).output().ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let o = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                USER,
            ])
            .output()
            .unwrap();
        assert!(
            o.status.success() || id("-u").is_some(),
            "useradd: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

/// This partop where an ordinary user can run it whatever the checkout's permissions (a clone
/// under root's home is not searchable by others): a link to the built binary in a directory
/// of its own that anyone may enter (a copy where a link cannot be made).
fn user_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("partop-user-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.join("partop");
        let _ = std::fs::remove_file(&bin);
        if std::fs::hard_link(env!("CARGO_BIN_EXE_partop"), &bin).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_partop"), &bin).unwrap();
        }
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    })
}

/// partop as the ordinary user, its own writable state and config directories.
fn as_user(uid: u32, gid: u32, home: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg("--")
        .arg(user_bin())
        .env("HOME", home)
        .env("XDG_STATE_HOME", home)
        .env("XDG_CONFIG_HOME", home);
    c
}

/// Root's workloads hold three logical GPUs; an ordinary user runs partop on the node through
/// each source (3 cases). Before: "(no GPU processes)", VRAM 0.0/96.0, every source ok. Now
/// each of root's GPU processes is listed with its VRAM (read from KFD), marked as another
/// user's with its hidden values N/A "needs root (or CAP_SYS_PTRACE)", the partitions' VRAM
/// is not zero, a source is degraded and the header line and a finding say how many are
/// hidden. As root the same node shows nothing hidden (the control case).
#[test]
fn an_ordinary_user_is_told_what_is_hidden_and_sees_what_kfd_shows() {
    let (uid, gid) = ordinary_user();
    let node = Node::start("dpx-nps2-two-models");
    let dir = node.state.parent().unwrap().to_path_buf();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let state = partop::sim::state::SimState::load(&node.state).unwrap();
    let pids: Vec<u32> = state.workloads.iter().filter_map(|w| w.pid).collect();
    assert_eq!(pids.len(), 3);
    wait_until("root's workloads to hold their GPUs", || {
        let s = snapshot(&node.state, "");
        pids.iter().all(|p| {
            process(&s, *p).is_some_and(|p| p["gpus"][0]["vram_bytes"].as_u64().unwrap_or(0) > 0)
        })
    });
    let root = snapshot(&node.state, "");
    assert!(
        root.get("hidden").is_none(),
        "root sees everything: {}",
        root["hidden"]
    );
    let mut cases = 0;
    for source in ["auto", "sysfs", "amd-smi"] {
        let o = run(
            as_user(uid, gid, &home)
                .arg("--sim-state")
                .arg(&node.state)
                .args(["--source", source, "snapshot", "--json"]),
            "",
        );
        let s: Value = serde_json::from_str(&o.stdout)
            .unwrap_or_else(|e| panic!("{source}: {e}: {}{}", o.stdout, o.stderr));
        for pid in &pids {
            let p = process(&s, *pid).unwrap_or_else(|| {
                panic!("{source}: root's pid {pid} not listed: {}", s["processes"])
            });
            assert_eq!(p["files_hidden"], true, "{source}: {p}");
            assert!(
                p["gpus"][0]["vram_bytes"].as_u64().unwrap_or(0) > 0,
                "{source}: VRAM from KFD: {p}"
            );
        }
        let hidden = &s["hidden"];
        assert_eq!(hidden["processes"].as_u64(), Some(3), "{source}: {s}");
        assert!(
            s["sources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["status"] != "ok"
                    && x["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("needs root (or CAP_SYS_PTRACE)"))),
            "{source}: every source ok while partly blind: {}",
            s["sources"]
        );
        let used: u64 = s["gpus"][0]["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|l| l["vram_used_bytes"].as_u64())
            .sum();
        assert!(used > 0, "{source}: GPU 0's partitions read as empty");
        assert!(
            s["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["kind"] == "hidden_holders"),
            "{source}: {}",
            s["findings"]
        );
        let o = run(
            as_user(uid, gid, &home)
                .arg("--sim-state")
                .arg(&node.state)
                .args(["--source", source, "snapshot"]),
            "",
        );
        assert!(
            o.stdout
                .contains("hidden 3 GPU process(es) seen through KFD only")
                && !o.stdout.contains("(no GPU processes)")
                && o.stdout.matches("another user's: files hidden").count() >= 3,
            "{source}:\n{}",
            o.stdout
        );
        cases += 1;
    }
    // The stops a plan lists include root's processes, and it says the list may be short.
    let o = run(
        as_user(uid, gid, &home)
            .arg("--sim-state")
            .arg(&node.state)
            .args(["plan", "--compute", "SPX", "--memory", "NPS1"]),
        "",
    );
    assert!(
        o.stdout.contains("must stop (3)")
            && o.stderr
                .contains("the processes to stop may be incomplete; plan as root"),
        "{}{}",
        o.stdout,
        o.stderr
    );
    eprintln!("{cases} sources as an ordinary user");
}

/// Another user's KFD process whose VRAM file this user cannot read, and one whose it can, on
/// two partitions (2 cases): the first partition's VRAM in use is N/A with the reason, never
/// the sum of what could be read; the second is the figure read.
#[test]
fn an_unreadable_vram_file_makes_its_partition_na_not_low() {
    use std::os::unix::fs::PermissionsExt as _;
    let (uid, gid) = ordinary_user();
    let node = Node::start(&quick("hidvram", "7.0.2", "DPX", "NPS2", ""));
    assert_eq!(node.sim("stop").code, 0);
    let dir = node.state.parent().unwrap().to_path_buf();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let h = holder(&[device(node.state.with_extension("dev").join("kfd"))]);
    let nodes = kfd_nodes(&node.state);
    let (_, hidden_bdf, hidden_id) = nodes[0].clone();
    let (_, read_bdf, read_id) = nodes[1].clone();
    let pdir = partop::sim::kernel::root(&node.state)
        .join("class/kfd/kfd/proc")
        .join(h.id().to_string());
    std::fs::create_dir_all(&pdir).unwrap();
    for (id, mode) in [(hidden_id, 0o400), (read_id, 0o444)] {
        let f = pdir.join(format!("vram_{id}"));
        std::fs::write(
            &f,
            "1073741824
",
        )
        .unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    bump_generation(&node.state, 1);
    let o = run(
        as_user(uid, gid, &home)
            .arg("--sim-state")
            .arg(&node.state)
            .args(["--source", "sysfs", "snapshot", "--json"]),
        "",
    );
    let s: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", o.stderr));
    assert_eq!(process(&s, h.id()).unwrap()["files_hidden"], true);
    let part = |bdf: &str| -> Value {
        s["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["partitions"].as_array().unwrap())
            .find(|l| l["bdf"] == bdf)
            .unwrap()
            .clone()
    };
    let hidden = part(&hidden_bdf);
    assert!(hidden["vram_used_bytes"].is_null(), "{hidden}");
    assert_eq!(
        hidden["provenance"]["vram_used_bytes"]["missing"]["reason"],
        "other_users_files"
    );
    assert_eq!(part(&read_bdf)["vram_used_bytes"].as_u64(), Some(1 << 30));
    reap(h);
    eprintln!("2 partitions");
}

/// The monitor, in a real terminal (tmux), as the ordinary user on root's busy node, as root on
/// a node whose agent holds /dev/kfd alone, and under `--source sysfs` (3 cases): the header says
/// what is hidden and the Processes view lists root's processes; the agent is a row of its own
/// (`kfd`); staging under `--source sysfs` says why it cannot instead of opening.
#[test]
fn the_monitor_says_what_is_hidden_and_lists_the_kfd_only_holder() {
    let (uid, gid) = ordinary_user();
    let node = Node::start("dpx-nps2-two-models");
    let dir = node.state.parent().unwrap().to_path_buf();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let state = partop::sim::state::SimState::load(&node.state).unwrap();
    let pids: Vec<u32> = state.workloads.iter().filter_map(|w| w.pid).collect();
    let cmd = format!(
        "env HOME={h} XDG_STATE_HOME={h} XDG_CONFIG_HOME={h} setpriv --reuid={uid} --regid={gid} --clear-groups -- {bin} --sim-state {st}; echo EXITED $?; sleep 30",
        h = home.display(),
        bin = user_bin().display(),
        st = node.state.display()
    );
    let t = common::tmux::Session::new("hid", &cmd, 200, 40);
    t.wait_for("hidden: 3 GPU process(es) via KFD only");
    t.keys(&["3"]);
    t.wait_for("Processes: 3 of 3");
    let screen = t.screen();
    for pid in &pids {
        assert!(screen.contains(&pid.to_string()), "{pid}:\n{screen}");
    }
    t.keys(&["q"]);
    t.wait_for("EXITED 0");
    drop(t);

    let e = SimEnv::new("agent-holds-kfd");
    let agent = pid_of(&e, "gpuagent");
    let cmd = format!(
        "env HOME={h} XDG_STATE_HOME={h} XDG_CONFIG_HOME={h} {bin} --sim-state {st}; echo EXITED $?; sleep 30",
        h = e.xdg().display(),
        bin = user_bin().display(),
        st = e.node.state.display()
    );
    let t = common::tmux::Session::new("kfdonly", &cmd, 200, 40);
    t.wait_for("logical");
    t.keys(&["3"]);
    t.wait_for("Processes: 2 of 2");
    let screen = t.screen();
    let row = screen
        .lines()
        .find(|l| l.contains(&agent.to_string()))
        .unwrap_or_else(|| panic!("gpuagent not listed:\n{screen}"));
    assert!(row.contains("kfd"), "{row}");
    t.keys(&["q"]);
    t.wait_for("EXITED 0");
    drop(t);

    // `--source sysfs` in the monitor: staging says why it cannot, as plan and apply do.
    let cmd = format!(
        "env HOME={h} XDG_STATE_HOME={h} XDG_CONFIG_HOME={h} {bin} --sim-state {st} --source sysfs; echo EXITED $?; sleep 30",
        h = e.xdg().display(),
        bin = user_bin().display(),
        st = e.node.state.display()
    );
    let t = common::tmux::Session::new("sysfsstage", &cmd, 200, 40);
    t.wait_for("logical");
    t.keys(&["2", "p"]);
    t.wait_for("--source sysfs reads the kernel only");
    assert!(
        !t.screen().contains("Type the fingerprint"),
        "{}",
        t.screen()
    );
    t.keys(&["q"]);
    t.wait_for("EXITED 0");
    eprintln!("3 monitor cases");
}

/// The Processes view grouped by GPU (the reducer, keys `3` then `g`), on a recorded node with
/// a holder of /dev/kfd alone added: it has its own heading after the GPUs' (before: it was in
/// no group, so grouping hid it).
#[test]
fn grouped_by_gpu_the_kfd_only_holder_has_its_own_heading() {
    use partop::ui::state::{Group, Msg, ProcRow, State, update};
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut snap = common::nodes::recorded("dpx-nps2-two-models");
    snap.processes.push(partop::domain::snapshot::Process {
        pid: 4242,
        name: Some("gpuagent".into()),
        holds_kfd: true,
        ..partop::domain::snapshot::Process::default()
    });
    let (km, e) = partop::ui::keymap::Keymap::load("default", None, false);
    assert!(e.is_empty());
    let mut s = State::new(km, partop::domain::findings::Thresholds::default(), 1000);
    update(&mut s, Msg::Snapshot(std::sync::Arc::new(snap.clone())));
    update(&mut s, Msg::Tick(common::nodes::T + 1000));
    for c in ['3', 'g'] {
        update(
            &mut s,
            Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)),
        );
    }
    assert_eq!(s.group, Group::Gpu);
    let at = s
        .rows
        .iter()
        .position(|r| matches!(r, ProcRow::Heading(h) if h == "/dev/kfd only (every GPU)"))
        .unwrap_or_else(|| panic!("{:?}", s.rows));
    assert!(
        matches!(s.rows.get(at + 1), Some(ProcRow::Process { index, .. }) if snap.processes[*index].pid == 4242),
        "{:?}",
        s.rows
    );
}
