//! Served models: the registry an operator writes (`models.toml`: how to launch and stop each
//! model, where it goes, what memory it needs) and the status partop observes for each model
//! (discovered or registered). Parsing and validation are pure (text in, located errors out);
//! the collector reads the file and probes the servers, the executor launches them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Numeric precision of the weights (decides the bytes per parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit float.
    Fp32,
    /// bfloat16.
    Bf16,
    /// 16-bit float (the default).
    #[default]
    Fp16,
    /// 8-bit float (MI300 and later run it natively).
    Fp8,
    /// 8-bit integer.
    Int8,
    /// 4-bit integer (AWQ/GPTQ).
    Int4,
}

impl Precision {
    /// Bytes per parameter.
    pub const fn bytes_per_param(self) -> f64 {
        match self {
            Self::Fp32 => 4.0,
            Self::Bf16 | Self::Fp16 => 2.0,
            Self::Fp8 | Self::Int8 => 1.0,
            Self::Int4 => 0.5,
        }
    }
}

/// How a model is started and stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Launch {
    /// A command partop starts detached, logging to a file; stopped by `stop` or SIGTERM.
    Command {
        /// argv, with placeholders.
        command: Vec<String>,
        /// Extra environment, with placeholders.
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// A command that stops it (else SIGTERM to the server's process).
        #[serde(default)]
        stop: Option<Vec<String>>,
    },
    /// A systemd unit (`vllm@{device}.service`).
    Systemd {
        /// Unit name, with placeholders.
        unit: String,
    },
    /// A docker container run from an image on the placed logical GPU(s) (`docker run` with the
    /// GPU devices and `HIP_VISIBLE_DEVICES`, as a command launch gets), stopped by name: an
    /// existing container's devices cannot be changed, so one is never just restarted.
    Docker {
        /// Container name, with placeholders.
        container: String,
        /// Image, with placeholders.
        #[serde(default)]
        image: String,
        /// The container's command, with placeholders (empty: the image's own).
        #[serde(default)]
        args: Vec<String>,
        /// Extra environment, with placeholders.
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
}

/// Where a model goes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Want {
    /// One logical GPU by stable identity (BDF with partition function, `0000:05:00.1`).
    Gpu(String),
    /// Any free logical GPU(s) with at least this much HBM each (GB); the model's need if 0.
    AnyFree(f64),
}

/// One registry entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Unique name.
    pub name: String,
    /// Model id (`meta-llama/Llama-3.1-8B-Instruct`).
    pub model: String,
    /// How to start and stop it.
    pub launch: Launch,
    /// Placement.
    pub want: Want,
    /// HTTP port on this node.
    pub port: u16,
    /// Health URL (200 = healthy).
    pub health_url: String,
    /// Prometheus metrics URL.
    pub metrics_url: String,
    /// HBM it needs per logical GPU, GB (given, or from parameters x precision x 1.2 + 2 GB).
    pub memory_gb: f64,
    /// Precision of the weights.
    pub precision: Precision,
    /// Logical GPUs it spans (tensor parallel).
    pub tensor_parallel: u32,
    /// Seconds to wait for health after a launch.
    pub health_timeout_secs: u64,
    /// Log file (empty: partop's state directory).
    pub log: String,
    /// Where it was defined (`models.toml:12`).
    pub defined_at: String,
    /// Its replica set (`replicas`, `ports`, `gpus`): served as many members, one per logical
    /// GPU (`domain::replicas` expands it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<super::replica_set::ReplicaSet>,
    /// The set it is a member of (a member's spec, made by `replicas::member_spec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<super::replica_set::Member>,
    /// The load balancer in front of its set (`[[balancer]]` naming it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balancer: Option<super::balancer::Balancer>,
}

/// Placeholders a launch may use.
pub const PLACEHOLDERS: &[&str] = &["{device}", "{port}", "{model}", "{name}", "{bdf}"];

impl ModelSpec {
    /// Fills the placeholders for a launch on `devices` (logical indices) / `bdfs`.
    pub fn expand(&self, s: &str, devices: &[u32], bdfs: &[String]) -> String {
        let dev = devices
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        s.replace("{device}", &dev)
            .replace("{port}", &self.port.to_string())
            .replace("{model}", &self.model)
            .replace("{name}", &self.name)
            .replace("{bdf}", &bdfs.join(","))
    }

