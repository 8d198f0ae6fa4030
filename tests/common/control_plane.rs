//! A real Kubernetes control plane on loopback for the tests (issues 25 and 26): Debian's etcd,
//! and kube-apiserver and kube-controller-manager built by `scripts/control-plane.sh` from the
//! `k8s.io/kubernetes` module at the pinned version (cached: a machine builds them once). No
//! mock API server: what partop sends is judged by the real one. Missing pieces fail the test
//! with what to install; nothing is skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::free_port;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The version `scripts/control-plane.sh` builds by default.
pub const VERSION: &str = "1.37.2";

/// The bearer tokens the API server accepts (`--token-file`): an administrator, and a user with
/// no rights until a test binds a role to it (RBAC refusals are tested with it).
pub const ADMIN_TOKEN: &str = "partop-test-admin";
pub const LIMITED_TOKEN: &str = "partop-test-limited";
pub const LIMITED_USER: &str = "limited";

/// A running control plane; stopped (every process killed, its files removed) on drop.
pub struct ControlPlane {
    pub dir: tempfile::TempDir,
    pub server: String,
    /// Where the binaries are (kubectl of the same version among them).
    pub bin: PathBuf,
    procs: Vec<Child>,
}

/// The directory of the built binaries: built (or found in the cache) by the repository's script.
fn binaries() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/control-plane.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(VERSION)
        .stderr(Stdio::inherit())
        .output()
        .expect("running scripts/control-plane.sh");
    assert!(
        out.status.success(),
        "scripts/control-plane.sh failed: the control plane is built with the Go toolchain (`go` on PATH) and its module proxy; see the script's message above"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn etcd() -> PathBuf {
    for p in ["/usr/bin/etcd", "/usr/local/bin/etcd"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "etcd is missing: apt-get install -y etcd-server (the control-plane tests start it on loopback)"
    );
}

fn spawn(dir: &Path, name: &str, cmd: &mut Command) -> Child {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"))
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager (the disruption controller
    /// computes what a PodDisruptionBudget allows) and waits until the API server is ready.
    pub fn start() -> Self {
        let bin = binaries();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let key = d.join("sa.key");
        let ok = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&key)
            .arg("2048")
            .stderr(Stdio::null())
            .status()
            .expect("openssl is missing: apt-get install -y openssl");
        assert!(ok.success(), "openssl genrsa failed");
        let ok = Command::new("openssl")
            .args(["rsa", "-in"])
            .arg(&key)
            .args(["-pubout", "-out"])
            .arg(d.join("sa.pub"))
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success(), "openssl rsa failed");
        std::fs::write(
            d.join("tokens.csv"),
            format!("{ADMIN_TOKEN},admin,1,system:masters\n{LIMITED_TOKEN},{LIMITED_USER},2\n"),
        )
        .unwrap();
        let (client, peer, secure) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{client}");
        let mut procs = vec![spawn(
            d,
            "etcd",
            Command::new(etcd())
                .arg("--data-dir")
                .arg(d.join("etcd"))
                .arg(format!("--listen-client-urls={etcd_url}"))
                .arg(format!("--advertise-client-urls={etcd_url}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                ))
                .arg(format!("--initial-cluster=default=http://127.0.0.1:{peer}")),
        )];
        procs.push(spawn(
            d,
            "kube-apiserver",
            Command::new(bin.join("kube-apiserver"))
                .arg(format!("--etcd-servers={etcd_url}"))
                .arg("--bind-address=127.0.0.1")
                .arg("--advertise-address=127.0.0.1")
                // Loopback is refused as an advertised endpoint otherwise.
                .arg("--endpoint-reconciler-type=none")
                .arg(format!("--secure-port={secure}"))
                .arg(format!("--cert-dir={}", d.join("certs").display()))
                .arg("--service-account-issuer=https://kubernetes.default.svc")
                .arg(format!(
                    "--service-account-key-file={}",
                    d.join("sa.pub").display()
                ))
                .arg(format!(
                    "--service-account-signing-key-file={}",
                    key.display()
                ))
                .arg("--authorization-mode=RBAC")
                .arg(format!(
                    "--token-auth-file={}",
                    d.join("tokens.csv").display()
                ))
                .arg("--service-cluster-ip-range=10.96.0.0/16"),
        ));
        let mut cp = Self {
            server: format!("https://127.0.0.1:{secure}"),
            dir,
            bin,
            procs,
        };
        cp.write_kubeconfig("admin.kubeconfig", ADMIN_TOKEN);
        cp.write_kubeconfig("limited.kubeconfig", LIMITED_TOKEN);
        cp.wait_ready();
        let kcm = cp.dir.path().join("admin.kubeconfig");
        let child = spawn(
            cp.dir.path(),
            "kube-controller-manager",
            Command::new(cp.bin.join("kube-controller-manager"))
                .arg(format!("--kubeconfig={}", kcm.display()))
                .arg("--bind-address=127.0.0.1")
                .arg("--secure-port=0")
                .arg("--leader-elect=false")
                .arg("--controllers=disruption,daemonset,replicaset,deployment,garbagecollector,serviceaccount-token")
                .arg(format!(
                    "--service-account-private-key-file={}",
                    key.display()
                ))
                .arg("--use-service-account-credentials=false"),
        );
        cp.procs.push(child);
        cp
    }

    /// The kubeconfig of the administrator (`system:masters`).
    pub fn admin(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// The kubeconfig of a user with no rights but those a test binds to `limited`.
    pub fn limited(&self) -> PathBuf {
        self.dir.path().join("limited.kubeconfig")
    }

    /// The serving certificate the API server made for itself (the kubeconfig's CA).
    fn ca(&self) -> PathBuf {
        self.dir.path().join("certs/apiserver.crt")
    }

    fn write_kubeconfig(&self, name: &str, token: &str) {
        // The CA file appears when the API server starts; the kubeconfig names it.
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: u\ncurrent-context: test\n",
            server = self.server,
            ca = self.ca().display(),
        );
        std::fs::write(self.dir.path().join(name), text).unwrap();
    }

    fn wait_ready(&mut self) {
        let end = Instant::now() + Duration::from_secs(90);
        while Instant::now() < end {
            if self.ca().exists() && self.kubectl(&self.admin(), &["get", "--raw", "/readyz"]).0 {
                return;
            }
            for p in &mut self.procs {
                if let Ok(Some(st)) = p.try_wait() {
                    panic!(
                        "a control-plane process exited ({st}) before the API server was ready; logs in {}:\n{}",
                        self.dir.path().display(),
                        self.logs()
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("the API server was not ready in 90 s:\n{}", self.logs());
    }

    /// The tails of the processes' logs (for a failure message).
    pub fn logs(&self) -> String {
        ["etcd", "kube-apiserver", "kube-controller-manager"]
            .iter()
            .map(|n| {
                let t = std::fs::read_to_string(self.dir.path().join(format!("{n}.log")))
                    .unwrap_or_default();
                let lines: Vec<&str> = t.lines().collect();
                format!(
                    "--- {n}\n{}",
                    lines[lines.len().saturating_sub(15)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Runs kubectl with `kubeconfig`: (success, stdout + stderr).
    pub fn kubectl(&self, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
        let o = Command::new(self.bin.join("kubectl"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(args)
            .output()
            .expect("kubectl (built by scripts/control-plane.sh)");
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().rev() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

/// kubectl as the admin: its output (a failure fails the test, naming the command).
pub fn kube(cp: &ControlPlane, args: &[&str]) -> String {
    let (ok, out) = cp.kubectl(&cp.admin(), args);
    assert!(ok, "kubectl {args:?}: {out}");
    out
}

/// `yaml` (one or more objects) applied as the admin, through a file under `dir`.
pub fn apply_yaml(cp: &ControlPlane, dir: &Path, yaml: &str) {
    let f = dir.join(format!("obj-{}.yaml", yaml.len()));
    std::fs::write(&f, yaml).unwrap();
    kube(cp, &["apply", "-f", f.to_str().unwrap()]);
}

/// Sets `status` (a JSON object's `status`, as a kubelet reports it) on Node `name` through
/// the status subresource: no kubelet runs, so the test says what one would.
pub fn patch_status(cp: &ControlPlane, name: &str, status: &serde_json::Value) {
    kube(
        cp,
        &[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
    );
}

/// A Node object, as JSON.
pub fn node(cp: &ControlPlane, name: &str) -> serde_json::Value {
    serde_json::from_str(&kube(cp, &["get", "node", name, "-o", "json"])).unwrap()
}

/// A label of an object (empty when it has none).
pub fn label(n: &serde_json::Value, k: &str) -> String {
    n["metadata"]["labels"][k]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Whether a Node (as JSON) is marked unschedulable.
pub fn cordoned(n: &serde_json::Value) -> bool {
    n["spec"]["unschedulable"].as_bool().unwrap_or(false)
}

/// The reasons of the events about object `name` in `default`.
pub fn reasons(cp: &ControlPlane, name: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&kube(
        cp,
        &[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &format!("involvedObject.name={name}"),
            "-o",
            "json",
        ],
    ))
    .unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or("").to_string())
        .collect()
}
