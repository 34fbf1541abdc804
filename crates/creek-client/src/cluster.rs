//! A client of a sharded cluster: it learns the shard map and the
//! procedures' routes (`Procedures`: which argument's key places a call)
//! from any replica, keeps one [`Client`] per shard, and sends each call
//! to a replica of the shard owning its key (docs/shards.md). A replica
//! that finds the key is another shard's refuses with `WRONG_SHARD` and
//! applies nothing; the client then learns the map again and sends the
//! call, under the same request id, to the owner. On a cluster of one
//! group it is a [`Client`] with a status and a procedures call more at
//! connect.

use std::collections::BTreeMap;
use std::sync::Arc;

use creek_shard::{Endpoint, KeyRef, Shard, ShardId, ShardMap};
use creek_types::value::Value;
use tokio::sync::RwLock;

use crate::cache::CachedWrite;
use crate::causal::Causal;
use crate::{CallOptions, Client, ConnectOptions, Correctable, Error, Levels};

use crate::pb;

mod across;
mod moved;
mod range;

pub use range::Page;

/// How many times a call refused with `WRONG_SHARD` is sent again after
/// learning the map anew: the first time at once (the client's map was
/// old), then after a pause that doubles from [`WRONG_SHARD_PAUSE`]
/// (keys switching shards are served by neither for a moment: about
/// 0.63 s of pauses in all: 10 + 20 + … + 320 ms).
const WRONG_SHARD_RETRIES: usize = 7;

/// The first pause between two attempts of a call refused with
/// `WRONG_SHARD`.
const WRONG_SHARD_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Before attempt `attempt` (1, 2, …) of a call refused with
/// `WRONG_SHARD`: nothing the first time, then a doubling pause.
async fn wrong_shard_pause(attempt: usize) {
    if attempt > 1 {
        let doublings = u32::try_from(attempt - 2).unwrap_or(u32::MAX).min(8);
        tokio::time::sleep(WRONG_SHARD_PAUSE * 2u32.pow(doublings)).await;
    }
}

/// A client of every shard of a cluster. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    options: ConnectOptions,
    /// One read time, dependency time and client cache for every shard's
    /// client: causal across shards (docs/snapshot-reads.md).
    causal: Arc<Causal>,
    /// Where each procedure's calls go, as the replicas publish it
    /// (`Procedures`: `route`, `route_arg`, `declared_keys`), learnt again
    /// for a name not listed (a user procedure registered since) and after
    /// a `WRONG_SHARD` refusal; a name still not listed goes to every
    /// shard.
    procedures: RwLock<Arc<BTreeMap<String, Placed>>>,
    /// Shared, so a call takes the current routes with one reference
    /// count and no copy.
    routes: RwLock<Arc<Routes>>,
}

/// Where a procedure's calls go.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Placed {
    /// To the shard owning argument `n`.
    ByArg(usize),
    /// To the shard owning the keys of all these arguments.
    ByArgs(Vec<usize>),
    /// To the shard owning every key of the list in argument `n`.
    ByListArg(usize),
    /// To the shard owning the keys a user procedure declares: argument,
    /// keyspace, and whether it is a prefix.
    Declared(Vec<(usize, String, bool)>),
    /// To the shard owning the keys of a `kv.txn`'s compares and point
    /// ops (`creek_shard::txn_keys`).
    TxnKeys,
    /// To every shard in turn.
    Everywhere,
}

/// The routes `client`'s replica publishes for its procedures.
async fn placements(client: &Client) -> Result<BTreeMap<String, Placed>, Error> {
    Ok(client
        .procedures()
        .await?
        .into_iter()
        .filter_map(|p| {
            let placed = match pb::Route::try_from(p.route).ok()? {
                pb::Route::ByArg => Placed::ByArg(usize::try_from(p.route_arg).ok()?),
                pb::Route::ByArgs => Placed::ByArgs(
                    p.route_args
                        .iter()
                        .map(|n| usize::try_from(*n).ok())
                        .collect::<Option<_>>()?,
                ),
                pb::Route::ByListArg => Placed::ByListArg(usize::try_from(p.route_arg).ok()?),
                pb::Route::ByTxnKeys => Placed::TxnKeys,
                pb::Route::ByDeclaredKeys => Placed::Declared(
                    p.declared_keys
                        .iter()
                        .map(|d| Some((usize::try_from(d.arg).ok()?, d.keyspace.clone(), d.prefix)))
                        .collect::<Option<_>>()?,
                ),
                pb::Route::Everywhere | pb::Route::Unknown | pb::Route::Unspecified => {
                    Placed::Everywhere
                }
            };
            Some((p.name, placed))
        })
        .collect())
}

