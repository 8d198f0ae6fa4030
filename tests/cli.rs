//! The command line as a user meets it: snapshot on the simulator and on a recording, every
//! bad-input path of the amd-smi collector through a real subprocess, check-config, keys,
//! completions and the man page.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::{Out, partop, run};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn fake(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("amd-smi");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn snapshot_with(script: &Path) -> Out {
    run(
        partop()
            .args(["snapshot", "--timeout", "3", "--amd-smi"])
            .arg(script),
        "",
    )
}

const VERSION: &str = "version) echo 'AMDSMI Tool: 26.0.2+39589fda | AMDSMI Library version: 26.0.2 | ROCm version: 7.0.2 | amdgpu version: x | amd_hsmp version: N/A';;";

#[test]
fn snapshot_json_on_the_simulator_has_the_documented_fields() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        partop().env("XDG_STATE_HOME", dir.path()).args([
            "snapshot",
            "--json",
            "--sim",
            "cpx-nps4-small-models",
        ]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    for k in ["host", "taken_at", "sources", "gpus", "processes"] {
        assert!(v.get(k).is_some(), "{k} missing");
    }
    // Kernel first: the twin's files every sample, amd-smi for identity (with its version).
    let sources = v["sources"].as_array().unwrap();
    assert!(sources.iter().all(|s| s["status"] == "ok"), "{sources:?}");
    assert!(sources.iter().any(|s| s["name"] == "sysfs"), "{sources:?}");
    assert!(
        sources
            .iter()
            .filter(|s| s["name"].as_str().unwrap().starts_with("amd-smi"))
            .all(|s| s["version"].as_str().unwrap().contains("ROCm 7.0.2")),
        "{sources:?}"
    );
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8);
    assert_eq!(gpus[0]["compute_partition"], "CPX");
    assert_eq!(gpus[0]["memory_partition"], "NPS4");
    let parts = gpus[0]["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 8);
    assert_eq!(parts[3]["gpu_id"], 3);
    assert_eq!(parts[3]["cu_count"], 38);
    assert!(parts[3]["vram_total_bytes"].as_u64().unwrap() > 20 << 30);
    let p = &v["processes"][0];
    assert!(p["gpus"][0]["vram_bytes"].as_u64().unwrap() > 1 << 30);
    assert!(p["command"].as_str().unwrap().contains("vllm serve"), "{p}");
    // The simulated node is gone afterwards.
    let sim = dir.path().join("partop/sim");
    assert!(
        std::fs::read_dir(&sim).map(|d| d.count()).unwrap_or(0) == 0,
        "state left behind"
    );
}

#[test]
fn snapshot_of_a_recording() {
    let rec = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/recordings/spx-nps1-one-model.json");
    let o = run(partop().arg("--replay").arg(&rec).arg("snapshot"), "");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("SPX/NPS1") && !o.stdout.contains("[SIMULATED NODE]"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("0000:05:00.0"));
}

#[test]
fn amd_smi_not_found_says_where_it_looked_and_suggests_sim() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(partop().env("PATH", dir.path()).arg("snapshot"), "");
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("amd-smi not found")
            && o.stderr.contains(&dir.path().display().to_string())
            && o.stderr.contains("/opt/rocm/bin")
            && o.stderr.contains("--sim"),
        "{}",
        o.stderr
    );
    let o = snapshot_with(Path::new("/nonexistent/amd-smi"));
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("/nonexistent/amd-smi"));
}

#[test]
fn output_that_is_not_json_is_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let s = fake(
        dir.path(),
        &format!("case \"$1\" in {VERSION} *) echo 'Traceback: amdsmi init failed';; esac"),
    );
    let o = snapshot_with(&s);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("not JSON")
            && o.stderr.contains("amdsmi init failed")
            && o.stderr.contains("amd-smi list"),
        "{}",
        o.stderr
    );
}

