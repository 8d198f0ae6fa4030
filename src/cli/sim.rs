//! `partop sim …`: the simulated node's lifecycle and its fake tools.

use crate::cli::out::out;
use crate::cli::{SimCmd, exit};
use crate::sim::scenario::{BUILTIN, Scenario};
use crate::sim::session;
use anyhow::{Context, Result};
use std::io::Write;
use std::time::Duration;

/// Whether a `partop sim` command changes a simulated node (what `--read-only` removes).
fn sim_mutates(action: &SimCmd) -> bool {
    match action {
        SimCmd::Stop { .. }
        | SimCmd::Resume { .. }
        | SimCmd::Reload { .. }
        | SimCmd::NvidiaAttach { .. }
        | SimCmd::Cluster { .. } => true,
        SimCmd::AmdSmi { args, .. } => args.first().is_some_and(|a| a == "set" || a == "reset"),
        SimCmd::NvidiaSmi { args, .. } => args.iter().any(|a| {
            matches!(
                a.as_str(),
                "-mig"
                    | "--multi-instance-gpu"
                    | "-cgi"
                    | "-dgi"
                    | "-cci"
                    | "-dci"
                    | "-r"
                    | "--gpu-reset"
            ) || a.starts_with("--create-gpu-instance")
                || a.starts_with("--destroy-gpu-instance")
        }),
        _ => false,
    }
}

pub fn sim(action: SimCmd, read_only: bool) -> Result<u8> {
    if read_only && sim_mutates(&action) {
        let mut e = std::io::stderr();
        let _ = write!(
            e,
            "{}",
            crate::cli::out::read_only_refusal("changed on the simulated node")
        );
        return Ok(exit::USAGE);
    }
    match action {
        SimCmd::List => {
            let mut s = String::new();
            for (name, text) in BUILTIN {
                let d = Scenario::parse(name, text)
                    .map(|s| s.description)
                    .unwrap_or_default();
                s.push_str(&format!("{name:<24} {d}\n"));
            }
            out(&s)?;
            Ok(exit::OK)
        }
        SimCmd::Start {
            scenario,
            state,
            seed,
            kubernetes,
            kubeconfig,
            context,
        } => sim_start(&scenario, &state, seed, kubernetes, kubeconfig, context),
        SimCmd::Stop { state } => sim_stop(&state),
        SimCmd::Resume { state } => {
            for r in session::resume(&state, &[], None)? {
                out(&format!("{r}\n"))?;
            }
            Ok(exit::OK)
        }
        SimCmd::Fleet {
            nodes,
            base_port,
            template,
            every,
            hosts_out,
        } => sim_fleet(nodes, base_port, &template, every, hosts_out.as_deref()),
        SimCmd::Cluster {
            kubeconfig,
            context,
            nodes,
            gpu_nodes,
            mig_nodes,
            mig_gpu_nodes,
            dir,
            unmanaged,
            fail,
        } => sim_cluster(cluster_options(
            kubeconfig,
            context,
            [nodes, gpu_nodes, mig_nodes, mig_gpu_nodes],
            dir,
            unmanaged,
            fail,
        )),
        SimCmd::Status { state } => {
            let st = crate::sim::state::SimState::load(&state)?;
            out(&session::status(&st))?;
            Ok(exit::OK)
        }
        SimCmd::AmdSmi { state, args } => {
            let stdin = std::io::stdin();
            let mut input = stdin.lock();
            let mut o = std::io::stdout();
            let mut e = std::io::stderr();
            let code = crate::sim::amdsmi::main(&state, &args, &mut input, &mut o, &mut e);
            Ok(u8::try_from(code.rem_euclid(256)).unwrap_or(1))
        }
        SimCmd::NvidiaInit {
            state,
            product,
            gpus,
        } => nvidia_init(&state, &product, gpus),
        SimCmd::NvidiaAttach {
            state,
            pid,
            gpu,
            gi,
            mib,
        } => nvidia_attach(&state, pid, gpu, gi, mib),
        SimCmd::NvidiaSmi { state, args } => {
            let (code, o, e) = crate::sim::nvidia::main(&state, &args);
            out(&o)?;
            let _ = std::io::stderr().write_all(e.as_bytes());
            Ok(u8::try_from(code).unwrap_or(1))
        }
        SimCmd::Serve { state, name, port } => {
            // Returns only on failure (it becomes the server otherwise); the message goes to
            // the model's log, where a real vLLM's traceback would be.
            Err(session::serve(&state, &name, port).into())
        }
        SimCmd::Reload { state } => {
            let code = crate::sim::amdsmi::changes::modprobe_reload(
                &state,
                &mut std::io::stderr(),
                &mut std::io::stderr(),
            );
            Ok(u8::try_from(code).unwrap_or(1))
        }
    }
}

