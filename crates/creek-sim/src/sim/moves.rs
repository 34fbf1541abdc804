//! Moves of keys between shards under load (docs/shards.md, "Moving keys
//! between shards"): the `reshard` fault class. While clients run, the
//! simulator begins `SimConfig::moves` moves one after another, each of a
//! random slot range of one shard to another (and so, over a run, back
//! and forth), and drives each with the protocol's own mover
//! (`creek_procs::moves::mover`): its ops are strong ops of the directory
//! and the shards, under every fault the run has; the pages and values it
//! reads come from a replica's committed state, as the server's mover
//! reads them from a replica. A mover whose op's replica crashed or left
//! the group is replaced by one of the next term, as a new leader takes
//! the move over.
//!
//! What the runs check of it: the cluster's history across shards is
//! linearizable and the workload's invariants hold over the shards' data
//! together (`report::cross_shard_check`; every key from the shard the
//! final map gives it), no op ran on a shard that never owned its keys
//! during the run, and the run settles only once every move finished.

use creek_procs::builtins::directory::{MAP, MOVE};
use creek_procs::moves::copy::{export, moving};
use creek_procs::moves::mover::{Mover, Progress, Step, Where};
use creek_procs::moves::{Fence, FENCE_KEY};
use creek_procs::ownership::{split_owned, MAP_KEY as OWNED};
use creek_shard::{Move, MoveKeys, Placement, SLOTS};
use creek_types::value::{encode_args, Value};

use super::*;

/// The `client`s of the movers' ops in the history: one per mover term
/// (each mover is a session of its own, as each leader that drives a move
/// is), in a range below the sequencer's.
const MOVER_CLIENTS: u32 = 1 << 20;
const MOVER_CLIENT_LAST: u32 = super::mpo::SEQUENCER_CLIENT - super::mpo::SEQUENCER_CLIENTS;

/// Whether `client` is one of the movers'.
pub fn is_mover(client: u32) -> bool {
    (MOVER_CLIENT_LAST - MOVER_CLIENTS + 1..=MOVER_CLIENT_LAST).contains(&client)
}

/// How often the mover looks whether it can go on after a step could not
/// be taken (no replica to read or to run at).
const MOVER_US: u64 = 2_000;

/// What the mover's op in flight is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    /// Adding the spare shard to the map (`directory.set`).
    Add,
    /// Dropping the drained shard from the map (`directory.move`).
    Drop,
    /// Beginning the next move (`directory.move`).
    Begin,
    /// A strong `directory.map` for the mover.
    Read,
    /// An op the mover asked to run.
    Run,
}

/// The moves of a run.
#[derive(Default)]
pub(super) struct Moves {
    /// Moves begun so far.
    begun: usize,
    /// The mover of the move under way.
    mover: Option<Mover>,
    /// The last mover's term.
    term: u64,
    /// The history record of the op in flight, and what it is.
    pending: Option<(usize, Pending)>,
    /// Every map the directory held while moves ran (the ownership check
    /// accepts an op on a shard that owned its keys in one of them).
    pub(super) maps: Vec<Arc<ShardMap>>,
    /// How each move ended.
    pub(super) ended: Vec<Progress>,
    /// When each move begun reached each of its steps.
    pub(super) timeline: Vec<MoveTimes>,
    /// When the next move may begin (spread over the run, so that moves
    /// meet the faults).
    next_at: Option<u64>,
    /// The shard to add while moves run, until the map lists it.
    spare: Option<ShardId>,
    /// The shard being drained after the random moves, until it is
    /// dropped from the map.
    draining: Option<ShardId>,
    /// Whether the drain is over (or there is none: fewer than three
    /// shards).
    drained: bool,
}

impl Moves {
    /// The moves of a run that adds `spare` while it moves keys, and
    /// (with `drain`) drains a shard and drops it after them.
    pub(super) fn new(spare: Option<ShardId>, drain: bool) -> Moves {
        Moves {
            spare,
            drained: !drain,
            ..Moves::default()
        }
    }

    /// Whether a move is under way (a run settles only without one).
    pub(super) fn under_way(&self) -> bool {
        self.mover.is_some() || self.pending.is_some() || self.draining.is_some()
    }

    fn note_map(&mut self, map: &ShardMap) {
        if self.maps.iter().all(|m| m.epoch != map.epoch) {
            self.maps.push(Arc::new(map.clone()));
        }
    }
}

