//! Shared helpers for the integration tests: the partop binary, a simulated node in a temp dir,
//! a child's output gathered as it prints, and `wait_until` / `wait_within` (never fixed
//! sleeps). The Kubernetes tests' setup is in `control_plane` (the control plane, kubectl),
//! `k8s_api` (kube-rs), `k8s_node` (a simulated node as a node of it) and `sim_cluster`.
#![allow(dead_code, clippy::unwrap_used)]

pub mod control_plane;
pub mod env;
pub mod fleet_journal;
pub mod k8s_api;
pub mod k8s_node;
pub mod nodes;
pub mod screen;
pub mod serve;
pub mod sim_cluster;
pub mod tmux;

use std::io::{BufRead as _, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The partop binary under test.
pub fn partop() -> Command {
    Command::new(env!("CARGO_BIN_EXE_partop"))
}

/// What a command printed.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(cmd: &mut Command, stdin: &str) -> Out {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that refuses at once exits without reading its input: a broken pipe here is
    // that, and its output says the rest.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "writing stdin: {e}"
        );
    }
    let o = child.wait_with_output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Polls `pred` until true or the deadline (PARTOP_TEST_TIMEOUT_SECS, default 20 s).
pub fn wait_until(what: &str, pred: impl FnMut() -> bool) {
    let secs = std::env::var("PARTOP_TEST_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    poll(what, secs, Duration::from_millis(50), pred);
}

/// Polls `pred` until true, `secs` at most, every 200 ms: for a probe that costs a process (a
/// kubectl, a snapshot), where `wait_until`'s pace would load the machine.
pub fn wait_within(what: &str, secs: u64, pred: impl FnMut() -> bool) {
    poll(what, secs, Duration::from_millis(200), pred);
}

fn poll(what: &str, secs: u64, every: Duration, mut pred: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if pred() {
            return;
        }
        std::thread::sleep(every);
    }
    panic!("timed out waiting for {what} ({secs} s)");
}

/// What a child prints on stdout and stderr, line by line as it prints (for a test that waits on
/// its words, and for failure messages).
pub type Said = Arc<Mutex<String>>;

/// Takes `child`'s piped stdout and stderr and gathers their lines into one `Said`.
pub fn gather(child: &mut Child) -> Said {
    let said = Arc::new(Mutex::new(String::new()));
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    for r in [
        Box::new(out) as Box<dyn std::io::Read + Send>,
        Box::new(err) as Box<dyn std::io::Read + Send>,
    ] {
        let s = Arc::clone(&said);
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(r).lines().map_while(Result::ok) {
                let mut g = s.lock().unwrap();
                g.push_str(&l);
                g.push('\n');
            }
        });
    }
    said
}

/// A simulated node in a temp dir, stopped on drop.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub state: PathBuf,
}

impl Node {
    /// Starts a built-in scenario, or TOML text when it contains a newline.
    pub fn start(scenario: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("node.json");
        let arg = if scenario.contains('\n') {
            let f = dir.path().join("scenario.toml");
            std::fs::write(&f, scenario).unwrap();
            f.display().to_string()
        } else {
            scenario.to_string()
        };
        let o = run(
            partop().args(["sim", "start", &arg, "--state"]).arg(&state),
            "",
        );
        assert_eq!(o.code, 0, "sim start failed: {}{}", o.stdout, o.stderr);
        Self { dir, state }
    }

    /// Runs the fake amd-smi with `stdin`.
    pub fn amd(&self, args: &str, stdin: &str) -> Out {
        let mut c = partop();
        c.args(["sim", "amd-smi", "--state"])
            .arg(&self.state)
            .args(args.split_whitespace());
        run(&mut c, stdin)
    }

    pub fn sim(&self, verb: &str) -> Out {
        run(partop().args(["sim", verb, "--state"]).arg(&self.state), "")
    }

    /// JSON output of the fake amd-smi.
    pub fn json(&self, args: &str) -> serde_json::Value {
        let o = self.amd(args, "");
        assert_eq!(o.code, 0, "{args}: {}{}", o.stdout, o.stderr);
        serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{args}: {e}\n{}", o.stdout))
    }

    /// A two-line `amd-smi` script that forwards to the fake, for PATH-based tests.
    pub fn script(&self) -> PathBuf {
        let bin = self.dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let p = bin.join("amd-smi");
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\nexec {} sim amd-smi --state {} \"$@\"\n",
                env!("CARGO_BIN_EXE_partop"),
                self.state.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = run(
            partop().args(["sim", "stop", "--state"]).arg(&self.state),
            "",
        );
    }
}

/// A loopback port free now (the OS's pick), for a server a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fixture file's text.
pub fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/amd-smi")
            .join(name),
    )
    .unwrap()
}

/// A scenario with a short reload, for cycle tests.
pub fn quick(base: &str, rocm: &str, compute: &str, memory: &str, workloads: &str) -> String {
    format!(
        "name = \"{base}\"\ndescription = \"test\"\nproduct = \"mi300x\"\ncompute = \"{compute}\"\nmemory = \"{memory}\"\nrocm = \"{rocm}\"\nseed = 11\nreload_secs = 0.3\n{workloads}"
    )
}

/// Copies a directory tree (a captured sysfs tree into a scratch dir).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// How many processes run exactly `cmdline` (arguments joined by spaces).
pub fn running(cmdline: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|d| {
            std::fs::read_to_string(d.path().join("cmdline"))
                .is_ok_and(|c| c.replace('\0', " ").trim() == cmdline)
        })
        .count()
}

/// AMD's guide's node: 8 MI300X in SPX/NPS1, the 12B model on each GPU as members of one set
/// (the replica-set and balancer tests' node).
pub fn guide_node() -> String {
    let members: String = (1..=8)
        .map(|k| {
            format!(
                "[[workload]]\nname = \"mistral-12b#{k}\"\nkind = \"model-server\"\ngpu = {}\nvram_gb = 40\nbusy = 90\nmodel = \"mistralai/Mistral-Nemo-Instruct-2407\"\n",
                k - 1
            )
        })
        .collect();
    // Faster than real time: a reload and a server's loading take a twentieth.
    quick("guide", "7.0.2", "SPX", "NPS1", &members).replace(
        "reload_secs = 0.3\n",
        "reload_secs = 0.3\ntime_scale = 0.05\n",
    )
}

/// `partop sim start` of scenario text `scenario` at `state` (its TOML written beside it).
pub fn sim_start(state: &Path, scenario: &str) {
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    let toml = state.with_file_name("scenario.toml");
    std::fs::write(&toml, scenario).unwrap();
    let o = run(
        partop()
            .env("PARTOP_SIM_AMD_SMI_COST", "off")
            .args(["sim", "start"])
            .arg(&toml)
            .arg("--state")
            .arg(state),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
}
