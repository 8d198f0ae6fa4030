//! Command-line definitions (clap). `--help`, completions and the man page all come from here.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Exit codes (documented in docs/cli.md).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// The command failed (nothing useful produced).
    pub const FAILED: u8 = 1;
    /// Bad usage or configuration.
    pub const USAGE: u8 = 2;
    /// Partial: output produced but a source failed or is degraded.
    pub const PARTIAL: u8 = 3;
    /// The reader of partop's output closed it (`| head`): 128 + SIGPIPE, what a shell reports
    /// for a writer the signal ended; nothing is printed.
    pub const PIPE_CLOSED: u8 = 141;

    /// An error that is the caller's usage (what was named does not exist or cannot be used):
    /// `main` exits 2 for it, as for clap's own usage errors.
    #[derive(Debug)]
    pub struct Usage(pub String);

    impl std::fmt::Display for Usage {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Usage {}
}

/// The command line with `--sim` followed by a command (`partop --sim snapshot`) read as the
/// default scenario and that command: `--sim` takes an optional scenario, so clap alone would
/// take the command's name for a scenario. A built-in scenario's name stays a scenario.
pub fn sim_before_command<I>(argv: I) -> Vec<std::ffi::OsString>
where
    I: IntoIterator<Item = std::ffi::OsString>,
{
    use clap::CommandFactory;
    let cmd = Cli::command();
    let is_command = |a: &std::ffi::OsString| {
        a.to_str().is_some_and(|a| {
            !crate::sim::scenario::BUILTIN.iter().any(|(n, _)| *n == a)
                && cmd
                    .get_subcommands()
                    .any(|c| c.get_name() == a || c.get_all_aliases().any(|x| x == a))
        })
    };
    let mut out: Vec<std::ffi::OsString> = argv.into_iter().collect();
    let end = out.iter().position(|a| a == "--").unwrap_or(out.len());
    for i in 1..end {
        if out[i] == "--sim" && out.get(i + 1).is_some_and(&is_command) {
            out[i] = format!("--sim={}", crate::sim::scenario::DEFAULT).into();
            // The first command word ends the options that could be read this way.
            break;
        }
    }
    out
}

