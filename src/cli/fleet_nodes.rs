//! The nodes `partop fleet` names (arguments, a hosts file, an ssh config) and the transport
//! that reads them: shared by the view, `--once` and the rollout commands, below all three.

use crate::cli::args::FleetArgs;
use crate::cli::exit;
use crate::collect::fleet::{NodeSpec, Transport};
use anyhow::{Context, Result};
use std::time::Duration;

/// The nodes the arguments name.
pub fn nodes(a: &FleetArgs) -> Result<Vec<NodeSpec>> {
    let mut v = Vec::new();
    for h in &a.hosts {
        v.push(crate::collect::fleet::spec(h, &a.remote_partop).map_err(exit::Usage)?);
    }
    if let Some(f) = &a.hosts_file {
        let text = crate::collect::small_file::operator_text(f)
            .with_context(|| format!("cannot read the hosts file {}", f.display()))?;
        v.extend(
            crate::collect::fleet::parse_hosts(&text, &a.remote_partop)
                .map_err(|e| exit::Usage(format!("{}: {e}", f.display())))?,
        );
    }
    // The ssh config names the nodes only when nothing else does (it is always ssh's -F).
    if let Some(c) = a.ssh_config.as_ref().filter(|_| v.is_empty()) {
        let text = crate::collect::small_file::operator_text(c)
            .with_context(|| format!("cannot read the ssh config {}", c.display()))?;
        for h in crate::collect::fleet::hosts_of_ssh_config(&text) {
            v.push(crate::collect::fleet::spec(&h, &a.remote_partop).map_err(exit::Usage)?);
        }
    }
    let mut seen = std::collections::HashSet::new();
    v.retain(|n| seen.insert(n.name.clone()));
    Ok(v)
}

/// How the nodes are read.
pub fn transport(a: &FleetArgs, n: usize) -> Transport {
    let control_dir = crate::config::paths::state_dir().join("ssh");
    let _ = std::fs::create_dir_all(&control_dir);
    Transport {
        ssh: std::env::var("PARTOP_SSH").unwrap_or_else(|_| "ssh".into()),
        ssh_config: a.ssh_config.clone(),
        control_dir,
        connect_timeout: Duration::from_secs(u64::from(a.connect_timeout.clamp(1, 120))),
        refresh: crate::domain::fleet::refresh_for(n),
        concurrency: usize::from(a.concurrency),
        local: std::env::current_exe().unwrap_or_else(|_| "partop".into()),
    }
}
