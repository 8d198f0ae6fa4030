//! How the fleet view changes nodes ([`Rollouts`]): exactly `partop fleet plan` and `partop
//! fleet apply --confirmed FP` (the set's fingerprint typed in the view), run as this partop's own
//! commands on the nodes picked, so the view shows what they print line by line and the
//! rollout is the one the command line runs (verified set, fleet journal, node by node, the
//! first failure stops it). [`rollout_command`] is the one place that names that protocol.

use crate::cli::args::FleetArgs;
use crate::collect::fleet::{NodeSpec, Target};
use crate::domain::{ComputeMode, MemoryMode};
use crate::ui::fleet::Staged;
use crate::ui::fleet::app::Rollouts;
use std::ffi::OsString;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};

/// The longest line of a command's output passed on (the rest of it is dropped).
const MAX_LINE: u64 = 16 << 10;

/// `partop fleet plan` and `partop fleet apply` on the nodes of the view.
pub struct CommandRollouts {
    /// This partop.
    exe: PathBuf,
    /// Options before `fleet`: the audit journal (the fleet journal lies beside it).
    global: Vec<OsString>,
    /// Options of `fleet`: how the nodes are reached.
    fleet: Vec<OsString>,
    /// The nodes, as resolved.
    nodes: Vec<NodeSpec>,
    /// Where hosts files and sets are saved.
    dir: PathBuf,
}

impl CommandRollouts {
    /// For the view's nodes and transport options.
    pub fn new(a: &FleetArgs, nodes: &[NodeSpec], settings: &crate::config::Settings) -> Self {
        Self::with(
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("partop")),
            &settings.journal,
            fleet_options(a),
            nodes,
            &crate::config::paths::state_dir().join("fleet-sets"),
        )
    }

    /// The same with the partop to run, the audit journal (the fleet journal lies beside it),
    /// the options of `fleet` ([`fleet_options`]) and where sets are saved given.
    pub fn with(
        exe: PathBuf,
        journal: &Path,
        fleet: Vec<OsString>,
        nodes: &[NodeSpec],
        dir: &Path,
    ) -> Self {
        Self {
            exe,
            global: vec!["--journal".into(), journal.as_os_str().to_owned()],
            fleet,
            nodes: nodes.to_vec(),
            dir: dir.to_path_buf(),
        }
    }

    /// A hosts file naming exactly `names` (each with its partop), for `fleet plan`.
    fn hosts_file(&self, names: &[String], stamp: u64) -> Result<PathBuf, String> {
        let mut text = String::new();
        for n in names {
            match self.nodes.iter().find(|x| &x.name == n).map(|x| &x.target) {
                Some(Target::Ssh { dest, partop }) => {
                    text.push_str(&format!("{} partop={}\n", quoted(dest), quoted(partop)));
                }
                _ => return Err(format!("{n}: read only here; nothing was planned")),
            }
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let f = self.dir.join(format!("hosts-{stamp}.txt"));
        crate::exec::safe_file::write_atomic(&f, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", f.display()))?;
        Ok(f)
    }
}

/// The options of `fleet` that say how the nodes are reached, as the view was given them.
pub fn fleet_options(a: &FleetArgs) -> Vec<OsString> {
    let mut o: Vec<OsString> = vec![
        "--connect-timeout".into(),
        a.connect_timeout.to_string().into(),
        "--concurrency".into(),
        a.concurrency.to_string().into(),
    ];
    if let Some(c) = &a.ssh_config {
        o.extend(["--ssh-config".into(), c.clone().into_os_string()]);
    }
    o
}

/// A hosts-file word in double quotes (a path with blanks, `#` or quotes reads back as written).
fn quoted(w: &str) -> String {
    format!("\"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The one call into the rollout protocol: `partop [global] fleet [fleet] <action…>`.
pub fn rollout_command(
    exe: &Path,
    global: &[OsString],
    fleet: &[OsString],
    action: &[OsString],
) -> std::process::Command {
    let mut c = std::process::Command::new(exe);
    c.args(global).arg("fleet").args(fleet).args(action);
    c
}

/// Runs `c`, each line of its output said as it comes (bounded), and returns whether it
/// succeeded and its last lines.
fn said(mut c: std::process::Command, say: &(dyn Fn(String) + Sync)) -> Result<(), String> {
    use std::process::Stdio;
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run partop: {e}"))?;
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let last = std::sync::Mutex::new(Vec::<String>::new());
    let pass = |r: Option<Box<dyn std::io::Read + Send>>| {
        let Some(r) = r else { return };
        let mut r = std::io::BufReader::new(r);
        loop {
            let mut buf = Vec::new();
            match std::io::Read::take(&mut r, MAX_LINE).read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if buf.last() != Some(&b'\n') {
                // Past the bound: the rest of the line is dropped.
                let _ = r.skip_until(b'\n');
            }
            let l = String::from_utf8_lossy(&buf).trim_end().to_string();
            if let Ok(mut v) = last.lock()
                && !l.trim().is_empty()
            {
                // Every line reached the view as it came: the failure keeps only the last (the
                // command's own summary), not a second copy of the others.
                v.clear();
                v.push(l.clone());
            }
            say(l);
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| pass(err.map(|e| Box::new(e) as Box<dyn std::io::Read + Send>)));
        pass(out.map(|o| Box::new(o) as Box<dyn std::io::Read + Send>));
    });
    let st = child.wait().map_err(|e| e.to_string())?;
    if st.success() {
        return Ok(());
    }
    let last = last.into_inner().unwrap_or_default().join(" / ");
    Err(format!("{last} ({st})"))
}

impl Rollouts for CommandRollouts {
    fn plan(
        &self,
        nodes: &[String],
        compute: Option<ComputeMode>,
        memory: Option<MemoryMode>,
        say: &(dyn Fn(String) + Sync),
    ) -> Result<Staged, String> {
        let stamp = crate::collect::clock::now_ms();
        let hosts = self.hosts_file(nodes, stamp)?;
        let file = self.dir.join(format!("set-{stamp}.json"));
        let mut action: Vec<OsString> = vec!["--hosts-file".into(), hosts.into_os_string()];
        action.push("plan".into());
        if let Some(c) = compute {
            action.extend(["--compute".into(), c.to_string().into()]);
        }
        if let Some(m) = memory {
            action.extend(["--memory".into(), m.to_string().into()]);
        }
        action.extend(["--out".into(), file.clone().into_os_string()]);
        said(
            rollout_command(&self.exe, &self.global, &self.fleet, &action),
            say,
        )?;
        let text = crate::collect::small_file::operator_text(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let set: crate::exec::rollout::PlanSet = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a plan set: {e}", file.display()))?;
        Ok(Staged {
            fingerprint: set.fingerprint,
            file,
        })
    }

    fn roll_out(&self, set: &Staged, say: &(dyn Fn(String) + Sync)) -> Result<(), String> {
        // What was typed confirms this set and no other: the command rolls out only a set
        // whose content, as it reads and verifies it, holds exactly this fingerprint (a file
        // changed after the typing is refused there, with nothing done).
        let action: Vec<OsString> = vec![
            "apply".into(),
            set.file.clone().into_os_string(),
            "--confirmed".into(),
            set.fingerprint.clone().into(),
        ];
        said(
            rollout_command(&self.exe, &self.global, &self.fleet, &action),
            say,
        )
        .map_err(|e| format!("the rollout stopped: {e}"))
    }
}
