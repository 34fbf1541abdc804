//! The simulator's one source of randomness: the seeded SplitMix64 generator
//! shared with `creek_node::testnet` (one implementation for every harness).

pub use creek_node::testnet::Rng;