/// partop: watch, understand and safely repartition AMD Instinct GPU nodes.
#[derive(Debug, Parser)]
#[command(name = "partop", version, about, long_about = None)]
pub struct Cli {
    /// Where the data comes from.
    #[command(flatten)]
    pub source: SourceArgs,
    /// Remove every mutating command (kill, repartition) and its hints.
    #[arg(long, global = true)]
    pub read_only: bool,
    /// The audit journal (default: config.toml's `journal`, else the state directory's).
    #[arg(long, value_name = "FILE", global = true)]
    pub journal: Option<std::path::PathBuf>,
    /// Refresh interval in seconds, 0.1 to 3600 (default: config.toml's refresh_secs, else 1).
    #[arg(long, value_name = "SECS", global = true, value_parser = crate::config::file::refresh_secs)]
    pub refresh: Option<f64>,
    /// Theme name (built-in: default, light, high-contrast, monochrome) or a user theme.
    #[arg(long)]
    pub theme: Option<String>,
    /// Keymap preset (built-in: default, vim) or a user keymap.
    #[arg(long)]
    pub keymap: Option<String>,
    /// Subcommand; none starts the monitor.
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

pub use crate::node::SourceArgs;

/// `partop fleet`.
#[derive(Debug, clap::Args)]
// `partop fleet node1 node2 plan …`: the words `plan` and `apply` end the node list.
#[command(subcommand_precedence_over_arg = true)]
pub struct FleetArgs {
    /// Nodes: ssh destinations (`node01`, `user@host`, a `~/.ssh/config` Host), or
    /// `http://HOST:PORT` for a `partop serve` endpoint.
    pub hosts: Vec<String>,
    /// A file of nodes, one per line (`#` comments; `HOST partop=/path/to/partop` for a node
    /// where partop is installed elsewhere).
    #[arg(long, value_name = "FILE")]
    pub hosts_file: Option<PathBuf>,
    /// The ssh config every ssh call uses (`-F`); when no node is named otherwise, every `Host`
    /// pattern of it without wildcards is a node.
    #[arg(long, value_name = "FILE")]
    pub ssh_config: Option<PathBuf>,
    /// Read the fleet from this Prometheus (read only): partop's series, or the AMD Device
    /// Metrics Exporter's.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// The partop to run on each node over ssh.
    #[arg(long, value_name = "PATH", default_value = "partop")]
    pub remote_partop: String,
    /// Nodes connected to at once.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub concurrency: u16,
    /// Seconds to connect to a node before it is called unreachable.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub connect_timeout: u32,
    /// Print one round of the fleet (every node once, or its reason) as a table, or JSON, and
    /// exit (for scripts and tests).
    #[arg(long)]
    pub once: bool,
    /// With --once: JSON.
    #[arg(long, requires = "once")]
    pub json: bool,
    /// Read the fleet from a Kubernetes cluster: its GPU nodes, partition labels, allocatable
    /// against capacity, cordons, taints and GPU pods, by watch (read only). With
    /// --prometheus, a node's live detail comes from that Prometheus instead of its pod.
    #[arg(long, conflicts_with_all = ["hosts", "hosts_file", "ssh_config"])]
    pub kubernetes: bool,
    /// With --kubernetes: the kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, value_name = "FILE", requires = "kubernetes")]
    pub kubeconfig: Option<PathBuf>,
    /// With --kubernetes: the kubeconfig's context (default: its current one).
    #[arg(long, value_name = "NAME", requires = "kubernetes")]
    pub context: Option<String>,
    /// With --kubernetes: only nodes with these labels (`key=value,…`, as `kubectl -l`).
    #[arg(long, short = 'l', value_name = "SELECTOR", requires = "kubernetes")]
    pub selector: Option<String>,
    /// With --kubernetes: how an AMD node no manager owns is reached (repeatable,
    /// `NODE=DEST`: an ssh destination, or `rehearse:STATE` for a simulated node); partop plans
    /// and applies there itself.
    #[arg(long, value_name = "NODE=DEST", requires = "kubernetes")]
    pub ssh: Vec<String>,
    /// With --kubernetes: an AMD node no manager owns and not named by --ssh is reached as
    /// USER@ its InternalIP.
    #[arg(long, value_name = "USER", requires = "kubernetes")]
    pub ssh_user: Option<String>,
    /// What to do (default: the fleet view).
    #[command(subcommand)]
    pub action: Option<Box<FleetCmd>>,
}

/// `partop fleet` actions.
#[derive(Debug, Subcommand)]
pub enum FleetCmd {
    /// Plan a change on every node given: each node plans its own (`partop plan` over ssh);
    /// prints every plan and the fleet total, and saves the set for `fleet apply`. With
    /// --kubernetes: every GPU node of the selector, through the cluster's partition manager
    /// (--layout through DCM, --mig-config through the MIG manager): the pods evicted and the
    /// budgets that allow it, the engine, the capacity after.
    Plan {
        /// Target compute mode.
        #[arg(long, conflicts_with_all = ["layout", "mig_config"])]
        compute: Option<String>,
        /// Target memory mode.
        #[arg(long, conflicts_with_all = ["layout", "mig_config"])]
        memory: Option<String>,
        /// With --kubernetes: the layout every node takes, `<compute>_<memory>` as the AMD
        /// node labeller writes it (`cpx_nps4`), applied by AMD's Device Config Manager.
        #[arg(long, value_name = "LAYOUT", conflicts_with = "mig_config")]
        layout: Option<String>,
        /// With --kubernetes: the config of the MIG manager's mig-parted file every node takes.
        #[arg(long, value_name = "NAME")]
        mig_config: Option<String>,
        /// Where to save the plan set (JSON).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Roll a saved plan set out, node by node (or N at a time): `partop apply` on each over
    /// ssh, each node verified before the next; stops at the first failure. One confirmation
    /// covers the exact nodes and plan fingerprints.
    Apply {
        /// The plan set from `fleet plan`.
        set: PathBuf,
        /// Nodes applied at once.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
        parallel: u16,
        /// Do not ask (the typed confirmation is skipped: for scripts).
        #[arg(long)]
        yes: bool,
        /// The set's fingerprint, confirmed already (typed in the fleet view): no prompt, and
        /// nothing is rolled out unless the set read from the file holds exactly it.
        #[arg(long, value_name = "FINGERPRINT", conflicts_with = "yes")]
        confirmed: Option<String>,
        /// Continue an interrupted rollout of this set (nodes done are skipped).
        #[arg(long)]
        resume: bool,
    },
}

/// `partop serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. A non-loopback address is said in the log at start.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9477")]
    pub listen: std::net::SocketAddr,
    /// A file holding the bearer token every data endpoint then requires
    /// (`Authorization: Bearer TOKEN`; the health endpoints stay open).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Connections served at once; more are answered 503 at once.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub max_connections: u16,
    /// Seconds a client may take none of what is written to it (an event stream it stopped
    /// reading) before its connection is cut and its slot freed.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u16).range(1..=3600))]
    pub stall_secs: u16,
    /// Print the systemd unit for this service and exit.
    #[arg(long)]
    pub print_unit: bool,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run headless as a service: what partop sees as Prometheus metrics (`/metrics`), JSON
    /// (`/snapshot`) and server-sent events (`/events`), on loopback unless told otherwise.
    /// Read only: nothing it serves changes the node.
    Serve(ServeArgs),
    /// Sample every --refresh and print one JSON document per line (the snapshot of
    /// docs/json.md with findings): what `partop fleet` reads over ssh. Ends when stdout closes.
    Stream {
        /// One fleet row per sample instead of the whole document (a few hundred bytes).
        #[arg(long)]
        summary: bool,
    },
    /// Many nodes in one view: each node's partitions, load, models, findings and health, read
    /// over ssh (`partop stream` on the node), from `partop serve` endpoints, or from
    /// Prometheus; changes rolled out node by node (docs/fleet.md).
    Fleet(FleetArgs),
    /// Take one snapshot and print it (a table, or the JSON of docs/json.md).
    Snapshot {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Record this node's amd-smi outputs and partition files into one file (for bug reports,
    /// replay with --replay, or rehearsal with `partop sim start FILE`).
    Record {
        /// Output file.
        #[arg(long)]
        out: PathBuf,
    },
    /// The simulated node: scenarios, the fake amd-smi, workloads.
    Sim {
        /// What to do.
        #[command(subcommand)]
        action: SimCmd,
    },
    /// Plan a partition change and print it (nothing is changed): what changes, the layouts before
    /// and after, what must stop, the exact steps, downtime and warnings.
    Plan {
        /// Physical GPUs by BDF (0000:05:00), or `all`.
        #[arg(long = "gpu", default_value = "all", num_args = 1..)]
        gpus: Vec<String>,
        /// Target compute mode (SPX, DPX, QPX, CPX).
        #[arg(long)]
        compute: Option<crate::domain::ComputeMode>,
        /// Target memory mode (NPS1, NPS2, NPS4); hive-wide.
        #[arg(long)]
        memory: Option<crate::domain::MemoryMode>,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
        /// Print the staged layout as an AMD Device Config Manager profile of this name (the
        /// `gpu-config-profiles` JSON of its ConfigMap) instead of the plan: on a node DCM
        /// manages, the change goes through the cluster's own tools.
        #[arg(long, value_name = "PROFILE")]
        dcm: Option<String>,
    },
    /// Apply a saved plan (`partop plan … --json > plan.json`): re-checked against the node,
    /// confirmed (the host name for a driver reload), executed step by step, journaled.
    Apply(ApplyArgs),
    /// Terminate processes (after showing what will be signalled and asking for "yes").
    Kill {
        /// PIDs.
        #[arg(required = true)]
        pids: Vec<u32>,
        /// Signal: term (ask to exit) or kill.
        #[arg(long, value_enum, default_value = "term")]
        signal: SignalArg,
        /// Seconds to wait for the targets to exit.
        #[arg(long, default_value_t = 10.0, value_parser = crate::config::file::grace_secs)]
        grace: f64,
        /// Do not ask (for scripts).
        #[arg(long)]
        yes: bool,
        /// Print what would be done; send nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// NVIDIA MIG layouts: plan and apply (stage, plan, confirm, execute; journaled).
    Mig {
        /// What to do.
        #[command(subcommand)]
        action: MigCmd,
    },
    /// NVIDIA nodes: record what NVML reports.
    Nvidia {
        /// What to do.
        #[command(subcommand)]
        action: NvidiaCmd,
    },
    /// Served models: list, start, stop, placement advice, add a discovered server.
    Models {
        /// What to do (default: list).
        #[command(subcommand)]
        action: Option<ModelsCmd>,
    },
    /// Print the audit journal of every action partop took.
    Journal {
        /// One JSON object per line, as stored.
        #[arg(long)]
        json: bool,
        /// Close an unfinished apply run (after restoring the node by hand), by its run id.
        #[arg(long, value_name = "RUN")]
        abandon: Option<String>,
    },
    /// Validate themes, keymaps and config; print every problem with file, line and column.
    CheckConfig,
    /// Print the effective key bindings (from the command list and the keymap files).
    Keys {
        /// The keymap reference as Markdown (what docs/keymap.md holds).
        #[arg(long)]
        markdown: bool,
    },
    /// Print shell completions.
    Completions {
        /// Shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    Man,
}

/// Signals `partop kill` can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SignalArg {
    /// SIGTERM.
    Term,
    /// SIGKILL.
    Kill,
}

/// `partop sim ...`.
#[derive(Debug, Subcommand)]
pub enum SimCmd {
    /// List the built-in scenarios.
    List,
    /// A fleet of simulated nodes for the fleet view: N loopback `partop serve` endpoints
    /// (ports BASE..BASE+N), each a node made from one template sample with its own name and
    /// load. Runs until SIGTERM or SIGINT; writes the hosts file `partop fleet --hosts-file`
    /// reads.
    Fleet {
        /// Nodes.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=4096))]
        nodes: u16,
        /// First port (0: a port the kernel picks for each node, written to the hosts file).
        #[arg(long, default_value_t = 19000)]
        base_port: u16,
        /// The template: a `partop snapshot --json` document (of `partop --sim SCENARIO`, or of
        /// a real node).
        #[arg(long, value_name = "FILE")]
        template: PathBuf,
        /// Seconds between samples.
        #[arg(long, default_value_t = 5.0)]
        every: f64,
        /// Where to write the hosts file (http://127.0.0.1:PORT per line).
        #[arg(long, value_name = "FILE")]
        hosts_out: Option<PathBuf>,
    },
    /// A simulated GPU cluster on a real API server (issue 26; docs/cluster.md): N Node
    /// objects with GPU resources and partition labels, K of them simulated GPU nodes, and
    /// stand-ins for AMD's Device Config Manager and NVIDIA's MIG manager that act on their
    /// labels. Runs until SIGTERM or SIGINT.
    Cluster {
        /// The API server's kubeconfig (default: $KUBECONFIG, ~/.kube/config).
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// Its context (default: its current one).
        #[arg(long, value_name = "NAME")]
        context: Option<String>,
        /// Nodes in all.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        nodes: u32,
        /// Of them, AMD nodes backed by a simulated GPU node (changed through its amd-smi).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
        gpu_nodes: u32,
        /// Of them, NVIDIA nodes under the MIG manager (the last ones).
        #[arg(long, default_value_t = 0)]
        mig_nodes: u32,
        /// Of the NVIDIA nodes, backed by a simulated NVIDIA node (changed through its
        /// nvidia-smi).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
        mig_gpu_nodes: u32,
        /// Where the simulated GPU nodes keep their state (default: a directory under the state
        /// directory).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// An AMD node no manager owns (repeatable): not selected by DCM's DaemonSet, so DCM
        /// never acts on it; a simulated GPU node's partitions are changed there by partop
        /// itself (`rehearse:DIR/NODE/node.json`), and its Node follows them.
        #[arg(long, value_name = "NODE")]
        unmanaged: Vec<String>,
        /// A node whose partition change fails (DCM: PartitionFailure; MIG manager: failed).
        #[arg(long = "fail", value_name = "NODE")]
        fail: Vec<String>,
    },
    /// Start a scenario: write the node state and start its workloads.
    Start {
        /// Scenario name, a scenario TOML file, or a recording made by `partop record`.
        scenario: String,
        /// State file to write.
        #[arg(long, env = "PARTOP_SIM_STATE")]
        state: PathBuf,
        /// Seed for the simulated load (default: the scenario's).
        #[arg(long)]
        seed: Option<u64>,
        /// Make the node a Kubernetes node: a kubelet twin serves PodResources for its
        /// workloads as pods on STATE.kubelet.sock (a scenario's `[kubernetes]` table says how).
        #[arg(long)]
        kubernetes: bool,
        /// With --kubernetes: the node joins the API server of this kubeconfig (its Node
        /// registered with the GPU resources its device plugin advertises, its status kept,
        /// the pods bound to it run as workloads), for rehearsals with the cluster's tools.
        #[arg(long, value_name = "FILE", requires = "kubernetes")]
        kubeconfig: Option<PathBuf>,
        /// Its context (default: its current one).
        #[arg(long, value_name = "NAME", requires = "kubeconfig")]
        context: Option<String>,
    },
    /// Stop the workloads; the node stays (idle) and the state file usable.
    Stop {
        /// State file.
        #[arg(long, env = "PARTOP_SIM_STATE")]
        state: PathBuf,
    },
    /// Start the stopped workloads again, where their partition still exists.
    Resume {
        /// State file.
        #[arg(long, env = "PARTOP_SIM_STATE")]
        state: PathBuf,
    },
    /// Show the node and its workloads.
    Status {
        /// State file.
        #[arg(long, env = "PARTOP_SIM_STATE")]
        state: PathBuf,
    },
    /// Act as amd-smi on the simulated node (put a two-line `amd-smi` script on PATH).
    #[command(name = "amd-smi", disable_help_flag = true)]
    AmdSmi {
        /// State file.
        #[arg(long, env = "PARTOP_SIM_STATE")]
        state: PathBuf,
        /// amd-smi's own arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Serve a simulated model (the stand-in for `vllm serve` that the simulated node's
    /// models.toml launches); its device comes from HIP_VISIBLE_DEVICES.
    Serve {
        /// State file.
        #[arg(long, env = "PARTOP_SIM_STATE")]
        state: PathBuf,
        /// Model server name (a model-server workload of the scenario).
        #[arg(long)]
        name: String,
        /// Port to listen on.
        #[arg(long)]
        port: u16,
    },
    /// Create a simulated NVIDIA node (for the fake nvidia-smi: MIG rehearsals).
    NvidiaInit {
        /// State file to write.
        #[arg(long)]
        state: PathBuf,
        /// Product (`NVIDIA H200`, `NVIDIA H100 80GB HBM3`).
        #[arg(long, default_value = "NVIDIA H200")]
        product: String,
        /// Number of GPUs.
        #[arg(long, default_value_t = 1)]
        gpus: u32,
    },
    /// Put a real process on a simulated NVIDIA GPU (it holds it until it exits).
    NvidiaAttach {
        /// State file.
        #[arg(long)]
        state: PathBuf,
        /// The process.
        #[arg(long)]
        pid: u32,
        /// GPU index.
        #[arg(long, default_value_t = 0)]
        gpu: usize,
        /// GPU instance (MIG).
        #[arg(long)]
        gi: Option<u32>,
        /// Memory it uses, MiB.
        #[arg(long, default_value_t = 4096)]
        mib: u64,
    },
    /// Act as nvidia-smi on the simulated NVIDIA node.
    #[command(name = "nvidia-smi", disable_help_flag = true)]
    NvidiaSmi {
        /// State file.
        #[arg(long)]
        state: PathBuf,
        /// nvidia-smi's own arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Reload the simulated driver (what `modprobe -r amdgpu && modprobe amdgpu` does).
    Reload {
        /// State file.
        #[arg(long, env = "PARTOP_SIM_STATE")]
        state: PathBuf,
    },
}

impl SimCmd {
    /// The state file this command names (every command but `list`, `fleet` and `cluster`
    /// names one).
    pub const fn state_mut(&mut self) -> Option<&mut PathBuf> {
        match self {
            Self::List | Self::Fleet { .. } | Self::Cluster { .. } => None,
            Self::Start { state, .. }
            | Self::Stop { state }
            | Self::Resume { state }
            | Self::Status { state }
            | Self::AmdSmi { state, .. }
            | Self::Serve { state, .. }
            | Self::NvidiaInit { state, .. }
            | Self::NvidiaAttach { state, .. }
            | Self::NvidiaSmi { state, .. }
            | Self::Reload { state } => Some(state),
        }
    }
}

/// `partop models` actions.
#[derive(Debug, Subcommand)]
pub enum ModelsCmd {
    /// Every served model: registered and discovered, with state, queue, KV cache, tokens/s.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Start a registered model on a logical GPU that fits it (or the one given).
    Start {
        /// Registry name.
        name: String,
        /// Logical GPU by identity (BDF with partition, `0000:05:00.1`) instead of the registry's.
        #[arg(long, value_name = "BDF")]
        gpu: Option<String>,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
        /// Print what would run; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Stop a registered model its registry's way (SIGTERM for a plain command).
    Stop {
        /// Registry name.
        name: String,
        /// Seconds between SIGTERM and giving up (or SIGKILL with --kill-after-grace).
        #[arg(long, default_value_t = 30.0, value_parser = crate::config::file::grace_secs)]
        grace: f64,
        /// Send SIGKILL if it survives the grace period.
        #[arg(long)]
        kill_after_grace: bool,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
        /// Print what would run; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Measure what each registered model (a replica set as a whole) delivers under the
    /// current layout, and keep it in this node's throughput store (the advice shows it).
    Measure {
        /// Seconds to measure over.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
        secs: u64,
    },
    /// Suggest the partition layout that serves the registry's models best on this node.
    Advise {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a registry entry for a discovered model server (by pid); --write appends it.
    Add {
        /// The server's pid.
        pid: u32,
        /// Append the entry to the registry file.
        #[arg(long)]
        write: bool,
    },
}

/// `partop mig` actions.
#[derive(Debug, Subcommand)]
pub enum MigCmd {
    /// Plan a MIG layout for one NVIDIA GPU and print it (nothing is changed).
    Plan {
        /// NVIDIA device index.
        #[arg(long, default_value_t = 0)]
        gpu: u32,
        /// Target instances: profile names, comma-separated, `NxNAME` repeats (`3x1g.18gb,3g.71gb`);
        /// `none` disables MIG.
        #[arg(long)]
        instances: String,
        /// Print JSON (what `mig apply` takes).
        #[arg(long)]
        json: bool,
    },
    /// Apply a saved MIG plan (re-checked against the node first).
    Apply(ApplyArgs),
}

/// `partop nvidia` actions.
#[derive(Debug, Subcommand)]
pub enum NvidiaCmd {
    /// Record what NVML (or nvidia-smi) reports now, for `--nvidia-replay` and bug reports.
    Record {
        /// Output file.
        #[arg(long)]
        out: PathBuf,
    },
}

/// How a saved plan is applied (AMD repartitions and MIG layouts alike).
#[derive(Debug, Args, Clone)]
pub struct ApplyArgs {
    /// The plan file.
    pub plan: PathBuf,
    /// Do not ask (for scripts).
    #[arg(long)]
    pub yes: bool,
    /// Print every step and command; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Continue an interrupted apply of this plan from the journal.
    #[arg(long)]
    pub resume: bool,
    /// Send SIGKILL to processes still alive after SIGTERM's grace period.
    #[arg(long)]
    pub kill_after_grace: bool,
    /// SIGTERM grace period, seconds.
    #[arg(long, default_value_t = 10.0, value_parser = crate::config::file::grace_secs)]
    pub grace: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn os(v: &[&str]) -> Vec<std::ffi::OsString> {
        v.iter().map(Into::into).collect()
    }

    /// Every command name after a bare `--sim` is the command (the default scenario runs);
    /// every built-in scenario's name stays the scenario; after `--` nothing is rewritten.
    #[test]
    fn sim_then_each_command_is_the_default_scenario_and_that_command() {
        let default = format!("--sim={}", crate::sim::scenario::DEFAULT);
        let mut cases = 0;
        for c in Cli::command().get_subcommands() {
            let name = c.get_name();
            assert_eq!(
                sim_before_command(os(&["partop", "--sim", name])),
                os(&["partop", &default, name]),
                "{name}"
            );
            cases += 1;
        }
        for (scenario, _) in crate::sim::scenario::BUILTIN {
            let argv = os(&["partop", "--sim", scenario, "snapshot"]);
            assert_eq!(sim_before_command(argv.clone()), argv, "{scenario}");
            cases += 1;
        }
        let argv = os(&["partop", "--", "--sim", "snapshot"]);
        assert_eq!(sim_before_command(argv.clone()), argv);
        assert!(cases > 20, "{cases} cases");
    }
}
