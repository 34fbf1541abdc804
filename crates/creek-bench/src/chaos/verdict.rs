//! The end of a chaos run judged: the history and the replicas' final
//! state handed to `creek-check`, plus the driver's own checks.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use creek_check::history::{History, OpRecord, SeenView};
use creek_check::run::{check_run, Check, ReplicaEnd, RunEnd};
use creek_core::OpId;
use creek_procs::Registry;
use creek_sim::bench::percentiles;
use creek_types::ClientRequestId;
use creek_types::ProcCall;
use serde_json::json;

use super::client::{Shared, OP_TIMEOUT};
use super::world::{Membership, State, World, UNSEEN};

/// How the run ended, as the driver saw it.
pub(crate) struct Ending {
    /// The group settled after the heal, after the restart, and after the
    /// final reads.
    pub(crate) settled: bool,
    /// How long after the heal the group first settled.
    pub(crate) settled_after_us: Option<u64>,
    /// When the faults were healed (µs since the start).
    pub(crate) healed_us: u64,
    /// Why the final reads did not finish, if they did not.
    pub(crate) final_reads: Option<String>,
    /// Members whose committed state could not be read at the end.
    pub(crate) unread: Vec<String>,
}

pub(crate) struct Verdict {
    pub(crate) checks: Vec<Check>,
    pub(crate) ops: serde_json::Value,
}

impl Verdict {
    pub(crate) fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    pub(crate) fn checks_json(&self) -> serde_json::Value {
        self.checks
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "ok": c.ok,
                    "violations": c.violations,
                    "note": c.note,
                })
            })
            .collect()
    }
}

/// Work out which ops the crashes took with them, from `requests` (the
/// request each committed id carried), `committed_at` (when each id was
/// seen committed) and `kills` (each slot's kill and wipe times, µs):
/// mark `origin_crashed`, take the id from an op whose id went to another
/// op (`lost`), and return the ids still naming two ops. `ops` are in
/// the order of their invocation.
fn settle_ids(
    ops: &mut [OpRecord],
    requests: &HashMap<OpId, ClientRequestId>,
    committed_at: &HashMap<OpId, u64>,
    kills: &[&[u64]],
) -> Vec<String> {
    // The origin crashed before the client learnt the op's fate: killed
    // after the invocation, before the op was seen committed (a view that
    // came before the kill may have come before the op was durable).
    for r in ops.iter_mut().filter(|r| r.final_view().is_none()) {
        let seen_committed =
            r.id.and_then(|id| committed_at.get(&id).copied())
                .unwrap_or(u64::MAX);
        r.origin_crashed = kills[r.replica]
            .iter()
            .any(|&k| k >= r.invoked_at_us && k < seen_committed);
    }
    // An id given again after a crash: a replica hands out an id when it
    // accepts an op, before the op is on its disk; killed then, it
    // restarts from what its disk holds and gives that id to a new op. The
    // committed order says which request each id carried: an op whose id
    // committed with another request never took effect.
    for r in ops.iter_mut() {
        let (Some(id), Some(mine)) = (r.id, r.call.request_id) else {
            continue;
        };
        if requests.get(&id).is_some_and(|c| *c != mine)
            || (committed_at.contains_key(&id) && !requests.contains_key(&id))
        {
            r.id = None;
            r.lost = true;
        }
    }
    // The same id given again to a retry of the same request: the first
    // copy is the one that was lost.
    let mut ids_twice = Vec::new();
    let mut last_with: HashMap<OpId, usize> = HashMap::new();
    for i in 0..ops.len() {
        let Some(id) = ops[i].id else { continue };
        let Some(earlier) = last_with.insert(id, i) else {
            continue;
        };
        let (client, request, at) = (ops[i].client, ops[i].call.request_id, ops[i].invoked_at_us);
        let e = &mut ops[earlier];
        // Or, with no copy committed, an op its origin lost (killed or
        // wiped before the later one was invoked, with no final view given)
        // whose id went to a new op when the origin came back: a replica
        // that lost its disk gives again the ids of ops no peer received.
        let lost_with_origin = e.origin_crashed
            && !requests.contains_key(&id)
            && kills[e.replica]
                .iter()
                .any(|&k| k >= e.invoked_at_us && k < at);
        if (request.is_some() && e.call.request_id == request && e.final_view().is_none())
            || lost_with_origin
        {
            e.id = None;
            e.lost = true;
        } else {
            ids_twice.push(format!(
                "op id {id} named two ops, of clients {} and {client}",
                e.client
            ));
        }
    }
    ids_twice
}

