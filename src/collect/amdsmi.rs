//! The amd-smi collector: runs the CLI (`runner`), parses its JSON (`json`, `schema`), and
//! assembles a [`Snapshot`](crate::domain::Snapshot) (`assemble`). Static data is read at start
//! and after a change; metrics and processes on every tick.

pub mod assemble;
pub mod collector;
pub mod error;
pub mod json;
pub mod lane;
pub mod recording;
pub mod runner;
pub mod schema;
pub mod version;

pub use collector::AmdSmiCollector;
pub use error::AmdSmiError;
pub use runner::Runner;
pub use version::AmdSmiVersion;