/// When one move reached its steps, in simulated microseconds (the
/// first mover to reach a step counts; a later term's mover goes over
/// steps again).
#[derive(Clone, Debug)]
pub struct MoveTimes {
    /// The keys that moved.
    pub the_move: Move,
    /// The mover began (the directory's map names the move).
    pub begun_us: u64,
    /// The copy was caught up and the switch asked of the directory.
    pub switching_us: Option<u64>,
    /// The directory switched; the source's release asked.
    pub releasing_us: Option<u64>,
    /// The source released the keys; the target's adoption asked. From
    /// here until `cleaning_us` no shard executes the moving keys.
    pub adopting_us: Option<u64>,
    /// The target executes the moving keys.
    pub cleaning_us: Option<u64>,
    /// The move was over.
    pub ended_us: Option<u64>,
}

impl MoveTimes {
    fn new(the_move: Move, now: u64) -> MoveTimes {
        MoveTimes {
            the_move,
            begun_us: now,
            switching_us: None,
            releasing_us: None,
            adopting_us: None,
            cleaning_us: None,
            ended_us: None,
        }
    }

    fn note(&mut self, phase: &str, now: u64) {
        let slot = match phase {
            "switching" => &mut self.switching_us,
            "releasing" => &mut self.releasing_us,
            "adopting" => &mut self.adopting_us,
            "cleaning up" => &mut self.cleaning_us,
            _ => return,
        };
        slot.get_or_insert(now);
    }
}

/// The epoch of the map a shard's committed state executes under.
fn held_epoch(state: &BTreeMap<Bytes, Bytes>) -> Option<u64> {
    let (_, map) = split_owned(state.get(OWNED)?)?;
    creek_shard::decode(&map).ok().map(|m| m.epoch)
}

impl Sim {
    /// Every `MOVER_US` while moves are wanted: begin the next move, or
    /// drive the one under way.
    pub(super) fn mover_tick(&mut self) {
        if self.cfg.moves == 0 {
            return;
        }
        self.mover_abandon_lost();
        // Under crashes, the target's leader fails over now and then in
        // the middle of a move: a mover of the next term takes over while
        // the old one's op may still take effect.
        if self.cfg.faults.crashes() && self.moves.mover.is_some() && self.rng.chance(0.02) {
            self.replace_mover();
        }
        self.mover_drive();
        let more = self.moves.under_way()
            || (self.moves.begun < self.cfg.moves && self.running_clients)
            || !self.moves.drained;
        if more {
            self.schedule(self.now + MOVER_US, Ev::Mover);
        }
    }

    /// The op in flight went to a replica that crashed or left its group:
    /// give up on it, and let a mover of the next term carry on (the
    /// server's new leader), unless it was a read or a begin.
    fn mover_abandon_lost(&mut self) {
        let Some((index, what)) = self.moves.pending else {
            return;
        };
        let at = self.history.ops[index].replica;
        if self.nodes[at].slot == Slot::Member && self.nodes[at].node.is_up() {
            return;
        }
        self.history.ops[index].origin_left = true;
        self.nodes[at].handles.retain(|_, i| *i != index);
        self.moves.pending = None;
        if what == Pending::Run {
            self.replace_mover();
        }
    }

    /// A mover of the next term takes the move over (the old one's op in
    /// flight, if any, is no longer waited for).
    fn replace_mover(&mut self) {
        if let Some(old) = self.moves.mover.take() {
            if matches!(self.moves.pending, Some((_, Pending::Run | Pending::Read))) {
                self.moves.pending = None;
            }
            self.moves.term += 1;
            let planted = self.planted();
            self.moves.mover = Some(Mover::new(old.the_move().clone(), self.moves.term, planted));
            *self.faults.entry("mover_replaced").or_default() += 1;
        }
    }

    fn planted(&self) -> creek_types::planted::PlantedBugs {
        self.registry.planted()
    }

