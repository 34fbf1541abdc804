//! How checkpoints are stored: in chunks of about
//! [`CHECKPOINT_CHUNK_BYTES`] under `(generation, n)` in the
//! `checkpoint_chunks` table, the latest named by a
//! [`CheckpointRef`](crate::codec::CheckpointRef) in `raft_meta`.
//!
//! Two ways to write one:
//!
//! * **whole**, inside a group's transaction ([`Write::checkpoint`], a
//!   checkpoint installed from a peer): with the log writes that restart the
//!   log at it, so a restart finds both or neither;
//! * **in the background** ([`CheckpointJob`], the periodic checkpoint): one
//!   chunk per transaction ([`Store::write_checkpoint_piece`]), between the
//!   groups, so that a log write waits behind at most one chunk, never
//!   behind a whole state. The last transaction makes it the latest. A
//!   crash before that leaves chunks no reference names, removed at the next
//!   open.
//!
//! Generations are handed out in the order checkpoints are started, and a
//! reference only ever moves to a higher one: a background checkpoint
//! overtaken by a newer one (installed whole while it was being written)
//! is dropped, never made the latest.
//!
//! [`Write::checkpoint`]: creek_node::Write::checkpoint

use creek_core::Checkpoint;
use creek_node::CheckpointJob;
use creek_wire::checkpoint::Encoder;
use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};

use crate::codec::{self, CheckpointRef};
use crate::{corrupt, db_err, Store, StoreError, CHECKPOINT, LATEST, META};

/// About this many bytes of checkpoint per stored chunk, by default
/// ([`Store::with_checkpoint_chunk_bytes`]) (a chunk holds whole
/// state entries, so one with a larger value is larger). A background
/// checkpoint writes one chunk per transaction: a log write queued behind it
/// waits for at most one.
pub const CHECKPOINT_CHUNK_BYTES: usize = 1 << 20;

pub(crate) const CHUNKS: TableDefinition<(u64, u32), &[u8]> =
    TableDefinition::new("checkpoint_chunks");

/// The `raft_meta` key of the latest checkpoint's reference.
pub(crate) const CHECKPOINT_REF: &str = "checkpoint";

/// A checkpoint being written in the background ([`Store::start_checkpoint`]).
#[derive(Debug)]
pub struct CheckpointWriter {
    job: CheckpointJob,
    generation: u64,
    encoder: Encoder,
    chunks: u32,
    len: u64,
    crc: crc32fast::Hasher,
    /// Its part is over (it is the latest, or was superseded): what is
    /// left is removing the chunks no reference names.
    cleaning: bool,
}

impl CheckpointWriter {
    /// Its checkpoint is not yet the latest (nor superseded): a crash now
    /// cuts it short.
    pub fn is_writing(&self) -> bool {
        !self.cleaning
    }

    /// The job it writes.
    pub fn job_id(&self) -> u64 {
        self.job.id
    }
}

/// What one [`Store::write_checkpoint_piece`] did. Call it again until
/// [`Piece::Finished`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// A chunk is durable; more follow.
    Written,
    /// Everything is written, but the write the job waits for
    /// ([`CheckpointJob::after`]) is not: call again after it.
    Waiting,
    /// The checkpoint is durable and the latest: report the job's id. The
    /// chunks of older ones are removed by the next calls.
    Done,
    /// A newer checkpoint was stored meanwhile: this one is dropped (its
    /// chunks are removed by the next calls).
    Superseded,
    /// Chunks no reference names were removed; maybe more are left.
    Removed,
    /// Nothing is left to do.
    Finished,
}

/// The most chunks one transaction removes: deleting a whole state at once
/// would hold up the writes behind it as long as writing it would.
pub const REMOVED_PER_TRANSACTION: usize = 16;

/// Chunks and the reference of one checkpoint, as they are appended.
struct Appender {
    generation: u64,
    chunks: u32,
    len: u64,
    crc: crc32fast::Hasher,
}

impl Appender {
    fn append(
        &mut self,
        table: &mut Table<(u64, u32), &[u8]>,
        chunk: &[u8],
    ) -> Result<(), StoreError> {
        table
            .insert((self.generation, self.chunks), chunk)
            .map_err(db_err)?;
        self.chunks += 1;
        self.len += chunk.len() as u64;
        self.crc.update(chunk);
        Ok(())
    }