#[test]
fn missing_groups_gets_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let s = fake(
        dir.path(),
        &format!(
            "case \"$1\" in {VERSION} *) echo 'WARNING: User is missing the following required groups: render, video. Please add user to these groups.'; exit 1;; esac"
        ),
    );
    let o = snapshot_with(&s);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("usermod -aG video,render"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_failing_metric_read_gives_partial_data_and_exit_3() {
    let node = common::Node::start("dpx-nps2-two-models");
    let dir = tempfile::tempdir().unwrap();
    let s = fake(
        dir.path(),
        &format!(
            "case \"$1\" in metric) echo 'GPU: 0'; echo '    [AMDSMI_STATUS_DRM_ERROR] Unable to read metrics';; *) exec {} sim amd-smi --state {} \"$@\";; esac",
            env!("CARGO_BIN_EXE_partop"),
            node.state.display()
        ),
    );
    let o = snapshot_with(&s);
    assert_eq!(o.code, 3, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("DPX/NPS2"), "static data still shown");
    assert!(o.stderr.contains("AMDSMI_STATUS_DRM_ERROR"), "{}", o.stderr);
}

#[test]
fn an_unexpected_shape_names_the_command_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let s = fake(
        dir.path(),
        &format!(
            "case \"$1\" in {VERSION} list) echo '[{{\"gpu\": \"zero\"}}]';; *) echo '[]';; esac"
        ),
    );
    let o = snapshot_with(&s);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("amd-smi list -e --json -g all") && o.stderr.contains("[0].gpu"),
        "{}",
        o.stderr
    );
}

#[test]
fn check_config_reports_locations_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("partop");
    std::fs::create_dir_all(cfg.join("themes")).unwrap();
    let o = run(
        partop()
            .env("XDG_CONFIG_HOME", dir.path())
            .arg("check-config"),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert!(o.stdout.contains("configuration OK"));
    std::fs::write(
        cfg.join("config.toml"),
        "theme = \"default\"\nrefresh_secs = \"fast\"\n",
    )
    .unwrap();
    std::fs::write(cfg.join("keymap.toml"), "[global]\n\"x\" = \"qiut\"\n").unwrap();
    std::fs::write(
        cfg.join("themes/mine.toml"),
        "inherits = \"default\"\n[styles]\n\"ui\" = { fg = \"nocolour\" }\n",
    )
    .unwrap();
    let o = run(
        partop()
            .env("XDG_CONFIG_HOME", dir.path())
            .arg("check-config"),
        "",
    );
    assert_eq!(o.code, 2);
    assert!(o.stdout.contains("config.toml:2:16"), "{}", o.stdout);
    assert!(
        o.stdout.contains("keymap.toml:2:7") && o.stdout.contains("did you mean \"quit\""),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("mine.toml:3:8") && o.stdout.contains("\"nocolour\" is not a colour"),
        "{}",
        o.stdout
    );
}

