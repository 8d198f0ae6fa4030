//! Configuration: `config.toml`, keymaps and themes from the XDG config directory, layered over
//! the built-ins; every error carries file, line and column. `partop check-config` prints them
//! all and exits non-zero; the monitor logs them and carries on with the defaults.

use super::keymap::Keymap;
use super::theme::Theme;
use crate::cli::exit;
use serde::Deserialize;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A configuration problem with its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// File (or flag) it comes from.
    pub origin: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// At a byte offset of `text`.
    pub fn at(origin: &str, text: &str, offset: usize, message: String) -> Self {
        let (l, c) = crate::sim::scenario::line_col(text, offset);
        Self {
            origin: origin.into(),
            line: Some(l),
            column: Some(c),
            message,
        }
    }

    /// From a TOML parse error.
    pub fn from_toml(origin: &str, text: &str, e: &toml::de::Error) -> Self {
        match e.span() {
            Some(s) => Self::at(origin, text, s.start, e.message().to_string()),
            None => Self::plain(origin, e.message().to_string()),
        }
    }

    /// Without a location.
    pub fn plain(origin: &str, message: String) -> Self {
        Self {
            origin: origin.into(),
            line: None,
            column: None,
            message,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{l}:{c}: {}", self.origin, self.message),
            _ => write!(f, "{}: {}", self.origin, self.message),
        }
    }
}

/// `config.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Theme name.
    pub theme: String,
    /// Keymap preset.
    pub keymap: String,
    /// Refresh interval, seconds.
    pub refresh_secs: f64,
    /// Remove mutating commands.
    pub read_only: bool,
    /// Minutes of idleness before an idle-partition finding.
    pub idle_minutes: f64,
    /// Seconds a terminated process gets to exit before SIGKILL is offered.
    pub grace_secs: f64,
    /// The audit journal (default `$XDG_STATE_HOME/partop/journal.jsonl`).
    pub journal: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            theme: "default".into(),
            keymap: "default".into(),
            refresh_secs: 1.0,
            read_only: false,
            idle_minutes: 10.0,
            grace_secs: 10.0,
            journal: None,
        }
    }
}

impl Config {
    /// Checks the numbers: finite and within sense. Each problem names the file and key.
    pub fn validate(&self, origin: &str) -> Result<(), String> {
        let mut bad = Vec::new();
        for (key, v, lo, hi) in [
            ("refresh_secs", self.refresh_secs, 0.1, 3600.0),
            ("idle_minutes", self.idle_minutes, 0.0, 525_600.0),
            ("grace_secs", self.grace_secs, 0.0, 3600.0),
        ] {
            if !v.is_finite() || v < lo || v > hi {
                bad.push(format!(
                    "{origin}: {key} = {v} is out of range ({lo} to {hi})"
                ));
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("\n"))
        }
    }
}

/// Everything the monitor needs from configuration.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// config.toml.
    pub config: Config,
    /// Resolved keymap.
    pub keymap: Keymap,
    /// Resolved theme.
    pub theme: Theme,
    /// Problems found (the defaults were used instead).
    pub errors: Vec<ConfigError>,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Loads configuration from `dir` (the XDG config dir), with CLI overrides.
pub fn load(dir: &Path, theme: Option<&str>, keymap: Option<&str>, read_only: bool) -> Loaded {
    let mut errors = Vec::new();
    let cfg_path = dir.join("config.toml");
    let config = match read(&cfg_path) {
        Some(text) => match toml::from_str::<Config>(&text) {
            Ok(c) => c,
            Err(e) => {
                errors.push(ConfigError::from_toml(
                    &cfg_path.display().to_string(),
                    &text,
                    &e,
                ));
                Config::default()
            }
        },
        None => Config::default(),
    };
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let theme_name = theme.map(str::to_string).unwrap_or_else(|| {
        if no_color {
            "monochrome".into()
        } else {
            config.theme.clone()
        }
    });
    let (theme, te) = Theme::load(&theme_name, &dir.join("themes"));
    errors.extend(te);
    let km_path = dir.join("keymap.toml");
    let km_text = read(&km_path);
    let origin = km_path.display().to_string();
    let (keymap, ke) = Keymap::load(
        keymap.unwrap_or(&config.keymap),
        km_text.as_deref().map(|t| (origin.as_str(), t)),
        read_only || config.read_only,
    );
    errors.extend(ke);
    Loaded {
        config,
        keymap,
        theme,
        errors,
    }
}

/// `partop check-config`: validates the user's files and every built-in.
pub fn check_config(models: Option<&Path>) -> anyhow::Result<u8> {
    let dir = crate::paths::config_dir();
    let loaded = load(&dir, None, None, false);
    let mut errors = loaded.errors;
    let cfg = dir.join("config.toml").display().to_string();
    if let Err(e) = loaded.config.validate(&cfg) {
        errors.extend(e.lines().map(|m| ConfigError {
            origin: cfg.clone(),
            line: None,
            column: None,
            message: m.strip_prefix(&format!("{cfg}: ")).unwrap_or(m).to_string(),
        }));
    }
    // The served-model registry: --models, else the config dir's models.toml if there is one.
    let registry = models
        .map(Path::to_path_buf)
        .or_else(|| Some(dir.join("models.toml")).filter(|p| p.exists()));
    if let Some(p) = &registry {
        match std::fs::read_to_string(p) {
            Ok(text) => {
                if let Err(e) = crate::domain::models::parse(&p.display().to_string(), &text) {
                    errors.push(ConfigError {
                        origin: e.origin,
                        line: Some(e.line),
                        column: Some(e.column),
                        message: e.message,
                    });
                }
            }
            Err(e) => errors.push(ConfigError {
                origin: p.display().to_string(),
                line: None,
                column: None,
                message: e.to_string(),
            }),
        }
    }
    for (name, _) in super::theme::BUILTIN {
        errors.extend(Theme::load(name, Path::new("/nonexistent")).1);
    }
    for (name, _) in super::keymap::BUILTIN {
        errors.extend(Keymap::load(name, None, false).1);
    }
    if let Ok(entries) = std::fs::read_dir(dir.join("themes")) {
        for e in entries.flatten() {
            if let Some(stem) = e.path().file_stem() {
                errors.extend(Theme::load(&stem.to_string_lossy(), &dir.join("themes")).1);
            }
        }
    }
    errors.dedup();
    let mut o = std::io::stdout().lock();
    for e in &errors {
        writeln!(o, "{e}")?;
    }
    if errors.is_empty() {
        let mut files = config_files(&dir);
        if let Some(p) = &registry {
            files.push(p.display().to_string());
        }
        writeln!(o, "configuration OK ({})", files.join(", "))?;
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

fn config_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = ["config.toml", "keymap.toml"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| p.exists())
        .map(|p: PathBuf| p.display().to_string())
        .collect();
    if v.is_empty() {
        v.push(format!("built-ins only; no files in {}", dir.display()));
    }
    v
}