    /// Take the mover's steps until one waits for an op (or none can be
    /// taken now).
    fn mover_drive(&mut self) {
        if self.moves.pending.is_some() {
            return;
        }
        if self.moves.mover.is_none() {
            let gap = self.cfg.duration_us / (2 * self.cfg.moves as u64 + 1);
            let next_at = *self
                .moves
                .next_at
                .get_or_insert_with(|| self.rng.range(gap / 2, gap));
            if self.now >= next_at {
                self.next_reshard();
            }
            return;
        }
        for _ in 0..64 {
            let Some(mover) = &self.moves.mover else {
                return;
            };
            let step = mover.step();
            let phase = mover.progress().phase;
            if let Some(t) = self.moves.timeline.last_mut() {
                t.note(phase, self.now);
            }
            if debug_log() {
                let what = match &step {
                    Step::Run { at, call } => format!("run {} at {at:?}", call.name),
                    other => format!("{other:?}").chars().take(120).collect(),
                };
                eprintln!(
                    "mover at {} us ({}): {what}",
                    self.now,
                    mover.progress().phase
                );
            }
            match step {
                Step::Done => {
                    if let Some(t) = self.moves.timeline.last_mut() {
                        t.ended_us.get_or_insert(self.now);
                    }
                    if let Some(done) = self.moves.mover.take() {
                        let gap = self.cfg.duration_us / (2 * self.cfg.moves as u64 + 1);
                        self.moves.next_at = Some(self.now + self.rng.range(gap / 2, gap));
                        self.moves.ended.push(done.progress());
                        *self.faults.entry("moves_ended").or_default() += 1;
                    }
                    return;
                }
                Step::ReadDirectory => {
                    let call = ProcCall::new(MAP, encode_args(&[]));
                    self.mover_invoke(Where::Directory, call, Pending::Read);
                    return;
                }
                Step::Run { at, call } => {
                    self.mover_invoke(at, call, Pending::Run);
                    return;
                }
                Step::Export {
                    shard,
                    from,
                    digests,
                    adopted,
                    mine,
                } => {
                    if !self.mover_export(shard, from, digests, adopted, mine) {
                        return;
                    }
                }
                Step::Fetch { keys, adopted } => {
                    let Some(m) = self.moves.mover.as_ref().map(|m| m.the_move().clone()) else {
                        return;
                    };
                    let Some(state) = self.shard_state(usize::from(m.from.0), adopted) else {
                        return;
                    };
                    let values = keys
                        .into_iter()
                        .map(|k| {
                            let v = state.get(&k).cloned();
                            (k, v)
                        })
                        .collect();
                    if let Some(mover) = self.moves.mover.as_mut() {
                        mover.fetched(values);
                    }
                }
            }
        }
    }

    /// The members of group `g`, from a random one on.
    fn members_from_random(&mut self, g: usize) -> Vec<usize> {
        let mut members = self.member_slots(g);
        if !members.is_empty() {
            let k = self.rng.index(members.len());
            members.rotate_left(k);
        }
        members
    }

    /// The committed state of an up member of shard `s` that holds its
    /// data and executes under a map at epoch `adopted` or later.
    fn shard_state(&mut self, s: usize, adopted: Option<u64>) -> Option<BTreeMap<Bytes, Bytes>> {
        let members = self.members_from_random(s);
        members
            .into_iter()
            .filter(|&i| self.nodes[i].node.is_up() && !self.nodes[i].node.is_lost())
            .map(|i| self.nodes[i].node.committed_state())
            .find(|state| adopted.is_none_or(|e| held_epoch(state) >= Some(e)))
    }

    /// Serve a [`Step::Export`]; `false` if no replica could.
    fn mover_export(
        &mut self,
        shard: ShardId,
        from: Bytes,
        digests: bool,
        adopted: Option<u64>,
        mine: Option<Fence>,
    ) -> bool {
        let Some(m) = self.moves.mover.as_ref().map(|m| m.the_move().clone()) else {
            return false;
        };
        let Some(state) = self.shard_state(usize::from(shard.0), adopted) else {
            return false;
        };
        let page = export(&m, from, digests, &mut |from, limit, out| {
            out.extend(
                state
                    .range::<[u8], _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
                    .take(limit)
                    .map(|(k, v)| (k.clone(), v.clone())),
            )
        });
        let mine = match mine {
            None => BTreeMap::new(),
            Some(fence) => {
                let holds = |st: &BTreeMap<Bytes, Bytes>| {
                    st.get(FENCE_KEY).and_then(|b| Fence::decode(b)) == Some(fence)
                };
                let members = self.members_from_random(usize::from(m.to.0));
                let target = members
                    .into_iter()
                    .filter(|&i| self.nodes[i].node.is_up() && !self.nodes[i].node.is_lost())
                    .map(|i| self.nodes[i].node.committed_state())
                    .find(holds);
                let Some(target) = target else {
                    return false;
                };
                target
                    .into_iter()
                    .filter(|(k, _)| moving(&m, k) && page.covers(k))
                    .collect()
            }
        };
        *self.faults.entry("move_pages").or_default() += 1;
        if let Some(mover) = self.moves.mover.as_mut() {
            mover.exported(page, &mine);
        }
        true
    }

