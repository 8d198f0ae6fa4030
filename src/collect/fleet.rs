//! Reading a fleet: one task per node, each on the engines admins already run. Over ssh (the
//! system `ssh` in BatchMode, multiplexed with ControlMaster, with connect timeouts) the node
//! runs `partop stream --summary` and sends one JSON line per sample, so nothing on the node
//! listens on the network; over HTTP it reads a `partop serve`'s `/events?summary=1`; from
//! Prometheus it queries partop's (or AMD's exporter's) series. A slow node only delays its own
//! row; a node that fails is retried with backoff and its row says why.

use crate::domain::fleet::NodeSummary;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::{Semaphore, mpsc};

/// How a node is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// An ssh destination, and the partop to run there.
    Ssh {
        /// `host`, `user@host`, or a Host of the ssh config.
        dest: String,
        /// The partop on the node.
        partop: String,
    },
    /// A node without partop: its amd-smi over ssh, at a slow cadence, read only.
    SshAmdSmi {
        /// The ssh destination.
        dest: String,
        /// The amd-smi on the node.
        amd_smi: String,
    },
    /// A `partop serve` endpoint (`host:port`).
    Http {
        /// `host:port`.
        addr: String,
    },
}

/// One node of the fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// What the operator called it.
    pub name: String,
    /// How it is reached.
    pub target: Target,
    /// The node's amd-smi, read over ssh when partop is not installed there.
    pub amd_smi: String,
}

/// Whether a node reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Connecting (first time, or again after a failure).
    Connecting,
    /// Samples arrive.
    Up,
    /// Not reporting, and why.
    Down(String),
}

/// What node tasks report.
#[derive(Clone, Debug, PartialEq)]
pub enum FleetEvent {
    /// A node's newest row.
    Row(String, Box<NodeSummary>),
    /// A node's reachability changed.
    Reach(String, Reach),
}

/// A node opened from the fleet: its name, and the target and transport it was read through
/// (what the monitor opened on it reads its journal through; nothing is changed through it).
#[derive(Clone, Debug)]
pub struct Remote {
    /// What the operator called it.
    pub name: String,
    /// How it is reached.
    pub target: Target,
    /// How it was read.
    pub transport: Transport,
}

impl Remote {
    /// Where it is read from, in words (`ssh node01`, `partop serve 10.0.0.5:9477`).
    pub fn via(&self) -> String {
        match &self.target {
            Target::Ssh { dest, .. } if rehearsal(dest).is_some() => format!("rehearsal {dest}"),
            Target::Ssh { dest, .. } => format!("ssh {dest}"),
            Target::SshAmdSmi { dest, .. } => format!("amd-smi over ssh {dest}"),
            Target::Http { addr } => format!("partop serve {addr}"),
        }
    }
}

/// How nodes are read.
#[derive(Clone, Debug)]
pub struct Transport {
    /// The ssh program (`ssh`).
    pub ssh: String,
    /// An ssh config file (`-F`), when given.
    pub ssh_config: Option<PathBuf>,
    /// Where ControlMaster sockets live.
    pub control_dir: PathBuf,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Seconds between samples on the nodes.
    pub refresh: u32,
    /// Handshakes at once (streams, once up, do not count).
    pub concurrency: usize,
    /// The partop a rehearsal node runs in ssh's place (this one).
    pub local: PathBuf,
}

/// The words of a hosts-file line: split at blanks, `"…"` quoting inside a word (with `\"` and
/// `\\`), so `partop="/opt/my tools/partop"` is one word; `#` outside quotes starts a comment.
fn host_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut w: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '#' => break,
            c if c.is_whitespace() => {
                if let Some(x) = w.take() {
                    words.push(x);
                }
            }
            '"' => {
                let cur = w.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        None => return Err("a quote is not closed".into()),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(e @ ('"' | '\\')) => cur.push(e),
                            Some(e) => {
                                cur.push('\\');
                                cur.push(e);
                            }
                            None => return Err("a quote is not closed".into()),
                        },
                        Some(x) => cur.push(x),
                    }
                }
            }
            c => w.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(w);
    Ok(words)
}

