//! Linearizability of strong ops: the Wing–Gong search with Lowe's
//! improvements, against the real procedures as the sequential specification.
//!
//! # What is checked
//!
//! Every strong op with an id is one [`LinOp`]: its invocation time, and the
//! time and outcome of its final view (stable or confirmation) when the
//! client got one. The history is linearizable when there is a total order
//! of the ops that
//!
//! - respects real time: when `a` was answered strictly before `b` was
//!   invoked, `a` comes first (an answer and an invocation at the same
//!   microsecond are treated as concurrent, which never reports a false
//!   violation);
//! - explains every answer: running the ops one after another from an empty
//!   store with [`creek_procs::execute_call`], each op with a known outcome
//!   returns exactly that outcome;
//! - may leave out, or place anywhere after its invocation, an op whose
//!   outcome is unknown (its origin crashed, or it was never answered):
//!   Lowe's treatment of such an op as answered at +∞ with any outcome.
//!
//! The specification sees only these ops, so the check is meaningful for
//! keys that weak ops do not write; workloads say which calls to check
//! through their `keys` (an empty key list skips the call).
//!
//! # Algorithm
//!
//! P-compositionality: ops are grouped with a union-find over their keys
//! (ops sharing any key land in one partition) and each partition is
//! searched on its own from an empty state.
//!
//! Per partition, the call and answer events sorted by time form a doubly
//! linked list (dancing links). A configuration is the set of placed
//! (linearized) ops plus the state they produce. The search is a depth-first
//! walk over configurations: the candidates for the next linearization point
//! are the calls before the first answer event still in the list (an op
//! answered before another was invoked must come first). Placing one runs
//! the procedure, compares the outcome, applies the writes (keeping an undo
//! log) and lifts the op's two events out of the list; backtracking undoes
//! exactly that. The partition is linearizable once every op with a known
//! outcome is placed; when every branch is exhausted it is not, and the
//! reason names the deepest dead end: the op whose answer could not be
//! passed, what it observed and what the state there would give.
//!
//! Candidate order and prunings, each of which keeps the search complete:
//!
//! - **Inert ops placed at once.** A known op that never writes when its
//!   outcome fits — a read-only procedure, or an observed abort without a
//!   deduplication record — is placed as soon as it fits, as the only
//!   candidate: moving it earlier in any linearization keeps it valid.
//! - **Just-in-time order.** Otherwise the effectful known ops are tried by
//!   answer time (the op whose answer closes the window first, Lowe's JIT
//!   linearization), then the unknown ones, by invocation.
//! - **Unknown-outcome ops.** Unknown read-only calls are dropped; an
//!   unknown op whose execution would change nothing is not placed there
//!   (later or never is equivalent).
//! - **Lowe's memo, with subsumption.** Visited configurations are keyed by
//!   two 64-bit hashes — a Zobrist hash of the placed effectful known ops
//!   (XOR of a pseudo-random word per op) and an order-independent hash of
//!   the state (wrapping sum of a mixed hash per key–value pair), both
//!   updated in O(writes) per step, never a state copy — and per key hold
//!   the antichain of what else was placed: inert ops (more is better: an
//!   obligation met that changes nothing) and unknown ops (fewer is better:
//!   they are optional and nobody must follow them). A configuration
//!   dominated by a visited one is pruned. A hash collision could only prune
//!   a configuration wrongly; with 128 bits of key that is negligible.
//!
//! Cost: a step is one procedure execution, an O(w) scan of the window of
//! `w` concurrent ops and a hash probe. The walk visits each reachable
//! configuration at most once, so it is bounded by `n · 2^w · |states|` for
//! `n` ops. A linearizable history is usually found on the first branch, in
//! about `n · w` steps (3000 ops on one key with ~10 concurrent: a few
//! milliseconds). A violation needs every configuration before it explored,
//! so its cost grows with its depth and with concurrency (3000 ops, ~10
//! concurrent, violation at op 1500: 0.1–2.5 s; ~15 concurrent: may exceed
//! 20 M steps). Memory: one cache entry per visited configuration, about
//! 20–40 bytes per step. `budget_steps` bounds both; past it the verdict is
//! [`LinResult::Inconclusive`].

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hasher;

use bytes::Bytes;
use creek_exec::{Outcome, ProcCall, SnapshotRead, TxnLimits, VersionNo};
use creek_procs::{execute_call, Registry};
use creek_types::value::{decode_args, Value};
use rustc_hash::{FxHashMap, FxHasher};