    /// Invoke a mover's strong op at an up member of `at`.
    fn mover_invoke(&mut self, at: Where, call: ProcCall, what: Pending) {
        let group = match at {
            Where::Directory => self.cfg.shards,
            Where::Shard(s) => usize::from(s.0),
        };
        let up: Vec<usize> = self
            .member_slots(group)
            .into_iter()
            .filter(|&i| self.nodes[i].node.is_up() && !self.nodes[i].node.is_lost())
            .collect();
        if up.is_empty() {
            return;
        }
        let i = up[self.rng.index(up.len())];
        let mut call = call;
        call.strong = true;
        let request = Request {
            call,
            strong: true,
            views: Views::BOTH,
            read_time: 0,
            read_exact: false,
            read_revision: None,
        };
        let index = self.history.ops.len();
        let client = MOVER_CLIENT_LAST - (self.moves.term % u64::from(MOVER_CLIENTS)) as u32;
        if self.invoke_as(i, client, request) {
            self.moves.pending = Some((index, what));
        }
    }

    /// The next step of the run's resharding: take over a move no mover
    /// drives, add the spare shard, begin a random move, or drain a shard
    /// and drop it.
    fn next_reshard(&mut self) {
        let in_group = self.in_group();
        let Some(map) = self.directory_map(&in_group) else {
            return;
        };
        if let Some(m) = map.moving.clone().or_else(|| map.finishing.clone()) {
            // A move no mover drives (its begin committed after its mover
            // gave up on it): take it over, as a target's new leader does.
            self.moves.term += 1;
            let planted = self.planted();
            if self.moves.timeline.last().is_none_or(|t| t.the_move != m) {
                self.moves
                    .timeline
                    .push(MoveTimes::new(m.clone(), self.now));
            }
            self.moves.mover = Some(Mover::new(m, self.moves.term, planted));
            *self.faults.entry("mover_resumed").or_default() += 1;
            return;
        }
        if let Some(spare) = self.moves.spare {
            if map.shards.contains_key(&spare) {
                self.moves.spare = None;
                *self.faults.entry("shards_added").or_default() += 1;
            } else {
                return self.add_shard(&map, spare);
            }
        }
        // Random moves while the clients run; then the drain, whenever.
        if self.moves.begun < self.cfg.moves && self.running_clients {
            return self.begin_move(&map, None);
        }
        if self.moves.drained {
            return;
        }
        let drain = match self.moves.draining {
            Some(s) => s,
            None => {
                let ids = map.shard_ids();
                if ids.len() < 3 {
                    self.moves.drained = true;
                    return;
                }
                let s = ids[self.rng.index(ids.len())];
                self.moves.draining = Some(s);
                s
            }
        };
        if !map.shards.contains_key(&drain) {
            self.moves.draining = None;
            self.moves.drained = true;
            *self.faults.entry("shards_dropped").or_default() += 1;
            return;
        }
        let owns = match &map.default {
            Placement::Hashed(ranges) => ranges.iter().any(|(_, s)| *s == drain),
            other => other.shards().contains(&drain),
        };
        if owns {
            return self.begin_move(&map, Some(drain));
        }
        let Ok(dropped) = map.drop_shard(map.epoch, drain) else {
            return;
        };
        self.directory_step(&map, &dropped, Pending::Drop);
    }

    /// Add `spare` to the map, listing its group's members.
    fn add_shard(&mut self, map: &ShardMap, spare: ShardId) {
        let mut next = map.clone();
        let members = self
            .member_slots(usize::from(spare.0))
            .into_iter()
            .map(|i| (i as u16 + 1, creek_shard::Endpoint::default()))
            .collect();
        next.shards
            .insert(spare, creek_shard::Shard { replicas: members });
        next.epoch += 1;
        let call = ProcCall::new(
            creek_procs::builtins::directory::SET,
            encode_args(&[
                Value::Int(i64::try_from(map.epoch).unwrap_or(i64::MAX)),
                Value::Bytes(creek_shard::encode(&next)),
            ]),
        );
        self.moves.note_map(map);
        self.mover_invoke(Where::Directory, call, Pending::Add);
    }

