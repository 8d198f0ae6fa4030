//! `config.toml`: its fields, defaults and limits, and located errors (file, line, column) for
//! every configuration file. Pure parsing and checks; reading the file is `settings`' job.

use serde::Deserialize;
use std::fmt;
use std::path::PathBuf;

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
        let (l, c) = crate::domain::models::line_col(text, offset);
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
    /// `cluster_name` on every series of `partop serve` (AMD's dashboards start at it).
    pub cluster_name: String,
    /// Reclaimable partition: GFX busy averaged over the window at or under this, percent.
    pub reclaim_busy_percent: f64,
    /// Reclaimable partition: the window the busy is averaged over, minutes.
    pub reclaim_window_minutes: f64,
    /// Reclaimable partition: held at least this long, minutes.
    pub reclaim_min_age_minutes: f64,
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
            cluster_name: String::new(),
            reclaim_busy_percent: 0.0,
            reclaim_window_minutes: 60.0,
            reclaim_min_age_minutes: 60.0,
        }
    }
}

/// The fields of `config.toml`, for "did you mean" and the list in an unknown-field message.
const FIELDS: &[&str] = &[
    "theme",
    "keymap",
    "refresh_secs",
    "read_only",
    "idle_minutes",
    "grace_secs",
    "journal",
    "cluster_name",
    "reclaim_busy_percent",
    "reclaim_window_minutes",
    "reclaim_min_age_minutes",
];

impl Config {
    /// The numbers with their limits: finite and within sense.
    fn ranges(&self) -> [(&'static str, f64, f64, f64); 6] {
        [
            ("refresh_secs", self.refresh_secs, 0.1, 3600.0),
            ("idle_minutes", self.idle_minutes, 0.0, 525_600.0),
            ("grace_secs", self.grace_secs, 0.0, 3600.0),
            (
                "reclaim_busy_percent",
                self.reclaim_busy_percent,
                0.0,
                100.0,
            ),
            (
                "reclaim_window_minutes",
                self.reclaim_window_minutes,
                1.0,
                10_080.0,
            ),
            (
                "reclaim_min_age_minutes",
                self.reclaim_min_age_minutes,
                0.0,
                525_600.0,
            ),
        ]
    }

    /// Reads `config.toml` and reports every problem in it once, each at its line and column:
    /// an unknown field, a value of the wrong type and a number out of range are found
    /// together (one does not hide another). The fields without problems are kept; the others
    /// take their defaults.
    pub fn check(origin: &str, text: &str) -> (Self, Vec<ConfigError>) {
        let root = match toml::de::DeTable::parse(text) {
            Ok(t) => t.into_inner(),
            Err(e) => {
                return (
                    Self::default(),
                    vec![ConfigError::from_toml(origin, text, &e)],
                );
            }
        };
        let mut located: Vec<(usize, String)> = Vec::new();
        let mut good = toml::Table::new();
        let mut at = std::collections::HashMap::new();
        for (k, v) in root {
            let key = k.get_ref().to_string();
            if !FIELDS.contains(&key.as_str()) {
                let near = crate::domain::text::nearest(&key, FIELDS)
                    .map_or_else(String::new, |n| format!("; did you mean `{n}`?"));
                located.push((
                    k.span().start,
                    format!(
                        "unknown field `{key}`{near} (fields: {})",
                        FIELDS.join(", ")
                    ),
                ));
                continue;
            }
            let start = v.span().start;
            let value = <toml::Value as serde::Deserialize>::deserialize(
                toml::de::ValueDeserializer::from(v),
            );
            let one = value
                .map_err(|e| e.message().trim().to_string())
                .and_then(|value| {
                    let mut t = toml::Table::new();
                    t.insert(key.clone(), value.clone());
                    toml::Value::Table(t)
                        .try_into::<Self>()
                        .map(|_| value)
                        .map_err(|e| e.message().trim().to_string())
                });
            match one {
                Ok(value) => {
                    good.insert(key.clone(), value);
                    at.insert(key, start);
                }
                Err(m) => located.push((start, format!("{key}: {m}"))),
            }
        }
        let mut config: Self = toml::Value::Table(good).try_into().unwrap_or_default();
        let defaults = Self::default();
        for ((key, v, lo, hi), (_, d, _, _)) in config.ranges().into_iter().zip(defaults.ranges()) {
            if !v.is_finite() || v < lo || v > hi {
                located.push((
                    at.get(key).copied().unwrap_or(0),
                    format!("{key} = {v} is out of range ({lo} to {hi})"),
                ));
                // Never used: the default stands in until the file is fixed.
                match key {
                    "refresh_secs" => config.refresh_secs = d,
                    "idle_minutes" => config.idle_minutes = d,
                    "reclaim_busy_percent" => config.reclaim_busy_percent = d,
                    "reclaim_window_minutes" => config.reclaim_window_minutes = d,
                    "reclaim_min_age_minutes" => config.reclaim_min_age_minutes = d,
                    _ => config.grace_secs = d,
                }
            }
        }
        // In the order they are written (the parser keeps keys sorted by name).
        located.sort_by_key(|(o, _)| *o);
        let errors = located
            .into_iter()
            .map(|(o, m)| ConfigError::at(origin, text, o, m))
            .collect();
        (config, errors)
    }
}

/// A number of seconds within `lo..=hi`: finite, so never `inf`, `NaN` or 1e30 (which would
/// overflow a `Duration` and panic deep inside, after a signal was already sent).
pub fn secs_in(text: &str, lo: f64, hi: f64) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{text} is out of range: give {lo} to {hi} seconds"))
    }
}

/// `--refresh`: 0.1 to 3600 s.
pub fn refresh_secs(text: &str) -> Result<f64, String> {
    secs_in(text, 0.1, 3600.0)
}

/// `--timeout`: 0.1 to 3600 s.
pub fn timeout_secs(text: &str) -> Result<f64, String> {
    secs_in(text, 0.1, 3600.0)
}

/// A grace period: 0 to 3600 s.
pub fn grace_secs(text: &str) -> Result<f64, String> {
    secs_in(text, 0.0, 3600.0)
}