    /// What a launch runs, placeholders filled: the command's argv (its environment apart:
    /// [`Self::launch_env`]), `systemctl start UNIT`, or the whole `docker run`. The executor
    /// runs exactly this and the confirmation shows exactly this ([`Self::launch_text`]).
    pub fn launch_argv(&self, devices: &[u32], bdfs: &[String]) -> Vec<String> {
        let x = |s: &String| self.expand(s, devices, bdfs);
        match &self.launch {
            Launch::Command { command, .. } => command.iter().map(x).collect(),
            Launch::Systemd { unit } => vec!["systemctl".into(), "start".into(), x(unit)],
            Launch::Docker {
                container,
                image,
                args,
                ..
            } => {
                let mut a: Vec<String> = ["docker", "run", "--detach", "--rm", "--name"]
                    .map(String::from)
                    .to_vec();
                a.push(x(container));
                // The model's port on this node's loopback, where its health is asked; the
                // GPU devices, and the logical GPU chosen the way a command launch gets it.
                a.extend(
                    [
                        "--network",
                        "host",
                        "--device",
                        "/dev/kfd",
                        "--device",
                        "/dev/dri",
                    ]
                    .map(String::from),
                );
                for (k, v) in self.launch_env(devices, bdfs) {
                    a.push("--env".into());
                    a.push(format!("{k}={v}"));
                }
                a.push(x(image));
                a.extend(args.iter().map(x));
                a
            }
        }
    }

    /// The environment a command or container launch gets: `HIP_VISIBLE_DEVICES` (the
    /// logical GPU indices), then the registry's own.
    pub fn launch_env(&self, devices: &[u32], bdfs: &[String]) -> Vec<(String, String)> {
        let mut v = vec![(
            "HIP_VISIBLE_DEVICES".to_string(),
            self.expand("{device}", devices, bdfs),
        )];
        if let Launch::Command { env, .. } | Launch::Docker { env, .. } = &self.launch {
            v.extend(
                env.iter()
                    .map(|(k, val)| (k.clone(), self.expand(val, devices, bdfs))),
            );
        }
        v
    }

    /// The launch, as an operator would type it (for plans, confirmations and `--dry-run`):
    /// every word quoted for a shell, so pasting it runs what partop runs.
    pub fn launch_text(&self, devices: &[u32], bdfs: &[String]) -> String {
        let argv = crate::domain::text::shell_line(&self.launch_argv(devices, bdfs));
        match &self.launch {
            Launch::Command { .. } => {
                let mut parts: Vec<String> = self
                    .launch_env(devices, bdfs)
                    .iter()
                    .map(|(k, v)| format!("{k}={}", crate::domain::text::shell_quote(v)))
                    .collect();
                parts.push(argv);
                parts.join(" ")
            }
            Launch::Systemd { .. } | Launch::Docker { .. } => argv,
        }
    }

    /// What a stop runs, placeholders filled (None: a signal to the server's process).
    pub fn stop_argv(&self, devices: &[u32], bdfs: &[String]) -> Option<Vec<String>> {
        let x = |s: &String| self.expand(s, devices, bdfs);
        match &self.launch {
            Launch::Command { stop: Some(s), .. } => Some(s.iter().map(x).collect()),
            Launch::Command { .. } => None,
            Launch::Systemd { unit } => Some(vec!["systemctl".into(), "stop".into(), x(unit)]),
            Launch::Docker { container, .. } => {
                Some(vec!["docker".into(), "stop".into(), x(container)])
            }
        }
    }

    /// The stop, as an operator would type it (quoted as [`Self::launch_text`] is).
    pub fn stop_text(&self, devices: &[u32], bdfs: &[String], pid: Option<u32>) -> String {
        self.stop_argv(devices, bdfs).map_or_else(
            || pid.map_or_else(|| "(not running)".into(), |p| format!("kill -TERM {p}")),
            |a| crate::domain::text::shell_line(&a),
        )
    }
}

/// The registry: every model an operator declared.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Registry {
    /// Where it was read from.
    pub origin: String,
    /// Entries in file order.
    pub models: Vec<ModelSpec>,
}

