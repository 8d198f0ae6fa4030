//! `partop serve` for real: the binary on a loopback port against the simulated node, scraped
//! by a real Prometheus (the distribution's, which `scripts/test` installs), its output checked
//! by `promtool`, and its HTTP bounds pushed with raw sockets: bad methods, huge heads, bodies,
//! slow clients, a wrong token, a hung amd-smi, SIGTERM.
#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "tests panic on failure"
)]

mod common;
use common::{partop, wait_until};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port (bound and released; the server binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One raw HTTP/1.1 exchange: status code and body (the server closes after one response).
fn raw(port: u16, request: &[u8]) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = s.write_all(request);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (code, body)
}

fn get(port: u16, path: &str, extra: &str) -> (u16, String) {
    raw(
        port,
        // HTTP/1.0: a whole body, never chunked (Prometheus chunks HTTP/1.1 answers).
        format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n{extra}\r\n").as_bytes(),
    )
}

/// `partop serve` as a child, stopped (SIGTERM) on drop. It listens on a port the kernel picks
/// (`--listen 127.0.0.1:0`), read from its first log line: a port chosen by the test and
/// released before the server binds it can be taken meanwhile by another test running beside.
/// Its stderr is drained as it comes, so a chatty server never blocks on a full pipe.
struct Serve {
    child: Child,
    port: u16,
    home: tempfile::TempDir,
    err: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// The port in `partop serve listening on http://127.0.0.1:PORT`.
fn listening_port(log: &str) -> Option<u16> {
    let rest = log.split("listening on http://127.0.0.1:").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

impl Serve {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_serving(args, &[], env)
    }

    /// `partop ARGS serve --listen 127.0.0.1:0 SERVE_ARGS`.
    fn start_serving(args: &[&str], serve_args: &[&str], env: &[(&str, &str)]) -> Self {
        use std::io::BufRead as _;
        let home = tempfile::tempdir().unwrap();
        let mut cmd = partop();
        cmd.env("XDG_STATE_HOME", home.path().join("state"))
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("PARTOP_SIM_AMD_SMI_COST", "off")
            .args(args)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(serve_args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let err = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = std::sync::Arc::clone(&err);
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let mut e = sink.lock().unwrap();
                e.push_str(&line);
                e.push('\n');
            }
        });
        let end = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Some(p) = listening_port(&err.lock().unwrap()) {
                break p;
            }
            if let Some(st) = child.try_wait().unwrap() {
                panic!(
                    "partop serve exited ({st}) before listening:\n{}",
                    err.lock().unwrap()
                );
            }
            assert!(
                Instant::now() < end,
                "partop serve did not say where it listens:\n{}",
                err.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Self {
            child,
            port,
            home,
            err,
            reader: Some(reader),
        }
    }

    fn ready(&self) {
        wait_until("partop serve to be ready", || {
            get(self.port, "/-/ready", "").0 == 200
        });
    }

    /// The simulated node `--sim` started (its state file is named after the pid).
    fn sim_state(&self) -> PathBuf {
        self.home
            .path()
            .join(format!("state/partop/sim/node-{}.json", self.child.id()))
    }

    fn term(&mut self) -> (std::process::ExitStatus, String) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let t = Instant::now();
        let st = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "SIGTERM not obeyed");
            std::thread::sleep(Duration::from_millis(50));
        };
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let err = self.err.lock().unwrap().clone();
        (st, err)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.term();
        }
    }
}

/// A real Prometheus on loopback scraping `target` every second.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(targets: &[u16]) -> Self {
        let bin = which("prometheus");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let t: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
        let cfg = dir.path().join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: partop\n    static_configs:\n      - targets: [{}]\n",
                t.join(", ")
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let p = Self {
            child,
            port,
            _dir: dir,
        };
        wait_until("prometheus to answer", || {
            get(port, "/-/ready", "").0 == 200
        });
        p
    }

    /// An instant query: the result vector.
    fn query(&self, q: &str, at: Option<f64>) -> Vec<serde_json::Value> {
        let mut url = format!(
            "/api/v1/query?query={}",
            q.bytes()
                .map(|b| if b.is_ascii_alphanumeric() || b == b'_' {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                })
                .collect::<String>()
        );
        if let Some(t) = at {
            url.push_str(&format!("&time={t:.3}"));
        }
        let (code, body) = get(self.port, &url, "");
        assert_eq!(code, 200, "{q}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A program the tests drive for real: found, or the test fails saying what to install.
fn which(name: &str) -> PathBuf {
    for d in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(d).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{name} is not installed: the serve tests drive the real one (scripts/test installs the distribution's prometheus package; or: apt-get install prometheus)"
    );
}

fn label<'a>(v: &'a serde_json::Value, k: &str) -> &'a str {
    v["metric"][k].as_str().unwrap_or("")
}

