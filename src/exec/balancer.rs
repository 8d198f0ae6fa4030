//! The load balancer steps of an apply (`balancer_drain`, `balancer_join`): write a replica
//! set's upstream file atomically through `safe_file`, run the balancer's reload command
//! (bounded), and, once the members are healthy, verify that a request through the balancer
//! reaches one. A failed reload puts the old upstream back and reloads it again. Each step is
//! whole on its own, so a resumed apply runs it again safely.

use crate::domain::balancer::{Balancer, BalancerChange, Server};
use crate::domain::models::Registry;
use crate::domain::plan::Plan;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a reload command may take.
const RELOAD_LIMIT: Duration = Duration::from_secs(30);
/// How long a request through the balancer may take to reach a member after a reload.
const VERIFY_LIMIT: Duration = Duration::from_secs(15);

type StepResult = Result<String, (String, String)>;

/// Runs `argv` with no input; Err says how it failed, with its stderr's last line.
fn run_reload(argv: &[String]) -> Result<(), String> {
    let (prog, args) = argv.split_first().ok_or("empty reload command")?;
    let shown = crate::domain::text::shell_line(argv);
    let mut child = std::process::Command::new(prog)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    let end = Instant::now() + RELOAD_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{shown}: still running after {}s; killed",
                    RELOAD_LIMIT.as_secs()
                ));
            }
            Err(e) => return Err(format!("{shown}: {e}")),
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read as _;
        let _ = e.by_ref().take(64 * 1024).read_to_string(&mut err);
    }
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(format!(
        "{shown} exited with {status}: {}",
        crate::domain::text::escape_controls(last.trim())
    ))
}

/// Writes `text` as `b`'s upstream and reloads; on a failed reload the file's old content is
/// written back and reloaded, and Err says so.
fn write_and_reload(b: &Balancer, text: &str) -> Result<(), String> {
    let path = Path::new(&b.upstream);
    let old = crate::collect::small_file::operator_text_if_exists(path)
        .map_err(|e| format!("reading {}: {e}", b.upstream))?;
    crate::exec::safe_file::write_atomic(path, text.as_bytes())
        .map_err(|e| format!("writing {}: {e}", b.upstream))?;
    let Err(e) = run_reload(&b.reload) else {
        return Ok(());
    };
    let back = match &old {
        Some(o) => crate::exec::safe_file::write_atomic(path, o.as_bytes())
            .map_err(|x| x.to_string())
            .and_then(|()| run_reload(&b.reload)),
        None => std::fs::remove_file(path).map_err(|x| x.to_string()),
    };
    Err(match back {
        Ok(()) => format!(
            "{e}; the old upstream is back in {} and the balancer serves it",
            b.upstream
        ),
        Err(x) => format!(
            "{e}; the old upstream was written back to {} but could not be reloaded: {x}",
            b.upstream
        ),
    })
}

/// Whether a request through the balancer reaches a member in service: 200 from `verify`, and
/// where the answer names the member (`served_by`), one of `servers`.
fn verify(b: &Balancer, servers: &[Server]) -> Result<String, String> {
    let end = Instant::now() + VERIFY_LIMIT;
    let mut last = String::new();
    while Instant::now() < end {
        match crate::collect::served::http::get(&b.verify, Duration::from_secs(2)) {
            Ok(r) if r.status == 200 => {
                let by = serde_json::from_str::<serde_json::Value>(&r.body)
                    .ok()
                    .and_then(|v| v["served_by"].as_str().map(str::to_string));
                match by {
                    Some(name) if !servers.iter().any(|s| s.up && s.name == name) => {
                        last = format!("answered by {name}, which is not in the upstream");
                    }
                    Some(name) => return Ok(format!("{} answered by {name}", b.verify)),
                    None => return Ok(format!("{} answered 200", b.verify)),
                }
            }
            Ok(r) => last = format!("HTTP {}", r.status),
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!(
        "no request through {} reached a healthy member in {}s: {}",
        b.verify,
        VERIFY_LIMIT.as_secs(),
        crate::domain::text::escape_controls(&last)
    ))
}

/// `balancer_drain`: the members that stop leave each upstream (written with them drained).
pub fn drain(plan: &Plan, registry: Option<&Registry>) -> StepResult {
    each(plan, registry, |c, b| {
        write_and_reload(b, &b.render(&c.during))?;
        Ok(format!(
            "{}: in service {}",
            c.balancer.upstream,
            crate::domain::balancer::ports_text(&c.during)
        ))
    })
}

/// `balancer_join`: every member of the set on the new layout (healthy: the relaunch waited)
/// joins the upstream; a request through the balancer must reach one.
pub fn join(plan: &Plan, registry: Option<&Registry>) -> StepResult {
    each(plan, registry, |c, b| {
        write_and_reload(b, &b.render(&c.after))?;
        let seen = verify(b, &c.after)?;
        Ok(format!(
            "{}: in service {}; {seen}",
            c.balancer.upstream,
            crate::domain::balancer::ports_text(&c.after)
        ))
    })
}

/// Runs `f` for each balancer of the plan, with its entry as models.toml has it now: the
/// template is taken from there, never from the plan file (whose strings are escaped for
/// output: a template's newlines would be written as `\x0a`); an entry whose file or reload
/// changed since the plan is refused.
fn each(
    plan: &Plan,
    registry: Option<&Registry>,
    f: impl Fn(&BalancerChange, &Balancer) -> Result<String, String>,
) -> StepResult {
    let mut done = Vec::new();
    for c in &plan.balancers {
        let now = registry.and_then(|r| {
            r.models
                .iter()
                .find(|m| m.name == c.balancer.set)
                .and_then(|m| m.balancer.clone())
        });
        let now = match now {
            Some(b) if b.upstream == c.balancer.upstream => b,
            other => {
                return Err((
                    format!(
                        "balancer for {}: {}",
                        c.balancer.set,
                        if other.is_some() {
                            "its upstream file in models.toml is not the plan's"
                        } else {
                            "no longer in models.toml"
                        }
                    ),
                    "put the [[balancer]] entry back as it was when planned, or make a new plan"
                        .into(),
                ));
            }
        };
        match f(c, &now) {
            Ok(d) => done.push(d),
            Err(e) => {
                return Err((
                    format!("balancer for {}: {e}", c.balancer.set),
                    format!(
                        "fix the balancer (its reload command, its config) and resume; the members keep serving on their ports; the upstream partop writes is {}",
                        c.balancer.upstream
                    ),
                ));
            }
        }
    }
    Ok(done.join("; "))
}