/// Every mistake of every file in one run, each at its file:line:col, and nothing else.
#[test]
fn check_config_reports_every_mistake_of_every_file_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("partop");
    std::fs::create_dir_all(cfg.join("themes")).unwrap();
    std::fs::write(
        cfg.join("themes/mine.toml"),
        "inherits = \"default\"\n\
         [palette]\n\
         accent = \"#zzzzzz\"\n\
         [styles]\n\
         \"ui.title\" = \"purplish\"\n\
         \"table.header\" = { fg = \"red\", modifiers = [\"blinky\"] }\n\
         \"table.hedaer\" = \"red\"\n\
         \"status.ok\" = { fg = \"green\", colour = \"red\" }\n",
    )
    .unwrap();
    std::fs::write(
        cfg.join("keymap.toml"),
        "[global]\n\"x\" = \"qiut\"\n\n[procesess]\n\"k\" = \"kill_process\"\n\n[processes]\n\"y\" = \"cycle_sortt\"\n",
    )
    .unwrap();
    let models = cfg.join("models.toml");
    std::fs::write(
        &models,
        "[[model]]\nname = \"a\"\nmodel = \"x\"\nport = 8000\nmemory_gb = -5\nlaunch.command = [\"vllm\"]\n\n\
         [[model]]\nname = \"b\"\nmodel = \"y\"\nport = 8001\ngpu = \"0000:zz:00.9\"\nmemory_gb = 10\nlaunch.command = [\"vllm\", \"{modle}\"]\n\n\
         [[model]]\nname = \"c\"\nmodel = \"z\"\nport = 8002\nmemory_gb = 10\nlaunch.command = [\"vllm\"]\ntensor_paralel = 2\n",
    )
    .unwrap();
    let o = run(
        partop()
            .env("XDG_CONFIG_HOME", dir.path())
            .arg("check-config"),
        "",
    );
    assert_eq!(o.code, 2, "{}", o.stdout);
    let t = cfg.join("themes/mine.toml").display().to_string();
    let k = cfg.join("keymap.toml").display().to_string();
    let m = models.display().to_string();
    let expect = [
        (format!("{t}:3:10:"), "#zzzzzz"),
        (format!("{t}:5:14:"), "purplish"),
        (format!("{t}:6:18:"), "blinky"),
        (format!("{t}:7:18:"), "did you mean \"table.header\""),
        (format!("{t}:8:15:"), "unknown style key \"colour\""),
        (format!("{k}:2:7:"), "did you mean \"quit\""),
        (
            format!("{k}:4:1:"),
            "unknown section [procesess] (did you mean [processes]?)",
        ),
        (format!("{k}:8:7:"), "did you mean \"cycle_sort\""),
        (format!("{m}:5:1:"), "memory_gb = -5 is not a size"),
        (
            format!("{m}:12:1:"),
            "gpu = \"0000:zz:00.9\" is not a logical GPU's identity",
        ),
        (format!("{m}:14:1:"), "unknown placeholder {modle}"),
        (format!("{m}:22:1:"), "unknown field `tensor_paralel`"),
    ];
    let lines: Vec<&str> = o.stdout.lines().collect();
    for (pos, what) in &expect {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(pos.as_str()) && l.contains(what)),
            "missing {pos} {what} in:\n{}",
            o.stdout
        );
    }
    assert!(
        o.stdout.contains(&format!("{} problem(s)", expect.len())),
        "exactly these problems:\n{}",
        o.stdout
    );
    // The valid rest of the keymap is still used: `[processes]`'s other bindings load.
    let km = run(partop().env("XDG_CONFIG_HOME", dir.path()).arg("keys"), "");
    assert!(km.stdout.contains("cycle_sort"), "{}", km.stdout);
}

#[test]
fn completions_man_keys_and_help() {
    let o = run(partop().args(["completions", "bash"]), "");
    assert!(o.code == 0 && o.stdout.contains("partop"));
    let o = run(partop().arg("man"), "");
    assert!(o.code == 0 && o.stdout.contains(".TH partop"));
    let o = run(partop().args(["keys"]), "");
    // q goes back from a drill-down and quits at the top (issue 27); ctrl-c always quits.
    assert!(
        o.stdout.contains("global     q            back")
            && o.stdout.contains("global     ctrl-c       quit"),
        "{}",
        o.stdout
    );
    for sub in ["snapshot", "sim", "record", "check-config", "keys"] {
        let o = run(partop().args([sub, "--help"]), "");
        assert_eq!(o.code, 0, "{sub} --help");
    }
    let o = run(partop().args(["sim", "list"]), "");
    for (name, _) in partop::sim::scenario::BUILTIN {
        assert!(o.stdout.contains(name));
    }
}