    /// Make it the latest: the reference moves, older generations go.
    fn finish(&self, t: &mut Tables<'_>) -> Result<(), StoreError> {
        let reference = CheckpointRef {
            generation: self.generation,
            chunks: self.chunks,
            len: self.len,
            crc32: self.crc.clone().finalize(),
        };
        t.meta
            .insert(
                CHECKPOINT_REF,
                codec::encode_checkpoint_ref(&reference).as_slice(),
            )
            .map_err(db_err)?;
        // A checkpoint of the format before chunks.
        t.old.remove(LATEST).map_err(db_err)?;
        Ok(())
    }
}

/// A checkpoint whose chunks are stored, not yet named the latest.
pub(crate) struct Named(Appender);

/// The tables a checkpoint is written to, open in one transaction.
pub(crate) struct Tables<'txn> {
    pub(crate) meta: Table<'txn, &'static str, &'static [u8]>,
    pub(crate) chunks: Table<'txn, (u64, u32), &'static [u8]>,
    pub(crate) old: Table<'txn, &'static str, &'static [u8]>,
}

impl<'txn> Tables<'txn> {
    pub(crate) fn open(txn: &'txn WriteTransaction) -> Result<Self, StoreError> {
        Ok(Tables {
            meta: txn.open_table(META).map_err(db_err)?,
            chunks: txn.open_table(CHUNKS).map_err(db_err)?,
            old: txn.open_table(CHECKPOINT).map_err(db_err)?,
        })
    }

    fn latest(&self) -> Result<Option<CheckpointRef>, StoreError> {
        let r = self.meta.get(CHECKPOINT_REF).map_err(db_err)?;
        r.map(|v| {
            codec::decode_checkpoint_ref(v.value())
                .map_err(|e| corrupt(format!("the latest checkpoint's reference: {e}")))
        })
        .transpose()
    }
}

