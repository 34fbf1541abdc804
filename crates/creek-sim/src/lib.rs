//! Creek's deterministic cluster simulator: N replicas of the real
//! `creek_node::Node`, or of a baseline protocol (`baseline`: SMR, Bayou,
//! Archie), on a modelled network and modelled CPUs, with faults,
//! closed- and open-loop clients, the consistency checkers of `creek_check`
//! run over every finished simulation (`report`), and the benchmark
//! measurements shared with the cluster target (`bench`).
#![deny(missing_docs)]

pub mod baseline;
pub mod bench;
pub mod config;
pub mod net;
pub mod replica;
pub mod report;
pub mod rng;
pub mod sim;
pub mod workload;
