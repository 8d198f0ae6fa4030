//! Hostile conditions, second pass (services, fleet, smaller): the parts that need no server
//! or ssh, each through the real code path (a real `sh`, the real binary on loopback or on a
//! simulated node).
#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "tests panic on failure"
)]

mod common;

/// `shell_quote`, the one quoting of every command line partop shows or hands to a shell: every
/// word of length 0 to 2 over a hostile alphabet (shell metacharacters, quotes, spaces, control
/// characters, non-ASCII), a sample of length 3 and two paths come back unchanged through a
/// real `sh` (the count is in the assertion).
#[test]
fn a_shell_reads_every_quoted_word_back_unchanged() {
    let alphabet: Vec<char> = " ';\"$`\\|&<>()*?[]#~!{}\n\ta-é=%".chars().collect();
    let mut words: Vec<String> = vec![String::new()];
    for a in &alphabet {
        words.push(a.to_string());
        for b in &alphabet {
            words.push(format!("{a}{b}"));
        }
    }
    for (i, a) in alphabet.iter().enumerate() {
        let b = alphabet[(i * 7 + 3) % alphabet.len()];
        let c = alphabet[(i * 11 + 5) % alphabet.len()];
        words.push(format!("{a}{b}{c}"));
    }
    words.push("/opt/my dir;echo pwned/partop".into());
    words.push("it's".into());
    // printf '%s\0' WORDS...: each word back, NUL-separated.
    let script = format!(
        "printf '%s\\0' {}",
        partop::domain::text::shell_line(&words)
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let back: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .split_terminator('\0')
        .map(str::to_string)
        .collect();
    // An empty word prints as an empty field: split_terminator keeps it.
    assert_eq!(back.len(), words.len(), "{} words sent", words.len());
    assert_eq!(back, words, "{} words round-tripped", words.len());
    assert_eq!(
        partop::domain::text::shell_quote("/usr/bin/partop"),
        "/usr/bin/partop"
    );
    assert_eq!(partop::domain::text::shell_quote("a b"), "'a b'");
}

/// `fleet plan` exits 2 (usage, as docs/cli.md says) when it has no node to plan on, or a node
/// it cannot change (a `partop serve` endpoint is read only): 2 cases.
#[test]
fn fleet_plan_without_a_changeable_node_is_a_usage_error() {
    let home = tempfile::tempdir().unwrap();
    let cases: [&[&str]; 2] = [
        &["fleet", "plan", "--compute", "DPX"],
        &["fleet", "http://127.0.0.1:9", "plan", "--compute", "DPX"],
    ];
    for args in cases {
        let o = common::run(
            common::partop()
                .env("XDG_STATE_HOME", home.path())
                .args(args),
            "",
        );
        assert_eq!(o.code, 2, "{args:?}: {}{}", o.stdout, o.stderr);
        assert!(!o.stderr.is_empty(), "{args:?}: says why");
    }
}

/// A keymap of 40,000 bindings (three-key sequences in [processes]) is checked by the real
/// binary's `check-config` well within a generous bound: prefix clashes are found by looking
/// each binding's prefixes up, not by comparing every pair (13.8 s before, quadratic).
#[test]
fn forty_thousand_keymap_bindings_load_in_linear_time() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("config/partop");
    std::fs::create_dir_all(&dir).unwrap();
    let first: Vec<String> = ('a'..='z')
        .chain('0'..='9')
        .map(|c| format!("alt-{c}"))
        .collect();
    let rest: Vec<char> = ('a'..='z').chain('0'..='9').collect();
    let mut text = String::from("[processes]\n");
    let mut n = 0;
    'all: for f in &first {
        for a in &rest {
            for b in &rest {
                if n == 40_000 {
                    break 'all;
                }
                text.push_str(&format!("\"{f} {a} {b}\" = \"refresh_now\"\n"));
                n += 1;
            }
        }
    }
    assert_eq!(n, 40_000);
    std::fs::write(dir.join("keymap.toml"), &text).unwrap();
    let t = std::time::Instant::now();
    let o = common::run(
        common::partop()
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_STATE_HOME", home.path().join("state"))
            .arg("check-config"),
        "",
    );
    let took = t.elapsed();
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        took < std::time::Duration::from_secs(10),
        "check-config of {n} bindings took {took:?}"
    );
}