impl Store {
    /// Write the chunks of `c` under a new generation, one transaction each
    /// (so that no single commit has to flush a whole state); it becomes the
    /// latest only with [`Store::name_checkpoint`], in the transaction that
    /// must make it so atomically with other writes. Until then nothing
    /// names it: a crash leaves chunks the next open removes.
    pub(crate) fn put_chunks(&self, c: &Checkpoint) -> Result<Named, StoreError> {
        let mut a = Appender {
            generation: self.next_generation(),
            chunks: 0,
            len: 0,
            crc: crc32fast::Hasher::new(),
        };
        let (mut encoder, mut buf) = (Encoder::default(), Vec::new());
        loop {
            let more = encoder.next_piece(c, &mut buf, self.chunk_bytes);
            if buf.len() >= self.chunk_bytes || (!more && !buf.is_empty()) {
                let started = std::time::Instant::now();
                let mut txn = self.db.begin_write().map_err(db_err)?;
                txn.set_durability(redb::Durability::Immediate)
                    .map_err(db_err)?;
                {
                    let mut chunks = txn.open_table(CHUNKS).map_err(db_err)?;
                    a.append(&mut chunks, &buf)?;
                }
                txn.commit().map_err(db_err)?;
                buf.clear();
                if let Some(rest) = self.pace.checked_sub(started.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
            if !more {
                return Ok(Named(a));
            }
        }
    }

    /// Make the checkpoint of [`Store::put_chunks`] the latest, in the
    /// transaction of `t`.
    pub(crate) fn name_checkpoint(
        &self,
        t: &mut Tables<'_>,
        named: &Named,
    ) -> Result<(), StoreError> {
        named.0.finish(t)
    }

    /// Begin writing `job`'s checkpoint in the background: call
    /// [`Store::write_checkpoint_piece`] until it is done.
    pub fn start_checkpoint(&self, job: CheckpointJob) -> CheckpointWriter {
        CheckpointWriter {
            job,
            generation: self.next_generation(),
            encoder: Encoder::default(),
            chunks: 0,
            len: 0,
            crc: crc32fast::Hasher::new(),
            cleaning: false,
        }
    }

    /// Only remove, a few per transaction, the chunks of checkpoints no
    /// reference names (after a checkpoint installed whole replaced the
    /// latest): call [`Store::write_checkpoint_piece`] until `Finished`.
    pub fn start_cleaning(&self) -> CheckpointWriter {
        CheckpointWriter {
            job: CheckpointJob {
                id: 0,
                after: 0,
                checkpoint: Checkpoint::default(),
            },
            generation: 0,
            encoder: Encoder::default(),
            chunks: 0,
            len: 0,
            crc: crc32fast::Hasher::new(),
            cleaning: true,
        }
    }

    /// Write the next chunk of `w` in one transaction (one fsync), or, once
    /// every chunk is, make it the latest checkpoint; then remove, a few per
    /// transaction, the chunks of checkpoints no reference names. A write
    /// failure means the disk failed, as for [`Store::write`].
    pub fn write_checkpoint_piece(&self, w: &mut CheckpointWriter) -> Result<Piece, StoreError> {
        if w.cleaning {
            return self.remove_unnamed_chunks();
        }
        let mut buf = Vec::new();
        while buf.len() < self.chunk_bytes
            && w.encoder
                .next_piece(&w.job.checkpoint, &mut buf, self.chunk_bytes)
        {}
        if buf.is_empty() && self.written() < w.job.after {
            return Ok(Piece::Waiting);
        }
        let mut txn = self.db.begin_write().map_err(db_err)?;
        txn.set_durability(redb::Durability::Immediate)
            .map_err(db_err)?;
        let mut t = Tables::open(&txn)?;
        let latest = t.latest()?.map(|r| r.generation);
        let mut a = Appender {
            generation: w.generation,
            chunks: w.chunks,
            len: w.len,
            crc: w.crc.clone(),
        };
        let piece = if latest.is_some_and(|g| g > w.generation) {
            w.cleaning = true;
            Piece::Superseded
        } else if buf.is_empty() {
            w.cleaning = true;
            a.finish(&mut t)?;
            Piece::Done
        } else {
            a.append(&mut t.chunks, &buf)?;
            Piece::Written
        };
        drop(t);
        txn.commit().map_err(db_err)?;
        (w.chunks, w.len, w.crc) = (a.chunks, a.len, a.crc);
        Ok(piece)
    }

    /// Remove up to [`REMOVED_PER_TRANSACTION`] chunks of generations other
    /// than the latest checkpoint's, in one transaction.
    fn remove_unnamed_chunks(&self) -> Result<Piece, StoreError> {
        let mut txn = self.db.begin_write().map_err(db_err)?;
        txn.set_durability(redb::Durability::Immediate)
            .map_err(db_err)?;
        let mut t = Tables::open(&txn)?;
        let keep = t.latest()?.map(|r| r.generation);
        let mut unnamed = Vec::with_capacity(REMOVED_PER_TRANSACTION);
        // Around the kept generation, never through it: reading its chunks
        // would cost as much as writing them.
        for range in unnamed_ranges(keep) {
            for row in t.chunks.range(range).map_err(db_err)? {
                if unnamed.len() == REMOVED_PER_TRANSACTION {
                    break;
                }
                unnamed.push(row.map_err(db_err)?.0.value());
            }
        }
        if unnamed.is_empty() {
            return Ok(Piece::Finished);
        }
        for key in unnamed {
            t.chunks.remove(key).map_err(db_err)?;
        }
        drop(t);
        txn.commit().map_err(db_err)?;
        Ok(Piece::Removed)
    }
}

/// The keys of chunks of generations other than `keep`.
fn unnamed_ranges(keep: Option<u64>) -> Vec<std::ops::Range<(u64, u32)>> {
    match keep {
        None => vec![(0, 0)..(u64::MAX, u32::MAX)],
        Some(g) => vec![
            (0, 0)..(g, 0),
            (g.saturating_add(1), 0)..(u64::MAX, u32::MAX),
        ],
    }
}

/// At open: the latest checkpoint (checked against its reference; a
/// checkpoint of the format before chunks is read too), with chunks no
/// reference names removed. Returns it and the next generation to hand out.
pub(crate) fn load_latest(t: &mut Tables<'_>) -> Result<(Option<Checkpoint>, u64), StoreError> {
    let reference = t.latest()?;
    for range in unnamed_ranges(reference.map(|r| r.generation)) {
        t.chunks.retain_in(range, |_, _| false).map_err(db_err)?;
    }
    let Some(r) = reference else {
        let c = match t.old.get(LATEST).map_err(db_err)? {
            Some(v) => Some(codec::decode_checkpoint(v.value())?),
            None => None,
        };
        return Ok((c, 1));
    };
    let mut bytes = Vec::with_capacity(usize::try_from(r.len).unwrap_or(0).min(1 << 32));
    for n in 0..r.chunks {
        let chunk = t
            .chunks
            .get((r.generation, n))
            .map_err(db_err)?
            .ok_or_else(|| corrupt(format!("checkpoint {}: chunk {n} missing", r.generation)))?;
        bytes.extend_from_slice(chunk.value());
    }
    if bytes.len() as u64 != r.len || crc32fast::hash(&bytes) != r.crc32 {
        return Err(corrupt(format!(
            "checkpoint {}: {} bytes do not match the {} bytes and checksum stored",
            r.generation,
            bytes.len(),
            r.len
        )));
    }
    Ok((Some(codec::decode_checkpoint(&bytes)?), r.generation + 1))
}