/// Reads the hosts file: one node per line, `#` comments, `HOST partop=/path` options (quoted
/// when the path has blanks: `partop="/opt/my tools/partop"`), and `http://host:port` for
/// `partop serve` endpoints.
pub fn parse_hosts(text: &str, default_partop: &str) -> Result<Vec<NodeSpec>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let words = host_words(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        let mut words = words.iter().map(String::as_str);
        let Some(first) = words.next() else { continue };
        let mut partop = default_partop.to_string();
        let mut amd_smi = None;
        for w in words {
            match w.split_once('=') {
                Some(("partop", p)) if !p.is_empty() => partop = p.to_string(),
                Some(("amd-smi", p)) if !p.is_empty() => amd_smi = Some(p.to_string()),
                _ => {
                    return Err(format!(
                        "line {}: {w:?} is not an option (partop=/path/to/partop, amd-smi=/path/to/amd-smi)",
                        i + 1
                    ));
                }
            }
        }
        let mut n = spec(first, &partop)?;
        if let (Some(a), Target::Ssh { .. }) = (amd_smi, &n.target) {
            n.amd_smi = a;
        }
        out.push(n);
    }
    Ok(out)
}

/// A node from a word of the command line.
pub fn spec(word: &str, partop: &str) -> Result<NodeSpec, String> {
    // A node's name is printed in every row: a control character is never part of a host name.
    if word.chars().any(char::is_control) {
        return Err(format!(
            "{} holds a control character: not a node name",
            crate::domain::text::escape_controls(word)
        ));
    }
    if let Some(addr) = word.strip_prefix("http://") {
        let addr = addr.trim_end_matches('/');
        if addr.is_empty() || addr.contains('/') {
            return Err(format!("{word}: give http://HOST:PORT of a partop serve"));
        }
        return Ok(NodeSpec {
            name: addr.to_string(),
            target: Target::Http {
                addr: addr.to_string(),
            },
            amd_smi: "amd-smi".into(),
        });
    }
    // A rehearsal node: this partop on a simulator state, reached as an ssh node is.
    if let Some(state) = rehearsal(word) {
        if state.as_os_str().is_empty() {
            return Err(format!(
                "{word}: give {REHEARSE}STATE, a simulated node's state (partop sim start … --state STATE)"
            ));
        }
        return Ok(NodeSpec {
            name: word.to_string(),
            target: Target::Ssh {
                dest: word.to_string(),
                partop: partop.to_string(),
            },
            amd_smi: "amd-smi".into(),
        });
    }
    if word.starts_with('-') || word.contains(char::is_whitespace) || word.is_empty() {
        return Err(format!("{word:?} is not an ssh destination"));
    }
    Ok(NodeSpec {
        name: word.to_string(),
        target: Target::Ssh {
            dest: word.to_string(),
            partop: partop.to_string(),
        },
        amd_smi: "amd-smi".into(),
    })
}

/// The `Host` patterns of an ssh config without wildcards: the nodes it names.
pub fn hosts_of_ssh_config(text: &str) -> Vec<String> {
    let mut v = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        let Some(rest) = t
            .strip_prefix("Host ")
            .or_else(|| t.strip_prefix("host "))
            .or_else(|| t.strip_prefix("Host\t"))
        else {
            continue;
        };
        for h in rest.split_whitespace() {
            if !h.contains(['*', '?', '!']) && !v.iter().any(|x| x == h) {
                v.push(h.to_string());
            }
        }
    }
    v
}

/// What ssh's exit and stderr say, in words an operator acts on.
pub fn ssh_reason(code: Option<i32>, stderr: &str, had_samples: bool) -> String {
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let has = |s: &str| stderr.contains(s);
    if has("REMOTE HOST IDENTIFICATION HAS CHANGED") || has("Host key verification failed") {
        return "host key mismatch: refused (the node's key is not the one in known_hosts; check it before trusting it)".into();
    }
    if has("Permission denied") {
        return format!("ssh login refused: {last}");
    }
    if has("Connection refused")
        || has("timed out")
        || has("No route to host")
        || has("Could not resolve")
        || has("Name or service not known")
        || has("Network is unreachable")
    {
        return format!("unreachable: {last}");
    }
    if code == Some(127) || has("command not found") || has("No such file or directory") {
        return format!(
            "partop is not installed on the node (or not on its PATH: give partop=/path in the hosts file): {last}"
        );
    }
    if had_samples {
        return format!(
            "the stream stopped (exit {}){}",
            code.map_or_else(|| "by signal".into(), |c| c.to_string()),
            if last.is_empty() {
                String::new()
            } else {
                format!(": {last}")
            }
        );
    }
    format!(
        "exited {} before a sample{}",
        code.map_or_else(|| "by signal".into(), |c| c.to_string()),
        if last.is_empty() {
            String::new()
        } else {
            format!(": {last}")
        }
    )
}

