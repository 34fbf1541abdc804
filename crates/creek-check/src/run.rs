//! Every checker over the end of one run: what clients saw, each replica's
//! final state and what the driver observed while the run went on.
//!
//! A driver fills a [`RunEnd`] from its own state — the simulator from its
//! replicas, a real-process driver from its processes' dumps — and
//! [`check_run`] returns one [`Check`] per property, named as in the
//! report. This module judges; it does not settle the cluster, decide
//! which ops to leave out of the history (ops that never took effect), or
//! build a report.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use creek_core::{OpId, ReplicaId};
use creek_exec::basic::{replay_from, replay_versioned};
use creek_exec::{Outcome, ProcCall, TxnLimits};
use creek_procs::registry::INTERNAL_KEY_PREFIX;
use creek_procs::Registry;

use crate::history::History;
use crate::{linearizable, order, snapshot};

/// The verdict of one checker.
#[derive(Clone, Debug)]
pub struct Check {
    /// Its name in the report.
    pub name: &'static str,
    /// Whether it passed.
    pub ok: bool,
    /// What failed, one line each (bounded).
    pub violations: Vec<String>,
    /// How conclusive the check was (e.g. the linearizability search).
    pub note: Option<String>,
}

impl Check {
    /// The verdict `name`: passed if `violations` is empty (at most 20 of
    /// them are kept).
    pub fn new(name: &'static str, mut violations: Vec<String>) -> Check {
        violations.truncate(20);
        Check {
            name,
            ok: violations.is_empty(),
            violations,
            note: None,
        }
    }
}

/// One replica at the end of a run, as the checkers need it.
#[derive(Clone, Debug)]
pub struct ReplicaEnd<'a> {
    /// Its id, as op ids name their origin (a replica of one shard of a
    /// sharded cluster keeps its cluster-wide id: it is not its index).
    pub id: ReplicaId,
    /// Its committed order, first committed first (every position, also
    /// those a recovery or a state transfer took from a checkpoint).
    pub committed: &'a [OpId],
    /// How many committed ops have their final execution (a prefix).
    pub finalized: u64,
    /// Ops known here and not yet committed.
    pub pending: usize,
    /// The commit time of each op of `committed` (0 where the driver does
    /// not know it; empty where it knows none).
    pub commit_times: &'a [u64],
    /// The state the committed ops' final executions produced.
    pub committed_state: BTreeMap<Bytes, Bytes>,
    /// The replica takes no part at the end — it knows it lost its data
    /// and waits to be rebuilt, or it is not in the group (removed, or
    /// never added): `converged` leaves it out.
    pub lost: bool,
    /// The replica's disk was lost at least once during the run: its
    /// unacknowledged ops that never left it may be gone with it.
    pub wiped: bool,
}

/// Everything the checkers judge at the end of one run.
#[derive(Clone, Debug)]
pub struct RunEnd<'a> {
    /// What clients saw, without ops that never took effect.
    pub history: &'a History,
    /// Every replica, replica `i` (id `i + 1`) at index `i`.
    pub replicas: Vec<ReplicaEnd<'a>>,
    /// Every op broadcast during the run, by id: each must commit, and a
    /// replay of the committed order runs their calls.
    pub broadcast: BTreeMap<OpId, &'a ProcCall>,
    /// Whether `broadcast` holds every op broadcast during the run. The
    /// simulator sees every op; a driver of real processes knows its
    /// clients' ops only, not the replicas' own (the stabilizer's no-ops,
    /// the expiry of client sessions), which touch no user key. Then the
    /// replay skips the committed ids it does not know, compares the user
    /// keys only (those outside [`INTERNAL_KEY_PREFIX`]), and the
    /// workload's checks judge the converged committed state.
    pub broadcast_complete: bool,
    /// The procedures the replicas ran: the sequential specification.
    pub registry: &'a Registry,
    /// Whether the replicas' engines keep version records
    /// (`creek_exec::versions`): Creek's do, the baselines' do not. The
    /// replay keeps them too, so final views reading them and the state
    /// are judged with them.
    pub keeps_versions: bool,
    /// The state every replica started from (a replay starts there).
    pub initial_state: BTreeMap<Bytes, Bytes>,
    /// A violation of the committed-prefix property the driver saw during
    /// the run (it may check after every event, not only at the end).
    pub prefix_violation: Option<String>,
    /// Whether the cluster settled (every replica quiet, with one committed
    /// order) before the time limit.
    pub settled: bool,
    /// How long after the faults healed the cluster settled; `None`: strong
    /// ops were still incomplete at the time limit.
    pub settled_after_us: Option<u64>,
    /// The bound `settled_after_us` must keep.
    pub liveness_bound_us: u64,
    /// Steps the linearizability search may take before it gives up
    /// (inconclusive, not failed).
    pub lin_budget_steps: u64,
}

