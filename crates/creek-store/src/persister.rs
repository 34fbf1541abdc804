//! The persister: one OS thread owning the database, writing every batch
//! queued so far in one fsynced transaction (group commit).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use creek_core::{Checkpoint, Op, OpId};
use protobuf::Message as _;
use redb::{Database, Durability, Table};

use crate::codec::encode_checkpoint;
use crate::storage::LogWrites;
use crate::{db_err, StoreError, CHECKPOINT, HARD_STATE, LATEST, LOG, META, OPS};

/// What one driver step hands to the persister.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// Consensus-log writes (`DurableCabStorage::take_writes`).
    pub log: LogWrites,
    /// Op payloads newly accepted (`Node::take_new_payloads`).
    pub ops: Vec<Arc<Op>>,
    /// A new checkpoint, replacing the stored one, and the payloads it makes
    /// unnecessary (ops it counts as committed), deleted with it. Written
    /// after this batch's log writes and ops.
    pub checkpoint: Option<(Checkpoint, Vec<OpId>)>,
}

impl Batch {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.log.is_empty() && self.ops.is_empty() && self.checkpoint.is_none()
    }

    /// Whether something waits on this batch promptly: consensus writes
    /// (a vote, an acknowledgement, a leader's appends) or a checkpoint.
    /// A batch of payloads alone only delays gossip, so the persister may
    /// linger briefly to write it with others ([`LINGER`]).
    pub fn is_urgent(&self) -> bool {
        !self.log.is_empty() || self.checkpoint.is_some()
    }
}

/// How long the persister waits to gather more when everything queued is
/// payloads alone (weak ops). One transaction per weak op would cost each
/// replica an fsync and a B-tree commit per op; gathering for up to this
/// long lets one cover many, at the price of gossiping those ops this much
/// later. Any urgent batch ends the wait at once.
pub const LINGER: std::time::Duration = std::time::Duration::from_micros(1000);

/// How the persister reports: `Ok(seq)` when every batch up to `seq` is
/// durable, `Err` when a write failed (nothing of that group is durable, and
/// nothing after it will be). Called on the persister's thread.
pub type OnDurable = Box<dyn Fn(Result<u64, StoreError>) + Send>;

/// Writes [`Batch`]es on its own thread; see the crate docs for the
/// contract.
///
/// Every batch queued while a transaction is being written goes into the
/// next one: under load one fsync covers many batches (group commit).
/// Dropping a persister without [`Persister::close`] is a crash: batches not
/// yet being written are discarded (and never reported durable).
pub struct Persister {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Persister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.shared.lock();
        f.debug_struct("Persister")
            .field("submitted", &q.submitted)
            .field("queued", &q.batches.len())
            .field("failed", &q.failed)
            .finish()
    }
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

#[derive(Default)]
struct Queue {
    /// The last seq handed out.
    submitted: u64,
    batches: Vec<(u64, Batch)>,
    stop: Option<Stop>,
    /// The first write failure; every later batch is refused with it.
    failed: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Write what is queued, then stop.
    Close,
    /// Stop now (a simulated crash).
    Abandon,
}

impl Shared {
    /// The queue, even if a thread panicked while holding it (its fields
    /// stay consistent: every update is a single assignment or push).
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Persister {
    pub(crate) fn start(db: Database, on_durable: OnDurable) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("creek-persister".to_owned())
            .spawn(move || run(db, &thread_shared, on_durable))
            .map_err(|e| StoreError::Stopped(format!("cannot start the persister thread: {e}")))?;
        Ok(Persister {
            shared,
            thread: Some(thread),
        })
    }

    /// Queue a batch; returns its sequence number (1, 2, …) at once. It is
    /// durable when the callback reports `Ok(s)` with `s >= seq`. After a
    /// failure, batches are still numbered but never written: the callback
    /// reports `Err` for them.
    pub fn submit(&self, batch: Batch) -> u64 {
        let seq = {
            let mut q = self.shared.lock();
            q.submitted += 1;
            let seq = q.submitted;
            q.batches.push((seq, batch));
            seq
        };
        self.shared.wake.notify_one();
        seq
    }

    /// The last sequence number handed out.
    pub fn submitted(&self) -> u64 {
        self.shared.lock().submitted
    }

    /// The write failure that stopped the persister, if any.
    pub fn failure(&self) -> Option<String> {
        self.shared.lock().failed.clone()
    }

