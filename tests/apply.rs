//! Applying repartition plans on the simulated node, through the fake amd-smi as a real
//! subprocess: the whole cycle with workloads stopped and relaunched, each reload method, a
//! holder that ignores SIGTERM, a plan invalidated by a new process, resume from the journal.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::env::SimEnv;
use common::{quick, run};

const MODEL: &str = "[[workload]]\nname = \"m\"\nkind = \"model-server\"\ngpu = 3\nvram_gb = 20\nbusy = 40\nmodel = \"org/model\"\n[[workload]]\nname = \"b\"\nkind = \"batch\"\ngpu = 5\nvram_gb = 10\nbusy = 30\n";

#[test]
fn full_cycle_spx_dpx_cpx_spx_with_workloads_relaunched() {
    let e = SimEnv::new(&quick("cycle", "7.0.2", "SPX", "NPS1", MODEL));
    // The model server sits on physical GPU 3: logical GPU 3 in SPX, 6 in DPX, 24 in CPX. It
    // keeps its identity (0000:65:00.0) and is relaunched through the registry on the new index.
    for (args, want, index) in [
        ("--memory NPS2", ("DPX", "NPS2", 16), 6),
        ("--compute CPX --memory NPS4", ("CPX", "NPS4", 64), 24),
        ("--compute SPX --memory NPS1", ("SPX", "NPS1", 8), 3),
    ] {
        // The workloads the last step relaunched are planned once they hold their GPUs (a
        // process that has opened /dev/kfd but not yet its render node holds none, and the
        // apply would rightly refuse a plan made in that moment: the node changes under it).
        let mut p = e.plan(args, "p.json");
        common::wait_until("the relaunched workloads to hold their GPUs", || {
            p = e.plan(args, "p.json");
            let plan: partop::domain::plan::Plan =
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            !plan.stops.is_empty() && plan.stops.iter().all(|s| !s.gpus.is_empty())
        });
        let plan: partop::domain::plan::Plan =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(plan.models.len(), 1, "{args}");
        assert_eq!(plan.models[0].to[0].bdf, "0000:65:00.0", "{args}");
        assert_eq!(plan.models[0].to[0].gpu_id, index, "{args}");
        let relaunch = plan.steps.iter().find(|s| s.key == "relaunch").unwrap();
        assert!(
            relaunch.commands[0].starts_with(&format!("HIP_VISIBLE_DEVICES={index} ")),
            "{:?}",
            relaunch.commands
        );
        let o = e.apply(&p, "--yes --grace 3", "");
        assert_eq!(o.code, 0, "{args}: {}{}", o.stdout, o.stderr);
        // The batch job is stopped by the first change and, as that plan says before the
        // confirmation, not started again: nothing outside the plan changes (issue 23).
        let first = index == 6;
        if first {
            assert!(
                plan.warnings
                    .iter()
                    .any(|w| w.contains("(pid") && w.contains("does NOT come back")),
                "{:?}",
                plan.warnings
            );
        }
        let stopped = if first {
            "ok: 2 stopped"
        } else {
            "ok: 1 stopped"
        };
        assert!(
            o.stdout.contains(stopped) && o.stdout.contains("Successfully reloaded driver"),
            "{}",
            o.stdout
        );
        assert_eq!(
            e.modes(),
            (want.0.to_string(), want.1.to_string(), want.2),
            "{args}"
        );
        let st = e.state();
        assert!(
            st.alive(0) && !st.alive(1),
            "the model relaunched, the batch job not (as planned) after {args}"
        );
        assert!(
            o.stdout
                .contains(&format!("m healthy on logical GPU {index}")),
            "{}",
            o.stdout
        );
        let pid = st.workloads[0].pid.unwrap();
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        assert!(
            env.split(|b| *b == 0)
                .any(|v| v == format!("HIP_VISIBLE_DEVICES={index}").as_bytes()),
            "{args}: the relaunched server runs on logical GPU {index}"
        );
        let health = partop::collect::served::http::get(
            &format!("http://127.0.0.1:{}/health", st.workloads[0].port),
            std::time::Duration::from_secs(2),
        )
        .unwrap();
        assert_eq!(health.status, 200);
    }
    assert!(
        e.journal()
            .iter()
            .filter(|x| x.action == "model.start")
            .count()
            == 3
    );
    let j = e.journal();
    assert_eq!(
        j.iter().filter(|x| x.action == "repartition.done").count(),
        3
    );
    // Each step is journaled before it acts ({"state": "begin"}) and with its result.
    let results: Vec<_> = j
        .iter()
        .filter(|x| x.action == "repartition.step" && x.outcome.get("ok").is_some())
        .collect();
    assert!(!results.is_empty() && results.iter().all(|x| x.outcome["ok"] == true));
    assert_eq!(
        j.iter()
            .filter(|x| x.action == "repartition.step" && x.outcome["state"] == "begin")
            .count(),
        results.len(),
        "every step result follows its journaled begin"
    );
    assert!(j.iter().all(|x| x.simulated));
}