pub(super) fn check(name: &'static str, violations: Vec<String>, note: Option<String>) -> Check {
    Check {
        note,
        ..Check::new(name, violations)
    }
}

/// Judge the run: `families` are the workloads the clients ran (kv, bank),
/// `dumps` every member's committed state by slot.
pub(crate) fn judge(
    world: &World,
    families: &[Shared],
    mut dumps: BTreeMap<usize, BTreeMap<Bytes, Bytes>>,
    ending: Ending,
) -> Verdict {
    let state = world.lock();
    let canonical = &state.canonical;
    let unseen_ranges = unseen_ranges(canonical);
    let mut ops = state.history.clone();
    ops.sort_by_key(|r| r.invoked_at_us);

    let kills: Vec<&[u64]> = state.slots.iter().map(|s| &s.kills[..]).collect();
    let ids_twice = settle_ids(&mut ops, &state.requests, &state.committed_at, &kills);
    let committed: BTreeSet<OpId> = canonical.iter().copied().collect();
    let history = History { ops };
    let broadcast = must_commit(&history, &committed, &state.requests);

    let lists: Vec<Vec<OpId>> = state
        .slots
        .iter()
        .map(|s| {
            s.committed
                .iter()
                .enumerate()
                .map(|(p, id)| if *id == UNSEEN { canonical[p] } else { *id })
                .collect()
        })
        .collect();
    let replicas = state
        .slots
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let last = s.last.as_ref();
            ReplicaEnd {
                id: creek_core::ReplicaId(i as u16 + 1),
                committed: &lists[i],
                commit_times: &[],
                finalized: last.map_or(0, |p| p.finalized),
                pending: last.map_or(0, |p| p.pending as usize),
                committed_state: dumps.remove(&i).unwrap_or_default(),
                lost: s.membership != Membership::Member,
                wiped: s.wiped,
            }
        })
        .collect();

    let mut registry = Registry::with_builtins();
    creek_workloads::register_all(&mut registry);
    let locked: Vec<_> = families
        .iter()
        .map(|f| f.lock().unwrap_or_else(|p| p.into_inner()))
        .collect();
    let keys = |call: &ProcCall| -> Vec<Bytes> {
        locked
            .iter()
            .map(|w| w.keys(call))
            .find(|k| !k.is_empty())
            .unwrap_or_default()
    };
    let invariants = |h: &History, state: &BTreeMap<Bytes, Bytes>| -> Vec<String> {
        locked
            .iter()
            .flat_map(|w| {
                let prefix = format!("{}.", w.name());
                let mine = History {
                    ops: h
                        .ops
                        .iter()
                        .filter(|r| r.call.name.starts_with(&prefix))
                        .cloned()
                        .collect(),
                };
                w.check(&mine, state)
            })
            .collect()
    };
    let mut checks = check_run(
        RunEnd {
            history: &history,
            replicas,
            broadcast,
            broadcast_complete: false,
            registry: &registry,
            keeps_versions: true,
            initial_state: BTreeMap::new(),
            prefix_violation: state.prefix_violation.clone(),
            settled: ending.settled,
            settled_after_us: ending.settled_after_us,
            liveness_bound_us: super::SETTLE_BOUND.as_micros() as u64,
            lin_budget_steps: 20_000_000,
        },
        &keys,
        &invariants,
    );
    annotate(&mut checks);
    checks.push(order_observed(&unseen_ranges, canonical.len()));
    checks.push(weak_in_minority(&state));
    checks.push(check("ids_unique", ids_twice, None));
    checks.push(check("no_replica_crashed", state.exits.clone(), None));
    let ops = op_counts(&history, canonical.len(), &ending);
    checks.push(check(
        "final_reads",
        ending
            .final_reads
            .into_iter()
            .chain(ending.unread)
            .collect(),
        None,
    ));
    Verdict { checks, ops }
}

/// The stretches `[from, to)` of committed positions no poll saw.
fn unseen_ranges(canonical: &[OpId]) -> Vec<(usize, usize)> {
    let mut unseen_ranges: Vec<(usize, usize)> = Vec::new();
    for (p, id) in canonical.iter().enumerate() {
        if *id != UNSEEN {
            continue;
        }
        match unseen_ranges.last_mut() {
            Some(r) if r.1 == p => r.1 = p + 1,
            _ => unseen_ranges.push((p, p + 1)),
        }
    }
    unseen_ranges
}

