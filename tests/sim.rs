//! The simulated node through its real code paths: the fake amd-smi as a subprocess, real
//! workload processes, the hardware's rules, and the amd-smi collector reading it via PATH.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::{Node, fixture, partop, quick, run, wait_until};
use serde_json::Value;
use std::collections::BTreeSet;

fn key_paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let p = format!("{prefix}.{k}");
                out.insert(p.clone());
                key_paths(v, &p, out);
            }
        }
        Value::Array(a) => {
            for v in a {
                key_paths(v, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    key_paths(v, "", &mut s);
    s
}

fn items(v: &Value) -> Vec<Value> {
    v.get("gpu_data")
        .unwrap_or(v)
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Compares the primary and the first secondary (or just the first GPU) key by key.
fn same_shape(fake: &Value, fx: &Value, what: &str) {
    let (f, x) = (items(fake), items(fx));
    assert_eq!(
        fake.get("gpu_data").is_some(),
        fx.get("gpu_data").is_some(),
        "{what}: wrapper differs"
    );
    for i in 0..x.len().min(2) {
        let (a, b) = (keys(&f[i]), keys(&x[i]));
        assert_eq!(
            a,
            b,
            "{what}: GPU {i} keys differ.\nonly fake: {:?}\nonly fixture: {:?}",
            a.difference(&b).collect::<Vec<_>>(),
            b.difference(&a).collect::<Vec<_>>()
        );
    }
}

#[test]
fn rocm7_output_matches_fixture_shapes_key_for_key() {
    let n = Node::start(&quick(
        "shape7",
        "7.0.2",
        "DPX",
        "NPS2",
        "[[workload]]\nname = \"m\"\nkind = \"batch\"\nvram_gb = 10\nbusy = 50\n",
    ));
    let fx = |f: &str| serde_json::from_str::<Value>(&fixture(f)).unwrap();
    same_shape(
        &n.json("list -e --json"),
        &fx("synth-list-e-json-16gpu-dpx-nps2-rocm7.0.json"),
        "list -e",
    );
    same_shape(
        &n.json("static -a -b -l -v -p --json -g all"),
        &fx("synth-static-a-b-l-v-p-json-16gpu-dpx-nps2-rocm7.0.json"),
        "static",
    );
    same_shape(
        &n.json("metric -u -p -t -e -m --json"),
        &fx("synth-metric-u-p-t-e-m-json-16gpu-dpx-nps2-rocm7.0.json"),
        "metric",
    );
    assert_eq!(
        keys(&n.json("process --json")),
        keys(&fx("synth-process-json-16gpu-dpx-rocm7.0.json")),
        "process"
    );
    same_shape(
        &n.json("monitor --json"),
        &fx("synth-monitor-json-16gpu-dpx-nps2-rocm7.0.json"),
        "monitor",
    );
    let (a, b) = (
        n.json("partition --json"),
        fx("synth-partition-json-16gpu-dpx-nps2-rocm7.0.json"),
    );
    assert_eq!(keys(&a), keys(&b), "partition object");
    assert_eq!(
        a["partition_profiles"].as_array().unwrap().len(),
        b["partition_profiles"].as_array().unwrap().len()
    );
    // And it is printed exactly as Python's json.dumps(indent=4) would.
    let text = n.amd("partition -c -m --json", "").stdout;
    assert_eq!(
        partop::sim::pyjson::dumps(&serde_json::from_str::<Value>(&text).unwrap()),
        text
    );
}

#[test]
fn rocm64_output_matches_fixture_shapes_key_for_key() {
    let n = Node::start("rocm64-spx");
    let fx = |f: &str| serde_json::from_str::<Value>(&fixture(f)).unwrap();
    same_shape(
        &n.json("list --json"),
        &fx("synth-list-json-8xmi300x-spx-nps1-rocm6.4.json"),
        "list",
    );
    same_shape(
        &n.json("static -a -b -v -p --json"),
        &fx("synth-static-a-b-v-p-json-8xmi300x-spx-nps1-rocm6.4.json"),
        "static",
    );
    same_shape(
        &n.json("metric -u -p -t -e -m --json"),
        &fx("synth-metric-u-p-t-e-m-json-8xmi300x-spx-rocm6.4.json"),
        "metric",
    );
    assert_eq!(
        keys(&n.json("process --json")),
        keys(&fx("synth-process-json-8xmi300x-spx-rocm6.4.0.json")),
        "process"
    );
    same_shape(
        &n.json("monitor --json"),
        &fx("synth-monitor-json-8xmi300x-spx-rocm6.4.json"),
        "monitor",
    );
}

fn count(n: &Node) -> usize {
    n.json("list --json").as_array().unwrap().len()
}

fn modes(n: &Node) -> (String, String) {
    let v = n.json("partition -c --json");
    let r = &v["current_partition"][0];
    (
        r["accelerator_type"].as_str().unwrap().into(),
        r["memory"].as_str().unwrap().into(),
    )
}

#[test]
fn full_cycle_spx_dpx_cpx_spx_with_workloads_stopped_and_started() {
    let w = "[[workload]]\nname = \"a\"\nkind = \"batch\"\ngpu = 0\nvram_gb = 20\nbusy = 40\n[[workload]]\nname = \"b\"\nkind = \"batch\"\ngpu = 3\nvram_gb = 20\nbusy = 40\n";
    let n = Node::start(&quick("cycle", "7.0.2", "SPX", "NPS1", w));
    assert_eq!(count(&n), 8);
    // Busy while the workloads run: nothing changes, and the tool says why.
    let o = n.amd("set -C DPX", "");
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("AMDSMI_STATUS_BUSY"), "{}", o.stderr);
    assert_eq!(count(&n), 8);
    let o = n.amd("set -M NPS2", "Y\n");
    assert!(
        o.stdout.contains("reload driver when ready"),
        "{}",
        o.stdout
    );
    let o = n.amd("reset -r", "Y\n");
    assert!(
        o.stdout
            .contains("[AMDSMI_STATUS_AMDGPU_RESTART_ERR] Unable to successfully restart driver"),
        "{}",
        o.stdout
    );
    assert_eq!(
        modes(&n),
        ("SPX".into(), "NPS1".into()),
        "the memory mode stays pending"
    );

    // Stop the workloads: the reload applies NPS2 hive-wide, compute goes to its default (DPX).
    assert!(n.sim("stop").stdout.contains("a: stopped"));
    let o = n.amd("reset -r", "Y\n");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout.matches("Successfully reloaded driver").count(),
        16,
        "one line per new logical GPU"
    );
    assert_eq!(modes(&n), ("DPX".into(), "NPS2".into()));
    assert_eq!(count(&n), 16);
    // Workload b was on GPU 3 partition 0: it exists again (index 6 now); a too.
    let r = n.sim("resume");
    assert!(
        r.stdout.contains("a: started") && r.stdout.contains("b: started"),
        "{}",
        r.stdout
    );
    let p = n.json("process --json");
    assert!(
        p[6]["process_list"][0]["process_info"]["pid"].is_u64(),
        "b renumbered to logical GPU 6: {p}"
    );

    // CPX is not offered with NPS2.
    n.sim("stop");
    let o = n.amd("set -C CPX", "");
    assert_eq!(o.code, 1);
    assert!(
        o.stdout.contains("[AMDSMI_STATUS_SETTING_UNAVAILABLE]"),
        "{}",
        o.stdout
    );
    // NPS4 then reload: CPX, 64 logical GPUs.
    n.amd("set -M NPS4", "Y\n");
    assert_eq!(n.amd("reset -r", "Y\n").code, 0);
    assert_eq!(modes(&n), ("CPX".into(), "NPS4".into()));
    assert_eq!(count(&n), 64);
    n.sim("resume");
    n.sim("stop");
    // Back to NPS1: the compute mode returns to SPX by itself.
    n.amd("set -M NPS1", "Y\n");
    assert_eq!(n.amd("reset -r", "Y\n").code, 0);
    assert_eq!(modes(&n), ("SPX".into(), "NPS1".into()));
    assert_eq!(count(&n), 8);
}

#[test]
fn compute_change_renumbers_at_once() {
    let n = Node::start(&quick("renum", "7.0.2", "SPX", "NPS1", ""));
    let o = n.amd("set -g 0 -C CPX", "");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout
            .contains("Successfully set accelerator partition to CPX (profile #3)")
    );
    let l = n.json("list --json");
    assert_eq!(l.as_array().unwrap().len(), 15);
    assert_eq!(l[8]["bdf"], "0000:26:00.0", "GPU 1 moved from index 1 to 8");
}