/// `partop sim nvidia-init`: a simulated NVIDIA node's state, MIG off.
fn nvidia_init(state: &std::path::Path, product: &str, gpus: u32) -> Result<u8> {
    crate::sim::nvidia::NvSimState::create(product, gpus)
        .map_err(anyhow::Error::msg)?
        .save(state)
        .map_err(anyhow::Error::msg)?;
    out(&format!(
        "{gpus} x {product} (MIG off) in {}\nuse it: partop --source nvidia --nvidia-smi SCRIPT, where SCRIPT runs `partop sim nvidia-smi --state {} \"$@\"`\n",
        state.display(),
        state.display()
    ))?;
    Ok(exit::OK)
}

/// `partop sim nvidia-attach`: a process holding memory on a simulated NVIDIA GPU.
fn nvidia_attach(
    state: &std::path::Path,
    pid: u32,
    gpu: usize,
    gi: Option<u32>,
    mib: u64,
) -> Result<u8> {
    let mut s = crate::sim::nvidia::NvSimState::load(state).map_err(anyhow::Error::msg)?;
    let g = s
        .gpus
        .get_mut(gpu)
        .with_context(|| format!("no simulated NVIDIA GPU {gpu}"))?;
    g.procs.push(crate::sim::nvidia::NvSimProc {
        pid,
        start_ticks: crate::sim::state::process_start(pid),
        gi,
        used_mib: mib,
    });
    s.save(state).map_err(anyhow::Error::msg)?;
    Ok(exit::OK)
}

/// `partop sim start`: the scenario's node started at `state` (a kubelet twin with
/// `--kubernetes`, joining the API server of `kubeconfig` when given), its status said.
fn sim_start(
    scenario: &str,
    state: &std::path::Path,
    seed: Option<u64>,
    kubernetes: bool,
    kubeconfig: Option<std::path::PathBuf>,
    context: Option<String>,
) -> Result<u8> {
    let mut sc = Scenario::load(scenario)?;
    if kubernetes && sc.kubernetes.is_none() {
        sc.kubernetes = Some(crate::sim::kubelet::KubeSpec::default());
    }
    let api = match kubeconfig {
        Some(k) => Some(crate::sim::kubelet::SimApi::new(&k, context).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let st = session::start_with(&sc, state, seed, api)?;
    out(&session::status(&st))?;
    if let Some(k) = &st.kubernetes
        && let Some(api) = &k.api
    {
        out(&format!(
            "  Kubernetes node {} joins the API server of {}{}; its agent logs to {}\n",
            crate::domain::text::escape_controls(&k.node_name()),
            api.kubeconfig.display(),
            api.context
                .as_deref()
                .map(|c| format!(" (context {})", crate::domain::text::escape_controls(c)))
                .unwrap_or_default(),
            st.log_dir.join("kernel-twin.log").display()
        ))?;
    }
    Ok(exit::OK)
}

/// `partop sim stop`: the node's processes stopped; a node `partop --sim` left running is
/// discarded whole, the apply on it ended first.
fn sim_stop(state: &std::path::Path) -> Result<u8> {
    // A node `partop --sim` started and left running (it quit during a repartition)
    // is discarded whole: the apply on it is ended, then every file of it removed.
    let ephemeral = state.parent() == crate::sim::session::ephemeral_state_path().parent()
        && state
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("node-"));
    if ephemeral && let Some(h) = crate::exec::lock::holder(&crate::exec::lock::sim_path(state)) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(h.pid).unwrap_or(0));
        if h.pid != 0 && nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).is_ok() {
            out(&format!(
                "the repartition on it (pid {}) is ended: the node is discarded\n",
                h.pid
            ))?;
            let end = std::time::Instant::now() + Duration::from_secs(5);
            while std::time::Instant::now() < end && nix::sys::signal::kill(pid, None).is_ok() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    for s in session::stop(state, Duration::from_secs(3))? {
        let how = if s.killed {
            "did not exit on SIGTERM; sent SIGKILL"
        } else {
            "stopped"
        };
        out(&format!("{}: {how}\n", s.name))?;
    }
    if ephemeral {
        drop(crate::node::SimGuard {
            state: state.to_path_buf(),
        });
        out(&format!("{} and its files are removed\n", state.display()))?;
    }
    Ok(exit::OK)
}