    /// Invoke `directory.move` from `map` to `next`.
    fn directory_step(&mut self, map: &ShardMap, next: &ShardMap, what: Pending) {
        let call = ProcCall::new(
            MOVE,
            encode_args(&[
                Value::Int(i64::try_from(map.epoch).unwrap_or(i64::MAX)),
                Value::Bytes(creek_shard::encode(next)),
            ]),
        );
        self.moves.note_map(map);
        self.mover_invoke(Where::Directory, call, what);
    }

    /// Begin a move: a random slot range of one shard (of `from`, when
    /// draining it: its first range, whole) to another.
    fn begin_move(&mut self, map: &ShardMap, drain: Option<ShardId>) {
        let Placement::Hashed(ranges) = &map.default else {
            return;
        };
        let at = match drain {
            Some(d) => match ranges.iter().position(|(_, s)| *s == d) {
                Some(at) => at,
                None => return,
            },
            None => self.rng.index(ranges.len()),
        };
        let (first, from) = ranges[at];
        let end = ranges.get(at + 1).map_or(SLOTS, |(f, _)| *f);
        let others: Vec<ShardId> = map
            .shard_ids()
            .into_iter()
            .filter(|s| *s != from && Some(*s) != drain)
            .collect();
        if others.is_empty() || end <= first {
            return;
        }
        let to = others[self.rng.index(others.len())];
        // Some of the range, or all of it (all of it when draining).
        let len = u64::from(end - first);
        let (start, take) = match drain {
            Some(_) => (first, end - first),
            None => {
                let take = self.rng.range(1, len) as u16;
                (
                    first + self.rng.range(0, len - u64::from(take)) as u16,
                    take,
                )
            }
        };
        let m = Move {
            keyspace: None,
            keys: MoveKeys::Slots {
                first: start,
                end: start + take,
            },
            from,
            to,
        };
        let Ok(begun) = map.begin_move(map.epoch, m.clone()) else {
            return;
        };
        if debug_log() {
            eprintln!("mover: begin {m} at {} us", self.now);
        }
        self.directory_step(map, &begun, Pending::Begin);
        // The mover starts once the begin commits.
        self.moves.term += 1;
        let planted = self.planted();
        if self.moves.pending.is_some() {
            self.moves
                .timeline
                .push(MoveTimes::new(m.clone(), self.now));
        }
        self.moves.mover = self
            .moves
            .pending
            .map(|_| Mover::new(m, self.moves.term, planted));
    }

    /// The mover's op at history record `index` is over.
    pub(super) fn mover_done(&mut self, index: usize) {
        let Some((pending, what)) = self.moves.pending else {
            return;
        };
        if pending != index {
            // An op of a mover that was replaced: its successor does not
            // wait for it (it may still have taken effect: the fence says).
            return;
        }
        self.moves.pending = None;
        let outcome = self.history.ops[index]
            .final_view()
            .map(|v| v.outcome.clone());
        if debug_log() {
            eprintln!(
                "mover at {} us: {what:?} ended {:?}",
                self.now,
                outcome
                    .as_ref()
                    .map(|o| o.as_ref().map(|_| "ok").map_err(|a| a.0.clone()))
            );
        }
        let Some(outcome) = outcome else {
            return; // asked again
        };
        match what {
            Pending::Begin => match outcome {
                Ok(_) => {
                    if self.moves.draining.is_none() {
                        self.moves.begun += 1;
                    }
                }
                Err(_) => self.moves.mover = None,
            },
            // Read again at the next step: added or dropped, or retried.
            Pending::Add | Pending::Drop => {}
            Pending::Read => {
                let map = match outcome.as_ref().ok().map(|b| Value::decode(b)) {
                    Some(Ok(Value::Bytes(b))) => creek_shard::decode(&b).ok(),
                    _ => None,
                };
                if let Some(map) = map {
                    self.moves.note_map(&map);
                    if let Some(mover) = self.moves.mover.as_mut() {
                        mover.directory(map);
                    }
                }
            }
            Pending::Run => {
                if let Some(mover) = self.moves.mover.as_mut() {
                    mover.ran(outcome.map_err(|a| a.0));
                }
            }
        }
        self.mover_drive();
    }
}