    /// Write everything queued, stop the thread and close the database.
    /// `Err` if any write failed (then not everything submitted is durable).
    pub fn close(mut self) -> Result<(), StoreError> {
        self.stop(Stop::Close)?;
        match self.shared.lock().failed.clone() {
            Some(why) => Err(StoreError::Stopped(why)),
            None => Ok(()),
        }
    }

    fn stop(&mut self, how: Stop) -> Result<(), StoreError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        self.shared.lock().stop = Some(how);
        self.shared.wake.notify_one();
        thread
            .join()
            .map_err(|_| StoreError::Stopped("the persister thread panicked".to_owned()))
    }
}

impl Drop for Persister {
    fn drop(&mut self) {
        let _ = self.stop(Stop::Abandon);
    }
}

/// The persister thread: take everything queued, write it in one
/// transaction, report, repeat.
fn run(db: Database, shared: &Shared, on_durable: OnDurable) {
    loop {
        let (group, failed) = {
            let mut q = shared.lock();
            loop {
                if q.stop == Some(Stop::Abandon) {
                    return;
                }
                if !q.batches.is_empty() {
                    break;
                }
                if q.stop.is_some() {
                    return; // closing, and everything is written
                }
                q = shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            // Payloads alone: linger for more, unless something urgent or a
            // stop arrives.
            let deadline = std::time::Instant::now() + LINGER;
            while q.stop.is_none() && !q.batches.iter().any(|(_, b)| b.is_urgent()) {
                let now = std::time::Instant::now();
                if now >= deadline {
                    break;
                }
                q = shared
                    .wake
                    .wait_timeout(q, deadline - now)
                    .map(|(q, _)| q)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            if q.stop == Some(Stop::Abandon) {
                return;
            }
            (std::mem::take(&mut q.batches), q.failed.clone())
        };
        let Some(&(last, _)) = group.last() else {
            continue;
        };
        if let Some(why) = failed {
            on_durable(Err(StoreError::Stopped(why)));
            continue;
        }
        let result = if group.iter().all(|(_, b)| b.is_empty()) {
            Ok(())
        } else {
            write_group(&db, &group)
        };
        match result {
            Ok(()) => on_durable(Ok(last)),
            Err(e) => {
                shared.lock().failed = Some(e.to_string());
                on_durable(Err(e));
            }
        }
    }
}

/// One transaction for the whole group, applied in submission order.
pub(crate) fn write_group(db: &Database, group: &[(u64, Batch)]) -> Result<(), StoreError> {
    let mut txn = db.begin_write().map_err(db_err)?;
    txn.set_durability(Durability::Immediate);
    {
        let mut log = txn.open_table(LOG).map_err(db_err)?;
        let mut meta = txn.open_table(META).map_err(db_err)?;
        let mut ops = txn.open_table(OPS).map_err(db_err)?;
        let mut checkpoint = txn.open_table(CHECKPOINT).map_err(db_err)?;
        for (_, batch) in group {
            write_log(&mut log, &mut meta, &batch.log)?;
            for op in &batch.ops {
                let bytes = creek_wire::encode_op(op);
                ops.insert((op.id.origin.0, op.id.seq), bytes.as_ref())
                    .map_err(db_err)?;
            }
            if let Some((c, gone)) = &batch.checkpoint {
                checkpoint
                    .insert(LATEST, encode_checkpoint(c).as_slice())
                    .map_err(db_err)?;
                for id in gone {
                    ops.remove((id.origin.0, id.seq)).map_err(db_err)?;
                }
            }
        }
    }
    txn.commit().map_err(db_err)
}

fn write_log(
    log: &mut Table<u64, &[u8]>,
    meta: &mut Table<&str, &[u8]>,
    w: &LogWrites,
) -> Result<(), StoreError> {
    if let Some(from) = w.truncate_from() {
        log.retain_in(from.., |_, _| false).map_err(db_err)?;
    }
    for e in w.entries() {
        let bytes = e
            .write_to_bytes()
            .map_err(|err| StoreError::Corrupt(format!("encoding log entry {}: {err}", e.index)))?;
        log.insert(e.index, bytes.as_slice()).map_err(db_err)?;
    }
    if let Some(hs) = w.hard_state() {
        let bytes = hs
            .write_to_bytes()
            .map_err(|err| StoreError::Corrupt(format!("encoding hard state: {err}")))?;
        meta.insert(HARD_STATE, bytes.as_slice()).map_err(db_err)?;
    }
    Ok(())
}