#[test]
fn rocm64_reloads_inside_set_memory() {
    let n = Node::start(&quick("r64", "6.4.1", "SPX", "NPS1", ""));
    let o = n.amd("set -M NPS4", "Y\n");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains(
        "Setting Dynamic Memory (NPS) partition modes require users to quit all GPU workloads."
    ));
    assert!(o.stdout.contains("Updating memory partition for gpu 0"));
    assert_eq!(
        o.stdout
            .matches("Successfully set memory partition to NPS4")
            .count(),
        64
    );
    assert_eq!(count(&n), 64);
    let o = n.amd("reset -r", "Y\n");
    assert_eq!(o.code, 2, "reset -r does not exist before 7.0");
}

#[test]
fn prompt_declined_or_eof_changes_nothing() {
    let n = Node::start(&quick("decline", "7.0.2", "SPX", "NPS1", ""));
    let o = n.amd("set -M NPS2", "n\n");
    assert_eq!(o.code, 1);
    assert!(
        o.stdout
            .ends_with("Confirmation not given. Exiting without setting value\n")
    );
    let o = n.amd("set -M NPS2", "");
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("EOFError"));
    let st = partop::sim::state::SimState::load(&n.state).unwrap();
    assert!(st.gpus.iter().all(|g| g.modes.pending_memory.is_none()));
}

