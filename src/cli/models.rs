//! `partop models`: the served models without the UI. Listing and advice only read; start and
//! stop print what they will run, ask (or take `--yes`), honour `--dry-run` and `--read-only`,
//! and are journaled by the executor.

use crate::cli::out::say;
use crate::cli::{ModelsCmd, SourceArgs, exit};
use crate::domain::model_status::{ModelState, ServedModel};
use crate::domain::models::Want;
use crate::domain::placement::advise_node;
use crate::domain::served::entry_for_model;
use crate::domain::snapshot::Snapshot;
use crate::exec::models::{Ops, StartFailed, Starting};
use crate::node::{Node, open};
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::time::Duration;

fn sample(node: &Node) -> Result<Snapshot> {
    let rt = crate::cli::out::runtime()?;
    let mut c = node.collector();
    Ok(rt.block_on(c.sample()))
}

fn ask(yes: bool, what: &str) -> Result<bool> {
    Ok(yes || crate::cli::out::confirm(&format!("{what} Type yes to go on: "), "yes")?)
}

/// The models table.
pub fn table(models: &[ServedModel]) -> String {
    let mut o = format!(
        "{:<16} {:<10} {:<9} {:<10} {:>5} {:>4} {:>4} {:>4} {:>6} {:>3}  {}\n",
        "NAME",
        "SERVER",
        "STATE",
        "GPU",
        "PORT",
        "RUN",
        "WAIT",
        "KV",
        "TOK/S",
        "RST",
        "MODEL / WHY"
    );
    for m in models {
        let gpus = m.gpus_label();
        let why = m
            .reason
            .as_ref()
            .map_or_else(String::new, |r| format!(" ({r})"));
        o.push_str(&format!(
            "{:<16} {:<10} {:<9} {:<10} {:>5} {:>4} {:>4} {:>4} {:>6} {:>3}  {}{why}\n",
            m.name,
            m.server.as_deref().unwrap_or("-"),
            m.state.label(),
            gpus,
            m.port.map_or_else(|| "-".into(), |p| p.to_string()),
            crate::report::figure(m.running, false),
            crate::report::figure(m.waiting, false),
            crate::report::figure(m.kv_cache, true),
            crate::report::figure(m.tokens_per_sec, false),
            m.restarts,
            m.model,
        ));
    }
    for set in crate::domain::replicas::summaries(models) {
        o.push_str(&format!("set {set}\n"));
    }
    o
}

/// `partop models ...`.
pub fn models(
    src: &SourceArgs,
    action: Option<ModelsCmd>,
    settings: &crate::config::Settings,
) -> Result<u8> {
    let node = open(src)?;
    let action = action.unwrap_or(ModelsCmd::List { json: false });
    let mutating = matches!(
        action,
        ModelsCmd::Start { dry_run: false, .. }
            | ModelsCmd::Stop { dry_run: false, .. }
            | ModelsCmd::Add { write: true, .. }
    );
    if mutating && settings.read_only {
        say(&crate::cli::out::read_only_refusal(
            "started, stopped or written",
        ))?;
        return Ok(exit::USAGE);
    }
    // A model start or stop is a change to the node: one at a time, never during an apply.
    let _lock = if mutating {
        Some(crate::exec::lock::acquire(
            &crate::node::lock_path(&node),
            &crate::exec::lock::Holder::me("models", "", &settings.journal),
        )?)
    } else {
        None
    };
    let ops = Ops {
        log_dir: node.model_log_dir(),
        journal: settings.journal.clone(),
        simulated: node.sim.is_some(),
        grace: Duration::from_secs(30),
        kill_after: false,
    };
    match action {
        ModelsCmd::List { json } => list(&node, json),
        ModelsCmd::Start {
            name,
            gpu,
            yes,
            dry_run,
        } => start(&node, &ops, &name, gpu, yes, dry_run),
        ModelsCmd::Stop {
            name,
            grace,
            kill_after_grace,
            yes,
            dry_run,
        } => {
            let ops = Ops {
                grace: Duration::from_secs_f64(grace.max(0.0)),
                kill_after: kill_after_grace,
                ..ops
            };
            stop(&node, &ops, &name, yes, dry_run)
        }
        ModelsCmd::Measure { secs } => measure(&node, secs),
        ModelsCmd::Advise { json } => advise(&node, src, json),
        ModelsCmd::Add { pid, write } => add(&node, pid, write, settings),
    }
}

