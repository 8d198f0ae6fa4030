//! The rows the process table shows (sorted, filtered, grouped by the reducer, never while
//! drawing), and what the detail view is about.

/// Process table sort column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// VRAM (default: the biggest holders first).
    Vram,
    /// CU occupancy.
    Cu,
    /// GTT.
    Gtt,
    /// Logical GPU.
    Gpu,
    /// PID.
    Pid,
    /// User.
    User,
    /// Name.
    Name,
    /// Start time (shown as run time, UP).
    Start,
    /// Host CPU %.
    Cpu,
    /// Resident host memory.
    Rss,
    /// Engine busy (fdinfo engine time, NVML's SM share).
    Busy,
    /// The registered model it serves.
    Model,
}

/// A column of the process table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Col {
    /// PID (tag mark in front).
    Pid,
    /// User.
    User,
    /// Name.
    Name,
    /// Logical GPU(s).
    Gpu,
    /// VRAM.
    Vram,
    /// GTT.
    Gtt,
    /// CU occupancy.
    Cu,
    /// Engine busy (fdinfo engine time where the kernel counts it; NVML's SM share).
    Busy,
    /// The model it serves.
    Model,
    /// Host CPU %.
    Cpu,
    /// Resident host memory.
    Rss,
    /// Run time.
    Up,
    /// Pod, container or unit.
    Owner,
    /// Command line.
    Command,
}

impl Col {
    /// The sort key of a sortable column.
    pub const fn sort(self) -> Option<SortKey> {
        Some(match self {
            Self::Pid => SortKey::Pid,
            Self::User => SortKey::User,
            Self::Name => SortKey::Name,
            Self::Gpu => SortKey::Gpu,
            Self::Vram => SortKey::Vram,
            Self::Gtt => SortKey::Gtt,
            Self::Cu => SortKey::Cu,
            Self::Cpu => SortKey::Cpu,
            Self::Rss => SortKey::Rss,
            Self::Up => SortKey::Start,
            Self::Busy => SortKey::Busy,
            Self::Model => SortKey::Model,
            Self::Owner | Self::Command => return None,
        })
    }
}

/// The process table's columns at a terminal width: one place, so the view draws and `s`
/// cycles through the same set (never a hidden column).
pub fn columns(width: u16) -> &'static [Col] {
    if width >= 120 {
        &[
            Col::Pid,
            Col::User,
            Col::Name,
            Col::Gpu,
            Col::Model,
            Col::Vram,
            Col::Gtt,
            Col::Busy,
            Col::Cu,
            Col::Cpu,
            Col::Rss,
            Col::Up,
            Col::Owner,
            Col::Command,
        ]
    } else {
        &[
            Col::Pid,
            Col::User,
            Col::Name,
            Col::Gpu,
            Col::Vram,
            Col::Cu,
            Col::Cpu,
            Col::Rss,
            Col::Command,
        ]
    }
}

impl SortKey {
    /// The next sort among the columns shown at `width` (in their order, wrapping).
    pub fn next_at(self, width: u16) -> Self {
        let keys: Vec<Self> = columns(width).iter().filter_map(|c| c.sort()).collect();
        let i = keys.iter().position(|k| *k == self);
        keys[i.map_or(0, |i| (i + 1) % keys.len())]
    }

    /// Whether it sorts biggest first by default.
    pub const fn desc_by_default(self) -> bool {
        matches!(
            self,
            Self::Vram | Self::Cu | Self::Gtt | Self::Start | Self::Cpu | Self::Rss | Self::Busy
        )
    }

    /// Column label.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Vram => "VRAM",
            Self::Cu => "CU%",
            Self::Gtt => "GTT",
            Self::Gpu => "GPU",
            Self::Pid => "PID",
            Self::User => "USER",
            Self::Name => "NAME",
            Self::Start => "UP",
            Self::Cpu => "CPU%",
            Self::Rss => "RSS",
            Self::Busy => "GPU%",
            Self::Model => "MODEL",
        }
    }
}

/// Process grouping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// One row per process.
    None,
    /// Under each logical GPU.
    Gpu,
    /// Under each served model.
    Model,
}

/// One row of the process table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcRow {
    /// A group heading.
    Heading(String),
    /// A process (index into `snapshot.processes`), optionally for one GPU of it.
    Process {
        /// Index into the snapshot's processes.
        index: usize,
        /// The GPU this row is about, when grouped by GPU.
        gpu: Option<u32>,
    },
}

/// What runs on a logical GPU (derived from the processes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuUse {
    /// Served model(s) or process name(s).
    pub label: String,
    /// Number of processes holding it.
    pub holders: usize,
    /// Sum of the holders' CU occupancy, percent of its CUs.
    pub cu_percent: Option<f64>,
}

/// What the detail view shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DetailTarget {
    /// A logical GPU by identity (BDF with partition function).
    Gpu(String),
    /// A process.
    Process(u32),
}
