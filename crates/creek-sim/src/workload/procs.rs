//! `procs`: user procedures (docs/procedures.md) registered at run time and
//! called under faults.
//!
//! The setup, strong and in order, creates the keyspaces `members` and
//! `tallies` (strong) and `inboxes` and `notes` (weak) with
//! `keyspace.create`, then registers two files with `proc.register`:
//! `examples/procedures/message_groups.creek` (`join`, `post`, `inbox`) and
//! `procs.creek` beside this file (`tally`, `total`, `note`, `notes_of`).
//! Clients then call them: `join` and `tally` strong (they write strong
//! keyspaces), `post`, `inbox` and `total` weak or strong, `note` and
//! `notes_of` weak. `post`, `inbox`, `total` and `notes_of` scan.
//!
//! **Calls before the registration is known.** The clients start once
//! every setup call has its final view at replica 0, but another replica
//! may not have learnt the registration yet (it is behind, partitioned, or
//! restarting). A call reaching it is refused at invoke (unknown procedure)
//! and never becomes an op: the simulated client tries again after its
//! think time, so it is not in the history. An op that runs where the name
//! is unknown aborts (`unknown procedure "NAME"`); the workload treats such
//! an abort as allowed, with no effect, like any abort. Since the
//! registration is committed before any client op is invoked, a final view
//! with that abort cannot be a sequential execution of the committed order,
//! and `replay_matches` would report it.
//!
//! Checks, besides the common ones (the linearizability check covers the
//! setup and the strong calls on group `g0` and tally `t0` whose results
//! depend on strong data only — `join`, `post`, `tally`, `total` — in one
//! partition, since they all need the definitions; see [`Workload::keys`]):
//! - every setup call succeeded, and no final view aborts except as above;
//! - the committed members are exactly pairs some `join` asked for, and
//!   include every `join` with a final view;
//! - every committed post is in the inboxes of members of its group only,
//!   with its message; a post with a final view `n` is in exactly `n`
//!   inboxes, including every member whose `join` is known to precede it
//!   (answered before a strong post was invoked, or earlier in the post's
//!   session) and no member whose `join` was invoked after the post was
//!   answered; every inbox entry belongs to a post;
//! - a final view of `inbox` holds posted messages only;
//! - a tally's committed value lies between the sums of the `tally` calls
//!   known to be applied and those possibly applied, and every `tally` with
//!   a final view `t` left the note `t`; every note belongs to a `note` or
//!   `tally` call, with its text.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use creek_check::history::{History, OpRecord};
use creek_core::OpId;
use creek_procs::Registry;
use creek_shard::{Placement, ShardMap};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

use super::{
    args_of, bounded, describe, final_result, logical_ops, pick_mode, show, NextOp, Workload,
    WorkloadConfig,
};
use crate::rng::Rng;

/// The message-groups example, registered as users would.
pub const MESSAGE_GROUPS: &str =
    include_str!("../../../../examples/procedures/message_groups.creek");
/// This workload's own file: tallies with notes, and scans of both.
pub const TALLIES: &str = include_str!("procs.creek");

/// `join(group, user)`: strong.
pub const JOIN: &str = "join";
/// `post(group, msg) -> int`: any level.
pub const POST: &str = "post";
/// `inbox(user) -> list`: any level.
pub const INBOX: &str = "inbox";
/// `tally(k, n) -> int`: strong.
pub const TALLY: &str = "tally";
/// `total(from, to) -> int`: any level.
pub const TOTAL: &str = "total";
/// `note(k, msg)`: weak.
pub const NOTE: &str = "note";
/// `notes_of(k) -> int`: weak.
pub const NOTES_OF: &str = "notes_of";

/// The keyspaces the setup creates, with their labels.
pub const KEYSPACES: &[(&str, &str)] = &[
    ("members", "strong"),
    ("inboxes", "weak"),
    ("tallies", "strong"),
    ("notes", "weak"),
];

