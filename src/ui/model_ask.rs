//! Confirming a model action (restart, stop, add to the registry): the value the operator says
//! yes to, built from the selected row.

use super::command::Command;
use crate::domain::snapshot::Snapshot;

/// A model action waiting for the operator's yes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelAction {
    /// Stop (if running) and start on a logical GPU that fits.
    Restart {
        /// Registry name.
        name: String,
    },
    /// Stop its registry's way.
    Stop {
        /// Registry name.
        name: String,
    },
    /// Append an entry to the registry file.
    AddToRegistry {
        /// The TOML entry.
        entry: String,
    },
}

/// The confirmation of a model action (Cancel focused, as for kills).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelAsk {
    /// What would be done.
    pub action: ModelAction,
    /// Title.
    pub title: String,
    /// What will run, line by line.
    pub lines: Vec<String>,
    /// The dangerous button has focus.
    pub focus: super::confirm::Focus,
}

/// The confirmation for a model command on row `sel`, or nothing when it does not apply.
pub fn model_ask(snap: &Snapshot, sel: usize, c: Command) -> Option<ModelAsk> {
    let m = snap.models.get(sel)?;
    match (c, &m.spec) {
        (Command::ModelAddToRegistry, None) => {
            let entry = crate::domain::served::entry_for_model(snap, m)?;
            Some(ModelAsk {
                lines: entry.lines().map(str::to_string).collect(),
                title: format!("Add {} to the model registry?", m.name),
                action: ModelAction::AddToRegistry { entry },
                focus: super::confirm::Focus::Cancel,
            })
        }
        (Command::ModelRestart, Some(spec)) => {
            let mut lines = Vec::new();
            if m.pid.is_some() {
                lines.push(format!(
                    "stop:  {}",
                    spec.stop_text(&m.gpus, &m.bdfs, m.pid)
                ));
            }
            let placed = if m.pid.is_some() && !m.bdfs.is_empty() {
                // A restart stays where it is.
                let rows = crate::domain::plan::layout_rows(snap);
                rows.iter()
                    .filter(|r| m.bdfs.contains(&r.bdf))
                    .cloned()
                    .collect::<Vec<_>>()
            } else {
                crate::domain::placement::place_now(snap, spec, None).to
            };
            if placed.is_empty() {
                lines.push("start: no free logical GPU fits it now".into());
            } else {
                let ids: Vec<u32> = placed.iter().map(|r| r.gpu_id).collect();
                let bdfs: Vec<String> = placed.iter().map(|r| r.bdf.clone()).collect();
                lines.push(format!("start: {}", spec.launch_text(&ids, &bdfs)));
            }
            lines.push(format!(
                "then wait for {} (at most {}s)",
                spec.health_url, spec.health_timeout_secs
            ));
            Some(ModelAsk {
                title: format!(
                    "{} {}?",
                    if m.pid.is_some() { "Restart" } else { "Start" },
                    m.name
                ),
                lines,
                action: ModelAction::Restart {
                    name: m.name.clone(),
                },
                focus: super::confirm::Focus::Cancel,
            })
        }
        (Command::ModelStop, Some(spec)) if m.pid.is_some() => Some(ModelAsk {
            title: format!("Stop {}? Its clients lose the service.", m.name),
            lines: vec![format!("stop: {}", spec.stop_text(&m.gpus, &m.bdfs, m.pid))],
            action: ModelAction::Stop {
                name: m.name.clone(),
            },
            focus: super::confirm::Focus::Cancel,
        }),
        _ => None,
    }
}
