//! Leases (docs/api.md, "Leases"): grant, keep alive, revoke; keys put
//! with a lease are deleted when it expires; and the lock and
//! leader-election recipes built on them, as etcd's `concurrency` package
//! builds its mutex and election.
//!
//! A holder knows its lease is live until the time it *sent* its last
//! keep-alive that committed, plus the TTL: the cluster set the deadline
//! from that op's time, which is no earlier. [`KeepAlive`] renews a lease
//! every third of its TTL and says until when it is known to be live.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_types::value::Value;

use crate::{Client, Error, Levels, Txn, TxnAnswer, TxnOp};

/// A lease's state, as `lease.ttl` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseTtl {
    /// The TTL it was granted, in seconds.
    pub granted_s: i64,
    /// Seconds until it expires, rounded up.
    pub remaining_s: i64,
    /// The keys attached to it (at most 1,000).
    pub keys: Vec<Bytes>,
}

fn int(procedure: &str, v: Value) -> Result<i64, Error> {
    match v {
        Value::Int(n) => Ok(n),
        other => Err(Error::Protocol(format!(
            "{procedure} answered {other}, not an int"
        ))),
    }
}

/// The error of a lease call that aborted: [`Error::LeaseNotFound`] for a
/// lease that expired, was revoked or never existed.
fn aborted(procedure: &str, abort: String) -> Error {
    if abort.starts_with("lease ") && abort.contains(" not found") {
        Error::LeaseNotFound(abort)
    } else {
        Error::Refused(format!("{procedure}: {abort}"))
    }
}

impl Client {
    /// Run a lease call at `levels` and wait for its closing view.
    async fn lease_call(
        &self,
        procedure: &str,
        args: Vec<Value>,
        levels: Levels,
    ) -> Result<Value, Error> {
        let op = self.invoke(procedure, args, levels).await?;
        op.final_view()
            .await?
            .outcome
            .map_err(|abort| aborted(procedure, abort))
    }

    /// `lease.grant(ttl)`: a new lease of `ttl_s` seconds (1 to a year);
    /// its id.
    pub async fn lease_grant(&self, ttl_s: i64) -> Result<i64, Error> {
        let v = self
            .lease_call("lease.grant", vec![Value::Int(ttl_s)], Levels::Strong)
            .await?;
        int("lease.grant", v)
    }

    /// `lease.keep_alive(id)` once: the lease's TTL, renewed from now.
    pub async fn lease_keep_alive_once(&self, id: i64) -> Result<i64, Error> {
        let v = self
            .lease_call("lease.keep_alive", vec![Value::Int(id)], Levels::Strong)
            .await?;
        int("lease.keep_alive", v)
    }

    /// `lease.revoke(id)`: the lease ends now, its keys deleted; how many.
    pub async fn lease_revoke(&self, id: i64) -> Result<i64, Error> {
        let v = self
            .lease_call("lease.revoke", vec![Value::Int(id)], Levels::Strong)
            .await?;
        int("lease.revoke", v)
    }

    /// `lease.ttl(id)`: its granted TTL, the seconds left and its keys, in
    /// the committed state.
    pub async fn lease_ttl(&self, id: i64) -> Result<LeaseTtl, Error> {
        let v = self
            .lease_call("lease.ttl", vec![Value::Int(id)], Levels::Strong)
            .await?;
        let shape = |v: &Value| Error::Protocol(format!("lease.ttl answered {v}"));
        match &v {
            Value::List(items) => match items.as_slice() {
                [Value::Int(granted_s), Value::Int(remaining_s), Value::List(keys)] => {
                    Ok(LeaseTtl {
                        granted_s: *granted_s,
                        remaining_s: *remaining_s,
                        keys: keys.iter().filter_map(Value::as_bytes).cloned().collect(),
                    })
                }
                _ => Err(shape(&v)),
            },
            _ => Err(shape(&v)),
        }
    }

    /// `lease.list()`: every live lease's id, in the committed state.
    pub async fn lease_list(&self) -> Result<Vec<i64>, Error> {
        match self
            .lease_call("lease.list", Vec::new(), Levels::Strong)
            .await?
        {
            Value::List(ids) => ids.into_iter().map(|v| int("lease.list", v)).collect(),
            other => Err(Error::Protocol(format!("lease.list answered {other}"))),
        }
    }

    /// `kv.put(key, value, lease)`: write `key` attached to `lease`.
    pub async fn kv_put_with_lease(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        lease: i64,
        levels: Levels,
    ) -> Result<crate::Correctable, Error> {
        let args = vec![
            Value::Bytes(Bytes::copy_from_slice(key.as_ref())),
            Value::Bytes(Bytes::copy_from_slice(value.as_ref())),
            Value::Int(lease),
        ];
        self.invoke("kv.put", args, levels).await
    }

