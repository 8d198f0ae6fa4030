//! Runs amd-smi as a child process: each call under a timeout, killed when dropped (so a hung
//! amd-smi never blocks anything and never lingers), stdin closed or fed a fixed answer.

use super::error::{AmdSmiError, excerpt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// What a call printed.
#[derive(Debug, Clone)]
pub struct RawOutput {
    /// The command line, for messages.
    pub command: String,
    /// Exit status (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// How long it took.
    pub took: Duration,
}

/// How to run amd-smi.
#[derive(Debug, Clone)]
pub struct Runner {
    /// The program (an absolute path after [`Runner::locate`]).
    pub program: PathBuf,
    /// Leading arguments (e.g. `sim amd-smi --state FILE` when the program is partop itself).
    pub prefix: Vec<String>,
    /// Per-call limit.
    pub timeout: Duration,
}

/// Finds `amd-smi` on `PATH` (and in `/opt/rocm/bin`), or explains where it looked.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, AmdSmiError> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(AmdSmiError::NotFound {
                searched: p.display().to_string(),
            })
        };
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(PathBuf::from("/opt/rocm/bin"));
    for d in &dirs {
        let c = d.join("amd-smi");
        if c.is_file() {
            return Ok(c);
        }
    }
    let searched = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    Err(AmdSmiError::NotFound { searched })
}

impl Runner {
    /// A runner for `program` with the default 10 s limit.
    pub fn new(program: PathBuf) -> Self {
        Self {
            program,
            prefix: Vec::new(),
            timeout: Duration::from_secs(10),
        }
    }

    /// The command line as a user would type it.
    pub fn command_line(&self, args: &[&str]) -> String {
        let name = if self.prefix.is_empty() {
            "amd-smi".to_string()
        } else {
            format!("{} {}", self.program.display(), self.prefix.join(" "))
        };
        format!("{name} {}", args.join(" "))
    }

    /// Runs with stdin closed. Non-zero exits are returned as output, not errors: amd-smi's
    /// exit status is unreliable, so callers look at the text.
    pub async fn run(&self, args: &[&str]) -> Result<RawOutput, AmdSmiError> {
        self.run_with_input(args, None).await
    }

    /// Runs, writing `input` to stdin (for the Y/N prompt of `set -M` and `reset -r`). The
    /// child runs in its own process group: at the time limit, when its output passes
    /// [`OUTPUT_CAP`], or when the call is dropped, the whole group is killed, so a wrapper's
    /// children never linger.
    pub async fn run_with_input(
        &self,
        args: &[&str],
        input: Option<&str>,
    ) -> Result<RawOutput, AmdSmiError> {
        let command = self.command_line(args);
        let start = Instant::now();
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.prefix)
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| AmdSmiError::Spawn {
            program: self.program.display().to_string(),
            error: e.to_string(),
        })?;
        let group = GroupGuard(child.id());
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            // A failed write means the tool exited early; its output will say why.
            let _ = stdin.write_all(text.as_bytes()).await;
        }
        let (Some(mut so), Some(mut se)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(AmdSmiError::Spawn {
                program: self.program.display().to_string(),
                error: "no output pipes".into(),
            });
        };
        let too_much = || AmdSmiError::TooMuchOutput {
            command: command.clone(),
            limit: OUTPUT_CAP,
        };
        // Both pipes are read together; the first one past the cap ends the call at once (the
        // group is killed on return), without waiting for the other or for the exit.
        let work = async {
            let (out, err) = tokio::try_join!(capped(&mut so), capped(&mut se))?;
            Ok::<_, ()>((out, err, child.wait().await))
        };
        let (stdout, stderr, status) = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| AmdSmiError::Timeout {
                command: command.clone(),
                after: self.timeout,
            })?
            .map_err(|()| too_much())?;
        let status = status.map_err(|e| AmdSmiError::Spawn {
            program: self.program.display().to_string(),
            error: e.to_string(),
        })?;
        drop(group);
        Ok(RawOutput {
            command,
            code: status.code(),
            stdout: utf8(stdout),
            stderr: utf8(stderr),
            took: start.elapsed(),
        })
    }
}

/// The most partop reads from one call's stdout or stderr (the largest real amd-smi JSON, 64
/// CPX partitions with every metric, is a few MiB).
pub const OUTPUT_CAP: usize = 64 * 1024 * 1024;

/// Reads to the end, or fails once past [`OUTPUT_CAP`].
async fn capped(r: &mut (impl tokio::io::AsyncRead + Unpin)) -> Result<Vec<u8>, ()> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(buf),
            Ok(n) => {
                if buf.len() + n > OUTPUT_CAP {
                    return Err(());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// Kills the child's whole process group when dropped (timeout, cap, cancelled call); after a
/// normal exit the group is usually empty and the kill finds nothing.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok())
            && pid > 1
        {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Takes the bytes as text without copying when they are valid UTF-8 (they always are from
/// amd-smi; anything else is replaced, never rejected).
fn utf8(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

impl RawOutput {
    /// For JSON reads: a non-zero exit with no JSON on stdout is an error carrying stderr.
    pub fn json_or_error(self) -> Result<Self, AmdSmiError> {
        let has_json = self.stdout.contains('{') || self.stdout.contains('[');
        match self.code {
            Some(0) => Ok(self),
            _ if has_json => Ok(self),
            code => {
                let text = if self.stderr.trim().is_empty() {
                    &self.stdout
                } else {
                    &self.stderr
                };
                if text.contains("missing the following required groups") {
                    return Err(AmdSmiError::MissingGroups {
                        command: self.command,
                        message: excerpt(text, 160),
                    });
                }
                Err(AmdSmiError::Exit {
                    command: self.command,
                    code: code.unwrap_or(-1),
                    excerpt: excerpt(text, 200),
                })
            }
        }
    }
}
