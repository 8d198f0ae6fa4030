//! The whole MIG transition space on the simulated NVIDIA node (issue 23, item 4):
//! - every valid layout of every product partop has a table for (A100 40/80 GB, H100 80 GB,
//!   H200), MIG off among them, to every other one: planned, applied by the executor against
//!   the simulated nvidia-smi (its placement rules included), read back; the end is exactly the
//!   target's profiles at the planned starts, and the other GPU of the node is untouched;
//! - verify checks profiles, never a count: every layout with one instance swapped for another
//!   profile of the same count is refused;
//! - `partop mig apply`, the real binary, SIGKILLed before and after every nvidia-smi call of
//!   representative transitions (every step boundary, and between the instances of a create),
//!   then the resume command it printed, run as printed, finishes with the exact target.
//!
//! The space is driven in process (the executor's nvidia-smi is the simulator's `main` called
//! directly, the code `partop sim nvidia-smi` runs), so its 65,024 transitions fit in CI's time.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::{partop, run};
use partop::collect::nvidia::smi::{self, RunSmi};
use partop::domain::Snapshot;
use partop::domain::mig::{
    KNOWN_PRODUCTS, MigDraft, MigPlan, MigProfile, layouts, place, plan, table_profiles,
};
use partop::exec::mig::{MigCtx, apply};
use partop::exec::runlog::RunLog;
use partop::sim::nvidia::{NvSimInstance, NvSimState};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The simulated nvidia-smi, called in process.
#[derive(Debug)]
struct InProcess(PathBuf);

impl RunSmi for InProcess {
    fn call(&self, args: &[&str]) -> Result<(i32, String, String), String> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
        Ok(partop::sim::nvidia::main(&self.0, &args))
    }
}

/// A scratch directory, in memory where the machine has one (the journal is fsynced per entry).
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

fn names(profiles: &[MigProfile], ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|id| profiles.iter().find(|p| p.id == *id).unwrap().name.clone())
        .collect()
}

/// GPU `gpu` of `s` set to `layout` (profile ids; empty: MIG off), at the starts the placement
/// rules give.
fn set_layout(s: &mut NvSimState, gpu: usize, profiles: &[MigProfile], layout: &[u32]) {
    let g = &mut s.gpus[gpu];
    g.mig = !layout.is_empty();
    g.mig_pending = g.mig;
    g.procs.clear();
    g.instances = place(profiles, layout, &[])
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(k, (profile, start))| NvSimInstance {
            gi: u32::try_from(k).unwrap() + 1,
            profile,
            ci: Some(0),
            start,
        })
        .collect();
}

/// The node as partop reads it through nvidia-smi (`-q -x`, parsed and assembled).
fn snapshot(smi: &InProcess) -> Snapshot {
    let (code, out, err) = smi.call(&["-q", "-x"]).unwrap();
    assert_eq!(code, 0, "{err}");
    let node = smi::parse(&out).unwrap();
    let (gpus, processes) = partop::collect::nvidia::assemble(&node, 0);
    Snapshot {
        host: "mig-space".into(),
        gpus,
        processes,
        ..Snapshot::default()
    }
}

fn ctx(smi: &Arc<InProcess>, journal: &Path) -> MigCtx {
    MigCtx {
        smi: smi.clone(),
        resume: "partop mig apply PLAN --resume".into(),
        journal: journal.to_path_buf(),
        grace: Duration::from_secs(1),
        kill_after_grace: false,
        proc_root: "/proc".into(),
        simulated: true,
    }
}

fn log(journal: &Path, p: &MigPlan) -> RunLog {
    RunLog {
        path: journal.to_path_buf(),
        kind: "mig",
        run: "space".into(),
        fingerprint: p.fingerprint.clone(),
        simulated: true,
        node: "mig-space".into(),
    }
}

/// The profile ids and starts of GPU `gpu`, sorted.
fn placed(s: &NvSimState, gpu: usize) -> Vec<(u32, u32)> {
    let mut v: Vec<(u32, u32)> = s.gpus[gpu]
        .instances
        .iter()
        .map(|x| (x.profile, x.start))
        .collect();
    v.sort_unstable();
    v
}