    /// Keep lease `id` of `ttl` alive from a background task until the
    /// returned [`KeepAlive`] is dropped or the lease is lost.
    pub fn lease_keep_alive(&self, id: i64, ttl: Duration) -> KeepAlive {
        KeepAlive::start(self.clone(), id, ttl, Instant::now())
    }
}

#[derive(Debug)]
struct Kept {
    /// Until when the lease is known to be live.
    live_until: Instant,
    /// Why the lease was lost, once it was.
    lost: Option<String>,
}

/// A lease kept alive by a background task (one `lease.keep_alive` every
/// third of the TTL, retried sooner on failure). Dropping it stops the
/// renewals; the lease then expires a TTL after the last one.
#[derive(Debug)]
pub struct KeepAlive {
    id: i64,
    state: Arc<Mutex<Kept>>,
    task: tokio::task::JoinHandle<()>,
}

impl KeepAlive {
    /// Renew `id` from `client`; `since`: when the call that last set its
    /// deadline was sent (a grant's, or a keep-alive's).
    fn start(client: Client, id: i64, ttl: Duration, since: Instant) -> KeepAlive {
        let state = Arc::new(Mutex::new(Kept {
            live_until: since + ttl,
            lost: None,
        }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let every = (ttl / 3).max(Duration::from_millis(100));
            let mut wait = every;
            loop {
                tokio::time::sleep(wait).await;
                let sent = Instant::now();
                match client.lease_keep_alive_once(id).await {
                    Ok(_) => {
                        let mut s = lock(&shared);
                        s.live_until = s.live_until.max(sent + ttl);
                        wait = every;
                    }
                    Err(Error::LeaseNotFound(why)) => {
                        lock(&shared).lost = Some(why);
                        return;
                    }
                    Err(e) => {
                        let mut s = lock(&shared);
                        if Instant::now() >= s.live_until {
                            s.lost = Some(format!(
                                "lease {id} could not be renewed before its TTL ran out: {e}"
                            ));
                            return;
                        }
                        // Try again soon: a failover takes about a second.
                        wait = (every / 4).max(Duration::from_millis(50));
                    }
                }
            }
        });
        KeepAlive { id, state, task }
    }

    /// The lease's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// Until when the lease is known to be live (the last committed
    /// renewal's send time plus the TTL).
    pub fn live_until(&self) -> Instant {
        lock(&self.state).live_until
    }

    /// Whether the lease is known to be live now.
    pub fn is_live(&self) -> bool {
        let s = lock(&self.state);
        s.lost.is_none() && Instant::now() < s.live_until
    }