/// One line of a stream: a fleet row, or a whole document reduced to one; or why it is neither.
pub fn parse_line(line: &str) -> Result<NodeSummary, serde_json::Error> {
    let v: serde_json::Value = serde_json::from_str(line)?;
    if v.get("gpus").is_some() {
        let mut snap: crate::domain::Snapshot = serde_json::from_value(v.clone())?;
        // A node's document is outside data: its last check runs here too.
        crate::domain::sanity::check(&mut snap);
        let findings: Vec<crate::domain::findings::Finding> = v
            .get("findings")
            .and_then(|f| serde_json::from_value(f.clone()).ok())
            .unwrap_or_default();
        let apply = v
            .get("apply")
            .and_then(|a| serde_json::from_value(a.clone()).ok());
        return Ok(crate::domain::fleet::summarize(&snap, &findings, apply));
    }
    serde_json::from_value(v)
}

/// Why line `n` of a node's stream is not a sample, in words for the row: serde's reason placed
/// on the stream's line, and the start of the line, escaped and cut (a hostile node's text
/// reaches the operator's terminal only as visible escapes, and only so much of it).
pub fn invalid_stream(n: usize, line: &str, e: &serde_json::Error) -> String {
    let mut why = e.to_string();
    let at = if e.line() > 0 {
        let own = format!(" at line {} column {}", e.line(), e.column());
        if let Some(x) = why.strip_suffix(&own) {
            why = x.to_string();
        }
        format!("line {n} column {}", e.column())
    } else {
        format!("line {n}")
    };
    format!(
        "invalid stream: {} at {at} (the line begins {:?})",
        cut(&why, 160),
        cut(line.trim(), 60)
    )
}

/// `s` with control characters escaped, at most `max` characters of it, `…` when cut.
fn cut(s: &str, max: usize) -> String {
    let e = crate::domain::text::escape_controls(s);
    if e.chars().count() <= max {
        return e.into_owned();
    }
    e.chars().take(max).chain(std::iter::once('…')).collect()
}

/// The prefix of a rehearsal node's destination: `rehearse:STATE` is a simulated node (a
/// `partop sim start … --state STATE`) changed as a real one is, without ssh.
pub const REHEARSE: &str = "rehearse:";

/// The simulator state a rehearsal destination names (None for an ssh destination).
pub fn rehearsal(dest: &str) -> Option<&std::path::Path> {
    dest.strip_prefix(REHEARSE).map(std::path::Path::new)
}

/// What a rehearsal node keeps of its own (journal, lock, config), as a real node does on
/// its disk: beside its simulator state, so two rehearsal nodes never share a journal.
pub fn rehearsal_home(state: &std::path::Path) -> PathBuf {
    let mut h = state.as_os_str().to_owned();
    h.push(".node");
    PathBuf::from(h)
}

/// The one way a command reaches a node (its stream, a plan, an apply, a verify, its
/// journal): `remote` is the node's command line, its first word the partop there. Over ssh
/// it is ssh's argv ([`ssh_argv`]); on a rehearsal node it is the same words run by this
/// partop on the node's simulator state, with the node's own state and config directories.
pub fn node_command(t: &Transport, dest: &str, remote: &[String]) -> std::process::Command {
    if let Some(state) = rehearsal(dest) {
        let home = rehearsal_home(state);
        let mut c = std::process::Command::new(&t.local);
        c.args(remote.iter().skip(1))
            .env("PARTOP_SIM_STATE", state)
            .env("XDG_STATE_HOME", home.join("state"))
            .env("XDG_CONFIG_HOME", home.join("config"));
        return c;
    }
    let mut c = std::process::Command::new(&t.ssh);
    c.args(ssh_argv(t, dest, remote));
    c
}

