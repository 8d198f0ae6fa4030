//! An apply interrupted at any point resumes (issue 23): for representative transitions, the
//! apply is killed (SIGKILL, through the simulated node's crash injection) at every step
//! boundary and between the two halves of every step (acted, not yet journaled), and inside the
//! driver reload while amd-smi runs; then the `--resume` command exactly as `partop journal`
//! prints it is pasted into a shell, and the node must end in the target with its models
//! healthy and the run closed.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]
#![allow(clippy::print_stderr, reason = "each test says how many cases it ran")]

mod common;
use common::env::SimEnv;
use common::run;
use partop::domain::plan::Plan;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MODELS: &str = "[[workload]]\nname = \"small\"\nkind = \"model-server\"\ngpu = 1\nvram_gb = 16\nbusy = 40\nmodel = \"org/small\"\n[[workload]]\nname = \"job\"\nkind = \"batch\"\ngpu = 6\nvram_gb = 10\nbusy = 30\n";

fn scenario(compute: &str, memory: &str, time_scale: f64) -> String {
    format!(
        "name = \"rs\"\ndescription = \"resume\"\nproduct = \"mi300x\"\ncompute = \"{compute}\"\nmemory = \"{memory}\"\nrocm = \"7.0.2\"\nseed = 5\nreload_secs = 6\ntime_scale = {time_scale}\n{MODELS}"
    )
}

/// From compute, memory to compute, memory.
type Move = (&'static str, &'static str, &'static str, &'static str);

/// The transitions the issue names: a compute mode that is not the reload's default, into the
/// smallest partitions, and out of a mode that is.
const MOVES: [Move; 3] = [
    ("DPX", "NPS2", "DPX", "NPS1"),
    ("SPX", "NPS1", "CPX", "NPS4"),
    ("QPX", "NPS4", "DPX", "NPS2"),
];

/// Where the apply is killed.
#[derive(Clone, Debug)]
enum Kill {
    /// `PARTOP_SIM_CRASH_AT=WHEN:STEP`.
    At(String),
    /// SIGKILL while the reload's amd-smi runs (timed from its journal entry).
    InsideReload,
}

fn plan(e: &SimEnv, to: (&str, &str)) -> (std::path::PathBuf, Plan) {
    let p = e.plan(&format!("--compute {} --memory {}", to.0, to.1), "p.json");
    let plan: Plan = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    (p, plan)
}