    /// Why the lease was lost, once it was (expired, revoked, or not
    /// renewed in time).
    pub fn lost(&self) -> Option<String> {
        let s = lock(&self.state);
        if let Some(why) = &s.lost {
            return Some(why.clone());
        }
        (Instant::now() >= s.live_until)
            .then(|| format!("lease {} was not renewed within its TTL", self.id))
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(m: &Mutex<Kept>) -> std::sync::MutexGuard<'_, Kept> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How often a waiting [`Lock::acquire`] or [`Election::campaign`] tries
/// again.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// A lock held through a lease: the key `lock/<name>` exists, attached to
/// the holder's lease, while the holder keeps the lease alive. Only one
/// holder at a time: taking it is a `kv.txn` that puts the key only if it
/// is absent. The lock is released by [`Lock::release`], or by the lease's
/// expiry when the holder stops renewing (it crashed or was cut off).
///
/// Waiters retry every 200 ms, in no particular order (etcd's mutex
/// queues waiters by revision; Creek's keys carry no revisions yet).
#[derive(Debug)]
pub struct Lock {
    client: Client,
    key: Bytes,
    keep: KeepAlive,
}

impl Lock {
    /// The key a lock named `name` is held under.
    pub fn key_of(name: &str) -> Bytes {
        Bytes::from(format!("lock/{name}"))
    }

    /// Wait until the lock `name` is ours, holding it with a lease of
    /// `ttl`; give up with [`Error::DeadlineExceeded`] after `wait`.
    pub async fn acquire(
        client: &Client,
        name: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lock, Error> {
        let (key, keep) = hold(client, Lock::key_of(name), Bytes::new(), ttl, wait, "lock").await?;
        Ok(Lock {
            client: client.clone(),
            key,
            keep,
        })
    }

    /// Whether the lock is known to be still ours (its lease is live).
    pub fn is_held(&self) -> bool {
        self.keep.is_live()
    }

    /// Until when the lock is known to be ours.
    pub fn held_until(&self) -> Instant {
        self.keep.live_until()
    }

    /// Why the lock was lost, once it was.
    pub fn lost(&self) -> Option<String> {
        self.keep.lost()
    }

    /// The key it is held under.
    pub fn key(&self) -> &Bytes {
        &self.key
    }

    /// Release the lock: revoke its lease, deleting its key.
    pub async fn release(self) -> Result<(), Error> {
        end(&self.client, self.keep).await
    }
}

/// Stop renewing `keep`'s lease and revoke it (its keys go with it); a
/// lease already gone is no error.
async fn end(client: &Client, keep: KeepAlive) -> Result<(), Error> {
    let id = keep.id();
    drop(keep);
    match client.lease_revoke(id).await {
        Ok(_) | Err(Error::LeaseNotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Grant a lease of `ttl` and put `key` = `value` with it once `key` is
/// absent, retrying until `wait` passed.
async fn hold(
    client: &Client,
    key: Bytes,
    value: Bytes,
    ttl: Duration,
    wait: Duration,
    what: &str,
) -> Result<(Bytes, KeepAlive), Error> {
    let ttl_s = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    let ttl = Duration::from_secs(ttl_s as u64);
    let started = Instant::now();
    let sent = Instant::now();
    let id = client.lease_grant(ttl_s).await?;
    let keep = KeepAlive::start(client.clone(), id, ttl, sent);
    let txn = Txn::new()
        .when_absent(key.clone())
        .then(TxnOp::put_with_lease(key.clone(), value, id));
    loop {
        let op = client.kv_txn(&txn, Levels::Strong).await?;
        let answer = TxnAnswer::from_outcome(&op.final_view().await?.outcome)
            .map_err(|abort| aborted("kv.txn", abort))?;
        if answer.succeeded {
            return Ok((key, keep));
        }
        if let Some(why) = keep.lost() {
            return Err(Error::LeaseNotFound(why));
        }
        if started.elapsed() >= wait {
            drop(keep);
            let _ = client.lease_revoke(id).await;
            return Err(Error::DeadlineExceeded(format!(
                "{what} {} is held by another client after {wait:?}",
                String::from_utf8_lossy(&key)
            )));
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

/// Leader election through a lease, as etcd's `concurrency.Election`: the
/// leader holds the key `election/<name>` (its value: what the leader
/// proclaims, e.g. its address) attached to its lease.
#[derive(Debug)]
pub struct Election {
    client: Client,
    key: Bytes,
}

/// A won election: leadership lasts while its lease is kept alive.
#[derive(Debug)]
pub struct Leadership {
    client: Client,
    key: Bytes,
    keep: KeepAlive,
}

impl Election {
    /// The election `name`.
    pub fn new(client: &Client, name: &str) -> Election {
        Election {
            client: client.clone(),
            key: Bytes::from(format!("election/{name}")),
        }
    }

    /// Wait until this client leads, announcing `value`, with a lease of
    /// `ttl`; give up after `wait`.
    pub async fn campaign(
        &self,
        value: impl AsRef<[u8]>,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Leadership, Error> {
        let value = Bytes::copy_from_slice(value.as_ref());
        let (key, keep) =
            hold(&self.client, self.key.clone(), value, ttl, wait, "election").await?;
        Ok(Leadership {
            client: self.client.clone(),
            key,
            keep,
        })
    }

    /// What the current leader announced, or `None` without a leader (a
    /// strong read).
    pub async fn leader(&self) -> Result<Option<Bytes>, Error> {
        let op = self
            .client
            .invoke(
                "kv.get",
                vec![Value::Bytes(self.key.clone())],
                Levels::Strong,
            )
            .await?;
        match op.final_view().await?.outcome {
            Ok(Value::Bytes(v)) => Ok(Some(v)),
            Ok(_) => Ok(None),
            Err(abort) => Err(Error::Refused(abort)),
        }
    }
}

impl Leadership {
    /// Whether leadership is known to be still ours (its lease is live).
    pub fn is_leader(&self) -> bool {
        self.keep.is_live()
    }

    /// Why leadership was lost, once it was.
    pub fn lost(&self) -> Option<String> {
        self.keep.lost()
    }

    /// Announce a new value, if this client still leads: whether it did.
    /// The key is written only while this client's lease is live (the put
    /// with it aborts otherwise), and while the key exists: once the lease
    /// is gone, so is the key, and another client may lead.
    pub async fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<bool, Error> {
        let txn = Txn::new()
            .when_present(self.key.clone())
            .then(TxnOp::put_with_lease(
                self.key.clone(),
                value,
                self.keep.id(),
            ));
        let op = self.client.kv_txn(&txn, Levels::Strong).await?;
        match TxnAnswer::from_outcome(&op.final_view().await?.outcome) {
            Ok(answer) => Ok(answer.succeeded),
            Err(abort) => match aborted("kv.txn", abort) {
                Error::LeaseNotFound(_) => Ok(false),
                e => Err(e),
            },
        }
    }

    /// Step down: revoke the lease, deleting the key.
    pub async fn resign(self) -> Result<(), Error> {
        end(&self.client, self.keep).await
    }
}
