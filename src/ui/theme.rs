//! Themes: a palette plus styles by dotted scope with fallback (`table.row.selected` ->
//! `table.row` -> `table` -> `ui`), `inherits` with cycle detection (the default when a theme
//! names none, nothing for `inherits = "none"`), embedded built-ins (`themes/*.toml`) with the
//! user's same-named file merged over them key by key.

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

/// `inherits = "none"`: a theme that starts from nothing.
const NO_PARENT: &str = "none";

/// The styles a theme that inherits nothing must set itself: the screen's base and the
/// selected row.
const BASE_SCOPES: &[&str] = &["ui", "table.row.selected"];

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

#[derive(Deserialize, Default, Clone, Debug)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "allowed in the file for people; the theme is named by its file"
    )]
    name: Option<String>,
    #[serde(default)]
    inherits: Option<String>,
    #[serde(default)]
    palette: BTreeMap<String, toml::Spanned<String>>,
    #[serde(default)]
    styles: BTreeMap<String, toml::Spanned<toml::Value>>,
}

/// Where a value was written: its file, that file's text and the byte offset.
#[derive(Clone, Debug)]
struct Loc {
    origin: std::sync::Arc<str>,
    text: std::sync::Arc<str>,
    at: usize,
}

impl Loc {
    fn err(&self, m: String) -> ConfigError {
        ConfigError::at(&self.origin, &self.text, self.at, m)
    }
}

/// Whether `scope` is one the views use, or a parent of one (styles fall back to parents).
fn known_scope(scope: &str) -> bool {
    SCOPES
        .iter()
        .any(|s| *s == scope || s.starts_with(&format!("{scope}.")))
}

/// A colour, checked the same way wherever it is written.
fn parse_color(v: &str) -> Result<Color, String> {
    // ratatui also reads bare words it does not know as errors; hex must be 6 hex digits.
    if let Some(h) = v.strip_prefix('#')
        && !(h.len() == 6 && h.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return Err(format!(
            "{v:?} is not a colour: write #rrggbb with six hex digits"
        ));
    }
    Color::from_str(v).map_err(|_| {
        format!(
            "{v:?} is not a colour: use a name (red, lightblue, gray, reset…), #rrggbb, or 0-255"
        )
    })
}

/// A resolved theme.
#[derive(Debug, Clone, Default)]
pub struct Theme {
    /// Its name.
    pub name: String,
    styles: HashMap<String, Style>,
}

fn color(palette: &BTreeMap<String, (String, Loc)>, s: &str) -> Result<Color, String> {
    match palette.get(s) {
        // A bad palette colour is reported once, where it is written; styles using it fall
        // back to their parent without a second message (empty: not reported).
        Some((v, _)) => parse_color(v).map_err(|_| String::new()),
        None => parse_color(s).map_err(|e| format!("{e}; nor is it a name in [palette]")),
    }
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
        other => {
            return Err(format!(
                "unknown modifier {other:?}: bold, dim, italic, underlined, reversed, crossed_out, slow_blink"
            ));
        }
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
    if let Ok(t) = crate::collect::small_file::operator_text(&p) {
        v.push((p.display().to_string(), t));
    }
    v
}

/// A theme's files, the theme itself first, then each it inherits from; and, when the chain
/// ends at a file that inherits nothing (`inherits = "none"`), that file's name.
struct Chain {
    layers: Vec<Vec<(File, Loc)>>,
    standalone: Option<String>,
}

/// Palette entries and style specs by name, each where it was written.
type Palette = BTreeMap<String, (String, Loc)>;
type Specs = BTreeMap<String, (toml::Value, Loc)>;

