//! The mover of one move of keys (docs/shards.md, "Moving keys between
//! shards"): a state machine without I/O that says what to do next
//! ([`Mover::step`]) and takes what came of it. The server runs one at
//! the leader of the shard the keys go to; the simulator runs one beside
//! the operator. Every step is safe to repeat, and a mover that starts
//! over (a new leader) takes a higher term and carries on from what the
//! directory's map and the shards' states say:
//!
//! 1. **Copy.** Claim the target (an empty chunk under a new fence), then
//!    copy in rounds: the first with values (unless the move has
//!    switched already), each later one with digests,
//!    so only keys that changed since travel again, and the keys the
//!    source deleted are deleted. A round that changed at most
//!    [`SWITCH_KEYS`] keys (or the [`ROUNDS_MAX`]th) is followed by the
//!    switch.
//! 2. **Switch** at the directory (`directory.move`): the keys belong to
//!    the target in the map from here on, and the move is *finishing*.
//! 3. **Release**: the source adopts the switched map and refuses the
//!    keys from that point of its order on; their values there are final.
//! 4. **Final round**, as a round that catches up, from a source replica
//!    that has released, against a target replica holding the mover's
//!    last chunk: the copy is exact.
//! 5. **Adopt**: the target adopts the switched map under the fence of
//!    that last chunk, and serves the keys.
//! 6. **Clean up**: the source deletes the moved keys, a page at a time;
//!    then **finish** at the directory, and a next move may begin.
//!
//! A move cancelled at the directory before its switch is undone: the
//! target deletes its copy.

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_shard::{Move, ShardId, ShardMap};
use creek_types::planted::{Bug, PlantedBugs};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

use super::copy::{self, Diff, Page};
use super::{adopt_call, import_call, Chunk, Fence, FENCED, PAST};
use crate::builtins::directory::MOVE;

/// A copy round that changed at most this many keys is the last before
/// the switch.
pub const SWITCH_KEYS: usize = 64;
/// Most copy rounds before the switch, however many keys each changed.
pub const ROUNDS_MAX: u32 = 8;

/// Where a step's op runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Where {
    /// The directory group.
    Directory,
    /// A shard.
    Shard(ShardId),
}

/// What a mover asks its host to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read the directory's map (a strong `directory.map`); hand it to
    /// [`Mover::directory`].
    ReadDirectory,
    /// Read the page of the move's keys from `from` ([`copy::export`]) of
    /// a replica of `shard` whose map is at epoch `adopted` or later
    /// (`None`: any), and, with `mine`, the target's keys of the move in
    /// the page's range, from a target replica whose last installed chunk
    /// is that fence; hand both to [`Mover::exported`].
    Export {
        /// The shard to read.
        shard: ShardId,
        /// The first stored key of the page.
        from: Bytes,
        /// Digests instead of values.
        digests: bool,
        /// The least map epoch the replica read must execute under.
        adopted: Option<u64>,
        /// The fence the target replica must hold, when the target's keys
        /// are wanted.
        mine: Option<Fence>,
    },
    /// Read these keys' committed values at a source replica whose map is
    /// at epoch `adopted` or later; hand them to [`Mover::fetched`].
    Fetch {
        /// The keys.
        keys: Vec<Bytes>,
        /// As for [`Step::Export`].
        adopted: Option<u64>,
    },
    /// Run `call`, a strong op, at `at`; hand its final outcome to
    /// [`Mover::ran`].
    Run {
        /// The group that runs it.
        at: Where,
        /// The op.
        call: ProcCall,
    },
    /// Nothing more: the move is over (or another mover took it over).
    Done,
}

/// How far a move has come, for status pages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The step it is at.
    pub phase: &'static str,
    /// Copy rounds done (the final one included).
    pub rounds: u32,
    /// Keys installed at the target (puts and deletes).
    pub keys_copied: u64,
    /// Bytes of keys and values installed at the target.
    pub bytes_copied: u64,
    /// Keys deleted at the source after the switch.
    pub keys_cleaned: u64,
    /// Why it stopped, when another mover took over or the move is gone.
    pub ended: Option<String>,
}