/// The program [`node_command`] runs for `dest`, for messages.
pub fn node_program(t: &Transport, dest: &str) -> String {
    if rehearsal(dest).is_some() {
        "this partop (rehearsal)".into()
    } else {
        t.ssh.clone()
    }
}

/// Runs `remote` on the node at `dest` ([`node_command`]) with `stdin`, within `limit`:
/// (exit code, stdout, stderr). Blocking; each output bounded.
pub fn run_on(
    t: &Transport,
    dest: &str,
    remote: &[String],
    stdin: &str,
    limit: Duration,
) -> (Option<i32>, String, String) {
    let mut child = match node_command(t, dest, remote)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            let p = node_program(t, dest);
            return (None, String::new(), format!("cannot run {p}: {e}"));
        }
    };
    if let Some(mut i) = child.stdin.take() {
        let _ = std::io::Write::write_all(&mut i, stdin.as_bytes());
    }
    // Each output read to at most 64 MiB (a plan, a snapshot, a journal: far less), the rest
    // drained unread, so a node cannot grow this machine's memory without end.
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                use std::io::Read as _;
                let _ = (&mut r).take(64 << 20).read_to_end(&mut buf);
                let _ = std::io::copy(&mut r, &mut std::io::sink());
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(st)) => (
            st.code(),
            out.join().unwrap_or_default(),
            err.join().unwrap_or_default(),
        ),
        Ok(Err(e)) => (None, String::new(), e.to_string()),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
                nix::sys::signal::Signal::SIGKILL,
            );
            (
                None,
                String::new(),
                format!("no answer within {}s", limit.as_secs()),
            )
        }
    }
}

/// The ssh argv that runs `args` on `dest`.
pub fn ssh_argv(t: &Transport, dest: &str, remote: &[String]) -> Vec<String> {
    let mut a = vec![
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        format!("ConnectTimeout={}", t.connect_timeout.as_secs().max(1)),
        "-o".into(),
        "ControlMaster=auto".into(),
        "-o".into(),
        // One master connection per destination as written: two aliases of one host (other
        // users, other SetEnv) never share a session.
        format!(
            "ControlPath={}/{}",
            t.control_dir.display(),
            crate::domain::fingerprint::fnv(dest)
        ),
        "-o".into(),
        // The node's stream is itself the master (no background master beside it: one ssh
        // process per node, not two); Enter and rollouts multiplex through it while it runs.
        "ControlPersist=no".into(),
        "-o".into(),
        "ServerAliveInterval=5".into(),
        "-o".into(),
        "ServerAliveCountMax=3".into(),
    ];
    if let Some(c) = &t.ssh_config {
        a.push("-F".into());
        a.push(c.display().to_string());
    }
    a.push(dest.into());
    a.push("--".into());
    // ssh hands the node's shell one line: each word quoted for it, so a path with blanks or
    // `;` (a hosts file's partop=, --remote-partop) is run as that one path, never split or
    // run as a second command.
    a.extend(
        remote
            .iter()
            .map(|w| crate::domain::text::shell_quote(w).into_owned()),
    );
    a
}

/// The most a node may send in one line (a whole snapshot document of a large node is well
/// under it).
const MAX_LINE: usize = 4 << 20;

/// A node's stream, read a line at a time and never more than [`MAX_LINE`] of one: a node
/// that sends an endless line is an error at that size, not memory without end (`lines()`
/// buffers a line whole before anyone can look at its length).
struct BoundedLines<R> {
    r: R,
}

