//! The simulator's clients: closed-loop terminals and open-loop arrivals,
//! each op routed by the shard map to a replica of its shard (an op
//! spanning shards to its origin as an operation across shards), invoked
//! there and recorded in the history; a client whose replica answered is
//! released for its next op.

use creek_check::history::{OpRecord, SETUP_CLIENT};
use creek_core::{ExecKey, InvokeError, Request, Views};
use creek_shard::{RouteError, ShardMap};
use creek_types::{ClientRequestId, ProcCall};

use super::directory::OPERATOR_CLIENT;
use super::{mpo, request_of, Ev, Sim};

impl Sim {
    /// The shard owning every key of `call` by `map` (on one shard: that
    /// one).
    pub(super) fn route(&self, map: &ShardMap, call: &ProcCall) -> Result<usize, RouteError> {
        if self.cfg.shards == 1 {
            return Ok(0);
        }
        let keys = self.workload.route_keys(call);
        let shard = map.route(keys.iter().map(|(ks, k)| (ks.as_deref(), &k[..])))?;
        Ok(usize::from(shard.0))
    }

    /// The next op of a sharded run's client (routed by its map; an
    /// open-loop session by the map the cluster was formed with) and the
    /// shard it goes to, or `None` when the workload generated one no
    /// shard owns alone (counted; the workloads that run sharded never do).
    pub(super) fn next_routed(&mut self, client: u32) -> Option<(usize, crate::workload::NextOp)> {
        let next = self.workload.next_op(&mut self.rng, client);
        let map = match self.clients.get(client as usize) {
            Some(c) => c.map.clone(),
            None => self.map.clone(),
        };
        match self.route(&map, &next.call) {
            Ok(s) => Some((s, next)),
            Err(e) if self.spans(&e) => {
                // A read across shards at the snapshot level: its first
                // part (see `split`).
                if let Some((s, call)) = self.split_read(client as usize, &next.call) {
                    let next = crate::workload::NextOp {
                        call,
                        strong: false,
                        wants_final: false,
                    };
                    return Some((s, next));
                }
                // Keys on several shards: an operation across shards,
                // strong, sent once to a replica of its first key's shard.
                let (s, call) = self.as_mpo(&map, &next.call)?;
                let next = crate::workload::NextOp {
                    call,
                    strong: true,
                    wants_final: true,
                };
                Some((s, next))
            }
            Err(_) => {
                *self.faults.entry("route_refused").or_default() += 1;
                None
            }
        }
    }

    pub(super) fn client_next(&mut self, c: usize) {
        if !self.running_clients || self.clients[c].pending.is_some() {
            return;
        }
        if self.next_split_part(c) {
            return;
        }
        // One shard: the op is drawn once the replica is known to be up
        // (runs of one shard draw as they always did).
        let (shard, drawn) = if self.cfg.shards == 1 {
            (0, None)
        } else {
            let Some((s, next)) = self.next_routed(c as u32) else {
                let at = self.now + self.cfg.think_us;
                self.schedule(at, Ev::Client { client: c });
                return;
            };
            (s, Some(next))
        };
        let mut replica = self.client_replica(c, shard);
        if !self.nodes[replica].node.is_up() {
            let at = self.now + 10 * self.cfg.think_us;
            self.schedule(at, Ev::Client { client: c });
            return;
        }
        let next = match drawn {
            Some(next) => next,
            None => self.workload.next_op(&mut self.rng, c as u32),
        };
        let (mut request, mut wants_final) = request_of(next);
        if !request.strong && self.cfg.durable_weak > 0.0 && self.rng.chance(self.cfg.durable_weak)
        {
            self.answer_after_next = if self.rng.index(2) == 0 {
                creek_node::AnswerAfter::Local
            } else {
                creek_node::AnswerAfter::Majority
            };
        }
        let snapshot = if self.split_first_due(c) {
            request.strong = false;
            request.views = Views::SNAPSHOT;
            true
        } else {
            self.snapshot_read(&mut request)
        };
        self.client_sends(c, shard, &mut request);
        if snapshot && !request.strong {
            // A snapshot view alone: no final view comes. Any replica of
            // its shard serves it (one with strong views too goes to the
            // session's replica: session order holds per replica).
            wants_final = false;
            let members = self.member_slots(shard);
            let other = members[self.rng.index(members.len())];
            if self.nodes[other].node.is_up() {
                replica = other;
            }
        }
        let client = &mut self.clients[c];
        client.seq += 1;
        request.call.request_id = Some(ClientRequestId {
            client: c as u64 + 1,
            seq: client.seq,
        });
        request.call.acked = std::mem::take(&mut client.acks);
        let index = self.history.ops.len();
        let rid = request.call.request_id.map(|r| (r.client, r.seq));
        if self.invoke(replica, Some(c), request, wants_final) {
            self.client_invoked(c, index);
            if let Some(rid) = rid {
                self.split_first_invoked(c, index, rid);
            }
            self.note_epoch(c, replica);
        } else {
            let at = self.now + self.cfg.think_us;
            self.schedule(at, Ev::Client { client: c });
        }
    }

