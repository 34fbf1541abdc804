//! The simulator's one source of randomness: the project's seeded
//! SplitMix64 generator (`creek_rng::Rng`), one implementation for every
//! harness.

pub use creek_rng::Rng;