#[derive(Clone, Debug)]
enum Phase {
    Read,
    Claim,
    Page {
        from: Bytes,
    },
    Fetch {
        next: Option<Bytes>,
        diff: Diff,
    },
    Import {
        next: Option<Bytes>,
        chunk: Chunk,
    },
    Switch,
    Release,
    Adopt,
    Clean {
        from: Bytes,
    },
    CleanRun {
        next: Option<Bytes>,
        deletes: Vec<Bytes>,
    },
    Finish,
    Undo {
        from: Bytes,
    },
    UndoRun {
        next: Option<Bytes>,
        deletes: Vec<Bytes>,
    },
    Done,
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Read => "reading the map",
            Phase::Claim | Phase::Page { .. } | Phase::Fetch { .. } | Phase::Import { .. } => {
                "copying"
            }
            Phase::Switch => "switching",
            Phase::Release => "releasing",
            Phase::Adopt => "adopting",
            Phase::Clean { .. } | Phase::CleanRun { .. } | Phase::Finish => "cleaning up",
            Phase::Undo { .. } | Phase::UndoRun { .. } => "undoing a cancelled move",
            Phase::Done => "done",
        }
    }
}

/// The mover of one move.
#[derive(Clone, Debug)]
pub struct Mover {
    m: Move,
    /// The newest directory map read.
    dir: Option<ShardMap>,
    term: u64,
    /// The last chunk the target installed in this term (`n == 0`: none).
    fence: Fence,
    phase: Phase,
    /// Whether the round under way is the one after the release.
    final_round: bool,
    /// The epoch of the map the source adopted (its release).
    released: Option<u64>,
    /// Keys changed in the round under way.
    changed: usize,
    /// Whether a copy round changed few enough keys to switch.
    caught_up: bool,
    /// Whether the target adopted the switched map.
    target_adopted: bool,
    /// Whether the source deleted every moved key.
    cleaned: bool,
    planted: PlantedBugs,
    progress: Progress,
}

fn directory_move(current: &ShardMap, next: &ShardMap) -> Step {
    let mut call = ProcCall::new(
        MOVE,
        encode_args(&[
            Value::Int(i64::try_from(current.epoch).unwrap_or(i64::MAX)),
            Value::Bytes(creek_shard::encode(next)),
        ]),
    );
    call.strong = true;
    Step::Run {
        at: Where::Directory,
        call,
    }
}

impl Mover {
    /// A mover of `m` in term `term`: higher than the term of every mover
    /// before it at the same target, of this move or an earlier one (the
    /// server takes its leader's consensus term and a count of the movers
    /// that leader started; the simulator counts movers).
    pub fn new(m: Move, term: u64, planted: PlantedBugs) -> Mover {
        Mover {
            m,
            dir: None,
            term,
            fence: Fence { term, n: 0 },
            phase: Phase::Read,
            final_round: false,
            released: None,
            changed: 0,
            caught_up: false,
            target_adopted: false,
            cleaned: false,
            planted,
            progress: Progress::default(),
        }
    }

    /// The move.
    pub fn the_move(&self) -> &Move {
        &self.m
    }

    /// The newest directory map it read (`None` before the first).
    pub fn map(&self) -> Option<&ShardMap> {
        self.dir.as_ref()
    }

    /// How far it has come.
    pub fn progress(&self) -> Progress {
        Progress {
            phase: self.phase.name(),
            ..self.progress.clone()
        }
    }

