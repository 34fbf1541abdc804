//! The replica's side of leases (see `creek_procs::builtins::lease`): the
//! leader orders the expiry of leases whose deadline its clock passed, and
//! a replica that becomes leader first extends every live lease by its TTL.

use creek_exec::Engine;
use creek_procs::builtins::lease::{self, Record, EXPIRE_BATCH_MAX, LEASES_MAX};
use creek_types::planted::Bug;

use super::Replica;
use crate::id::OpId;
use crate::op::{ExecKey, Pos, Views};

/// How often the leader looks for due leases, in µs (etcd checks every
/// 500 ms; expiry here is at most this late, plus the op's commit).
const SCAN_EVERY_US: u64 = 100_000;
/// How long an expiry or extension op may stay uncommitted before the
/// leader orders another.
const OP_PATIENCE_US: u64 = 10_000_000;

/// Lease figures, from the latest scan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// Committed lease records at the latest scan (the leader's).
    pub live: u64,
    /// Expiry ops this replica ordered.
    pub expiry_ops: u64,
    /// Leases those ops named.
    pub expiry_listed: u64,
    /// Extensions this replica ordered on becoming leader.
    pub extend_ops: u64,
}

#[derive(Debug, Default)]
pub(super) struct Leases {
    next_scan_us: u64,
    /// Whether this replica, leading, has ordered its extension since it
    /// became leader.
    extended: bool,
    /// The lease op in flight (expiry or extension), with when it was
    /// ordered.
    in_flight: Option<(OpId, u64)>,
    stats: LeaseStats,
}

impl<E: Engine<ExecKey, Pos>> Replica<E> {
    /// Lease figures.
    pub fn lease_stats(&self) -> LeaseStats {
        self.leases.stats
    }

    /// When `leader`, every 100 ms: on the first scan since it
    /// became leader, order the extension of every live lease; after that,
    /// order the expiry of the committed leases whose deadline passed by
    /// this replica's clock (the op checks each again at its place in the
    /// order). One lease op is in flight at a time. A group without leases
    /// pays one point read per scan.
    pub fn expire_leases(&mut self, now_us: u64, leader: bool) {
        if !leader {
            self.leases.extended = false;
            self.leases.in_flight = None;
            return;
        }
        if now_us < self.leases.next_scan_us {
            return;
        }
        self.leases.next_scan_us = now_us + SCAN_EVERY_US;
        if let Some((id, since)) = self.leases.in_flight {
            let pending = self.awaiting.contains_key(&ExecKey::Op(id));
            if pending && now_us.saturating_sub(since) < OP_PATIENCE_US {
                return;
            }
            self.leases.in_flight = None;
        }
        let live = self
            .engine
            .read_committed(lease::LIVE_KEY)
            .and_then(|v| Some(u64::from_be_bytes(v.as_ref().try_into().ok()?)))
            .unwrap_or(0);
        self.leases.stats.live = live;
        if live == 0 {
            // Leases granted from now on are granted under this leader.
            self.leases.extended = true;
            return;
        }
        let call = if !self.leases.extended {
            self.leases.extended = true;
            self.leases.stats.extend_ops += 1;
            lease::extend_call()
        } else {
            // The op's time will be at least this clock.
            let mut now = now_us.max(self.hlc.last().physical_us());
            if self.config.planted.has(Bug::LeaseEarlyExpiry) {
                now += lease::PLANTED_EARLY_US;
            }
            let end = lease::prefix_end(lease::RECORD_PREFIX);
            let mut records = Vec::new();
            self.engine.scan_committed(
                lease::RECORD_PREFIX,
                &end,
                LEASES_MAX as usize,
                &mut records,
            );
            let due: Vec<u64> = records
                .iter()
                .filter(|(_, v)| Record::decode(v).is_some_and(|r| r.due(now)))
                .filter_map(|(k, _)| lease::parse_record_key(k))
                .take(EXPIRE_BATCH_MAX)
                .collect();
            if due.is_empty() {
                return;
            }
            self.leases.stats.expiry_ops += 1;
            self.leases.stats.expiry_listed += due.len() as u64;
            lease::expire_call(&due)
        };
        if let ExecKey::Op(id) = self.invoke_op(call, true, Views::STRONG, false, now_us) {
            self.leases.in_flight = Some((id, now_us));
        }
    }
}