/// A registry that cannot be used: where and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}:{column}: {message}")]
pub struct RegistryError {
    /// File.
    pub origin: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong and what to do.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    model: Vec<toml::Spanned<toml::Table>>,
    #[serde(default)]
    balancer: Vec<toml::Spanned<toml::Table>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LaunchDoc {
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    stop: Option<Vec<String>>,
    #[serde(default)]
    systemd: Option<String>,
    #[serde(default)]
    docker: Option<String>,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    args: Option<Vec<String>>,
}

/// The keys of a `[[model]]` entry, of its `launch` table, and those it must have.
const ENTRY_KEYS: &[&str] = &[
    "name",
    "model",
    "port",
    "launch",
    "gpu",
    "min_free_gb",
    "memory_gb",
    "params_b",
    "precision",
    "tensor_parallel",
    "health",
    "metrics",
    "health_timeout_secs",
    "log",
    "replicas",
    "ports",
    "gpus",
];
const LAUNCH_KEYS: &[&str] = &[
    "command", "env", "stop", "systemd", "docker", "image", "args",
];
const REQUIRED_KEYS: &[&str] = &["name", "model", "port", "launch"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    model: String,
    port: u16,
    launch: LaunchDoc,
    #[serde(default)]
    gpu: Option<String>,
    #[serde(default)]
    min_free_gb: Option<f64>,
    #[serde(default)]
    memory_gb: Option<f64>,
    #[serde(default)]
    params_b: Option<f64>,
    #[serde(default)]
    precision: Precision,
    #[serde(default = "one")]
    tensor_parallel: u32,
    #[serde(default)]
    health: Option<String>,
    #[serde(default)]
    metrics: Option<String>,
    #[serde(default = "default_health_timeout")]
    health_timeout_secs: u64,
    #[serde(default)]
    log: Option<String>,
    #[serde(default)]
    replicas: Option<toml::Value>,
    #[serde(default)]
    ports: Option<String>,
    #[serde(default)]
    gpus: Option<Vec<String>>,
}

const fn one() -> u32 {
    1
}
const fn default_health_timeout() -> u64 {
    900
}

/// Whether `value` has the type of field `key` of an entry: tried in an entry that is
/// otherwise correct, so a failure can only be this value's.
fn type_check(key: &str, value: &toml::Value) -> Result<(), String> {
    let mut t: toml::Table = toml::from_str(
        "name = \"n\"\nmodel = \"m\"\nport = 1\nmemory_gb = 1\nlaunch.command = [\"x\"]\n",
    )
    .map_err(|e| e.message().to_string())?;
    t.insert(key.to_string(), value.clone());
    toml::Value::Table(t)
        .try_into::<Entry>()
        .map(|_| ())
        .map_err(|e| e.message().trim().to_string())
}

/// HBM a model needs per logical GPU when only its size is known: weights x 1.2 (activations,
/// CUDA/HIP graphs) + 2 GB runtime, spread over its tensor-parallel GPUs. KV cache comes on top
/// of this floor; vLLM takes what is left of `--gpu-memory-utilization`.
pub fn memory_need_gb(params_b: f64, precision: Precision, tp: u32) -> f64 {
    (params_b * precision.bytes_per_param() * 1.2 + 2.0) / f64::from(tp.max(1))
}

/// Where each line of a text starts, for locating many offsets in one text (each a binary
/// search): [`line_col`] scans the text before the offset, which, once per error over a file of
/// 40,000 bad lines, is quadratic.
#[derive(Debug, Clone)]
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    /// Indexes `text`.
    pub fn new(text: &str) -> Self {
        Self {
            starts: std::iter::once(0)
                .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                .collect(),
        }
    }

    /// 1-based line and column (bytes) of `offset`, as [`line_col`] gives them.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        (line, offset - self.starts[line - 1] + 1)
    }
}

/// 1-based line and column of a byte offset (for file:line:column errors).
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
}

/// Where an entry ends: at the next table header (a table's span may cover only its header).
fn entry_end(text: &str, span: &std::ops::Range<usize>) -> usize {
    let start = span.start.min(text.len());
    let after = text[start..]
        .char_indices()
        .skip(1)
        .find(|(i, c)| *c == '[' && text[..start + i].ends_with('\n'))
        .map_or(text.len(), |(i, _)| start + i);
    after.max(span.end.min(text.len()))
}

/// Where `key = ` starts inside `span` of `text` (an entry), for errors that point at the
/// offending line; the entry's start when it is not written there (a default).
fn key_at(text: &str, span: &std::ops::Range<usize>, key: &str) -> usize {
    let start = span.start.min(text.len());
    let body = &text[start..entry_end(text, span)];
    let mut off = 0;
    for line in body.split_inclusive('\n') {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix(key)
            && (rest.trim_start().starts_with('=') || rest.starts_with('.'))
        {
            return span.start + off + (line.len() - t.len());
        }
        off += line.len();
    }
    span.start
}

/// A logical GPU's identity as partop writes it: `0000:05:00.1` (hex digits, the partition
/// function 0-7).
pub fn valid_bdf(g: &str) -> bool {
    let b = g.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && hex(0..4)
        && hex(5..7)
        && hex(8..10)
        && (b'0'..=b'7').contains(&b[11])
}