use crate::history::History;

/// One strong op as the linearizability check sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinOp {
    /// Index into [`History::ops`].
    pub index: usize,
    /// What was called.
    pub call: ProcCall,
    /// Virtual time of the invocation, microseconds.
    pub invoked_at_us: u64,
    /// `Some((time, outcome))` when the client got the final (stable or
    /// confirmation) view; `None` when unknown (origin crashed, or never
    /// answered) — such an op may or may not have taken effect, at any time
    /// after invocation.
    pub completed: Option<(u64, Outcome)>,
}

/// A partition of the history with no linearization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinViolation {
    /// The keys of the failing partition, sorted.
    pub keys: Vec<Bytes>,
    /// [`History::ops`] indices of the ops in the failing partition, sorted.
    pub ops: Vec<usize>,
    /// What went wrong, for a person: the deepest point the search reached
    /// and the op it could not place there.
    pub reason: String,
}

/// The verdict of [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinResult {
    /// Every partition is linearizable.
    Ok {
        /// Number of partitions checked.
        partitions: usize,
        /// Number of ops checked (ops with a non-empty key list).
        ops: usize,
    },
    /// A partition has no linearization (the first one found).
    Violation(LinViolation),
    /// The search budget ran out before a verdict.
    Inconclusive {
        /// Where the budget ran out.
        reason: String,
    },
}

/// The strong ops of `history` that have an id, in history order, with the
/// final view's time and outcome when the client received one.
pub fn strong_ops(history: &History) -> Vec<LinOp> {
    history
        .ops
        .iter()
        .enumerate()
        .filter(|(_, r)| r.strong && r.id.is_some())
        .map(|(index, r)| LinOp {
            index,
            call: r.executed_call(),
            invoked_at_us: r.invoked_at_us,
            completed: r.final_view().map(|v| (v.at_us, v.outcome.clone())),
        })
        .collect()
}

/// Check that `ops` are linearizable with respect to the procedures of
/// `registry` run under `limits`, from the state `initial` (a bulk load;
/// usually empty), partitioned by `keys` (ops with no keys are skipped). Partitions are searched smallest first; the first
/// violation is returned. At most `budget_steps` search steps are spent in
/// total; past that the result is [`LinResult::Inconclusive`].
pub fn check(
    ops: &[LinOp],
    keys: &dyn Fn(&ProcCall) -> Vec<Bytes>,
    registry: &Registry,
    limits: TxnLimits,
    initial: &BTreeMap<Bytes, Bytes>,
    budget_steps: u64,
) -> LinResult {
    let parts = partition(ops, keys);
    let checked: usize = parts.iter().map(|p| p.members.len()).sum();
    let mut budget = budget_steps;
    for part in &parts {
        let members: Vec<&LinOp> = part.members.iter().map(|&i| &ops[i]).collect();
        // A partition's ops touch its keys only: it starts from their
        // initial values.
        let start: BTreeMap<Bytes, Bytes> = part
            .keys
            .iter()
            .filter_map(|k| initial.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        match search(registry, limits, &members, start, &mut budget) {
            Searched::Linearizable => {}
            Searched::NotLinearizable(detail) => {
                let mut indices: Vec<usize> = members.iter().map(|o| o.index).collect();
                indices.sort_unstable();
                let reason = format!(
                    "no linearization of the {} strong ops on {}: {detail}",
                    members.len(),
                    show_keys(&part.keys)
                );
                return LinResult::Violation(LinViolation {
                    keys: part.keys.iter().cloned().collect(),
                    ops: indices,
                    reason,
                });
            }
            Searched::Exhausted => {
                return LinResult::Inconclusive {
                    reason: format!(
                        "search budget of {budget_steps} steps exhausted on the partition of {} \
                         strong ops on {}",
                        members.len(),
                        show_keys(&part.keys)
                    ),
                };
            }
        }
    }
    LinResult::Ok {
        partitions: parts.len(),
        ops: checked,
    }
}

/// One group of ops sharing keys.
struct Partition {
    keys: BTreeSet<Bytes>,
    /// Indices into the `ops` slice given to [`check`], ascending.
    members: Vec<usize>,
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// Union-find over keys. Partitions come out smallest first, ties broken by
/// their first op, so the order is deterministic.
fn partition(ops: &[LinOp], keys: &dyn Fn(&ProcCall) -> Vec<Bytes>) -> Vec<Partition> {
    let op_keys: Vec<Vec<Bytes>> = ops.iter().map(|o| keys(&o.call)).collect();
    let mut parent: Vec<usize> = (0..ops.len()).collect();
    let mut owner: BTreeMap<&Bytes, usize> = BTreeMap::new();
    for (i, ks) in op_keys.iter().enumerate() {
        for k in ks {
            match owner.get(k) {
                Some(&j) => {
                    let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                    if a != b {
                        parent[a.max(b)] = a.min(b);
                    }
                }
                None => {
                    owner.insert(k, i);
                }
            }
        }
    }
    let mut groups: BTreeMap<usize, Partition> = BTreeMap::new();
    for (i, ks) in op_keys.iter().enumerate() {
        if ks.is_empty() {
            continue;
        }
        let root = find(&mut parent, i);
        let part = groups.entry(root).or_insert_with(|| Partition {
            keys: BTreeSet::new(),
            members: Vec::new(),
        });
        part.keys.extend(ks.iter().cloned());
        part.members.push(i);
    }
    let mut parts: Vec<Partition> = groups.into_values().collect();
    parts.sort_by_key(|p| (p.members.len(), p.members.first().copied()));
    parts
}

/// The search state of one partition as a snapshot for `execute_call`.
struct StateView<'a>(&'a BTreeMap<Bytes, Bytes>);

impl SnapshotRead for StateView<'_> {
    fn read(&self, key: &[u8]) -> (Option<Bytes>, VersionNo) {
        (self.0.get(key).cloned(), VersionNo::ABSENT)
    }

    /// The partition's keys only: a history whose ops scan must put the
    /// scanned range's keys in one partition for the verdict to hold.
    fn scan(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes, VersionNo)>) {
        creek_exec::basic::scan_map(self.0, from, to, limit, VersionNo::ABSENT, out);
    }
}

