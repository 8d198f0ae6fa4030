//! The view registry: every view in tab order, its title, key and keymap section.

use super::command::Command;
use super::keymap::Section;

/// The views, in tab order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// Partition map.
    Overview,
    /// Logical GPUs.
    Gpus,
    /// Processes.
    Processes,
    /// Served models.
    Models,
    /// Detail of the selection.
    Detail,
    /// Findings.
    Findings,
    /// Log.
    Log,
    /// The audit journal.
    Journal,
    /// Ten minutes of the selected GPU and its processes, as charts.
    History,
}

impl View {
    /// Tab order.
    pub const ALL: [Self; 9] = [
        Self::Overview,
        Self::Gpus,
        Self::Processes,
        Self::Detail,
        Self::Findings,
        Self::Log,
        Self::Journal,
        Self::Models,
        Self::History,
    ];

    /// The command that shows it (its tab shows that command's key).
    pub const fn command(self) -> Command {
        match self {
            Self::Overview => Command::ViewOverview,
            Self::Gpus => Command::ViewGpus,
            Self::Processes => Command::ViewProcesses,
            Self::Models => Command::ViewModels,
            Self::Detail => Command::ViewDetail,
            Self::Findings => Command::ViewFindings,
            Self::Log => Command::ViewLog,
            Self::Journal => Command::ViewJournal,
            Self::History => Command::ViewHistory,
        }
    }

    /// Tab title when the terminal is narrow.
    pub const fn short_title(self) -> &'static str {
        match self {
            Self::Overview => "Map",
            Self::Gpus => "GPUs",
            Self::Processes => "Procs",
            Self::Models => "Models",
            Self::Detail => "Detail",
            Self::Findings => "Finds",
            Self::Log => "Log",
            Self::Journal => "Journal",
            Self::History => "Hist",
        }
    }

    /// Tab title.
    pub const fn title(self) -> &'static str {
        match self {
            Self::Overview => "Overview",
            Self::Gpus => "GPUs",
            Self::Processes => "Processes",
            Self::Models => "Models",
            Self::Detail => "Detail",
            Self::Findings => "Findings",
            Self::Log => "Log",
            Self::Journal => "Journal",
            Self::History => "History",
        }
    }

    /// Its keymap section (History charts the GPU selected as GPUs does, so its keys act
    /// on that GPU the same way).
    pub const fn section(self) -> Section {
        match self {
            Self::Overview => Section::Overview,
            Self::Gpus => Section::Gpus,
            Self::Processes => Section::Processes,
            Self::Models => Section::Models,
            Self::Detail => Section::Detail,
            Self::Findings => Section::Findings,
            Self::Log => Section::Log,
            Self::Journal => Section::Journal,
            Self::History => Section::Gpus,
        }
    }

    pub(crate) fn index(self) -> usize {
        Self::ALL.iter().position(|v| *v == self).unwrap_or(0)
    }
}