#[test]
fn invalid_values_are_refused_like_the_real_tool() {
    let n = Node::start("dpx-nps1-firmware");
    let o = n.amd("set -M NPS2", "Y\n");
    assert!(
        o.stdout.contains("Valid Memory partition Modes: NPS1,NPS4"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("[AMDSMI_STATUS_INVAL]"));
    let o = n.amd("set -C XPX", "");
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("invalid choice: 'XPX'"));
    let o = n.amd("static --json -g 99", "");
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["code"], -3);
    assert_eq!(v["error"], "Can not find a device: GPU '99'");
}

#[test]
fn agent_holding_kfd_blocks_reload_and_is_not_listed() {
    let n = Node::start("agent-holds-kfd");
    let p = n.json("process --json");
    let names: Vec<String> = p
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| {
            g["process_list"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|x| x["process_info"]["name"].as_str().map(String::from))
        })
        .collect();
    assert!(!names.iter().any(|x| x == "gpuagent"), "{names:?}");
    let o = run(
        partop().args(["sim", "reload", "--state"]).arg(&n.state),
        "",
    );
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("Module amdgpu is in use") && o.stderr.contains("gpuagent"),
        "{}",
        o.stderr
    );
}

#[test]
fn stubborn_process_needs_sigkill() {
    let n = Node::start("stubborn-process");
    let o = n.sim("stop");
    assert!(
        o.stdout
            .contains("stuck-job: did not exit on SIGTERM; sent SIGKILL"),
        "{}",
        o.stdout
    );
    assert!(n.sim("status").stdout.contains("stopped"));
}

#[test]
fn model_servers_answer_like_vllm() {
    let n = Node::start("dpx-nps2-two-models");
    let st = partop::sim::state::SimState::load(&n.state).unwrap();
    let port = st.workloads[0].port;
    let get = |path: &str| -> Option<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut b = String::new();
        s.read_to_string(&mut b).ok()?;
        Some(b)
    };
    wait_until("the model server to listen", || {
        get("/health")
            .is_some_and(|r| r.starts_with("HTTP/1.0 200") || r.starts_with("HTTP/1.1 200"))
    });
    let models = get("/v1/models").unwrap();
    assert!(models.contains("meta-llama/Llama-3.1-70B-Instruct"));
    let m = get("/metrics").unwrap();
    for k in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:generation_tokens_total",
    ] {
        assert!(
            m.contains(&format!("{k}{{model_name=")),
            "{k} missing in {m}"
        );
    }
    // Its process is real: /proc shows the vLLM-like command line and HIP_VISIBLE_DEVICES.
    let pid = st.workloads[0].pid.unwrap();
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .unwrap()
        .replace('\0', " ");
    assert!(
        cmdline.contains("vllm serve meta-llama/Llama-3.1-70B-Instruct"),
        "{cmdline}"
    );
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(String::from_utf8_lossy(&env).contains("HIP_VISIBLE_DEVICES=0"));
}