/// The fleet refuses what cannot be: no nodes (usage), a destination that would be an ssh
/// option, an empty or edited plan set: each clearly, before anything runs.
#[test]
fn fleet_refuses_bad_input_clearly() {
    let o = run(partop().arg("fleet"), "");
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("no nodes: name them"), "{}", o.stderr);
    let o = run(
        partop().args(["fleet", "--", "-oProxyCommand=touch /tmp/x"]),
        "",
    );
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("is not an ssh destination"),
        "{}",
        o.stderr
    );
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(
        &empty,
        r#"{"fingerprint":"cbf29ce484222325","created_at":"x","nodes":[]}"#,
    )
    .unwrap();
    let o = run(
        partop()
            .env("XDG_STATE_HOME", dir.path())
            .args(["fleet", "n1", "apply", "--yes"])
            .arg(&empty),
        "",
    );
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("the set names no node"), "{}", o.stderr);
    let edited = dir.path().join("edited.json");
    std::fs::write(
        &edited,
        r#"{"fingerprint":"0000","created_at":"x","nodes":[]}"#,
    )
    .unwrap();
    let o = run(
        partop()
            .env("XDG_STATE_HOME", dir.path())
            .args(["fleet", "n1", "apply", "--yes"])
            .arg(&edited),
        "",
    );
    assert_eq!(o.code, 1);
    assert!(
        !dir.path().join("partop/fleet-journal.jsonl").exists(),
        "nothing journaled, nothing done"
    );
}

/// A replayed recording is looked at, never acted on, by every command; and a file that never
/// ends, given where a recording or a plan goes, is refused at once, never read until memory
/// runs out.
#[test]
fn a_replay_acts_on_nothing_and_an_endless_file_is_refused() {
    let rec = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/recordings/spx-nps1-one-model.json");
    let mut victim = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let o = common::run(
        common::partop().arg("--replay").arg(&rec).args([
            "kill",
            &victim.id().to_string(),
            "--yes",
        ]),
        "",
    );
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout
            .contains("a replayed recording): nothing is signalled"),
        "{}",
        o.stdout
    );
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the process was signalled"
    );
    let _ = victim.kill();
    let _ = victim.wait();
    for args in [
        vec!["--replay", "/dev/zero", "snapshot"],
        vec!["--nvidia-replay", "/dev/zero", "snapshot"],
        vec!["apply", "/dev/zero", "--yes"],
    ] {
        let t = std::time::Instant::now();
        let o = common::run(common::partop().args(&args), "");
        assert_ne!(o.code, 0);
        assert!(
            o.stderr.contains("/dev/zero") && o.stderr.contains("longer than 256 MiB"),
            "{args:?}: {}",
            o.stderr
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{args:?}: {:?}",
            t.elapsed()
        );
    }
}

/// `partop --sim snapshot` is the default scenario and the `snapshot` command (it was read as a
/// scenario named "snapshot"); a scenario named after `--sim` stays a scenario. Both forms of
/// each of the read-only commands that take a node are run.
#[test]
fn sim_followed_by_a_command_is_the_default_scenario() {
    let mut cases = 0;
    for args in [
        &["--sim", "snapshot"][..],
        &["--sim", "snapshot", "--json"],
        &["--sim", "dpx-nps2-two-models", "snapshot"],
        &["--sim", "models"],
        &["snapshot", "--sim"],
    ] {
        let o = run(
            partop().env("PARTOP_SIM_AMD_SMI_COST", "off").args(args),
            "",
        );
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        assert!(
            !o.stderr.contains("unknown scenario"),
            "{args:?}: {}",
            o.stderr
        );
        cases += 1;
    }
    let o = run(
        partop()
            .env("PARTOP_SIM_AMD_SMI_COST", "off")
            .args(["--sim", "snapshot"]),
        "",
    );
    assert!(
        o.stdout.contains("[SIMULATED NODE]") && o.stdout.contains("DPX/NPS2"),
        "the default scenario (dpx-nps2-two-models): {}",
        o.stdout
    );
    // A name that is neither is still refused as a scenario (exit 2).
    let o = run(partop().args(["--sim", "nosuch", "snapshot"]), "");
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("unknown scenario \"nosuch\""),
        "{}",
        o.stderr
    );
    eprintln!("{} command lines ran", cases + 2);
}

