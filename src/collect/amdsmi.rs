//! amd-smi: runs the CLI (`runner`), parses its JSON (`json`, `schema`), assembles a
//! [`Snapshot`](crate::domain::Snapshot) (`assemble`), and keeps what it read (`reader`), on
//! every sample or in the background beside the kernel (`lane`). One of the sources of
//! `collect::pipeline`.

pub mod assemble;
pub mod error;
pub mod json;
pub mod lane;
pub mod reader;
pub mod recording;
pub mod runner;
pub mod schema;
pub mod version;

pub use error::AmdSmiError;
pub use reader::AmdSmi;
pub use runner::Runner;
pub use version::AmdSmiVersion;
