//! Creek's harness of real processes: what starts `creek serve` processes
//! on this machine for the benchmarks (`creek bench`, `creek chaos`), the
//! local cluster of `creek dev` and the end-to-end tests.
//!
//! - [`ports`]: loopback ports reserved together, never one this process
//!   handed out before, so two clusters started one after the other or at
//!   once never share a port;
//! - [`launcher`]: a [`Cluster`] of `creek serve` processes, one
//!   configuration file, log and data directory per replica in one
//!   directory; started, signalled, killed (by each process's own id) and
//!   waited for, every process killed when the value is dropped;
//! - [`testnet`]: the in-process test network: real nodes, driven through
//!   `Node::drive` and restarted through `Node::recover`, on a simulated
//!   network with loss, duplication, delay, partitions and crashes (its
//!   tests, and `creek bench cab`).
//!
//! ```no_run
//! use creek_harness::launcher::{Cluster, Launch};
//!
//! let dir = std::env::temp_dir().join("creek-example");
//! let mut cluster = Cluster::on_loopback(Launch::new("target/debug/creek".into(), dir), 3)?;
//! for i in 0..cluster.len() {
//!     cluster.configure(i, &[0, 1, 2], |c| c.workers = 1)?;
//!     cluster.spawn(i)?;
//! }
//! cluster.wait_accepting(std::time::Duration::from_secs(20))?;
//! # Ok::<(), String>(())
//! ```
//!
//! Not for production: no replica, client or protocol crate depends on it
//! except for its tests (docs/architecture.md, "The arrows").
#![deny(missing_docs)]

pub mod launcher;
pub mod ports;
pub mod testnet;

pub use launcher::{Cluster, Launch};