/// An entry's replica set, checked: `replicas` with `ports` (and `port`, if written, their
/// first), `gpus` only with them, one logical GPU per member. Errors go to `bad` at their key.
fn replica_set(
    e: &Entry,
    at: &dyn Fn(&str) -> usize,
    bad: &mut dyn FnMut(usize, String),
) -> Option<super::replica_set::ReplicaSet> {
    let name = &e.name;
    let Some(count) = &e.replicas else {
        for (k, given) in [("ports", e.ports.is_some()), ("gpus", e.gpus.is_some())] {
            if given {
                bad(
                    at(k),
                    format!("model {name:?}: {k} go with replicas (replicas = N or \"fill\")"),
                );
            }
        }
        return None;
    };
    let count = super::replica_set::parse_count(count)
        .map_err(|m| bad(at("replicas"), format!("model {name:?}: {m}")))
        .ok();
    let ports = match &e.ports {
        None => {
            bad(
                at("replicas"),
                format!(
                    "model {name:?}: a replica set needs ports = \"FIRST-LAST\", one port per replica"
                ),
            );
            None
        }
        Some(p) => super::replica_set::parse_ports(p)
            .map_err(|m| bad(at("ports"), format!("model {name:?}: {m}")))
            .ok(),
    };
    if let Some((first, _)) = ports
        && e.port != first
    {
        bad(
            at("port"),
            format!(
                "model {name:?}: port = {} must be the first of ports ({first}), or left out",
                e.port
            ),
        );
    }
    if e.gpu.is_some() || e.min_free_gb.is_some() {
        bad(
            at(if e.gpu.is_some() {
                "gpu"
            } else {
                "min_free_gb"
            }),
            format!(
                "model {name:?}: a replica set takes every logical GPU that holds it; limit it with gpus = [\"0000:05:00\", ...]"
            ),
        );
    }
    if e.tensor_parallel > 1 {
        bad(
            at("tensor_parallel"),
            format!(
                "model {name:?}: a replica set runs one member per logical GPU (tensor_parallel = 1)"
            ),
        );
    }
    let gpus = e.gpus.clone().unwrap_or_default();
    for g in &gpus {
        if !(valid_bdf(g) || valid_bdf(&format!("{g}.0"))) {
            bad(
                at("gpus"),
                format!(
                    "model {name:?}: gpus: {g:?} is not a GPU's identity; write a BDF like \"0000:05:00\" (every partition) or \"0000:05:00.1\" (one logical GPU)"
                ),
            );
        }
    }
    Some(super::replica_set::ReplicaSet {
        count: count?,
        ports: ports?,
        gpus,
    })
}

/// Parses and validates a registry. Every error names the file, line and column of the entry.
pub fn parse(origin: &str, text: &str) -> Result<Registry, RegistryError> {
    let (reg, mut errors) = check(origin, text);
    if errors.is_empty() {
        Ok(reg)
    } else {
        Err(errors.remove(0))
    }
}

/// Parses a registry and reports every problem in it (not only the first), each with the
/// file, line and column of the line at fault; the entries without problems are returned.
pub fn check(origin: &str, text: &str) -> (Registry, Vec<RegistryError>) {
    // Located through one index, names and ports looked up: linear in the entries (20,000 bad
    // entries took 28 s when each was located by scanning the text before it).
    let mut p = Problems {
        origin,
        text,
        index: LineIndex::new(text),
        errors: Vec::new(),
    };
    let mut models: Vec<ModelSpec> = Vec::new();
    let doc: FileDoc = match toml::from_str(text) {
        Ok(d) => d,
        Err(e) => {
            p.at(
                e.span().map_or(0, |s| s.start),
                e.message().trim().to_string(),
            );
            return (
                Registry {
                    origin: origin.to_string(),
                    models,
                },
                p.errors,
            );
        }
    };
    let mut taken = Taken::default();
    for spanned in doc.model {
        let span = spanned.span();
        if let Some(spec) = model_spec(&mut p, &span, spanned.into_inner(), &mut taken) {
            models.push(spec);
        }
    }
    attach_balancers(&mut p, doc.balancer, &mut models);
    (
        Registry {
            origin: origin.to_string(),
            models,
        },
        p.errors,
    )
}

/// A registry's problems as they are found, each located at its file, line and column.
struct Problems<'a> {
    origin: &'a str,
    text: &'a str,
    index: LineIndex,
    errors: Vec<RegistryError>,
}

impl Problems<'_> {
    /// A problem at byte `offset` of the text.
    fn at(&mut self, offset: usize, message: String) {
        let (line, column) = self.index.line_col(offset);
        self.errors.push(RegistryError {
            origin: self.origin.to_string(),
            line,
            column,
            message,
        });
    }

    /// Where `key` is written in the entry at `span` (the entry's start if it is not).
    fn key(&self, span: &std::ops::Range<usize>, key: &str) -> usize {
        key_at(self.text, span, key)
    }
}