impl<R: tokio::io::AsyncBufRead + Unpin> BoundedLines<R> {
    /// The next line without its `\n` (or `\r\n`), invalid UTF-8 replaced; None at the end.
    async fn next_line(&mut self) -> std::io::Result<Option<String>> {
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let chunk = self.r.fill_buf().await?;
            if chunk.is_empty() {
                return Ok((!buf.is_empty()).then(|| String::from_utf8_lossy(&buf).into_owned()));
            }
            let (n, done) = chunk
                .iter()
                .position(|b| *b == b'\n')
                .map_or((chunk.len(), false), |i| (i + 1, true));
            if buf.len() + n > MAX_LINE + 2 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a line over {} MiB", MAX_LINE >> 20),
                ));
            }
            buf.extend_from_slice(&chunk[..n]);
            self.r.consume(n);
            if done {
                buf.pop();
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
                return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
            }
        }
    }
}

fn bounded_lines<R: tokio::io::AsyncRead + Unpin>(r: R) -> BoundedLines<tokio::io::BufReader<R>> {
    BoundedLines {
        r: tokio::io::BufReader::new(r),
    }
}

/// Every event leaves here, so every string a node sent (its rows, its reasons, ssh's stderr)
/// has its control characters escaped before anything prints it. (Node names, the events'
/// keys, never hold one: [`spec`] refuses them.)
async fn send(tx: &mpsc::Sender<FleetEvent>, e: FleetEvent) -> bool {
    tx.send(escaped(e)).await.is_ok()
}

/// `e` with every outside string escaped.
pub fn escaped(e: FleetEvent) -> FleetEvent {
    match e {
        FleetEvent::Row(n, mut row) => {
            escape_row(&mut row);
            FleetEvent::Row(n, row)
        }
        FleetEvent::Reach(n, Reach::Down(why)) => FleetEvent::Reach(
            n,
            Reach::Down(crate::domain::text::escape_controls(&why).into_owned()),
        ),
        other => other,
    }
}

/// A fleet row from a node with every string escaped and every figure in range (the
/// snapshot's last check, for rows).
pub fn escape_row(row: &mut NodeSummary) {
    crate::domain::sanity::check_row(row);
}

/// One node's reports: the first row also says the node is up and lets go of its handshake
/// slot; false once nobody listens.
struct Reporter<'a> {
    name: &'a str,
    tx: &'a mpsc::Sender<FleetEvent>,
    had: bool,
    slot: Option<tokio::sync::SemaphorePermit<'a>>,
}

impl Reporter<'_> {
    async fn row(&mut self, row: NodeSummary) -> bool {
        if !self.had {
            self.had = true;
            self.slot.take();
            send(self.tx, FleetEvent::Reach(self.name.into(), Reach::Up)).await;
        }
        send(self.tx, FleetEvent::Row(self.name.into(), Box::new(row))).await
    }
}

/// One ssh stream until it ends: whether samples came, and why it ended.
async fn ssh_once(
    t: &Transport,
    dest: &str,
    partop: &str,
    name: &str,
    permits: &Semaphore,
    tx: &mpsc::Sender<FleetEvent>,
) -> (bool, String) {
    let remote = vec![
        partop.to_string(),
        "--refresh".into(),
        t.refresh.to_string(),
        "stream".into(),
        "--summary".into(),
    ];
    let permit = permits.acquire().await;
    let mut child = match tokio::process::Command::from(node_command(t, dest, &remote))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot run {}: {e}", node_program(t, dest))),
    };
    let Some(stdout) = child.stdout.take() else {
        return (false, "no stdout".into());
    };
    let mut stderr = child.stderr.take();
    let err_task = tokio::spawn(async move {
        let mut buf = Vec::new();
        if let Some(e) = stderr.as_mut() {
            // Bounded: a chatty node cannot grow this without end.
            let _ = e.take(64 * 1024).read_to_end(&mut buf).await;
        }
        String::from_utf8_lossy(&buf).into_owned()
    });
    let mut lines = bounded_lines(stdout);
    let mut rep = Reporter {
        name,
        tx,
        had: false,
        slot: permit.ok(),
    };
    // Silence past this is a stuck stream: cut and reconnect.
    let silence = Duration::from_secs(u64::from(t.refresh) * 3 + t.connect_timeout.as_secs() + 10);
    let mut n = 0usize;
    loop {
        match tokio::time::timeout(silence, lines.next_line()).await {
            Ok(Ok(Some(l))) => {
                n += 1;
                if l.trim().is_empty() {
                    continue;
                }
                match parse_line(&l) {
                    Ok(row) => {
                        if !rep.row(row).await {
                            return (rep.had, String::new());
                        }
                    }
                    // Not partop's stream (a login script printing on stdout, another
                    // program, another version): said, not waited on as "connecting".
                    Err(e) => {
                        let _ = child.start_kill();
                        return (rep.had, invalid_stream(n, &l, &e));
                    }
                }
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                let _ = child.start_kill();
                return (rep.had, format!("invalid stream: line {}: {e}", n + 1));
            }
            Err(_) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                return (
                    rep.had,
                    format!(
                        "no sample for {}s: the node is slow or stuck; reconnecting",
                        silence.as_secs()
                    ),
                );
            }
        }
    }
    rep.slot.take();
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    let code = match status {
        Ok(Ok(s)) => s.code(),
        _ => {
            let _ = child.start_kill();
            None
        }
    };
    let err = tokio::time::timeout(Duration::from_secs(2), err_task)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    (rep.had, ssh_reason(code, &err, rep.had))
}

