//! The monitor's configuration: keymaps and themes from the XDG config directory, layered over
//! the built-ins, with `config.toml` (crate::config); every error carries file, line and
//! column. The monitor logs theme and keymap errors and carries on with the defaults.

use super::keymap::Keymap;
use super::theme::Theme;
pub use crate::config::file::{Config, ConfigError};
use std::path::Path;

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
    crate::collect::small_file::operator_text(path).ok()
}

/// Loads the monitor's keymap and theme from `dir` (the XDG config dir), with CLI overrides,
/// under `config` (config.toml as [`crate::config::Settings`] read it once: never parsed
/// again here).
pub fn load(
    dir: &Path,
    config: &Config,
    theme: Option<&str>,
    keymap: Option<&str>,
    read_only: bool,
) -> Loaded {
    let mut errors = Vec::new();
    let config = config.clone();
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
