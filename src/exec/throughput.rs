//! The throughput store on disk (`$XDG_STATE_HOME/partop/throughput.json`): what this node's
//! model sets delivered under each layout (`domain::throughput`), kept across restarts of
//! partop. Read bounded, written atomically through `safe_file`.

use crate::domain::throughput::Store;
use std::path::{Path, PathBuf};

/// Where the store lives.
pub fn path() -> PathBuf {
    crate::config::paths::state_dir().join("throughput.json")
}

/// The store at `p` (empty when there is none yet); Err names the file and the way out.
pub fn load(p: &Path) -> Result<Store, String> {
    match crate::collect::small_file::operator_text_if_exists(p) {
        Ok(None) => Ok(Store::default()),
        Ok(Some(t)) => {
            let store: Store = serde_json::from_str(&t).map_err(|e| {
                format!(
                    "{}: not a throughput store ({e}); move it away to start a new one",
                    p.display()
                )
            })?;
            for (i, m) in store.entries.iter().enumerate() {
                if let Some(why) = crate::domain::throughput::out_of_range(m) {
                    return Err(format!(
                        "{}: entry {} ({} under {}): {why}; fix or remove it, or move the file away to start a new one",
                        p.display(),
                        i + 1,
                        crate::domain::text::escape_controls(&m.model),
                        crate::domain::text::escape_controls(&m.layout)
                    ));
                }
            }
            Ok(store)
        }
        Err(e) => Err(format!("{}: {e}", p.display())),
    }
}

/// Writes the store to `p`.
pub fn save(p: &Path, s: &Store) -> Result<(), String> {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let text = serde_json::to_string_pretty(s).map_err(|e| e.to_string())?;
    crate::exec::safe_file::write_atomic(p, text.as_bytes())
        .map_err(|e| format!("{}: {e}", p.display()))
}