/// The names and ports the entries accepted so far hold (a later entry may not take them).
#[derive(Default)]
struct Taken {
    names: std::collections::HashSet<String>,
    ports: std::collections::HashMap<u16, String>,
}

/// One `[[model]]` entry, checked: its spec, or None when it has a problem (each reported).
fn model_spec(
    p: &mut Problems<'_>,
    span: &std::ops::Range<usize>,
    table: toml::Table,
    taken: &mut Taken,
) -> Option<ModelSpec> {
    let at = span.start;
    let named = table
        .get("name")
        .and_then(toml::Value::as_str)
        .map_or_else(|| "?".to_string(), str::to_string);
    let e = typed_entry(p, span, &named, table)?;
    let n0 = p.errors.len();
    let launch_at = p.key(span, "launch");
    let text = p.text;
    let replicas = replica_set(&e, &|k: &str| key_at(text, span, k), &mut |o, m| {
        p.at(o, m);
    });
    let own_ports: Vec<u16> = replicas
        .as_ref()
        .map_or_else(|| vec![e.port], |r| (r.ports.0..=r.ports.1).collect());
    identity_problems(p, span, &e, replicas.is_some(), &own_ports, taken);
    let launch = launch_of(p, launch_at, &e.name, &e.launch);
    if e.tensor_parallel == 0 {
        p.at(
            p.key(span, "tensor_parallel"),
            "tensor_parallel must be at least 1".into(),
        );
    }
    let memory_gb = memory_of(p, span, &e);
    let want = want_of(p, span, &e);
    let (Some(launch), Some(want)) = (launch, want) else {
        return None;
    };
    if p.errors.len() > n0 {
        return None;
    }
    let base = format!("http://127.0.0.1:{}", e.port);
    let (line, _) = p.index.line_col(at);
    taken.names.insert(e.name.clone());
    for port in own_ports {
        taken.ports.insert(port, e.name.clone());
    }
    Some(ModelSpec {
        name: e.name,
        model: e.model,
        launch,
        want,
        port: e.port,
        health_url: e.health.unwrap_or_else(|| format!("{base}/health")),
        metrics_url: e.metrics.unwrap_or_else(|| format!("{base}/metrics")),
        memory_gb,
        precision: e.precision,
        tensor_parallel: e.tensor_parallel,
        health_timeout_secs: e.health_timeout_secs,
        log: e.log.unwrap_or_default(),
        defined_at: format!("{}:{line}", p.origin),
        replicas,
        member: None,
        balancer: None,
    })
}

/// The entry as typed, or None when too little of it is left to check further. Every unknown
/// key and every value of the wrong type is reported where it is written and left out, so the
/// entry's other problems are still found (serde stops at the first).
fn typed_entry(
    p: &mut Problems<'_>,
    span: &std::ops::Range<usize>,
    named: &str,
    mut table: toml::Table,
) -> Option<Entry> {
    drop_unknown_keys(p, span, named, &mut table);
    if !replica_port(p, span, named, &mut table) {
        return None;
    }
    // Each value on its own: one of the wrong type is reported at its key and left out, and
    // the rest of the entry is still checked.
    let mut dropped_required = false;
    for k in table.keys().cloned().collect::<Vec<_>>() {
        let Some(v) = table.get(&k) else { continue };
        if let Err(m) = type_check(&k, v) {
            p.at(p.key(span, &k), format!("model {named:?}: {k}: {m}"));
            table.remove(&k);
            dropped_required |= REQUIRED_KEYS.contains(&k.as_str());
        }
    }
    if dropped_required {
        return None;
    }
    match toml::Value::Table(table).try_into() {
        Ok(e) => Some(e),
        Err(x) => {
            // What is left: a required field missing.
            let msg = x.message().trim().to_string();
            p.at(span.start, format!("model {named:?}: {msg}"));
            None
        }
    }
}