/// Every op that must commit, and its call: all but those whose origin
/// crashed before they were committed and that never were (they may have
/// gone with the crash).
fn must_commit<'h>(
    history: &'h History,
    committed: &BTreeSet<OpId>,
    requests: &HashMap<OpId, ClientRequestId>,
) -> BTreeMap<OpId, &'h ProcCall> {
    let mut broadcast: BTreeMap<OpId, &ProcCall> = history
        .ops
        .iter()
        .filter(|r| !r.origin_crashed || r.id.is_some_and(|id| committed.contains(&id)))
        .filter_map(|r| Some((r.id?, &r.call)))
        .collect();
    // A committed op whose id no client learnt (its answer was lost with
    // the connection, or it was a retry's earlier copy): its request says
    // which call it was.
    let calls: HashMap<ClientRequestId, &ProcCall> = history
        .ops
        .iter()
        .filter_map(|r| Some((r.call.request_id?, &r.call)))
        .collect();
    for (id, request) in requests {
        if let Some(call) = calls.get(request) {
            broadcast.entry(*id).or_insert(call);
        }
    }
    broadcast
}

/// Notes on what `creek-check` reported, as this driver reads them.
fn annotate(checks: &mut [Check]) {
    // The committed order, whose replay gives every final view and which
    // respects real time, is itself a linearization of the strong ops
    // (with the weak ones in it): a witness where the search ran out.
    let passed = |name: &str| checks.iter().any(|c| c.name == name && c.ok);
    if passed("replay_matches") && passed("real_time") {
        if let Some(c) = checks.iter_mut().find(|c| c.name == "linearizable") {
            let search = c.note.take().unwrap_or_default();
            c.note = Some(format!(
                "{search}; the committed order is a witness (its replay gives every final \
                 view, and it respects real time)"
            ));
        }
    }
    if let Some(c) = checks.iter_mut().find(|c| c.name == "replay_matches") {
        c.note = Some(
            "committed ids no client made (the replicas' stabilizer no-ops and session expiry) \
             skipped; user keys compared"
                .into(),
        );
    }
}

/// The checks above are only as good as the committed order the driver
/// saw: every position must have been polled from some replica before a
/// checkpoint let them all forget it.
fn order_observed(unseen_ranges: &[(usize, usize)], committed: usize) -> Check {
    let unseen: usize = unseen_ranges.iter().map(|(a, b)| b - a).sum();
    check(
        "order_observed",
        (unseen > 0)
            .then(|| {
                format!(
                    "{unseen} committed positions were forgotten by every replica before a \
                     poll saw them (of {}, first ranges {:?}): the checks above may report \
                     false violations",
                    committed,
                    &unseen_ranges[..unseen_ranges.len().min(5)]
                )
            })
            .into_iter()
            .collect(),
        None,
    )
}

/// Weak ops at a replica cut off in a minority (running, not stopped) are
/// answered.
fn weak_in_minority(state: &State) -> Check {
    let mut minority = Vec::new();
    let mut minority_answered = 0;
    for (replica, at, answered) in &state.weak_attempts {
        let (replica, at) = (*replica, *at);
        let s = &state.slots[replica];
        let cut_off = s.minority_spans.iter().any(|&(a, b)| a <= at && at <= b);
        let until = at + OP_TIMEOUT.as_micros() as u64;
        let down = s.down_spans.iter().any(|&(a, b)| a <= until && at <= b);
        if !cut_off || down {
            continue;
        }
        match answered {
            Ok(()) => minority_answered += 1,
            Err(why) => minority.push(format!(
                "a weak op invoked at replica {} at {at} µs, while it was cut off in a \
                 minority, got no preliminary view ({why})",
                replica + 1
            )),
        }
    }
    check(
        "weak_in_minority",
        minority,
        Some(format!(
            "{minority_answered} weak ops answered in a minority"
        )),
    )
}

/// What the clients did and waited for, as the report's `ops`.
fn op_counts(history: &History, committed: usize, ending: &Ending) -> serde_json::Value {
    let count = |f: &dyn Fn(&OpRecord) -> bool| history.ops.iter().filter(|r| f(r)).count();
    json!({
        "attempts": history.ops.len(),
        "strong": count(&|r| r.strong),
        "weak": count(&|r| !r.strong),
        "with_final_view": count(&|r| r.final_view().is_some()),
        "weak_answered": count(&|r| !r.strong && !r.views.is_empty()),
        "origin_crashed": count(&|r| r.origin_crashed),
        "origin_left": count(&|r| r.origin_left),
        "lost_with_a_crash": count(&|r| r.lost),
        "committed": committed,
        "settled_after_heal_ms": ending.settled_after_us.map(|u| u / 1000),
        // How long clients waited for the first view of a weak op and the
        // final view of a strong one, under the faults (µs).
        "weak_first_view_us": percentiles(waited(history, false, |r| r.views.first())),
        "strong_final_view_us": percentiles(waited(history, true, OpRecord::final_view)),
        "healed_at_ms": ending.healed_us / 1000,
    })
}

