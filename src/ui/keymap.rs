//! Keymaps: the embedded presets (`keymaps/*.toml`), the user's file merged over them key by
//! key, validation, and resolution of key presses (with sequences) to commands. The key
//! notation is in `notation`, the generated reference (docs/keymap.md, `partop keys`) in
//! `reference`.

use super::command::{Command, Danger};
use super::config::ConfigError;
use crate::domain::models::LineIndex;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use toml::Spanned;

mod notation;
mod reference;

pub use notation::{Key, KeyCodeOrd, parse_seq};
pub use reference::{effective_text, reference_markdown};

/// Built-in presets, embedded (a test checks every file in `keymaps/` is listed).
pub const BUILTIN: &[(&str, &str)] = &[
    ("default", include_str!("../../keymaps/default.toml")),
    ("vim", include_str!("../../keymaps/vim.toml")),
];

/// Where a binding applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Section {
    /// Everywhere unless an exclusive overlay is open.
    Global,
    /// Overview.
    Overview,
    /// GPUs.
    Gpus,
    /// Processes.
    Processes,
    /// Detail.
    Detail,
    /// Findings.
    Findings,
    /// Log.
    Log,
    /// The help overlay (exclusive).
    Help,
    /// The filter input (exclusive; printable keys are text).
    Filter,
    /// A confirmation dialog (exclusive).
    Dialog,
    /// The journal view.
    Journal,
    /// The served-models view.
    Models,
    /// The staging overlay (exclusive).
    Stage,
    /// The fleet view (`partop fleet`; exclusive: the monitor's view keys do not apply).
    Fleet,
}

impl Section {
    /// All sections.
    pub const ALL: [Self; 14] = [
        Self::Global,
        Self::Overview,
        Self::Gpus,
        Self::Processes,
        Self::Models,
        Self::Detail,
        Self::Findings,
        Self::Log,
        Self::Journal,
        Self::Help,
        Self::Filter,
        Self::Dialog,
        Self::Stage,
        Self::Fleet,
    ];

    /// The section a file names, if it is one.
    pub fn from_name(n: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.name() == n)
    }

    /// Its name in keymap files.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Global => "global",
            Self::Overview => "overview",
            Self::Gpus => "gpus",
            Self::Processes => "processes",
            Self::Detail => "detail",
            Self::Findings => "findings",
            Self::Log => "log",
            Self::Help => "help",
            Self::Filter => "filter",
            Self::Dialog => "dialog",
            Self::Journal => "journal",
            Self::Models => "models",
            Self::Stage => "stage",
            Self::Fleet => "fleet",
        }
    }

    /// Exclusive sections stop global bindings.
    pub const fn exclusive(self) -> bool {
        matches!(
            self,
            Self::Help | Self::Filter | Self::Dialog | Self::Stage | Self::Fleet
        )
    }
}

/// The result of resolving pending keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolve {
    /// A complete binding.
    Command(Command),
    /// A prefix of a longer binding: wait for the next key.
    Pending,
    /// Nothing bound.
    Unbound,
}

/// A resolved keymap.
#[derive(Debug, Clone, Default)]
pub struct Keymap {
    /// Preset it was built from.
    pub preset: String,
    map: HashMap<Section, BTreeMap<Vec<Key>, Command>>,
    /// What `--read-only` took out, so a key that did something says why it does nothing now.
    removed: HashMap<Section, BTreeMap<Vec<Key>, Command>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    preset: Option<String>,
    clear_defaults: Option<bool>,
    global: Option<BTreeMap<String, Spanned<String>>>,
    overview: Option<BTreeMap<String, Spanned<String>>>,
    gpus: Option<BTreeMap<String, Spanned<String>>>,
    processes: Option<BTreeMap<String, Spanned<String>>>,
    detail: Option<BTreeMap<String, Spanned<String>>>,
    findings: Option<BTreeMap<String, Spanned<String>>>,
    log: Option<BTreeMap<String, Spanned<String>>>,
    help: Option<BTreeMap<String, Spanned<String>>>,
    filter: Option<BTreeMap<String, Spanned<String>>>,
    dialog: Option<BTreeMap<String, Spanned<String>>>,
    journal: Option<BTreeMap<String, Spanned<String>>>,
    models: Option<BTreeMap<String, Spanned<String>>>,
    stage: Option<BTreeMap<String, Spanned<String>>>,
    fleet: Option<BTreeMap<String, Spanned<String>>>,
}