/// `models list`: the table or JSON, a broken registry said (exit 3).
fn list(node: &Node, json: bool) -> Result<u8> {
    let snap = sample(node)?;
    if json {
        say(&(serde_json::to_string_pretty(&snap.models)? + "\n"))?;
    } else {
        say(&table(&snap.models))?;
    }
    // A broken registry is said, with its location; discovery still answered.
    let down: Vec<&str> = snap
        .sources
        .iter()
        .filter(|s| s.name == "models registry")
        .filter_map(|s| s.error.as_deref())
        .collect();
    for e in &down {
        let _ = writeln!(std::io::stderr(), "models registry: {e}");
    }
    Ok(if down.is_empty() {
        exit::OK
    } else {
        exit::PARTIAL
    })
}

/// `models start`: placed on the node as it is now, the launch line shown, confirmed, healthy.
fn start(
    node: &Node,
    ops: &Ops,
    name: &str,
    gpu: Option<String>,
    yes: bool,
    dry_run: bool,
) -> Result<u8> {
    let snap = sample(node)?;
    let m = find(&snap, name)?;
    if let Some(pid) = m.pid {
        bail!(
            "{name} is already running (pid {pid}); stop it first with `partop models stop {name}`"
        );
    }
    let spec = m.spec.clone().context("not a registered model")?;
    let (ids, bdfs) = crate::exec::models::place(&snap, &spec, gpu.map(Want::Gpu))
        .map_err(|why| anyhow::anyhow!("{name} does not fit on this node now: {why}"))?;
    let text = spec.launch_text(&ids, &bdfs);
    say(&format!(
        "start {name} on logical GPU {} ({}):\n  {text}\n",
        ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        bdfs.join(",")
    ))?;
    if dry_run {
        return Ok(exit::OK);
    }
    if !ask(yes, "")? {
        say("nothing started\n")?;
        return Ok(exit::FAILED);
    }
    let started = crate::exec::models::start(ops, &spec, &ids, &bdfs, |p| {
        let _ = say(&match p {
            Starting::Launched(l) => {
                format!("started (log {}); waiting for {}\n", l.log, spec.health_url)
            }
            Starting::Waiting(p) => format!("  {p}\n"),
        });
    });
    match started {
        Ok(t) => {
            say(&format!("{name} healthy after {}s\n", t.as_secs()))?;
            Ok(exit::OK)
        }
        Err(StartFailed::Launch(e)) => Err(anyhow::Error::msg(e)),
        Err(StartFailed::Unhealthy(e)) => {
            say(&format!("{e}\n"))?;
            Ok(exit::FAILED)
        }
    }
}

/// `models stop`: the stop shown, confirmed, done with the grace asked.
fn stop(node: &Node, ops: &Ops, name: &str, yes: bool, dry_run: bool) -> Result<u8> {
    let snap = sample(node)?;
    let m = find(&snap, name)?;
    let spec = m.spec.clone().context("not a registered model")?;
    let text = spec.stop_text(&m.gpus, &m.bdfs, m.pid);
    say(&format!("stop {name}: {text}\n"))?;
    if dry_run {
        return Ok(exit::OK);
    }
    if m.state == ModelState::Stopped {
        say(&format!("{name} is not running\n"))?;
        return Ok(exit::OK);
    }
    if !ask(yes, "")? {
        say("nothing stopped\n")?;
        return Ok(exit::FAILED);
    }
    match crate::exec::models::stop_served(ops, m, &spec) {
        Ok(d) => {
            say(&format!("{name}: {d}\n"))?;
            Ok(exit::OK)
        }
        Err(e) => {
            say(&format!("{name}: {e}\n"))?;
            Ok(exit::FAILED)
        }
    }
}

/// `models measure`: each running model's throughput on the layout, kept in the store.
fn measure(node: &Node, secs: u64) -> Result<u8> {
    let snap = sample(node)?;
    let layout = crate::domain::throughput::layout_of(&snap)
        .context("the node's partition modes are unknown: nothing to measure against")?;
    let groups = crate::domain::throughput::measured_models(&snap);
    if groups.is_empty() {
        bail!("no registered model runs: nothing to measure (partop models list)");
    }
    let path = crate::exec::throughput::path();
    let mut store = crate::exec::throughput::load(&path).map_err(anyhow::Error::msg)?;
    say(&format!(
        "measuring {} model(s) on {layout} for {secs} s...\n",
        groups.len()
    ))?;
    for (name, urls) in groups {
        let w = crate::collect::served::measure::windows(&urls, secs);
        match crate::domain::throughput::measure(&snap.host, &layout, &name, &w) {
            Some(m) => {
                say(&format!("{name}: {m}\n"))?;
                store.record(m);
            }
            None => say(&format!("{name}: no server answered at both ends\n"))?,
        }
    }
    crate::exec::throughput::save(&path, &store).map_err(anyhow::Error::msg)?;
    say(&format!("kept in {}\n", path.display()))?;
    Ok(exit::OK)
}