/// A workload's own checks over the history and the state a replay of the
/// committed order gives (the converged committed state, when
/// `replay_matches` passes), one line per violation.
pub type Invariants<'a> = dyn Fn(&History, &BTreeMap<Bytes, Bytes>) -> Vec<String> + 'a;

/// Every checker over `run`. `keys` gives the keys a call touches, for
/// partitioning the linearizability check (empty: the call is not checked);
/// `invariants` are the workload's own checks.
pub fn check_run(
    mut run: RunEnd<'_>,
    keys: &dyn Fn(&ProcCall) -> Vec<Bytes>,
    invariants: &Invariants<'_>,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let lists: Vec<&[OpId]> = run.replicas.iter().map(|r| r.committed).collect();
    let canonical: Vec<OpId> = lists
        .iter()
        .max_by_key(|l| l.len())
        .map(|l| l.to_vec())
        .unwrap_or_default();

    // Committed prefix: seen during the run, and at the end.
    let mut prefix = Vec::new();
    if let Some(v) = &run.prefix_violation {
        prefix.push(v.clone());
    }
    for (i, l) in lists.iter().enumerate() {
        if !canonical.starts_with(l) {
            prefix.push(format!(
                "replica {i}'s committed list is not a prefix of the longest"
            ));
        }
    }
    checks.push(Check::new("committed_prefix", prefix));

    // Convergence after heal and quiescence.
    let states: Vec<&BTreeMap<Bytes, Bytes>> =
        run.replicas.iter().map(|r| &r.committed_state).collect();
    let reference = run.replicas.iter().position(|r| !r.lost);
    checks.push(Check::new(
        "converged",
        converged(&run, &canonical, &states, reference),
    ));

    // Liveness: once the faults healed, everything completes within the
    // documented bound.
    let mut live = Vec::new();
    match run.settled_after_us {
        Some(t) if t > run.liveness_bound_us => live.push(format!(
            "the cluster settled {} ms after the faults healed; the bound is {} ms",
            t / 1000,
            run.liveness_bound_us / 1000
        )),
        Some(_) => {}
        None => live.push("strong ops still incomplete at the time limit".into()),
    }
    checks.push(Check::new("liveness", live));

    // Replay: nothing lost, duplicated or invented; every final view and the
    // state equal a sequential execution of the committed order.
    let unique: BTreeSet<OpId> = canonical.iter().copied().collect();
    let mut replay_v = Vec::new();
    if unique.len() != canonical.len() {
        replay_v.push("an op appears twice in the committed order".into());
    }
    let linearizable = linearizable_check(&run, keys);
    let (times, mut snapshot_v) = snapshot::commit_times(&run, &canonical);
    snapshot_v.extend(snapshot::check_snapshot_views(
        &run,
        &canonical,
        &times,
        &run.initial_state,
    ));
    snapshot_v.extend(snapshot::check_read_times(run.history, run.registry));
    let initial = std::mem::take(&mut run.initial_state);
    let replayed = replay_committed(
        &run,
        initial,
        &canonical,
        reference.map(|r| states[r]),
        &mut replay_v,
    );
    let state = if run.broadcast_complete {
        replayed
    } else {
        reference.map(|r| states[r].clone()).unwrap_or_default()
    };
    checks.push(Check::new("replay_matches", replay_v));
    checks.push(Check::new(
        "no_lost_acks",
        lost_acks(&run, &unique, &voided(&run, &canonical)),
    ));

    checks.push(linearizable);
    checks.push(Check::new(
        "real_time",
        order::check_real_time(run.history, &canonical),
    ));
    checks.push(Check::new(
        "session_order",
        order::check_session_order(run.history, &canonical),
    ));
    checks.push(Check::new("snapshot_reads", snapshot_v));
    checks.push(Check::new("workload", invariants(run.history, &state)));
    checks
}