/// The table `partop snapshot` prints ends with the findings one sample shows, each a whole
/// sentence naming the process and what to do; `findings: none` where there are none. With the
/// default source the agent holding /dev/kfd is `holds /dev/kfd only`; with `--source amd-smi`
/// it is the holder amd-smi does not list (docs/user-guide.md says which appears when).
#[test]
fn snapshot_table_prints_the_findings() {
    let table = |args: &[&str]| {
        let o = run(
            partop().env("PARTOP_SIM_AMD_SMI_COST", "off").args(args),
            "",
        );
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        o.stdout
    };
    let none = table(&["--sim", "dpx-nps2-two-models", "snapshot"]);
    assert!(none.contains("\nfindings: none\n"), "{none}");
    let kfd = table(&["--sim", "agent-holds-kfd", "snapshot"]);
    let at = kfd
        .find("\nfindings (1):\n")
        .unwrap_or_else(|| panic!("{kfd}"));
    let f = &kfd[at..];
    assert!(
        f.contains("INFO holds /dev/kfd only: pid ")
            && f.contains("gpuagent (AMD GPU agent) holds /dev/kfd (every GPU)")
            && f.contains("so a repartition stops it"),
        "{f}"
    );
    let amd = table(&[
        "--sim",
        "agent-holds-kfd",
        "--source",
        "amd-smi",
        "snapshot",
    ]);
    assert!(
        amd.contains("INFO holder amd-smi does not list: pid ")
            && amd.contains("but amd-smi does not list it"),
        "{amd}"
    );
}

/// `--help` says what `--source auto` does: the kernel first, amd-smi beside it (it said "amd-smi
/// overlaid with the kernel's values").
#[test]
fn help_describes_source_auto_as_kernel_first() {
    let o = run(partop().arg("--help"), "");
    assert_eq!(o.code, 0);
    let text = o.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(!text.contains("overlaid"), "{text}");
    assert!(
        text.contains(
            "the kernel first with amd-smi beside it for identity, firmware and profiles (auto)"
        ),
        "{text}"
    );
}

