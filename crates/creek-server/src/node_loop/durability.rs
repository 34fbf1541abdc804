//! What the persister made durable, and the peer frames held until it is.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use creek_node::HoldQueue;
use tokio::sync::mpsc;

use super::messages::Event;
use crate::transport::Transport;

/// What the persister has made durable, shared with its callback, and the
/// peer messages waiting for it. The callback runs on the persister's
/// thread and sends the frames a report releases itself (the transport's
/// `send` never blocks), so a release does not wait for the node loop to
/// be free. It never blocks either: failures are recorded here and the
/// loop is nudged with `try_send` (a full channel means the loop is busy
/// and will look anyway), so closing the persister from the loop cannot
/// deadlock.
#[derive(Default)]
pub struct Durability {
    durable: std::sync::atomic::AtomicU64,
    pub(super) batches: std::sync::atomic::AtomicU64,
    failure: std::sync::Mutex<Option<String>>,
    /// When each write became durable, for the loop's stage timings.
    durable_at: std::sync::Mutex<Vec<(u64, Instant)>>,
    /// The loop wants an [`Event::Durable`] for every report at or past
    /// this write: its first pending write with consensus writes (0: none).
    pub(super) wake_at: std::sync::atomic::AtomicU64,
    held: std::sync::Mutex<HoldQueue<(creek_core::ReplicaId, Bytes)>>,
    transport: std::sync::OnceLock<Arc<Transport>>,
}

impl Durability {
    /// The persister's callback for `events`.
    pub fn callback(self: &Arc<Self>, events: mpsc::Sender<Event>) -> creek_store::OnDurable {
        let me = self.clone();
        Box::new(move |r| match r {
            Ok(seq) => {
                me.batches.fetch_add(1, Ordering::Relaxed);
                me.durable.fetch_max(seq, Ordering::AcqRel);
                me.release();
                if let Ok(mut at) = me.durable_at.lock() {
                    at.push((seq, Instant::now()));
                }
                let want = me.wake_at.load(Ordering::Acquire);
                if want != 0 && seq >= want {
                    // Full: the loop is busy and sees it in its next turn.
                    let _ = events.try_send(Event::Durable);
                }
            }
            Err(e) => {
                if let Ok(mut f) = me.failure.lock() {
                    f.get_or_insert(e.to_string());
                }
                let _ = events.try_send(Event::DiskFailure);
            }
        })
    }

    /// Where released frames go (set once, before the node loop starts).
    pub fn set_transport(&self, transport: Arc<Transport>) {
        let _ = self.transport.set(transport);
    }

    /// Hold `frames` until write `seq` is durable and every frame held
    /// before them has left (or send them now, if both hold already).
    pub(super) fn hold(&self, seq: u64, frames: Vec<(creek_core::ReplicaId, Bytes)>) {
        if let Ok(mut q) = self.held.lock() {
            q.follow(seq, frames);
        }
        self.release();
    }

    /// Send every held frame the durable batches allow, in order.
    pub(super) fn release(&self) {
        if self.failure().is_some() || self.transport.get().is_none() {
            return;
        }
        let Ok(mut q) = self.held.lock() else {
            return;
        };
        let released = q.release(self.durable());
        drop(q);
        // Everything released now goes out as one write per peer.
        let mut by_peer: BTreeMap<creek_core::ReplicaId, Vec<Bytes>> = BTreeMap::new();
        for (to, frame) in released {
            by_peer.entry(to).or_default().push(frame);
        }
        self.send_now(by_peer);
    }

    /// Send frames at once, one write per peer.
    pub(super) fn send_now(&self, by_peer: BTreeMap<creek_core::ReplicaId, Vec<Bytes>>) {
        if by_peer.is_empty() || self.failure().is_some() {
            return;
        }
        let Some(transport) = self.transport.get() else {
            return;
        };
        for (to, frames) in by_peer {
            transport.send_all(to, frames);
        }
    }

    /// The durable reports since the last call: (write, when).
    pub(super) fn take_durable_at(&self) -> Vec<(u64, Instant)> {
        self.durable_at
            .lock()
            .map(|mut at| std::mem::take(&mut *at))
            .unwrap_or_default()
    }

    pub(super) fn drop_held(&self) {
        if let Ok(mut q) = self.held.lock() {
            q.clear();
        }
    }

    pub(super) fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    pub(super) fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }
}