#[test]
fn collector_reads_the_fake_through_a_script_on_path() {
    let n = Node::start("dpx-nps2-two-models");
    let script = n.script();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut c =
        partop::collect::pipeline::Collector::amd_smi(partop::collect::amdsmi::Runner::new(script));
    let snap = rt.block_on(c.sample());
    assert!(
        snap.sources
            .iter()
            .all(|s| s.status == partop::domain::Health::Ok),
        "{:?}",
        snap.sources
    );
    assert_eq!(snap.logical_count(), 16);
    assert_eq!(c.version().unwrap().rocm.as_deref(), Some("7.0.2"));
    let p = snap
        .processes
        .iter()
        .find(|p| p.gpus[0].gpu_id == 1)
        .unwrap();
    assert!(p.gpus[0].vram_bytes.unwrap() > 60 << 30);
    assert!(p.gpus[0].cu_occupancy.is_some());
    assert_eq!(
        snap.gpus[0].compute_partition,
        Some(partop::domain::ComputeMode::Dpx)
    );
}

#[test]
fn state_file_problems_have_a_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.json");
    let o = run(
        partop()
            .args(["sim", "amd-smi", "--state"])
            .arg(&missing)
            .arg("list"),
        "",
    );
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("does not exist") && o.stderr.contains("partop sim start"),
        "{}",
        o.stderr
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let o = run(partop().args(["sim", "status", "--state"]).arg(&bad), "");
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("unreadable") && o.stderr.contains("remove it"),
        "{}",
        o.stderr
    );
    let o = run(
        partop().args(["sim", "start", "nope", "--state"]).arg(&bad),
        "",
    );
    assert!(
        o.stderr.contains("unknown scenario") && o.stderr.contains("cpx-nps4-small-models"),
        "{}",
        o.stderr
    );
    // A stale state (its processes gone) is still usable: it reports them stopped.
    let n = Node::start("stubborn-process");
    n.sim("stop");
    assert!(n.sim("status").stdout.contains("stuck-job") && n.amd("list --json", "").code == 0);
}

