//! `creek chaos --shards S --reshard`: the cluster grows and shrinks while
//! the clients move money between the shards (and, unless
//! `--no-nemesis`, under the nemesis).
//!
//! The steps are the ones an operator takes (docs/operations.md, "Adding
//! a shard"), each with the `creek` command a user runs, as a child
//! process, so the nemesis keeps injecting faults while a move copies:
//!
//! 1. `creek shards add-shard N --replica ...` lists a new shard of
//!    `--replicas` replicas, owning nothing; `creek shards --save FILE`
//!    writes the map they start with; they start as a group of their own.
//! 2. `creek shards move` gives the new shard, from each old shard, a
//!    third of its slots — a range around one account's slot, so that a
//!    third of the accounts move.
//! 3. Shard 0's remaining slots move to shard 1, range by range;
//!    `creek shards remove-shard 0` drops it from the map, and its
//!    replicas are stopped.
//!
//! The run's checks (`sharded.rs`) then judge the history across all of
//! it, and `converged` reads each account at every replica of the shard
//! that owns it in the final map.

use std::collections::VecDeque;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use creek_client::Cluster;
use creek_shard::{Placement, ShardId, ShardMap, SLOTS};
use serde_json::json;

use super::sharded::Layout;
use crate::servers::Servers;

/// One step of the resharding.
#[derive(Clone, Debug)]
enum Step {
    /// List the new shard in the map.
    AddShard,
    /// Write the map the new shard's replicas start with.
    SaveMap,
    /// Start the new shard's replicas.
    StartShard,
    /// Give the new shard a third of `from`'s slots, around the slot of
    /// `account`.
    MoveThird { from: ShardId, account: String },
    /// Move `from`'s first remaining range of slots to `to`; again until
    /// it owns none.
    Drain { from: ShardId, to: ShardId },
    /// Drop `shard` from the map.
    Remove(ShardId),
    /// Stop the dropped shard's replicas.
    StopShard(ShardId),
}

impl Step {
    fn name(&self) -> String {
        match self {
            Step::AddShard => "add-shard".into(),
            Step::SaveMap => "save-map".into(),
            Step::StartShard => "start-shard".into(),
            Step::MoveThird { from, .. } => format!("move-third-of-{}", from.0),
            Step::Drain { from, to } => format!("drain-{}-to-{}", from.0, to.0),
            Step::Remove(s) => format!("remove-shard-{}", s.0),
            Step::StopShard(s) => format!("stop-shard-{}", s.0),
        }
    }
}

/// A `creek shards` command running as a child process.
struct Running {
    step: Step,
    what: String,
    child: Child,
    log: std::path::PathBuf,
    started: Instant,
    /// Exit statuses taken as success (a listed shard's replicas do not
    /// serve yet when `add-shard` waits for them: 3).
    ok_codes: &'static [i32],
}

/// The resharding of one run: its steps, the one running, what happened.
pub(super) struct Resharder {
    /// The directory's client addresses, comma-separated (`--addr`).
    directory: String,
    /// The new shard's id and replicas (indexes, made room for, not
    /// started until [`Step::StartShard`]).
    new_shard: ShardId,
    new_replicas: Vec<usize>,
    /// Where the map the new shard starts with is saved.
    map_file: std::path::PathBuf,
    settings: Box<dyn Fn(&mut creek_server::ServerConfig) + Send + Sync>,
    steps: VecDeque<Step>,
    running: Option<Running>,
    /// Steps taken: name, what ran, seconds, exit.
    pub(super) taken: Vec<serde_json::Value>,
    /// Why the resharding stopped short, if it did.
    pub(super) failure: Option<String>,
    count: usize,
    /// Moves planned again after a failed attempt.
    retries: usize,
}

/// How many failed attempts at moves the resharding takes again.
const MOVE_RETRIES: usize = 5;

impl Resharder {
    /// Plan the resharding of `map`'s shards onto a new one of `per_shard`
    /// replicas, made room for in `servers` now (not started).
    pub(super) fn new(
        servers: &mut Servers,
        map: &ShardMap,
        accounts: &[String],
        per_shard: usize,
        settings: impl Fn(&mut creek_server::ServerConfig) + Send + Sync + 'static,
    ) -> Result<Resharder, String> {
        let directory: Vec<String> = map
            .directory
            .replicas
            .values()
            .map(|e| e.client.clone())
            .collect();
        let new_shard = ShardId(map.shards.keys().map(|s| s.0).max().unwrap_or(0) + 1);
        let mut new_replicas = Vec::new();
        for _ in 0..per_shard {
            new_replicas.push(servers.push_on_loopback()?);
        }
        let mut steps = VecDeque::from([Step::AddShard, Step::SaveMap, Step::StartShard]);
        for &from in map.shards.keys() {
            let account = accounts
                .iter()
                .find(|a| map.owner(None, a.as_bytes()) == from)
                .ok_or_else(|| format!("shard {} owns no account", from.0))?;
            steps.push_back(Step::MoveThird {
                from,
                account: account.clone(),
            });
        }
        let first = *map.shards.keys().next().ok_or("the map has no shard")?;
        let second = *map.shards.keys().nth(1).ok_or("the map has one shard")?;
        steps.extend([
            Step::Drain {
                from: first,
                to: second,
            },
            Step::Remove(first),
            Step::StopShard(first),
        ]);
        Ok(Resharder {
            directory: directory.join(","),
            new_shard,
            new_replicas,
            map_file: servers.dir.join("new-shard-map.bin"),
            settings: Box::new(settings),
            steps,
            running: None,
            taken: Vec::new(),
            failure: None,
            count: 0,
            retries: 0,
        })
    }

