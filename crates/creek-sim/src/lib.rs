//! Deterministic simulator for Creek (placeholder while being written).
#![deny(missing_docs)]

pub mod check;
pub mod history;
pub mod rng;
pub mod workload;
