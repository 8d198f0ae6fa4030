//! The load balancer in front of a replica set (`[[balancer]]` in models.toml): the upstream
//! file partop writes (an nginx `upstream` block by default, or any template), the command that
//! reloads it, and the URL a request through it is verified on. Pure: the registry parser
//! reads entries here, the planner says what each upstream becomes (and adds the steps) (members leave it before
//! they stop and join it once healthy), the executor (`exec::balancer`) writes and reloads.

use serde::{Deserialize, Serialize};

/// One `[[balancer]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Balancer {
    /// The replica set it fronts (a `[[model]]` with `replicas`).
    pub set: String,
    /// The upstream file partop writes (atomically; it must be partop's own file).
    pub upstream: String,
    /// The whole file, with `{set}` and `{servers}` (the member lines).
    pub template: String,
    /// One member in service, with `{name}` (member), `{port}`, `{set}`.
    pub line: String,
    /// One member out of service (drained): kept in the file so it stays valid while no member
    /// serves (nginx refuses an empty `upstream`).
    pub line_down: String,
    /// The command that makes the balancer read the file again.
    pub reload: Vec<String>,
    /// A URL through the balancer that a healthy member answers with 200.
    pub verify: String,
}

/// nginx's `upstream` block: partop's default template.
pub const NGINX_TEMPLATE: &str = "# Written by partop: the members of replica set {set}. Do not edit: partop rewrites it.\nupstream {set} {\n{servers}}\n";
/// nginx's member line.
pub const NGINX_LINE: &str = "    server 127.0.0.1:{port};\n";
/// nginx's member line, drained.
pub const NGINX_LINE_DOWN: &str = "    server 127.0.0.1:{port} down;\n";

/// A member as the upstream lists it: name, port, in service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Server {
    /// Member name (`set#k`).
    pub name: String,
    /// Its port.
    pub port: u16,
    /// In service (false: drained, `line_down`).
    pub up: bool,
}

impl Balancer {
    /// The upstream file for `servers`.
    pub fn render(&self, servers: &[Server]) -> String {
        let lines: String = servers
            .iter()
            .map(|s| {
                let l = if s.up { &self.line } else { &self.line_down };
                l.replace("{name}", &s.name)
                    .replace("{port}", &s.port.to_string())
                    .replace("{set}", &self.set)
            })
            .collect();
        self.template
            .replace("{set}", &self.set)
            .replace("{servers}", &lines)
    }
}

/// What one balancer's upstream becomes in a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BalancerChange {
    /// The balancer.
    pub balancer: Balancer,
    /// The members in service before the change.
    pub before: Vec<Server>,
    /// While the change runs: the members that keep running in service, the others drained.
    pub during: Vec<Server>,
    /// After: every member of the set on the new layout, in service once healthy.
    pub after: Vec<Server>,
}

/// Ports as a plan says them: `8001-8008` for a run, else a list.
pub fn ports_text(servers: &[Server]) -> String {
    let mut ports: Vec<u16> = servers.iter().filter(|s| s.up).map(|s| s.port).collect();
    ports.sort_unstable();
    match (ports.first(), ports.last()) {
        (None, _) | (_, None) => "none".into(),
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) if usize::from(b - a) + 1 == ports.len() => format!("{a}-{b}"),
        _ => ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

impl std::fmt::Display for BalancerChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let up = |v: &[Server]| v.iter().filter(|s| s.up).count();
        write!(
            f,
            "balancer for {} ({}): {} server(s) [{}] -> {} during the change [{}] -> {} once healthy [{}]; reload: {}",
            self.balancer.set,
            self.balancer.upstream,
            up(&self.before),
            ports_text(&self.before),
            up(&self.during),
            ports_text(&self.during),
            up(&self.after),
            ports_text(&self.after),
            super::text::shell_line(&self.balancer.reload)
        )
    }
}

/// The steps: members leave the upstream before the stop, join it after the relaunch.
pub const DRAIN_STEP: super::journal::StepKind = super::journal::StepKind::BalancerDrain;
/// See [`DRAIN_STEP`].
pub const JOIN_STEP: super::journal::StepKind = super::journal::StepKind::BalancerJoin;

