//! The persister: one OS thread owning the [`Store`], writing every write
//! queued so far in one fsynced transaction (group commit), and between
//! those the background checkpoint a chunk at a time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use creek_node::{CheckpointJob, Write};

use crate::{CheckpointWriter, Piece, Store, StoreError, LINGER_US};

/// The most bytes per second a background checkpoint is written at (in
/// pieces of [`crate::CHECKPOINT_CHUNK_BYTES`]): a state of 1 GiB takes 8 s
/// at least. The rest of the disk's bandwidth stays with the writes that
/// clients wait for (and, on a machine shared by several replicas, with
/// theirs).
pub const CHECKPOINT_BYTES_PER_SEC: u64 = 128 << 20;

/// The least bytes per second a background checkpoint is written at, however
/// slow the disk: a state of 1 GiB takes 128 s at most, so checkpoints (and
/// with them log compaction) keep going on a contended disk.
pub const CHECKPOINT_BYTES_PER_SEC_MIN: u64 = 8 << 20;

/// A group of writes whose transaction took longer than this found the disk
/// contended: the background checkpoint halves its pace (down to
/// [`CHECKPOINT_BYTES_PER_SEC_MIN`]), and each quicker group speeds it up
/// again by an eighth (up to [`CHECKPOINT_BYTES_PER_SEC`]). On a disk shared
/// with other writers (other replicas, other databases) a checkpoint then
/// yields to the writes clients wait for instead of queueing ahead of them.
pub const SLOW_GROUP: std::time::Duration = std::time::Duration::from_millis(20);

/// The time between two checkpoint chunks, adapted to how quickly the
/// replica's own writes complete (see [`SLOW_GROUP`]).
#[derive(Clone, Copy, Debug)]
struct Pace {
    now: std::time::Duration,
    fastest: std::time::Duration,
    slowest: std::time::Duration,
}

impl Pace {
    fn new(fastest: std::time::Duration, chunk_bytes: usize) -> Self {
        let slowest = std::time::Duration::from_secs_f64(
            chunk_bytes as f64 / CHECKPOINT_BYTES_PER_SEC_MIN as f64,
        )
        .max(fastest);
        Pace {
            now: fastest,
            fastest,
            slowest,
        }
    }

    /// A group of writes took `took`.
    fn on_group(&mut self, took: std::time::Duration) {
        self.now = if took > SLOW_GROUP {
            (self.now * 2).min(self.slowest)
        } else {
            (self.now * 7 / 8).max(self.fastest)
        };
    }
}

/// How long the persister waits to gather more when everything queued is
/// payloads alone (weak ops): [`LINGER_US`].
pub const LINGER: std::time::Duration = std::time::Duration::from_micros(LINGER_US);

/// How the persister reports: `Ok(seq)` when every write up to `seq` is
/// durable, `Err` when a write failed (nothing of that group is durable, and
/// nothing after it will be). Called on the persister's thread.
pub type OnDurable = Box<dyn Fn(Result<u64, StoreError>) + Send>;

/// Makes a node's [`Write`]s durable on its own thread; see the crate docs
/// for the contract.
///
/// Every write queued while a transaction is being written goes into the
/// next one: under load one fsync covers many writes (group commit).
/// Dropping a persister without [`Persister::close`] is a crash: writes not
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
    /// The last background checkpoint made durable (its job id).
    checkpoint_durable: AtomicU64,
    /// The store's count of write-ahead log folds.
    folds: Arc<AtomicU64>,
}

#[derive(Default)]
struct Queue {
    /// The last write submitted.
    submitted: u64,
    batches: Vec<Write>,
    /// A background checkpoint to start (replacing the one being written).
    checkpoint: Option<CheckpointJob>,
    stop: Option<Stop>,
    /// The first write failure; every later batch is refused with it.
    failed: Option<String>,
    /// The thread waits for more payloads before writing ([`LINGER`]): a
    /// write that is not urgent does not wake it.
    lingering: bool,
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