/// A node `partop --sim` left running (it quit during a repartition) is discarded whole by
/// `sim stop`: its workloads, its kernel twin and every file of it.
#[test]
fn sim_stop_discards_a_node_partop_sim_left_behind() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("partop/sim");
    std::fs::create_dir_all(&dir).unwrap();
    // Where `partop --sim` keeps its node: node-PID.json under the state directory.
    let state = dir.join("node-4242.json");
    let o = common::run(
        common::partop()
            .env("XDG_STATE_HOME", home.path())
            .args(["sim", "start", "spx-nps1-one-model", "--state"])
            .arg(&state),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(state.exists());
    let o = common::run(
        common::partop()
            .env("XDG_STATE_HOME", home.path())
            .args(["sim", "stop", "--state"])
            .arg(&state),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("and its files are removed"),
        "{}",
        o.stdout
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // A node started by hand stays (only its workloads stop): `sim resume` needs it.
    let mine = home.path().join("mine.json");
    common::run(
        common::partop()
            .args(["sim", "start", "spx-nps1-one-model", "--state"])
            .arg(&mine),
        "",
    );
    common::run(
        common::partop().args(["sim", "stop", "--state"]).arg(&mine),
        "",
    );
    assert!(mine.exists());
}

/// A node whose files were removed under it (its owner killed, its temp dir deleted before the
/// twin could stop it) leaves no workload running: each notices its node is gone and ends.
#[test]
fn workloads_end_when_their_node_is_gone() {
    let n = Node::start("dpx-nps2-two-models");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&n.state).unwrap()).unwrap();
    let pids: Vec<u32> = v["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["pid"].as_u64())
        .map(|p| u32::try_from(p).unwrap())
        .collect();
    assert!(!pids.is_empty());
    std::fs::remove_file(&n.state).unwrap();
    let running = |p: &u32| {
        std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    wait_until("every workload to end", || !pids.iter().any(running));
}

/// The fake amd-smi refuses what the real argparse refuses: an unknown flag on each command it
/// emulates exits 2 with argparse's words and prints nothing on stdout (it printed the metrics
/// and exited 0); `-h` prints the command's usage and exits 0.
#[test]
fn the_fake_amd_smi_refuses_unknown_flags_as_argparse_does() {
    let n = Node::start(&quick("flags", "7.0.2", "DPX", "NPS1", ""));
    let mut cases = 0;
    for cmd in [
        "version",
        "list",
        "static",
        "metric",
        "process",
        "monitor",
        "partition",
        "set",
        "reset",
    ] {
        for bad in ["--nope", "-Z"] {
            let o = n.amd(&format!("{cmd} {bad}"), "");
            assert_eq!(o.code, 2, "{cmd} {bad}: {}{}", o.stdout, o.stderr);
            assert!(
                o.stderr
                    .contains(&format!("amd-smi: error: unrecognized arguments: {bad}")),
                "{cmd} {bad}: {}",
                o.stderr
            );
            assert!(o.stdout.is_empty(), "{cmd} {bad}: {}", o.stdout);
            cases += 1;
        }
        let o = n.amd(&format!("{cmd} -h"), "");
        assert_eq!(o.code, 0, "{cmd} -h: {}", o.stderr);
        assert!(
            o.stdout.starts_with(&format!("usage: amd-smi {cmd} ")),
            "{}",
            o.stdout
        );
        cases += 1;
    }
    eprintln!("{cases} command lines refused or answered");
}

/// `amd-smi partition -a` without `--json` prints the profile and resource tables as the real
/// tool does (it printed nothing): the same headings, column names, number of lines and legend
/// as the real 16-GPU DPX/NPS1 output of ROCm/amdsmi#132 (compared word by word: the real tool
/// pads some columns wider), and the same rows as its own `--json`.
#[test]
fn the_fake_amd_smi_prints_partition_profiles_as_text() {
    let n = Node::start(&quick("acc", "7.0.2", "DPX", "NPS1", ""));
    let o = n.amd("partition -a", "");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let real = fixture("v-partition-accelerator-16gpu-dpx-nps1-rocm7.0.2-issue132.txt");
    fn trimmed(mut v: Vec<&str>) -> Vec<&str> {
        while v.last().is_some_and(|l| l.trim().is_empty()) {
            v.pop();
        }
        v
    }
    let real = trimmed(
        real.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with('$'))
            .skip_while(|l| l.trim().is_empty())
            .collect(),
    );
    let ours = trimmed(o.stdout.lines().collect());
    assert_eq!(
        ours.len(),
        real.len(),
        "first lines: {:?} / {:?}",
        &ours[..3.min(ours.len())],
        &real[..3.min(real.len())]
    );
    let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let mut same = 0;
    for (a, b) in ours.iter().zip(&real) {
        // Headings, column names, the legend and every resource row are the same words; a
        // profile row's values come from the simulated node (compared with its JSON below).
        let structural = b.ends_with(':')
            || b.starts_with("GPU_ID")
            || b.starts_with("RESOURCE_INDEX")
            || b.contains("Current mode")
            || b.trim().is_empty();
        if structural {
            assert_eq!(words(a), words(b), "{a:?} vs {b:?}");
            same += 1;
        }
    }
    assert!(same >= 6, "{same} structural lines compared");
    let json: Value = serde_json::from_str(&n.amd("partition -a --json", "").stdout).unwrap();
    let rows = json["partition_profiles"].as_array().unwrap().len();
    let at = ours
        .iter()
        .position(|l| *l == "ACCELERATOR_PARTITION_PROFILES:")
        .unwrap();
    let end = ours.iter().position(|l| l.is_empty()).unwrap();
    assert_eq!(end - at - 2, rows, "one text row per JSON profile row");
}

