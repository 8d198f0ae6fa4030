//! Adding a server to the model registry (`models.toml`): journaled first, and refused when the
//! file would no longer parse.

use anyhow::{Context, Result};

/// What [`append_entry`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// The entry was appended.
    Written,
    /// The registry already has this server (same name and port): nothing written. A second
    /// `a` before the next sample shows the first one's result is not an error.
    AlreadyThere,
}

/// Appends a registry entry, refusing one that would make the file invalid; journaled.
pub fn append_entry(
    path: &std::path::Path,
    entry: &str,
    journal: &std::path::Path,
) -> Result<Added> {
    // A registry that exists but cannot be read is an error, never an empty file to append to
    // (that would replace every entry with the new one).
    let old = crate::collect::small_file::operator_text_if_exists(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .unwrap_or_default();
    if let (Ok(have), Ok(adding)) = (
        crate::domain::models::parse("", &old),
        crate::domain::models::parse("", entry),
    ) && adding.models.iter().all(|a| {
        have.models
            .iter()
            .any(|h| h.name == a.name && h.port == a.port)
    }) && !adding.models.is_empty()
    {
        return Ok(Added::AlreadyThere);
    }
    let new = format!("{old}{entry}");
    crate::domain::models::parse(&path.display().to_string(), &new)
        .map_err(|e| anyhow::anyhow!("not written: the registry would be invalid: {e}"))?;
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    crate::exec::journal::append(
        journal,
        &crate::exec::journal::Entry::new(
            "registry.add",
            false,
            serde_json::json!({"file": path.display().to_string()}),
            serde_json::json!({"entry": entry}),
        ),
    )?;
    crate::exec::safe_file::write_atomic(path, new.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Added::Written)
}