    /// Whether it is over.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    fn end(&mut self, why: String) {
        self.progress.ended = Some(why);
        self.phase = Phase::Done;
    }

    /// What to do next. Asked again after a step failed to complete (no
    /// replica answered), it asks the same.
    pub fn step(&self) -> Step {
        let dir = self.dir.as_ref();
        let (to, from) = (self.m.to, self.m.from);
        match (&self.phase, dir) {
            (Phase::Done, _) => Step::Done,
            (Phase::Read, _) | (_, None) => Step::ReadDirectory,
            (Phase::Claim, Some(d)) => Step::Run {
                at: Where::Shard(to),
                call: import_call(to, d, self.next_fence(), &Chunk::default()),
            },
            (Phase::Page { from: at }, _) => Step::Export {
                shard: from,
                from: at.clone(),
                // Values in the first round only: a mover that took a
                // switched move over (the keys refused by both shards
                // until the target adopts) compares digests from the
                // start, so the copy already at the target does not
                // travel again.
                digests: self.progress.rounds > 0 || self.final_round,
                adopted: self.adopted(),
                mine: Some(self.fence),
            },
            (Phase::Fetch { diff, .. }, _) => Step::Fetch {
                keys: diff.fetch.clone(),
                adopted: self.adopted(),
            },
            (Phase::Import { chunk, .. }, Some(d)) => Step::Run {
                at: Where::Shard(to),
                call: import_call(to, d, self.next_fence(), chunk),
            },
            (Phase::Switch, Some(d)) => match d.switch_move(d.epoch) {
                Ok(next) => directory_move(d, &next),
                Err(_) => Step::ReadDirectory,
            },
            (Phase::Release, Some(d)) => Step::Run {
                at: Where::Shard(from),
                call: adopt_call(from, d, None, &[]),
            },
            (Phase::Adopt, Some(d)) => Step::Run {
                at: Where::Shard(to),
                call: adopt_call(to, d, Some(self.fence), &[]),
            },
            (Phase::Clean { from: at }, _) => Step::Export {
                shard: from,
                from: at.clone(),
                digests: true,
                adopted: self.released,
                mine: None,
            },
            (Phase::CleanRun { deletes, .. }, Some(d)) => Step::Run {
                at: Where::Shard(from),
                call: adopt_call(from, d, None, deletes),
            },
            (Phase::Finish, Some(d)) => match d.finish_move(d.epoch) {
                Ok(next) => directory_move(d, &next),
                Err(_) => Step::ReadDirectory,
            },
            (Phase::Undo { from: at }, _) => Step::Export {
                shard: to,
                from: at.clone(),
                digests: true,
                adopted: None,
                mine: None,
            },
            (Phase::UndoRun { deletes, .. }, Some(d)) => Step::Run {
                at: Where::Shard(to),
                call: adopt_call(to, d, None, deletes),
            },
        }
    }

    fn next_fence(&self) -> Fence {
        Fence {
            term: self.term,
            n: self.fence.n + 1,
        }
    }

    /// The least epoch a source replica read in the final round must
    /// execute under: the release's.
    fn adopted(&self) -> Option<u64> {
        if self.final_round {
            self.released
        } else {
            None
        }
    }

    /// The directory's map, as [`Step::ReadDirectory`] asked: the mover
    /// carries on from what it says and what the mover has done.
    pub fn directory(&mut self, map: ShardMap) {
        let ours = |m: &Option<Move>| m.as_ref() == Some(&self.m);
        let phase = if ours(&map.moving) {
            if self.caught_up {
                Phase::Switch
            } else if self.fence.n == 0 {
                Phase::Claim
            } else {
                Phase::Page { from: Bytes::new() }
            }
        } else if ours(&map.finishing) {
            self.final_round = true;
            if self.cleaned {
                Phase::Finish
            } else if self.target_adopted {
                Phase::Clean { from: Bytes::new() }
            } else if self.released.is_none() {
                if self.planted.has(Bug::MoveSourceKeepsServing) {
                    // Planted: the source never adopts the switched map.
                    self.after_release(None)
                } else {
                    Phase::Release
                }
            } else if self.fence.n == 0 {
                Phase::Claim
            } else {
                Phase::Page { from: Bytes::new() }
            }
        } else {
            let given = map.owner(self.m.keyspace.as_deref(), &self.some_key()) == self.m.to;
            let why = if given {
                Some("the move is finished")
            } else if !map.shards.contains_key(&self.m.to) {
                Some("the move is gone from the map, and its target with it")
            } else {
                None
            };
            self.dir = Some(map);
            match why {
                Some(why) => self.end(why.into()),
                None => self.phase = Phase::Undo { from: Bytes::new() },
            }
            return;
        };
        self.dir = Some(map);
        self.phase = phase;
    }

    /// One key of the move (its placement's first), to tell who owns the
    /// move's keys in a map.
    fn some_key(&self) -> Bytes {
        match &self.m.keys {
            creek_shard::MoveKeys::Range { first, .. } => first.clone(),
            creek_shard::MoveKeys::Slots { first, .. } => {
                let slot = *first;
                (0u64..)
                    .map(|n| Bytes::from(n.to_string()))
                    .find(|k| creek_shard::slot_of(k) == slot)
                    .unwrap_or_default()
            }
            creek_shard::MoveKeys::All => Bytes::new(),
        }
    }

    /// A page (and, in a copy round, the target's keys of the move in its
    /// range), as [`Step::Export`] asked.
    pub fn exported(&mut self, page: Page, mine: &BTreeMap<Bytes, Bytes>) {
        let next = page.next.clone();
        let keys = || page.entries.iter().map(|(k, _)| k.clone()).collect();
        self.phase = match &self.phase {
            Phase::Page { .. } => {
                let diff = copy::diff(&page, mine);
                if diff.fetch.is_empty() {
                    self.chunk_done(next, diff.chunk)
                } else {
                    Phase::Fetch { next, diff }
                }
            }
            Phase::Clean { .. } => Phase::CleanRun {
                next,
                deletes: keys(),
            },
            Phase::Undo { .. } => Phase::UndoRun {
                next,
                deletes: keys(),
            },
            other => other.clone(),
        };
    }

    /// The values of the keys [`Step::Fetch`] asked for (`None`: absent).
    pub fn fetched(&mut self, values: Vec<(Bytes, Option<Bytes>)>) {
        let Phase::Fetch { next, diff } = &self.phase else {
            return;
        };
        let (next, mut chunk) = (next.clone(), diff.chunk.clone());
        for (k, v) in values {
            match v {
                Some(v) => chunk.puts.push((k, v)),
                None => chunk.deletes.push(k),
            }
        }
        self.phase = self.chunk_done(next, chunk);
    }

    /// A page's changes are known: install them, or go on.
    fn chunk_done(&mut self, next: Option<Bytes>, chunk: Chunk) -> Phase {
        if chunk.is_empty() {
            self.page_done(next)
        } else {
            Phase::Import { next, chunk }
        }
    }

    /// The page before `next` is installed: the next page, or the round's
    /// end.
    fn page_done(&mut self, next: Option<Bytes>) -> Phase {
        if let Some(from) = next {
            return Phase::Page { from };
        }
        self.progress.rounds += 1;
        let changed = std::mem::take(&mut self.changed);
        if self.final_round {
            return Phase::Adopt;
        }
        if changed <= SWITCH_KEYS || self.progress.rounds >= ROUNDS_MAX {
            // Read the map again: the switch is made against its epoch.
            self.caught_up = true;
            return Phase::Read;
        }
        Phase::Page { from: Bytes::new() }
    }

    /// The final outcome of the op [`Step::Run`] asked for (`Err`: its
    /// abort message).
    pub fn ran(&mut self, outcome: Result<Bytes, String>) {
        let phase = std::mem::replace(&mut self.phase, Phase::Read);
        self.phase = match (phase, outcome) {
            (Phase::Claim, Ok(_)) => {
                self.fence = self.next_fence();
                Phase::Page { from: Bytes::new() }
            }
            (Phase::Import { next, chunk }, Ok(_)) => {
                self.fence = self.next_fence();
                let keys = (chunk.puts.len() + chunk.deletes.len()) as u64;
                self.changed += keys as usize;
                self.progress.keys_copied += keys;
                self.progress.bytes_copied += chunk.bytes() as u64;
                self.page_done(next)
            }
            (Phase::Claim | Phase::Import { .. } | Phase::Adopt, Err(e)) if e.contains(FENCED) => {
                self.end(format!("another mover took the move over: {e}"));
                return;
            }
            (Phase::Claim | Phase::Import { .. } | Phase::Adopt, Err(e))
                if self.final_round && e.contains(PAST) =>
            {
                // The target adopted the switched map already.
                self.target_adopted = true;
                Phase::Clean { from: Bytes::new() }
            }
            (Phase::Release, Ok(_)) => {
                let epoch = self.dir.as_ref().map(|d| d.epoch);
                self.after_release(epoch)
            }
            (Phase::Adopt, Ok(_)) => {
                self.target_adopted = true;
                Phase::Clean { from: Bytes::new() }
            }
            (Phase::CleanRun { next, deletes }, Ok(_)) => {
                self.progress.keys_cleaned += deletes.len() as u64;
                match next {
                    Some(from) => Phase::Clean { from },
                    None => {
                        self.cleaned = true;
                        Phase::Finish
                    }
                }
            }
            (Phase::UndoRun { next, .. }, Ok(_)) => match next {
                Some(from) => Phase::Undo { from },
                None => {
                    self.end("the move was cancelled; the target deleted its copy".into());
                    return;
                }
            },
            // Anything else (a switch or finish made against an old epoch,
            // a release the source is past, an op refused): read the map
            // and carry on from what it says.
            _ => Phase::Read,
        };
    }

    /// The source refuses the keys from its map at `epoch` on (`None`:
    /// planted, it does not): copy what it holds once more, exactly.
    fn after_release(&mut self, epoch: Option<u64>) -> Phase {
        self.released = epoch;
        self.final_round = true;
        if self.planted.has(Bug::MoveSwitchBeforeCaughtUp) && self.fence.n > 0 {
            // Planted: the target takes the keys with the copy it has.
            return Phase::Adopt;
        }
        // Claimed already in this term: the views hold its last chunk.
        if self.fence.n > 0 {
            Phase::Page { from: Bytes::new() }
        } else {
            Phase::Claim
        }
    }
}

#[cfg(test)]
mod tests;
