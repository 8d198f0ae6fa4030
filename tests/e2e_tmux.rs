//! End to end in a real terminal (tmux): the whole application against the simulated node, and
//! against an amd-smi that hangs. `scripts/test` installs tmux (the README's test command).
#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "tests panic on failure and say when skipped"
)]

mod common;

struct Tmux {
    session: common::tmux::Session,
    home: tempfile::TempDir,
}

impl std::ops::Deref for Tmux {
    type Target = common::tmux::Session;
    fn deref(&self) -> &Self::Target {
        &self.session
    }
}

impl Tmux {
    fn start(args: &str, w: u16, h: u16) -> Option<Self> {
        let home = tempfile::tempdir().unwrap();
        let cmd = format!(
            "env HOME={h} XDG_STATE_HOME={h}/state XDG_CONFIG_HOME={h}/config {bin} {args}; echo EXITED $?; sleep 30",
            h = home.path().display(),
            bin = env!("CARGO_BIN_EXE_partop")
        );
        Some(Self {
            session: common::tmux::Session::new("e2e", &cmd, w, h),
            home,
        })
    }
}

#[test]
fn sim_views_filter_and_clean_quit() {
    let Some(t) = Tmux::start("--sim", 80, 24) else {
        return;
    };
    t.wait_for("SIMULATED: dpx-nps2-two-models");
    t.wait_for("16 logical");
    assert!(t.alternate_on());
    t.keys(&["2"]);
    t.wait_for("GPUs: 16 logical on 8 physical");
    t.keys(&["3"]);
    t.wait_for("Processes: 3 of 3");
    t.keys(&["/", "q", "w", "e", "n", "Enter"]);
    t.wait_for("Processes: 1 of 3");
    assert!(t.screen().contains("vllm serve"), "{}", t.screen());
    // The command is cut with an ellipsis at 80 columns; Detail shows it whole.
    t.keys(&["Enter"]);
    t.wait_for("Qwen");
    t.keys(&["Escape"]);
    t.wait_for("Processes: 1 of 3");
    t.keys(&["Escape"]);
    t.wait_for("Processes: 3 of 3");
    t.keys(&["?"]);
    t.wait_for("Filter processes by text");
    t.keys(&["Escape", "q"]);
    t.wait_for("EXITED 0");
    assert!(!t.alternate_on(), "the alternate screen was left");
    assert!(
        !t.screen().contains("SIMULATED"),
        "the UI is gone from the terminal"
    );
    // The simulated node was stopped: no state file, no workload left behind.
    let sim = t.home.path().join("state/partop/sim");
    let left: Vec<_> = std::fs::read_dir(&sim)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_hung_amd_smi_does_not_freeze_the_screen() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("amd-smi");
    std::fs::write(&script, "#!/bin/sh\ncase \"$1\" in version) echo 'AMDSMI Tool: 26.0.2+39589fda | AMDSMI Library version: 26.0.2 | ROCm version: 7.0.2 | amdgpu version: x | amd_hsmp version: N/A';; *) sleep 6061;; esac\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(t) = Tmux::start(
        &format!("--amd-smi {} --timeout 2", script.display()),
        100,
        30,
    ) else {
        return;
    };
    // No kernel GPUs on this host: amd-smi is the source, read in the background; the screen
    // comes at once and says so.
    t.wait_for("sysfs DOWN");
    // Keys work while every amd-smi call hangs.
    t.keys(&["3"]);
    t.wait_for("3 Processes");
    t.keys(&["?"]);
    t.wait_for("Help");
    t.keys(&["Escape"]);
    // After the per-call limit the sources are reported down, with the reason.
    t.wait_for("timed out after 2s");
    t.wait_for("DOWN");
    t.keys(&["q"]);
    t.wait_for("EXITED 0");
    // Every hung call was killed with its process group: none of the script's sleeps is left.
    common::wait_until("the hung calls to be gone", || {
        common::running("sleep 6061") == 0
    });
}

/// Staging at 80x24: the plan scrolls under the maps, and where each registered model will be
/// relaunched is read on screen, whole (wrapped, never cut), before anything is confirmed.
#[test]
fn staging_at_80x24_shows_where_each_model_is_relaunched() {
    let Some(t) = Tmux::start("--sim cpx-nps4-small-models", 80, 24) else {
        return;
    };
    t.wait_for("64 logical");
    // Staging waits for amd-smi's identity read; then SPX/NPS1 on GPU 0 (NPS is hive-wide).
    t.keys(&["p"]);
    t.wait_for("Stage a partition change");
    t.wait_for("scope GPU 0000:05:00");
    t.keys(&["c", "m"]);
    t.wait_for("staged  SPX/NPS1");
    t.wait_for("more of the plan below");
    // Scroll the plan until the served models show, then read their mapping.
    let mut seen = String::new();
    for _ in 0..40 {
        seen = t.screen();
        if seen.contains("served models:") && seen.contains("mistral-7b") {
            break;
        }
        t.keys(&["Down"]);
    }
    // The plan's lines are inside the overlay's border; join wrapped lines to read one entry.
    let body: Vec<String> = seen
        .lines()
        .filter_map(|l| {
            let l = l.trim_end();
            let inner = l.split('│').nth(1)?;
            Some(inner.trim_end().to_string())
        })
        .collect();
    let text = body.join("\n");
    for m in ["llama-8b-a", "llama-8b-b", "mistral-7b"] {
        let at = text
            .find(&format!("  {m}  "))
            .unwrap_or_else(|| panic!("{m} not on screen:\n{seen}"));
        let entry: String = text[at..].lines().take(3).collect::<Vec<_>>().join(" ");
        assert!(
            entry.contains("-> relaunched on logical GPU") && entry.contains("(0000:"),
            "{m}: {entry}\n{seen}"
        );
    }
    // Nothing was changed: Esc leaves the node as it was.
    t.keys(&["Escape"]);
    t.wait_for("CPX/NPS4×8");
    t.keys(&["q"]);
    t.wait_for("EXITED 0");
}