    /// Whether every step is taken, or one failed.
    pub(super) fn finished(&self) -> bool {
        self.failure.is_some() || (self.steps.is_empty() && self.running.is_none())
    }

    /// Take the resharding on: note a command that ended, and begin the
    /// next step (starting or stopping processes in `servers` and
    /// `layout` at once, running a command as a child).
    pub(super) async fn poll(
        &mut self,
        servers: &mut Servers,
        layout: &mut Layout,
        cluster: &Cluster,
    ) {
        if self.failure.is_some() {
            return;
        }
        if let Some(r) = &mut self.running {
            match r.child.try_wait() {
                Ok(None) => return,
                Ok(Some(status)) => {
                    let r = self.running.take().expect("running");
                    let code = status.code().unwrap_or(-1);
                    self.taken.push(json!({
                        "step": r.step.name(),
                        "command": r.what,
                        "seconds": r.started.elapsed().as_secs_f64(),
                        "exit": code,
                    }));
                    if !r.ok_codes.contains(&code) {
                        let out = std::fs::read_to_string(&r.log).unwrap_or_default();
                        let why = format!(
                            "{} ({}) exited {code}: {}",
                            r.step.name(),
                            r.what,
                            out.trim()
                        );
                        // A move refused (the map read was a replica's,
                        // behind the directory's) or cut short by a fault
                        // is planned again from the map as it is then.
                        let again = matches!(r.step, Step::MoveThird { .. } | Step::Drain { .. });
                        if again && self.retries < MOVE_RETRIES {
                            self.retries += 1;
                            self.steps.push_front(r.step);
                        } else {
                            self.failure = Some(why);
                        }
                        return;
                    }
                    // A drain goes on until the shard owns nothing.
                    if let Step::Drain { .. } = r.step {
                        self.steps.push_front(r.step);
                    }
                }
                Err(e) => {
                    self.failure = Some(format!("waiting for {}: {e}", r.what));
                    return;
                }
            }
        }
        let Some(step) = self.steps.pop_front() else {
            return;
        };
        if let Err(e) = self.begin(step.clone(), servers, layout, cluster).await {
            self.failure = Some(format!("{}: {e}", step.name()));
        }
    }

    async fn begin(
        &mut self,
        step: Step,
        servers: &mut Servers,
        layout: &mut Layout,
        cluster: &Cluster,
    ) -> Result<(), String> {
        let started = Instant::now();
        match &step {
            Step::AddShard => {
                let mut args = vec!["add-shard".to_owned(), self.new_shard.0.to_string()];
                for &i in &self.new_replicas {
                    args.push("--replica".into());
                    args.push(format!(
                        "{}={},{}",
                        i + 1,
                        servers.clients[i],
                        servers.peers[i]
                    ));
                }
                args.extend(["--wait-secs".into(), "2".into()]);
                self.spawn(step, servers, args, &[0, 3])
            }
            Step::SaveMap => {
                let args = vec![
                    "--save".to_owned(),
                    self.map_file.display().to_string(),
                    "-o".into(),
                    "json".into(),
                ];
                // 3: the new shard has no leader yet (it is not started).
                self.spawn(step, servers, args, &[0, 3])
            }
            Step::StartShard => {
                let members = self.new_replicas.clone();
                for &i in &members {
                    let map_file = self.map_file.clone();
                    servers.configure_valid(i, &members, |c| {
                        (self.settings)(c);
                        c.shard_map = Some(map_file);
                        c.directory = false;
                    })?;
                    servers.spawn(i)?;
                }
                layout.add_shard(self.new_shard, members);
                self.record(&step, "started the new shard's replicas", started);
                Ok(())
            }
            Step::MoveThird { from, account } => {
                let map = fresh_map(cluster).await?;
                let (first, end) = owned_ranges(&map, *from)
                    .into_iter()
                    .find(|(a, b)| (*a..*b).contains(&creek_shard::slot_of(account.as_bytes())))
                    .ok_or_else(|| format!("shard {} no longer owns {account}", from.0))?;
                let slot = creek_shard::slot_of(account.as_bytes());
                let third = owned_ranges(&map, *from)
                    .iter()
                    .map(|(a, b)| b - a)
                    .sum::<u16>()
                    / 3;
                // A third of the shard's slots, from the account's on
                // (or ending at the range's end).
                let lo = slot.min(end.saturating_sub(third)).max(first);
                let hi = (lo + third.max(1)).min(end);
                let args = move_args(*from, self.new_shard, lo, hi);
                self.spawn(step, servers, args, &[0])
            }
            Step::Drain { from, to } => {
                let map = fresh_map(cluster).await?;
                // Nothing left: the drain is over.
                let Some((lo, hi)) = owned_ranges(&map, *from).into_iter().next() else {
                    self.record(&step, "owns nothing any more", started);
                    return Ok(());
                };
                let args = move_args(*from, *to, lo, hi);
                self.spawn(step, servers, args, &[0])
            }
            Step::Remove(shard) => {
                let args = vec![
                    "remove-shard".to_owned(),
                    shard.0.to_string(),
                    "--wait-secs".into(),
                    "30".into(),
                ];
                self.spawn(step, servers, args, &[0])
            }
            Step::StopShard(shard) => {
                for i in layout.remove_shard(*shard) {
                    servers.kill(i)?;
                }
                self.record(&step, "stopped the dropped shard's replicas", started);
                Ok(())
            }
        }
    }