/// Reports and removes the keys an entry (or its `launch` table) does not have.
fn drop_unknown_keys(
    p: &mut Problems<'_>,
    span: &std::ops::Range<usize>,
    named: &str,
    table: &mut toml::Table,
) {
    let unknown: Vec<String> = table
        .keys()
        .filter(|k| !ENTRY_KEYS.contains(&k.as_str()))
        .cloned()
        .collect();
    for k in unknown {
        table.remove(&k);
        p.at(
            p.key(span, &k),
            format!(
                "model {named:?}: unknown field `{k}`, expected one of {}",
                ENTRY_KEYS.join(", ")
            ),
        );
    }
    if let Some(toml::Value::Table(l)) = table.get_mut("launch") {
        let unknown: Vec<String> = l
            .keys()
            .filter(|k| !LAUNCH_KEYS.contains(&k.as_str()))
            .cloned()
            .collect();
        for k in unknown {
            l.remove(&k);
            // Written `launch.k = ` or inside a `launch = { k = }` table.
            let at = p.key(span, &format!("launch.{k}"));
            let at = if at == span.start {
                p.key(span, &k)
            } else {
                at
            };
            p.at(
                at,
                format!(
                    "model {named:?}: unknown field `launch.{k}`, expected one of {}",
                    LAUNCH_KEYS.join(", ")
                ),
            );
        }
    }
}

/// A replica set's `port` is the first of its `ports` (written or not): filled in where it is
/// not written. False when the set's ports cannot give it (reported).
fn replica_port(
    p: &mut Problems<'_>,
    span: &std::ops::Range<usize>,
    named: &str,
    table: &mut toml::Table,
) -> bool {
    if table.contains_key("port")
        || !(table.contains_key("replicas") || table.contains_key("ports"))
    {
        return true;
    }
    let range = table
        .get("ports")
        .and_then(toml::Value::as_str)
        .map(super::replica_set::parse_ports);
    match range {
        Some(Ok((first, _))) => {
            table.insert("port".into(), toml::Value::Integer(i64::from(first)));
            true
        }
        Some(Err(m)) => {
            p.at(p.key(span, "ports"), format!("model {named:?}: {m}"));
            false
        }
        None => {
            p.at(
                p.key(span, "replicas"),
                format!("model {named:?}: a replica set needs ports = \"FIRST-LAST\", one port per replica"),
            );
            false
        }
    }
}

/// The entry's name and ports: each its own (not an earlier entry's), a port a server can
/// listen on, a name that is one word (it names a replica).
fn identity_problems(
    p: &mut Problems<'_>,
    span: &std::ops::Range<usize>,
    e: &Entry,
    is_set: bool,
    own_ports: &[u16],
    taken: &Taken,
) {
    if taken.names.contains(&e.name) {
        p.at(
            p.key(span, "name"),
            format!("model name {:?} is used twice", e.name),
        );
    }
    if let Some((port, m)) = own_ports
        .iter()
        .find_map(|x| taken.ports.get(x).map(|m| (x, m)))
    {
        let at = if is_set { "ports" } else { "port" };
        p.at(
            p.key(span, at),
            format!("port {port} is already used by model {m:?}"),
        );
    }
    if e.port == 0 {
        p.at(
            p.key(span, "port"),
            format!(
                "model {:?}: port 0 is not a port a server listens on",
                e.name
            ),
        );
    }
    if e.name.is_empty()
        || e.name.contains(char::is_whitespace)
        || e.name.contains(super::replica_set::MEMBER_SEP)
    {
        p.at(
            p.key(span, "name"),
            format!(
                "model name {:?} must be one word, without {:?} (it names a replica)",
                e.name,
                super::replica_set::MEMBER_SEP
            ),
        );
    }
}

/// How the model is started: exactly one of a command, a systemd unit, a container (with its
/// image), every placeholder one partop fills in. None when it is not (reported at `at`).
fn launch_of(p: &mut Problems<'_>, at: usize, name: &str, l: &LaunchDoc) -> Option<Launch> {
    if l.docker.is_none() && (l.image.is_some() || l.args.is_some()) {
        p.at(
            at,
            format!("model {name:?}: launch.image and launch.args go with launch.docker"),
        );
    }
    let launch = match (&l.command, &l.systemd, &l.docker) {
        (Some(command), None, None) => {
            if command.is_empty() {
                p.at(at, "launch.command is empty".into());
            }
            Some(Launch::Command {
                command: command.clone(),
                env: l.env.clone(),
                stop: l.stop.clone(),
            })
        }
        (None, Some(unit), None) => Some(Launch::Systemd { unit: unit.clone() }),
        (None, None, Some(container)) => match &l.image {
            Some(image) if !image.trim().is_empty() => Some(Launch::Docker {
                container: container.clone(),
                image: image.clone(),
                args: l.args.clone().unwrap_or_default(),
                env: l.env.clone(),
            }),
            _ => {
                p.at(
                    at,
                    format!(
                        "model {name:?}: launch.docker needs launch.image: partop runs the container on the logical GPU it places the model on, and `docker start` cannot change an existing container's devices"
                    ),
                );
                None
            }
        },
        _ => {
            p.at(
                at,
                format!(
                    "model {name:?}: give exactly one of launch.command, launch.systemd, launch.docker"
                ),
            );
            None
        }
    };
    if let Some(launch) = &launch {
        placeholder_problems(p, at, name, launch);
    }
    launch
}

