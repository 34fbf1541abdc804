//! [`Client`]: a connection to a Creek cluster that fails over between
//! replicas and numbers its requests so retries are applied at most once.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_proto::{pb, to_wire};
use creek_types::value::Value;
use tonic::Status;

use crate::cache::CachedWrite;
use crate::causal::{Causal, ReadAt, Track};
use crate::correctable::Correctable;
use crate::stream::{Expect, ViewReader, ViewSource};
use crate::tls::TlsOptions;
use crate::view::Levels;
use crate::Error;

mod admin;
mod options;
mod replica;
mod settle;

pub use options::{CallOptions, ConnectOptions, RequestId};
pub(crate) use options::{Channel, Credentials};
use replica::{connect_from, Connected, Replica};
use settle::Settle;

/// A client of a Creek cluster. Cheap to clone and share across tasks:
/// clones share the connection, the client id and the request numbering.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    replicas: Vec<Replica>,
    /// TLS for every replica (a leader named by another replica too).
    tls: Option<TlsOptions>,
    /// The token sent with every call.
    credentials: Credentials,
    current: Mutex<Connected>,
    /// Serializes failovers, so concurrent calls that see the same replica
    /// fail move together to one new replica.
    failover: tokio::sync::Mutex<()>,
    client_id: u64,
    next_seq: AtomicU64,
    /// Request seqs answered after being sent once, for the next requests
    /// to acknowledge (the cluster then forgets their deduplication
    /// entries).
    acks: Acks,
    /// The client's read and dependency times and its cache of its own
    /// writes, shared by every shard's client of a [`crate::Cluster`]
    /// (docs/snapshot-reads.md).
    causal: Arc<Causal>,
}

/// Sequence numbers waiting to be acknowledged, shared with the tasks that
/// read the views.
#[derive(Clone, Default)]
pub(crate) struct Acks(Arc<Mutex<Vec<u64>>>);

/// Acknowledgements one request carries (the server takes this many).
const ACKS_PER_REQUEST: usize = 256;
/// Acknowledgements kept waiting at most; older ones are dropped (their
/// entries then expire instead).
const ACKS_WAITING_MAX: usize = 4096;

impl Acks {
    /// `seq` was answered in full.
    pub(crate) fn push(&self, seq: u64) {
        let mut acks = lock(&self.0);
        if acks.len() >= ACKS_WAITING_MAX {
            acks.drain(..ACKS_PER_REQUEST);
        }
        acks.push(seq);
    }

    fn take(&self) -> Vec<u64> {
        let mut acks = lock(&self.0);
        let n = acks.len().min(ACKS_PER_REQUEST);
        acks.drain(..n).collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The response header naming an accepted op (`r2.1841`), as the replica
/// sets it.
const OP_HEADER: &str = "creek-op";

impl Client {
    /// Connect to the first of `addrs` that answers. Each address is a
    /// replica's client endpoint, `http://host:port` or `host:port`. Later
    /// calls fail over to the other replicas, in order, when the current
    /// one is unavailable.
    pub async fn connect<I, S>(addrs: I) -> Result<Client, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::connect_with(addrs, None).await
    }

    /// Connect with `options`: TLS (as [`connect_with`](Client::connect_with))
    /// and a token sent with every call (`authorization: Bearer <token>`)
    /// to a cluster that checks users (docs/security.md). Calls it refuses
    /// fail with [`Error::Unauthenticated`] (no token, an unknown or
    /// revoked one) or [`Error::PermissionDenied`] (the user lacks a
    /// right; the message names it, and nothing was applied).
    pub async fn connect_with_options<I, S>(
        addrs: I,
        options: ConnectOptions,
    ) -> Result<Client, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let causal = Causal::new(options.cache.then_some(options.cache_bytes_max));
        Self::connect_sharing(addrs, options, causal).await
    }

