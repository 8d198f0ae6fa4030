//! A cluster rollout's fleet journal read back for the tests (what `partop fleet apply` wrote
//! beside its `--journal`): each line as (action, node, step), a step's line whose outcome is
//! ok as `step:done`.

use std::path::Path;

/// The lines of the fleet journal at `path` (none when it does not exist yet).
pub fn steps(path: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            let s = |x: &serde_json::Value| x.as_str().unwrap_or("").to_string();
            let step = if v["action"] == "fleet.node.step" && v["outcome"]["ok"] == true {
                format!("{}:done", s(&v["targets"]["step"]))
            } else {
                s(&v["targets"]["step"])
            };
            (s(&v["action"]), s(&v["targets"]["node"]), step)
        })
        .collect()
}
