//! The checkers run at the end of every simulation.

pub mod linearizable;
pub mod order;