impl File {
    fn sections(self) -> Vec<(Section, BTreeMap<String, Spanned<String>>)> {
        [
            (Section::Global, self.global),
            (Section::Overview, self.overview),
            (Section::Gpus, self.gpus),
            (Section::Processes, self.processes),
            (Section::Detail, self.detail),
            (Section::Findings, self.findings),
            (Section::Log, self.log),
            (Section::Help, self.help),
            (Section::Filter, self.filter),
            (Section::Dialog, self.dialog),
            (Section::Journal, self.journal),
            (Section::Models, self.models),
            (Section::Stage, self.stage),
            (Section::Fleet, self.fleet),
        ]
        .into_iter()
        .filter_map(|(s, m)| m.map(|m| (s, m)))
        .collect()
    }
}

/// The top-level names a keymap file may hold.
fn known_top(name: &str) -> bool {
    matches!(name, "preset" | "clear_defaults") || Section::from_name(name).is_some()
}

/// A problem at `offset` of the text `index` was made from.
fn located(origin: &str, index: &LineIndex, offset: usize, message: String) -> ConfigError {
    let (line, column) = index.line_col(offset);
    ConfigError {
        origin: origin.into(),
        line: Some(line),
        column: Some(column),
        message,
    }
}

/// `text` with every unknown top-level section blanked out (its lines kept as empty comments,
/// so positions in the rest stay true), each reported at its header.
fn without_unknown_sections(
    origin: &str,
    text: &str,
    errors: &mut Vec<ConfigError>,
) -> Result<String, ConfigError> {
    let table: toml::Table =
        toml::from_str(text).map_err(|e| ConfigError::from_toml(origin, text, &e))?;
    let unknown: std::collections::HashSet<&str> = table
        .keys()
        .map(String::as_str)
        .filter(|k| !known_top(k))
        .collect();
    if unknown.is_empty() {
        return Ok(text.to_string());
    }
    let index = LineIndex::new(text);
    let mut out = String::with_capacity(text.len());
    let mut skipping = false;
    let mut in_table = false;
    let mut off = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if t.starts_with('[') {
            let name = t
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .trim_matches('"');
            let head = name.split('.').next().unwrap_or(name);
            in_table = true;
            skipping = unknown.contains(head);
            if skipping && !name.contains('.') {
                let col = line.len() - line.trim_start().len();
                let names: Vec<&str> = Section::ALL.iter().map(|s| s.name()).collect();
                let near = crate::domain::text::nearest(head, &names).unwrap_or("global");
                errors.push(located(
                    origin,
                    &index,
                    off + col,
                    format!(
                        "unknown section [{head}] (did you mean [{near}]?); its bindings are ignored, the rest of the file is used"
                    ),
                ));
            }
        } else if !skipping {
            // A top-level `key = value` that is not known: reported and dropped too.
            if let Some((k, _)) = t.split_once('=')
                && !t.starts_with('#')
                && !in_table
                && unknown.contains(k.trim().trim_matches('"'))
            {
                errors.push(located(
                    origin,
                    &index,
                    off + (line.len() - line.trim_start().len()),
                    format!("unknown setting {:?}; a keymap file has preset, clear_defaults and sections", k.trim()),
                ));
                out.push_str(&" ".repeat(line.len() - usize::from(line.ends_with('\n'))));
                if line.ends_with('\n') {
                    out.push('\n');
                }
                off += line.len();
                continue;
            }
        }
        if skipping {
            let body = line.len() - usize::from(line.ends_with('\n'));
            if body > 0 {
                out.push('#');
                out.push_str(&" ".repeat(body - 1));
            }
            if line.ends_with('\n') {
                out.push('\n');
            }
        } else {
            out.push_str(line);
        }
        off += line.len();
    }
    Ok(out)
}