    /// Wait for a wake-up, or until `deadline`.
    fn wait_until<'a>(
        &self,
        q: MutexGuard<'a, Queue>,
        deadline: std::time::Instant,
    ) -> MutexGuard<'a, Queue> {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        self.wake
            .wait_timeout(q, left)
            .map(|(q, _)| q)
            .unwrap_or_else(|e| e.into_inner().0)
    }
}

impl Persister {
    /// Start the thread; it owns `store` from now on.
    pub fn start(mut store: Store, on_durable: OnDurable) -> Result<Self, StoreError> {
        // A checkpoint installed whole is paced too.
        store.pace = store.checkpoint_pace();
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            checkpoint_durable: AtomicU64::new(0),
            folds: store.folds.clone(),
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("creek-persister".to_owned())
            .spawn(move || run(&store, &thread_shared, on_durable))
            .map_err(|e| StoreError::Stopped(format!("cannot start the persister thread: {e}")))?;
        Ok(Persister {
            shared,
            thread: Some(thread),
        })
    }

    /// Queue a write, numbered by the node (1, 2, … in order). It is
    /// durable when the callback reports `Ok(s)` with `s >= write.seq`. After
    /// a failure, writes are still queued but never written: the callback
    /// reports `Err` for them.
    pub fn submit(&self, write: Write) {
        let wake = {
            let mut q = self.shared.lock();
            // Paired with `Node::ready`, which numbers writes in order.
            assert!(
                write.seq > q.submitted,
                "write {} submitted after write {}",
                write.seq,
                q.submitted
            );
            q.submitted = write.seq;
            // While the thread lingers, payloads alone join the group
            // without waking it (a wake-up per weak op cost a context
            // switch each, for nothing).
            let wake = !q.lingering || write.is_urgent();
            q.batches.push(write);
            wake
        };
        if wake {
            self.shared.wake.notify_one();
        }
    }

    /// Write `job`'s checkpoint in the background: a chunk between groups
    /// of writes, so that no write waits behind the whole state. Submit it
    /// after the write it waits for ([`CheckpointJob::after`]). It replaces
    /// a checkpoint still being written. [`Persister::checkpoint_durable`]
    /// tells when it is done.
    pub fn submit_checkpoint(&self, job: CheckpointJob) {
        self.shared.lock().checkpoint = Some(job);
        self.shared.wake.notify_one();
    }

    /// The last background checkpoint durable and stored as the latest (its
    /// [`CheckpointJob::id`]; 0: none yet).
    pub fn checkpoint_durable(&self) -> u64 {
        self.shared.checkpoint_durable.load(Ordering::Acquire)
    }

    /// How many times the store folded its write-ahead log into the
    /// database since it was loaded.
    pub fn folds(&self) -> u64 {
        self.shared.folds.load(Ordering::Relaxed)
    }

