//! The replica's side of client sessions (see `creek_procs::session`):
//! acknowledgements that arrive on reads are carried by the client's next
//! write, and the leader orders the expiry of old entries.

use std::collections::BTreeSet;

use creek_exec::{Engine, ProcCall};
use creek_procs::session::{self, ACKED_MAX, EXPIRE_BATCH_MAX};
use creek_types::ClientRequestId;
use rustc_hash::FxHashMap;

use super::Replica;
use crate::id::OpId;
use crate::op::{ExecKey, Pos, Views};

/// Clients whose acknowledgements wait for a write here, at most; past it
/// they are dropped (their entries then wait for expiry).
const ACK_CLIENTS_MAX: usize = 4096;

/// Session table figures, from the latest scan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Committed session entries at the latest scan.
    pub entries: u64,
    /// Committed client records (clients with expired requests) at the
    /// latest scan.
    pub clients: u64,
    /// Entries this replica's expiry ops listed for deletion.
    pub expiry_listed: u64,
    /// Expiry ops this replica ordered.
    pub expiry_ops: u64,
}

#[derive(Debug, Default)]
pub(super) struct Sessions {
    /// Acknowledgements that came with read-only calls (which write
    /// nothing), by client, for the client's next write here.
    acks_waiting: FxHashMap<u64, Vec<u64>>,
    next_scan_us: u64,
    /// The expiry op in flight, with when it was ordered.
    expiring: Option<(OpId, u64)>,
    stats: SessionStats,
}

impl Sessions {
    /// A read-only call writes nothing, so its acknowledgements wait for the
    /// same client's next write at this replica.
    pub(super) fn route_acks(&mut self, call: &mut ProcCall, read_only: bool) {
        let Some(ClientRequestId { client, .. }) = call.request_id else {
            call.acked.clear();
            return;
        };
        if read_only {
            if call.acked.is_empty() {
                return;
            }
            if self.acks_waiting.len() >= ACK_CLIENTS_MAX
                && !self.acks_waiting.contains_key(&client)
            {
                self.acks_waiting.clear();
            }
            let waiting = self.acks_waiting.entry(client).or_default();
            waiting.append(&mut call.acked);
            waiting.truncate(ACKED_MAX);
        } else if let Some(mut waiting) = self.acks_waiting.remove(&client) {
            call.acked.append(&mut waiting);
            call.acked.truncate(ACKED_MAX);
        }
    }
}

impl<E: Engine<ExecKey, Pos>> Replica<E> {
    /// Session table figures.
    pub fn session_stats(&self) -> SessionStats {
        self.sessions.stats
    }

    /// Scan the committed session entries every eighth of the TTL (at most
    /// every 10 ms, at least every 30 s) and, when `leader`, order the
    /// deletion of those older than two TTLs with a strong internal op that
    /// also moves the horizon to one TTL ago. One expiry op is in flight at
    /// a time. The scan walks every committed key (`committed_with_prefix`).
    pub fn expire_sessions(&mut self, now_us: u64, leader: bool) {
        let ttl = self.config.session_ttl_us;
        if ttl == 0 || now_us < self.sessions.next_scan_us {
            return;
        }
        self.sessions.next_scan_us = now_us + (ttl / 8).clamp(10_000, 30_000_000);
        if let Some((id, since)) = self.sessions.expiring {
            let pending = self.awaiting.contains_key(&ExecKey::Op(id));
            if pending && now_us.saturating_sub(since) < ttl {
                return;
            }
            self.sessions.expiring = None;
        }
        let delete_before = now_us.saturating_sub(ttl.saturating_mul(2));
        // One walk over the committed keys finds both kinds of record.
        let (mut entries, mut clients) = (0u64, 0u64);
        let mut old: BTreeSet<ClientRequestId> = BTreeSet::new();
        let mut old_clients: BTreeSet<u64> = BTreeSet::new();
        self.engine
            .committed_with_prefix(session::SESSION_PREFIX, &mut |k, v| {
                if let Some(id) = session::parse_entry_key(k) {
                    entries += 1;
                    if session::decode_entry(v).time_us < delete_before {
                        old.insert(id);
                    }
                } else if let Some(c) = session::parse_client_key(k) {
                    clients += 1;
                    if session::decode_client(v).is_none_or(|r| r.time_us < delete_before) {
                        old_clients.insert(c);
                    }
                }
            });
        self.sessions.stats.entries = entries;
        self.sessions.stats.clients = clients;
        if !leader || (old.is_empty() && old_clients.is_empty()) {
            return;
        }
        let ids: Vec<ClientRequestId> = old.into_iter().take(EXPIRE_BATCH_MAX).collect();
        let old_clients: Vec<u64> = old_clients.into_iter().take(EXPIRE_BATCH_MAX).collect();
        let call = session::expire_call(
            now_us.saturating_sub(ttl),
            delete_before,
            &ids,
            &old_clients,
        );
        self.sessions.stats.expiry_listed += ids.len() as u64;
        self.sessions.stats.expiry_ops += 1;
        if let ExecKey::Op(id) = self.invoke_op(call, true, Views::STRONG, false, now_us) {
            self.sessions.expiring = Some((id, now_us));
        }
    }
}