/// The `--sim` node's state file and its workloads' pids, once it runs.
fn sim_node(home: &std::path::Path) -> (std::path::PathBuf, Vec<u32>, u32) {
    let sim = home.join("state/partop/sim");
    let mut found = None;
    common::wait_until("the simulated node's state file", || {
        found = std::fs::read_dir(&sim)
            .ok()
            .and_then(|d| {
                d.flatten().map(|e| e.path()).find(|p| {
                    p.extension().is_some_and(|x| x == "json")
                        && p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("node-"))
                })
            })
            .and_then(|p| {
                let v: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&p).ok()?).ok()?;
                let pids: Vec<u32> = v["workloads"]
                    .as_array()?
                    .iter()
                    .filter_map(|w| w["pid"].as_u64().and_then(|p| u32::try_from(p).ok()))
                    .collect();
                let owner = u32::try_from(v["owner"]["pid"].as_u64()?).ok()?;
                (!pids.is_empty()).then_some((p, pids, owner))
            });
        found.is_some()
    });
    found.unwrap()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

fn nothing_left(home: &std::path::Path, workloads: &[u32]) {
    let sim = home.join("state/partop/sim");
    common::wait_until("the simulated node to be discarded", || {
        workloads.iter().all(|p| !alive(*p))
            && std::fs::read_dir(&sim).map_or(true, |mut d| d.next().is_none())
    });
}

/// An ssh connection that drops sends partop SIGHUP on a terminal that is gone: it exits
/// cleanly (it used to abort writing to the dead terminal, leaving the simulated node's
/// workloads running); and a partop killed outright has its node discarded by the node's kernel
/// twin. Either way nothing of the node is left.
#[test]
fn a_dropped_terminal_or_a_killed_partop_leaves_nothing_of_the_simulated_node() {
    let t = Tmux::start("--sim", 80, 24).unwrap();
    t.wait_for("16 logical");
    let (_, workloads, owner) = sim_node(t.home.path());
    assert!(workloads.iter().all(|p| alive(*p)));
    std::process::Command::new("tmux")
        .args(["-L", &t.socket, "kill-server"])
        .status()
        .unwrap();
    nothing_left(t.home.path(), &workloads);
    assert!(!alive(owner), "partop exited");

    let t = Tmux::start("--sim", 80, 24).unwrap();
    t.wait_for("16 logical");
    let (_, workloads, owner) = sim_node(t.home.path());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(owner).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    t.wait_for("EXITED 137");
    nothing_left(t.home.path(), &workloads);
}

/// The mouse in a real terminal: a click on a tab opens its view, a click on a row selects it
/// (Enter opens that one), the wheel moves the selection; `q` goes back from Detail instead
/// of quitting, then quits saying the simulated node stops; the terminal's mouse is released.
#[test]
fn mouse_selects_and_q_goes_back_before_quitting() {
    let Some(t) = Tmux::start("--sim", 100, 30) else {
        return;
    };
    t.wait_for("SIMULATED: dpx-nps2-two-models");
    t.wait_for("q quit (stops the sim)");
    assert!(t.mouse_on(), "mouse capture is on");
    // The tab row is the fourth line: click the first letter of "Processes".
    let screen = t.screen();
    let tabs = screen.lines().nth(3).unwrap();
    let x = tabs.find("Processes").expect("the Processes tab");
    t.mouse(0, u16::try_from(tabs[..x].chars().count()).unwrap(), 3);
    t.wait_for("Processes: 3 of 3");
    // Rows start under the border (line 4) and the header (line 5): click the third.
    t.mouse(0, 10, 8);
    common::wait_until("the third row marked", || {
        t.screen().lines().nth(8).is_some_and(|l| l.contains('▶'))
    });
    let row = t.screen().lines().nth(8).unwrap().to_string();
    let pid: String = row
        .trim_start_matches(['│', '▶', ' ', '+'])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert!(!pid.is_empty(), "a pid on the clicked row: {row}");
    // The wheel: up twice from the third row is the first.
    t.mouse(64, 10, 10);
    t.mouse(64, 10, 10);
    common::wait_until("the first row marked", || {
        t.screen().lines().nth(6).is_some_and(|l| l.contains('▶'))
    });
    t.mouse(65, 10, 10);
    t.mouse(65, 10, 10);
    common::wait_until("the third row marked again", || {
        t.screen().lines().nth(8).is_some_and(|l| l.contains('▶'))
    });
    // Enter opens the clicked process; q goes back to the list, the monitor still running.
    t.keys(&["Enter"]);
    t.wait_for(&format!("Process {pid}"));
    t.wait_for("q back");
    t.keys(&["q"]);
    t.wait_for("Processes: 3 of 3");
    assert!(t.alternate_on(), "q in Detail went back, it did not quit");
    // Help: q closes it; then q quits and says the node stopped.
    // The wheel scrolls the help down to its legend.
    t.keys(&["?"]);
    t.wait_for(" Help ");
    for _ in 0..12 {
        t.mouse(65, 50, 15);
    }
    t.wait_for("legend");
    t.keys(&["q"]);
    t.wait_for("q quit (stops the sim)");
    t.keys(&["q"]);
    t.wait_for("EXITED 0");
    t.wait_for("stopped the simulated node (dpx-nps2-two-models)");
    assert!(!t.alternate_on());
    assert!(!t.mouse_on(), "the terminal's mouse is released on exit");
}
