//! The mover of a move of keys on a running cluster (docs/shards.md,
//! "Moving keys between shards"): a task on every replica of a shard that
//! drives `creek_procs::moves::mover::Mover` while this replica leads the
//! shard the keys go to, in its consensus term (a new leader takes the
//! move over in a higher term, and its fence refuses the old leader's
//! late chunks). The mover's reads and ops travel as `Creek.Mpo` messages
//! ([`crate::mpo::Link`]): pages and values from the source's replicas,
//! strong ops at the directory and the shards (`Request::Run`); the
//! target's own copy comes from this replica's node loop.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use creek_node::mpo::wire::{Reply, Request};
use creek_procs::builtins::directory::MAP;
use creek_procs::moves::mover::{Mover, Progress, Step, Where};
use creek_types::planted::PlantedBugs;
use creek_types::value::Value;
use creek_types::ProcCall;
use tokio::sync::{mpsc, oneshot};

use crate::mpo::{Link, To};
use crate::node_loop::messages::Event;
use crate::shards::ShardGate;

/// How often the task looks for a move to drive (and, while one is under
/// way, how long it waits before repeating a step nobody answered).
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// Most steps taken in one look (a step that waits on another group ends
/// a look early).
const STEPS_PER_LOOK: usize = 256;

/// How far the move this replica drives (or drove last) has come: what
/// its `Status` counters show (`move_*`).
pub type MoveProgress = Arc<Mutex<Option<Progress>>>;

/// Start the mover's task of a shard replica. It logs each move it takes
/// up and how each ended (rounds, keys and bytes copied), and keeps its
/// progress where `Status` reads it.
pub fn start(
    link: Arc<Link>,
    gate: Arc<ShardGate>,
    events: mpsc::Sender<Event>,
    planted: PlantedBugs,
) -> MoveProgress {
    let progress = MoveProgress::default();
    let shown = progress.clone();
    link.runtime().clone().spawn(async move {
        let mut mover: Option<(u64, Mover)> = None;
        let mut started: u64 = 0;
        loop {
            tokio::time::sleep(LOOK_EVERY).await;
            let map = gate.map();
            let me = gate.shard();
            let ours = map
                .moving
                .clone()
                .or(map.finishing.clone())
                .filter(|m| m.to == me);
            // A move gone from the map (cancelled, or finished) with a
            // mover still under way here: it carries on (undoing a
            // cancelled move's copy) while this replica leads.
            let unfinished = mover.as_ref().filter(|(_, mv)| !mv.is_done());
            let Some(m) = ours.or_else(|| unfinished.map(|(_, mv)| mv.the_move().clone())) else {
                mover = None;
                continue;
            };
            let (tx, rx) = oneshot::channel();
            if events.send(Event::Leadership(tx)).await.is_err() {
                return; // shutting down
            }
            let Ok((leads, term)) = rx.await else {
                return;
            };
            if !leads {
                mover = None;
                continue;
            }
            let fresh = !matches!(&mover, Some((t, mv)) if *t == term && *mv.the_move() == m);
            if fresh {
                // A mover's term must pass every earlier mover's at this
                // shard: a later leader's consensus term is higher, and one
                // leader counts the movers it starts.
                started += 1;
                let fence_term = term << 32 | (started & 0xffff_ffff);
                tracing::info!(%m, term, "driving the move of keys to this shard");
                mover = Some((term, Mover::new(m.clone(), fence_term, planted)));
            }
            let Some((_, mv)) = mover.as_mut() else {
                continue;
            };
            if !mv.is_done() {
                drive(mv, &link, &events).await;
                let p = mv.progress();
                if let Some(ended) = &p.ended {
                    tracing::info!(%m, rounds = p.rounds, keys = p.keys_copied, bytes = p.bytes_copied, "move of keys over: {ended}");
                }
                *progress.lock().unwrap_or_else(PoisonError::into_inner) = Some(p);
            }
        }
    });
    shown
}