/// `models advise`: the layouts ranked for the registry, beside what this node measured.
fn advise(node: &Node, src: &SourceArgs, json: bool) -> Result<u8> {
    let snap = sample(node)?;
    if node.registry()?.is_none() {
        bail!("no model registry: write models.toml (docs/models.md) or pass --models FILE");
    }
    let ranked = advise_node(&snap).map_err(anyhow::Error::msg)?;
    if json {
        say(&(serde_json::to_string_pretty(&ranked)? + "\n"))?;
        return Ok(exit::OK);
    }
    // The command it prints must work as printed: the same node (a simulated one by its
    // state file) and the same registry.
    let mut node_args = String::new();
    if let Some(st) = &src.sim_state {
        node_args.push_str(&format!(" --sim-state {}", st.display()));
    }
    if let Some(m) = &src.models {
        node_args.push_str(&format!(" --models {}", m.display()));
    }
    say(&advice_text(&ranked, &snap, &node_args))?;
    // Beside the estimate, what this node measured under each candidate layout. A store
    // that cannot be read leaves the estimate standing: said, exit 3 (partial).
    let store = match crate::exec::throughput::load(&crate::exec::throughput::path()) {
        Ok(s) => s,
        Err(e) => {
            say(&format!(
                "measured on this node: unknown, the store cannot be read: {e}\n"
            ))?;
            return Ok(exit::PARTIAL);
        }
    };
    let layouts: Vec<String> = ranked
        .iter()
        .map(|p| format!("{}/{}", p.compute, p.memory))
        .collect();
    let lines = crate::domain::throughput::advice_lines(
        &store,
        &snap.host,
        &layouts,
        &crate::domain::throughput::model_names(&snap),
    );
    say("measured on this node (partop models measure):\n")?;
    for l in lines {
        say(&format!("  {l}\n"))?;
    }
    Ok(exit::OK)
}

/// `models add`: a registry entry for a running server, printed or appended.
fn add(node: &Node, pid: u32, write: bool, settings: &crate::config::Settings) -> Result<u8> {
    let snap = sample(node)?;
    let m = snap
        .models
        .iter()
        .find(|m| m.pid == Some(pid))
        .with_context(|| {
            format!(
                "pid {pid} is not a model server partop recognises (vLLM, SGLang, llama.cpp, TGI)"
            )
        })?;
    if m.spec.is_some() {
        bail!("pid {pid} is {}, already in the registry", m.name);
    }
    let entry = entry_for_model(&snap, m).with_context(|| format!("pid {pid} is gone"))?;
    say(&entry)?;
    if write {
        let path = node
            .models
            .clone()
            .unwrap_or_else(|| crate::config::paths::config_dir().join("models.toml"));
        match crate::exec::registry::append_entry(&path, &entry, &settings.journal)? {
            crate::exec::registry::Added::Written => {
                say(&format!("appended to {}\n", path.display()))?;
            }
            crate::exec::registry::Added::AlreadyThere => {
                say(&format!("already in {}: nothing written\n", path.display()))?;
            }
        }
    }
    Ok(exit::OK)
}

fn find<'a>(snap: &'a Snapshot, name: &str) -> Result<&'a ServedModel> {
    snap.models
        .iter()
        .find(|m| m.name == name)
        .with_context(|| {
            format!(
                "no model {name:?}; known: {}",
                snap.models
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// The advisor's answer as text: the best layout, where each model goes, the runners-up.
pub fn advice_text(
    ranked: &[crate::domain::placement::Proposal],
    snap: &Snapshot,
    node_args: &str,
) -> String {
    let mut o = String::new();
    let Some(best) = ranked.first() else {
        return "no layout offered\n".into();
    };
    let now = snap
        .gpus
        .first()
        .and_then(|g| Some((g.compute_partition?, g.memory_partition?)));
    o.push_str(&format!("best: {}\n", best.summary));
    for p in &best.placed {
        match &p.reason {
            None => o.push_str(&format!(
                "  {:<16} -> {}\n",
                p.name,
                p.to.iter()
                    .map(|r| format!(
                        "{} ({})",
                        r.bdf,
                        crate::domain::placement::gib_mb(r.vram_mb)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some(r) => o.push_str(&format!("  {:<16} does not fit: {r}\n", p.name)),
        }
    }
    if now == Some((best.compute, best.memory)) {
        o.push_str("the node is already in this layout\n");
    } else {
        o.push_str(&format!(
            "stage it: partop{node_args} plan --compute {} --memory {}   (or `A` in the Models view)\n",
            best.compute, best.memory
        ));
    }
    o.push_str("others:\n");
    // Every layout the device offers, ranked (the docs say every one is; SPX/NPS1 was cut).
    for p in ranked.iter().skip(1) {
        o.push_str(&format!("  {}\n", p.summary));
    }
    o
}