    /// Whether a session issues `request` at the snapshot level (a
    /// read-only built-in, drawn at the configured share): then it asks
    /// for the snapshot view (a strong one for all three).
    fn snapshot_read(&mut self, request: &mut Request) -> bool {
        if self.cfg.snapshot_reads <= 0.0 || self.registry.get(&request.call.name).is_none() {
            return false;
        }
        let read_only = self
            .registry
            .check(&request.call, &creek_exec::TxnLimits::default())
            .is_ok_and(|c| c.read_only);
        if !read_only || !self.rng.chance(self.cfg.snapshot_reads) {
            return false;
        }
        // A strong read keeps its strong views a quarter of the time (all
        // three views, in order); otherwise, and always at share 1 (what
        // benchmarks compare against strong reads), it is read at the
        // snapshot level alone, never ordered.
        let all_three = request.strong && self.cfg.snapshot_reads < 1.0 && self.rng.chance(0.25);
        if all_three {
            request.views = Views::ALL;
        } else {
            request.strong = false;
            request.views = Views::SNAPSHOT;
        }
        true
    }

    /// An open-loop arrival: a one-op session at a random replica.
    pub(super) fn arrival(&mut self) {
        if !self.running_clients {
            return;
        }
        let session = self.cfg.clients + self.history.ops.len();
        let (replica, next) = if self.cfg.shards == 1 {
            let members = self.member_slots(0);
            let replica = members[self.rng.index(members.len())];
            (
                replica,
                self.workload.next_op(&mut self.rng, session as u32),
            )
        } else {
            let Some((shard, next)) = self.next_routed(session as u32) else {
                let gap = self.rng.exp(1e6 / self.cfg.open_rate_per_sec).max(1.0) as u64;
                self.schedule(self.now + gap, Ev::Arrival);
                return;
            };
            let members = self.member_slots(shard);
            (members[self.rng.index(members.len())], next)
        };
        let (mut request, wants_final) = request_of(next);
        request.call.request_id = Some(ClientRequestId {
            client: session as u64 + 1,
            seq: 1,
        });
        if self.invoke(replica, None, request, wants_final) {
            if let Some(r) = self.history.ops.last_mut() {
                r.client = session as u32;
            }
        }
        let gap = self.rng.exp(1e6 / self.cfg.open_rate_per_sec).max(1.0) as u64;
        self.schedule(self.now + gap, Ev::Arrival);
    }

    pub(super) fn invoke(
        &mut self,
        i: usize,
        client: Option<usize>,
        request: Request,
        wants_final: bool,
    ) -> bool {
        let recorded = client.map_or(SETUP_CLIENT, |c| c as u32);
        self.invoke_recorded(i, client, recorded, request, wants_final)
    }

    /// [`Sim::invoke`] of an op no client session issues, recorded in the
    /// history as `recorded`'s (the operator's, the sequencer's): its view
    /// may come, and release it, before this returns (a disk that fails in
    /// the same turn), so a caller keeping it in its books enters it under
    /// the index it will have, `self.history.ops.len()`, before the call.
    pub(super) fn invoke_as(&mut self, i: usize, recorded: u32, request: Request) -> bool {
        self.invoke_recorded(i, None, recorded, request, true)
    }

