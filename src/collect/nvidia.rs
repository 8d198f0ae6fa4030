//! NVIDIA GPUs: NVML (loaded at run time, so partop starts where no NVIDIA driver exists), or
//! `nvidia-smi -q -x` as a fallback, or a recording; all behind one trait producing an
//! [`node::NvNode`], assembled into the same snapshot as AMD nodes (a MIG instance is a logical
//! GPU).

pub mod node;
pub mod nvml;
pub mod reader;
pub mod smi;

pub use node::{NvInstance, NvNode, NvSource, Recorded, assemble};