impl Theme {
    /// Loads `name` (built-in, user, or both merged), resolving `inherits`.
    pub fn load(name: &str, user_dir: &Path) -> (Self, Vec<ConfigError>) {
        let mut errors = Vec::new();
        let Chain { layers, standalone } = chain(name, user_dir, &mut errors);
        if !errors.is_empty() && layers.iter().all(Vec::is_empty) {
            let (t, _) = Self::load("default", Path::new("/nonexistent"));
            return (t, errors);
        }
        let (palette, specs) = flatten(layers);
        // Every palette entry is checked, used or not.
        for (k, (v, loc)) in &palette {
            if let Err(m) = parse_color(v) {
                errors.push(loc.err(format!("palette {k:?}: {m}")));
            }
        }
        if let Some(origin) = &standalone {
            errors.extend(base_missing(name, origin, &specs));
        }
        let mut styles = HashMap::new();
        for (scope, (spec, loc)) in specs {
            if !known_scope(&scope) {
                let near = crate::domain::text::nearest(&scope, SCOPES)
                    .map_or_else(String::new, |n| format!("did you mean {n:?}? "));
                errors.push(loc.err(format!(
                    "unknown style {scope:?}; {near}(docs/user-guide.md lists the styles)"
                )));
                continue;
            }
            match style_of(&spec, &palette) {
                Ok(st) => {
                    styles.insert(scope, st);
                }
                Err(problems) => {
                    for m in problems.into_iter().filter(|m| !m.is_empty()) {
                        errors.push(loc.err(format!("style {scope:?}: {m}")));
                    }
                }
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
}

/// Follows `inherits` from `name`: a theme that sets nothing else inherits the default, so a
/// one-colour file keeps a visible selection, the SIMULATED badge and every other style;
/// `inherits = "none"` starts from nothing (monochrome). A loop, or a theme that is nowhere,
/// ends the chain with an error.
fn chain(name: &str, user_dir: &Path, errors: &mut Vec<ConfigError>) -> Chain {
    let mut seen: Vec<String> = Vec::new();
    let mut c = Chain {
        layers: Vec::new(),
        standalone: None,
    };
    let mut next = Some(name.to_string());
    while let Some(n) = next.take() {
        if seen.contains(&n) || seen.len() > 8 {
            errors.push(ConfigError::plain(
                &format!("theme {name}"),
                format!("inherits loop: {} -> {n}", seen.join(" -> ")),
            ));
            break;
        }
        seen.push(n.clone());
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
        let mut files = Vec::new();
        let mut said = None;
        for (origin, text) in srcs {
            match parse_file(&origin, &text) {
                Ok(f) => {
                    if f.inherits.is_some() {
                        said.clone_from(&f.inherits);
                        c.standalone = Some(origin.clone());
                    }
                    let loc = Loc {
                        origin: origin.into(),
                        text: text.into(),
                        at: 0,
                    };
                    files.push((f, loc));
                }
                Err(e) => errors.push(e),
            }
        }
        c.layers.push(files);
        next = match said.as_deref() {
            Some(NO_PARENT) => None,
            Some(p) => {
                c.standalone = None;
                Some(p.to_string())
            }
            None if n == "default" => None,
            None => {
                c.standalone = None;
                Some("default".to_string())
            }
        };
    }
    c
}

/// The palette and styles the chain sets: the farthest ancestor first, each file of a theme
/// over the one before.
fn flatten(layers: Vec<Vec<(File, Loc)>>) -> (Palette, Specs) {
    let mut palette = Palette::new();
    let mut specs = Specs::new();
    for files in layers.into_iter().rev() {
        for (f, loc) in files {
            for (k, v) in f.palette {
                let l = Loc {
                    at: v.span().start,
                    ..loc.clone()
                };
                palette.insert(k, (v.into_inner(), l));
            }
            for (k, v) in f.styles {
                let l = Loc {
                    at: v.span().start,
                    ..loc.clone()
                };
                specs.insert(k, (v.into_inner(), l));
            }
        }
    }
    (palette, specs)
}

/// A theme that inherits nothing must say what the screen's base is: without `ui` or a
/// selected row's style the terminal's own colours stand in (the `▶` mark stays).
fn base_missing(name: &str, origin: &str, specs: &Specs) -> Option<ConfigError> {
    let missing: Vec<&str> = BASE_SCOPES
        .iter()
        .copied()
        // Set itself or through a parent scope (`table` covers `table.row.selected`).
        .filter(|b| {
            !std::iter::successors(Some(*b), |s| s.rfind('.').map(|i| &s[..i]))
                .any(|s| specs.contains_key(s))
        })
        .collect();
    (!missing.is_empty()).then(|| {
        ConfigError::plain(
            origin,
            format!(
                "theme {name} inherits nothing and lacks the base style {}: add them, or drop `inherits = \"none\"` to inherit the default",
                missing
                    .iter()
                    .map(|m| format!("{m:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })
}

/// A style as written: a colour, `reset`, or a table of fg, bg and modifiers; every problem
/// in it otherwise (an empty one is already said elsewhere: a palette entry's).
fn style_of(spec: &toml::Value, palette: &Palette) -> Result<Style, Vec<String>> {
    let mut problems = Vec::new();
    let mut st = Style::default();
    match spec {
        toml::Value::String(c) if c == "reset" => st = Style::reset(),
        toml::Value::String(c) => match color(palette, c) {
            Ok(c) => st = st.fg(c),
            Err(m) => problems.push(m),
        },
        toml::Value::Table(t) => {
            for (k, v) in t {
                style_key(&mut st, k, v, palette, &mut problems);
            }
        }
        other => problems.push(format!(
            "{other} is not a style: write a colour, or {{ fg = …, bg = …, modifiers = [\"bold\"] }}"
        )),
    }
    if problems.is_empty() {
        Ok(st)
    } else {
        Err(problems)
    }
}

/// One key of a style table onto `st`.
fn style_key(
    st: &mut Style,
    k: &str,
    v: &toml::Value,
    palette: &Palette,
    problems: &mut Vec<String>,
) {
    match (k, v) {
        ("fg" | "bg", toml::Value::String(c)) => match color(palette, c) {
            Ok(c) if k == "fg" => *st = st.fg(c),
            Ok(c) => *st = st.bg(c),
            Err(m) if m.is_empty() => problems.push(m),
            Err(m) => problems.push(format!("{k}: {m}")),
        },
        ("modifiers", toml::Value::Array(a)) => {
            for m in a {
                match m.as_str().map(modifier) {
                    Some(Ok(x)) => *st = st.add_modifier(x),
                    Some(Err(e)) => problems.push(e),
                    None => problems.push(format!("modifier {m} is not a name")),
                }
            }
        }
        ("fg" | "bg" | "modifiers", other) => problems.push(format!(
            "{k} = {other} has the wrong type (fg and bg are colours, modifiers a list of names)"
        )),
        (other, _) => problems.push(format!(
            "unknown style key {other:?}: a style has fg, bg and modifiers"
        )),
    }
}

impl Theme {
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

#[cfg(test)]
mod check_tests {
    use super::*;

    #[test]
    fn every_mistake_in_a_theme_is_reported_with_its_position() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("bad.toml"),
            "inherits = \"default\"\n\
             [palette]\n\
             oops = \"#zzzzzz\"\n\
             [styles]\n\
             \"ui.title\" = \"purplish\"\n\
             \"table.header\" = { fg = \"red\", modifiers = [\"blinky\"] }\n\
             \"table.hedaer\" = \"red\"\n\
             \"status.ok\" = { fg = \"green\", colour = \"red\" }\n",
        )
        .unwrap();
        let (t, e) = Theme::load("bad", dir.path());
        let text: Vec<String> = e.iter().map(ToString::to_string).collect();
        let has = |pos: &str, what: &str| {
            assert!(
                text.iter().any(|x| x.contains(pos) && x.contains(what)),
                "{pos} {what} not in {text:#?}"
            );
        };
        has("bad.toml:3:8", "#zzzzzz");
        has("bad.toml:5:14", "purplish");
        has("bad.toml:6:18", "blinky");
        has("bad.toml:7:18", "did you mean \"table.header\"");
        has("bad.toml:8:15", "unknown style key \"colour\"");
        assert_eq!(e.len(), 5, "{text:#?}");
        // The rest of the theme is still used.
        assert!(t.defines("status.warn"));
    }

    #[test]
    fn a_theme_inherits_the_default_unless_it_says_none_and_then_needs_its_base() {
        let dir = tempfile::tempdir().unwrap();
        let load = |text: &str| {
            std::fs::write(dir.path().join("t.toml"), text).unwrap();
            Theme::load("t", dir.path())
        };
        // (file, problems, whether the selected row is reversed as the default's)
        let cases = [
            ("[styles]\n\"ui\" = \"red\"\n", 0, true),
            ("inherits = \"light\"\n", 0, true),
            (
                "inherits = \"none\"\n[styles]\n\"ui\" = \"red\"\n\"table\" = { modifiers = [\"bold\"] }\n",
                0,
                false,
            ),
            (
                "inherits = \"none\"\n[styles]\n\"ui.title\" = \"red\"\n",
                1,
                false,
            ),
            (
                "inherits = \"none\"\n[styles]\n\"ui\" = \"red\"\n",
                1,
                false,
            ),
        ];
        for (text, problems, reversed) in cases {
            let (t, e) = load(text);
            assert_eq!(e.len(), problems, "{text}: {e:?}");
            assert_eq!(
                t.get("table.row.selected")
                    .add_modifier
                    .contains(Modifier::REVERSED),
                reversed,
                "{text}"
            );
            if problems > 0 {
                assert!(e[0].to_string().contains("inherits nothing"), "{e:?}");
            }
        }
    }
}