impl Keymap {
    /// Applies one file's bindings over `self`, collecting errors with their location.
    fn apply(
        &mut self,
        origin: &str,
        text: &str,
        errors: &mut Vec<ConfigError>,
    ) -> Option<(Option<String>, bool)> {
        // An unknown section is reported where it is and left out; the rest of the file is
        // still used (one typo must not drop every binding).
        let cleaned = match without_unknown_sections(origin, text, errors) {
            Ok(t) => t,
            Err(e) => {
                errors.push(e);
                return None;
            }
        };
        let file: File = match toml::from_str(&cleaned) {
            Ok(f) => f,
            Err(e) => {
                errors.push(ConfigError::from_toml(origin, text, &e));
                return None;
            }
        };
        let index = LineIndex::new(text);
        let mut hints: HashMap<String, String> = HashMap::new();
        let preset = file.preset.clone();
        let clear = file.clear_defaults.unwrap_or(false);
        if clear {
            self.map.clear();
        }
        for (section, binds) in file.sections() {
            for (keys, cmd) in binds {
                let span = cmd.span();
                let err = |m: String| located(origin, &index, span.start, m);
                let seq = match parse_seq(&keys) {
                    Ok(s) => s,
                    Err(m) => {
                        errors.push(err(format!("[{}] {m}", section.name())));
                        continue;
                    }
                };
                let name = cmd.into_inner();
                let entry = self.map.entry(section).or_default();
                if name == "no_op" {
                    entry.remove(&seq);
                    continue;
                }
                match Command::from_name(&name) {
                    Some(c) => {
                        entry.insert(seq, c);
                    }
                    None => {
                        // Once per distinct name: a file of one typo repeated stays cheap.
                        let hint = hints
                            .entry(name.clone())
                            .or_insert_with(|| {
                                Command::suggest(&name)
                                    .map(|s| format!("; did you mean {s:?}?"))
                                    .unwrap_or_default()
                            })
                            .clone();
                        errors.push(err(format!(
                            "[{}] unknown command {name:?} for key {keys:?}{hint}",
                            section.name()
                        )));
                    }
                }
            }
        }
        Some((preset, clear))
    }