/// The map a client routes by and a client per shard.
struct Routes {
    map: ShardMap,
    clients: BTreeMap<ShardId, Client>,
}

impl Cluster {
    /// Connect to the cluster through the first of `addrs` that answers
    /// (any replica of any shard), learn its map, and connect to every
    /// shard.
    pub async fn connect<I, S>(addrs: I) -> Result<Cluster, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::connect_with_options(addrs, ConnectOptions::default()).await
    }

    /// [`connect`](Cluster::connect) with `options` (TLS, token), used for
    /// every shard.
    pub async fn connect_with_options<I, S>(
        addrs: I,
        options: ConnectOptions,
    ) -> Result<Cluster, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let causal = Causal::new(options.cache.then_some(options.cache_bytes_max));
        let first = Client::connect_sharing(addrs, options.clone(), causal.clone()).await?;
        let routes = Routes::learn(&first, &options, &causal).await?;
        let procedures = placements(&first).await?;
        Ok(Cluster {
            inner: Arc::new(Inner {
                options,
                causal,
                procedures: RwLock::new(Arc::new(procedures)),
                routes: RwLock::new(Arc::new(routes)),
            }),
        })
    }

    /// Connect with a map the caller kept (from an earlier run, say)
    /// instead of asking for one: calls route by it until a replica
    /// refuses one as another shard's, which makes the client learn the
    /// current map.
    pub async fn connect_with_map(
        map: ShardMap,
        options: ConnectOptions,
    ) -> Result<Cluster, Error> {
        let causal = Causal::new(options.cache.then_some(options.cache_bytes_max));
        let clients = connect_shards(&map, &options, &causal, None).await?;
        let any = clients
            .values()
            .next()
            .ok_or_else(|| Error::Unavailable("the map lists no shard".into()))?;
        let procedures = placements(any).await?;
        Ok(Cluster {
            inner: Arc::new(Inner {
                options,
                causal,
                procedures: RwLock::new(Arc::new(procedures)),
                routes: RwLock::new(Arc::new(Routes { map, clients })),
            }),
        })
    }

    /// The cluster's read time, shared by every shard's client: the
    /// largest time of a snapshot view, or of a read's final view, seen
    /// through any shard (µs). Snapshot reads are sent with it, so they
    /// never show an older state than one seen on any shard. A snapshot
    /// `kv.mget` whose keys span shards sends the first key's shard's part
    /// with it, then every other shard's part at exactly the time that
    /// part answered at, and answers with one view at that time.
    pub fn read_time(&self) -> u64 {
        self.inner.causal.read_time()
    }

    /// The dependency time shared by every shard's client (see
    /// [`Client::dep_time`]): the client's writes on one shard commit
    /// after what it saw or wrote on any other.
    pub fn dep_time(&self) -> u64 {
        self.inner.causal.dep_time()
    }

    /// Raise the shared read time to `time` (see
    /// [`Client::observe_read_time`]).
    pub fn observe_read_time(&self, time: u64) {
        self.inner.causal.observe_read(time);
    }

    /// The writes the shared client cache holds (see
    /// [`Client::cache_entries`]).
    pub fn cache_entries(&self) -> Vec<CachedWrite> {
        self.inner.causal.cache_entries()
    }

    /// The bytes the shared client cache holds.
    pub fn cache_bytes(&self) -> usize {
        self.inner.causal.cache_bytes()
    }

    /// The map calls are routed by.
    pub async fn map(&self) -> ShardMap {
        self.inner.routes.read().await.map.clone()
    }

    /// The client of `shard`, if the map lists it.
    pub async fn shard(&self, shard: ShardId) -> Option<Client> {
        self.inner.routes.read().await.clients.get(&shard).cloned()
    }

    /// The client of the shard a call of `procedure` with `args` goes to;
    /// `None` when it goes to every shard.
    pub async fn route(&self, procedure: &str, args: &[Value]) -> Option<Client> {
        let placed = self.placed(procedure).await;
        let routes = self.inner.routes.read().await;
        let shard = routes.shard_of(&placed, args)?;
        routes.clients.get(&shard).cloned()
    }

    /// The client of the first shard (for calls any shard answers, like
    /// the list of procedures).
    pub async fn first(&self) -> Result<Client, Error> {
        let routes = self.inner.routes.read().await;
        routes
            .clients
            .values()
            .next()
            .cloned()
            .ok_or_else(|| Error::Unavailable("the map lists no shard".into()))
    }

    /// A client of the directory group (the replicas that hold the map
    /// and order its changes), if the map lists one.
    pub async fn directory(&self) -> Result<Option<Client>, Error> {
        let map = self.map().await;
        if map.directory.replicas.is_empty() {
            return Ok(None);
        }
        let addrs: Vec<String> = map
            .directory
            .replicas
            .values()
            .map(|e| e.client.clone())
            .collect();
        Client::connect_sharing(addrs, self.inner.options.clone(), self.inner.causal.clone())
            .await
            .map(Some)
    }

    /// Learn the map again: from the directory, which holds the newest,
    /// or, if it does not answer, from any replica that does.
    pub async fn refresh(&self) -> Result<(), Error> {
        let current = self.inner.routes.read().await.clone();
        let mut last = Error::Unavailable("no shard answered".into());
        if let Ok(Some(directory)) = self.directory().await {
            match Routes::learn(&directory, &self.inner.options, &self.inner.causal).await {
                Ok(routes) => {
                    *self.inner.routes.write().await = Arc::new(routes);
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        for client in current.clients.values() {
            match Routes::learn(client, &self.inner.options, &self.inner.causal).await {
                Ok(routes) => {
                    *self.inner.routes.write().await = Arc::new(routes);
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Invoke `procedure` at `levels` on the shard owning its key.
    pub async fn invoke(
        &self,
        procedure: impl Into<String>,
        args: Vec<Value>,
        levels: Levels,
    ) -> Result<Correctable, Error> {
        self.invoke_with(procedure, args, levels, CallOptions::default())
            .await
    }

    /// Invoke with per-call options. A call of a built-in on a key, or of
    /// a user procedure that declares its keys, goes to the shard owning
    /// its keys. A snapshot `kv.mget` whose keys span shards reads each
    /// shard's part at one time (see [`Cluster::read_time`]); at other
    /// levels it is one operation across shards. Any other call (a definition, a user or role change)
    /// goes to every shard in turn, each waiting for the previous shard's
    /// final view, and returns the last shard's Correctable (a cluster of
    /// several shards refuses calls of user procedures that declare no
    /// keys: their keys are known only as they run).
    pub async fn invoke_with(
        &self,
        procedure: impl Into<String>,
        args: Vec<Value>,
        levels: Levels,
        options: CallOptions,
    ) -> Result<Correctable, Error> {
        let procedure = procedure.into();
        if procedure == "kv.mget" && levels == Levels::Snapshot {
            if let Some(keys) = self.keys_across(&args).await {
                return self.read_across(keys, &options).await;
            }
        }
        let placed = self.placed(&procedure).await;
        let routes = self.inner.routes.read().await.clone();
        let Some(shard) = routes.shard_of(&placed, &args) else {
            return self
                .everywhere(&routes, procedure, &args, levels, &options)
                .await;
        };
        let client = routes.client(shard)?;
        let id = client.request_id(options.request_id);
        let fresh = options.request_id.is_none();
        let op = self
            .send_routed(
                &procedure, &args, levels, &options, id, fresh, placed, shard, client,
            )
            .await?;
        // Keys move only on a cluster with a directory: elsewhere the op's
        // own Correctable is the caller's (no task to follow it).
        if routes.map.directory.replicas.is_empty() {
            return Ok(op);
        }
        Ok(self.follow_moves(op, procedure, args, levels, options, id))
    }

    /// Send a routed call under request id `id` to `client` (of `shard`),
    /// and again, under the same id, to the shard the map names after a
    /// `WRONG_SHARD` refusal learnt it anew.
    #[allow(clippy::too_many_arguments)]
    async fn send_routed(
        &self,
        procedure: &str,
        args: &[Value],
        levels: Levels,
        options: &CallOptions,
        id: crate::RequestId,
        mut fresh: bool,
        mut placed: Placed,
        shard: ShardId,
        client: Client,
    ) -> Result<Correctable, Error> {
        let mut sent_by = client;
        let mut attempt = 0;
        loop {
            match sent_by
                .invoke_as(procedure.to_owned(), args, levels, options, id, fresh)
                .await
            {
                Err(Error::WrongShard { .. }) if attempt < WRONG_SHARD_RETRIES => {
                    attempt += 1;
                    wrong_shard_pause(attempt).await;
                    self.refresh().await?;
                    // A user procedure may have been registered again
                    // with other declared keys.
                    if matches!(placed, Placed::Declared(_))
                        && self.learn_procedures().await.is_ok()
                    {
                        placed = self.placed(procedure).await;
                    }
                    let routes = self.inner.routes.read().await.clone();
                    let shard = routes.shard_of(&placed, args).unwrap_or(shard);
                    sent_by = routes.client(shard)?;
                    // Another shard's client sends it: it may not
                    // acknowledge an id that is not its own.
                    fresh = false;
                }
                other => return other,
            }
        }
    }

    /// Where calls of `procedure` go: as last learnt, or, for a name not
    /// learnt yet, as a replica publishes it now.
    async fn placed(&self, procedure: &str) -> Placed {
        if let Some(placed) = self.inner.procedures.read().await.get(procedure) {
            return placed.clone();
        }
        // A user procedure registered since: best effort (a replica that
        // does not answer leaves it going to every shard, where it is
        // refused with the reason).
        let _ = self.learn_procedures().await;
        let known = self.inner.procedures.read().await;
        known.get(procedure).cloned().unwrap_or(Placed::Everywhere)
    }

    /// Learn the procedures' routes again from the first shard.
    async fn learn_procedures(&self) -> Result<(), Error> {
        let learnt = placements(&self.first().await?).await?;
        *self.inner.procedures.write().await = Arc::new(learnt);
        Ok(())
    }

    async fn everywhere(
        &self,
        routes: &Routes,
        procedure: String,
        args: &[Value],
        levels: Levels,
        options: &CallOptions,
    ) -> Result<Correctable, Error> {
        let mut clients = routes.clients.values().peekable();
        while let Some(client) = clients.next() {
            let id = client.request_id(options.request_id);
            let fresh = options.request_id.is_none();
            let c = client
                .invoke_as(procedure.clone(), args, levels, options, id, fresh)
                .await?;
            if clients.peek().is_none() {
                return Ok(c);
            }
            if levels != Levels::Weak || options.weak_final {
                c.final_view().await?;
            } else {
                c.preliminary().await?;
            }
        }
        Err(Error::Unavailable("the map lists no shard".into()))
    }
}

impl Routes {
    /// The map `client`'s replica serves under (a cluster of one group:
    /// one shard of its replicas), with a client per shard (`client`
    /// itself for its own shard, unless it is a directory replica).
    async fn learn(
        client: &Client,
        options: &ConnectOptions,
        causal: &Arc<Causal>,
    ) -> Result<Routes, Error> {
        let status = client.status().await?;
        let map = if status.shard_map.is_empty() {
            let replicas = status
                .client_addrs
                .iter()
                .filter_map(|(id, addr)| {
                    let id = u16::try_from(*id).ok()?;
                    let endpoint = Endpoint {
                        client: addr.clone(),
                        peer: String::new(),
                    };
                    Some((id, endpoint))
                })
                .collect();
            ShardMap::single(status.cluster_id, Shard { replicas })
        } else {
            creek_shard::decode(&status.shard_map)
                .map_err(|e| Error::Protocol(format!("the replica's shard map: {e}")))?
        };
        // A client of every replica of each shard; for the seed's own
        // shard, the replica the seed talks to first (the seed's client
        // knows only the addresses it was given, and could not fail over
        // to the shard's other replicas).
        let own = u16::try_from(status.shard)
            .ok()
            .map(ShardId)
            .filter(|_| !status.directory);
        let prefer = own.map(|s| (s, client.replica_addr()));
        let clients = connect_shards(&map, options, causal, prefer).await?;
        Ok(Routes { map, clients })
    }

    /// The shard a call placed so goes to; `None`: every shard.
    fn shard_of(&self, placed: &Placed, args: &[Value]) -> Option<ShardId> {
        let first = self.map.shards.keys().next().copied();
        if self.map.shards.len() == 1 {
            return first;
        }
        let key = |n: &usize| match args.get(*n) {
            Some(Value::Bytes(key)) => Some(key),
            _ => None,
        };
        let txn_keys;
        let keys: Option<Vec<&bytes::Bytes>> = match placed {
            Placed::Everywhere => return None,
            Placed::TxnKeys => match creek_shard::txn_keys(args) {
                creek_shard::TxnKeys::Keys(keys) if !keys.is_empty() => {
                    txn_keys = keys;
                    Some(txn_keys.iter().collect())
                }
                // No key, a range op or a lease: any shard runs it or
                // refuses it, saying why.
                _ => None,
            },
            Placed::Declared(declared) => return self.declared_shard(declared, args).or(first),
            Placed::ByArg(n) => key(n).map(|k| vec![k]),
            Placed::ByArgs(ns) => ns.iter().map(key).collect(),
            Placed::ByListArg(n) => match args.get(*n) {
                Some(Value::List(items)) => items.iter().map(Value::as_bytes).collect(),
                _ => None,
            },
        };
        // Malformed arguments, or keys spanning shards: the first key's
        // shard (or any) refuses the call, saying why.
        let Some(keys) = keys else {
            return first;
        };
        match self.map.route(keys.iter().map(|k| (None, &k[..]))) {
            Ok(shard) => Some(shard),
            Err(_) => keys.first().map(|k| self.map.owner(None, k)).or(first),
        }
    }

    /// The shard owning every key a user procedure's call declares
    /// (`declared`: argument, keyspace, prefix); with malformed arguments
    /// or keys spanning shards, the first declared key's shard, which
    /// runs a strong call across shards as its origin or refuses the call
    /// saying why.
    fn declared_shard(
        &self,
        declared: &[(usize, String, bool)],
        args: &[Value],
    ) -> Option<ShardId> {
        let keys: Vec<(Option<&str>, KeyRef<'_>)> = declared
            .iter()
            .map(|(at, keyspace, prefix)| {
                let arg = args.get(*at).and_then(Value::as_bytes)?;
                let key = match prefix {
                    true => KeyRef::Prefix(&arg[..]),
                    false => KeyRef::Key(&arg[..]),
                };
                Some((Some(keyspace.as_str()), key))
            })
            .collect::<Option<_>>()?;
        match self.map.route_declared(keys.iter().copied()) {
            Ok(shard) => Some(shard),
            Err(_) => keys.first().map(|(keyspace, key)| match key {
                KeyRef::Key(k) | KeyRef::Prefix(k) => self.map.owner(*keyspace, k),
            }),
        }
    }

    fn client(&self, shard: ShardId) -> Result<Client, Error> {
        self.clients.get(&shard).cloned().ok_or_else(|| {
            Error::Unavailable(format!(
                "the shard map lists no client for shard {}",
                shard.0
            ))
        })
    }
}

/// A client of every replica of each shard of `map`, all sharing `causal`;
/// for shard `prefer.0`, the replica at `prefer.1` first.
async fn connect_shards(
    map: &ShardMap,
    options: &ConnectOptions,
    causal: &Arc<Causal>,
    prefer: Option<(ShardId, String)>,
) -> Result<BTreeMap<ShardId, Client>, Error> {
    let mut clients = BTreeMap::new();
    for (id, shard) in &map.shards {
        let mut addrs: Vec<String> = shard.replicas.values().map(|e| e.client.clone()).collect();
        if let Some((_, first)) = prefer.as_ref().filter(|(s, _)| s == id) {
            addrs.retain(|a| a != first);
            addrs.insert(0, first.clone());
        }
        let client =
            Client::connect_sharing_or_later(addrs, options.clone(), causal.clone()).await?;
        clients.insert(*id, client);
    }
    Ok(clients)
}