    pub(super) fn invoke_recorded(
        &mut self,
        i: usize,
        client: Option<usize>,
        recorded: u32,
        request: Request,
        wants_final: bool,
    ) -> bool {
        let now = self.local_time(i);
        let node = &mut self.nodes[i].node;
        if !node.is_up() {
            return false;
        }
        let call = request.call.clone();
        let strong = request.strong;
        let after = std::mem::take(&mut self.answer_after_next);
        let handle = match node.invoke_answering(request, after, now) {
            Ok(handle) => handle,
            Err(e) => {
                if matches!(e, InvokeError::DiskBehind(_)) {
                    *self.faults.entry("refused_disk_behind").or_default() += 1;
                }
                return false;
            }
        };
        if let ExecKey::Op(id) = handle {
            // A rebuilt replica resumes past the seqs its peers heard it
            // reserve; only a reservation no peer heard (a partition, then
            // the lost disk) lets a client see an id twice.
            if self.lost_ids.contains(&id) {
                *self.faults.entry("lost_id_issued_again").or_default() += 1;
            }
        }
        let index = self.history.ops.len();
        if let (ExecKey::Op(id), true) = (handle, after != creek_node::AnswerAfter::Execution) {
            self.durable_asked.insert(index, (after, id));
        }
        self.history.ops.push(OpRecord {
            client: recorded,
            replica: i,
            id: match handle {
                ExecKey::Op(id) => Some(id),
                ExecKey::Local(_) => None,
            },
            call,
            strong,
            wants_final: strong || wants_final,
            invoked_at_us: self.now,
            views: Vec::new(),
            origin_crashed: false,
            origin_left: false,
            lost: false,
        });
        self.nodes[i].handles.insert(handle, index);
        if let Some(c) = client {
            self.clients[c].pending = Some(index);
        }
        if let (ExecKey::Op(id), true) = (
            handle,
            self.history.ops[index].call.name.as_ref() == creek_procs::mpo::RUN,
        ) {
            self.mpo_invoked(i, id, index);
        }
        self.after(i);
        true
    }

    /// The session waiting on history record `index` may issue its next op.
    pub(super) fn release_client(&mut self, index: usize) {
        if self.history.ops[index].client == OPERATOR_CLIENT {
            self.operator_done(index);
            return;
        }
        if super::moves::is_mover(self.history.ops[index].client) {
            self.mover_done(index);
            return;
        }
        if mpo::is_sequencer(self.history.ops[index].client) {
            self.mpo_sequenced(index);
            return;
        }
        if self.history.ops[index].is_setup() {
            // Only a final view releases a setup call (no fault runs yet).
            debug_assert!(self.setup_pending > 0, "a setup call released twice");
            self.setup_pending = self.setup_pending.saturating_sub(1);
            self.issue_setup();
            if self.setup_pending == 0 {
                self.start_load();
            }
            return;
        }
        let client = self.history.ops[index].client as usize;
        // Refused by a shard that no longer owns its keys (they moved):
        // the client asks the directory for the newer map.
        let moved = self.history.ops[index].final_view().is_some_and(|v| {
            v.outcome
                .as_ref()
                .is_err_and(|a| a.0.starts_with(creek_procs::ownership::WRONG_SHARD))
        });
        if moved {
            let mpo = self.history.ops[index].call.name.as_ref() == creek_procs::mpo::RUN;
            let what = if mpo {
                "refused_moved_mpo"
            } else {
                "refused_moved"
            };
            *self.faults.entry(what).or_default() += 1;
        }
        if let Some(c) = self.clients.get_mut(client) {
            if moved {
                c.refresh = true;
            }
            if c.pending == Some(index) {
                c.pending = None;
                let at = self.now + self.cfg.think_us;
                self.schedule(at, Ev::Client { client });
            }
        }
    }
}
