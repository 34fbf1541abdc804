//! Deterministic simulator for Creek (placeholder while being written).
#![deny(missing_docs)]

pub mod check;
pub mod config;
pub mod history;
pub mod net;
pub mod report;
pub mod rng;
pub mod sim;
pub mod workload;