/// `partop sim list` says what each scenario runs, and the two it described wrongly say what
/// their files hold: `cpx-64-busy` runs 4 busy workers on 4 of its 64 logical GPUs (it said
/// "16 of the 64"), `spx-nps1-one-model` one model server on GPU 0 (it said "tensor-parallel
/// over all GPUs"). Every built-in scenario is listed with its own description.
#[test]
fn sim_list_describes_each_scenario_as_its_file_runs() {
    use partop::sim::scenario::{BUILTIN, Scenario};
    let o = run(partop().args(["sim", "list"]), "");
    assert_eq!(o.code, 0, "{}", o.stderr);
    for (name, _) in BUILTIN {
        let s = Scenario::load(name).unwrap();
        assert!(
            o.stdout
                .lines()
                .any(|l| l.starts_with(name) && l.ends_with(&s.description)),
            "{name}: {}",
            o.stdout
        );
    }
    let busy = Scenario::load("cpx-64-busy").unwrap();
    let places: BTreeSet<(u32, u32)> = busy
        .workloads
        .iter()
        .map(|w| (w.gpu, w.partition))
        .collect();
    let n = busy.workloads.len();
    assert_eq!(places.len(), n, "one worker per logical GPU");
    assert!(
        busy.description
            .contains(&format!("{n} busy batch workers on {n} of them"))
            && busy.description.contains("64 logical GPUs"),
        "{}",
        busy.description
    );
    let one = Scenario::load("spx-nps1-one-model").unwrap();
    assert_eq!(one.workloads.len(), 1);
    let gpu = one.workloads[0].gpu;
    assert!(
        one.description
            .contains(&format!("one 405B model server on GPU {gpu}"))
            && !one.description.contains("all GPUs"),
        "{}",
        one.description
    );
    eprintln!("{} scenarios listed", BUILTIN.len());
}

/// One scrape of a simulated model server's `/metrics`, as (name with labels, value) lines.
fn scrape(port: u16) -> Option<Vec<(String, f64)>> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    let body = b.split("\r\n\r\n").nth(1)?;
    Some(
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect(),
    )
}

fn sample(lines: &[(String, f64)], prefix: &str) -> f64 {
    lines
        .iter()
        .find(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("{prefix} missing in {lines:?}"))
}

/// vLLM's counters only grow while the server runs and start at 0 when it restarts (issue 29:
/// `generation_tokens_total` went down in 23 of 39 reads, and a restarted server began near
/// 117k). 40 reads over about 4 s (one period of the load's noise), then a restart.
#[test]
fn model_server_counters_grow_and_restart_at_zero() {
    let n = Node::start("dpx-nps2-two-models");
    let st = partop::sim::state::SimState::load(&n.state).unwrap();
    let port = st.workloads[0].port;
    wait_until("the model server to answer /metrics", || {
        scrape(port).is_some()
    });
    let counters = [
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_sum",
        "vllm:time_to_first_token_seconds_count",
        "vllm:time_to_first_token_seconds_sum",
    ];
    let mut last = [0.0f64; 6];
    let reads = 40;
    for r in 0..reads {
        let lines = scrape(port).expect("scrape");
        for (k, name) in counters.iter().enumerate() {
            let v = sample(&lines, name);
            assert!(
                v >= last[k],
                "read {r}: {name} went from {} to {v}",
                last[k]
            );
            last[k] = v;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        last[0] > 0.0,
        "the server generated nothing in {reads} reads"
    );
    // Its partition (half of an MI300X) bounds what it can have produced.
    let secs = 0.1 * f64::from(reads) + 3.0;
    let bound = partop::sim::load::peak_tokens_per_sec(0.5) * secs;
    assert!(last[0] <= bound, "{} tokens in {secs} s > {bound}", last[0]);

    assert_eq!(n.sim("stop").code, 0);
    let o = n.sim("resume");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let restarted = std::time::Instant::now();
    let st = partop::sim::state::SimState::load(&n.state).unwrap();
    let port = st.workloads[0].port;
    wait_until("the restarted server to answer /metrics", || {
        scrape(port).is_some()
    });
    let first = sample(&scrape(port).unwrap(), "vllm:generation_tokens_total");
    let bound =
        partop::sim::load::peak_tokens_per_sec(0.5) * (restarted.elapsed().as_secs_f64() + 3.0);
    assert!(
        first <= bound,
        "a restarted server began at {first} tokens (bound {bound}): its counters must start at 0"
    );
}
