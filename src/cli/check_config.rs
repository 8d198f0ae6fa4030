//! `partop check-config`: every configuration file (config.toml, keymap, user themes, the
//! model registry) and every built-in validated in one run, each problem with its position.

use crate::cli::exit;
use crate::config::ConfigError;
use crate::ui::config::load;
use crate::ui::keymap::Keymap;
use crate::ui::theme::Theme;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `partop check-config`: validates the user's files and every built-in.
pub fn check_config(models: Option<&Path>) -> anyhow::Result<u8> {
    let dir = crate::config::paths::config_dir();
    // config.toml read and parsed once, here (the other commands read it through Settings).
    let path = dir.join("config.toml");
    let (config, mut errors) = crate::config::settings::read(&path).unwrap_or_else(|e| {
        let why = ConfigError::plain(&path.display().to_string(), e.to_string());
        (crate::config::Config::default(), vec![why])
    });
    errors.extend(load(&dir, &config, None, None, false).errors);
    // The served-model registry: --models, else the config dir's models.toml if there is one.
    let registry = models
        .map(Path::to_path_buf)
        .or_else(|| Some(dir.join("models.toml")).filter(|p| p.exists()));
    if let Some(p) = &registry {
        match crate::collect::small_file::operator_text(p) {
            Ok(text) => {
                let (_, bad) = crate::domain::models::check(&p.display().to_string(), &text);
                errors.extend(bad.into_iter().map(|e| ConfigError {
                    origin: e.origin,
                    line: Some(e.line),
                    column: Some(e.column),
                    message: e.message,
                }));
            }
            Err(e) => errors.push(ConfigError {
                origin: p.display().to_string(),
                line: None,
                column: None,
                message: e.to_string(),
            }),
        }
    }
    for (name, _) in crate::ui::theme::BUILTIN {
        errors.extend(Theme::load(name, Path::new("/nonexistent")).1);
    }
    for (name, _) in crate::ui::keymap::BUILTIN {
        errors.extend(Keymap::load(name, None, false).1);
    }
    if let Ok(entries) = std::fs::read_dir(dir.join("themes")) {
        for e in entries.flatten() {
            if let Some(stem) = e.path().file_stem() {
                errors.extend(Theme::load(&stem.to_string_lossy(), &dir.join("themes")).1);
            }
        }
    }
    // The theme config.toml names is loaded by `load` and again with the others: each
    // problem is said once, where it first came.
    let mut seen = std::collections::HashSet::new();
    errors.retain(|e| seen.insert(e.to_string()));
    let mut o = std::io::stdout().lock();
    for e in &errors {
        writeln!(o, "{e}")?;
    }
    if errors.is_empty() {
        let mut files = config_files(&dir);
        if let Some(p) = &registry {
            files.push(p.display().to_string());
        }
        if files.is_empty() {
            writeln!(
                o,
                "configuration OK: the built-ins (no user files in {})",
                dir.display()
            )?;
        } else {
            writeln!(
                o,
                "configuration OK: {} and the built-ins",
                files.join(", ")
            )?;
        }
        Ok(exit::OK)
    } else {
        writeln!(
            o,
            "{} problem(s): a config.toml problem stops every command until fixed; themes and keymaps with problems fall back to the defaults",
            errors.len()
        )?;
        Ok(exit::USAGE)
    }
}

/// The user's files that were checked (config, keymap, themes), for the closing line.
fn config_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = ["config.toml", "keymap.toml"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| p.exists())
        .map(|p: PathBuf| p.display().to_string())
        .collect();
    if let Ok(entries) = std::fs::read_dir(dir.join("themes")) {
        let mut themes: Vec<String> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .map(|p| p.display().to_string())
            .collect();
        themes.sort();
        v.extend(themes);
    }
    v
}