/// SplitMix64's finalizer: a strong 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The contribution of one key–value pair to the state hash (0 for absent).
fn entry_hash(key: &[u8], value: Option<&Bytes>) -> u64 {
    let Some(value) = value else { return 0 };
    let mut h = FxHasher::default();
    h.write_usize(key.len());
    h.write(key);
    h.write_usize(value.len());
    h.write(value);
    mix(h.finish() ^ 0x5851_F42D_4C95_7F2D)
}

/// The Zobrist word of the `i`-th op of a partition.
fn zobrist(i: usize) -> u64 {
    mix((i as u64)
        .wrapping_add(1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Apply `writes`, updating `hash`; returns the undo log (old values).
fn apply(
    state: &mut BTreeMap<Bytes, Bytes>,
    hash: &mut u64,
    writes: Vec<(Bytes, Option<Bytes>)>,
) -> Vec<(Bytes, Option<Bytes>)> {
    let mut undo = Vec::with_capacity(writes.len());
    for (k, v) in writes {
        let new_h = entry_hash(&k, v.as_ref());
        let old = match v {
            Some(v) => state.insert(k.clone(), v),
            None => state.remove(&k),
        };
        *hash = hash
            .wrapping_sub(entry_hash(&k, old.as_ref()))
            .wrapping_add(new_h);
        undo.push((k, old));
    }
    undo
}

/// Revert [`apply`]: restore old values newest first (the hash is restored
/// by the caller).
fn rollback(state: &mut BTreeMap<Bytes, Bytes>, undo: Vec<(Bytes, Option<Bytes>)>) {
    for (k, old) in undo.into_iter().rev() {
        match old {
            Some(v) => state.insert(k, v),
            None => state.remove(&k),
        };
    }
}

const NIL: usize = usize::MAX;
const HEAD: usize = 0;

/// One event of the dancing-links list.
struct Node {
    /// The op (index into the partition's ops).
    op: usize,
    /// For a call event: its answer event, or `NIL` when the outcome is
    /// unknown (answered at +∞: no answer event). For an answer event: `NIL`.
    ret: usize,
    is_call: bool,
}

/// The events of a partition in time order, doubly linked behind `HEAD`.
/// Node numbers follow time order, so comparing two answer nodes compares
/// their answer times.
struct Events {
    nodes: Vec<Node>,
    next: Vec<usize>,
    prev: Vec<usize>,
}

impl Events {
    fn new(ops: &[&LinOp]) -> Self {
        // (time, call before answer at the same time, history index, op)
        let mut evs: Vec<(u64, u8, usize, usize)> = Vec::with_capacity(ops.len() * 2);
        for (j, op) in ops.iter().enumerate() {
            evs.push((op.invoked_at_us, 0, op.index, j));
            if let Some((t, _)) = &op.completed {
                evs.push(((*t).max(op.invoked_at_us), 1, op.index, j));
            }
        }
        evs.sort_unstable();
        let n = evs.len() + 1;
        let mut nodes = Vec::with_capacity(n);
        nodes.push(Node {
            op: NIL,
            ret: NIL,
            is_call: false,
        });
        let mut call_node = vec![NIL; ops.len()];
        for (pos, &(_, kind, _, j)) in evs.iter().enumerate() {
            let id = pos + 1;
            let is_call = kind == 0;
            nodes.push(Node {
                op: j,
                ret: NIL,
                is_call,
            });
            if is_call {
                call_node[j] = id;
            } else if let Some(c) = call_node.get(j).copied().filter(|&c| c != NIL) {
                // The call sorts before its answer, so it is already there.
                nodes[c].ret = id;
            }
        }
        let next = (0..n)
            .map(|i| if i + 1 < n { i + 1 } else { NIL })
            .collect();
        let prev = (0..n).map(|i| if i == 0 { NIL } else { i - 1 }).collect();
        Events { nodes, next, prev }
    }

    fn unlink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        self.next[p] = x;
        if n != NIL {
            self.prev[n] = x;
        }
    }

    /// Remove a call event and its answer event.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        let r = self.nodes[call].ret;
        if r != NIL {
            self.unlink(r);
        }
    }

    /// Undo [`Self::lift`] (in reverse order, as dancing links require).
    fn unlift(&mut self, call: usize) {
        let r = self.nodes[call].ret;
        if r != NIL {
            self.relink(r);
        }
        self.relink(call);
    }
}

/// What a configuration has placed beyond its cache key: the inert ops
/// (see [`Search::inert`]) and the unknown-outcome ops.
///
/// Placed inert ops are every inert op answered before `frontier` (the
/// first answer event still in the list: all known ops answered earlier are
/// placed) plus `extra`, the placed ones answered later.
struct Placed {
    frontier: u32,
    /// Answer nodes of placed inert ops answered after `frontier`, ascending.
    extra: Box<[u32]>,
    /// Bitset over the unknown-outcome ops.
    unknown: Box<[u64]>,
}

impl Placed {
    /// Whether `self` can do whatever `other` can: same key (placed
    /// effectful known ops, state), at least the inert ops of `other`
    /// placed (an inert op placed is an obligation met, and it changes
    /// nothing), at most its unknown ops (they are optional and constrain
    /// nobody).
    fn dominates(&self, other: &Placed) -> bool {
        other.frontier <= self.frontier
            && other
                .extra
                .iter()
                .all(|r| *r < self.frontier || self.extra.binary_search(r).is_ok())
            && self
                .unknown
                .iter()
                .zip(other.unknown.iter())
                .all(|(mine, theirs)| mine & !theirs == 0)
    }
}

/// Lowe's memo of explored configurations, with subsumption.
///
/// Key: (Zobrist hash of the placed effectful known ops, state hash); per
/// key, the antichain of visited [`Placed`]. A configuration dominated by a
/// visited one is pruned: the visited one either failed, or is an ancestor
/// whose remaining branches cover it.
#[derive(Default)]
struct Cache {
    map: FxHashMap<(u64, u64), Seen>,
}

/// The antichain of one key; almost always a single configuration, kept
/// inline to save an allocation per key.
enum Seen {
    One(Placed),
    Many(Vec<Placed>),
}

impl Cache {
    /// Record a visit; `false` when an earlier visit dominates it.
    fn visit(&mut self, key: (u64, u64), placed: Placed) -> bool {
        use std::collections::hash_map::Entry;
        match self.map.entry(key) {
            Entry::Vacant(v) => {
                v.insert(Seen::One(placed));
                true
            }
            Entry::Occupied(mut o) => {
                let seen = o.get_mut();
                match seen {
                    Seen::One(s) if s.dominates(&placed) => false,
                    Seen::One(s) if placed.dominates(s) => {
                        *s = placed;
                        true
                    }
                    Seen::Many(list) if list.iter().any(|s| s.dominates(&placed)) => false,
                    Seen::Many(list) => {
                        list.retain(|s| !placed.dominates(s));
                        list.push(placed);
                        true
                    }
                    Seen::One(_) => {
                        let Seen::One(first) = std::mem::replace(seen, Seen::Many(Vec::new()))
                        else {
                            return true;
                        };
                        *seen = Seen::Many(vec![first, placed]);
                        true
                    }
                }
            }
        }
    }
}

/// One linearized op, with what undoes it.
struct Chosen {
    node: usize,
    undo: Vec<(Bytes, Option<Bytes>)>,
    prev_state_hash: u64,
}

/// One level of the search: the candidates for the next linearization
/// point at the current configuration.
struct Level {
    /// Where this level's candidates start in the shared candidate stack.
    start: usize,
    /// The next candidate to try (index into the candidate stack).
    next: usize,
    /// The answer event closing the window of candidates (`NIL` if none).
    stop: usize,
    /// The candidate placed from this level, while its subtree is explored.
    chosen: Option<Chosen>,
}

enum Searched {
    Linearizable,
    /// The explanation of the deepest dead end.
    NotLinearizable(String),
    Exhausted,
}

/// The deepest dead end: an op whose answer the search could not pass.
struct Blame {
    op: usize,
    depth: usize,
    expected: Outcome,
}

/// The search over one partition.
struct Search<'a> {
    registry: &'a Registry,
    limits: TxnLimits,
    ops: Vec<&'a LinOp>,
    /// Per op: known, and never writes when its observed outcome fits — a
    /// read-only procedure, or an abort (without a deduplication record).
    /// Placing such an op changes nothing, so it is placed as soon as it
    /// fits (moving it earlier in any linearization keeps it valid).
    inert: Vec<bool>,
    /// Per op: its bit among the unknown-outcome ops (`NIL` for known ops).
    unknown_bit: Vec<usize>,
    /// Per inert op: the hash of the last state found not to fit it (inert
    /// ops are checked at every level while they wait; this skips repeats).
    misfit: Vec<Option<u64>>,
    events: Events,
    state: BTreeMap<Bytes, Bytes>,
    state_hash: u64,
    /// Zobrist hash of the placed effectful (known, not inert) ops.
    known_hash: u64,
    /// Answer nodes of the placed inert ops.
    inert_placed: BTreeSet<usize>,
    /// Bitset of the placed unknown ops.
    unknown_set: Vec<u64>,
    known_left: usize,
    cache: Cache,
    cands: Vec<usize>,
    levels: Vec<Level>,
    blame: Option<Blame>,
}