/// docs/user-guide.md's GPUs table says where each column comes from: by default the kernel
/// (GFX from `xcp_metrics`/`gpu_metrics`, CUs, render node and BDF from the KFD topology), with
/// `--source amd-smi` amd-smi. Checked on every logical GPU of the simulated node, both ways.
#[test]
fn the_gpus_views_columns_come_from_the_source_the_guide_names() {
    let doc = |source: &[&str]| -> serde_json::Value {
        let o = run(
            partop()
                .env("PARTOP_SIM_AMD_SMI_COST", "off")
                .args(["--sim", "dpx-nps2-two-models"])
                .args(source)
                .args(["snapshot", "--json"]),
            "",
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        serde_json::from_str(&o.stdout).unwrap()
    };
    let mut cases = 0;
    for (args, want) in [
        (&[][..], "sysfs"),
        (&["--source", "amd-smi"][..], "amd-smi"),
    ] {
        let d = doc(args);
        for g in d["gpus"].as_array().unwrap() {
            for l in g["partitions"].as_array().unwrap() {
                for field in ["gfx_busy_percent", "cu_count", "render_node"] {
                    let p = &l["provenance"][field];
                    // A value computed from amd-smi's (a partition's GFX: the mean of its
                    // XCCs) is `derived` and names the amd-smi read it came from.
                    let from = if p["source"] == "derived" {
                        p["detail"]
                            .as_str()
                            .unwrap_or("")
                            .split(' ')
                            .next()
                            .unwrap_or("")
                    } else {
                        p["source"].as_str().unwrap_or("")
                    };
                    // (The JSON spells the kind `amd_smi`.)
                    assert_eq!(from.replace('_', "-"), want, "{args:?} {field}: {p}");
                    cases += 1;
                }
                if want == "sysfs" {
                    let gfx = l["provenance"]["gfx_busy_percent"]["detail"]
                        .as_str()
                        .unwrap();
                    assert!(
                        gfx.ends_with("xcp_metrics") || gfx.ends_with("gpu_metrics"),
                        "{gfx}"
                    );
                }
            }
        }
    }
    assert_eq!(cases, 2 * 16 * 3, "16 logical GPUs, 3 columns, 2 sources");
}

/// check-config in one configuration directory; its stdout lines and exit code.
fn check_config_in(dir: &Path) -> (Vec<String>, i32) {
    let o = run(partop().env("XDG_CONFIG_HOME", dir).arg("check-config"), "");
    (o.stdout.lines().map(str::to_string).collect(), o.code)
}

/// Every problem is reported once, at its line and column, whatever else is wrong in the same
/// files (issue 27): the cases that hid or doubled problems, each counted.
#[test]
fn check_config_reports_each_problem_once_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("partop");
    std::fs::create_dir_all(cfg.join("themes")).unwrap();
    let c = cfg.join("config.toml").display().to_string();
    let t = cfg.join("themes/mine.toml").display().to_string();
    let k = cfg.join("keymap.toml").display().to_string();
    let m = cfg.join("models.toml").display().to_string();
    // (config.toml, keymap.toml, models.toml, themes/mine.toml, the problems expected as
    // (position, text)).
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        Vec<(String, &'static str)>,
    );
    let theme = "[styles]\n\"ui\" = \"red\"\n\"tabel\" = \"blue\"\n\"ui.title\" = \"purplish\"\n";
    let theme_problems = || {
        vec![
            (format!("{t}:3:11:"), "did you mean \"table.header\""),
            (format!("{t}:4:14:"), "purplish"),
        ]
    };
    let cases: Vec<Case> = vec![
        // Out of range with a theme in use: each theme problem once, the range error located.
        ("theme = \"mine\"\nrefresh_secs = 0\n", "", "", theme, {
            let mut v = vec![(format!("{c}:2:16:"), "refresh_secs = 0 is out of range")];
            v.extend(theme_problems());
            v
        }),
        // An unknown field does not hide the range error, nor a value of the wrong type.
        (
            "refresh_secs = 0\nbogus = 1\ngrace_secs = \"long\"\nidle_minutes = -1\n",
            "",
            "",
            "",
            vec![
                (format!("{c}:1:16:"), "refresh_secs = 0 is out of range"),
                (format!("{c}:2:1:"), "unknown field `bogus`"),
                (format!("{c}:3:14:"), "grace_secs: invalid type"),
                (format!("{c}:4:16:"), "idle_minutes = -1 is out of range"),
            ],
        ),
        // [procs] means [processes]; a misspelt field is named.
        (
            "refersh_secs = 1\n",
            "[procs]\n\"x\" = \"quit\"\n",
            "",
            "",
            vec![
                (format!("{c}:1:1:"), "did you mean `refresh_secs`?"),
                (
                    format!("{k}:1:1:"),
                    "unknown section [procs] (did you mean [processes]?)",
                ),
            ],
        ),
        // Five problems in one models.toml entry, five reports.
        (
            "",
            "",
            "[[model]]\nname = \"a\"\nmodel = \"x\"\nport = 8000\nmemory_gb = -5\ngpuu = \"0\"\n\
             launch.command = [\"vllm\", \"{modle}\"]\nlaunch.comand = [\"x\"]\nhealth_timeout_secs = \"slow\"\n",
            "",
            vec![
                (format!("{m}:5:1:"), "memory_gb = -5 is not a size"),
                (format!("{m}:6:1:"), "unknown field `gpuu`"),
                (format!("{m}:7:1:"), "unknown placeholder {modle}"),
                (format!("{m}:8:1:"), "unknown field `launch.comand`"),
                (format!("{m}:9:1:"), "health_timeout_secs: invalid type"),
            ],
        ),
        // A theme that inherits nothing must carry the base styles.
        (
            "theme = \"mine\"\n",
            "",
            "",
            "inherits = \"none\"\n[styles]\n\"ui.title\" = \"red\"\n",
            vec![(
                format!("{t}:"),
                "inherits nothing and lacks the base style \"ui\", \"table.row.selected\"",
            )],
        ),
    ];
    let mut problems = 0;
    for (i, (config, keymap, models, mine, expect)) in cases.iter().enumerate() {
        for (f, text) in [
            ("config.toml", config),
            ("keymap.toml", keymap),
            ("models.toml", models),
            ("themes/mine.toml", mine),
        ] {
            let p = cfg.join(f);
            if text.is_empty() {
                let _ = std::fs::remove_file(&p);
            } else {
                std::fs::write(&p, text).unwrap();
            }
        }
        let (lines, code) = check_config_in(dir.path());
        assert_eq!(code, 2, "case {i}: {lines:#?}");
        for (pos, what) in expect {
            let hits = lines
                .iter()
                .filter(|l| l.starts_with(pos.as_str()) && l.contains(what))
                .count();
            assert_eq!(hits, 1, "case {i}: {pos} {what} once in {lines:#?}");
        }
        assert_eq!(
            lines.len(),
            expect.len() + 1,
            "case {i}: exactly these problems and the closing line: {lines:#?}"
        );
        assert!(
            lines
                .last()
                .unwrap()
                .starts_with(&format!("{} problem(s)", expect.len())),
            "case {i}: {lines:#?}"
        );
        problems += expect.len();
    }
    assert_eq!(problems, 15, "problems checked over {} cases", cases.len());
}