/// Every valid layout to every other, on every product: 128 states each (MIG off and the 127
/// layouts the placement rules allow), 16,256 transitions a product.
fn every_transition_of(product: &str) -> usize {
    let dir = scratch();
    let state = dir.path().join("nv.json");
    let journal = dir.path().join("journal.jsonl");
    let profiles = table_profiles(product).unwrap();
    let all = layouts(&profiles);
    assert_eq!(all.len(), 128, "{product}: MIG off and 127 layouts");
    let smi = Arc::new(InProcess(state.clone()));
    // GPU 1 holds a layout of its own the whole time: nothing outside the plan changes.
    let mut base = NvSimState::new(product, 2);
    set_layout(&mut base, 1, &profiles, &[9, 14, 19, 19]);
    let other = base.gpus[1].clone();
    let mut cases = 0;
    for from in &all {
        for to in &all {
            if from == to {
                continue;
            }
            let mut s = base.clone();
            set_layout(&mut s, 0, &profiles, from);
            s.save(&state).unwrap();
            let _ = std::fs::remove_file(&journal);
            let want = names(&profiles, to);
            let draft = MigDraft {
                gpu: 0,
                instances: want.clone(),
            };
            let p = plan(&snapshot(&smi), &draft, "nvidia-smi")
                .unwrap_or_else(|e| panic!("{product}: {from:?} -> {to:?} does not plan: {e:?}"));
            let l = log(&journal, &p);
            l.start(&serde_json::to_value(&p).unwrap(), None, p.steps.len())
                .unwrap();
            apply(&p, &ctx(&smi, &journal), &l, 0, |_, _, _| {})
                .unwrap_or_else(|e| panic!("{product}: {from:?} -> {to:?}: {e}"));
            // The journal tells the story: the plan, each step before and after it, the end.
            let told = std::fs::read_to_string(&journal).unwrap();
            assert_eq!(
                told.lines().count(),
                2 + 2 * p.steps.len(),
                "{product}: {from:?} -> {to:?}"
            );
            assert!(
                told.lines().last().unwrap().contains("\"mig.done\""),
                "{product}: {from:?} -> {to:?}: {told}"
            );
            let after = NvSimState::load(&state).unwrap();
            let g = &after.gpus[0];
            assert_eq!(
                g.mig,
                !to.is_empty(),
                "{product}: {from:?} -> {to:?}: MIG mode"
            );
            let mut planned: Vec<(u32, u32)> =
                p.create.iter().map(|c| (c.profile, c.start)).collect();
            planned.sort_unstable();
            assert_eq!(placed(&after, 0), planned, "{product}: {from:?} -> {to:?}");
            let mut ids: Vec<u32> = planned.iter().map(|x| x.0).collect();
            ids.sort_unstable();
            assert_eq!(
                &ids, to,
                "{product}: {from:?} -> {to:?}: the target's profiles"
            );
            // Read back through the collector, each instance is named as its profile.
            let mut seen = partop::domain::mig::instances_now(&snapshot(&smi).gpus[0]);
            seen.sort();
            let mut want = want;
            want.sort();
            assert_eq!(seen, want, "{product}: {from:?} -> {to:?}: read back");
            assert_eq!(
                after.gpus[1], other,
                "{product}: {from:?} -> {to:?}: GPU 1 changed"
            );
            cases += 1;
        }
    }
    cases
}