/// `sim start` refuses a scenario whose `reload_secs` is not a usable number when it reads the
/// file, naming file:line:column and the key, and starts nothing (it used to start, write
/// `null` into its state file and then call that file unreadable): 5 values.
#[test]
fn sim_start_refuses_a_scenario_with_an_absurd_reload_time() {
    let mut ran = 0;
    for v in ["inf", "-inf", "nan", "-1", "1e308"] {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("odd.toml");
        std::fs::write(
            &f,
            common::quick("odd", "7.0.2", "SPX", "NPS1", "")
                .replace("reload_secs = 0.3", &format!("reload_secs = {v}")),
        )
        .unwrap();
        let state = dir.path().join("node.json");
        let o = common::run(
            common::partop()
                .args(["sim", "start"])
                .arg(&f)
                .arg("--state")
                .arg(&state),
            "",
        );
        assert_ne!(o.code, 0, "{v}: {}{}", o.stdout, o.stderr);
        assert!(
            o.stderr
                .contains(&format!("{}:8:1: reload_secs = ", f.display())),
            "{v}: {}",
            o.stderr
        );
        assert!(!state.exists(), "{v}: a node was started");
        ran += 1;
    }
    assert_eq!(ran, 5);
}

/// `sim fleet --base-port 0` puts each node on a port the kernel picks and writes those ports
/// to the hosts file (it wrote `http://127.0.0.1:0`): 3 nodes, each port distinct, non-zero and
/// answering.
#[test]
fn sim_fleet_with_base_port_zero_writes_the_ports_it_bound() {
    let dir = tempfile::tempdir().unwrap();
    let o = common::run(
        common::partop()
            .env("PARTOP_SIM_AMD_SMI_COST", "off")
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .args(["--sim", "spx-nps1-one-model", "snapshot", "--json"]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let template = dir.path().join("template.json");
    std::fs::write(&template, &o.stdout).unwrap();
    let hosts = dir.path().join("hosts.txt");
    let child = common::partop()
        .args([
            "sim",
            "fleet",
            "--nodes",
            "3",
            "--base-port",
            "0",
            "--every",
            "0.5",
        ])
        .arg("--template")
        .arg(&template)
        .arg("--hosts-out")
        .arg(&hosts)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _stop = Stop(child);
    common::wait_until("the hosts file", || {
        std::fs::read_to_string(&hosts).is_ok_and(|t| t.lines().count() == 3)
    });
    let text = std::fs::read_to_string(&hosts).unwrap();
    let ports: Vec<u16> = text
        .lines()
        .map(|l| {
            l.strip_prefix("http://127.0.0.1:")
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("{l:?} in {text}"))
        })
        .collect();
    let mut distinct = ports.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{text}");
    for p in ports {
        assert_ne!(p, 0, "{text}");
        common::wait_until("the node to answer", || {
            use std::io::{Read as _, Write as _};
            let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", p)) else {
                return false;
            };
            let _ = s.write_all(b"GET /-/ready HTTP/1.0\r\n\r\n");
            let mut b = String::new();
            let _ = s.read_to_string(&mut b);
            b.starts_with("HTTP/1.1 200") || b.starts_with("HTTP/1.0 200")
        });
    }
}

/// The words a real `sh` reads from `line` (a command line partop printed).
fn shell_quotes(line: &str) -> Vec<String> {
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("set -- {line}\nprintf '%s\\0' \"$@\""))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout)
        .unwrap()
        .split_terminator('\0')
        .map(str::to_string)
        .collect()
}

