//! The direct kernel collector (sysfs, KFD, DRM fdinfo, gpu_metrics): what partop can read
//! without amd-smi, at a fraction of its cost. Binary and text parsers are pure; the collector
//! does the reading.

pub mod collector;
pub mod fdinfo;
pub mod gpu_metrics;

pub use collector::{SourceMode, SysfsCollector};