/// Groups `g0..`.
const GROUPS: usize = 4;
/// Users `u0..` (fewer than ten: `inbox`'s scan of `u/` .. `u0` relies on it).
const USERS: usize = 8;
/// Tallies `t0..` (fewer than ten, for the same reason).
const TALLY_KEYS: usize = 6;

/// The key under which the linearizability check sees the calls it checks
/// (one partition: they all depend on the registration).
const LIN_KEY: &[u8] = b"procs";
/// The group whose `join` and strong `post` calls the linearizability
/// check sees.
const LIN_GROUP: &str = "g0";
/// The tally whose strong `tally` and `total(t0, t1)` calls it sees.
const LIN_TALLY: &str = "t0";
const LIN_TALLY_END: &str = "t1";

/// The `procs` workload.
#[derive(Clone, Debug)]
pub struct ProcsWorkload {
    strong_share: f64,
    final_share: f64,
    /// The message-groups source it registers (a planted bug changes it).
    groups_source: String,
    /// Messages and notes generated so far (makes each one unique).
    next_text: u64,
}

impl ProcsWorkload {
    /// The workload for `config` (`strong_share`, `final_share`).
    pub fn new(config: &WorkloadConfig) -> Self {
        ProcsWorkload {
            strong_share: config.strong_share,
            final_share: config.final_share,
            groups_source: MESSAGE_GROUPS.to_owned(),
            next_text: 0,
        }
    }

    /// A deliberately broken variant, to show the checks can fail: it
    /// registers a `post` whose scan of the members stops after one, so a
    /// post reaches one member of its group only.
    pub fn with_planted_bug(config: &WorkloadConfig) -> Self {
        let mut w = ProcsWorkload::new(config);
        w.groups_source = MESSAGE_GROUPS.replacen("\"0\", 1000)", "\"0\", 1)", 1);
        w
    }

    fn fresh_text(&mut self, client: u32) -> Bytes {
        self.next_text += 1;
        Bytes::from(format!("m{client}-{}", self.next_text))
    }
}

fn call(name: &str, args: &[Value]) -> ProcCall {
    ProcCall::new(name, encode_args(args))
}

fn b(s: String) -> Value {
    Value::Bytes(Bytes::from(s))
}

/// `r<origin>.<seq>`: what `op_id()` gives the op `id`.
fn op_text(id: OpId) -> String {
    format!("r{}.{}", id.origin.0, id.seq)
}

/// The committed entries of keyspace `ks`, by their key in the keyspace.
fn keyspace<'a>(
    state: &'a BTreeMap<Bytes, Bytes>,
    ks: &str,
) -> impl Iterator<Item = (&'a [u8], &'a Bytes)> + 'a {
    let prefix = Bytes::from(format!("\0ks/{ks}\0"));
    let n = prefix.len();
    state
        .range(prefix.clone()..)
        .take_while(move |(k, _)| k.starts_with(&prefix))
        .map(move |(k, v)| (&k[n..], v))
}

/// `a/b` split at its first `/` into text.
fn split(key: &[u8]) -> Option<(String, String)> {
    let s = std::str::from_utf8(key).ok()?;
    let (a, b) = s.split_once('/')?;
    Some((a.to_owned(), b.to_owned()))
}

