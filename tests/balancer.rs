//! The load balancer as a step (issue 29), with a REAL nginx (the distribution's package,
//! `scripts/test` installs it) started by each test on 127.0.0.1 with its own prefix and
//! config in a temp dir, in front of a replica set on the simulated guide node: the upstream
//! follows the set through SPX -> DPX -> SPX and requests through nginx reach every member; an
//! apply killed between "replicas started" and "balancer reloaded" resumes to the right
//! upstream; a reload that fails stops the plan with the old upstream back.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::env::SimEnv;
use common::{guide_node, run};
use partop::domain::plan::Plan;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const NGINX: &str = "/usr/sbin/nginx";

/// An nginx of the test's own: prefix, config, pid and logs in a temp dir, listening on a free
/// loopback port, proxying to the upstream file partop writes. Stopped when dropped.
struct Nginx {
    dir: tempfile::TempDir,
    port: u16,
}

impl Nginx {
    fn start(first_ports: &[u16]) -> Self {
        assert!(
            Path::new(NGINX).exists(),
            "{NGINX} is missing: install nginx-light (scripts/test does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.path().display().to_string();
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
        let conf = format!(
            "daemon on;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/tmp/body;\n  proxy_temp_path {d}/tmp/proxy;\n  fastcgi_temp_path {d}/tmp/fcgi;\n  uwsgi_temp_path {d}/tmp/uwsgi;\n  scgi_temp_path {d}/tmp/scgi;\n  include {d}/upstream.conf;\n  server {{\n    listen 127.0.0.1:{port};\n    location / {{ proxy_pass http://mistral-12b; proxy_next_upstream error timeout http_502 http_503; }}\n  }}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        // The operator's upstream before partop manages it: the 8 servers of SPX.
        let servers: String = first_ports
            .iter()
            .map(|p| format!("    server 127.0.0.1:{p};\n"))
            .collect();
        std::fs::write(
            dir.path().join("upstream.conf"),
            format!("upstream mistral-12b {{\n{servers}}}\n"),
        )
        .unwrap();
        let n = Self { dir, port };
        let o = run(Command::new(NGINX).args(n.args()), "");
        assert_eq!(o.code, 0, "nginx did not start: {}{}", o.stdout, o.stderr);
        n
    }

    fn args(&self) -> Vec<String> {
        vec![
            "-p".into(),
            self.dir.path().display().to_string(),
            "-c".into(),
            self.conf().display().to_string(),
        ]
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("nginx.conf")
    }

    fn upstream(&self) -> PathBuf {
        self.dir.path().join("upstream.conf")
    }

    /// The `[[balancer]]` entry: test the config, then reload (what an operator runs).
    fn entry(&self, extra: &str) -> String {
        let a = self.args().join(" ");
        format!(
            "\n[[balancer]]\nset = \"mistral-12b\"\nupstream = {:?}\nreload = [\"sh\", \"-c\", \"{NGINX} -t -q -e stderr {a} && {NGINX} {a} -s reload\"]\nverify = \"http://127.0.0.1:{}/v1/completions\"\n{extra}",
            self.upstream().display().to_string(),
            self.port
        )
    }

    /// Which member answers each of `n` requests through nginx.
    fn reached(&self, n: usize) -> Vec<String> {
        (0..n)
            .filter_map(|_| {
                let r = partop::collect::served::http::get(
                    &format!("http://127.0.0.1:{}/v1/completions", self.port),
                    std::time::Duration::from_secs(3),
                )
                .ok()?;
                let v: serde_json::Value = serde_json::from_str(&r.body).ok()?;
                v["served_by"].as_str().map(str::to_string)
            })
            .collect()
    }

    fn servers_in_upstream(&self) -> (usize, usize) {
        let t = std::fs::read_to_string(self.upstream()).unwrap();
        let up = t
            .lines()
            .filter(|l| l.trim_start().starts_with("server ") && !l.contains(" down;"))
            .count();
        let down = t.lines().filter(|l| l.contains(" down;")).count();
        (up, down)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new(NGINX)
            .args(self.args())
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn member_ports(e: &SimEnv) -> Vec<u16> {
    let st = e.state();
    let mut p: Vec<(u32, u16)> = st
        .workloads
        .iter()
        .filter_map(|w| {
            let (_, k) = w.spec.name.rsplit_once('#')?;
            Some((k.parse().ok()?, w.port))
        })
        .collect();
    p.sort_unstable();
    p.into_iter().map(|(_, port)| port).collect()
}

fn with_balancer(e: &SimEnv, nginx: &Nginx, extra: &str) {
    let reg = e.node.state.with_extension("models.toml");
    let mut text = std::fs::read_to_string(&reg).unwrap();
    text.push_str(&nginx.entry(extra));
    std::fs::write(&reg, text).unwrap();
}

fn plan_of(e: &SimEnv, args: &str) -> (PathBuf, Plan) {
    let mut p = e.plan(args, "p.json");
    common::wait_until("the members to hold their GPUs", || {
        p = e.plan(args, "p.json");
        let plan: Plan = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        !plan.stops.is_empty() && plan.stops.iter().all(|s| !s.gpus.is_empty())
    });
    let plan = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    (p, plan)
}

/// The members requests through nginx reach, asked until every one of `want` has answered (at
/// most 20 s): a member that answers 503 once under load is skipped by nginx for its
/// fail_timeout, so one round of requests may miss it; a member that is down never answers and
/// the set stays short.
fn reached_all(nginx: &Nginx, want: &BTreeSet<String>) -> BTreeSet<String> {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut got = BTreeSet::new();
    while std::time::Instant::now() < end {
        got.extend(nginx.reached(2 * want.len()));
        if got.is_superset(want) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    got
}

fn members(n: u32) -> BTreeSet<String> {
    (1..=n).map(|k| format!("mistral-12b#{k}")).collect()
}

#[test]
fn the_upstream_follows_the_set_and_requests_reach_every_member() {
    let e = SimEnv::new(&guide_node());
    let nginx = Nginx::start(&member_ports(&e));
    with_balancer(&e, &nginx, "");
    assert_eq!(
        reached_all(&nginx, &members(8)),
        members(8),
        "before the change"
    );

    let (p, plan) = plan_of(&e, "--compute DPX --memory NPS2");
    assert_eq!(plan.balancers.len(), 1);
    let b = &plan.balancers[0];
    let up = |v: &[partop::domain::balancer::Server]| v.iter().filter(|s| s.up).count();
    assert_eq!((up(&b.before), up(&b.during), up(&b.after)), (8, 0, 16));
    let keys: Vec<&str> = plan.steps.iter().map(|s| s.key.as_str()).collect();
    let at = |k: &str| keys.iter().position(|x| *x == k).unwrap();
    assert!(at("balancer_drain") + 1 == at("stop"), "{keys:?}");
    assert!(at("balancer_join") == at("relaunch") + 1, "{keys:?}");
    let o = e.apply(&p, "--yes --grace 3", "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(nginx.servers_in_upstream(), (16, 0));
    // nginx round-robins: 64 requests reach all 16 members.
    assert_eq!(
        reached_all(&nginx, &members(16)),
        members(16),
        "after SPX -> DPX"
    );

    let (p, plan) = plan_of(&e, "--compute SPX --memory NPS1");
    let b = &plan.balancers[0];
    assert_eq!((up(&b.before), up(&b.during), up(&b.after)), (16, 0, 8));
    let o = e.apply(&p, "--yes --grace 3", "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(nginx.servers_in_upstream(), (8, 0));
    assert_eq!(
        reached_all(&nginx, &members(8)),
        members(8),
        "after DPX -> SPX"
    );
}

/// SIGKILL after the relaunch's result is journaled and before the balancer step acts (the
/// replicas started, the balancer not reloaded): the printed resume finishes with the
/// upstream of 16.
#[test]
fn a_resume_after_a_kill_between_relaunch_and_reload_writes_the_right_upstream() {
    let e = SimEnv::new(&guide_node());
    let nginx = Nginx::start(&member_ports(&e));
    with_balancer(&e, &nginx, "");
    let (p, plan) = plan_of(&e, "--compute DPX --memory NPS2");
    let join = plan
        .steps
        .iter()
        .position(|s| s.key == "balancer_join")
        .unwrap();
    let mut c = e.cmd();
    c.arg("apply")
        .arg(&p)
        .args(["--yes", "--grace", "3"])
        .env(
            partop::exec::apply::CRASH_ENV,
            format!("begin:{}", join + 1),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let status = c.status().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the apply was not killed"
    );
    // Killed there: 16 members run, the upstream is still the drained one.
    assert_eq!(nginx.servers_in_upstream(), (0, 8));
    let o = run(e.cmd().arg("journal"), "");
    let text = format!("{}{}", o.stdout, o.stderr);
    let at = text.find("Continue it with `").expect("a resume command") + 18;
    let cmd = &text[at..at + text[at..].find('`').unwrap()];
    let bin = Path::new(env!("CARGO_BIN_EXE_partop")).parent().unwrap();
    let o = run(
        Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .env("XDG_STATE_HOME", e.xdg())
            .env("XDG_CONFIG_HOME", e.xdg())
            .env_remove("PARTOP_SIM_STATE"),
        &format!("{}\n", partop::collect::host::hostname()),
    );
    assert_eq!(o.code, 0, "{cmd}: {}{}", o.stdout, o.stderr);
    assert_eq!(nginx.servers_in_upstream(), (16, 0));
    assert_eq!(reached_all(&nginx, &members(16)), members(16));
}

/// A reload that fails (its config test refuses the drained upstream: a bad `line_down`): the
/// plan stops at the drain, before anything is stopped; the old upstream is back and served;
/// the journal says so.
#[test]
fn a_failing_reload_stops_the_plan_with_the_old_upstream_back() {
    let e = SimEnv::new(&guide_node());
    let nginx = Nginx::start(&member_ports(&e));
    let before = std::fs::read_to_string(nginx.upstream()).unwrap();
    with_balancer(
        &e,
        &nginx,
        "line_down = \"    server 127.0.0.1:{port} not-a-parameter;\\n\"\n",
    );
    let (p, _) = plan_of(&e, "--compute DPX --memory NPS2");
    let o = e.apply(&p, "--yes --grace 3", "");
    assert_ne!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let all = format!("{}{}", o.stdout, o.stderr);
    assert!(all.contains("the old upstream is back"), "{all}");
    assert_eq!(std::fs::read_to_string(nginx.upstream()).unwrap(), before);
    assert_eq!(
        e.modes(),
        ("SPX".into(), "NPS1".into(), 8),
        "nothing changed"
    );
    assert_eq!(reached_all(&nginx, &members(8)), members(8), "still served");
    let journal = std::fs::read_to_string(e.journal_path()).unwrap();
    assert!(
        journal.contains("balancer_drain") && journal.contains("the old upstream is back"),
        "{journal}"
    );
}

/// Requests through nginx, one every 50 ms from a thread until `stop`: (sent, failed, the
/// members that answered).
fn load(
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(u32, u32, BTreeSet<String>)> {
    std::thread::spawn(move || {
        let (mut sent, mut failed, mut by) = (0, 0, BTreeSet::new());
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            sent += 1;
            match partop::collect::served::http::get(
                &format!("http://127.0.0.1:{port}/v1/completions"),
                std::time::Duration::from_secs(3),
            ) {
                Ok(r) if r.status == 200 => {
                    if let Some(m) = serde_json::from_str::<serde_json::Value>(&r.body)
                        .ok()
                        .and_then(|v| v["served_by"].as_str().map(str::to_string))
                    {
                        by.insert(m);
                    }
                }
                _ => failed += 1,
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        (sent, failed, by)
    })
}

/// The BDFs of the node's physical GPUs, in order.
fn gpu_bdfs(e: &SimEnv) -> Vec<String> {
    let o = run(e.cmd().args(["snapshot", "--json"]), "");
    let s: partop::domain::Snapshot = serde_json::from_str(&o.stdout).unwrap();
    s.gpus.iter().map(|g| g.bdf.clone()).collect()
}

/// Only the moved members leave the upstream: a change of part of the node (two of the eight
/// GPUs to DPX, then one of those back to SPX: the set grows, then shrinks) drains only the
/// members on the GPUs it changes; the others stay in service throughout, so requests through
/// nginx keep succeeding (0 failed) while it runs, and the untouched members keep answering.
#[test]
fn only_the_moved_members_leave_the_upstream_and_requests_keep_succeeding() {
    let e = SimEnv::new(&guide_node());
    let nginx = Nginx::start(&member_ports(&e));
    with_balancer(&e, &nginx, "");
    assert_eq!(reached_all(&nginx, &members(8)), members(8));
    let bdfs = gpu_bdfs(&e);
    let up_names = |v: &[partop::domain::balancer::Server]| -> BTreeSet<String> {
        v.iter().filter(|s| s.up).map(|s| s.name.clone()).collect()
    };
    let mut cases = 0;
    // (plan arguments, members that stay in service during it, members after it)
    let steps: [(String, &[u32], u32); 2] = [
        (
            format!("--gpu {} {} --compute DPX", bdfs[0], bdfs[1]),
            &[3, 4, 5, 6, 7, 8],
            10,
        ),
        (format!("--gpu {} --compute SPX", bdfs[1]), &[], 9),
    ];
    for (args, stay, after) in steps {
        let (p, plan) = plan_of(&e, &args);
        let b = &plan.balancers[0];
        let before = up_names(&b.before);
        let during = up_names(&b.during);
        // The members on the GPUs the change leaves alone: in service during it.
        let moved: BTreeSet<String> = plan
            .stops
            .iter()
            .filter_map(|s| s.model.clone())
            .filter(|n| n.starts_with("mistral-12b#"))
            .collect();
        assert!(!moved.is_empty(), "{args}: {plan:?}");
        let untouched: BTreeSet<String> = before.difference(&moved).cloned().collect();
        assert_eq!(during, untouched, "{args}: only the moved members leave");
        if !stay.is_empty() {
            let want: BTreeSet<String> = stay.iter().map(|k| format!("mistral-12b#{k}")).collect();
            assert_eq!(during, want, "{args}");
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let client = load(nginx.port, std::sync::Arc::clone(&stop));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let o = e.apply(&p, "--yes --grace 3", "");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (sent, failed, by) = client.join().unwrap();
        assert_eq!(o.code, 0, "{args}: {}{}", o.stdout, o.stderr);
        assert!(sent > 10, "{args}: {sent} requests sent");
        assert_eq!(
            failed, 0,
            "{args}: {failed} of {sent} requests through nginx failed"
        );
        assert!(
            by.is_superset(&untouched),
            "{args}: the untouched members served throughout: {by:?}"
        );
        assert_eq!(nginx.servers_in_upstream(), (after as usize, 0), "{args}");
        assert_eq!(
            reached_all(&nginx, &members(after)).len(),
            after as usize,
            "{args}"
        );
        cases += 1;
    }
    assert_eq!(cases, 2, "a growing and a shrinking partial change");
}