    /// Builds a keymap: the default preset, the named preset over it, then the user's file.
    pub fn load(
        preset: &str,
        user: Option<(&str, &str)>,
        read_only: bool,
    ) -> (Self, Vec<ConfigError>) {
        let mut errors = Vec::new();
        let mut km = Self::default();
        // The user file may name the preset itself.
        let mut preset = preset.to_string();
        if let Some((_, text)) = user
            && let Ok(f) = toml::from_str::<File>(text)
            && let Some(p) = f.preset
        {
            preset = p;
        }
        let default = BUILTIN[0].1;
        km.apply("keymaps/default.toml", default, &mut errors);
        if preset != "default" {
            match BUILTIN.iter().find(|(n, _)| *n == preset) {
                Some((n, text)) => {
                    km.apply(&format!("keymaps/{n}.toml"), text, &mut errors);
                }
                None => errors.push(ConfigError::plain(
                    user.map_or("--keymap", |(o, _)| o),
                    format!(
                        "unknown keymap preset {preset:?}; built-in: {}",
                        BUILTIN
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
        if let Some((origin, text)) = user {
            km.apply(origin, text, &mut errors);
        }
        km.preset = preset;
        if read_only {
            km = km.read_only();
        }
        errors.extend(km.validate());
        (km, errors)
    }

    /// This keymap with every mutating binding removed (each remembered, so its key says it
    /// is not available): `--read-only`, and a node opened from the fleet.
    #[must_use]
    pub fn read_only(mut self) -> Self {
        for (section, m) in &mut self.map {
            let gone: BTreeMap<Vec<Key>, Command> = m
                .iter()
                .filter(|(_, c)| c.danger() == Danger::Mutating)
                .map(|(k, c)| (k.clone(), *c))
                .collect();
            m.retain(|_, c| c.danger() == Danger::Safe);
            self.removed.entry(*section).or_default().extend(gone);
        }
        self
    }

    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        for (section, binds) in &self.map {
            // Each binding's proper prefixes looked up (linear in the bindings, times their
            // length), not every pair compared: 40,000 bindings load in milliseconds.
            let mut clashes: Vec<(&Vec<Key>, &Vec<Key>)> = binds
                .keys()
                .flat_map(|b| {
                    (1..b.len())
                        .filter_map(move |i| binds.get_key_value(&b[..i]).map(|(a, _)| (a, b)))
                })
                .collect();
            clashes.sort();
            for (a, b) in clashes {
                let show = |s: &Vec<Key>| {
                    s.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                errors.push(ConfigError::plain(
                    "keymap",
                    format!(
                        "[{}] {:?} is both a key and the start of {:?}",
                        section.name(),
                        show(a),
                        show(b)
                    ),
                ));
            }
        }
        // Safety invariant: a dialog's buttons can only be pressed inside the dialog.
        for (section, binds) in &self.map {
            if *section == Section::Dialog {
                continue;
            }
            for (k, c) in binds {
                if matches!(c, Command::DialogActivate | Command::DialogFocusNext) {
                    let keys = k
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(" ");
                    errors.push(ConfigError::plain(
                        "keymap",
                        format!(
                            "[{}] {keys:?}: {} may only be bound in [dialog]",
                            section.name(),
                            c.name()
                        ),
                    ));
                }
            }
        }
        if !self.map.values().any(|m| {
            m.values()
                .any(|c| matches!(c, Command::Quit | Command::Back))
        }) {
            errors.push(ConfigError::plain(
                "keymap",
                "no key is bound to quit".into(),
            ));
        }
        errors
    }

    /// A key pressed in a list view of its own section stack (the fleet, the cluster): added
    /// to `pending`; the command once they make one (pending cleared), None while they are a
    /// prefix or when they are bound to nothing (pending cleared).
    pub fn press(
        &self,
        stack: &[Section],
        pending: &mut Vec<Key>,
        k: &ratatui::crossterm::event::KeyEvent,
    ) -> Option<Command> {
        let key = Key::from_event(k)?;
        pending.push(key);
        match self.resolve(stack, pending) {
            Resolve::Command(c) => {
                pending.clear();
                Some(c)
            }
            Resolve::Pending => None,
            Resolve::Unbound => {
                pending.clear();
                None
            }
        }
    }

    /// Resolves pending keys against the section stack (most specific first).
    pub fn resolve(&self, stack: &[Section], keys: &[Key]) -> Resolve {
        let mut pending = false;
        for s in stack {
            if let Some(m) = self.map.get(s) {
                if let Some(c) = m.get(keys) {
                    return Resolve::Command(*c);
                }
                if m.keys()
                    .any(|k| k.len() > keys.len() && k.starts_with(keys))
                {
                    pending = true;
                }
            }
            if s.exclusive() {
                break;
            }
        }
        if pending {
            Resolve::Pending
        } else {
            Resolve::Unbound
        }
    }

    /// The mutating command `--read-only` removed from `keys` in `stack`, if any.
    pub fn removed(&self, stack: &[Section], keys: &[Key]) -> Option<Command> {
        stack
            .iter()
            .find_map(|s| self.removed.get(s).and_then(|m| m.get(keys)).copied())
    }

    /// The keys bound to `cmd` in `section`, printed.
    pub fn keys_for(&self, section: Section, cmd: Command) -> Vec<String> {
        self.map
            .get(&section)
            .map(|m| {
                m.iter()
                    .filter(|(_, c)| **c == cmd)
                    .map(|(k, _)| {
                        k.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every binding of a section.
    pub fn bindings(&self, section: Section) -> Vec<(String, Command)> {
        self.map
            .get(&section)
            .map(|m| {
                m.iter()
                    .map(|(k, c)| {
                        (
                            k.iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join(" "),
                            *c,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_keymap_md_is_generated_from_the_code() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/keymap.md"))
            .unwrap();
        assert_eq!(
            doc,
            reference_markdown(),
            "regenerate with: partop keys --markdown > docs/keymap.md"
        );
    }

    #[test]
    fn notation_round_trips() {
        for s in [
            "q", "G", "ctrl-c", "alt-x", "f5", "pagedown", "space", "backtab", "?",
        ] {
            assert_eq!(Key::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(Key::parse("shift-tab").unwrap().to_string(), "backtab");
        assert_eq!(Key::parse("shift-g").unwrap().to_string(), "G");
        assert!(Key::parse("hyper-x").is_err());
    }

    #[test]
    fn builtins_load_cleanly_and_every_file_is_registered() {
        for (n, _) in BUILTIN {
            let (_, e) = Keymap::load(n, None, false);
            assert!(e.is_empty(), "{n}: {e:?}");
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/keymaps");
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
    fn resolve_with_sections_sequences_and_exclusive_overlays() {
        let (km, _) = Keymap::load("vim", None, false);
        let k = |s: &str| parse_seq(s).unwrap();
        assert_eq!(
            km.resolve(&[Section::Processes, Section::Global], &k("j")),
            Resolve::Command(Command::SelectNext)
        );
        assert_eq!(
            km.resolve(&[Section::Gpus, Section::Global], &k("g")),
            Resolve::Pending
        );
        assert_eq!(
            km.resolve(&[Section::Gpus, Section::Global], &k("g g")),
            Resolve::Command(Command::Top)
        );
        assert_eq!(
            km.resolve(&[Section::Processes, Section::Global], &k("o")),
            Resolve::Command(Command::CycleGroup)
        );
        assert_eq!(
            km.resolve(&[Section::Help], &k("o")),
            Resolve::Unbound,
            "help is exclusive"
        );
        assert_eq!(
            km.resolve(&[Section::Help], &k("q")),
            Resolve::Command(Command::ToggleHelp)
        );
    }

    #[test]
    fn user_file_overrides_key_by_key_and_reports_errors_with_location() {
        let user =
            "preset = \"vim\"\n[global]\n\"x\" = \"quit\"\n\"q\" = \"no_op\"\n\"z\" = \"qiut\"\n";
        let (km, errors) = Keymap::load("default", Some(("keymap.toml", user)), false);
        assert_eq!(km.preset, "vim");
        assert_eq!(
            km.resolve(&[Section::Global], &parse_seq("x").unwrap()),
            Resolve::Command(Command::Quit)
        );
        assert_eq!(
            km.resolve(&[Section::Global], &parse_seq("q").unwrap()),
            Resolve::Unbound
        );
        assert_eq!(
            km.resolve(&[Section::Global], &parse_seq("j").unwrap()),
            Resolve::Command(Command::SelectNext),
            "vim kept"
        );
        assert_eq!(errors.len(), 1);
        let e = errors[0].to_string();
        assert!(
            e.starts_with("keymap.toml:5:7:") && e.contains("did you mean \"quit\""),
            "{e}"
        );
        let (_, errors) = Keymap::load(
            "default",
            Some(("k.toml", "[nowhere]\n\"a\" = \"quit\"\n")),
            false,
        );
        assert!(
            errors[0].to_string().starts_with("k.toml:1:"),
            "{}",
            errors[0]
        );
        let (_, errors) = Keymap::load(
            "default",
            Some(("k.toml", "[global]\n\"z\" = \"quit\"\n\"z z\" = \"top\"\n")),
            false,
        );
        assert!(
            errors
                .iter()
                .any(|e| e.to_string().contains("is both a key and the start of"))
        );
    }
}