/// One HTTP event stream until it ends.
async fn http_once(
    t: &Transport,
    addr: &str,
    name: &str,
    permits: &Semaphore,
    tx: &mpsc::Sender<FleetEvent>,
) -> (bool, String) {
    let permit = permits.acquire().await;
    let stream =
        match tokio::time::timeout(t.connect_timeout, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return (false, format!("unreachable: {addr}: {e}")),
            Err(_) => return (false, format!("unreachable: {addr}: connect timed out")),
        };
    let (r, mut w) = stream.into_split();
    // HTTP/1.0: the body is the rest of the connection, never chunked.
    if let Err(e) = w
        .write_all(format!("GET /events?summary=1 HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
    {
        return (false, format!("{addr}: {e}"));
    }
    let mut lines = bounded_lines(r);
    let status = match tokio::time::timeout(t.connect_timeout, lines.next_line()).await {
        Ok(Ok(Some(l))) => l,
        _ => return (false, format!("{addr}: no answer")),
    };
    if !status.contains(" 200") {
        return (false, format!("{addr}: {}", cut(&status, 120)));
    }
    let mut rep = Reporter {
        name,
        tx,
        had: false,
        slot: permit.ok(),
    };
    let mut data = String::new();
    let silence = Duration::from_secs(u64::from(t.refresh) * 3 + 15);
    // Lines of the response (the status line is line 1), for the reason of a bad event.
    let mut n = 1usize;
    let mut data_at = 0usize;
    loop {
        match tokio::time::timeout(silence, lines.next_line()).await {
            Ok(Ok(Some(l))) => {
                n += 1;
                if let Some(d) = l.strip_prefix("data: ") {
                    if data.is_empty() {
                        data_at = n;
                    }
                    data.push_str(d);
                } else if l.is_empty() && !data.is_empty() {
                    match parse_line(&data) {
                        Ok(row) => {
                            if !rep.row(row).await {
                                return (rep.had, String::new());
                            }
                        }
                        Err(e) => {
                            return (
                                rep.had,
                                format!("{addr}: {}", invalid_stream(data_at, &data, &e)),
                            );
                        }
                    }
                    data.clear();
                }
                if data.len() > 4 << 20 {
                    return (rep.had, format!("{addr}: an event over 4 MiB"));
                }
            }
            Ok(Ok(None)) => return (rep.had, format!("{addr}: the stream ended")),
            Ok(Err(e)) => return (rep.had, format!("{addr}: {e}")),
            Err(_) => {
                return (
                    rep.had,
                    format!(
                        "{addr}: no event for {}s: slow or stuck; reconnecting",
                        silence.as_secs()
                    ),
                );
            }
        }
    }
}

/// How often a node without partop has its amd-smi read (most of a second of CPU a call).
pub const AMD_SMI_FALLBACK_EVERY: Duration = Duration::from_secs(60);

/// A node without partop: `amd-smi` over ssh through the amd-smi collector (the same parsers),
/// every minute, until a read fails. Read only: nothing of it can be changed from the fleet.
async fn amd_smi_once(
    t: &Transport,
    dest: &str,
    amd_smi: &str,
    name: &str,
    tx: &mpsc::Sender<FleetEvent>,
) -> (bool, String) {
    let argv = ssh_argv(t, dest, &[amd_smi.to_string()]);
    let runner = super::amdsmi::runner::Runner {
        program: PathBuf::from(&t.ssh),
        prefix: argv,
        timeout: Duration::from_secs(60),
    };
    let mut c = super::pipeline::Collector::amd_smi(runner);
    c.remote();
    let mut rep = Reporter {
        name,
        tx,
        had: false,
        slot: None,
    };
    loop {
        let snap = c.sample().await;
        if snap.gpus.is_empty() {
            let why = snap
                .sources
                .iter()
                .find_map(|s| s.error.clone())
                .unwrap_or_else(|| "no GPU reported".into());
            return (
                rep.had,
                format!(
                    "partop is not installed on the node, and its amd-smi could not be read either: {why}"
                ),
            );
        }
        let mut row = crate::domain::fleet::summarize(&snap, &[], None);
        row.trouble = Some(format!(
            "partop is not installed: amd-smi read over ssh every {}s (read only)",
            AMD_SMI_FALLBACK_EVERY.as_secs()
        ));
        if !rep.row(row).await {
            return (rep.had, String::new());
        }
        tokio::time::sleep(AMD_SMI_FALLBACK_EVERY).await;
    }
}

/// Starts one task per node; each reports rows and reachability on `tx` until `tx` closes.
pub fn spawn(
    nodes: &[NodeSpec],
    t: &Transport,
    tx: &mpsc::Sender<FleetEvent>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let permits = Arc::new(Semaphore::new(t.concurrency.max(1)));
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (n, t, tx, permits) = (n.clone(), t.clone(), tx.clone(), Arc::clone(&permits));
            tokio::spawn(async move {
                // Staggered: a thousand handshakes do not start in the same millisecond.
                tokio::time::sleep(Duration::from_millis(
                    u64::try_from(i % 64).unwrap_or(0) * 15,
                ))
                .await;
                let mut backoff = Duration::from_secs(1);
                let mut target = n.target.clone();
                loop {
                    if !send(&tx, FleetEvent::Reach(n.name.clone(), Reach::Connecting)).await {
                        return;
                    }
                    let started = std::time::Instant::now();
                    let (had, why) = match &target {
                        Target::Ssh { dest, partop } => {
                            ssh_once(&t, dest, partop, &n.name, &permits, &tx).await
                        }
                        Target::Http { addr } => http_once(&t, addr, &n.name, &permits, &tx).await,
                        Target::SshAmdSmi { dest, amd_smi } => {
                            amd_smi_once(&t, dest, amd_smi, &n.name, &tx).await
                        }
                    };
                    // partop is not on the node: its amd-smi is read instead, slowly, read only.
                    if let Target::Ssh { dest, .. } = &target
                        && !had
                        && why.starts_with("partop is not installed")
                    {
                        target = Target::SshAmdSmi {
                            dest: dest.clone(),
                            amd_smi: n.amd_smi.clone(),
                        };
                        continue;
                    }
                    if tx.is_closed() {
                        return;
                    }
                    if !send(&tx, FleetEvent::Reach(n.name.clone(), Reach::Down(why))).await {
                        return;
                    }
                    // A stream that ran a while starts the backoff again.
                    if had && started.elapsed() > Duration::from_secs(60) {
                        backoff = Duration::from_secs(1);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            })
        })
        .collect()
}

/// A node's whole samples (for the monitor's views opened from the fleet) into `tx` until the
/// stream ends or `tx`'s receivers are gone: `partop stream` over ssh, or `/events`.
pub async fn full_stream(
    t: &Transport,
    target: &Target,
    tx: &tokio::sync::watch::Sender<Arc<crate::domain::Snapshot>>,
) -> String {
    // A node's document is outside data like any source's: the snapshot's last check (numbers
    // in range, every string escaped) runs on it here.
    let parse = |l: &str| -> Option<crate::domain::Snapshot> {
        let mut s = serde_json::from_str(l).ok()?;
        crate::domain::sanity::check(&mut s);
        Some(s)
    };
    match target {
        Target::Ssh { dest, partop } => {
            let remote = vec![
                partop.clone(),
                "--refresh".into(),
                "1".into(),
                "stream".into(),
            ];
            let Ok(mut child) = tokio::process::Command::from(node_command(t, dest, &remote))
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
            else {
                return format!("cannot run {}", node_program(t, dest));
            };
            let Some(out) = child.stdout.take() else {
                return "no stdout".into();
            };
            let mut lines = bounded_lines(out);
            while let Ok(Some(l)) = lines.next_line().await {
                if let Some(s) = parse(&l)
                    && tx.send(Arc::new(s)).is_err()
                {
                    break;
                }
            }
            let _ = child.start_kill();
            "the stream ended".into()
        }
        Target::SshAmdSmi { dest, .. } => format!(
            "{dest}: partop is not installed there; its whole views need partop on the node"
        ),
        Target::Http { addr } => {
            let Ok(Ok(stream)) =
                tokio::time::timeout(t.connect_timeout, tokio::net::TcpStream::connect(addr)).await
            else {
                return format!("unreachable: {addr}");
            };
            let (r, mut w) = stream.into_split();
            if w.write_all(format!("GET /events HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
                .await
                .is_err()
            {
                return format!("{addr}: write failed");
            }
            let mut lines = bounded_lines(r);
            while let Ok(Some(l)) = lines.next_line().await {
                if let Some(d) = l.strip_prefix("data: ")
                    && let Some(s) = parse(d)
                    && tx.send(Arc::new(s)).is_err()
                {
                    break;
                }
            }
            "the stream ended".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_files_and_ssh_configs_name_nodes() {
        let h = parse_hosts(
            "# rack 1\nnode01\nnode02 partop=/opt/partop/bin/partop\nhttp://10.0.0.5:9477\n\n",
            "partop",
        )
        .unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(
            h[1].target,
            Target::Ssh {
                dest: "node02".into(),
                partop: "/opt/partop/bin/partop".into()
            }
        );
        assert!(matches!(h[2].target, Target::Http { .. }));
        assert!(parse_hosts("node01 color=red\n", "partop").is_err());
        assert_eq!(
            hosts_of_ssh_config("Host gpu-*\n  User x\nHost node1 node2\n  Port 22\nHost *\n"),
            ["node1", "node2"]
        );
    }

    /// Hosts-file words: quoted paths with blanks, `;`, `#` and escaped quotes are one word; a
    /// `#` outside quotes starts a comment; an unclosed quote is an error at its line. 6 lines.
    #[test]
    fn hosts_file_values_can_be_quoted() {
        let h = parse_hosts(
            "a partop=\"/opt/my tools;x/partop\"  # c\nb partop=\"/p/with \\\"q\\\" #h\"\nc#x\nd partop=/plain\n",
            "partop",
        )
        .unwrap();
        let partop = |i: usize| match &h[i].target {
            Target::Ssh { partop, .. } => partop.clone(),
            t => panic!("{t:?}"),
        };
        assert_eq!(partop(0), "/opt/my tools;x/partop");
        assert_eq!(partop(1), "/p/with \"q\" #h");
        assert_eq!(h[2].name, "c");
        assert_eq!(partop(3), "/plain");
        let e = parse_hosts("ok\nbad partop=\"/open\n", "partop").unwrap_err();
        assert!(e.starts_with("line 2: a quote is not closed"), "{e}");
        assert_eq!(h.len(), 4);
    }

    #[test]
    fn ssh_failures_read_as_what_to_do() {
        assert!(ssh_reason(Some(255), "@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@\nHost key verification failed.\n", false).starts_with("host key mismatch"));
        assert!(
            ssh_reason(
                Some(255),
                "ssh: connect to host 127.0.0.1 port 1: Connection refused\n",
                false
            )
            .starts_with("unreachable")
        );
        assert!(
            ssh_reason(
                Some(127),
                "bash: line 1: partop: command not found\n",
                false
            )
            .starts_with("partop is not installed")
        );
        assert!(ssh_reason(Some(0), "", true).starts_with("the stream stopped"));
    }
}