/// The keys of a `[[balancer]]` entry.
const KEYS: &[&str] = &[
    "set",
    "upstream",
    "template",
    "line",
    "line_down",
    "reload",
    "verify",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    set: String,
    upstream: String,
    #[serde(default)]
    template: Option<String>,
    #[serde(default)]
    line: Option<String>,
    #[serde(default)]
    line_down: Option<String>,
    reload: Vec<String>,
    verify: String,
}

/// Reads one `[[balancer]]` table; Err is the message (the caller locates it).
pub fn entry(table: toml::Table) -> Result<Balancer, String> {
    if let Some(k) = table.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "balancer: unknown field `{k}`, expected one of {}",
            KEYS.join(", ")
        ));
    }
    let e: Entry = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| format!("balancer: {}", e.message().trim()))?;
    if !e.upstream.starts_with('/') {
        return Err(format!(
            "balancer for {:?}: upstream = {:?} must be an absolute path (the file partop writes)",
            e.set, e.upstream
        ));
    }
    if e.reload.is_empty() {
        return Err(format!(
            "balancer for {:?}: reload is empty: give the command that reloads it, like [\"nginx\", \"-s\", \"reload\"]",
            e.set
        ));
    }
    if !e.verify.starts_with("http://") {
        return Err(format!(
            "balancer for {:?}: verify = {:?} must be an http:// URL through the balancer that a healthy member answers with 200",
            e.set, e.verify
        ));
    }
    let template = e.template.unwrap_or_else(|| NGINX_TEMPLATE.into());
    if !template.contains("{servers}") {
        return Err(format!(
            "balancer for {:?}: template has no {{servers}}: where do the members go?",
            e.set
        ));
    }
    Ok(Balancer {
        set: e.set,
        upstream: e.upstream,
        template,
        line: e.line.unwrap_or_else(|| NGINX_LINE.into()),
        line_down: e.line_down.unwrap_or_else(|| NGINX_LINE_DOWN.into()),
        reload: e.reload,
        verify: e.verify,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b() -> Balancer {
        let t: toml::Table = toml::from_str(
            "set = \"m\"\nupstream = \"/tmp/u.conf\"\nreload = [\"nginx\", \"-s\", \"reload\"]\nverify = \"http://127.0.0.1:8000/health\"\n",
        )
        .unwrap();
        entry(t).unwrap()
    }

    #[test]
    fn the_default_is_an_nginx_upstream_that_stays_valid_when_drained() {
        let s = |port, up| Server {
            name: format!("m#{}", port - 8000),
            port,
            up,
        };
        let text = b().render(&[s(8001, true), s(8002, false)]);
        assert_eq!(
            text,
            "# Written by partop: the members of replica set m. Do not edit: partop rewrites it.\nupstream m {\n    server 127.0.0.1:8001;\n    server 127.0.0.1:8002 down;\n}\n"
        );
        assert_eq!(ports_text(&[s(8001, true), s(8002, true)]), "8001-8002");
        assert_eq!(ports_text(&[s(8001, true), s(8003, true)]), "8001,8003");
        assert_eq!(ports_text(&[s(8001, false)]), "none");
    }

    #[test]
    fn bad_entries_say_why() {
        for (bad, says) in [
            ("upstream = \"rel.conf\"", "absolute path"),
            ("reload = []", "reload is empty"),
            ("verify = \"ftp://x\"", "http:// URL"),
            ("template = \"x\"", "{servers}"),
            ("lsiten = 1", "unknown field"),
        ] {
            let key = bad.split(' ').next().unwrap();
            let mut t: toml::Table = toml::from_str(
                "set = \"m\"\nupstream = \"/tmp/u.conf\"\nreload = [\"nginx\", \"-s\", \"reload\"]\nverify = \"http://127.0.0.1:8000/health\"\n",
            )
            .unwrap();
            let v: toml::Table = toml::from_str(bad).unwrap();
            t.insert(key.into(), v[key].clone());
            let e = entry(t).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
