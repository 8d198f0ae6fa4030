//! Themes: a palette plus styles by dotted scope with fallback (`table.row.selected` ->
//! `table.row` -> `table` -> `ui`), `inherits` with cycle detection, embedded built-ins
//! (`themes/*.toml`) with the user's same-named file merged over them key by key.

use super::config::ConfigError;
use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::str::FromStr;

/// Built-in themes, embedded (a test checks every file in `themes/` is listed).
pub const BUILTIN: &[(&str, &str)] = &[
    ("default", include_str!("../../themes/default.toml")),
    ("light", include_str!("../../themes/light.toml")),
    (
        "high-contrast",
        include_str!("../../themes/high-contrast.toml"),
    ),
    ("monochrome", include_str!("../../themes/monochrome.toml")),
];

/// Every scope the views use; each built-in must resolve all of them.
pub const SCOPES: &[&str] = &[
    "ui",
    "ui.border",
    "ui.border.focused",
    "ui.title",
    "ui.tab",
    "ui.tab.active",
    "ui.hint",
    "ui.muted",
    "header.sim",
    "status.ok",
    "status.warn",
    "status.crit",
    "status.stale",
    "table.header",
    "table.row.selected",
    "gauge.low",
    "gauge.mid",
    "gauge.high",
    "partition.0",
    "partition.1",
    "partition.2",
    "partition.3",
    "partition.4",
    "partition.5",
    "partition.6",
    "partition.7",
    "partition.domain",
    "finding.warn",
    "finding.info",
    "sparkline",
    "danger",
];

#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
enum StyleSpec {
    Color(String),
    Full {
        #[serde(default)]
        fg: Option<String>,
        #[serde(default)]
        bg: Option<String>,
        #[serde(default)]
        modifiers: Vec<String>,
    },
}

#[derive(Deserialize, Default, Clone, Debug)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    inherits: Option<String>,
    #[serde(default)]
    palette: BTreeMap<String, String>,
    #[serde(default)]
    styles: BTreeMap<String, StyleSpec>,
}

/// A resolved theme.
#[derive(Debug, Clone, Default)]
pub struct Theme {
    /// Its name.
    pub name: String,
    styles: HashMap<String, Style>,
}

fn color(palette: &BTreeMap<String, String>, s: &str) -> Result<Color, String> {
    let v = palette.get(s).map_or(s, String::as_str);
    Color::from_str(v).map_err(|_| format!("unknown colour {s:?}"))
}

fn modifier(s: &str) -> Result<Modifier, String> {
    Ok(match s {
        "bold" => Modifier::BOLD,
        "dim" => Modifier::DIM,
        "italic" => Modifier::ITALIC,
        "underlined" => Modifier::UNDERLINED,
        "reversed" => Modifier::REVERSED,
        "crossed_out" => Modifier::CROSSED_OUT,
        "slow_blink" => Modifier::SLOW_BLINK,
        other => return Err(format!("unknown modifier {other:?}")),
    })
}

fn parse_file(origin: &str, text: &str) -> Result<File, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::from_toml(origin, text, &e))
}

/// Finds a theme's text: the built-in and/or the user's file of that name.
fn sources(name: &str, user_dir: &Path) -> Vec<(String, String)> {
    let mut v = Vec::new();
    if let Some((n, t)) = BUILTIN.iter().find(|(n, _)| *n == name) {
        v.push((format!("themes/{n}.toml"), (*t).to_string()));
    }
    let p = user_dir.join(format!("{name}.toml"));
    if let Ok(t) = std::fs::read_to_string(&p) {
        v.push((p.display().to_string(), t));
    }
    v
}