    /// [`connect_with_options`](Client::connect_with_options), with times
    /// and a cache shared with other clients (a cluster's shards').
    pub(crate) async fn connect_sharing<I, S>(
        addrs: I,
        options: ConnectOptions,
        causal: Arc<Causal>,
    ) -> Result<Client, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::open(addrs, options, causal, false).await
    }

    /// [`connect_sharing`](Client::connect_sharing), but when no replica
    /// answers now, a client whose calls connect when they are made (and
    /// fail as unavailable until a replica answers): a shard that is down,
    /// or listed before its replicas start, leaves the rest of a cluster
    /// reachable.
    pub(crate) async fn connect_sharing_or_later<I, S>(
        addrs: I,
        options: ConnectOptions,
        causal: Arc<Causal>,
    ) -> Result<Client, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::open(addrs, options, causal, true).await
    }

    async fn open<I, S>(
        addrs: I,
        options: ConnectOptions,
        causal: Arc<Causal>,
        later: bool,
    ) -> Result<Client, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let ConnectOptions {
            tls,
            token,
            grpc_only,
            ..
        } = options;
        let credentials = Credentials::new(token.as_deref())?;
        // Invocations go natively (inside TLS if it is on), unless the
        // caller keeps everything on gRPC.
        let native = match grpc_only {
            true => None,
            false => Some(crate::native::Native {
                token,
                tls: tls.as_ref().map(TlsOptions::native_config).transpose()?,
            }),
        };
        let replicas = addrs
            .into_iter()
            .map(|a| Replica::new(a.into(), tls.as_ref(), &credentials, native.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        if replicas.is_empty() {
            return Err(Error::InvalidArgument("no replica address given".into()));
        }
        let current = match connect_from(&replicas, 0).await {
            Ok(c) => c,
            Err(e) if later && e.is_unavailable() => Connected {
                index: 0,
                channel: replicas[0].connect_later(),
                native: None,
            },
            Err(e) => return Err(e),
        };
        Ok(Client {
            inner: Arc::new(Inner {
                replicas,
                tls,
                credentials,
                current: Mutex::new(current),
                failover: tokio::sync::Mutex::new(()),
                client_id: random_client_id(),
                next_seq: AtomicU64::new(1),
                acks: Acks::default(),
                causal,
            }),
        })
    }

    /// [`connect`](Client::connect) with TLS when `tls` is given (a
    /// cluster with a `[tls]` table, docs/security.md): addresses are
    /// then `https://host:port` or `host:port`, and each replica must
    /// present a certificate the CA signed for the host dialed.
    pub async fn connect_with<I, S>(addrs: I, tls: Option<TlsOptions>) -> Result<Client, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::connect_with_options(
            addrs,
            ConnectOptions {
                tls,
                ..ConnectOptions::default()
            },
        )
        .await
    }

    /// This client's id, sent with every request (never zero).
    pub fn client_id(&self) -> u64 {
        self.inner.client_id
    }

    /// The address of the replica calls currently go to.
    pub fn replica_addr(&self) -> String {
        let index = lock(&self.inner.current).index;
        self.inner.replicas[index].addr.clone()
    }

    /// Invoke `procedure` at `levels` ([`Levels::Both`] is the usual
    /// choice: a fast preliminary view, then the final one).
    pub async fn invoke(
        &self,
        procedure: impl Into<String>,
        args: Vec<Value>,
        levels: Levels,
    ) -> Result<Correctable, Error> {
        self.invoke_with(procedure, args, levels, CallOptions::default())
            .await
    }

    /// Invoke a weak op: one preliminary view, which closes the Correctable.
    pub async fn invoke_weak(
        &self,
        procedure: impl Into<String>,
        args: Vec<Value>,
    ) -> Result<Correctable, Error> {
        self.invoke(procedure, args, Levels::Weak).await
    }

    /// Invoke a strong op and receive its final view only.
    pub async fn invoke_strong(
        &self,
        procedure: impl Into<String>,
        args: Vec<Value>,
    ) -> Result<Correctable, Error> {
        self.invoke(procedure, args, Levels::Strong).await
    }

    /// Invoke `procedure` with per-call options.
    ///
    /// Returns once a replica accepted the request (a weak op without
    /// `weak_final`: once its one view arrived, which the replica sends
    /// with the acceptance); errors before that (bad arguments, overload,
    /// no replica reachable) are returned here, later ones close the
    /// Correctable. A replica that is unavailable is
    /// left for the next one, and the request is sent again with the same
    /// `(client_id, request_seq)`, so the cluster applies it at most once.
    pub async fn invoke_with(
        &self,
        procedure: impl Into<String>,
        args: Vec<Value>,
        levels: Levels,
        options: CallOptions,
    ) -> Result<Correctable, Error> {
        let id = self.request_id(options.request_id);
        let fresh = options.request_id.is_none();
        self.invoke_as(procedure.into(), &args, levels, &options, id, fresh)
            .await
    }

    /// [`invoke_with`](Client::invoke_with) under request id `id`;
    /// `fresh`: the id was never sent before (so an answer after one send
    /// can be acknowledged).
    pub(crate) async fn invoke_as(
        &self,
        procedure: String,
        args: &[Value],
        levels: Levels,
        options: &CallOptions,
        id: RequestId,
        fresh: bool,
    ) -> Result<Correctable, Error> {
        self.invoke_at(
            procedure,
            args,
            levels,
            options,
            id,
            fresh,
            ReadAt {
                past: options.revision.is_some(),
                ..ReadAt::default()
            },
        )
        .await
    }

    /// [`invoke_as`](Client::invoke_as), a snapshot read at `at`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn invoke_at(
        &self,
        procedure: String,
        args: &[Value],
        levels: Levels,
        options: &CallOptions,
        id: RequestId,
        fresh: bool,
        at: ReadAt,
    ) -> Result<Correctable, Error> {
        let (track, read_time) = self.inner.causal.track(&procedure, args, levels, at);
        self.invoke_tracked(
            procedure,
            args,
            levels,
            options,
            id,
            fresh,
            (track, read_time),
            at,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn invoke_tracked(
        &self,
        procedure: String,
        args: &[Value],
        levels: Levels,
        options: &CallOptions,
        id: RequestId,
        fresh: bool,
        (track, read_time): (Track, u64),
        at: ReadAt,
    ) -> Result<Correctable, Error> {
        let start = Instant::now();
        let deadline = options.timeout.map(|t| start + t);
        let own = id.client == self.inner.client_id;
        // A weak write's commit time matters to the cache even when the
        // caller does not ask for its final view: the stream goes on to it.
        let follow = levels == Levels::Weak && !options.weak_final && track.wants_final();
        let request = pb::InvokeRequest {
            procedure: procedure.clone(),
            args: args.iter().map(to_wire).collect(),
            levels: levels.to_wire(),
            weak_final: options.weak_final || follow,
            client_id: id.client,
            request_seq: id.seq,
            // Acknowledgements name this client's requests only.
            acked: if own {
                self.inner.acks.take()
            } else {
                Vec::new()
            },
            read_time,
            read_exact: at.exact.is_some() && levels.has_snapshot(),
            durability: options.durability as i32,
            revision: options.revision.unwrap_or(0),
        };
        self.renew_native().await;
        let sends = std::sync::atomic::AtomicU32::new(0);
        let call = self.with_failover_at(|conn| {
            sends.fetch_add(1, Ordering::Relaxed);
            let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let native = conn.native.clone().filter(|n| !n.is_closed());
            let channel = conn.channel.clone();
            let request = &request;
            async move {
                if let Some(native) = native {
                    return native.invoke(request, timeout).await.map(|views| {
                        let op = views.op;
                        (ViewSource::Native(views), op)
                    });
                }
                let mut req = tonic::Request::new(request.clone());
                if let Some(t) = timeout {
                    req.set_timeout(t);
                }
                pb::creek_client::CreekClient::new(channel)
                    .invoke(req)
                    .await
                    .map(|r| {
                        let op = r
                            .metadata()
                            .get(OP_HEADER)
                            .and_then(|v| v.to_str().ok())
                            .and_then(crate::OpRef::parse);
                        (ViewSource::Grpc(Box::new(r.into_inner())), op)
                    })
            }
        });
        let (stream, op) = within(deadline, options.timeout, call).await?;
        let (feeder, correctable) = Correctable::channel();
        let correctable = correctable.with_op(op);
        let expect = Expect {
            final_view: levels.is_strong() || options.weak_final,
            snapshot_after_weak: levels == Levels::WeakSnapshot,
            track,
            follow,
            start,
            deadline,
            timeout: options.timeout,
            // A request sent more than once may have a copy still on its
            // way: its entry must stay until it expires. So must one sent
            // under an id given by the caller (it may be a retry).
            ack: (sends.load(Ordering::Relaxed) == 1 && fresh)
                .then(|| (self.inner.acks.clone(), id.seq)),
        };
        let mut reader = ViewReader::new(stream, feeder, expect);
        if reader.first_view_closes() {
            // A weak op's one view comes with its acceptance (the replica
            // tells both at the end of one turn): read here, it costs no
            // reader task's wake-up on the op's path. A gRPC stream's end
            // is read in the background.
            reader.step().await;
            if !reader.following() {
                reader.finish();
            } else if reader.track().must_settle() {
                // The cache could not hold the write: it is acknowledged
                // at its commit, so the client's next snapshot reads are
                // sent at its commit time.
                let call = Settle {
                    procedure,
                    args: args.to_vec(),
                    id,
                };
                self.settle(reader, call).await?;
            } else {
                let call = Settle {
                    procedure,
                    args: args.to_vec(),
                    id,
                };
                tokio::spawn(self.clone().settle_owned(reader, call));
            }
        } else {
            tokio::spawn(reader.run());
        }
        Ok(correctable)
    }

    /// This client's read time: the largest time of a snapshot view, or
    /// of a read's final view, it saw (µs, 0 before any). Its snapshot
    /// reads are sent with it, so they never read an older state, on any
    /// replica (docs/snapshot-reads.md).
    pub fn read_time(&self) -> u64 {
        self.inner.causal.read_time()
    }

    /// This client's dependency time: its read time, or the commit time of
    /// its own latest write if later (µs). Every request but a snapshot
    /// read is sent with it, so the client's later ops commit after its
    /// earlier ones, on any shard.
    pub fn dep_time(&self) -> u64 {
        self.inner.causal.dep_time()
    }

    /// Raise this client's read time to `time` (one seen by another
    /// client of the same user, say): its next snapshot reads are never
    /// older.
    pub fn observe_read_time(&self, time: u64) {
        self.inner.causal.observe_read(time);
    }

    /// The writes the client cache holds now (docs/snapshot-reads.md, "The
    /// client cache"): each key the client wrote whose write some later
    /// snapshot read may not include yet, with its commit time once known.
    pub fn cache_entries(&self) -> Vec<CachedWrite> {
        self.inner.causal.cache_entries()
    }

    /// The bytes of keys and values the client cache holds now (at most
    /// [`ConnectOptions::cache_bytes_max`]).
    pub fn cache_bytes(&self) -> usize {
        self.inner.causal.cache_bytes()
    }

    /// The id the next call gets: `given`, or this client's next one.
    pub fn request_id(&self, given: Option<RequestId>) -> RequestId {
        given.unwrap_or_else(|| RequestId {
            client: self.inner.client_id,
            seq: self.inner.next_seq.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The procedures the cluster runs, with their signatures: the
    /// built-ins, and the user procedures registered as the answering
    /// replica's latest state holds them (`user` set, with their
    /// `version`, `writes_strong` and the labels of the `keyspaces` they
    /// use).
    pub async fn procedures(&self) -> Result<Vec<pb::ProcedureInfo>, Error> {
        let reply = self
            .with_failover(|channel| async move {
                pb::creek_client::CreekClient::new(channel)
                    .procedures(pb::ProceduresRequest {})
                    .await
            })
            .await?;
        Ok(reply.into_inner().procedures)
    }

    /// `kv.get(key)`: the value, or nil if absent.
    pub async fn kv_get(&self, key: impl AsRef<[u8]>) -> Result<Correctable, Error> {
        self.invoke("kv.get", vec![bytes(key)], Levels::Both).await
    }

    /// `kv.put(key, value)`: nil.
    pub async fn kv_put(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<Correctable, Error> {
        self.invoke("kv.put", vec![bytes(key), bytes(value)], Levels::Both)
            .await
    }

    /// `kv.incr(key, delta)`: the counter's new value (absent counts as 0).
    pub async fn kv_incr(&self, key: impl AsRef<[u8]>, delta: i64) -> Result<Correctable, Error> {
        self.invoke("kv.incr", vec![bytes(key), Value::Int(delta)], Levels::Both)
            .await
    }

    /// `kv.mget(keys)`: a list with each key's value, or nil if absent.
    pub async fn kv_mget<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Correctable, Error> {
        let keys = Value::List(keys.into_iter().map(bytes).collect());
        self.invoke("kv.mget", vec![keys], Levels::Both).await
    }

    /// `kv.mput(keys, values)`: every key written at once; nil.
    pub async fn kv_mput<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        items: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Correctable, Error> {
        let (keys, values): (Vec<Value>, Vec<Value>) =
            items.into_iter().map(|(k, v)| (bytes(k), bytes(v))).unzip();
        self.invoke(
            "kv.mput",
            vec![Value::List(keys), Value::List(values)],
            Levels::Both,
        )
        .await
    }

    /// `kv.transfer(from, to, amount)`: move `amount` between two counters;
    /// `[from's new value, to's new value]`, or an abort (nothing changed)
    /// if `from` holds less.
    pub async fn kv_transfer(
        &self,
        from: impl AsRef<[u8]>,
        to: impl AsRef<[u8]>,
        amount: i64,
    ) -> Result<Correctable, Error> {
        self.invoke(
            "kv.transfer",
            vec![bytes(from), bytes(to), Value::Int(amount)],
            Levels::Both,
        )
        .await
    }

    /// `kv.txn`: `txn`'s compares, then its success or failure ops,
    /// atomically at `levels` ([`TxnAnswer::from_outcome`](crate::TxnAnswer::from_outcome)
    /// reads the answer).
    pub async fn kv_txn(&self, txn: &crate::Txn, levels: Levels) -> Result<Correctable, Error> {
        self.invoke("kv.txn", txn.args(), levels).await
    }

    /// The status of the replica calls currently go to.
    pub async fn status(&self) -> Result<pb::StatusReply, Error> {
        let reply = self
            .with_failover(|channel| async move {
                pb::creek_client::CreekClient::new(channel)
                    .status(pb::StatusRequest {})
                    .await
            })
            .await?;
        Ok(reply.into_inner())
    }

    /// Run `call` on the current replica; while it fails as unavailable,
    /// move to the next replica and run it again, trying each at most once.
    async fn with_failover<T, Fut>(&self, mut call: impl FnMut(Channel) -> Fut) -> Result<T, Error>
    where
        Fut: Future<Output = Result<T, Status>>,
    {
        self.with_failover_at(|conn| call(conn.channel.clone()))
            .await
    }

    /// [`with_failover`](Client::with_failover), with the whole connection
    /// to the replica.
    async fn with_failover_at<T, Fut>(
        &self,
        mut call: impl FnMut(&Connected) -> Fut,
    ) -> Result<T, Error>
    where
        Fut: Future<Output = Result<T, Status>>,
    {
        let mut conn = lock(&self.inner.current).clone();
        let mut attempts = 0;
        loop {
            let error = match call(&conn).await {
                Ok(t) => return Ok(t),
                Err(status) => Error::from(status),
            };
            attempts += 1;
            if !error.is_unavailable() || attempts >= self.inner.replicas.len() {
                return Err(error);
            }
            conn = self.fail_over(conn.index).await?;
        }
    }

    /// The changes to keys under `prefix`, as a stream: committed changes
    /// in the committed order, each exactly once, from `options.from` (or
    /// from now); with `options.tentative`, tentative changes too, marked.
    /// When the replica fails the stream resumes at another one from the
    /// position after the last committed change it delivered. It ends with
    /// an error only: [`Error::Compacted`] when no replica still holds the
    /// changes from the position it needs, or when no replica could be
    /// reached for 30 s.
    pub fn watch(
        &self,
        prefix: impl AsRef<[u8]>,
        options: crate::WatchOptions,
    ) -> impl futures_util::stream::Stream<Item = Result<crate::WatchEvent, Error>> + Send + 'static
    {
        crate::watch::Watching::new(
            self.clone(),
            Bytes::copy_from_slice(prefix.as_ref()),
            options,
        )
        .into_stream()
    }

    pub(crate) fn current_index(&self) -> usize {
        lock(&self.inner.current).index
    }

    pub(crate) fn current_channel(&self) -> Channel {
        lock(&self.inner.current).channel.clone()
    }

    pub(crate) fn replica_count(&self) -> usize {
        self.inner.replicas.len()
    }

    /// Move on from replica `failed` (see [`Client::fail_over`]).
    pub(crate) async fn fail_over_from(&self, failed: usize) -> Result<(), Error> {
        self.fail_over(failed).await.map(|_| ())
    }

    /// Connect natively to the current replica again if its native
    /// connection closed (the replica restarted, say): once, so a replica
    /// that no longer answers natively is called over gRPC until the next
    /// failover.
    async fn renew_native(&self) {
        let current = lock(&self.inner.current).clone();
        if !current.native.as_ref().is_some_and(|n| n.is_closed()) {
            return;
        }
        let _one_at_a_time = self.inner.failover.lock().await;
        let native = self.inner.replicas[current.index].connect_native().await;
        let mut now = lock(&self.inner.current);
        // Unless a failover moved on meanwhile.
        if now.index == current.index && now.native.as_ref().is_some_and(|n| n.is_closed()) {
            now.native = native;
        }
    }

    /// Leave replica `failed` for the next one that answers (unless another
    /// call already did).
    async fn fail_over(&self, failed: usize) -> Result<Connected, Error> {
        let _one_at_a_time = self.inner.failover.lock().await;
        {
            let current = lock(&self.inner.current);
            if current.index != failed {
                return Ok(current.clone());
            }
        }
        let next = connect_from(&self.inner.replicas, failed + 1).await?;
        *lock(&self.inner.current) = next.clone();
        Ok(next)
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("client_id", &self.inner.client_id)
            .field("replica", &self.replica_addr())
            .finish_non_exhaustive()
    }
}

/// Run `f`, failing with [`Error::DeadlineExceeded`] if `deadline` passes.
async fn within<T>(
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    f: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match deadline {
        None => f.await,
        Some(d) => tokio::time::timeout_at(tokio::time::Instant::from_std(d), f)
            .await
            .unwrap_or_else(|_| {
                Err(Error::DeadlineExceeded(format!(
                    "no replica accepted the call within {:?}",
                    timeout.unwrap_or_default()
                )))
            }),
    }
}

fn bytes(b: impl AsRef<[u8]>) -> Value {
    Value::Bytes(Bytes::copy_from_slice(b.as_ref()))
}

/// A random nonzero id. `RandomState` is seeded from the OS's randomness
/// once per process; the time and process id separate clients further.
fn random_client_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish().max(1)
}
