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
    /// Start time.
    Start,
}

impl SortKey {
    pub(crate) const ORDER: [Self; 8] = [
        Self::Vram,
        Self::Cu,
        Self::Gtt,
        Self::Gpu,
        Self::Pid,
        Self::User,
        Self::Name,
        Self::Start,
    ];

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
            Self::Start => "START",
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
