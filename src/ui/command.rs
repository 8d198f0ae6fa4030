//! The closed set of commands a key can be bound to. Keymap files name them in snake_case; the
//! help overlay and `docs/keymap.md` are generated from this list, so they cannot drift.

use std::fmt;

/// How dangerous a command is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Danger {
    /// Changes only the view.
    Safe,
    /// Starts a change to the node; always through plan -> confirm. Removed by `--read-only`.
    Mutating,
}

macro_rules! commands {
    ($( $v:ident = $name:literal, $doc:literal, $danger:ident; )*) => {
        /// A bindable command.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Command { $( #[doc = $doc] $v, )* }

        impl Command {
            /// Every command, in help order.
            pub const ALL: &'static [Self] = &[ $( Self::$v, )* ];

            /// The name used in keymap files.
            pub const fn name(self) -> &'static str {
                match self { $( Self::$v => $name, )* }
            }

            /// One line for help and docs.
            pub const fn doc(self) -> &'static str {
                match self { $( Self::$v => $doc, )* }
            }

            /// Its danger class.
            pub const fn danger(self) -> Danger {
                match self { $( Self::$v => Danger::$danger, )* }
            }
        }
    };
}

commands! {
    Quit = "quit", "Quit partop (a simulated node partop started is stopped)", Safe;
    Back = "back", "Go back from a drill-down (Detail, an open journal entry, an overlay); quit where there is nothing to go back from", Safe;
    ToggleHelp = "toggle_help", "Show or hide this help", Safe;
    NextView = "next_view", "Next view", Safe;
    PrevView = "prev_view", "Previous view", Safe;
    ViewOverview = "view_overview", "Overview: partition map of every physical GPU", Safe;
    ViewGpus = "view_gpus", "GPUs: every logical GPU as a row", Safe;
    ViewProcesses = "view_processes", "Processes holding GPUs", Safe;
    ViewDetail = "view_detail", "Detail of the selected GPU or process, with sources and ages", Safe;
    ViewFindings = "view_findings", "Findings: noisy neighbours, idle partitions", Safe;
    ViewLog = "view_log", "Log of collector errors and actions", Safe;
    ViewJournal = "view_journal", "Journal: every action partop took, who and when", Safe;
    ViewModels = "view_models", "Models: served models, their health, queue, KV cache and log", Safe;
    ViewHistory = "view_history", "History: ten minutes of the selected GPU (busy, VRAM, power, temperature) and its processes, as charts", Safe;
    SelectNext = "select_next", "Select the next row (scroll down in Detail, Log, help, staging)", Safe;
    SelectPrev = "select_prev", "Select the previous row (scroll up in Detail, Log, help, staging)", Safe;
    PageDown = "page_down", "Down one page", Safe;
    PageUp = "page_up", "Up one page", Safe;
    Top = "top", "First row", Safe;
    Bottom = "bottom", "Last row", Safe;
    OpenDetail = "open_detail", "Open the selected row in the detail view (a journal entry in full)", Safe;
    CycleSort = "cycle_sort", "Sort processes by the next column", Safe;
    ReverseSort = "reverse_sort", "Reverse the sort order", Safe;
    SortByVram = "sort_by_vram", "Sort processes by VRAM (again: reverse)", Safe;
    SortByGpuBusy = "sort_by_gpu_busy", "Sort processes by GPU% (again: reverse)", Safe;
    SortByCpu = "sort_by_cpu", "Sort processes by host CPU% (again: reverse)", Safe;
    SortByUptime = "sort_by_uptime", "Sort processes by run time (again: reverse)", Safe;
    SortByName = "sort_by_name", "Sort processes by name (again: reverse)", Safe;
    Filter = "filter", "Filter processes by text, any list by the words it shows (Enter keeps, Esc clears)", Safe;
    CycleGroup = "cycle_group", "Group processes: none, by logical GPU, by model", Safe;
    RefreshNow = "refresh_now", "Collect now instead of waiting for the next tick", Safe;
    TagProcess = "tag_process", "Tag or untag the selected process (kill acts on tagged ones)", Safe;
    KillProcess = "kill_process", "Terminate the tagged (or selected) processes: opens a confirmation", Mutating;
    ModelRestart = "model_restart", "Restart the selected registered model (or start it if stopped): opens a confirmation", Mutating;
    ModelStop = "model_stop", "Stop the selected registered model its registry's way: opens a confirmation", Mutating;
    ModelAddToRegistry = "model_add_to_registry", "Add the selected discovered server to models.toml: shows the entry first", Mutating;
    FindingAct = "finding_act", "Act on the selected reclaimable partition: evict its pod (Eviction API), stop its model, or kill its process; opens a confirmation", Mutating;
    ModelAdvise = "model_advise", "Stage the partition layout that serves the registry's models best", Mutating;
    TagNode = "tag_node", "Fleet: tag or untag the selected node (fleet plan and apply act on tagged ones)", Safe;
    TagAllShown = "tag_all_shown", "Fleet: tag every node shown (under the filter); untag them when all are tagged", Safe;
    TagGpu = "tag_gpu", "Tag or untag the selected logical GPU's physical GPU (staging acts on tagged ones)", Safe;
    StageChange = "stage_change", "Stage a partition change for the selected GPU (plan, then confirm)", Mutating;
    StageCycleCompute = "stage_cycle_compute", "Staging: next compute mode (or keep); on an NVIDIA GPU, the next MIG layout", Safe;
    StageCycleMemory = "stage_cycle_memory", "Staging: next memory mode (or keep)", Safe;
    StageToggleScope = "stage_toggle_scope", "Staging: the selected GPU or every GPU", Safe;
    StageConfirm = "stage_confirm", "Staging: confirm the plan (you will type the host name)", Safe;
    ToggleProgress = "toggle_progress", "Show or hide the progress of a running repartition", Safe;
    DialogFocusNext = "dialog_focus_next", "Move between the dialog's buttons", Safe;
    DialogActivate = "dialog_activate", "Press the focused dialog button", Safe;
    Cancel = "cancel", "Close the overlay or clear the filter", Safe;
}

impl Command {
    /// Looks a command up by its keymap name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.name() == s)
    }

    /// The closest known name, for "did you mean".
    pub fn suggest(s: &str) -> Option<&'static str> {
        Self::ALL
            .iter()
            .map(|c| (c.name(), distance(s, c.name())))
            .filter(|(_, d)| *d <= 3)
            .min_by_key(|(_, d)| *d)
            .map(|(n, _)| n)
    }
}

/// Edit distance between two names (for "did you mean").
pub fn distance(a: &str, b: &str) -> usize {
    crate::domain::text::edit_distance(a, b)
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_snake_case_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for c in Command::ALL {
            assert!(seen.insert(c.name()));
            assert!(c.name().chars().all(|x| x.is_ascii_lowercase() || x == '_'));
            assert_eq!(Command::from_name(c.name()), Some(*c));
            assert!(!c.doc().is_empty());
        }
        assert_eq!(Command::suggest("qiut"), Some("quit"));
        assert_eq!(Command::suggest("zzzzzzzz"), None);
    }
}
