//! A `partop serve` child on a free loopback port, scraped once, and what the tests read in
//! its answer: the serve-and-scrape the NVIDIA replay tests (and the MIG one) share.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

/// `GET path` on 127.0.0.1:port: (status, body); (0, "") when nothing answers yet.
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    let code = r
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = r.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (code, body)
}

/// A loopback port free now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `serve` (a partop command line ending in `serve`) on a free loopback port, waits until
/// it is ready, and returns its `/metrics` once; the child is stopped.
pub fn scrape_once(mut serve: Command) -> String {
    let port = free_port();
    let mut child = serve
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    super::wait_until("partop serve to be ready", || {
        http_get(port, "/-/ready").0 == 200
    });
    let body = http_get(port, "/metrics").1;
    let _ = child.kill();
    let _ = child.wait();
    body
}

/// partop on an NVIDIA recording (`--nvidia-replay FILE`).
pub fn nvidia_replay(recording: &Path) -> Command {
    let mut c = super::partop();
    c.arg("--nvidia-replay").arg(recording);
    c
}

/// The snapshot an NVIDIA recording replays to (`snapshot --json`).
pub fn replayed_snapshot(recording: &Path) -> partop::domain::Snapshot {
    let o = super::run(nvidia_replay(recording).args(["snapshot", "--json"]), "");
    assert_eq!(o.code, 0, "{}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap()
}

/// What an NVIDIA recording's replay serves on `/metrics`.
pub fn replay_served(recording: &Path) -> String {
    let mut serve = nvidia_replay(recording);
    serve.arg("serve");
    scrape_once(serve)
}

/// The dcgm-exporter series names in a `/metrics` body.
pub fn dcgm_names(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| l.starts_with("DCGM_FI_"))
        .filter_map(|l| l.split('{').next().map(str::to_string))
        .collect()
}