/// Convergence after heal and quiescence: every replica that holds its data
/// has the longest committed list, executed finally, nothing pending, and
/// the same committed state.
fn converged(
    run: &RunEnd<'_>,
    canonical: &[OpId],
    states: &[&BTreeMap<Bytes, Bytes>],
    reference: Option<usize>,
) -> Vec<String> {
    let mut conv = Vec::new();
    if !run.settled {
        conv.push("the cluster did not settle within the time limit".to_string());
    }
    // A replica that knows it lost its data takes no part (it waits to be
    // rebuilt): it is left out, as long as the others hold everything.
    for (i, n) in run.replicas.iter().enumerate() {
        if n.lost {
            continue;
        }
        if n.committed != canonical {
            conv.push(format!(
                "replica {i} committed {} ops, the longest list has {}",
                n.committed.len(),
                canonical.len()
            ));
        }
        if n.finalized != n.committed.len() as u64 {
            conv.push(format!(
                "replica {i} has {} committed ops without a final execution",
                n.committed.len() as u64 - n.finalized
            ));
        }
        if n.pending > 0 {
            conv.push(format!(
                "replica {i} still has {} uncommitted ops",
                n.pending
            ));
        }
        if let Some(r) = reference.filter(|r| states[*r] != states[i]) {
            conv.push(format!(
                "replica {i}'s committed state differs from replica {r}'s"
            ));
        }
    }
    conv
}

/// The ids the committed order voided: those a committed `creek.ops.void`
/// op lists (its origin's, below its own seq) that were not committed
/// before it (see `creek_procs::void`). Only void ops whose calls
/// `broadcast` knows count.
fn voided(run: &RunEnd<'_>, canonical: &[OpId]) -> BTreeSet<OpId> {
    let mut committed = BTreeSet::new();
    let mut voided = BTreeSet::new();
    for id in canonical {
        committed.insert(*id);
        let Some(call) = run.broadcast.get(id) else {
            continue;
        };
        if call.name.as_ref() != creek_procs::void::VOID {
            continue;
        }
        let seqs = creek_procs::void::void_seqs(&call.args).unwrap_or_default();
        voided.extend(
            seqs.into_iter()
                .filter(|seq| *seq < id.seq)
                .map(|seq| OpId::new(id.origin, seq))
                .filter(|v| !committed.contains(v)),
        );
    }
    voided
}

/// No acknowledged op lost, and every broadcast op committed (but the
/// unacknowledged ops of an origin that lost its disk, and those the
/// committed order voided).
fn lost_acks(run: &RunEnd<'_>, unique: &BTreeSet<OpId>, voided: &BTreeSet<OpId>) -> Vec<String> {
    // No acknowledged op lost. Every broadcast op commits — except an
    // unacknowledged op of an origin that lost its disk: one that never
    // left it is gone with the disk (one that reached a peer still commits,
    // or `converged` finds it pending); an acknowledged one was committed
    // by a majority and is checked below like any other. Nor an op the
    // committed order voided: an origin that restarted after a crash took
    // back the seqs it had reserved, and its payloads leave before their
    // write is durable (docs/protocol.md, "The hold rule"), so an op whose
    // pushes the network lost and whose write the crash took is gone too,
    // and is voided; an acknowledged one is still checked below (seed
    // 200304: `r1.331` was sent, reached no peer, and its origin crashed).
    let wiped = |origin: ReplicaId| run.replicas.iter().any(|r| r.id == origin && r.wiped);
    let mut lost = Vec::new();
    for id in run.broadcast.keys() {
        if !unique.contains(id) && !wiped(id.origin) && !voided.contains(id) {
            lost.push(format!("{id} was broadcast but never committed"));
        }
    }
    for r in &run.history.ops {
        let Some(id) = r.id else { continue };
        let acked = r.final_view().is_some() || (!r.views.is_empty() && !r.origin_crashed);
        if acked && !unique.contains(&id) {
            lost.push(format!(
                "{id} ({}) was acknowledged but is not in the final order",
                r.call.name
            ));
        }
    }
    lost
}