/// Every `{...}` in a launch's texts must be a placeholder partop fills in (a typo would reach
/// the server as written).
fn placeholder_problems(p: &mut Problems<'_>, at: usize, name: &str, launch: &Launch) {
    let texts: Vec<&String> = match launch {
        Launch::Command {
            command, env, stop, ..
        } => command
            .iter()
            .chain(env.values())
            .chain(stop.iter().flatten())
            .collect(),
        Launch::Systemd { unit } => vec![unit],
        Launch::Docker {
            container,
            image,
            args,
            env,
        } => std::iter::once(container)
            .chain(std::iter::once(image))
            .chain(args)
            .chain(env.values())
            .collect(),
    };
    for t in texts {
        let mut rest = t.as_str();
        while let Some(i) = rest.find('{') {
            let end = rest[i..].find('}').map_or(rest.len(), |j| i + j + 1);
            let ph = &rest[i..end];
            if !PLACEHOLDERS.contains(&ph) {
                p.at(
                    at,
                    format!(
                        "model {name:?}: unknown placeholder {ph} (known: {})",
                        PLACEHOLDERS.join(" ")
                    ),
                );
            }
            rest = &rest[end..];
        }
    }
}

/// The HBM the model needs per logical GPU: as written, or from its size; 0 with a problem
/// reported when neither is a size.
fn memory_of(p: &mut Problems<'_>, span: &std::ops::Range<usize>, e: &Entry) -> f64 {
    match (e.memory_gb, e.params_b) {
        (Some(m), _) if m.is_finite() && m > 0.0 && m <= 4096.0 => m,
        (Some(m), _) => {
            p.at(
                p.key(span, "memory_gb"),
                format!(
                    "model {:?}: memory_gb = {m} is not a size: give the HBM it needs per logical GPU in GiB, more than 0 (e.g. memory_gb = 80)",
                    e.name
                ),
            );
            0.0
        }
        (None, Some(b)) if b.is_finite() && b > 0.0 => {
            memory_need_gb(b, e.precision, e.tensor_parallel)
        }
        (None, Some(b)) => {
            p.at(
                p.key(span, "params_b"),
                format!(
                    "model {:?}: params_b = {b} is not a model size: give billions of parameters, more than 0 (e.g. params_b = 70)",
                    e.name
                ),
            );
            0.0
        }
        (None, None) => {
            p.at(
                span.start,
                format!(
                    "model {:?}: say how much HBM it needs: memory_gb = N (per logical GPU), or params_b = N with precision",
                    e.name
                ),
            );
            0.0
        }
    }
}

/// Where the model wants to run: a named logical GPU, or any with enough free memory; not
/// both. None when neither is usable (reported).
fn want_of(p: &mut Problems<'_>, span: &std::ops::Range<usize>, e: &Entry) -> Option<Want> {
    if let Some(m) = e.min_free_gb
        && !(m.is_finite() && m >= 0.0)
    {
        p.at(
            p.key(span, "min_free_gb"),
            format!(
                "model {:?}: min_free_gb = {m} must be 0 or more GiB",
                e.name
            ),
        );
    }
    match (&e.gpu, e.min_free_gb) {
        (Some(_), Some(_)) => {
            p.at(
                p.key(span, "min_free_gb"),
                format!("model {:?}: give gpu or min_free_gb, not both", e.name),
            );
            None
        }
        (Some(g), None) if valid_bdf(g) => Some(Want::Gpu(g.clone())),
        (Some(g), None) => {
            p.at(
                p.key(span, "gpu"),
                format!(
                    "model {:?}: gpu = {g:?} is not a logical GPU's identity; write its BDF with the partition function in hex, like \"0000:05:00.1\" (see `partop snapshot`)",
                    e.name
                ),
            );
            None
        }
        (None, m) => Some(Want::AnyFree(m.unwrap_or(0.0))),
    }
}