#[test]
fn rocm64_reloads_inside_set_memory() {
    let e = SimEnv::new(&quick("r64", "6.4.1", "SPX", "NPS1", MODEL));
    let p = e.plan("--memory NPS4", "p.json");
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(plan["reload"], "inside_set_memory");
    let o = e.apply(&p, "--yes --grace 3", "");
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert!(
        o.stdout.contains("done by set -M (ROCm 6.x)"),
        "{}",
        o.stdout
    );
    assert_eq!(e.modes(), ("CPX".into(), "NPS4".into(), 64));
}

#[test]
fn rocm713_reloads_with_modprobe() {
    let e = SimEnv::new(&quick("r713", "7.13.0", "DPX", "NPS2", ""));
    let p = e.plan("--memory NPS1 --compute SPX", "p.json");
    let o = e.apply(&p, "--yes", "");
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert!(
        o.stdout.contains("sim reload") && o.stdout.contains("succeeded"),
        "{}",
        o.stdout
    );
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
}

#[test]
fn a_holder_ignoring_sigterm_stops_the_plan_until_sigkill_is_allowed() {
    let e = SimEnv::new(&quick(
        "stub",
        "7.0.2",
        "DPX",
        "NPS2",
        "[[workload]]\nname = \"stuck\"\nkind = \"batch\"\ngpu = 1\npartition = 1\nvram_gb = 5\nignore_sigterm = true\n",
    ));
    let p = e.plan("--compute CPX --memory NPS4", "p.json");
    let o = e.apply(&p, "--yes --grace 1", "");
    assert_eq!(o.code, 1);
    assert!(
        o.stdout.contains("step 1 (stop) failed")
            && o.stdout.contains("--resume --kill-after-grace"),
        "{}",
        o.stdout
    );
    assert_eq!(
        e.modes(),
        ("DPX".into(), "NPS2".into(), 16),
        "nothing changed"
    );
    let o = e.apply(&p, "--yes --grace 1 --resume --kill-after-grace", "");
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert!(
        o.stdout.contains("resuming run") && o.stdout.contains("needed SIGKILL"),
        "{}",
        o.stdout
    );
    assert_eq!(e.modes(), ("CPX".into(), "NPS4".into(), 64));
    let o = e.apply(&p, "--yes --resume", "");
    assert!(
        o.stdout.contains("already applied completely"),
        "{}",
        o.stdout
    );
}

#[test]
fn a_plan_is_refused_when_the_node_changed() {
    let e = SimEnv::new(&quick("changed", "7.0.2", "SPX", "NPS1", MODEL));
    e.node.sim("stop");
    let p = e.plan("--memory NPS2", "p.json");
    e.node.sim("resume");
    let o = e.apply(&p, "--yes", "");
    assert_eq!(o.code, 1);
    assert!(
        o.stderr
            .contains("is not in the plan (it started after planning)")
            && o.stderr.contains("nothing was changed"),
        "{}",
        o.stderr
    );
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
}

#[test]
fn confirmation_dry_run_and_read_only() {
    let e = SimEnv::new(&quick("confirm", "7.0.2", "SPX", "NPS1", ""));
    let p = e.plan("--memory NPS2", "p.json");
    let o = e.apply(&p, "--dry-run", "");
    assert_eq!(o.code, 0);
    assert!(
        o.stdout.contains("$ amd-smi set -M NPS2")
            && o.stdout.contains("$ amd-smi reset -r")
            && o.stdout.contains("dry run: nothing changed"),
        "{}",
        o.stdout
    );
    let o = e.apply(&p, "", "yes\n");
    assert_eq!(o.code, 1, "a reload needs the host name, not yes");
    assert!(o.stdout.contains("not confirmed"));
    let o = run(
        e.cmd().arg("--read-only").arg("apply").arg(&p).arg("--yes"),
        "",
    );
    assert_eq!(o.code, 2);
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
    let host = partop::collect::host::hostname();
    let o = e.apply(&p, "", &format!("{host}\n"));
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert_eq!(e.modes(), ("DPX".into(), "NPS2".into(), 16));
}

#[test]
fn restart_err_is_read_from_the_text_even_with_exit_status_0() {
    let text =
        common::fixture("v-error-set-memory-partition-nps4-restart-err-rocm6.3.2-issue4439.txt");
    let out = partop::collect::amdsmi::runner::RawOutput {
        command: "amd-smi set -M NPS4".into(),
        code: Some(0),
        stdout: text,
        stderr: String::new(),
        took: std::time::Duration::ZERO,
    };
    let e =
        partop::exec::apply::check_output(&out, "Successfully set memory partition").unwrap_err();
    assert!(
        e.contains("AMDSMI_STATUS_AMDGPU_RESTART_ERR") && e.contains("driver after applying NPS4"),
        "{e}"
    );
    let ok = common::fixture("synth-set-memory-partition-nps2-8xmi300x-rocm7.0.txt");
    let out = partop::collect::amdsmi::runner::RawOutput { stdout: ok, ..out };
    assert_eq!(
        partop::exec::apply::check_output(&out, "Successfully set memory partition").unwrap(),
        "8 x Successfully set memory partition"
    );
}