/// `partop sim cluster`'s options from its arguments: counts `[nodes, gpu_nodes, mig_nodes,
/// mig_gpu_nodes]` (MIG nodes at most the nodes), the directory under the state directory by
/// default.
fn cluster_options(
    kubeconfig: Option<std::path::PathBuf>,
    context: Option<String>,
    [nodes, gpu_nodes, mig_nodes, mig_gpu_nodes]: [u32; 4],
    dir: Option<std::path::PathBuf>,
    unmanaged: Vec<String>,
    fail: Vec<String>,
) -> crate::sim::cluster::Options {
    crate::sim::cluster::Options {
        target: crate::collect::cluster::Target {
            kubeconfig,
            context,
            selector: None,
        },
        nodes: nodes as usize,
        gpu_nodes: gpu_nodes as usize,
        mig_nodes: (mig_nodes.min(nodes)) as usize,
        mig_gpu_nodes: mig_gpu_nodes as usize,
        dir: dir.unwrap_or_else(|| {
            crate::sim::session::ephemeral_state_path()
                .parent()
                .map_or_else(
                    || std::path::PathBuf::from("."),
                    std::path::Path::to_path_buf,
                )
                .join("cluster")
        }),
        unmanaged,
        fail,
    }
}

/// `partop sim cluster`: the simulated cluster until SIGTERM or SIGINT; each line it says
/// (ready, each profile or config applied or failed) on stdout at once.
fn sim_cluster(o: crate::sim::cluster::Options) -> Result<u8> {
    let rt = crate::cli::out::runtime()?;
    let r = rt.block_on(async {
        let stop = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        crate::sim::cluster::run(
            o,
            |l| {
                let mut so = std::io::stdout();
                let _ = writeln!(so, "{}", crate::domain::text::escape_controls(&l));
                let _ = so.flush();
            },
            stop,
        )
        .await
    });
    rt.shutdown_timeout(Duration::from_millis(500));
    r.map_err(anyhow::Error::msg)?;
    Ok(exit::OK)
}

/// `partop sim fleet`: N simulated nodes, each behind its own loopback `partop serve`.
fn sim_fleet(
    nodes: u16,
    base: u16,
    template: &std::path::Path,
    every: f64,
    hosts_out: Option<&std::path::Path>,
) -> Result<u8> {
    use std::sync::Arc;
    let text = crate::collect::small_file::operator_text(template)
        .with_context(|| format!("cannot read {}", template.display()))?;
    let t: crate::domain::Snapshot = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a snapshot document (partop snapshot --json)",
            template.display()
        )
    })?;
    if !(0.1..=3600.0).contains(&every) {
        anyhow::bail!("--every {every}: give 0.1 to 3600 seconds");
    }
    crate::serve::log::install(log::LevelFilter::Warn);
    let rt = crate::cli::out::runtime()?;
    rt.block_on(async move {
        let mut txs = Vec::new();
        let mut hosts = String::new();
        let mut ports = Vec::new();
        for i in 0..nodes {
            // --base-port 0: each node on a port the kernel picks; what is written is the port
            // bound, never the 0 asked for.
            let ask = if base == 0 {
                0
            } else {
                base.checked_add(i)
                    .ok_or_else(|| anyhow::anyhow!("ports past 65535"))?
            };
            let l = tokio::net::TcpListener::bind(("127.0.0.1", ask))
                .await
                .with_context(|| format!("cannot listen on 127.0.0.1:{ask}"))?;
            let port = l.local_addr()?.port();
            ports.push(port);
            let (tx, rx) = tokio::sync::watch::channel(Arc::new(
                crate::serve::http::Published::default(),
            ));
            tokio::spawn(crate::serve::http::serve(
                l,
                rx,
                crate::serve::http::Limits::default(),
                Arc::new(crate::serve::http::Stats::default()),
                env!("CARGO_PKG_VERSION"),
                std::future::pending(),
            ));
            txs.push(tx);
            hosts.push_str(&format!("http://127.0.0.1:{port}\n"));
        }
        if let Some(p) = hosts_out {
            crate::exec::safe_file::write_atomic(p, hosts.as_bytes()).with_context(|| format!("cannot write {}", p.display()))?;
        }
        let range = if base == 0 {
            format!(
                "ports the kernel picked ({})",
                ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            format!("{base}-{}", u32::from(base) + u32::from(nodes) - 1)
        };
        out(&format!(
            "{nodes} simulated nodes on 127.0.0.1:{range}; partop fleet --hosts-file FILE reads them\n"
        ))?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut tick = tokio::time::interval(Duration::from_secs_f64(every));
        let mut n: u64 = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
            let now = crate::collect::clock::now_ms();
            for (i, tx) in txs.iter().enumerate() {
                let s = crate::sim::fleet::node_sample(&t, i, n, now);
                let _ = tx.send(Arc::new(crate::serve::http::Published {
                    snap: Some(Arc::new(s)),
                    findings: Vec::new(),
                    apply: None,
                    cluster: String::new(),
                }));
            }
            n += 1;
        }
        anyhow::Ok(())
    })?;
    Ok(exit::OK)
}
