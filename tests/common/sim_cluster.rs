//! `partop sim cluster` as a child on a test's control plane: started and waited for until it
//! says it is ready (what it says kept for failure messages), stopped with SIGTERM when
//! dropped (alone, or with a control plane of its own: `start_cluster`); and waiting for a
//! node's label, as the cluster's managers move it.

use super::control_plane::{ControlPlane, label, node};
use super::{Said, gather, partop};
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Waits (at most `secs`) until `node`'s label `k` is `v`.
pub fn until_label(
    cp: &ControlPlane,
    name: &str,
    k: &str,
    v: &str,
    secs: u64,
    said: &Mutex<String>,
) {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if label(&node(cp, name), k) == v {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "{name}: {k} never became {v:?}: {}\nthe simulator said:\n{}",
        node(cp, name)["metadata"]["labels"],
        said.lock().unwrap()
    );
}

/// The running simulated cluster: its process and what it said.
pub struct Sim {
    child: Child,
    /// Its stdout and stderr so far.
    pub said: Said,
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// Starts `partop sim cluster` with `args` on `cp`, its files under `dir`, and waits (two
/// minutes at most) until it says `ready:`.
pub fn start_sim(cp: &ControlPlane, dir: &std::path::Path, args: &[&str]) -> Sim {
    let mut c = partop();
    c.env("PARTOP_SIM_AMD_SMI_COST", "off")
        .args(["sim", "cluster", "--kubeconfig"])
        .arg(cp.admin())
        .arg("--dir")
        .arg(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let said = gather(&mut child);
    let end = Instant::now() + Duration::from_secs(120);
    while !said.lock().unwrap().contains("ready:") {
        assert!(
            Instant::now() < end && child.try_wait().unwrap().is_none(),
            "sim cluster did not get ready: {}",
            said.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Sim { child, said }
}

/// A test's own simulated cluster: a control plane started, a scratch directory (the
/// simulator's files under its `sim/`), and `partop sim cluster` with `args` on it, ready. Bound
/// as `let (cp, dir, sim) = …`, the simulator is stopped first, the control plane last.
pub fn start_cluster(args: &[&str]) -> (ControlPlane, tempfile::TempDir, Sim) {
    let cp = ControlPlane::start();
    let dir = tempfile::tempdir().unwrap();
    let sim = start_sim(&cp, &dir.path().join("sim"), args);
    (cp, dir, sim)
}
