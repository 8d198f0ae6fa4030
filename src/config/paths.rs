//! XDG locations for config, state and runtime files.

use std::path::PathBuf;

/// `$XDG_CONFIG_HOME/partop` (user themes, keymaps, config.toml).
pub fn config_dir() -> PathBuf {
    dirs::config_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("partop")
}

/// `$XDG_STATE_HOME/partop` (journal, simulator state).
pub fn state_dir() -> PathBuf {
    dirs::state_dir()
        .or_else(dirs::data_local_dir)
        .unwrap_or_else(std::env::temp_dir)
        .join("partop")
}

/// The default audit journal: `$XDG_STATE_HOME/partop/journal.jsonl` (`journal = "…"` in
/// config.toml or `--journal` choose another). It lives here, with the other locations, so the
/// configuration resolves it without reaching up into the executors.
pub fn default_journal() -> PathBuf {
    state_dir().join("journal.jsonl")
}