impl Theme {
    /// Loads `name` (built-in, user, or both merged), resolving `inherits`.
    pub fn load(name: &str, user_dir: &Path) -> (Self, Vec<ConfigError>) {
        let mut errors = Vec::new();
        let mut chain: Vec<String> = Vec::new();
        let mut layers: Vec<File> = Vec::new();
        let mut next = Some(name.to_string());
        while let Some(n) = next.take() {
            if chain.contains(&n) || chain.len() > 8 {
                errors.push(ConfigError::plain(
                    &format!("theme {name}"),
                    format!("inherits loop: {} -> {n}", chain.join(" -> ")),
                ));
                break;
            }
            chain.push(n.clone());
            let srcs = sources(&n, user_dir);
            if srcs.is_empty() {
                errors.push(ConfigError::plain(
                    &format!("theme {n}"),
                    format!(
                        "no such theme; built-in: {}",
                        BUILTIN
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
                break;
            }
            let mut merged = File::default();
            for (origin, text) in srcs {
                match parse_file(&origin, &text) {
                    Ok(f) => {
                        merged.inherits = f.inherits.or(merged.inherits);
                        merged.name = f.name.or(merged.name);
                        merged.palette.extend(f.palette);
                        merged.styles.extend(f.styles);
                    }
                    Err(e) => errors.push(e),
                }
            }
            next.clone_from(&merged.inherits);
            layers.push(merged);
        }
        if !errors.is_empty() && layers.is_empty() {
            let (t, _) = Self::load("default", Path::new("/nonexistent"));
            return (t, errors);
        }
        let mut palette = BTreeMap::new();
        let mut specs = BTreeMap::new();
        for f in layers.into_iter().rev() {
            palette.extend(f.palette);
            specs.extend(f.styles);
        }
        let mut styles = HashMap::new();
        for (scope, spec) in specs {
            let r = match spec {
                StyleSpec::Color(c) if c == "reset" => Ok(Style::reset()),
                StyleSpec::Color(c) => color(&palette, &c).map(|c| Style::default().fg(c)),
                StyleSpec::Full { fg, bg, modifiers } => (|| {
                    let mut s = Style::default();
                    if let Some(f) = fg {
                        s = s.fg(color(&palette, &f)?);
                    }
                    if let Some(b) = bg {
                        s = s.bg(color(&palette, &b)?);
                    }
                    for m in modifiers {
                        s = s.add_modifier(modifier(&m)?);
                    }
                    Ok(s)
                })(),
            };
            match r {
                Ok(s) => {
                    styles.insert(scope, s);
                }
                Err(m) => errors.push(ConfigError::plain(
                    &format!("theme {name}"),
                    format!("style {scope:?}: {m}"),
                )),
            }
        }
        (
            Self {
                name: name.to_string(),
                styles,
            },
            errors,
        )
    }

    /// The style for a scope, falling back to its parents.
    pub fn get(&self, scope: &str) -> Style {
        let mut s = scope;
        loop {
            if let Some(st) = self.styles.get(s) {
                return *st;
            }
            match s.rfind('.') {
                Some(i) => s = &s[..i],
                None => return self.styles.get("ui").copied().unwrap_or_default(),
            }
        }
    }

    /// Whether a scope (or a parent) is defined.
    pub fn defines(&self, scope: &str) -> bool {
        let mut s = scope;
        loop {
            if self.styles.contains_key(s) {
                return true;
            }
            match s.rfind('.') {
                Some(i) => s = &s[..i],
                None => return false,
            }
        }
    }

    /// The style of logical GPU `i`'s blocks in the partition map.
    pub fn partition(&self, i: u32) -> Style {
        self.get(&format!("partition.{}", i % 8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_resolves_every_scope_and_is_registered() {
        for (n, _) in BUILTIN {
            let (t, e) = Theme::load(n, Path::new("/nonexistent"));
            assert!(e.is_empty(), "{n}: {e:?}");
            for s in SCOPES {
                assert!(t.defines(s), "{n} lacks {s}");
            }
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/themes");
        for f in std::fs::read_dir(dir).unwrap() {
            let stem = f
                .unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .to_string();
            assert!(
                BUILTIN.iter().any(|(n, _)| *n == stem),
                "{stem} not registered"
            );
        }
    }

    #[test]
    fn monochrome_has_no_colour_but_danger_stands_out() {
        let (t, _) = Theme::load("monochrome", Path::new("/nonexistent"));
        for s in SCOPES {
            let st = t.get(s);
            assert!(
                matches!(st.fg, None | Some(Color::Reset))
                    && matches!(st.bg, None | Some(Color::Reset)),
                "{s} has colour"
            );
        }
        assert!(
            t.get("danger")
                .add_modifier
                .contains(Modifier::REVERSED | Modifier::BOLD)
        );
        assert!(
            t.get("status.stale")
                .add_modifier
                .contains(Modifier::REVERSED)
        );
    }

    #[test]
    fn user_file_merges_over_builtin_and_errors_have_location() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("default.toml"),
            "[palette]\nok = \"#010203\"\n",
        )
        .unwrap();
        let (t, e) = Theme::load("default", dir.path());
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(t.get("status.ok").fg, Some(Color::Rgb(1, 2, 3)));
        assert!(
            t.get("table.header").add_modifier.contains(Modifier::BOLD),
            "the rest is kept"
        );
        std::fs::write(
            dir.path().join("mine.toml"),
            "inherits = \"default\"\n[styles]\n\"ui\" = 5\n",
        )
        .unwrap();
        let (_, e) = Theme::load("mine", dir.path());
        assert!(e[0].to_string().contains("mine.toml:3:"), "{e:?}");
        std::fs::write(dir.path().join("a.toml"), "inherits = \"b\"\n").unwrap();
        std::fs::write(dir.path().join("b.toml"), "inherits = \"a\"\n").unwrap();
        let (_, e) = Theme::load("a", dir.path());
        assert!(e[0].to_string().contains("inherits loop"), "{e:?}");
    }
}
