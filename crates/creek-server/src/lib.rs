//! One Creek replica as a networked service (`creek serve`).
//!
//! The sans-IO [`creek_node::Node`] (replica core, executor, CAB, gossip) is
//! owned by one thread, the [node loop](node_loop), which the rest feeds
//! through a channel:
//!
//! * [`transport`]: peer TCP connections with the versioned frame format,
//!   reconnects, bounded queues and [fault injection](faults);
//! * [`tls`]: rustls on the client and peer links, the binding of a
//!   replica's certificate to its id, reloading the files;
//! * [`auth`]: bearer tokens and the rights a call needs, when the
//!   configuration turns authentication on;
//! * [`service`]: the gRPC `Creek` and `Admin` services of
//!   `proto/creek.proto` (tonic);
//! * [`shards`] and [`mpo`]: on a cluster of several shards, the map a
//!   replica serves under and the messages of operations across shards
//!   (shard leaders' stable times among them);
//! * `stable`: the stable times' settings and status figures;
//! * a ticker for the protocol clock;
//! * the HTTP endpoint: Prometheus [`metrics`] and the live web
//!   [`console`];
//! * the persister of `creek-store`, which reports group commits back.
//!
//! Executions run on a rayon pool sized to the machine. See
//! `docs/architecture.md` for why each piece is what it is.
#![deny(missing_docs)]

pub mod auth;
pub(crate) mod call;
pub(crate) mod client_port;
pub mod config;
pub mod console;
pub mod faults;
pub mod health;
pub mod http_guard;
pub mod http_port;
pub mod idle;
pub mod limits;
pub mod metrics;
pub mod mover;
pub mod mpo;
pub(crate) mod native;
pub mod node_loop;
pub mod over_cap;
pub mod replica_log;
pub mod request;
pub mod restore;
pub mod server;
pub mod service;
pub mod shards;
mod socket;
mod stable;
pub mod telemetry;
pub mod throttle;
pub mod tls;
pub mod transport;
pub mod watch;

pub use config::{
    default_io_threads, AuthConfig, ConfigError, ReplicaAddr, ServerConfig, TlsConfig,
};
pub use node_loop::Fatal;
pub use server::{fresh_nonce, Server, StartError};