impl<'a> Search<'a> {
    /// A search from `state` (its hash is relative: 0 for where it starts).
    fn new(
        registry: &'a Registry,
        limits: TxnLimits,
        members: &[&'a LinOp],
        state: BTreeMap<Bytes, Bytes>,
    ) -> Self {
        let is_read_only = |o: &LinOp| registry.get(&o.call.name).is_some_and(|p| p.read_only);
        // Unknown-outcome read-only calls can change nothing: leave them out.
        let ops: Vec<&LinOp> = members
            .iter()
            .copied()
            .filter(|o| o.completed.is_some() || !is_read_only(o))
            .collect();
        let inert = ops
            .iter()
            .map(|o| match &o.completed {
                None => false,
                Some((_, Err(_))) => o.call.request_id.is_none() || is_read_only(o),
                Some((_, Ok(_))) => is_read_only(o),
            })
            .collect();
        let mut unknowns = 0;
        let unknown_bit = ops
            .iter()
            .map(|o| {
                if o.completed.is_some() {
                    NIL
                } else {
                    unknowns += 1;
                    unknowns - 1
                }
            })
            .collect();
        let known_left = ops.iter().filter(|o| o.completed.is_some()).count();
        let events = Events::new(&ops);
        let misfit = vec![None; ops.len()];
        Search {
            registry,
            limits,
            ops,
            inert,
            unknown_bit,
            misfit,
            events,
            state,
            state_hash: 0,
            known_hash: 0,
            inert_placed: BTreeSet::new(),
            unknown_set: vec![0; unknowns.div_ceil(64)],
            known_left,
            cache: Cache::default(),
            cands: Vec::new(),
            levels: Vec::new(),
            blame: None,
        }
    }

    fn execute(&self, j: usize) -> creek_exec::Executed {
        execute_call(
            self.registry,
            &StateView(&self.state),
            self.limits,
            &self.ops[j].call,
        )
    }

    /// Flip the op of call node `node` in the placed sets.
    fn toggle(&mut self, node: usize) {
        let j = self.events.nodes[node].op;
        if self.inert[j] {
            let r = self.events.nodes[node].ret;
            if !self.inert_placed.remove(&r) {
                self.inert_placed.insert(r);
            }
        } else {
            match self.unknown_bit[j] {
                NIL => self.known_hash ^= zobrist(j),
                b => self.unknown_set[b / 64] ^= 1 << (b % 64),
            }
        }
    }

    /// The first answer event in the list (`NIL` if none).
    fn frontier(&self) -> usize {
        let mut node = self.events.next[HEAD];
        while node != NIL && self.events.nodes[node].is_call {
            node = self.events.next[node];
        }
        node
    }

    /// Push the level for the current configuration. Candidates are the
    /// calls before the first answer event. An inert op that fits the
    /// current state is the only candidate. Otherwise: effectful known ops
    /// by answer time (Lowe's just-in-time order: the op whose answer closes
    /// the window first), then unknown ones.
    fn open_level(&mut self) {
        let start = self.cands.len();
        let mut forced = None;
        let mut node = self.events.next[HEAD];
        while node != NIL && self.events.nodes[node].is_call {
            let j = self.events.nodes[node].op;
            if let Some((_, observed)) = &self.ops[j].completed {
                if !self.inert[j] {
                    self.cands.push(node);
                } else if self.misfit[j] != Some(self.state_hash) {
                    if self.execute(j).outcome == *observed {
                        forced = Some(node);
                        break;
                    }
                    self.misfit[j] = Some(self.state_hash);
                }
            }
            node = self.events.next[node];
        }
        let stop = self.frontier();
        if let Some(f) = forced {
            self.cands.truncate(start);
            self.cands.push(f);
        } else {
            let nodes = &self.events.nodes;
            self.cands[start..].sort_unstable_by_key(|&n| nodes[n].ret);
            let mut node = self.events.next[HEAD];
            while node != NIL && self.events.nodes[node].is_call {
                if self.ops[self.events.nodes[node].op].completed.is_none() {
                    self.cands.push(node);
                }
                node = self.events.next[node];
            }
        }
        self.levels.push(Level {
            start,
            next: start,
            stop,
            chosen: None,
        });
    }

    /// Try to place candidate `node` now; `Some` with its undo on success.
    fn place(&mut self, node: usize) -> Option<Chosen> {
        let j = self.events.nodes[node].op;
        let ex = self.execute(j);
        let known = self.ops[j].completed.is_some();
        if let Some((_, observed)) = &self.ops[j].completed {
            if ex.outcome != *observed {
                return None;
            }
        }
        let prev_state_hash = self.state_hash;
        let undo = apply(&mut self.state, &mut self.state_hash, ex.writes);
        let chosen = Chosen {
            node,
            undo,
            prev_state_hash,
        };
        // An unknown op that changes nothing here may as well be placed
        // later or never.
        if !known
            && chosen
                .undo
                .iter()
                .all(|(k, old)| self.state.get(k) == old.as_ref())
        {
            rollback(&mut self.state, chosen.undo);
            self.state_hash = prev_state_hash;
            return None;
        }
        self.toggle(node);
        if known {
            self.known_left -= 1;
        }
        self.events.lift(node);
        let frontier = self.frontier();
        let placed = Placed {
            frontier: node_u32(frontier),
            extra: self
                .inert_placed
                .range(frontier.saturating_add(1)..)
                .map(|&n| node_u32(n))
                .collect(),
            unknown: self.unknown_set.as_slice().into(),
        };
        if self.cache.visit((self.known_hash, self.state_hash), placed) {
            Some(chosen)
        } else {
            self.unplace(chosen);
            None
        }
    }

    /// Undo a placement.
    fn unplace(&mut self, chosen: Chosen) {
        let j = self.events.nodes[chosen.node].op;
        rollback(&mut self.state, chosen.undo);
        self.state_hash = chosen.prev_state_hash;
        self.toggle(chosen.node);
        if self.ops[j].completed.is_some() {
            self.known_left += 1;
        }
        self.events.unlift(chosen.node);
    }

    fn run(&mut self, budget: &mut u64) -> Searched {
        if self.known_left == 0 {
            return Searched::Linearizable;
        }
        self.open_level();
        loop {
            if *budget == 0 {
                return Searched::Exhausted;
            }
            *budget -= 1;
            let Some(level) = self.levels.last_mut() else {
                return Searched::NotLinearizable(explain(&self.ops, self.blame.as_ref()));
            };
            if level.next < self.cands.len() {
                let node = self.cands[level.next];
                level.next += 1;
                if let Some(chosen) = self.place(node) {
                    if self.known_left == 0 {
                        return Searched::Linearizable;
                    }
                    if let Some(level) = self.levels.last_mut() {
                        level.chosen = Some(chosen);
                    }
                    self.open_level();
                }
            } else {
                let (start, stop) = (level.start, level.stop);
                let depth = self.levels.len() - 1;
                if stop != NIL && self.blame.as_ref().is_none_or(|b| depth > b.depth) {
                    let j = self.events.nodes[stop].op;
                    self.blame = Some(Blame {
                        op: j,
                        depth,
                        expected: self.execute(j).outcome,
                    });
                }
                self.cands.truncate(start);
                self.levels.pop();
                if let Some(chosen) = self.levels.last_mut().and_then(|l| l.chosen.take()) {
                    self.unplace(chosen);
                }
            }
        }
    }
}

/// Wing–Gong–Lowe search over one partition.
fn search(
    registry: &Registry,
    limits: TxnLimits,
    members: &[&LinOp],
    start: BTreeMap<Bytes, Bytes>,
    budget: &mut u64,
) -> Searched {
    if members.len() >= MAX_OPS {
        // Event numbers must fit the cache's 32-bit fields.
        return Searched::Exhausted;
    }
    Search::new(registry, limits, members, start).run(budget)
}

/// Most ops one partition may hold (two events each, numbered in `u32`).
const MAX_OPS: usize = (u32::MAX / 4) as usize;

/// An event number as stored in the cache (`NIL` becomes `u32::MAX`; real
/// events are fewer than `2 * MAX_OPS + 1`).
fn node_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn explain(ops: &[&LinOp], blame: Option<&Blame>) -> String {
    let known = ops.iter().filter(|o| o.completed.is_some()).count();
    let Some(b) = blame else {
        return format!("{known} have known outcomes; no op could be placed");
    };
    let op = ops[b.op];
    let (answered, observed) = match &op.completed {
        Some((t, o)) => (format!("{t}"), show_outcome(o)),
        None => ("?".to_owned(), "?".to_owned()),
    };
    format!(
        "{known} have known outcomes; the deepest search branch placed {} ops, then op #{} {} \
         (invoked at {} us, answered at {answered} us) could not be placed before its answer: \
         it observed {observed}, the state reached there gives {}",
        b.depth,
        op.index,
        show_call(&op.call),
        op.invoked_at_us,
        show_outcome(&b.expected),
    )
}

/// A call as `name(arg, ...)`, arguments decoded when they are [`Value`]s.
fn show_call(call: &ProcCall) -> String {
    match decode_args(&call.args) {
        Ok(args) => {
            let args: Vec<String> = args.iter().map(Value::to_string).collect();
            format!("{}({})", call.name, args.join(", "))
        }
        Err(_) => format!("{}(<{} bytes>)", call.name, call.args.len()),
    }
}

/// An outcome as `ok <value>` or `abort "<message>"`.
fn show_outcome(o: &Outcome) -> String {
    match o {
        Ok(b) => match Value::decode(b) {
            Ok(v) => format!("ok {v}"),
            Err(_) => format!("ok {}", Value::Bytes(b.clone())),
        },
        Err(a) => format!("abort {:?}", a.0),
    }
}

/// Up to eight keys, readable.
fn show_keys(keys: &BTreeSet<Bytes>) -> String {
    const SHOWN: usize = 8;
    let mut shown: Vec<String> = keys
        .iter()
        .take(SHOWN)
        .map(|k| Value::Bytes(k.clone()).to_string())
        .collect();
    if keys.len() > SHOWN {
        shown.push(format!("... ({} keys)", keys.len()));
    }
    format!("keys [{}]", shown.join(", "))
}

#[cfg(test)]
mod tests;