/// Linearizability of strong ops (the replicated weak ops take part as ops
/// of unknown outcome), over `run`'s history, registry, initial state and
/// budget (the rest of `run` is not read): [`check_run`]'s, and a
/// driver's over a history of its own (a sharded cluster's, across
/// shards).
pub fn linearizable_check(run: &RunEnd<'_>, keys: &dyn Fn(&ProcCall) -> Vec<Bytes>) -> Check {
    // Linearizability of strong ops.
    // Strong ops with their observed final outcomes, plus the replicated weak
    // ops as ops of unknown outcome that take effect at some point after
    // their invocation: Creek promises linearizable strong ops in an order
    // that also contains the weak ones (paper §4.3), not that weak ops are
    // absent.
    let mut lin_ops = linearizable::strong_ops(run.history);
    for (index, r) in run.history.ops.iter().enumerate() {
        if !r.strong && r.id.is_some() {
            lin_ops.push(linearizable::LinOp {
                index,
                call: r.executed_call(),
                invoked_at_us: r.invoked_at_us,
                completed: None,
            });
        }
    }
    let (lin, note) = match linearizable::check(
        &lin_ops,
        keys,
        run.registry,
        TxnLimits::default(),
        &run.initial_state,
        run.lin_budget_steps,
    ) {
        linearizable::LinResult::Ok { partitions, ops } => (
            Vec::new(),
            format!("linearizable: {ops} ops in {partitions} partitions"),
        ),
        linearizable::LinResult::Violation(v) => {
            let note = format!("violation on keys {:?}", v.keys);
            (
                vec![format!(
                    "not linearizable on keys {:?}: {}",
                    v.keys, v.reason
                )],
                note,
            )
        }
        linearizable::LinResult::Inconclusive { reason } => {
            (Vec::new(), format!("inconclusive: {reason}"))
        }
    };
    let mut lin_check = Check::new("linearizable", lin);
    lin_check.note = Some(note);
    lin_check
}

