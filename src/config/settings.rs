//! Settings resolved once, from the flags and `config.toml`, and passed down: every command
//! and the monitor read the journal path and read-only state from here, nowhere else.

/// What every command needs from the configuration, resolved once.
#[derive(Debug, Clone)]
pub struct Settings {
    /// No mutation at all (flag or config).
    pub read_only: bool,
    /// The audit journal.
    pub journal: std::path::PathBuf,
    /// The whole config.toml.
    pub config: super::Config,
}

impl Settings {
    /// The fleet journal on the operator's machine: beside the audit journal (so `journal =
    /// "…"` in config.toml, or `--journal`, moves both). Its lock, one rollout at a time, is
    /// beside it (`exec::rollout::lock_path`).
    pub fn fleet_journal(&self) -> std::path::PathBuf {
        self.journal.with_file_name("fleet-journal.jsonl")
    }

    /// The findings thresholds config.toml sets (the monitor, `serve` and `stream` alike).
    pub fn thresholds(&self) -> crate::domain::findings::Thresholds {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "minutes, validated when read"
        )]
        let ms = |minutes: f64| (minutes.max(0.0) * 60_000.0) as u64;
        let idle_after_ms = ms(self.config.idle_minutes);
        crate::domain::findings::Thresholds {
            idle_after_ms,
            reclaim_busy: self.config.reclaim_busy_percent,
            reclaim_window_ms: ms(self.config.reclaim_window_minutes),
            reclaim_min_age_ms: ms(self.config.reclaim_min_age_minutes),
            ..crate::domain::findings::Thresholds::default()
        }
    }
}

/// Resolves the settings from the flags (`--read-only`, `--journal`) and `config.toml`. A config file that cannot be read
/// or parsed, or holds an absurd value, is an error for every command: a broken file must
/// never silently turn read-only off or move the journal.
pub fn resolve(
    read_only_flag: bool,
    journal_flag: Option<&std::path::Path>,
) -> anyhow::Result<Settings> {
    let path = crate::config::paths::config_dir().join("config.toml");
    let (config, errors) =
        read(&path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
        anyhow::bail!(
            "{}\nfix it (`partop check-config` lists every problem) or move it away; partop does not run on a configuration it cannot read",
            list.join("\n")
        );
    }
    Ok(Settings {
        read_only: read_only_flag || config.read_only,
        journal: journal_flag
            .map(std::path::Path::to_path_buf)
            .or_else(|| config.journal.clone())
            .unwrap_or_else(super::paths::default_journal),
        config,
    })
}

/// Reads and checks `config.toml` at `path`: the configuration (the defaults where there is
/// no file) and every problem in it, each with its position. The one place the file is read
/// and parsed: the monitor, the fleet view and check-config take what this returns (through
/// [`Settings`]) instead of parsing it again.
pub fn read(path: &std::path::Path) -> std::io::Result<(super::Config, Vec<super::ConfigError>)> {
    match crate::collect::small_file::operator_text(path) {
        Ok(text) => Ok(super::Config::check(&path.display().to_string(), &text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok((super::Config::default(), Vec::new()))
        }
        Err(e) => Err(e),
    }
}

impl Settings {
    /// Only what the flags say (for check-config, which reports a configuration that does not
    /// parse instead of stopping on it).
    pub fn flags_only(read_only: bool, journal: Option<&std::path::Path>) -> Self {
        let config = super::Config::default();
        Self {
            read_only,
            journal: journal
                .map_or_else(super::paths::default_journal, std::path::Path::to_path_buf),
            config,
        }
    }
}