/// Per op of the kind (`strong` or not), how long after its invocation
/// the `view` came, for the ops that got it.
fn waited(
    history: &History,
    strong: bool,
    view: impl Fn(&OpRecord) -> Option<&SeenView>,
) -> Vec<u64> {
    history
        .ops
        .iter()
        .filter(|r| r.strong == strong)
        .filter_map(|r| Some(view(r)?.at_us.saturating_sub(r.invoked_at_us)))
        .collect()
}

#[cfg(test)]
mod tests {
    use creek_core::{ReplicaId, ViewKind};

    use super::*;

    const CLIENT_A: u32 = 1;
    const CLIENT_B: u32 = 2;

    fn id(seq: u64) -> OpId {
        OpId::new(ReplicaId(1), seq)
    }

    fn op(client: u32, seq: u64, at: u64, request: u64) -> OpRecord {
        let mut call = ProcCall::new("kv.put", Bytes::new());
        call.request_id = Some(ClientRequestId {
            client: u64::from(client),
            seq: request,
        });
        OpRecord {
            client,
            replica: 0,
            id: Some(id(seq)),
            call,
            strong: false,
            wants_final: true,
            invoked_at_us: at,
            views: Vec::new(),
            origin_crashed: false,
            origin_left: false,
            lost: false,
        }
    }

    fn settled(ops: &mut [OpRecord], committed: &[(u64, OpRecord)], kills: &[u64]) -> Vec<String> {
        let requests = committed
            .iter()
            .map(|(seq, r)| (id(*seq), r.call.request_id.expect("a request")))
            .collect();
        let committed_at = committed
            .iter()
            .map(|(seq, _)| (id(*seq), 1_000_000))
            .collect();
        settle_ids(ops, &requests, &committed_at, &[kills])
    }

    #[test]
    fn an_id_its_origin_gave_again_after_losing_the_op_is_not_a_violation() {
        // Client A's op r1.5 had no final view when its origin was wiped at
        // 150; back, the origin gave r1.5 to client B's op, which committed.
        let b = op(CLIENT_B, 5, 200, 1);
        let mut ops = vec![op(CLIENT_A, 5, 100, 1), b.clone()];
        assert!(settled(&mut ops, &[(5, b.clone())], &[150]).is_empty());
        assert!(ops[0].lost && ops[0].id.is_none() && ops[0].origin_crashed);
        assert_eq!(ops[1].id, Some(id(5)));
        // Nothing committed under the id: the first op went with the crash.
        let mut ops = vec![op(CLIENT_A, 5, 100, 1), op(CLIENT_B, 5, 200, 1)];
        assert!(settled(&mut ops, &[], &[150]).is_empty());
        assert!(ops[0].lost && !ops[1].lost);
    }

    #[test]
    fn an_id_naming_two_ops_without_a_crash_between_is_a_violation() {
        // No kill between the two invocations.
        let mut ops = vec![op(CLIENT_A, 5, 100, 1), op(CLIENT_B, 5, 200, 1)];
        assert_eq!(
            settled(&mut ops, &[], &[250]),
            vec!["op id r1.5 named two ops, of clients 1 and 2".to_owned()]
        );
        // A kill between, but the first op had its final view: it was not lost.
        let mut ops = vec![op(CLIENT_A, 5, 100, 1), op(CLIENT_B, 5, 200, 1)];
        ops[0].views.push(SeenView {
            at_us: 120,
            kind: ViewKind::Stable,
            outcome: Ok(Bytes::new()),
            time: 0,
        });
        assert_eq!(settled(&mut ops, &[], &[150]).len(), 1);
    }

    #[test]
    fn a_retry_given_the_same_id_leaves_the_first_copy_lost() {
        let mut ops = vec![op(CLIENT_A, 5, 100, 7), op(CLIENT_A, 5, 200, 7)];
        assert!(settled(&mut ops, &[], &[]).is_empty());
        assert!(ops[0].lost && !ops[1].lost);
    }

    #[test]
    fn an_op_whose_id_committed_with_another_request_never_took_effect() {
        let other = op(CLIENT_B, 5, 50, 3);
        let mut ops = vec![op(CLIENT_A, 5, 100, 1)];
        assert!(settled(&mut ops, &[(5, other)], &[]).is_empty());
        assert!(ops[0].lost && ops[0].id.is_none());
    }
}