#[test]
fn a_reload_failure_stops_the_plan_with_the_tools_text_then_retry_succeeds() {
    // The driver fails to come back once (fault injection), through the real fake-amd-smi path.
    let scenario = quick("restart-err", "7.0.2", "SPX", "NPS1", MODEL)
        .replace("reload_secs = 0.3", "reload_secs = 0.3\nfail_reloads = 1");
    let e = SimEnv::new(&scenario);
    let p = e.plan("--memory NPS2", "p.json");
    let o = e.apply(&p, "--yes --grace 3", "");
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let all = format!("{}{}", o.stdout, o.stderr);
    assert!(
        all.contains("(reload) failed")
            && all.contains(
                "[AMDSMI_STATUS_AMDGPU_RESTART_ERR] Unable to successfully restart driver"
            ),
        "{all}"
    );
    // The way back is printed: retry, or restore the services as they were, with the run's
    // own options (the node's state, its registry) so that the line works when pasted.
    let restore = all
        .lines()
        .find(|l| l.contains(" models start m --gpu 0000:65:00.0"))
        .unwrap_or_else(|| panic!("no restore line: {all}"));
    assert!(
        all.contains("--resume") && restore.contains("--sim-state"),
        "{all}"
    );
    assert!(
        !e.state().alive(0),
        "stopped, not relaunched by a failed plan"
    );
    let o = e.apply(&p, "--yes --resume --grace 3", "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(e.modes(), ("DPX".into(), "NPS2".into(), 16));
    assert!(e.state().alive(0));
}

#[test]
fn partop_killed_mid_apply_then_resume() {
    let scenario =
        quick("killed", "7.0.2", "SPX", "NPS1", "").replace("reload_secs = 0.3", "reload_secs = 3");
    let e = SimEnv::new(&scenario);
    let p = e.plan("--memory NPS2", "p.json");
    let mut child = e
        .cmd()
        .arg("apply")
        .arg(&p)
        .arg("--yes")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the memory mode is set (step 3 journaled), i.e. during the reload.
    common::wait_until("set_memory to be journaled", || {
        e.journal().iter().any(|j| {
            j.action == "repartition.step"
                && j.targets["key"] == "set_memory"
                && j.outcome["ok"] == true
        })
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    assert!(
        !e.journal().iter().any(|j| j.action == "repartition.done"),
        "it was killed before finishing"
    );
    let o = e.apply(&p, "--yes --resume", "");
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert!(
        o.stdout.contains("resuming run") && o.stdout.contains("at step 3 (reload)"),
        "{}",
        o.stdout
    );
    assert_eq!(e.modes(), ("DPX".into(), "NPS2".into(), 16));
}

/// `partop journal` reads as words: every step of an apply is named by its plan title and
/// counted from 1 exactly as the apply's own log counted it (`[3/6] title` there, `step 3 of 6:
/// title` here), begun and done; `--json` gives the raw entries (0-based `step`), one a line.
#[test]
fn the_journal_names_each_step_as_the_apply_log_counts_it() {
    let e = SimEnv::new(&quick("words", "7.0.2", "SPX", "NPS1", MODEL));
    let p = e.plan("--compute DPX", "p.json");
    let o = e.apply(&p, "--yes", "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // The apply's log: `[i/N] title (limit …)`.
    let logged: Vec<(String, String)> = o
        .stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix('[')?;
            let (count, title) = rest.split_once("] ")?;
            let title = title.split(" (limit ").next().unwrap_or(title);
            Some((count.to_string(), title.to_string()))
        })
        .collect();
    assert!(logged.len() >= 3, "{}", o.stdout);
    let words = run(e.cmd().arg("journal"), "");
    assert_eq!(words.code, 0, "{}", words.stderr);
    for (count, title) in &logged {
        let (i, n) = count.split_once('/').unwrap();
        let said = format!("step {i} of {n}: {title}");
        for how in ["· begins", "· done"] {
            assert!(
                words
                    .stdout
                    .lines()
                    .any(|l| l.contains(&said) && l.contains(how)),
                "`{said} {how}` missing from partop journal:\n{}",
                words.stdout
            );
        }
    }
    assert!(
        words.stdout.contains("finished: every step done"),
        "{}",
        words.stdout
    );
    assert!(!words.stdout.contains("step 0 "), "{}", words.stdout);
    assert!(
        !words.stdout.contains("{\""),
        "no raw JSON in words: {}",
        words.stdout
    );
    // --json: the raw entries, one per line, as many as the words have lines.
    let raw = run(e.cmd().args(["journal", "--json"]), "");
    let entries: Vec<partop::exec::journal::Entry> = raw
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        entries.len(),
        words.stdout.lines().count(),
        "{}",
        raw.stdout
    );
    assert!(
        entries
            .iter()
            .any(|x| x.action == "repartition.step" && x.targets["step"] == 0),
        "the raw entries keep the 0-based index: {}",
        raw.stdout
    );
    eprintln!("{} logged steps checked, begun and done", logged.len());
}