fn value(v: &serde_json::Value) -> f64 {
    v["value"][1].as_str().unwrap().parse().unwrap()
}

#[test]
fn prometheus_scrapes_every_partition_and_old_partitions_vanish_after_a_repartition() {
    let serve = Serve::start(&["--sim", "cpx-nps4-small-models", "--refresh", "1"], &[]);
    serve.ready();
    // Keep every /snapshot by its sample generation, to compare with what Prometheus stored.
    let snapshots = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        u64,
        serde_json::Value,
    >::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (snaps, stop, port) = (snapshots.clone(), stop.clone(), serve.port);
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (code, body) = get(port, "/snapshot", "");
                if code == 200 {
                    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                    let g = v["generation"].as_u64().unwrap();
                    snaps.lock().unwrap().insert(g, v);
                }
                std::thread::sleep(Duration::from_millis(150));
            }
        })
    };
    let prom = Prometheus::start(&[serve.port]);
    wait_until("two scrapes", || {
        prom.query("count_over_time(partop_up[1m])", None)
            .first()
            .is_some_and(|v| value(v) >= 2.0)
    });
    // The generation Prometheus stored last, at its scrape's own timestamp.
    let last = prom.query("partop_sample_generation", None);
    let (at, g) = (
        last[0]["value"][0].as_f64().unwrap(),
        value(&last[0]) as u64,
    );
    let busy = prom.query("gpu_gfx_activity", Some(at));
    assert_eq!(busy.len(), 64, "every partition has its own series");
    wait_until("the poller to hold that sample", || {
        snapshots.lock().unwrap().contains_key(&g)
    });
    let snap = snapshots.lock().unwrap()[&g].clone();
    let mut compared = 0;
    for gpu in snap["gpus"].as_array().unwrap() {
        for p in gpu["partitions"].as_array().unwrap() {
            let id = p["gpu_id"].as_u64().unwrap().to_string();
            let part = p["partition_id"].as_u64().unwrap().to_string();
            let s = busy
                .iter()
                .find(|v| label(v, "gpu_id") == id)
                .unwrap_or_else(|| panic!("no series for logical GPU {id}"));
            assert_eq!(label(s, "gpu_partition_id"), part);
            assert_eq!(label(s, "gpu_compute_partition_type"), "cpx");
            assert_eq!(label(s, "gpu_memory_partition_type"), "nps4");
            let want = p["gfx_busy_percent"].as_f64().unwrap();
            assert!(
                (value(s) - want).abs() < 1e-6,
                "logical GPU {id}: Prometheus {} vs /snapshot {want}",
                value(s)
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 64);
    // Partitions other than 0 are not left at 0 (what DME does): the model servers run on 1, 2.
    assert!(
        busy.iter()
            .any(|v| label(v, "gpu_partition_id") != "0" && value(v) > 0.0)
    );
    // A partop finding series: a finding from the same /snapshot is in Prometheus too.
    let found = prom.query("partop_partition_holders", Some(at));
    assert!(!found.is_empty());

    // Another operator repartitions the node: CPX/NPS4 -> DPX/NPS2 on every GPU.
    let state = serve.sim_state();
    let o = common::run(
        partop()
            .env("XDG_STATE_HOME", serve.home.path().join("state"))
            .env("PARTOP_SIM_AMD_SMI_COST", "off")
            .arg("--sim-state")
            .arg(&state)
            .args([
                "plan",
                "--gpu",
                "all",
                "--compute",
                "DPX",
                "--memory",
                "NPS2",
                "--json",
            ]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let pf = serve.home.path().join("plan.json");
    std::fs::write(&pf, &o.stdout).unwrap();
    let o = common::run(
        partop()
            .env("XDG_STATE_HOME", serve.home.path().join("state"))
            .env("PARTOP_SIM_AMD_SMI_COST", "off")
            .arg("--sim-state")
            .arg(&state)
            .arg("apply")
            .arg(&pf)
            .arg("--yes"),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // The next scrapes hold 16 partitions; the 48 that are gone have no series left.
    wait_until("Prometheus to see the new layout", || {
        let now = prom.query("gpu_gfx_activity", None);
        now.len() == 16
            && now
                .iter()
                .all(|v| label(v, "gpu_compute_partition_type") == "dpx")
    });
    let gone = prom.query("gpu_gfx_activity{gpu_id=\"40\"}", None);
    assert!(
        gone.is_empty(),
        "a series of a partition that is gone: {gone:?}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    poller.join().unwrap();
}

/// The idle-partition node with `idle_minutes` at 3 s, so its idle finding comes at once
/// (its model server holds 70 GiB and serves nothing).
fn idle_node() -> (Serve, tempfile::TempDir) {
    let cfg = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cfg.path().join("partop")).unwrap();
    std::fs::write(
        cfg.path().join("partop/config.toml"),
        "idle_minutes = 0.05\n",
    )
    .unwrap();
    let s = Serve::start(
        &["--sim", "idle-partition", "--refresh", "1"],
        &[("XDG_CONFIG_HOME", cfg.path().to_str().unwrap())],
    );
    (s, cfg)
}

#[test]
fn a_finding_reaches_prometheus_as_a_series() {
    // Idle after 3 s instead of 10 minutes: the idle-partition scenario's server holds 70 GiB.
    let serve = idle_node();
    let s = &serve.0;
    s.ready();
    let prom = Prometheus::start(&[s.port]);
    wait_until("the idle finding in Prometheus", || {
        !prom
            .query("partop_finding{kind=\"idle_partition\"}", None)
            .is_empty()
    });
    let f = prom.query("partop_finding{kind=\"idle_partition\"}", None);
    let (_, body) = get(s.port, "/snapshot", "");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let findings = v["findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|x| x["kind"] == "idle_partition"
            && x["subject"].as_str() == Some(label(&f[0], "subject"))),
        "{findings:?} vs {f:?}"
    );
}

#[test]
fn promtool_accepts_the_output_in_both_formats_and_the_dashboard_queries_exist() {
    // The idle-partition node, idle after 3 s, so a finding and a served model are exported.
    let (serve, _cfg) = idle_node();
    serve.ready();
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/grafana-partop.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut names = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let e = t["expr"].as_str().unwrap();
            for w in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if (w.starts_with("partop_") || w.starts_with("gpu_"))
                    && !names.contains(&w.to_string())
                {
                    names.push(w.to_string());
                }
            }
        }
    }
    assert!(names.len() >= 8, "{names:?}");
    let serves = |body: &str, n: &str| {
        body.contains(&format!("\n{n}{{")) || body.contains(&format!("\n{n} "))
    };
    // amd-smi's identity (power), the model's probe and the finding come within seconds.
    wait_until("every series the dashboard queries", || {
        let body = get(serve.port, "/metrics", "").1;
        names.iter().all(|n| serves(&body, n)) && body.contains("gpu_package_power")
    });
    for accept in [
        "",
        "Accept: application/openmetrics-text; version=1.0.0\r\n",
    ] {
        let (code, body) = get(serve.port, "/metrics", accept);
        assert_eq!(code, 200);
        let mut check = Command::new(which("promtool"))
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        check
            .stdin
            .take()
            .unwrap()
            .write_all(body.as_bytes())
            .unwrap();
        let o = check.wait_with_output().unwrap();
        // The lint may flag only what DME's own names do (its dashboards query them as they
        // are): `pcie_*_count` gauges, and the counters' HELP in OpenMetrics text (promtool
        // reads the 0.0.4 format). Anything else, a parse error included, fails.
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let dme_name = |l: &str| {
            (l.starts_with("pcie_") && l.ends_with("should not have \"_count\" suffix"))
                || (l.starts_with("gpu_ecc_") && l.ends_with("_total no help text"))
        };
        assert!(
            o.status.success() || (o.status.code() == Some(3) && said.lines().all(dme_name)),
            "promtool ({accept:?}): {said}"
        );
    }
    // The unit printed is the one in docs/.
    let o = common::run(partop().args(["serve", "--print-unit"]), "");
    assert_eq!(
        o.stdout,
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/partop-serve.service"
        ))
        .unwrap()
    );
}

