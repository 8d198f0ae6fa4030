//! The fleet over a real sshd: `sshd` (the distribution's) started as a child on a loopback
//! port with a generated host key, a throwaway user key and its own known_hosts; simulated
//! nodes reached through it by ssh config aliases (each alias sets PARTOP_SIM_STATE for its
//! node). A rolling apply across three nodes, one set to fail its reload: the rollout stops
//! there and the third node is untouched. An unreachable host, a host-key mismatch, partop
//! missing on the node, a stream that stops, a slow node.
#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "tests panic on failure"
)]

mod common;
use common::{Node, partop, quick, run, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn which(name: &str) -> PathBuf {
    for d in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
        let p = Path::new(d).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{name} is not installed: the fleet tests drive the real one (scripts/test installs openssh-server and openssh-client; or: apt-get install openssh-server openssh-client)"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real sshd on loopback, its keys, and an ssh config that names the nodes.
struct Sshd {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Sshd {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let keygen = which("ssh-keygen");
        for k in ["host_key", "user_key", "other_host_key"] {
            let o = Command::new(&keygen)
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(k))
                .output()
                .unwrap();
            assert!(o.status.success(), "{o:?}");
        }
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
        let port = free_port();
        // Privilege separation needs its directory when sshd runs as root.
        let _ = std::fs::create_dir_all("/run/sshd");
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nAuthorizedKeysFile {ak}\nPubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile {pid}\nAcceptEnv PARTOP_SIM_STATE XDG_STATE_HOME PARTOP_SIM_AMD_SMI_COST\nLogLevel ERROR\n",
                hk = d.join("host_key").display(),
                ak = d.join("authorized_keys").display(),
                pid = d.join("sshd.pid").display(),
            ),
        )
        .unwrap();
        let child = Command::new(which("sshd"))
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(d.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let host_pub = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
        let other_pub = std::fs::read_to_string(d.join("other_host_key.pub")).unwrap();
        let key = |p: &str| p.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        std::fs::write(
            d.join("known_hosts"),
            format!("[127.0.0.1]:{port} {}\n", key(&host_pub)),
        )
        .unwrap();
        std::fs::write(
            d.join("known_hosts_wrong"),
            format!("[127.0.0.1]:{port} {}\n", key(&other_pub)),
        )
        .unwrap();
        let s = Self { child, dir, port };
        wait_until("sshd to listen", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        s
    }

    /// An ssh config: `nodes` are (alias, sim state, extra lines).
    fn config(&self, nodes: &[(&str, Option<&Path>, &str)]) -> PathBuf {
        let d = self.dir.path();
        let user = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .unwrap()
            .name;
        let mut c = String::new();
        for (alias, state, extra) in nodes {
            c.push_str(&format!(
                "Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n",
                port = self.port,
                key = d.join("user_key").display(),
                kh = d.join("known_hosts").display(),
            ));
            if let Some(s) = state {
                c.push_str(&format!(
                    "  SetEnv PARTOP_SIM_STATE={} XDG_STATE_HOME={} PARTOP_SIM_AMD_SMI_COST=off\n",
                    s.display(),
                    s.parent().unwrap().join("xdg").display()
                ));
            }
            c.push_str(extra);
        }
        let p = d.join(format!("ssh_config_{}", nodes.len()));
        std::fs::write(&p, c).unwrap();
        p
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fleet(cfg: &Path, home: &Path) -> Command {
    let mut c = partop();
    c.env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .args(["fleet", "--ssh-config"])
        .arg(cfg)
        .args([
            "--remote-partop",
            env!("CARGO_BIN_EXE_partop"),
            "--connect-timeout",
            "5",
        ]);
    c
}

const ONE: &str = "\n[[workload]]\nname = \"a\"\nkind = \"batch\"\ngpu = 0\npartition = 0\nvram_gb = 10\nbusy = 40\ncomm = \"python3\"\n";

#[test]
fn a_rolling_apply_stops_at_the_node_whose_reload_fails_and_leaves_the_third_untouched() {
    let sshd = Sshd::start();
    let n1 = Node::start(&quick("n1", "7.0.2", "SPX", "NPS1", ONE));
    let n2 = Node::start(&quick(
        "n2",
        "7.0.2",
        "SPX",
        "NPS1",
        &format!("fail_reloads = 1\n{ONE}"),
    ));
    let n3 = Node::start(&quick("n3", "7.0.2", "SPX", "NPS1", ONE));
    let cfg = sshd.config(&[
        ("node1", Some(&n1.state), ""),
        ("node2", Some(&n2.state), ""),
        ("node3", Some(&n3.state), ""),
    ]);
    let home = tempfile::tempdir().unwrap();
    // The fleet sees the three nodes over ssh.
    let o = run(fleet(&cfg, home.path()).args(["--once", "--json"]), "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    for n in v.as_array().unwrap() {
        assert_eq!(n["reporting"], true, "{n}");
        assert_eq!(n["summary"]["modes"], "SPX/NPS1×8", "{n}");
        assert_eq!(n["summary"]["logical"], 8);
    }
    // Each node plans its own change; the set is saved.
    let set = home.path().join("set.json");
    let o = run(
        fleet(&cfg, home.path())
            .args(["plan", "--compute", "DPX", "--memory", "NPS2", "--out"])
            .arg(&set),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    for n in ["node1", "node2", "node3"] {
        assert!(o.stdout.contains(&format!("{n}: plan ")), "{}", o.stdout);
    }
    let fp = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("plan set "))
        .and_then(|l| l.split(' ').next())
        .unwrap()
        .to_string();
    // A wrong confirmation changes nothing.
    let o = run(fleet(&cfg, home.path()).arg("apply").arg(&set), "nope\n");
    assert_eq!(o.code, 1);
    assert!(
        o.stdout.contains("cancelled: nothing was changed"),
        "{}",
        o.stdout
    );
    // The typed fingerprint covers exactly these nodes and plans; node 2's reload fails.
    let o = run(
        fleet(&cfg, home.path()).arg("apply").arg(&set),
        &format!("{fp}\n"),
    );
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("node1: applied and verified"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("node2: failed at [") && o.stdout.contains("untouched: node3"),
        "{}",
        o.stdout
    );
    let modes = |n: &Node| {
        let o = run(
            partop()
                .env("PARTOP_SIM_AMD_SMI_COST", "off")
                .arg("--sim-state")
                .arg(&n.state)
                .args(["snapshot", "--json"]),
            "",
        );
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        format!(
            "{}/{}",
            v["gpus"][0]["compute_partition"].as_str().unwrap_or("?"),
            v["gpus"][0]["memory_partition"].as_str().unwrap_or("?")
        )
    };
    assert_eq!(modes(&n1), "DPX/NPS2");
    assert_eq!(modes(&n3), "SPX/NPS1", "the third node is untouched");
    // The fleet journal says who ran what where, and where it stopped.
    let j = std::fs::read_to_string(home.path().join("state/partop/fleet-journal.jsonl")).unwrap();
    for a in [
        "fleet.rollout.start",
        "fleet.node.done",
        "fleet.node.failed",
        "fleet.rollout.stopped",
    ] {
        assert!(j.contains(a), "{a} missing:\n{j}");
    }
    let started: Vec<String> = j
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["action"] == "fleet.node.start")
        .filter_map(|e| e["targets"]["node"].as_str().map(str::to_string))
        .collect();
    assert_eq!(started, ["node1", "node2"], "node3 was never started");
    // The interrupted rollout resumes: node 2 continues its own run (its driver now reloads),
    // node 3 follows; node 1 is not touched again.
    let o = run(
        fleet(&cfg, home.path())
            .args(["apply", "--resume"])
            .arg(&set),
        &format!("{fp}\n"),
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("(1 done before: skipped)"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("node2: applied and verified")
            && o.stdout.contains("node3: applied and verified")
            && o.stdout.contains("rollout done"),
        "{}",
        o.stdout
    );
    assert_eq!(modes(&n2), "DPX/NPS2");
    assert_eq!(modes(&n3), "DPX/NPS2");
}

#[test]
fn unreachable_wrong_host_key_missing_partop_stopped_stream_and_slow_node_each_say_why() {
    let sshd = Sshd::start();
    let good = Node::start(&quick("good", "7.0.2", "SPX", "NPS1", ONE));
    let slow = Node::start(&quick("slow", "7.0.2", "SPX", "NPS1", ONE));
    let closed = free_port();
    // The slow node's partop waits 4 s before it starts.
    let wrapper = sshd.dir.path().join("slow-partop");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nsleep 4\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_partop")
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = sshd.config(&[
        ("good", Some(&good.state), ""),
        ("slow", Some(&slow.state), ""),
        ("down", None, &format!("Host down\n  Port {closed}\n")),
        (
            "badkey",
            None,
            &format!(
                "Host badkey\n  UserKnownHostsFile {}\n",
                sshd.dir.path().join("known_hosts_wrong").display()
            ),
        ),
        ("nopartop", Some(&good.state), ""),
        ("amdsmionly", Some(&good.state), ""),
    ]);
    // ssh takes the first value it reads: the per-host overrides come first.
    let text = std::fs::read_to_string(&cfg).unwrap();
    let mut head = String::new();
    let mut rest = String::new();
    for block in text.split("Host ").filter(|b| !b.is_empty()) {
        let is_override = (block.starts_with("down\n") || block.starts_with("badkey\n"))
            && !block.contains("HostName");
        if is_override {
            head.push_str(&format!("Host {block}"));
        } else {
            rest.push_str(&format!("Host {block}"));
        }
    }
    std::fs::write(&cfg, head + &rest).unwrap();
    let hosts = sshd.dir.path().join("hosts");
    std::fs::write(
        &hosts,
        format!(
            "good\nslow partop={}\ndown\nbadkey\nnopartop partop=/nonexistent/partop\namdsmionly partop=/nonexistent/partop amd-smi={}\n",
            wrapper.display(),
            good.script().display()
        ),
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let mut c = partop();
    c.env("XDG_STATE_HOME", home.path().join("state"))
        .args(["fleet", "--ssh-config"])
        .arg(&cfg)
        .arg("--hosts-file")
        .arg(&hosts)
        .args([
            "--remote-partop",
            env!("CARGO_BIN_EXE_partop"),
            "--connect-timeout",
            "3",
            "--once",
            "--json",
        ]);
    let o = run(&mut c, "");
    assert_eq!(
        o.code, 3,
        "some nodes do not report: {}{}",
        o.stdout, o.stderr
    );
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let node = |n: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|x| x["node"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("{n} missing: {v}"))
    };
    assert_eq!(node("good")["reporting"], true);
    assert_eq!(
        node("slow")["reporting"],
        true,
        "a slow node is waited for, not dropped"
    );
    let why = |n: &str| node(n)["reason"].as_str().unwrap_or("").to_string();
    assert!(why("down").starts_with("unreachable"), "{}", why("down"));
    assert!(
        why("badkey").starts_with("host key mismatch: refused"),
        "{}",
        why("badkey")
    );
    assert!(
        why("nopartop").starts_with("partop is not installed"),
        "{}",
        v
    );
    // Without partop, its amd-smi is read over ssh instead (read only, every minute).
    assert_eq!(node("amdsmionly")["reporting"], true, "{v}");
    assert_eq!(node("amdsmionly")["summary"]["modes"], "SPX/NPS1×8");
    assert!(
        node("amdsmionly")["summary"]["trouble"]
            .as_str()
            .unwrap_or("")
            .starts_with("partop is not installed: amd-smi read over ssh every 60s"),
        "{v}"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());

    // A stream that stops mid-way: the fleet view's row says so and reconnects.
    let mut view = Command::new("tmux")
        .args([
            "-L",
            &format!("fleet-{}", std::process::id()),
            "new-session",
            "-d",
            "-x",
            "160",
            "-y",
            "30",
        ])
        .arg(format!(
            "env XDG_STATE_HOME={} {} fleet --ssh-config {} --remote-partop {} good",
            home.path().join("state").display(),
            env!("CARGO_BIN_EXE_partop"),
            cfg.display(),
            env!("CARGO_BIN_EXE_partop")
        ))
        .spawn()
        .unwrap();
    view.wait().unwrap();
    let sock = format!("fleet-{}", std::process::id());
    // The tmux server goes away whatever happens below.
    struct KillTmux(String);
    impl Drop for KillTmux {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["-L", &self.0, "kill-server"])
                .status();
        }
    }
    let _tmux = KillTmux(sock.clone());
    let screen = || {
        String::from_utf8_lossy(
            &Command::new("tmux")
                .args(["-L", &sock, "capture-pane", "-p"])
                .output()
                .unwrap()
                .stdout,
        )
        .into_owned()
    };
    wait_until("the fleet view to show the node", || {
        screen().contains("SPX/NPS1×8")
    });
    assert!(screen().contains("nodes reporting 1 of 1"), "{}", screen());
    // Kill the node's `partop stream` (the remote side of the ssh session): this node's only
    // (its state file in its environment), never the streams of tests running beside this one.
    let ours = format!("PARTOP_SIM_STATE={}", good.state.display());
    let killed = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let mine = env.split(|b| *b == 0).any(|v| v == ours.as_bytes());
            (cmd.contains(" stream --summary") && !cmd.contains("ssh ") && mine).then_some(pid)
        })
        .filter(|pid| {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok()
        })
        .count();
    assert!(killed >= 1);
    wait_until("the row to say the stream stopped", || {
        let s = screen();
        s.contains("stream stopped") || s.contains("nodes reporting 0 of 1")
    });
    wait_until("the node to report again", || {
        screen().contains("nodes reporting 1 of 1")
    });
    // Staging from the view, inside it: `p` on the selected node, the modes chosen, its plan
    // shown, the set's fingerprint typed, rolled out, back to the view with the new layout.
    let keys = |text: &str| {
        Command::new("tmux")
            .args(["-L", &sock, "send-keys", "-l", text])
            .status()
            .unwrap();
    };
    let send = |text: &str| {
        keys(text);
        Command::new("tmux")
            .args(["-L", &sock, "send-keys", "Enter"])
            .status()
            .unwrap();
    };
    keys("p");
    wait_until("the stage dialog", || {
        screen().contains("Stage a change on 1 node(s)")
    });
    // c: SPX, then DPX; m: NPS1, then NPS2.
    keys("ccmm");
    wait_until("the modes chosen", || {
        screen().contains("compute DPX · memory NPS2")
    });
    send("");
    wait_until("the plan", || screen().contains("enter: confirm"));
    let s = screen();
    assert!(s.contains("good: plan "), "{s}");
    send("");
    wait_until("the confirmation", || {
        screen().contains("Type the set's fingerprint (")
    });
    let fp = screen()
        .split("Type the set's fingerprint (")
        .nth(1)
        .and_then(|x| x.split(')').next())
        .unwrap()
        .to_string();
    send(&fp);
    // A rollout drains, reloads and verifies: longer than the default wait under a loaded CI.
    let end = Instant::now() + Duration::from_secs(120);
    while !screen().contains("rollout done: 1 node(s)") {
        assert!(
            Instant::now() < end,
            "the rollout did not finish:\n{}",
            screen()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    send("");
    wait_until("the view with the new layout", || {
        screen().contains("DPX/NPS2×8 ×16")
    });
    // SIGTERM ends the view as `q` does: the terminal restored, exit 0.
    let display = |what: &str| {
        String::from_utf8_lossy(
            &Command::new("tmux")
                .args(["-L", &sock, "display-message", "-p", what])
                .output()
                .unwrap()
                .stdout,
        )
        .trim()
        .to_string()
    };
    Command::new("tmux")
        .args(["-L", &sock, "set-option", "-g", "remain-on-exit", "on"])
        .status()
        .unwrap();
    assert_eq!(display("#{alternate_on}"), "1");
    let pid: i32 = display("#{pane_pid}").parse().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // The exit status: tmux's once it has reaped the process; before that (tmux can be slow to
    // reap) the zombie's own, the last field of /proc/PID/stat (a wait status: 0 is exit 0).
    let status = || {
        let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = st.rsplit(')').next().unwrap_or("").trim().to_string();
        if after.starts_with('Z') {
            return Some(format!(
                "wait status {}",
                after.split_whitespace().last().unwrap_or("?")
            ));
        }
        let code = display("#{pane_dead_status}");
        let sig = display("#{pane_dead_signal}");
        if !code.is_empty() {
            Some(format!(
                "wait status {}",
                code.parse::<i32>().map_or(-1, |c| c << 8)
            ))
        } else if !sig.is_empty() {
            Some(format!("signal {sig}"))
        } else {
            None
        }
    };
    let mut got = None;
    wait_until("the view to exit on SIGTERM", || {
        got = status();
        got.is_some()
    });
    assert_eq!(
        got.as_deref(),
        Some("wait status 0"),
        "screen:\n{}",
        screen()
    );
    // What it wrote last reaches tmux asynchronously.
    wait_until("the terminal restored (the alternate screen left)", || {
        display("#{alternate_on}") == "0"
    });
    let _ = Command::new("tmux")
        .args(["-L", &sock, "kill-server"])
        .status();
}

/// `fleet --once` over ssh judges each node on a settled row (a node's first sample is taken
/// while amd-smi's first read runs: that row is `pending`, not down), and says `pending` for a
/// node that never settles within the bound; a node whose stream is not
/// partop's says why, escaped and bounded (5 hostile streams, an endless line among them); a partop path with blanks and
/// `;` (quoted in the hosts file) reaches the node's shell as one path, and the `;` runs nothing.
#[test]
fn once_waits_for_a_settled_row_names_an_invalid_stream_and_quotes_remote_paths() {
    let sshd = Sshd::start();
    let good = Node::start(&quick("good", "7.0.2", "SPX", "NPS1", ONE));
    let d = sshd.dir.path();
    // partop under a directory whose name a shell would split and run.
    let odd_dir = d.join("my tools;touch partop-quoting-pwned");
    std::fs::create_dir_all(&odd_dir).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_partop"), odd_dir.join("partop")).unwrap();
    let home_marker = std::path::Path::new(&std::env::var("HOME").unwrap_or_default())
        .join("partop-quoting-pwned");
    let _ = std::fs::remove_file(&home_marker);
    // Streams that are not partop's: each a script in place of partop on the node.
    let hostile = [
        ("garbage", "printf 'Welcome to node07\\n'"),
        ("wrongshape", "printf '{\"host\": 5}\\n'"),
        ("escapes", "printf '\\033]0;owned\\007\\033[2J{not json\\n'"),
        (
            "escapedvalue",
            "printf '{\"host\": \"\\\\u001b[2J\", \"physical\": \"\\033]0;x\\007\"}\\n'",
        ),
        // An endless line: refused at 4 MiB, never buffered without end.
        ("endless", "head -c 6000000 /dev/zero | tr '\\0' a"),
    ];
    let mut hosts = format!(
        "good\nodd partop=\"{}\"\n",
        odd_dir.join("partop").display()
    );
    let mut nodes: Vec<(&str, Option<&Path>, &str)> = vec![
        ("good", Some(&good.state), ""),
        ("odd", Some(&good.state), ""),
    ];
    for (name, body) in hostile {
        let script = d.join(format!("{name}.sh"));
        std::fs::write(&script, format!("#!/bin/sh\n{body}\nsleep 30\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        hosts.push_str(&format!("{name} partop={}\n", script.display()));
        nodes.push((name, Some(&good.state), ""));
    }
    // A node whose rows never settle (its amd-smi still on its first read): said as pending
    // at the bound, not as down and not as reporting fine.
    let row = d.join("pending-row.json");
    std::fs::write(
        &row,
        "{\"host\":\"stuck\",\"products\":[],\"modes\":\"SPX/NPS1×8\",\"physical\":8,\"logical\":8,\"gfx_mean\":null,\"vram_used\":0,\"vram_total\":0,\"models_healthy\":0,\"models_total\":0,\"findings_warn\":0,\"findings_info\":0,\"idle_partitions\":0,\"mismatched\":0,\"health\":\"pending\",\"trouble\":\"amd-smi static: amd-smi's first read is running\",\"taken_at_ms\":1,\"generation\":1,\"apply\":null,\"simulated\":true}\n",
    )
    .unwrap();
    let stuck = d.join("stuck.sh");
    std::fs::write(
        &stuck,
        format!(
            "#!/bin/sh\nwhile true; do cat {}; sleep 1; done\n",
            row.display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&stuck, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    hosts.push_str(&format!("stuck partop={}\n", stuck.display()));
    nodes.push(("stuck", Some(&good.state), ""));
    let cfg = sshd.config(&nodes);
    let hosts_file = d.join("hosts");
    std::fs::write(&hosts_file, hosts).unwrap();
    let home = tempfile::tempdir().unwrap();
    let once = |json: bool| {
        let mut c = partop();
        c.env("XDG_STATE_HOME", home.path().join("state"))
            .args(["fleet", "--ssh-config"])
            .arg(&cfg)
            .arg("--hosts-file")
            .arg(&hosts_file)
            .args(["--remote-partop", env!("CARGO_BIN_EXE_partop")])
            .args(["--connect-timeout", "5", "--once"]);
        if json {
            c.arg("--json");
        }
        run(&mut c, "")
    };
    let o = once(true);
    assert_eq!(
        o.code, 3,
        "the hostile nodes do not report: {}{}",
        o.stdout, o.stderr
    );
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let node = |n: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|x| x["node"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("{n} missing: {v}"))
    };
    for n in ["good", "odd"] {
        let x = node(n);
        assert_eq!(x["settled"], true, "{x}");
        assert_eq!(x["summary"]["health"], "ok", "judged on a settled row: {x}");
        assert_eq!(x["summary"]["modes"], "SPX/NPS1×8", "{x}");
    }
    assert!(!home_marker.exists(), "the `;` in the path ran a command");
    let stuck = node("stuck");
    assert!(
        stuck["reporting"] == true
            && stuck["settled"] == false
            && stuck["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("pending: no settled sample within 25s")),
        "{stuck}"
    );
    let mut ran = 0;
    for (name, _) in hostile {
        let why = node(name)["reason"].as_str().unwrap_or("").to_string();
        assert!(
            why.starts_with("invalid stream: ") && why.contains("line 1"),
            "{name}: {why}"
        );
        assert!(
            !why.chars().any(char::is_control),
            "{name}: raw control: {why:?}"
        );
        assert!(why.len() < 400, "{name}: {} bytes", why.len());
        ran += 1;
    }
    assert_eq!(ran, 5);
    // The table: no healthy node shown DOWN.
    let o = once(false);
    for l in o
        .stdout
        .lines()
        .filter(|l| l.contains("good") || l.contains("odd"))
    {
        assert!(!l.contains("DOWN"), "{}", o.stdout);
    }
    assert!(!o.stdout.contains('\u{1b}'), "{}", o.stdout);
}

/// A node whose ssh failed before its first step left no run on the node: `fleet apply
/// --resume` asks the node's journal and applies it afresh (it used to send --resume, which the
/// node refused, for ever); a fresh `fleet apply` of the unfinished set is refused with the way
/// to continue.
#[test]
fn a_node_whose_ssh_failed_before_its_first_step_is_resumed() {
    let sshd = Sshd::start();
    let n1 = Node::start(&quick("n1", "7.0.2", "SPX", "NPS1", ONE));
    let n2 = Node::start(&quick("n2", "7.0.2", "SPX", "NPS1", ONE));
    let cfg = sshd.config(&[
        ("node1", Some(&n1.state), ""),
        ("node2", Some(&n2.state), ""),
    ]);
    let reachable = std::fs::read_to_string(&cfg).unwrap();
    let home = tempfile::tempdir().unwrap();
    let set = home.path().join("set.json");
    let o = run(
        fleet(&cfg, home.path())
            .args(["plan", "--compute", "DPX", "--memory", "NPS2", "--out"])
            .arg(&set),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let fp = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("plan set "))
        .and_then(|l| l.split(' ').next())
        .unwrap()
        .to_string();
    // node2 unreachable for the rollout (ssh takes the first Port it reads).
    std::fs::write(
        &cfg,
        format!("Host node2\n  Port {}\n{reachable}", free_port()),
    )
    .unwrap();
    let o = run(
        fleet(&cfg, home.path()).arg("apply").arg(&set),
        &format!("{fp}\n"),
    );
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("node1: applied and verified")
            && o.stdout.contains("node2: failed at before its first step"),
        "{}",
        o.stdout
    );
    std::fs::write(&cfg, &reachable).unwrap();
    // A fresh apply of the same set would redo node1 on a plan it no longer matches.
    let o = run(
        fleet(&cfg, home.path()).arg("apply").arg(&set),
        &format!("{fp}\n"),
    );
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("is unfinished") && o.stderr.contains("--resume"),
        "{}",
        o.stderr
    );
    let o = run(
        fleet(&cfg, home.path())
            .args(["apply", "--resume"])
            .arg(&set),
        &format!("{fp}\n"),
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("(1 done before: skipped)")
            && o.stdout.contains("node2: no run on the node yet")
            && o.stdout.contains("node2: applied and verified")
            && o.stdout.contains("rollout done"),
        "{}",
        o.stdout
    );
    let o = run(
        partop()
            .env("PARTOP_SIM_AMD_SMI_COST", "off")
            .arg("--sim-state")
            .arg(&n2.state)
            .args(["snapshot", "--json"]),
        "",
    );
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["gpus"][0]["compute_partition"], "DPX");
    assert_eq!(v["gpus"][0]["memory_partition"], "NPS2");
}