/// The `Status` counters of `progress`: `move_active` (1 while the move
/// is under way), `move_rounds`, `move_keys_copied`, `move_bytes_copied`,
/// `move_keys_cleaned`; none before this replica drove a move.
pub fn counters(progress: &MoveProgress) -> Vec<(String, u64)> {
    let held = progress.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(p) = held.as_ref() else {
        return Vec::new();
    };
    vec![
        ("move_active".into(), u64::from(p.ended.is_none())),
        ("move_rounds".into(), u64::from(p.rounds)),
        ("move_keys_copied".into(), p.keys_copied),
        ("move_bytes_copied".into(), p.bytes_copied),
        ("move_keys_cleaned".into(), p.keys_cleaned),
    ]
}

/// Take `mv`'s steps until one gets no answer (to be repeated at the next
/// look) or the move is over.
async fn drive(mv: &mut Mover, link: &Link, events: &mpsc::Sender<Event>) {
    for _ in 0..STEPS_PER_LOOK {
        let done = match mv.step() {
            Step::Done => return,
            Step::ReadDirectory => {
                let mut call = ProcCall::new(MAP, creek_types::value::encode_args(&[]));
                call.strong = true;
                match link.ask_any(To::Directory, &Request::Run(call)).await {
                    Some(Reply::Outcome(Ok(raw))) => match Value::decode(&raw) {
                        Ok(Value::Bytes(b)) => match creek_shard::decode(&b) {
                            Ok(map) => {
                                mv.directory(map);
                                true
                            }
                            Err(_) => false,
                        },
                        _ => false,
                    },
                    _ => false,
                }
            }
            Step::Export {
                shard,
                from,
                digests,
                adopted,
                mine,
            } => {
                let Some(map) = mv.map().map(creek_shard::encode) else {
                    return;
                };
                let req = Request::Export {
                    map: map.clone(),
                    from,
                    digests,
                    adopted: adopted.unwrap_or(0),
                };
                match link.ask_any(To::Shard(u32::from(shard.0)), &req).await {
                    Some(Reply::Page(page)) => {
                        let theirs = match mine {
                            None => Some(BTreeMap::new()),
                            Some(fence) => {
                                let req = Request::Mine {
                                    map,
                                    from: page.from.clone(),
                                    next: page.next.clone(),
                                    fence,
                                };
                                match ask_self(events, req).await {
                                    Some(Reply::Reads(reads)) => Some(
                                        reads
                                            .into_iter()
                                            .filter_map(|(k, v)| v.map(|v| (k, v)))
                                            .collect::<BTreeMap<Bytes, Bytes>>(),
                                    ),
                                    _ => None,
                                }
                            }
                        };
                        match theirs {
                            Some(theirs) => {
                                mv.exported(page, &theirs);
                                true
                            }
                            None => false,
                        }
                    }
                    _ => false,
                }
            }
            Step::Fetch { keys, adopted } => {
                let from = u32::from(mv.the_move().from.0);
                let req = Request::Fetch {
                    keys,
                    adopted: adopted.unwrap_or(0),
                };
                match link.ask_any(To::Shard(from), &req).await {
                    Some(Reply::Reads(values)) => {
                        mv.fetched(values);
                        true
                    }
                    _ => false,
                }
            }
            Step::Run { at, call } => {
                let to = match at {
                    Where::Directory => To::Directory,
                    Where::Shard(s) => To::Shard(u32::from(s.0)),
                };
                match link.ask_any(to, &Request::Run(call)).await {
                    Some(Reply::Outcome(outcome)) => {
                        mv.ran(outcome);
                        true
                    }
                    _ => false,
                }
            }
        };
        if !done {
            return;
        }
    }
}

/// Ask this replica's own node loop.
async fn ask_self(events: &mpsc::Sender<Event>, req: Request) -> Option<Reply> {
    let (tx, rx) = oneshot::channel();
    events.send(Event::Mpo(req, Some(tx))).await.ok()?;
    rx.await.ok()?.ok()
}
