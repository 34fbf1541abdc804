//! Benchmark workloads for Creek, written as ordinary stored procedures so
//! the same code runs in the simulator and against a real cluster.
//!
//! [`tpcc`] is the TPC-C benchmark the Creek paper evaluates with (§6):
//! the nine tables laid out on Creek's key-value state, the five
//! transactions, the initial population, an input generator and the
//! consistency conditions. [`ycsb`] is YCSB's core workloads A, B and C
//! over the key-value built-ins (Correctables §6). [`bank`] moves money
//! between accounts whose total never changes: the invariant the simulator
//! and `creek chaos` check.
//!
//! ```
//! use creek_procs::Registry;
//! use creek_workloads::tpcc;
//!
//! let mut registry = Registry::with_builtins();
//! tpcc::register(&mut registry);
//! assert!(registry.get(tpcc::NEW_ORDER).is_some());
//! ```
//!
//! This crate is not a bench harness: it neither drives clients nor measures
//! anything.
#![deny(missing_docs)]

pub mod bank;
pub mod tpcc;
pub mod ycsb;

/// Register every workload's procedures (TPC-C, YCSB loading and the bank)
/// beside whatever `registry` holds.
pub fn register_all(registry: &mut creek_procs::Registry) {
    bank::register_procedures(registry);
    tpcc::register(registry);
    ycsb::register(registry);
}
