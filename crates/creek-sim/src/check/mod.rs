//! The checkers run at the end of every simulation.