/// A sequential execution of `canonical` from the initial state: every
/// final view must equal it (violations into `replay_v`), and so must the
/// `reference` committed state (its user keys only when the broadcast ops
/// are not all known: ids not known are then skipped as the replicas' own
/// ops). Returns the state it ends in.
fn replay_committed(
    run: &RunEnd<'_>,
    initial_state: BTreeMap<Bytes, Bytes>,
    canonical: &[OpId],
    reference: Option<&BTreeMap<Bytes, Bytes>>,
    replay_v: &mut Vec<String>,
) -> BTreeMap<Bytes, Bytes> {
    let mut calls: Vec<(u64, &ProcCall)> = Vec::new();
    for (revision, id) in (1..).zip(canonical) {
        match run.broadcast.get(id) {
            Some(call) => calls.push((revision, call)),
            None if !run.broadcast_complete => {}
            None => replay_v.push(format!("{id} committed but never broadcast (invented)")),
        }
    }
    let (outcomes, state) = if run.keeps_versions {
        replay_versioned(
            run.registry,
            TxnLimits::default(),
            initial_state,
            creek_procs::versions::meta_key,
            calls,
        )
    } else {
        replay_from(
            run.registry,
            TxnLimits::default(),
            initial_state,
            calls.into_iter().map(|(_, call)| call),
        )
    };
    let outcome_of: BTreeMap<OpId, &Outcome> = canonical
        .iter()
        .copied()
        .filter(|id| run.broadcast.contains_key(id))
        .zip(outcomes.iter())
        .collect();
    for r in &run.history.ops {
        let (Some(id), Some(f)) = (r.id, r.final_view()) else {
            continue;
        };
        match outcome_of.get(&id) {
            Some(o) if **o == f.outcome => {}
            Some(o) => replay_v.push(format!(
                "final view of {id} ({}) is {:?}; replay gives {:?}",
                r.call.name, f.outcome, o
            )),
            None => replay_v.push(format!("{id} got a final view but is not committed")),
        }
    }
    let user = |s: &BTreeMap<Bytes, Bytes>| -> BTreeMap<Bytes, Bytes> {
        s.iter()
            .filter(|(k, _)| k.first() != Some(&INTERNAL_KEY_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let (held, replayed) = match reference {
        Some(r) if run.broadcast_complete => (r.clone(), state.clone()),
        Some(r) => (user(r), user(&state)),
        None => return state,
    };
    if held != replayed {
        replay_v.push(format!(
            "the committed state differs from a replay of the committed order: {}",
            first_differences(&held, &replayed, 5)
        ));
    }
    state
}

/// The first `n` keys whose values differ between `held` and `replayed`,
/// written `key: held → replayed` (`-` for no value).
fn first_differences(
    held: &BTreeMap<Bytes, Bytes>,
    replayed: &BTreeMap<Bytes, Bytes>,
    n: usize,
) -> String {
    let keys: BTreeSet<&Bytes> = held.keys().chain(replayed.keys()).collect();
    let show = |v: Option<&Bytes>| {
        v.map_or_else(
            || "-".to_owned(),
            |b| {
                let text = String::from_utf8_lossy(b);
                text.chars().take(40).collect()
            },
        )
    };
    let differing: Vec<String> = keys
        .into_iter()
        .filter(|k| held.get(*k) != replayed.get(*k))
        .map(|k| {
            format!(
                "{}: {} → {}",
                String::from_utf8_lossy(k),
                show(held.get(k)),
                show(replayed.get(k))
            )
        })
        .collect();
    let more = differing.len().saturating_sub(n);
    let mut text = differing[..differing.len().min(n)].join("; ");
    if more > 0 {
        text.push_str(&format!(" (and {more} more keys)"));
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use creek_core::ViewKind;
    use creek_types::value::{encode_args, Value};

    use super::*;
    use crate::history::{OpRecord, SeenView};

    /// Two replicas that committed the same three strong ops of one client
    /// through replica 1, with every final view as a replay gives it.
    struct Fixture {
        history: History,
        committed: Vec<OpId>,
        calls: Vec<ProcCall>,
        state: BTreeMap<Bytes, Bytes>,
        registry: Registry,
    }

    /// The committed order `calls` replayed from an empty state, version
    /// records kept as a replica keeps them.
    fn replay_kept<'a>(
        registry: &Registry,
        calls: impl IntoIterator<Item = &'a ProcCall>,
    ) -> (Vec<Outcome>, BTreeMap<Bytes, Bytes>) {
        replay_versioned(
            registry,
            TxnLimits::default(),
            BTreeMap::new(),
            creek_procs::versions::meta_key,
            (1..).zip(calls),
        )
    }

    fn put(k: &str, v: &str) -> ProcCall {
        ProcCall::new("kv.put", encode_args(&[Value::from(k), Value::from(v)]))
    }

    fn id(seq: u64) -> OpId {
        OpId::new(ReplicaId(1), seq)
    }

    /// The commit times of the fixture's three ops.
    const TIMES: [u64; 3] = [100, 200, 300];

    fn fixture() -> Fixture {
        let registry = Registry::with_builtins();
        let calls = vec![put("a", "1"), put("b", "2"), put("a", "3")];
        let (outcomes, state) = replay_kept(&registry, &calls);
        let ops = calls
            .iter()
            .zip(outcomes)
            .enumerate()
            .map(|(i, (call, outcome))| {
                let seq = i as u64 + 1;
                OpRecord {
                    client: 0,
                    replica: 0,
                    id: Some(id(seq)),
                    call: call.clone(),
                    strong: true,
                    wants_final: true,
                    invoked_at_us: seq * 10,
                    views: vec![SeenView {
                        at_us: seq * 10 + 5,
                        kind: ViewKind::Stable,
                        outcome,
                        time: TIMES[i],
                    }],
                    origin_crashed: false,
                    origin_left: false,
                    lost: false,
                }
            })
            .collect();
        Fixture {
            history: History { ops },
            committed: (1..=3).map(id).collect(),
            calls,
            state,
            registry,
        }
    }

    fn replica<'a>(
        id: u16,
        committed: &'a [OpId],
        state: &BTreeMap<Bytes, Bytes>,
    ) -> ReplicaEnd<'a> {
        ReplicaEnd {
            id: ReplicaId(id),
            committed,
            commit_times: &TIMES,
            finalized: committed.len() as u64,
            pending: 0,
            committed_state: state.clone(),
            lost: false,
            wiped: false,
        }
    }

    fn run_end(f: &Fixture) -> RunEnd<'_> {
        RunEnd {
            history: &f.history,
            replicas: vec![
                replica(1, &f.committed, &f.state),
                replica(2, &f.committed, &f.state),
            ],
            broadcast: f.committed.iter().copied().zip(&f.calls).collect(),
            broadcast_complete: true,
            registry: &f.registry,
            keeps_versions: true,
            initial_state: BTreeMap::new(),
            prefix_violation: None,
            settled: true,
            settled_after_us: Some(1_000),
            liveness_bound_us: 2_000_000,
            lin_budget_steps: 100_000,
        }
    }

    fn first_arg_key(call: &ProcCall) -> Vec<Bytes> {
        match creek_types::value::decode_args(&call.args)
            .ok()
            .and_then(|a| a.into_iter().next())
        {
            Some(Value::Bytes(b)) => vec![b],
            _ => Vec::new(),
        }
    }

    /// The names of the checks that failed.
    fn failed(run: RunEnd<'_>) -> Vec<&'static str> {
        check_run(run, &first_arg_key, &|_, _| Vec::new())
            .into_iter()
            .filter(|c| !c.ok)
            .map(|c| c.name)
            .collect()
    }

    /// A snapshot read of `key` by client 0, invoked at `at_us`, answered
    /// with `value` read at commit time `time`.
    fn snapshot_read(at_us: u64, key: &str, value: &str, time: u64) -> OpRecord {
        OpRecord {
            client: 0,
            replica: 1,
            id: None,
            call: ProcCall::new("kv.get", encode_args(&[Value::from(key)])),
            strong: false,
            wants_final: false,
            invoked_at_us: at_us,
            views: vec![SeenView {
                at_us: at_us + 1,
                kind: ViewKind::Snapshot,
                outcome: Ok(Value::from(value).encode()),
                time,
            }],
            origin_crashed: false,
            origin_left: false,
            lost: false,
        }
    }

    #[test]
    fn snapshot_views_are_judged_against_the_order_cut_at_their_time() {
        let mut f = fixture();
        // At 250 the first two puts are in: `a` is "1". At 300, "3". (A
        // client of its own: client 0 saw time 300 already.)
        f.history.ops.push(snapshot_read(100, "a", "1", 250));
        f.history.ops.push(snapshot_read(110, "a", "3", 300));
        for r in &mut f.history.ops[3..] {
            r.client = 1;
        }
        let checks = check_run(run_end(&f), &first_arg_key, &|_, _| Vec::new());
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        // A view showing the third put at 250 saw past its time.
        f.history.ops.push(snapshot_read(120, "a", "3", 250));
        f.history.ops.last_mut().unwrap().client = 1;
        assert_eq!(failed(run_end(&f)), ["snapshot_reads"]);
    }

    #[test]
    fn a_client_that_reads_older_than_it_saw_fails_the_read_times() {
        let mut f = fixture();
        // Client 0 read at time 300 (its own write's final view at 300
        // does not count: the client cache shows its writes), then at 150.
        f.history.ops.push(snapshot_read(36, "a", "3", 300));
        f.history.ops.push(snapshot_read(40, "b", "", 150));
        f.history.ops.last_mut().unwrap().views[0].outcome = Ok(Value::Nil.encode());
        let checks = check_run(run_end(&f), &first_arg_key, &|_, _| Vec::new());
        let snap = checks.iter().find(|c| c.name == "snapshot_reads").unwrap();
        assert_eq!(snap.violations.len(), 1, "{snap:?}");
        assert!(snap.violations[0].contains("went back in time"), "{snap:?}");
    }

    #[test]
    fn a_snapshot_read_must_show_the_clients_own_write_until_the_snapshot_has_it() {
        let mut f = fixture();
        // Client 0's last write of `a` ("3") committed at 300; it reads `a`
        // at 250, where the committed state has "1".
        let mut read = snapshot_read(40, "a", "1", 250);
        read.call.request_id = Some(creek_types::ClientRequestId { client: 1, seq: 9 });
        f.history.ops.push(read);
        let judge = |history: &History, got: &str| {
            let returned = BTreeMap::from([((1, 9), Ok(Value::from(got).encode()))]);
            crate::snapshot::check_read_your_writes(history, &returned)
        };
        assert!(
            judge(&f.history, "3").is_empty(),
            "the cached write laid over the snapshot"
        );
        let v = judge(&f.history, "1");
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("was not shown"), "{v:?}");
        // Read at 300, the snapshot holds the write: the view as it is.
        f.history.ops.last_mut().unwrap().views[0].time = 300;
        f.history.ops.last_mut().unwrap().views[0].outcome = Ok(Value::from("3").encode());
        assert!(judge(&f.history, "3").is_empty());
    }

    #[test]
    fn replicas_that_time_a_position_differently_fail() {
        let f = fixture();
        let mut run = run_end(&f);
        run.replicas[1].commit_times = &[100, 250, 300];
        assert_eq!(failed(run), ["snapshot_reads"]);
    }

    #[test]
    fn a_clean_run_passes_every_check_in_report_order() {
        let f = fixture();
        let checks = check_run(run_end(&f), &first_arg_key, &|_, _| Vec::new());
        let names: Vec<_> = checks.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "committed_prefix",
                "converged",
                "liveness",
                "replay_matches",
                "no_lost_acks",
                "linearizable",
                "real_time",
                "session_order",
                "snapshot_reads",
                "workload",
            ]
        );
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        let lin = checks.iter().find(|c| c.name == "linearizable").unwrap();
        assert_eq!(
            lin.note.as_deref(),
            Some("linearizable: 3 ops in 2 partitions")
        );
    }

    #[test]
    fn the_workload_judges_the_replayed_state() {
        let f = fixture();
        let checks = check_run(run_end(&f), &first_arg_key, &|h, state| {
            assert_eq!(h.ops.len(), 3);
            let user = state.keys().filter(|k| k.first() != Some(&0)).count();
            vec![format!("{user} keys")]
        });
        let workload = checks.iter().find(|c| c.name == "workload").unwrap();
        assert_eq!(workload.violations, ["2 keys"]);
    }

    #[test]
    fn a_replica_behind_fails_convergence_and_a_diverging_one_the_prefix() {
        let f = fixture();
        let behind = replay_kept(&f.registry, &f.calls[..2]).1;
        let mut run = run_end(&f);
        run.replicas[1] = replica(2, &f.committed[..2], &behind);
        assert_eq!(failed(run), ["converged"]);

        let swapped = [id(2), id(1), id(3)];
        let mut run = run_end(&f);
        run.replicas[1].committed = &swapped;
        // The reference order is the longest list, the last of equal ones:
        // here the swapped one, which also inverts the client's ops; its
        // replay gives the keys other revisions than the state holds.
        assert_eq!(
            failed(run),
            [
                "committed_prefix",
                "converged",
                "replay_matches",
                "real_time",
                "session_order"
            ]
        );
    }

    #[test]
    fn a_replica_that_lost_its_data_is_left_out_of_convergence() {
        let f = fixture();
        let mut run = run_end(&f);
        run.replicas[1] = replica(2, &[], &BTreeMap::new());
        assert_eq!(failed(run), ["converged"]);

        let mut run = run_end(&f);
        run.replicas[1] = replica(2, &[], &BTreeMap::new());
        run.replicas[1].lost = true;
        assert!(failed(run).is_empty());
    }

    #[test]
    fn a_final_view_a_replay_contradicts_fails_replay_and_linearizability() {
        let mut f = fixture();
        f.history.ops[2].views[0].outcome = Ok(Value::from("wrong").encode());
        assert_eq!(failed(run_end(&f)), ["replay_matches", "linearizable"]);
    }

    #[test]
    fn an_unsettled_run_fails_convergence_and_a_late_one_liveness() {
        let f = fixture();
        let mut run = run_end(&f);
        run.settled = false;
        run.settled_after_us = None;
        assert_eq!(failed(run), ["converged", "liveness"]);

        let mut run = run_end(&f);
        run.settled_after_us = Some(run.liveness_bound_us + 1);
        assert_eq!(failed(run), ["liveness"]);
    }

    #[test]
    fn an_acknowledged_op_missing_from_the_order_is_lost() {
        let mut f = fixture();
        // r1.3 was answered and broadcast, yet no replica committed it.
        f.committed.pop();
        f.state = replay_kept(&f.registry, &f.calls[..2]).1;
        let mut run = run_end(&f);
        run.broadcast.insert(id(3), &f.calls[2]);
        let checks = check_run(run, &first_arg_key, &|_, _| Vec::new());
        let lost = checks.iter().find(|c| c.name == "no_lost_acks").unwrap();
        assert_eq!(
            lost.violations,
            [
                "r1.3 was broadcast but never committed",
                "r1.3 (kv.put) was acknowledged but is not in the final order",
            ]
        );
    }

    #[test]
    fn a_driver_that_knows_only_its_clients_ops_skips_the_others_in_the_replay() {
        let mut f = fixture();
        let clients: BTreeMap<OpId, ProcCall> =
            f.committed.iter().copied().zip(f.calls.clone()).collect();
        // A no-op of the replica's own, committed between the client's ops.
        f.committed.insert(1, OpId::new(ReplicaId(2), 1));
        let mut run = run_end(&f);
        run.broadcast = clients.iter().map(|(id, c)| (*id, c)).collect();
        assert_eq!(failed(run.clone()), ["replay_matches"]);
        run.broadcast_complete = false;
        assert_eq!(failed(run), Vec::<&str>::new());
        // A final view the committed order does not give is still caught.
        f.history.ops[0].views[0].outcome = Ok(Value::from("wrong").encode());
        let mut run = run_end(&f);
        run.broadcast = clients.iter().map(|(id, c)| (*id, c)).collect();
        run.broadcast_complete = false;
        assert_eq!(failed(run), ["replay_matches", "linearizable"]);
    }

    #[test]
    fn an_unacknowledged_op_may_be_gone_with_its_origins_disk() {
        let mut f = fixture();
        f.committed.pop();
        f.state = replay_kept(&f.registry, &f.calls[..2]).1;
        // r1.3 never got a view: its origin lost its disk before sending it on.
        f.history.ops[2].views.clear();
        f.history.ops[2].origin_crashed = true;
        let mut run = run_end(&f);
        run.broadcast.insert(id(3), &f.calls[2]);
        assert_eq!(failed(run.clone()), ["no_lost_acks"]);
        run.replicas[0].wiped = true;
        assert!(failed(run).is_empty());
    }

    #[test]
    fn an_unacknowledged_op_the_committed_order_voided_is_not_lost() {
        let mut f = fixture();
        f.committed.pop();
        // r1.3 never got a view: its origin crashed, its push was lost on
        // the way, and the restarted origin's void op r1.4 voided it.
        f.history.ops[2].views.clear();
        f.history.ops[2].origin_crashed = true;
        let void = creek_procs::void::void_call(&[2, 3]);
        f.committed.push(id(4));
        let mut calls = f.calls[..2].to_vec();
        calls.push(void.clone());
        f.state = replay_kept(&f.registry, &calls).1;
        let broadcast: BTreeMap<OpId, &ProcCall> = [
            (id(1), &f.calls[0]),
            (id(2), &f.calls[1]),
            (id(3), &f.calls[2]),
            (id(4), &void),
        ]
        .into_iter()
        .collect();
        let mut run = run_end(&f);
        run.broadcast = broadcast.clone();
        assert!(failed(run).is_empty());

        // Without the void op in the order, it is lost.
        let mut f2 = fixture();
        f2.committed.pop();
        f2.state = replay_kept(&f2.registry, &f2.calls[..2]).1;
        f2.history.ops[2].views.clear();
        f2.history.ops[2].origin_crashed = true;
        let mut run = run_end(&f2);
        run.broadcast.insert(id(3), &f2.calls[2]);
        assert_eq!(failed(run), ["no_lost_acks"]);

        // An acknowledged op is lost even if voided.
        let mut f3 = fixture();
        f3.committed.pop();
        f3.committed.push(id(4));
        f3.state = f.state.clone();
        let mut run = run_end(&f3);
        run.broadcast = [
            (id(1), &f3.calls[0]),
            (id(2), &f3.calls[1]),
            (id(3), &f3.calls[2]),
            (id(4), &void),
        ]
        .into_iter()
        .collect();
        let checks = check_run(run, &first_arg_key, &|_, _| Vec::new());
        let lost = checks.iter().find(|c| c.name == "no_lost_acks").unwrap();
        assert_eq!(
            lost.violations,
            ["r1.3 (kv.put) was acknowledged but is not in the final order"]
        );
    }
}