/// Each balancer goes with the replica set it fronts (its members carry it to the plan).
fn attach_balancers(
    p: &mut Problems<'_>,
    balancers: Vec<toml::Spanned<toml::Table>>,
    models: &mut [ModelSpec],
) {
    for spanned in balancers {
        let at = spanned.span().start;
        match super::balancer::entry(spanned.into_inner()) {
            Err(m) => p.at(at, m),
            Ok(b) => match models
                .iter_mut()
                .find(|m| m.name == b.set && m.replicas.is_some())
            {
                None => p.at(
                    at,
                    format!(
                        "balancer for {:?}: no replica set of that name here ([[model]] with replicas)",
                        b.set
                    ),
                ),
                Some(m) if m.balancer.is_some() => p.at(
                    at,
                    format!("balancer for {:?}: the set has a balancer already", b.set),
                ),
                Some(m) => m.balancer = Some(b),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[[model]]
name = "llama-8b"
model = "meta-llama/Llama-3.1-8B-Instruct"
port = 8001
params_b = 8
precision = "fp16"
launch.command = ["vllm", "serve", "{model}", "--port", "{port}"]
launch.env = { VLLM_USE_V1 = "1" }

[[model]]
name = "qwen-72b"
model = "Qwen/Qwen2.5-72B-Instruct"
port = 8002
gpu = "0000:05:00.0"
memory_gb = 150
launch.systemd = "vllm@{device}.service"
"#;

    #[test]
    fn parses_entries_with_defaults_and_derived_memory() {
        let r = parse("models.toml", GOOD).unwrap();
        assert_eq!(r.models.len(), 2);
        let a = &r.models[0];
        assert_eq!(a.health_url, "http://127.0.0.1:8001/health");
        assert!((a.memory_gb - 21.2).abs() < 0.01, "{}", a.memory_gb);
        assert_eq!(a.want, Want::AnyFree(0.0));
        assert_eq!(a.defined_at, "models.toml:2");
        assert_eq!(
            a.launch_text(&[3], &[]),
            "HIP_VISIBLE_DEVICES=3 VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8001"
        );
        let b = &r.models[1];
        assert_eq!(b.want, Want::Gpu("0000:05:00.0".into()));
        assert_eq!(b.launch_text(&[0], &[]), "systemctl start vllm@0.service");
        assert_eq!(
            b.stop_text(&[0], &[], None),
            "systemctl stop vllm@0.service"
        );
    }

    #[test]
    fn errors_are_located() {
        let bad = GOOD.replace("port = 8002", "port = 8001");
        let e = parse("m.toml", &bad).unwrap_err();
        assert_eq!((e.line, e.column), (14, 1), "{e}");
        assert!(e.message.contains("8001"), "{e}");
        let bad = GOOD.replace("\"{port}\"]", "\"{prot}\"]");
        let e = parse("m.toml", &bad).unwrap_err();
        assert!(
            e.message.contains("{prot}") && e.message.contains("{device}"),
            "{e}"
        );
        assert_eq!(e.line, 8);
        let bad = GOOD.replace("gpu = \"0000:05:00.0\"", "gpu = \"3\"");
        let e = parse("m.toml", &bad).unwrap_err();
        assert!(e.message.contains("partition function"), "{e}");
        let bad = GOOD.replace("memory_gb = 150", "");
        let e = parse("m.toml", &bad).unwrap_err();
        assert!(e.message.contains("memory_gb"), "{e}");
        let bad = GOOD.replace("launch.systemd", "launch.docker = \"x\"\nlaunch.systemd");
        let e = parse("m.toml", &bad).unwrap_err();
        assert!(e.message.contains("exactly one"), "{e}");
        let e = parse("m.toml", "[[model]]\nname = 3\n").unwrap_err();
        assert_eq!((e.origin.as_str(), e.line), ("m.toml", 2), "{e}");
        let e = parse("m.toml", "[[model]]\nnmae = \"x\"\n").unwrap_err();
        assert!(e.message.contains("nmae"), "{e}");
    }

    /// The index locates every offset as the scan does: every character boundary (end included)
    /// of 6 texts (empty, no newline, leading, trailing and doubled newlines, multi-byte
    /// characters).
    #[test]
    fn line_index_agrees_with_line_col_at_every_offset() {
        let mut ran = 0;
        for text in ["", "abc", "\nabc", "a\nb\n", "a\n\n\nbé\ncd", "é\nü\n"] {
            let index = LineIndex::new(text);
            for off in (0..=text.len()).filter(|o| text.is_char_boundary(*o)) {
                assert_eq!(
                    index.line_col(off),
                    line_col(text, off),
                    "{text:?} at {off}"
                );
                ran += 1;
            }
        }
        assert_eq!(ran, 30, "{ran} offsets");
    }

    #[test]
    fn need_from_precision() {
        assert!((memory_need_gb(70.0, Precision::Fp16, 1) - 170.0).abs() < 0.01);
        assert!((memory_need_gb(70.0, Precision::Fp8, 1) - 86.0).abs() < 0.01);
        assert!((memory_need_gb(70.0, Precision::Int4, 2) - 22.0).abs() < 0.01);
    }
}
