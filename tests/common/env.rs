//! A simulated node with its own state and config directories, and the commands tests run
//! against it (plan, apply, journal, modes).

use super::{Node, Out, partop, run};
use partop::sim::state::SimState;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A simulated node with its own state and config directories.
pub struct SimEnv {
    pub node: Node,
}

impl SimEnv {
    pub fn new(scenario: &str) -> Self {
        Self {
            node: Node::start(scenario),
        }
    }

    pub fn xdg(&self) -> PathBuf {
        self.node.dir.path().join("xdg")
    }

    pub fn cmd(&self) -> Command {
        let mut c = partop();
        c.env("XDG_STATE_HOME", self.xdg())
            .env("XDG_CONFIG_HOME", self.xdg());
        c.arg("--sim-state").arg(&self.node.state);
        c
    }

    pub fn config(&self, text: &str) {
        std::fs::create_dir_all(self.xdg().join("partop")).unwrap();
        std::fs::write(self.xdg().join("partop/config.toml"), text).unwrap();
    }

    pub fn plan(&self, args: &str, name: &str) -> PathBuf {
        let o = run(
            self.cmd()
                .arg("plan")
                .args(args.split_whitespace())
                .arg("--json"),
            "",
        );
        assert_eq!(o.code, 0, "plan {args}: {}", o.stderr);
        let p = self.node.dir.path().join(name);
        std::fs::write(&p, o.stdout).unwrap();
        p
    }

    pub fn apply(&self, plan: &Path, flags: &str, stdin: &str) -> Out {
        run(
            self.cmd()
                .arg("apply")
                .arg(plan)
                .args(flags.split_whitespace()),
            stdin,
        )
    }

    pub fn spawn_apply(&self, plan: &Path, flags: &str) -> Child {
        self.cmd()
            .arg("apply")
            .arg(plan)
            .args(flags.split_whitespace())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    pub fn journal_path(&self) -> PathBuf {
        self.xdg().join("partop/journal.jsonl")
    }

    pub fn journal(&self) -> Vec<partop::exec::journal::Entry> {
        partop::exec::journal::read(&self.journal_path()).unwrap().0
    }

    /// The resume command `partop journal` prints for the node's unfinished run.
    pub fn printed_resume(&self) -> String {
        let o = run(self.cmd().arg("journal"), "");
        let text = format!("{}{}", o.stdout, o.stderr);
        let at = text
            .find("Continue it with `")
            .unwrap_or_else(|| panic!("no resume command in `partop journal`:\n{text}"));
        let rest = &text[at + "Continue it with `".len()..];
        rest[..rest.find('`').unwrap()].to_string()
    }

    /// `cmd` pasted as it is into a shell of the operator's on this node: this partop first on
    /// PATH, the node's config and state directories, no `PARTOP_SIM_STATE` (what the command
    /// names is all it has).
    pub fn pasted(&self, cmd: &str) -> Command {
        let bin = Path::new(env!("CARGO_BIN_EXE_partop")).parent().unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(cmd)
            .env("PATH", path)
            .env("XDG_STATE_HOME", self.xdg())
            .env("XDG_CONFIG_HOME", self.xdg())
            .env_remove("PARTOP_SIM_STATE");
        c
    }

    pub fn state(&self) -> SimState {
        SimState::load(&self.node.state).unwrap()
    }

    pub fn modes(&self) -> (String, String, usize) {
        let s = self.state();
        (
            s.gpus[0].modes.compute.to_string(),
            s.gpus[0].modes.memory.to_string(),
            s.logical().len(),
        )
    }

    pub fn pid_of(&self, name: &str) -> u32 {
        self.state()
            .workloads
            .iter()
            .find(|w| w.spec.name == name)
            .and_then(|w| w.pid)
            .unwrap()
    }
}
