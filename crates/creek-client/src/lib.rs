//! The Rust client of Creek (DESIGN §7): invoke procedures on a replicated
//! store and receive each op's views as a [`Correctable`] — a fast
//! preliminary view from the replica's tentative execution, then the final
//! view once the op's position is committed.
//!
//! ```no_run
//! use creek_client::{Client, Levels, ViewKind};
//! use creek_types::value::Value;
//!
//! # async fn tour() -> Result<(), creek_client::Error> {
//! // Any replica of the cluster; later calls fail over to the others.
//! let client = Client::connect(["127.0.0.1:7001", "127.0.0.1:7002"]).await?;
//!
//! // A strong op with a preliminary view first (the default levels).
//! let op = client.kv_incr("visits", 1).await?;
//! let early = op.preliminary().await?; // tentative: may still change
//! let settled = op.final_view().await?; // stable
//! if settled.kind == ViewKind::Confirmed {
//!     // The preliminary view held; `settled.outcome == early.outcome`.
//! }
//!
//! // Start dependent work on the preliminary view; it is redone only if
//! // the final view differs.
//! let page = client
//!     .invoke("kv.get", vec![Value::from("greeting")], Levels::Both)
//!     .await?
//!     .speculate(|view| view.outcome.clone().map(|v| Value::from(format!("<p>{v}</p>").as_str())));
//! println!("{:?}", page.final_view().await?.outcome);
//! # Ok(())
//! # }
//! ```
//!
//! A cluster with TLS (docs/security.md) is reached with
//! [`Client::connect_with`] and [`TlsOptions`]: the CA, and the client's
//! certificate and key when the cluster requires one.
//!
//! ```no_run
//! # use std::path::Path;
//! # use creek_client::{Client, TlsOptions};
//! # async fn tls() -> Result<(), creek_client::Error> {
//! let tls = TlsOptions::from_files(
//!     Path::new("certs/ca.crt"),
//!     Some(Path::new("certs/client-app.crt")),
//!     Some(Path::new("certs/client-app.key")),
//! )?;
//! let client = Client::connect_with(["10.0.0.1:7001", "10.0.0.2:7001"], Some(tls)).await?;
//! # Ok(())
//! # }
//! ```
//!
//! User procedures (docs/procedures.md) are registered from source with
//! [`Client::register_procedures`], their keyspaces made with
//! [`Client::create_keyspace`], and they are called by name like any
//! procedure:
//!
//! ```no_run
//! # use creek_client::{Client, KeyspaceLabel, Levels};
//! # use creek_types::value::Value;
//! # async fn procs(client: Client) -> Result<(), creek_client::Error> {
//! client.create_keyspace("notes", KeyspaceLabel::Weak).await?;
//! let source = "proc note(k: bytes, v: bytes) { put(notes, k, v) }";
//! for r in client.register_procedures(source).await? {
//!     println!("registered {} version {}", r.name, r.version);
//! }
//! let op = client
//!     .invoke("note", vec![Value::from("k"), Value::from("v")], Levels::Both)
//!     .await?;
//! op.final_view().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Read-only calls may ask for a snapshot view ([`Levels::Snapshot`]): the
//! committed state at one time, never older than the client's
//! [`Client::read_time`], answered without consensus; [`View::staleness`]
//! says how old it is. The client keeps its own writes of plain keys
//! (`kv.put`, `kv.delete`, `kv.mput`, `kv.incr`, `kv.cas`, `kv.transfer`)
//! in a bounded cache and lays them over its snapshot views of `kv.get`
//! and `kv.mget`, so it reads its writes after switching replica
//! ([`ConnectOptions::cache`], docs/snapshot-reads.md, "The client
//! cache"). A [`Cluster`]'s shards share one read time and one cache, and
//! a snapshot `kv.mget` whose keys span shards reads them at one time.
//!
//! ```no_run
//! # use creek_client::{Cluster, Levels};
//! # use creek_types::value::Value;
//! # async fn snapshot(cluster: Cluster) -> Result<(), creek_client::Error> {
//! cluster
//!     .invoke("kv.put", vec![Value::from("a"), Value::from("1")], Levels::Weak)
//!     .await?;
//! let keys = Value::List(vec![Value::from("a"), Value::from("b")]);
//! let read = cluster.invoke("kv.mget", vec![keys], Levels::Snapshot).await?;
//! let view = read.final_view().await?;
//! // "a" reads "1" (from the cache until a snapshot includes the write).
//! println!("{:?} at {} ({:?} old)", view.outcome, view.time, view.staleness());
//! # Ok(())
//! # }
//! ```
//!
//! [`Client::watch`] streams the committed changes under a key prefix, in
//! the committed order, and resumes at another replica when its replica
//! fails, so each change is seen once.
//!
//! Aborts are outcomes, not errors: a procedure that aborts produces views
//! whose [`View::outcome`] is `Err(message)`. An [`Error`] means the outcome
//! is unknown (refused, deadline passed, replica gone).
//!
//! This crate is not a connection pool or a load balancer: a [`Client`]
//! talks to one replica at a time and moves on only when it fails.
#![deny(missing_docs)]

mod cache;
mod causal;
mod client;
mod cluster;
mod correctable;
mod error;
mod known;
mod lease;
mod native;
mod procs;
mod speculate;
mod stream;
mod tls;
mod txn;
mod versions;
mod view;
mod watch;

pub use cache::{CachedWrite, CACHE_BYTES_MAX_DEFAULT};
pub use client::{CallOptions, Client, ConnectOptions, RequestId};
pub use cluster::{Cluster, Page};
pub use correctable::{Correctable, State, Views};
pub use creek_proto::pb;
pub use creek_proto::pb::Durability;
pub use creek_shard::{ShardId, ShardMap};
pub use error::Error;
pub use lease::{Election, KeepAlive, Leadership, LeaseTtl, Lock};
pub use procs::{Keyspace, KeyspaceLabel, ProcedureSource, Registered, DEFINITION_TIMEOUT};
pub use tls::{TlsFiles, TlsOptions};
pub use txn::{Cmp, Field, Txn, TxnAnswer, TxnOp};
pub use versions::KeyMeta;
pub use view::{Level, Levels, Outcome, View, ViewKind};
pub use watch::{OpRef, WatchEvent, WatchOptions};

#[cfg(test)]
mod tests;