    /// The last write submitted.
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
/// transaction, report; then one piece of the background checkpoint, if one
/// is being written; repeat.
fn run(store: &Store, shared: &Shared, on_durable: OnDurable) {
    let mut writer: Option<CheckpointWriter> = None;
    // A piece at most every `pace`: the checkpoint leaves the disk to the
    // writes that wait on it.
    let mut pace = Pace::new(store.pace, store.chunk_bytes);
    let mut next_piece_at = std::time::Instant::now();
    // The checkpoint waits for a write not yet queued: wait for writes.
    let mut waiting = false;
    // The last write reported durable: reports only move forward.
    let mut reported = 0;
    loop {
        let (group, job, failed, submitted) = {
            let mut q = shared.lock();
            loop {
                if q.stop == Some(Stop::Abandon) {
                    return;
                }
                if !q.batches.is_empty() || q.checkpoint.is_some() {
                    break;
                }
                if q.stop.is_some() {
                    // Closing, and every write is written: leave the
                    // database holding everything.
                    if q.failed.is_none() {
                        if let Err(e) = store.fold_wal() {
                            q.failed = Some(e.to_string());
                        }
                    }
                    return;
                }
                if writer.is_some() && !waiting {
                    if std::time::Instant::now() >= next_piece_at {
                        break;
                    }
                    q = shared.wait_until(q, next_piece_at);
                    continue;
                }
                q = shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            // Payloads alone: linger for more, unless something urgent or a
            // stop arrives.
            let deadline = std::time::Instant::now() + LINGER;
            q.lingering = true;
            while !q.batches.is_empty()
                && q.stop.is_none()
                && !q.batches.iter().any(Write::is_urgent)
                && std::time::Instant::now() < deadline
            {
                q = shared.wait_until(q, deadline);
            }
            q.lingering = false;
            if q.stop == Some(Stop::Abandon) {
                return;
            }
            (
                std::mem::take(&mut q.batches),
                q.checkpoint.take(),
                q.failed.clone(),
                q.submitted,
            )
        };
        if let Some(job) = job {
            writer = Some(store.start_checkpoint(job));
        }
        if let Some(why) = failed {
            writer = None;
            if !group.is_empty() {
                on_durable(Err(StoreError::Stopped(why)));
            }
            continue;
        }
        if let Some(last) = group.last().map(|w| w.seq) {
            // Paired with `submit`, which takes writes in order: the group
            // is in order, and its last write the newest submitted yet.
            debug_assert!(
                group.windows(2).all(|w| w[0].seq < w[1].seq),
                "a group of writes out of order"
            );
            assert!(
                last <= submitted,
                "write {last} taken, last submitted {submitted}"
            );
            let started = std::time::Instant::now();
            let written = store.write(&group);
            if writer.is_some() {
                pace.on_group(started.elapsed());
            }
            if written.is_ok() && writer.is_none() && group.iter().any(|w| w.checkpoint.is_some()) {
                // An installed checkpoint replaced the latest: remove the
                // older one's chunks now, not at the next checkpoint.
                writer = Some(store.start_cleaning());
            }
            match written {
                Ok(()) => {
                    // Paired with the callback's readers (the node's
                    // `on_durable`), which take a report as covering every
                    // earlier write: reports move forward, never past
                    // what was written.
                    assert!(
                        last > reported,
                        "write {last} reported durable after write {reported}"
                    );
                    reported = last;
                    on_durable(Ok(last));
                }
                Err(e) => {
                    shared.lock().failed = Some(e.to_string());
                    on_durable(Err(e));
                    continue;
                }
            }
        }
        let Some(w) = writer.as_mut() else {
            continue;
        };
        if std::time::Instant::now() < next_piece_at {
            continue;
        }
        next_piece_at = std::time::Instant::now() + pace.now;
        waiting = false;
        match store.write_checkpoint_piece(w) {
            Ok(Piece::Written | Piece::Superseded | Piece::Removed) => {}
            Ok(Piece::Waiting) => waiting = true,
            Ok(Piece::Done) => {
                shared
                    .checkpoint_durable
                    .fetch_max(w.job_id(), Ordering::AcqRel);
            }
            Ok(Piece::Finished) => writer = None,
            Err(e) => {
                writer = None;
                shared.lock().failed = Some(e.to_string());
                on_durable(Err(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkpoint_pace_halves_on_slow_groups_and_recovers_on_quick_ones() {
        let fastest = std::time::Duration::from_millis(8);
        let mut pace = Pace::new(fastest, 1 << 20);
        assert_eq!(pace.slowest, std::time::Duration::from_millis(125));
        for want in [16, 32, 64, 125, 125] {
            pace.on_group(SLOW_GROUP * 2);
            assert_eq!(pace.now, std::time::Duration::from_millis(want));
        }
        pace.on_group(SLOW_GROUP);
        assert!(pace.now < std::time::Duration::from_millis(125));
        for _ in 0..40 {
            pace.on_group(std::time::Duration::from_millis(1));
        }
        assert_eq!(pace.now, fastest);
    }
}