/// The command line under `start NAME on logical GPU N (BDF):` and N.
fn shown_launch(stdout: &str) -> (String, String) {
    let mut lines = stdout.lines();
    let head = lines
        .find(|l| l.starts_with("start ") && l.contains(" on logical GPU "))
        .unwrap_or_else(|| panic!("no launch shown: {stdout}"));
    let gpu = head
        .split(" on logical GPU ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap()
        .to_string();
    (lines.next().unwrap().trim().to_string(), gpu)
}

/// A launch shown in the confirmation and the dry run is quoted for a shell: pasted, it runs
/// the same words partop runs (an `sh -c "…"` launch was shown unquoted). A docker launch runs
/// on the GPU the confirmation names: `docker run` with the GPU devices and
/// `HIP_VISIBLE_DEVICES`, and the argv docker receives is the confirmation's words exactly.
/// 2 launches (command with `sh -c`, docker), each through the real binary.
#[test]
fn launches_are_shown_quoted_and_docker_runs_what_the_confirmation_names() {
    let node = common::Node::start(&common::quick("q", "7.0.2", "SPX", "NPS1", ""));
    let dir = node.dir.path();
    let recorded = dir.join("docker-argv");
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    // docker as a program that records what it was given (NUL-separated) and succeeds.
    std::fs::write(
        bin.join("docker"),
        format!(
            "#!/bin/sh\nprintf '%s\\0' \"$@\" > {}\necho 0123456789ab\n",
            recorded.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("docker"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let registry = dir.join("models.toml");
    std::fs::write(
        &registry,
        r#"
[[model]]
name = "shc"
model = "org/m-7b"
port = 18999
memory_gb = 10
health_timeout_secs = 1
launch.command = ["sh", "-c", "echo '{model}' && exec vllm serve {model} --port {port}; echo \"$HOME\" `id`"]

[[model]]
name = "dock"
model = "org/d-7b"
port = 18998
memory_gb = 10
health_timeout_secs = 1
launch.docker = "vllm-{name}"
launch.image = "rocm/vllm:latest"
launch.args = ["vllm", "serve", "{model}", "--port", "{port}", "--served-model-name", "my model; x"]
launch.env = { VLLM_USE_V1 = "1" }
"#,
    )
    .unwrap();
    let cmd = || {
        let mut c = common::partop();
        c.env("XDG_STATE_HOME", dir.join("xdg"))
            .env("XDG_CONFIG_HOME", dir.join("xdg"))
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .arg("--sim-state")
            .arg(&node.state)
            .arg("--models")
            .arg(&registry);
        c
    };
    let o = common::run(cmd().args(["models", "start", "shc", "--dry-run"]), "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let (line, gpu) = shown_launch(&o.stdout);
    assert_eq!(
        shell_quotes(&line),
        [
            format!("HIP_VISIBLE_DEVICES={gpu}"),
            "sh".into(),
            "-c".into(),
            "echo 'org/m-7b' && exec vllm serve org/m-7b --port 18999; echo \"$HOME\" `id`".into()
        ],
        "pasting {line:?}"
    );
    // Docker: the confirmation, then what docker was given.
    let o = common::run(cmd().args(["models", "start", "dock", "--yes"]), "");
    let (line, gpu) = shown_launch(&o.stdout);
    let shown = shell_quotes(&line);
    let ran: Vec<String> = std::fs::read_to_string(&recorded)
        .unwrap_or_else(|e| panic!("docker was not run ({e}): {}{}", o.stdout, o.stderr))
        .split_terminator('\0')
        .map(str::to_string)
        .collect();
    assert_eq!(shown[0], "docker");
    assert_eq!(
        shown[1..],
        ran[..],
        "the confirmation is what docker received"
    );
    let has = |pair: [&str; 2]| ran.windows(2).any(|w| w[0] == pair[0] && w[1] == pair[1]);
    assert!(ran[0] == "run" && has(["--name", "vllm-dock"]), "{ran:?}");
    assert!(
        has(["--device", "/dev/kfd"]) && has(["--device", "/dev/dri"]),
        "{ran:?}"
    );
    assert!(
        has(["--env", &format!("HIP_VISIBLE_DEVICES={gpu}")]) && has(["--env", "VLLM_USE_V1=1"]),
        "{ran:?}"
    );
    assert_eq!(
        ran.last().map(String::as_str),
        Some("my model; x"),
        "{ran:?}"
    );
}

/// 40,000 problems in one keymap (unknown top-level settings; unknown commands) are each
/// reported at their line, within a generous bound: each is located through one line index,
/// not by scanning the file before it (97 s before for the first file, quadratic). 2 files.
#[test]
fn forty_thousand_keymap_problems_are_located_in_linear_time() {
    let files = [
        (0..40_000)
            .map(|i| format!("k{i} = 1\n"))
            .collect::<String>(),
        std::iter::once("[processes]\n".to_string())
            .chain((0..40_000).map(|i| {
                let (a, b, c) = (i / 1296, i / 36 % 36, i % 36);
                let k = |n: usize| char::from_digit(u32::try_from(n).unwrap(), 36).unwrap();
                format!("\"alt-{} {} {}\" = \"no_such_command\"\n", k(a), k(b), k(c))
            }))
            .collect::<String>(),
    ];
    for (n, text) in files.iter().enumerate() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("config/partop");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keymap.toml"), text).unwrap();
        let t = std::time::Instant::now();
        let o = common::run(
            common::partop()
                .env("XDG_CONFIG_HOME", home.path().join("config"))
                .env("XDG_STATE_HOME", home.path().join("state"))
                .arg("check-config"),
            "",
        );
        let took = t.elapsed();
        let all = format!("{}{}", o.stdout, o.stderr);
        assert_eq!(
            o.code,
            2,
            "file {n}: {}",
            &all[all.len().saturating_sub(500)..]
        );
        let last_line = text.lines().count();
        assert!(
            all.contains(&format!("keymap.toml:{last_line}:")),
            "file {n}: the last problem located at line {last_line}"
        );
        assert!(
            took < std::time::Duration::from_secs(10),
            "file {n}: {took:?}"
        );
    }
}

/// A registry of 20,000 entries with a problem each (an unknown placeholder; a port used
/// twice) is checked by `check-config --models` within a generous bound, every problem at its
/// line (28 s before: each located by scanning the text before it). 2 files.
#[test]
fn twenty_thousand_registry_problems_are_located_in_linear_time() {
    let entry = |i: usize, port: usize, arg: &str| {
        format!(
            "[[model]]\nname = \"m{i}\"\nmodel = \"x\"\nport = {port}\nmemory_gb = 1\nlaunch.command = [\"x\", \"{arg}\"]\n"
        )
    };
    let files = [
        (0..20_000)
            .map(|i| entry(i, 1000 + i, "{bogus}"))
            .collect::<String>(),
        (0..20_000)
            .map(|i| entry(i, 1000, "ok"))
            .collect::<String>(),
    ];
    for (n, text) in files.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("models.toml");
        std::fs::write(&f, text).unwrap();
        let t = std::time::Instant::now();
        let o = common::run(
            common::partop()
                .env("XDG_CONFIG_HOME", dir.path().join("config"))
                .env("XDG_STATE_HOME", dir.path().join("state"))
                .args(["check-config", "--models"])
                .arg(&f),
            "",
        );
        let took = t.elapsed();
        let all = format!("{}{}", o.stdout, o.stderr);
        assert_eq!(
            o.code,
            2,
            "file {n}: {}",
            &all[all.len().saturating_sub(400)..]
        );
        let want = if n == 0 { 20_000 } else { 19_999 };
        assert!(
            all.contains(&format!("{want} problem(s)")),
            "file {n}: {}",
            &all[all.len().saturating_sub(400)..]
        );
        assert!(
            took < std::time::Duration::from_secs(10),
            "file {n}: {took:?}"
        );
    }
}