#[test]
fn every_layout_to_every_other_on_every_product() {
    let t = std::time::Instant::now();
    // One thread a product (CI has two cores; the products are independent nodes).
    let threads: Vec<_> = KNOWN_PRODUCTS
        .iter()
        .map(|p| std::thread::spawn(move || (p, every_transition_of(p))))
        .collect();
    let mut total = 0;
    for th in threads {
        let (p, n) = th.join().unwrap();
        assert_eq!(n, 128 * 127, "{p}");
        eprintln!("{p}: {n} transitions applied and read back");
        total += n;
    }
    eprintln!(
        "{total} MIG transitions on {} products in {:.1} s",
        KNOWN_PRODUCTS.len(),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(total, 4 * 128 * 127);
}

#[test]
fn verify_refuses_a_layout_with_the_right_count_and_a_wrong_profile() {
    // For every layout of every product and every instance of it, the GPU is given the same
    // layout with that one instance another profile (one that places), and verify alone runs:
    // it must fail, naming the profiles. The case (2g.35gb read as 1g.35gb, same
    // memory) is among them.
    let mut cases = 0;
    for product in KNOWN_PRODUCTS {
        let dir = scratch();
        let state = dir.path().join("nv.json");
        let journal = dir.path().join("journal.jsonl");
        let profiles = table_profiles(product).unwrap();
        let smi = Arc::new(InProcess(state.clone()));
        for to in layouts(&profiles).iter().filter(|l| !l.is_empty()) {
            let mut s = NvSimState::new(product, 1);
            s.save(&state).unwrap();
            let draft = MigDraft {
                gpu: 0,
                instances: names(&profiles, to),
            };
            let p = plan(&snapshot(&smi), &draft, "nvidia-smi").unwrap();
            let verify = p.steps.iter().position(|x| x.key == "verify").unwrap();
            for k in 0..to.len() {
                for other in profiles.iter().filter(|q| q.id != to[k]) {
                    let mut wrong = to.clone();
                    wrong[k] = other.id;
                    if place(&profiles, &wrong, &[]).is_none() {
                        continue;
                    }
                    set_layout(&mut s, 0, &profiles, &wrong);
                    s.save(&state).unwrap();
                    let _ = std::fs::remove_file(&journal);
                    let e = apply(
                        &p,
                        &ctx(&smi, &journal),
                        &log(&journal, &p),
                        verify,
                        |_, _, _| {},
                    )
                    .expect_err(&format!("{product}: {wrong:?} passed verify for {to:?}"));
                    assert!(
                        e.message.contains("the plan made"),
                        "{product}: {wrong:?} for {to:?}: {}",
                        e.message
                    );
                    cases += 1;
                }
            }
        }
    }
    eprintln!("{cases} same-count wrong layouts refused by verify");
    assert!(cases > 1000, "{cases}");
}

/// A simulated H200 node behind an nvidia-smi script that SIGKILLs the `partop` calling it
/// before (`KILL_BEFORE=n`) or after (`KILL_AFTER=n`) its n-th call.
struct Killable {
    dir: tempfile::TempDir,
    state: PathBuf,
    smi: PathBuf,
}

impl Killable {
    fn new(from: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("nv.json");
        let mut s = NvSimState::new("NVIDIA H200", 1);
        let profiles = table_profiles("NVIDIA H200").unwrap();
        let ids: Vec<u32> = partop::domain::mig::parse_instances(from)
            .unwrap()
            .iter()
            .map(|n| profiles.iter().find(|p| &p.name == n).unwrap().id)
            .collect();
        set_layout(&mut s, 0, &profiles, &ids);
        s.save(&state).unwrap();
        let smi = dir.path().join("nvidia-smi");
        let count = dir.path().join("calls");
        std::fs::write(
            &smi,
            format!(
                "#!/bin/sh\nn=$(($(cat {c} 2>/dev/null || echo 0) + 1)); echo $n > {c}\n\
                 if [ \"$n\" = \"${{KILL_BEFORE:-}}\" ]; then kill -9 $PPID; exit 9; fi\n\
                 {bin} sim nvidia-smi --state {st} \"$@\"; rc=$?\n\
                 if [ \"$n\" = \"${{KILL_AFTER:-}}\" ]; then kill -9 $PPID; fi\nexit $rc\n",
                c = count.display(),
                bin = env!("CARGO_BIN_EXE_partop"),
                st = state.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { dir, state, smi }
    }

    fn partop(&self) -> std::process::Command {
        let mut c = partop();
        c.env("XDG_STATE_HOME", self.dir.path().join("xdg"))
            .env("PARTOP_LOCK", self.dir.path().join("node.lock"))
            .env_remove("KILL_BEFORE")
            .env_remove("KILL_AFTER")
            .args(["--source", "nvidia", "--nvidia-smi"])
            .arg(&self.smi);
        c
    }

    fn calls(&self) -> u32 {
        std::fs::read_to_string(self.dir.path().join("calls"))
            .map_or(0, |t| t.trim().parse().unwrap_or(0))
    }

    fn layout(&self) -> (bool, Vec<u32>) {
        let s = NvSimState::load(&self.state).unwrap();
        let mut ids: Vec<u32> = s.gpus[0].instances.iter().map(|x| x.profile).collect();
        ids.sort_unstable();
        (s.gpus[0].mig, ids)
    }
}

/// `from` → `to` (`none`: MIG off) killed at every nvidia-smi call, before and after it, then
/// resumed with the command partop printed; returns how many interruptions ran.
fn interrupted_everywhere(from: &str, to: &str, with_holder: bool) -> u32 {
    let host = partop::collect::host::hostname();
    let profiles = table_profiles("NVIDIA H200").unwrap();
    let want: Vec<u32> = {
        let mut v: Vec<u32> = if to == "none" {
            vec![]
        } else {
            partop::domain::mig::parse_instances(to)
                .unwrap()
                .iter()
                .map(|n| profiles.iter().find(|p| &p.name == n).unwrap().id)
                .collect()
        };
        v.sort_unstable();
        v
    };
    // An uninterrupted apply counts the calls a run makes.
    let calls = {
        let k = Killable::new(from);
        let plan = k.dir.path().join("plan.json");
        let o = run(
            k.partop()
                .args(["mig", "plan", "--instances", to, "--json"]),
            "",
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        std::fs::write(&plan, &o.stdout).unwrap();
        let before = k.calls();
        let o = run(
            k.partop().args(["mig", "apply"]).arg(&plan).arg("--yes"),
            "",
        );
        assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
        assert_eq!(k.layout(), (to != "none", want.clone()));
        k.calls() - before
    };
    let start = Killable::new(from).layout();
    let mut runs = 0;
    for n in 1..=calls {
        for when in ["KILL_BEFORE", "KILL_AFTER"] {
            let k = Killable::new(from);
            let mut holder = with_holder.then(|| {
                let c = std::process::Command::new("sleep")
                    .arg("60")
                    .spawn()
                    .unwrap();
                let o = run(
                    partop()
                        .args(["sim", "nvidia-attach", "--state"])
                        .arg(&k.state)
                        .args(["--pid", &c.id().to_string()]),
                    "",
                );
                assert_eq!(o.code, 0, "{}", o.stderr);
                c
            });
            let plan = k.dir.path().join("plan.json");
            let o = run(
                k.partop()
                    .args(["mig", "plan", "--instances", to, "--json"]),
                "",
            );
            assert_eq!(o.code, 0, "{}", o.stderr);
            std::fs::write(&plan, &o.stdout).unwrap();
            let base = k.calls();
            let killed = run(
                k.partop()
                    .env(when, (base + n).to_string())
                    .args(["mig", "apply"])
                    .arg(&plan)
                    .args(["--yes", "--grace", "2"]),
                "",
            );
            assert_ne!(
                killed.code, 0,
                "{when}={n}: it ran to the end\n{}",
                killed.stdout
            );
            let printed = killed
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix("if this apply is interrupted, continue it with: "));
            let o = match printed {
                // Killed before the run was journaled: nothing was changed, a fresh apply runs.
                None => {
                    assert_eq!(
                        k.layout(),
                        start,
                        "{when}={n}: killed before its start, yet the GPU changed"
                    );
                    run(
                        k.partop().args(["mig", "apply"]).arg(&plan).arg("--yes"),
                        "",
                    )
                }
                // The resume command exactly as printed, confirmed by typing the host name.
                Some(cmd) => {
                    // A fresh apply is refused, pointing to the same command (the journal's).
                    let fresh = run(
                        k.partop().args(["mig", "apply"]).arg(&plan).arg("--yes"),
                        "",
                    );
                    assert!(
                        fresh.code != 0 && fresh.stderr.contains(&format!("`{cmd}`")),
                        "{when}={n}: {}",
                        fresh.stderr
                    );
                    let words: Vec<&str> = cmd.split_whitespace().collect();
                    let mut c = std::process::Command::new(words[0]);
                    c.args(&words[1..])
                        .env("XDG_STATE_HOME", k.dir.path().join("xdg"))
                        .env("PARTOP_LOCK", k.dir.path().join("node.lock"))
                        .env_remove("KILL_BEFORE")
                        .env_remove("KILL_AFTER");
                    run(&mut c, &format!("{host}\n"))
                }
            };
            assert_eq!(
                o.code, 0,
                "{from} -> {to}, {when}={n}: the resume failed\n--- killed run:\n{}\n--- resume:\n{}{}",
                killed.stdout, o.stdout, o.stderr
            );
            assert_eq!(
                k.layout(),
                (to != "none", want.clone()),
                "{from} -> {to}, {when}={n}: not the target\n{}",
                o.stdout
            );
            if let Some(h) = holder.as_mut() {
                let _ = h.kill();
                let _ = h.wait();
            }
            runs += 1;
        }
    }
    if with_holder {
        // Inside the stop step: the holder, on SIGTERM, SIGKILLs the partop holding the node
        // lock (its pid is in the lock file), during the grace wait.
        let k = Killable::new(from);
        let lock = k.dir.path().join("node.lock");
        let mut killer = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "trap 'kill -9 $(sed -n \"s/.*\\\"pid\\\":\\([0-9]*\\).*/\\1/p\" {}); kill $!; exit 0' TERM; sleep 60 & wait",
                lock.display()
            ))
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let o = run(
            partop()
                .args(["sim", "nvidia-attach", "--state"])
                .arg(&k.state)
                .args(["--pid", &killer.id().to_string()]),
            "",
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        let plan = k.dir.path().join("plan.json");
        let o = run(
            k.partop()
                .args(["mig", "plan", "--instances", to, "--json"]),
            "",
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        std::fs::write(&plan, &o.stdout).unwrap();
        let killed = run(
            k.partop()
                .args(["mig", "apply"])
                .arg(&plan)
                .args(["--yes", "--grace", "5"]),
            "",
        );
        let _ = killer.wait();
        assert!(
            killed.code != 0 && killed.stdout.contains("[1/") && !killed.stdout.contains("ok: "),
            "not killed inside the stop step:\n{}",
            killed.stdout
        );
        let cmd = killed
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("if this apply is interrupted, continue it with: "))
            .unwrap();
        let words: Vec<&str> = cmd.split_whitespace().collect();
        let mut c = std::process::Command::new(words[0]);
        c.args(&words[1..])
            .env("XDG_STATE_HOME", k.dir.path().join("xdg"))
            .env("PARTOP_LOCK", &lock);
        let o = run(&mut c, &format!("{host}\n"));
        assert_eq!(
            o.code, 0,
            "resume after a kill inside stop:\n{}{}",
            o.stdout, o.stderr
        );
        assert_eq!(k.layout(), (to != "none", want.clone()));
        runs += 1;
    }
    runs
}

#[test]
fn a_mig_apply_killed_anywhere_resumes_to_the_exact_target() {
    let mut runs = 0;
    for (from, to, holder) in [
        // Enable and create four instances (kills between each create), a process on the GPU.
        ("none", "1g.18gb,3g.71gb,2g.35gb,1g.18gb", true),
        // The relayout: 4g.71gb + 3g.71gb to two 3g.71gb (destroy, create).
        ("4g.71gb,3g.71gb", "2x3g.71gb", false),
        // Seven instances to MIG off (destroy, disable).
        ("7x1g.18gb", "none", false),
        // Same memory, other profile: 1g.35gb x4 to 2g.35gb x3 + 1g.18gb+me.
        ("4x1g.35gb", "3x2g.35gb,1g.18gb+me", false),
    ] {
        let from = if from == "none" { "" } else { from };
        let n = interrupted_everywhere(from, to, holder);
        eprintln!("{from:?} -> {to}: {n} interrupted applies resumed");
        runs += n;
    }
    eprintln!("{runs} interrupted MIG applies resumed to the exact target");
    assert!(runs >= 40, "{runs}");
}