/// `partop snapshot --json | head`: the reader closes the pipe before partop writes. partop ends
/// quietly with 141 (a shell's status for a writer ended by SIGPIPE), no "Broken pipe" on
/// stderr, for the JSON and the table (2 cases).
#[test]
fn a_reader_that_closes_the_pipe_ends_partop_quietly() {
    let rec = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/recordings/dpx-nps2-two-models.json");
    let mut cases = 0;
    for json in [true, false] {
        let mut c = partop();
        c.arg("--replay").arg(&rec).arg("snapshot");
        if json {
            c.arg("--json");
        }
        let mut child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(141), "json {json}: {err}");
        assert!(!err.contains("Broken pipe"), "json {json}: {err}");
        cases += 1;
    }
    assert_eq!(cases, 2);
}

/// `fleet --kubernetes` refuses, before any connection, a malformed label selector (exit 2,
/// naming the requirement) and a context the kubeconfig does not have (naming those it has):
/// 4 + 1 cases (one selector carrying an escape sequence, said escaped), none needing a cluster.
#[test]
fn a_bad_selector_or_context_is_said_before_any_connection() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kc.yaml");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\ncurrent-context: a\nusers:\n- name: u\n  user: {token: x}\n",
    )
    .unwrap();
    for (sel, said) in [
        ("a=b=c", "the value `b=c`"),
        ("a=b,,c", "requirement 2"),
        ("app in x", "parentheses"),
        ("a=\u{1b}]0;pwn\u{7}", "the value"),
    ] {
        let o = run(
            partop()
                .args(["fleet", "--kubernetes", "--once", "--kubeconfig"])
                .arg(&kc)
                .args(["-l", sel]),
            "",
        );
        assert_eq!(o.code, 2, "{sel}: {}", o.stderr);
        assert!(o.stderr.contains(said), "{sel}: {}", o.stderr);
        assert!(!o.stderr.contains('\u{1b}'), "escaped: {}", o.stderr);
    }
    let o = run(
        partop()
            .args(["fleet", "--kubernetes", "--once", "--kubeconfig"])
            .arg(&kc)
            .args(["--context", "nope"]),
        "",
    );
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("has no context nope (it has: a)"),
        "{}",
        o.stderr
    );
}