    fn record(&mut self, step: &Step, what: &str, started: Instant) {
        self.taken.push(json!({
            "step": step.name(),
            "command": what,
            "seconds": started.elapsed().as_secs_f64(),
            "exit": 0,
        }));
    }

    /// Run `creek --addr DIRECTORY shards ARGS` as a child, its output in
    /// a log of its own in the servers' directory.
    fn spawn(
        &mut self,
        step: Step,
        servers: &Servers,
        args: Vec<String>,
        ok_codes: &'static [i32],
    ) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        self.count += 1;
        let log = servers.dir.join(format!("reshard-{}.log", self.count));
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let what = format!("creek shards {}", args.join(" "));
        let child = Command::new(exe)
            .args(["shards", "--addr", &self.directory])
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {what}: {e}"))?;
        self.running = Some(Running {
            step,
            what,
            child,
            log,
            started: Instant::now(),
            ok_codes,
        });
        Ok(())
    }

    /// Stop a command still running (the run is over).
    pub(super) fn abandon(&mut self) {
        if let Some(mut r) = self.running.take() {
            let _ = r.child.kill();
            let _ = r.child.wait();
            self.failure
                .get_or_insert_with(|| format!("{} ({}) had not ended", r.step.name(), r.what));
        }
        if self.failure.is_none() && !self.steps.is_empty() {
            self.failure = Some(format!(
                "steps not taken: {:?}",
                self.steps.iter().map(Step::name).collect::<Vec<_>>()
            ));
        }
    }
}

/// `creek shards move` of slots `lo..hi` from `from` to `to`.
fn move_args(from: ShardId, to: ShardId, lo: u16, hi: u16) -> Vec<String> {
    vec![
        "move".into(),
        "--from".into(),
        from.0.to_string(),
        "--to".into(),
        to.0.to_string(),
        "--slots".into(),
        format!("{lo}..{hi}"),
        "--wait-secs".into(),
        "300".into(),
    ]
}

/// The directory's map, as the routing client learns it.
async fn fresh_map(cluster: &Cluster) -> Result<ShardMap, String> {
    cluster
        .refresh()
        .await
        .map_err(|e| format!("reading the map: {e}"))?;
    Ok(cluster.map().await)
}

/// The ranges of slots `shard` owns in `map`'s placement of the built-in
/// data, in order.
fn owned_ranges(map: &ShardMap, shard: ShardId) -> Vec<(u16, u16)> {
    let Placement::Hashed(slots) = map.placement(None) else {
        return Vec::new();
    };
    slots
        .iter()
        .enumerate()
        .filter(|(_, (_, s))| *s == shard)
        .map(|(i, (first, _))| (*first, slots.get(i + 1).map_or(SLOTS, |(next, _)| *next)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_ranges_follow_the_placement() {
        let mut map = ShardMap::hashed(1, &[ShardId(0), ShardId(1)]);
        assert_eq!(owned_ranges(&map, ShardId(0)), vec![(0, SLOTS / 2)]);
        assert_eq!(owned_ranges(&map, ShardId(1)), vec![(SLOTS / 2, SLOTS)]);
        map.default = Placement::Hashed(vec![
            (0, ShardId(0)),
            (10, ShardId(2)),
            (20, ShardId(0)),
            (SLOTS / 2, ShardId(1)),
        ]);
        assert_eq!(
            owned_ranges(&map, ShardId(0)),
            vec![(0, 10), (20, SLOTS / 2)]
        );
        assert_eq!(owned_ranges(&map, ShardId(2)), vec![(10, 20)]);
        assert!(owned_ranges(&map, ShardId(3)).is_empty());
    }
}