fn one(mv: Move, kill: &Kill) -> Result<String, String> {
    let scale = if matches!(kill, Kill::InsideReload) {
        0.3
    } else {
        0.01
    };
    let e = SimEnv::new(&scenario(mv.0, mv.1, scale));
    // The model server holds its GPU before the plan is made.
    let (mut path, mut p) = plan(&e, (mv.2, mv.3));
    common::wait_until("the model to hold its GPU", || {
        (path, p) = plan(&e, (mv.2, mv.3));
        p.stops.len() == 2 && p.stops.iter().all(|s| !s.gpus.is_empty())
    });
    let mut c = e.cmd();
    c.arg("apply")
        .arg(&path)
        .args(["--yes", "--grace", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Kill::At(at) = kill {
        c.env(partop::exec::apply::CRASH_ENV, at);
    }
    let mut child = c.spawn().unwrap();
    if matches!(kill, Kill::InsideReload) {
        let reload = p.steps.iter().position(|s| s.key == "reload").unwrap();
        let t0 = Instant::now();
        loop {
            let begun = e.journal().iter().any(|x| {
                x.action == "repartition.step"
                    && x.targets["step"] == reload
                    && x.outcome["state"] == "begin"
            });
            if begun {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the reload never began"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The reload takes 1.8 s here: kill in its middle.
        std::thread::sleep(Duration::from_millis(700));
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    let killed = std::os::unix::process::ExitStatusExt::signal(&status) == Some(9);
    if !killed {
        let mut out = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
        return Err(format!("the apply was not killed ({status}):\n{out}"));
    }
    // Pasted exactly as printed, into a shell whose PATH has this partop; the confirmation is
    // typed as an operator would (the host name).
    let cmd = e.printed_resume();
    let o = paste(&e, &cmd);
    if o.code != 0 {
        return Err(format!(
            "`{cmd}` exited {}:\n{}{}",
            o.code, o.stdout, o.stderr
        ));
    }
    let want = (mv.2.to_string(), mv.3.to_string(), p.after.len());
    if e.modes() != want {
        return Err(format!(
            "ends in {:?}, not {want:?}:\n{}",
            e.modes(),
            o.stdout
        ));
    }
    let st = e.state();
    let small = st
        .workloads
        .iter()
        .position(|w| w.spec.name == "small")
        .unwrap();
    if !st.alive(small) {
        return Err(format!("the model is not running:\n{}", o.stdout));
    }
    // One server of the model on this node (it shows itself as vLLM does, on its own port),
    // never a second one started on resume.
    let port = format!("--port {} ", st.workloads[small].port);
    let servers = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|d| {
            std::fs::read_to_string(d.path().join("cmdline")).is_ok_and(|c| {
                let c = c.replace('\0', " ");
                c.contains("serve org/small ") && (c.contains(&port) || c.ends_with(port.trim()))
            })
        })
        .count();
    if servers != 1 {
        return Err(format!("{servers} servers of the model run, not one"));
    }
    let runs = partop::exec::journal::runs(&e.journal());
    let r = runs
        .iter()
        .rev()
        .find(|r| r.fingerprint == p.fingerprint)
        .unwrap();
    if r.closed != Some(partop::domain::journal::Close::Done) {
        return Err(format!("the run is {:?}, not done", r.closed));
    }
    Ok(cmd)
}

#[test]
fn an_apply_killed_anywhere_resumes_with_the_printed_command() {
    // Every kill point of every move: after each step's first journal entry (before it acts),
    // after it acted (before its result is journaled), after its result; and inside the reload.
    let mut jobs: Vec<(Move, Kill)> = Vec::new();
    for mv in MOVES {
        let e = SimEnv::new(&scenario(mv.0, mv.1, 0.01));
        let (_, p) = plan(&e, (mv.2, mv.3));
        drop(e);
        for k in 1..=p.steps.len() {
            for when in ["begin", "acted", "end"] {
                // After the last step's result the run is done: nothing to resume.
                if k == p.steps.len() && when == "end" {
                    continue;
                }
                jobs.push((mv, Kill::At(format!("{when}:{k}"))));
            }
        }
        jobs.push((mv, Kill::InsideReload));
    }
    let n = jobs.len();
    let jobs = Arc::new(Mutex::new(jobs));
    let failed: Arc<Mutex<Vec<String>>> = Arc::default();
    let sample: Arc<Mutex<Option<String>>> = Arc::default();
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let (jobs, failed, sample) = (jobs.clone(), failed.clone(), sample.clone());
            std::thread::spawn(move || {
                loop {
                    let Some((mv, kill)) = jobs.lock().unwrap().pop() else {
                        return;
                    };
                    match one(mv, &kill) {
                        Ok(cmd) => {
                            sample.lock().unwrap().get_or_insert(cmd);
                        }
                        Err(e) => failed.lock().unwrap().push(format!(
                            "{}/{} -> {}/{} killed {kill:?}: {e}",
                            mv.0, mv.1, mv.2, mv.3
                        )),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let failed = failed.lock().unwrap();
    assert!(
        failed.is_empty(),
        "{} of {n} failed:\n{}",
        failed.len(),
        failed.join("\n\n")
    );
    let cmd = sample.lock().unwrap().clone().unwrap();
    // The printed command carries every option the run used.
    for opt in ["--sim-state", "--journal", "--resume", "apply"] {
        assert!(cmd.contains(opt), "{cmd}");
    }
    eprintln!(
        "resume: {n} interruptions of {} moves resumed; e.g. `{cmd}`",
        MOVES.len()
    );
}

/// Pastes the resume command as printed, with the host name typed; returns its output.
fn paste(e: &SimEnv, cmd: &str) -> common::Out {
    run(
        &mut e.pasted(cmd),
        &format!("{}\n", partop::collect::host::hostname()),
    )
}

fn servers_of(port: u16) -> usize {
    let port = format!("--port {port}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|d| {
            std::fs::read_to_string(d.path().join("cmdline")).is_ok_and(|c| {
                let c = c.replace('\0', " ");
                c.contains("serve org/small ") && c.trim_end().contains(&port)
            })
        })
        .count()
}

/// Killed while the model it relaunched is still loading its weights: the resume waits for
/// that server instead of starting a second one on the same port and GPU (issue 28).
#[test]
fn a_resume_while_a_relaunched_model_loads_waits_for_it() {
    // Real speed for the model's load (a second), a short reload.
    let e = SimEnv::new(&format!(
        "name = \"rl\"\ndescription = \"resume\"\nproduct = \"mi300x\"\ncompute = \"SPX\"\nmemory = \"NPS1\"\nrocm = \"7.0.2\"\nseed = 5\nreload_secs = 0.3\n{MODELS}"
    ));
    let (mut path, mut p) = plan(&e, ("DPX", "NPS2"));
    common::wait_until("the model to hold its GPU", || {
        (path, p) = plan(&e, ("DPX", "NPS2"));
        p.stops.len() == 2 && p.stops.iter().all(|s| !s.gpus.is_empty())
    });
    let mut child = e.spawn_apply(&path, "--yes --grace 3");
    let t0 = Instant::now();
    loop {
        let launched = e
            .journal()
            .iter()
            .any(|x| x.action == "model.start.result" && x.outcome["ok"] == true);
        if launched {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no relaunch began");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let cmd = e.printed_resume();
    let o = paste(&e, &cmd);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout
            .contains("still loading: waiting for it, not starting another"),
        "{}",
        o.stdout
    );
    let st = e.state();
    let small = st
        .workloads
        .iter()
        .position(|w| w.spec.name == "small")
        .unwrap();
    assert_eq!(
        servers_of(st.workloads[small].port),
        1,
        "one server, never two"
    );
    assert_eq!(e.modes(), ("DPX".into(), "NPS2".into(), 16));
}

/// A tmpfs of `size` for the journal, unmounted when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn new(dir: &std::path::Path, size: &str) -> Self {
        let at = dir.join("jfs");
        std::fs::create_dir_all(&at).unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .output()
            .expect("mount runs");
        assert!(
            o.status.success(),
            "this test fills a small tmpfs and needs root to mount it: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Self(at)
    }

    fn fill(&self) {
        let mut f = std::fs::File::create(self.0.join("fill")).unwrap();
        let block = vec![0u8; 4096];
        while std::io::Write::write_all(&mut f, &block).is_ok() {}
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("fill")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The journal's disk fills while the driver reloads: the apply stops saying the node WAS
/// changed (never "nothing was done"), and once space is free the printed resume finishes.
#[test]
fn a_journal_disk_full_after_the_reload_says_the_node_changed_and_resumes() {
    let e = SimEnv::new(&format!(
        "name = \"jf\"\ndescription = \"resume\"\nproduct = \"mi300x\"\ncompute = \"DPX\"\nmemory = \"NPS2\"\nrocm = \"7.0.2\"\nseed = 5\nreload_secs = 2\ntime_scale = 1\n{MODELS}"
    ));
    let disk = SmallDisk::new(e.node.dir.path(), "2m");
    let journal = disk.0.join("journal.jsonl");
    let path = e.node.dir.path().join("p.json");
    common::wait_until("the model to hold its GPU", || {
        let o = run(
            e.cmd().arg("--journal").arg(&journal).args([
                "plan",
                "--compute",
                "SPX",
                "--memory",
                "NPS1",
                "--json",
            ]),
            "",
        );
        std::fs::write(&path, &o.stdout).unwrap();
        let p: Plan = serde_json::from_str(&o.stdout).unwrap();
        p.stops.len() == 2 && p.stops.iter().all(|s| !s.gpus.is_empty())
    });
    let p: Plan = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let reload = p.steps.iter().position(|s| s.key == "reload").unwrap();
    let child = e
        .cmd()
        .arg("--journal")
        .arg(&journal)
        .arg("apply")
        .arg(&path)
        .args(["--yes", "--grace", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let (entries, _) = partop::exec::journal::read(&journal).unwrap();
        if entries.iter().any(|x| {
            x.action == "repartition.step"
                && x.targets["step"] == reload
                && x.outcome["state"] == "begin"
        }) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the reload never began"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    disk.fill();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("The node WAS changed by this step"), "{out}");
    assert!(!out.contains("Nothing was done"), "{out}");
    assert_eq!(e.modes().1, "NPS1", "the reload ran");
    disk.free();
    let text = run(e.cmd().arg("--journal").arg(&journal).arg("journal"), "");
    let all = format!("{}{}", text.stdout, text.stderr);
    let at = all.find("Continue it with `").expect("a resume command") + "Continue it with `".len();
    let cmd = all[at..at + all[at..].find('`').unwrap()].to_string();
    assert!(cmd.contains(&journal.display().to_string()), "{cmd}");
    let r = paste(&e, &cmd);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
}

/// A GPU set back by hand after the run's own `set_compute` step finished (DPX/NPS2 -> DPX/NPS1,
/// killed after that step, then `amd-smi set -g 0 -C SPX`): the node is in a state the run passed
/// through earlier (the reload's default), but no longer at this point. The resume is refused,
/// naming the GPU, what the run set and how to set it back (it was accepted, and every resume
/// then failed on the count); set back, the printed resume finishes the run.
#[test]
fn a_gpu_changed_by_hand_after_the_run_set_it_is_refused_then_resumes_once_set_back() {
    let mv: Move = ("DPX", "NPS2", "DPX", "NPS1");
    let e = SimEnv::new(&scenario(mv.0, mv.1, 0.01));
    let (mut path, mut p) = plan(&e, (mv.2, mv.3));
    common::wait_until("the model to hold its GPU", || {
        (path, p) = plan(&e, (mv.2, mv.3));
        p.stops.len() == 2 && p.stops.iter().all(|s| !s.gpus.is_empty())
    });
    let set = p
        .steps
        .iter()
        .position(|s| s.key == "set_compute")
        .expect("the plan sets compute modes after the reload");
    let status = e
        .cmd()
        .arg("apply")
        .arg(&path)
        .args(["--yes", "--grace", "3"])
        .env(partop::exec::apply::CRASH_ENV, format!("end:{}", set + 1))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the apply was not killed after step {}",
        set + 1
    );
    let o = e.node.amd("set -g 0 -C SPX", "y\n");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let bdf = p.steps[set].bdfs[0].clone();
    let cmd = e.printed_resume();
    let refused = paste(&e, &cmd);
    let said = format!("{}{}", refused.stdout, refused.stderr);
    assert_ne!(refused.code, 0, "{said}");
    assert!(
        said.contains(&bdf)
            && said.contains("already set it to DPX/NPS1")
            && said.contains("-C DPX")
            && said.contains("nothing was changed"),
        "{said}"
    );
    let o = e.node.amd("set -g 0 -C DPX", "y\n");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let done = paste(&e, &cmd);
    assert_eq!(done.code, 0, "{}{}", done.stdout, done.stderr);
    assert_eq!(
        e.modes(),
        ("DPX".to_string(), "NPS1".to_string(), p.after.len())
    );
}
