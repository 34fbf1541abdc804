//! The simulator's one source of randomness: the project's seeded
//! SplitMix64 generator (`creek_rng::Rng`, reached through
//! `creek_node::testnet`), one implementation for every harness.

pub use creek_node::testnet::Rng;