#[test]
fn hostile_requests_are_bounded_and_a_token_is_required_when_set() {
    let home = tempfile::tempdir().unwrap();
    let tok = home.path().join("token");
    std::fs::write(&tok, "s3cret-token\n").unwrap();
    let mut serve = Serve::start(&["--sim", "spx-nps1-one-model"], &[]);
    serve.ready();
    let p = serve.port;
    // Methods: read only.
    let (code, _) = raw(
        p,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(code, 405);
    let (code, _) = raw(p, b"DELETE /snapshot HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(code, 405);
    // A body is refused unread.
    let (code, _) = raw(
        p,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n",
    );
    assert_eq!(code, 413);
    // A huge head is refused (or the connection closed), never buffered without end.
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    let (code, _) = raw(p, big.as_bytes());
    assert!(code == 431 || code == 0 || code == 400, "{code}");
    assert_eq!(get(p, "/nope", "").0, 404);
    // A slow client (half a head, then nothing) is cut off, and others are served meanwhile.
    let mut slow = TcpStream::connect(("127.0.0.1", p)).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap();
    let t = Instant::now();
    assert_eq!(get(p, "/-/healthy", "").0, 200);
    assert!(t.elapsed() < Duration::from_secs(2));
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = Vec::new();
    let _ = slow.read_to_end(&mut buf);
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(15),
        "the slow client was closed after {waited:?}"
    );
    // Many connections at once: past the limit they are refused at once, not queued.
    let held: Vec<TcpStream> = (0..70)
        .map(|_| TcpStream::connect(("127.0.0.1", p)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    drop(held);
    wait_until("the server to recover", || {
        get(p, "/-/healthy", "").0 == 200
    });
    let (_, body) = get(p, "/metrics", "");
    let refused = body
        .lines()
        .find(|l| l.starts_with("partop_serve_refused_connections{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    assert!(refused >= 6.0, "{refused}");
    let (st, err) = serve.term();
    assert!(st.success(), "SIGTERM ends it cleanly: {st:?} {err}");
    assert!(
        err.contains("<6>partop serve listening on http://127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains("<6>SIGTERM: stopping"), "{err}");

    // With a token: data endpoints need it, health endpoints do not.
    let guarded = Serve::start_serving(
        &["--sim", "spx-nps1-one-model"],
        &["--token-file", tok.to_str().unwrap()],
        &[],
    );
    let port = guarded.port;
    wait_until("the guarded server", || get(port, "/-/ready", "").0 == 200);
    assert_eq!(get(port, "/metrics", "").0, 401);
    assert_eq!(
        get(port, "/metrics", "Authorization: Bearer wrong\r\n").0,
        401
    );
    assert_eq!(
        get(port, "/snapshot", "Authorization: Bearer s3cret-token\r\n").0,
        200
    );
    assert_eq!(get(port, "/-/healthy", "").0, 200);
}

#[test]
fn a_hung_amd_smi_never_blocks_a_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("amd-smi");
    std::fs::write(&script, "#!/bin/sh\ncase \"$1\" in version) echo 'AMDSMI Tool: 26.0.2+39589fda | AMDSMI Library version: 26.0.2 | ROCm version: 7.0.2 | amdgpu version: x | amd_hsmp version: N/A';; *) sleep 6062;; esac\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let serve = Serve::start(
        &[
            "--amd-smi",
            script.to_str().unwrap(),
            "--timeout",
            "2",
            "--sysfs-root",
            dir.path().join("nosys").to_str().unwrap(),
        ],
        &[],
    );
    serve.ready();
    for _ in 0..5 {
        let t = Instant::now();
        let (code, body) = get(serve.port, "/metrics", "");
        assert_eq!(code, 200);
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "a scrape waited {:?}",
            t.elapsed()
        );
        assert!(body.contains("partop_sample_age_seconds"), "{body}");
    }
    wait_until("the hung source to be reported down", || {
        get(serve.port, "/metrics", "").1.lines().any(|l| {
            l.starts_with("partop_source_up{") && l.contains("amd-smi") && l.ends_with(" 0.0")
        })
    });
    // The reason is served as soon as the call's limit has passed.
    wait_until("the reason in /snapshot", || {
        get(serve.port, "/snapshot", "")
            .1
            .contains("timed out after 2s")
    });
    drop(serve);
    wait_until("the hung calls to be gone", || {
        common::running("sleep 6062") == 0
    });
}

#[test]
fn events_stream_one_snapshot_per_sample_with_findings() {
    let serve = Serve::start(&["--sim", "dpx-nps2-two-models", "--refresh", "0.5"], &[]);
    serve.ready();
    let mut s = TcpStream::connect(("127.0.0.1", serve.port)).unwrap();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 65536];
    let t = Instant::now();
    // Past the 10 s limit of an ordinary exchange: a stream is not cut by it.
    while seen.matches("event: snapshot").count() < 26 && t.elapsed() < Duration::from_secs(25) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("text/event-stream"), "{seen}");
    let mut gens = Vec::new();
    for ev in seen.split("\n\n").filter(|e| e.contains("data: ")) {
        let data = ev.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        assert!(v["findings"].is_array() && v["gpus"].is_array());
        gens.push(v["generation"].as_u64().unwrap());
    }
    assert!(
        gens.len() >= 3 && gens.windows(2).all(|w| w[0] < w[1]),
        "{gens:?}"
    );
}

/// The fleet's Prometheus mode against the real Prometheus, scraping two `partop serve` nodes:
/// one row per node, from partop's series, read only.
#[test]
fn the_fleet_reads_several_nodes_through_prometheus() {
    let a = Serve::start(&["--sim", "cpx-nps4-small-models", "--refresh", "1"], &[]);
    let b = Serve::start(&["--sim", "dpx-nps2-two-models", "--refresh", "1"], &[]);
    a.ready();
    b.ready();
    let prom = Prometheus::start(&[a.port, b.port]);
    wait_until("both nodes scraped", || {
        prom.query("partop_gpu_info", None).len() == 16
    });
    let url = format!("http://127.0.0.1:{}", prom.port);
    let o = common::run(
        partop().args(["fleet", "--prometheus", &url, "--once", "--json"]),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let by = |port: u16| {
        rows.iter()
            .find(|r| {
                r["host"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("127.0.0.1:{port}"))
            })
            .unwrap()
            .clone()
    };
    assert_eq!(by(a.port)["logical"], 64);
    assert_eq!(by(a.port)["modes"], "CPX/NPS4×8");
    assert_eq!(by(b.port)["logical"], 16);
    assert_eq!(by(b.port)["modes"], "DPX/NPS2×8");
    assert!(by(b.port)["vram_total"].as_u64().unwrap() > 1 << 40);
    // The table says the same.
    let o = common::run(partop().args(["fleet", "--prometheus", &url, "--once"]), "");
    assert!(
        o.stdout
            .contains("nodes reporting 2 of 2 · 80 logical GPUs"),
        "{}",
        o.stdout
    );
}

/// The fleet view over `partop serve` endpoints in a real terminal: Enter opens the monitor's
/// views on the node's live stream (read only), Esc comes back to the fleet.
#[test]
fn the_fleet_view_opens_a_node_and_comes_back() {
    let a = Serve::start(&["--sim", "cpx-nps4-small-models"], &[]);
    let b = Serve::start(&["--sim", "dpx-nps2-two-models"], &[]);
    a.ready();
    b.ready();
    let home = tempfile::tempdir().unwrap();
    let t = common::tmux::Session::new(
        "fleet",
        &format!(
            "env XDG_STATE_HOME={h}/state XDG_CONFIG_HOME={h}/config {bin} fleet http://127.0.0.1:{pa} http://127.0.0.1:{pb}; echo EXITED $?; sleep 30",
            h = home.path().display(),
            bin = env!("CARGO_BIN_EXE_partop"),
            pa = a.port,
            pb = b.port
        ),
        100,
        30,
    );
    t.wait_for("nodes reporting 2 of 2");
    assert!(t.screen().contains("CPX/NPS4×8 ×64") && t.screen().contains("DPX/NPS2×8 ×16"));
    // Sort by logical GPUs (descending): the 64-GPU node first; open it.
    for _ in 0..4 {
        t.keys(&["s"]);
    }
    t.wait_for("sort logical GPUs▼");
    t.keys(&["Home", "Enter"]);
    t.wait_for("64 logical");
    t.wait_for("Esc: back to the fleet");
    // Its views work on the stream; a mutating key says it is not available here.
    t.keys(&["3"]);
    t.wait_for("Processes:");
    t.keys(&["K"]);
    t.wait_for("read-only: kill_process is not available");
    t.keys(&["Escape"]);
    t.wait_for("nodes reporting 2 of 2");
    t.keys(&["q"]);
    t.wait_for("EXITED 0");
}

/// Every series AMD's published Grafana dashboards query (ROCm/device-metrics-exporter,
/// `grafana/` at afd0fe8: the GPU, job, node, overview and system dashboards), with why partop
/// cannot give it where it cannot (docs/serve.md says the same).
const DME_DASHBOARD_SERIES: &[(&str, Option<&str>)] = &[
    ("gpu_gfx_activity", None),
    ("gpu_gfx_busy_instantaneous", None),
    ("gpu_used_vram", None),
    ("gpu_total_vram", None),
    ("gpu_package_power", None),
    ("gpu_average_package_power", None),
    ("gpu_energy_consumed", None),
    ("gpu_edge_temperature", Some("MI300 has no edge sensor")),
    ("gpu_junction_temperature", None),
    ("gpu_memory_temperature", None),
    (
        "gpu_hbm_temperature",
        Some("per HBM stack: the kernel gives one HBM temperature"),
    ),
    ("gpu_health", None),
    ("gpu_ecc_correct_total", None),
    ("gpu_ecc_uncorrect_total", None),
    ("pcie_bandwidth", None),
    ("pcie_max_speed", None),
    ("pcie_nack_received_count", None),
    ("pcie_nack_sent_count", None),
    ("pcie_recovery_count", None),
    ("pcie_replay_count", None),
    ("pcie_replay_rollover_count", None),
    ("gpu_prof_gui_util_percent", Some("profiler counters")),
    (
        "gpu_prof_occupancy_per_active_cu",
        Some("profiler counters"),
    ),
    ("gpu_prof_occupancy_per_cu", Some("profiler counters")),
    ("gpu_prof_simd_utilization", Some("profiler counters")),
    ("gpu_prof_sm_active", Some("profiler counters")),
    ("gpu_prof_tensor_active_percent", Some("profiler counters")),
    (
        "gpu_nodes_total",
        Some("a gauge named _total fails promtool"),
    ),
];

/// The labels those dashboards filter or group by that partop fills (`pod` and `job_id` stay
/// empty, which Prometheus stores as absent: partop knows a pod's uid only and no job).
const DME_DASHBOARD_LABELS: &[&str] = &[
    "cluster_name",
    "hostname",
    "gpu_uuid",
    "gpu_id",
    "gpu_partition_id",
    "card_model",
    "serial_number",
];

#[test]
fn every_dme_dashboard_query_partop_can_give_returns_data_with_the_dashboards_labels() {
    let cfg = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cfg.path().join("partop")).unwrap();
    std::fs::write(
        cfg.path().join("partop/config.toml"),
        "cluster_name = \"lab-a\"\n",
    )
    .unwrap();
    let serve = Serve::start(
        &["--sim", "cpx-nps4-small-models", "--refresh", "1"],
        &[("XDG_CONFIG_HOME", cfg.path().to_str().unwrap())],
    );
    // From the first scrape on, before and after ready: never a DME series without its
    // identity (a series with an empty serial or UUID, then one with it, is two series).
    let mut scrapes = 0;
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = get(serve.port, "/-/ready", "").0 == 200;
        let body = get(serve.port, "/metrics", "").1;
        scrapes += 1;
        for line in body.lines().filter(|l| l.starts_with("gpu_")) {
            assert!(
                !line.contains("serial_number=\"\"") && !line.contains("gpu_uuid=\"\""),
                "scrape {scrapes} (ready: {ready}) has a series without its identity: {line}"
            );
        }
        if ready {
            assert!(
                body.contains("\ngpu_gfx_activity{"),
                "ready, yet no DME series: {body}"
            );
            break;
        }
        assert!(Instant::now() < end, "not ready in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let prom = Prometheus::start(&[serve.port]);
    let given: Vec<&str> = DME_DASHBOARD_SERIES
        .iter()
        .filter(|(_, why)| why.is_none())
        .map(|(n, _)| *n)
        .collect();
    // The dashboards' first variable is `label_values(cluster_name)`; every panel filters by it.
    wait_until("every series the dashboards query", || {
        given.iter().all(|n| {
            !prom
                .query(&format!("{n}{{cluster_name=\"lab-a\"}}"), None)
                .is_empty()
        })
    });
    let mut checked = 0;
    for n in &given {
        let rows = prom.query(&format!("{n}{{cluster_name=\"lab-a\"}}"), None);
        assert!(!rows.is_empty(), "{n}");
        for r in &rows {
            for l in DME_DASHBOARD_LABELS {
                assert!(!label(r, l).is_empty(), "{n} has no {l}: {r}");
            }
            checked += 1;
        }
        // Per XCC: the label the panels group by.
        if *n == "gpu_gfx_busy_instantaneous" {
            assert!(rows.iter().all(|r| !label(r, "xcc_index").is_empty()));
        }
    }
    // The GPU dashboard filters every panel by `gpu_uuid`: one logical GPU's UUID finds its
    // series of every kind given.
    let uuid = label(
        &prom.query("gpu_gfx_activity{gpu_partition_id=\"0\"}", None)[0],
        "gpu_uuid",
    )
    .to_string();
    for n in &given {
        assert!(
            !prom
                .query(&format!("{n}{{gpu_uuid=\"{uuid}\"}}"), None)
                .is_empty(),
            "{n} has no series for gpu_uuid {uuid}"
        );
    }
    // Every series partop serves carries hostname, DME's or its own (Prometheus's own `up`
    // and `scrape_*` aside).
    let bare = prom.query(
        "{job=\"partop\", hostname=\"\", __name__!~\"up|scrape_.*\"}",
        None,
    );
    assert!(bare.is_empty(), "series without hostname: {bare:?}");
    eprintln!(
        "{} of {} dashboard series given ({checked} series checked for {} labels, over {scrapes} early scrapes); not given: {:?}",
        given.len(),
        DME_DASHBOARD_SERIES.len(),
        DME_DASHBOARD_LABELS.len(),
        DME_DASHBOARD_SERIES
            .iter()
            .filter_map(|(n, why)| why.map(|w| format!("{n} ({w})")))
            .collect::<Vec<_>>()
    );
    assert_eq!(given.len(), 19, "the list and docs/serve.md must agree");
}

#[test]
fn readiness_waits_for_identity_and_one_amd_smi_timeout_ends_the_wait() {
    // A kernel tree with an MI300X (its serial in unique_id) and an amd-smi that hangs on
    // everything but `version`: the UUIDs never come. Before ready nothing of the GPUs is
    // served; the first timeout (2 s) ends the wait, and the DME series then carry the serial.
    let dir = tempfile::tempdir().unwrap();
    common::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/mi300x-cpx-nps4"),
        dir.path(),
    );
    let script = dir.path().join("amd-smi");
    std::fs::write(&script, "#!/bin/sh\ncase \"$1\" in version) echo 'AMDSMI Tool: 26.0.2+39589fda | AMDSMI Library version: 26.0.2 | ROCm version: 7.0.2 | amdgpu version: x | amd_hsmp version: N/A';; *) sleep 6063;; esac\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let serve = Serve::start(
        &[
            "--amd-smi",
            script.to_str().unwrap(),
            "--timeout",
            "2",
            "--refresh",
            "0.5",
            "--sysfs-root",
            dir.path().join("sys").to_str().unwrap(),
            "--proc-root",
            dir.path().join("proc").to_str().unwrap(),
        ],
        &[],
    );
    let t = Instant::now();
    let mut before = 0;
    while get(serve.port, "/-/ready", "").0 != 200 {
        let body = get(serve.port, "/metrics", "").1;
        assert!(
            !body.lines().any(|l| l.starts_with("gpu_")),
            "a GPU series before its identity: {body}"
        );
        before += 1;
        assert!(t.elapsed() < Duration::from_secs(20), "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let waited = t.elapsed();
    let body = get(serve.port, "/metrics", "").1;
    let act: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("gpu_gfx_activity{"))
        .collect();
    assert!(!act.is_empty(), "{body}");
    assert!(
        act.iter()
            .all(|l| l.contains("serial_number=\"0x") && !l.contains("serial_number=\"\"")),
        "{act:?}"
    );
    eprintln!("ready after {waited:?} ({before} scrapes before it had no GPU series)");
    assert!(
        waited < Duration::from_secs(8),
        "one 2 s timeout ends the wait: {waited:?}"
    );
    drop(serve);
    wait_until("the hung calls to be gone", || {
        common::running("sleep 6063") == 0
    });
}

/// Readers that ask for `/events` and never read, as many as the server takes: while they hold
/// every slot, `/-/healthy` and `/-/ready` are still answered at once (from the reserve) and the
/// data endpoints get 503; once each reader has taken nothing for the stall limit its connection
/// is cut, its slot freed and counted. 4 stalled readers, 5 endpoints asked while full.
#[test]
fn stalled_event_readers_are_cut_and_health_is_always_answered() {
    let serve = Serve::start_serving(
        &["--sim", "cpx-nps4-small-models", "--refresh", "0.2"],
        &["--max-connections", "4", "--stall-secs", "2"],
        &[],
    );
    serve.ready();
    let p = serve.port;
    let t = Instant::now();
    let stalled: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", p)).unwrap();
            s.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    wait_until("the stalled readers to hold every slot", || {
        get(p, "/metrics", "").0 == 503
    });
    let asked = [
        ("/-/healthy", 200),
        ("/-/ready", 200),
        ("/metrics", 503),
        ("/snapshot", 503),
        ("/events", 503),
    ];
    for (path, want) in asked {
        let at = Instant::now();
        let (code, body) = get(p, path, "");
        assert_eq!(code, want, "{path} while every slot is held: {body}");
        assert!(
            at.elapsed() < Duration::from_secs(2),
            "{path} took {:?}",
            at.elapsed()
        );
    }
    // Not read meanwhile: their buffers fill, the writes wait, the stall limit cuts them.
    let end = Instant::now() + Duration::from_secs(60);
    while get(p, "/metrics", "").0 != 200 {
        assert!(
            Instant::now() < end,
            "the stalled readers still hold every slot after {:?}",
            t.elapsed()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Each stalled socket ends: what the kernel buffered, then the close.
    for mut s in stalled {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut sink = [0u8; 65536];
        let mut got = 0usize;
        loop {
            match s.read(&mut sink) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("a stalled reader was never cut: {e}"),
            }
            assert!(got < 64 << 20, "a cut stream kept coming");
        }
    }
    let (_, body) = get(p, "/metrics", "");
    // Every series carries `hostname` (`name{hostname="…"} value`).
    let counter = |name: &str| {
        body.lines()
            .find(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    assert_eq!(counter("partop_serve_stalled_connections"), 4.0, "{body}");
    assert!(counter("partop_serve_refused_connections") >= 5.0, "{body}");
}

/// The `Bearer` scheme in any letter case (RFC 7235: schemes are case-insensitive), with one or
/// more spaces before the token, is accepted; other schemes and wrong tokens are not. Every
/// case spelling of "bearer" runs (64), then 5 refusals.
#[test]
fn the_bearer_scheme_is_read_in_any_case() {
    let home = tempfile::tempdir().unwrap();
    let tok = home.path().join("token");
    std::fs::write(&tok, "s3cret-token\n").unwrap();
    let serve = Serve::start_serving(
        &["--sim", "spx-nps1-one-model"],
        &["--token-file", tok.to_str().unwrap()],
        &[],
    );
    serve.ready();
    let p = serve.port;
    let mut ran = 0;
    for mask in 0u32..64 {
        let scheme: String = "bearer"
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if mask & (1 << i) == 0 {
                    c
                } else {
                    c.to_ascii_uppercase()
                }
            })
            .collect();
        let spaces = " ".repeat(1 + (mask % 3) as usize);
        let h = format!("Authorization: {scheme}{spaces}s3cret-token\r\n");
        assert_eq!(get(p, "/snapshot", &h).0, 200, "{h}");
        ran += 1;
    }
    for bad in [
        "Authorization: Basic s3cret-token\r\n",
        "Authorization: Bearers3cret-token\r\n",
        "Authorization: bearer wrong\r\n",
        "Authorization: bearer\r\n",
        "Authorization: s3cret-token\r\n",
    ] {
        assert_eq!(get(p, "/snapshot", bad).0, 401, "{bad}");
        ran += 1;
    }
    assert_eq!(ran, 69);
}