/// Two byte-string arguments.
fn two_bytes(op: &OpRecord) -> Option<(Bytes, Bytes)> {
    match args_of(&op.call).as_deref() {
        Some([Value::Bytes(a), Value::Bytes(b)]) => Some((a.clone(), b.clone())),
        _ => None,
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Workload for ProcsWorkload {
    fn name(&self) -> &'static str {
        "procs"
    }

    fn register(&self, _registry: &mut Registry) {}

    fn setup(&self) -> Vec<ProcCall> {
        let mut calls: Vec<ProcCall> = KEYSPACES
            .iter()
            .map(|(ks, label)| call("keyspace.create", &[Value::from(*ks), Value::from(*label)]))
            .collect();
        for source in [self.groups_source.as_str(), TALLIES] {
            calls.push(call(
                "proc.register",
                &[Value::Bytes(Bytes::from(source.to_owned()))],
            ));
        }
        calls
    }

    fn next_op(&mut self, rng: &mut Rng, client: u32) -> NextOp {
        let roll = rng.index(100);
        let group = b(format!("g{}", rng.index(GROUPS)));
        let user = b(format!("u{}", rng.index(USERS)));
        let tally_key = format!("t{}", rng.index(TALLY_KEYS));
        let (strong, wants_final, call) = if roll < 15 {
            (true, true, call(JOIN, &[group, user]))
        } else if roll < 40 {
            let (s, f) = pick_mode(rng, self.strong_share, self.final_share);
            let msg = Value::Bytes(self.fresh_text(client));
            (s, f, call(POST, &[group, msg]))
        } else if roll < 55 {
            let (s, f) = pick_mode(rng, self.strong_share / 2.0, self.final_share);
            (s, f, call(INBOX, &[user]))
        } else if roll < 70 {
            let n = 1 + rng.index(5) as i64;
            (true, true, call(TALLY, &[b(tally_key), Value::Int(n)]))
        } else if roll < 80 {
            let (s, f) = pick_mode(rng, self.strong_share, self.final_share);
            let from = rng.index(TALLY_KEYS);
            let to = from + 1 + rng.index(TALLY_KEYS - from);
            (
                s,
                f,
                call(TOTAL, &[b(format!("t{from}")), b(format!("t{to}"))]),
            )
        } else if roll < 92 {
            let (_, f) = pick_mode(rng, 0.0, self.final_share);
            let msg = Value::Bytes(self.fresh_text(client));
            (false, f, call(NOTE, &[b(tally_key), msg]))
        } else {
            let (_, f) = pick_mode(rng, 0.0, self.final_share);
            (false, f, call(NOTES_OF, &[b(tally_key)]))
        };
        NextOp {
            call,
            strong,
            wants_final,
        }
    }

    /// The setup and the strong calls whose results depend on strong data
    /// only, all on one key, for one group and one tally: every checked
    /// call needs the definitions, so they share one partition, and the
    /// whole run's strong calls in one partition (some 1,700) can exhaust
    /// the search budget and cost ten times a `kv` run; the other groups
    /// and tallies are judged by `check` and `replay_matches`. A strong
    /// `inbox` or `notes_of` reads weak data (the specification does not
    /// see the weak ops), and weak calls are left out: they write weak
    /// keyspaces only, which no checked call reads. The check runs the calls as the replicas did (level and op
    /// id set: `OpRecord::executed_call`).
    /// Setup (keyspace definitions, procedure registrations) runs on every
    /// shard; every other call on the shard its keyspaces are pinned to.
    fn route_keys(&self, call: &ProcCall) -> Vec<super::RouteKey> {
        match call.name.as_ref() {
            "keyspace.create" | "proc.register" => Vec::new(),
            _ => vec![(Some(KEYSPACES[0].0.to_owned()), Bytes::new())],
        }
    }

    /// The procedures move data between its keyspaces, so they are all
    /// pinned to one shard (the last).
    fn place(&mut self, map: &mut ShardMap) -> Result<(), String> {
        let shard = *map.shard_ids().last().ok_or("a map without shards")?;
        for (ks, _) in KEYSPACES {
            *map = map
                .place(map.epoch, Some(ks), Placement::Pinned(shard))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn keys(&self, call: &ProcCall) -> Vec<Bytes> {
        let args = args_of(call).unwrap_or_default();
        let first = |want: &str| matches!(args.first(), Some(Value::Bytes(b)) if b == want);
        let checked = match call.name.as_ref() {
            "keyspace.create" | "proc.register" => true,
            JOIN | POST => call.strong && first(LIN_GROUP),
            TALLY => call.strong && first(LIN_TALLY),
            TOTAL => {
                call.strong
                    && first(LIN_TALLY)
                    && matches!(args.get(1), Some(Value::Bytes(b)) if b == LIN_TALLY_END)
            }
            _ => false,
        };
        if checked {
            vec![Bytes::from_static(LIN_KEY)]
        } else {
            Vec::new()
        }
    }

    fn check(&self, history: &History, committed_state: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        let mut out = Vec::new();
        check_outcomes(history, &mut out);
        let members = check_members(history, committed_state, &mut out);
        check_posts(history, committed_state, &members, &mut out);
        check_tallies(history, committed_state, &mut out);
        bounded(out)
    }
}

/// Setup calls succeeded; no final view aborts, except as a call of a
/// procedure not known there (see the module documentation).
fn check_outcomes(history: &History, out: &mut Vec<String>) {
    for op in &history.ops {
        let Some(Err(abort)) = op.final_view().map(|v| &v.outcome) else {
            continue;
        };
        if op.is_setup() {
            out.push(format!(
                "procs: setup call {} failed: {}",
                op.call.name, abort.0
            ));
        } else if !abort.0.starts_with("unknown procedure") {
            out.push(format!(
                "procs: final view of {} by {} aborted: {}",
                op.call.name,
                describe(op),
                abort.0
            ));
        }
    }
}

/// Committed members (group → users) are pairs some `join` asked for and
/// include every `join` with a final view. Returns them.
fn check_members(
    history: &History,
    state: &BTreeMap<Bytes, Bytes>,
    out: &mut Vec<String>,
) -> BTreeMap<String, BTreeSet<String>> {
    let joins = || {
        history
            .ops
            .iter()
            .filter(|op| op.call.name.as_ref() == JOIN)
    };
    let asked: BTreeSet<(Bytes, Bytes)> = joins().filter_map(two_bytes).collect();
    let mut members: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (key, value) in keyspace(state, "members") {
        match split(key) {
            Some((g, u))
                if asked.contains(&(Bytes::from(g.clone()), Bytes::from(u.clone())))
                    && value.as_ref() == u.as_bytes() =>
            {
                members.entry(g).or_default().insert(u);
            }
            _ => out.push(format!(
                "procs: committed member {} = {}, which no join asked for",
                show(&Bytes::copy_from_slice(key)),
                show(value)
            )),
        }
    }
    for op in joins().filter(|op| matches!(final_result(op), Some(Ok(_)))) {
        let Some((g, u)) = two_bytes(op) else {
            continue;
        };
        if !members
            .get(&text(&g))
            .is_some_and(|m| m.contains(&text(&u)))
        {
            out.push(format!(
                "procs: join({}, {}) by {} has a final view but {} is not a committed member",
                show(&g),
                show(&u),
                describe(op),
                show(&u)
            ));
        }
    }
    members
}

/// Every post is in the inboxes of members of its group only (and, with a
/// final view, in exactly as many as it says, including every member known
/// to have joined before it); `inbox` answers hold posted messages.
fn check_posts(
    history: &History,
    state: &BTreeMap<Bytes, Bytes>,
    members: &BTreeMap<String, BTreeSet<String>>,
    out: &mut Vec<String>,
) {
    // Committed inbox entries by the posting op: user → message.
    let mut delivered: BTreeMap<String, BTreeMap<String, Bytes>> = BTreeMap::new();
    for (key, msg) in keyspace(state, "inboxes") {
        match split(key) {
            Some((user, post)) => {
                delivered.entry(post).or_default().insert(user, msg.clone());
            }
            None => out.push(format!(
                "procs: malformed inbox key {}",
                show(&Bytes::copy_from_slice(key))
            )),
        }
    }
    let joins: Vec<&OpRecord> = history
        .ops
        .iter()
        .filter(|op| op.call.name.as_ref() == JOIN)
        .collect();
    let mut posted: BTreeSet<Bytes> = BTreeSet::new();
    for op in history
        .ops
        .iter()
        .filter(|op| op.call.name.as_ref() == POST)
    {
        let (Some(id), Some((group, msg))) = (op.id, two_bytes(op)) else {
            continue;
        };
        posted.insert(msg.clone());
        let g = text(&group);
        let what = format!("post({}, {}) by {}", show(&group), show(&msg), describe(op));
        let inboxes = delivered.remove(&op_text(id)).unwrap_or_default();
        let group_members = members.get(&g).cloned().unwrap_or_default();
        for (user, m) in &inboxes {
            if !group_members.contains(user) {
                out.push(format!("procs: {what} reached {user}, not a member of {g}"));
            }
            if *m != msg {
                out.push(format!("procs: {what} left {} in {user}'s inbox", show(m)));
            }
        }
        let Some(Ok(result)) = final_result(op) else {
            continue;
        };
        if result != Value::Int(inboxes.len() as i64) {
            out.push(format!(
                "procs: {what} answered {result} but is in {} inboxes",
                inboxes.len()
            ));
        }
        let answered_at = op.final_view().map_or(u64::MAX, |v| v.at_us);
        for join in &joins {
            let Some((jg, ju)) = two_bytes(join) else {
                continue;
            };
            if jg != group {
                continue;
            }
            let u = text(&ju);
            let joined_at = join
                .final_view()
                .filter(|v| v.outcome.is_ok())
                .map(|v| v.at_us);
            let before = joined_at.is_some_and(|t| {
                (op.strong && t < op.invoked_at_us)
                    || (join.client == op.client && t <= op.invoked_at_us)
            });
            if before && !inboxes.contains_key(&u) {
                out.push(format!(
                    "procs: {what} missed {u}, whose join ({}) precedes it",
                    describe(join)
                ));
            }
        }
        for u in inboxes.keys() {
            let possible = joins.iter().any(|j| {
                two_bytes(j).is_some_and(|(jg, ju)| jg == group && text(&ju) == *u)
                    && j.invoked_at_us <= answered_at
            });
            if !possible {
                out.push(format!(
                    "procs: {what} reached {u}, whose join was invoked after the post was answered"
                ));
            }
        }
    }
    for (post, inboxes) in delivered {
        out.push(format!(
            "procs: inbox entries of {post} ({} of them), which is no post",
            inboxes.len()
        ));
    }
    for op in history
        .ops
        .iter()
        .filter(|op| op.call.name.as_ref() == INBOX)
    {
        match final_result(op) {
            None => {}
            Some(Ok(Value::List(msgs))) => {
                for m in msgs {
                    let known = matches!(&m, Value::Bytes(b) if posted.contains(b));
                    if !known {
                        out.push(format!(
                            "procs: inbox by {} returned {m}, which nobody posted",
                            describe(op)
                        ));
                    }
                }
            }
            Some(other) => out.push(format!(
                "procs: inbox by {} returned {other:?}, not a list",
                describe(op)
            )),
        }
    }
}

/// Tallies lie within the sums of applied and possibly applied `tally`
/// calls; every final `tally` left its note; every note belongs to a call.
fn check_tallies(history: &History, state: &BTreeMap<Bytes, Bytes>, out: &mut Vec<String>) {
    let notes: BTreeMap<&[u8], &Bytes> = keyspace(state, "notes").collect();
    // Notes each call may have left: key/op → the text (None: a tally's
    // total, known only with a final view).
    let mut expected: BTreeMap<String, Option<Bytes>> = BTreeMap::new();
    let mut bounds: BTreeMap<String, (i128, i128)> = BTreeMap::new();
    for group in logical_ops(history) {
        let Some(first) = group.first() else { continue };
        match first.call.name.as_ref() {
            TALLY => {
                let (k, n) = match args_of(&first.call).as_deref() {
                    Some([Value::Bytes(k), Value::Int(n)]) => (text(k), i128::from(*n)),
                    _ => continue,
                };
                let finals: Vec<&OpRecord> = group
                    .iter()
                    .copied()
                    .filter(|op| op.final_view().is_some())
                    .collect();
                let b = bounds.entry(k.clone()).or_default();
                let applied = finals
                    .iter()
                    .find(|op| matches!(final_result(op), Some(Ok(_))));
                if let Some(op) = applied {
                    b.0 += n;
                    b.1 += n;
                    if let (Some(id), Some(Ok(Value::Int(t)))) = (op.id, final_result(op)) {
                        let key = format!("{k}/{}", op_text(id));
                        match notes.get(key.as_bytes()) {
                            Some(v) if v.as_ref() == t.to_string().as_bytes() => {}
                            other => out.push(format!(
                                "procs: tally by {} answered {t}; its note {key} is {}",
                                describe(op),
                                other.map_or("missing".to_owned(), |v| show(v))
                            )),
                        }
                    }
                } else if finals.is_empty() {
                    b.0 += n.min(0);
                    b.1 += n.max(0);
                }
                for op in &group {
                    if let Some(id) = op.id {
                        expected.insert(format!("{k}/{}", op_text(id)), None);
                    }
                }
            }
            NOTE => {
                for op in &group {
                    if let (Some(id), Some((k, msg))) = (op.id, two_bytes(op)) {
                        expected.insert(format!("{}/{}", text(&k), op_text(id)), Some(msg));
                    }
                }
            }
            _ => {}
        }
    }
    for (key, value) in &notes {
        match expected.get(&text(key)) {
            Some(None) => {}
            Some(Some(msg)) if msg == *value => {}
            Some(Some(msg)) => out.push(format!(
                "procs: note {} = {}, but the note call wrote {}",
                text(key),
                show(value),
                show(msg)
            )),
            None => out.push(format!(
                "procs: note {} = {}, which no call wrote",
                text(key),
                show(value)
            )),
        }
    }
    let committed: BTreeMap<String, &Bytes> = keyspace(state, "tallies")
        .map(|(k, v)| (text(k), v))
        .collect();
    let keys: BTreeSet<&String> = bounds.keys().chain(committed.keys()).collect();
    for k in keys {
        let (lo, hi) = bounds.get(k).copied().unwrap_or_default();
        let value = match committed.get(k) {
            None => 0,
            Some(raw) => match text(raw).parse::<i64>() {
                Ok(v) => i128::from(v),
                Err(_) => {
                    out.push(format!(
                        "procs: tally {k} = {} is not an integer",
                        show(raw)
                    ));
                    continue;
                }
            },
        };
        if value < lo || value > hi {
            out.push(format!(
                "procs: tally {k} = {value}, outside [{lo}, {hi}] (tallies with a final view .. tallies invoked)"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use creek_check::history::SeenView;
    use creek_core::{ReplicaId, ViewKind};
    use creek_exec::basic::replay;
    use creek_exec::TxnLimits;

    use super::*;
    use crate::workload::testkit::{history, record};

    /// Setup plus `n` generated ops run one after another as the replicas
    /// would (level and op id set, one client per op round-robin), every
    /// op with a stable view: the final state and the history.
    fn run(w: &mut ProcsWorkload, seed: u64, n: usize) -> (BTreeMap<Bytes, Bytes>, History) {
        let registry = Registry::with_builtins();
        let mut rng = Rng::new(seed);
        let mut ops: Vec<OpRecord> = Vec::new();
        for (i, c) in w.setup().into_iter().enumerate() {
            let mut r = record(i as u64 + 1, c, vec![]);
            r.client = creek_check::history::SETUP_CLIENT;
            ops.push(r);
        }
        for i in 0..n {
            let next = w.next_op(&mut rng, i as u32 % 5);
            let seq = ops.len() as u64 + 1;
            let mut r = record(seq * 10, next.call, vec![]);
            r.id = Some(OpId::new(ReplicaId(1 + (i % 3) as u16), seq));
            r.client = i as u32 % 5;
            r.strong = next.strong;
            r.wants_final = next.wants_final;
            ops.push(r);
        }
        let calls: Vec<ProcCall> = ops.iter().map(|r| r.executed_call()).collect();
        let (outcomes, state) = replay(&registry, TxnLimits::default(), &calls);
        for (r, outcome) in ops.iter_mut().zip(outcomes) {
            r.views.push(SeenView {
                at_us: r.invoked_at_us + 1,
                kind: ViewKind::Stable,
                outcome,
                time: 0,
            });
        }
        (state, history(ops))
    }

    #[test]
    fn sequential_run_passes() {
        let mut w = ProcsWorkload::new(&WorkloadConfig::default());
        let (state, h) = run(&mut w, 3, 600);
        assert_eq!(w.check(&h, &state), Vec::<String>::new());
        let names: BTreeSet<&str> = h.ops.iter().map(|op| op.call.name.as_ref()).collect();
        for name in [JOIN, POST, INBOX, TALLY, TOTAL, NOTE, NOTES_OF] {
            assert!(names.contains(name), "{name} never called");
        }
        // The posts reached members, and reads saw data.
        let reached = h
            .ops
            .iter()
            .filter(|op| op.call.name.as_ref() == POST)
            .any(|op| matches!(final_result(op), Some(Ok(Value::Int(n))) if n >= 2));
        assert!(reached);
        assert!(keyspace(&state, "notes").count() > 50);
    }

    #[test]
    fn planted_bug_is_caught() {
        let mut w = ProcsWorkload::with_planted_bug(&WorkloadConfig::default());
        assert_ne!(w.groups_source, MESSAGE_GROUPS, "the bug was not planted");
        let (state, h) = run(&mut w, 3, 600);
        let out = w.check(&h, &state);
        assert!(out.iter().any(|l| l.contains("missed")), "{out:?}");
    }

    #[test]
    fn tampered_state_is_caught() {
        let mut w = ProcsWorkload::new(&WorkloadConfig::default());
        let (mut state, h) = run(&mut w, 5, 300);
        let (k, _) = state
            .iter()
            .find(|(k, _)| k.starts_with(b"\0ks/inboxes\0"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .expect("some inbox entry");
        state.insert(k, Bytes::from_static(b"forged"));
        state.insert(
            Bytes::from_static(b"\0ks/tallies\0t0"),
            Bytes::from_static(b"100000"),
        );
        let out = w.check(&h, &state);
        assert!(out.iter().any(|l| l.contains("\"forged\"")), "{out:?}");
        assert!(
            out.iter().any(|l| l.contains("tally t0 = 100000")),
            "{out:?}"
        );
    }

    #[test]
    fn keys_cover_strong_calls_on_strong_data() {
        let w = ProcsWorkload::new(&WorkloadConfig::default());
        let mut post = call(POST, &[Value::from("g0"), Value::from("m")]);
        assert!(w.keys(&post).is_empty(), "a weak post is not checked");
        post.strong = true;
        assert_eq!(w.keys(&post), vec![Bytes::from_static(LIN_KEY)]);
        let mut other = call(POST, &[Value::from("g1"), Value::from("m")]);
        other.strong = true;
        assert!(w.keys(&other).is_empty(), "one group is checked");
        let mut total = call(TOTAL, &[Value::from("t0"), Value::from("t2")]);
        total.strong = true;
        assert!(w.keys(&total).is_empty(), "t1 is not in the partition");
        let mut total = call(TOTAL, &[Value::from("t0"), Value::from("t1")]);
        total.strong = true;
        assert_eq!(w.keys(&total), vec![Bytes::from_static(LIN_KEY)]);
        let mut inbox = call(INBOX, &[Value::from("u0")]);
        inbox.strong = true;
        assert!(w.keys(&inbox).is_empty(), "inbox reads weak data");
    }
}
