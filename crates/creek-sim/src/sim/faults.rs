//! Faults the simulator injects: partitions, crashes (torn writes, lost disks), clock jumps and membership changes, and bringing replicas back.

use super::*;

impl Sim {
    /// One fault of a class the configuration allows, then the next in
    /// 100–300 ms.
    pub(super) fn chaos(&mut self) {
        if self.ended {
            return;
        }
        // A fault hits one group, a shard or the directory (groups share
        // no consensus messages, so a cut between groups would change
        // nothing but the directory's answers to the shards).
        let shard = if self.groups > 1 {
            self.rng.index(self.groups)
        } else {
            0
        };
        let scope = self.group_slots(shard);
        // Fault budgets count the group's members (a minority may fail).
        let g = self.member_slots(shard).len();
        let mut classes = Vec::new();
        if self.cfg.faults.partition {
            classes.push("partition");
        }
        if self.cfg.faults.crash {
            classes.push("crash");
        }
        if self.cfg.faults.clock {
            classes.push("clock");
        }
        if self.cfg.faults.disk {
            classes.push("disk");
        }
        // Only Creek's replicas have a disk to lose.
        if self.cfg.faults.wipes > 0 && self.cfg.protocol == Protocol::Creek {
            classes.push("wipe");
        }
        if self.cfg.faults.members && self.cfg.protocol == Protocol::Creek {
            classes.push("member");
        }
        let class = classes[self.rng.index(classes.len())];
        match class {
            "partition" if !self.net.partitioned() => self.partition(scope),
            "crash" => self.crash_one(scope, g),
            "disk" => self.disk_fault(scope, g),
            "wipe" => self.wipe(scope, g),
            "member" => self.change_members(shard),
            "clock" => self.clock_jump(scope),
            _ => {}
        }
        let at = self.now + self.rng.range(100_000, 300_000);
        self.schedule(at, Ev::Chaos);
    }

    /// A partition of one of six shapes among the replicas of `scope` (one
    /// shard), healed after a while.
    pub(super) fn partition(&mut self, scope: std::ops::Range<usize>) {
        *self.faults.entry("partition").or_default() += 1;
        let (base, n) = (scope.start, scope.len());
        // Slot `k` of the shard.
        let at = |k: usize| base + k;
        let kind = self.rng.index(6);
        let victim = at(self.rng.index(n));
        match kind {
            0 => {
                for j in scope.clone() {
                    if j != victim {
                        self.net.block(victim, j);
                        self.net.block(j, victim);
                    }
                }
            }
            1 => {
                let minority = (n - 1) / 2;
                for a in 0..minority {
                    for b in minority..n {
                        self.net.block(at(a), at(b));
                        self.net.block(at(b), at(a));
                    }
                }
            }
            2 => {
                // Ring: each node reaches only its neighbours.
                for a in 0..n {
                    for b in 0..n {
                        let d = (a + n - b) % n;
                        if d > 1 && d < n - 1 {
                            self.net.block(at(a), at(b));
                        }
                    }
                }
            }
            3 => {
                // Asymmetric: the victim hears everyone, nobody hears it.
                for j in scope.clone() {
                    if j != victim {
                        self.net.block(victim, j);
                    }
                }
            }
            4 => {
                // Starved: the victim hears everything but payloads,
                // long enough that its held appends fetch a
                // checkpoint rather than wait.
                self.net.starve(victim);
            }
            _ => {
                // Flapping: short cuts of one node, healed quickly.
                for j in scope.clone() {
                    if j != victim {
                        self.net.block(victim, j);
                        self.net.block(j, victim);
                    }
                }
                let at = self.now + self.rng.range(5_000, 20_000);
                self.schedule(at, Ev::Heal);
            }
        }
        let lasts = if kind == 4 {
            self.rng.range(500_000, 1_500_000)
        } else {
            self.rng.range(50_000, 400_000)
        };
        self.schedule(self.now + lasts, Ev::Heal);
    }

    /// A crash of one replica while a majority stays up: a third stay down for the run.
    pub(super) fn crash_one(&mut self, scope: std::ops::Range<usize>, g: usize) {
        let down = self.down(self.group_of(scope.start));
        let victim = scope.start + self.rng.index(scope.len());
        if down < (g - 1) / 2 && self.nodes[victim].node.is_up() {
            self.crash(victim, false);
            // A third stay down until the clients stop (crash-stop
            // for the run); the others recover.
            if self.rng.chance(1.0 / 3.0) {
                *self.faults.entry("crash_stop").or_default() += 1;
            } else {
                *self.faults.entry("crash_recovery").or_default() += 1;
                let at = self.now + self.rng.range(100_000, 800_000);
                self.schedule(at, Ev::Restart { node: victim });
            }
        }
    }

    /// A disk fault, aimed at a replica with writes in flight: unsynced writes lost, a torn write, a failed fsync or a stall.
    pub(super) fn disk_fault(&mut self, scope: std::ops::Range<usize>, g: usize) {
        let down = self.down(self.group_of(scope.start));
        // Aim at a replica with writes in flight: that is where a
        // crash loses something.
        let unsynced: Vec<usize> = scope
            .clone()
            .filter(|&j| self.nodes[j].node.is_up() && self.nodes[j].node.has_unsynced())
            .collect();
        let victim = if unsynced.is_empty() {
            scope.start + self.rng.index(scope.len())
        } else {
            unsynced[self.rng.index(unsynced.len())]
        };
        if down < (g - 1) / 2 && self.nodes[victim].node.is_up() {
            match self.rng.index(4) {
                0 => {
                    *self.faults.entry("disk_unsynced_lost").or_default() += 1;
                    self.crash(victim, false);
                }
                1 => {
                    *self.faults.entry("disk_torn_write").or_default() += 1;
                    self.crash(victim, true);
                }
                2 => {
                    *self.faults.entry("disk_fsync_fails").or_default() += 1;
                    self.nodes[victim].node.fail_next_sync();
                }
                _ => {
                    // A disk that falls behind (a slow device, a
                    // noisy neighbour): writes pile up until the
                    // node pushes back on its clients.
                    *self.faults.entry("disk_stall").or_default() += 1;
                    self.nodes[victim].stalled_until = self.now + STALL_US;
                }
            }
            if !self.nodes[victim].node.is_up() {
                let at = self.now + self.rng.range(50_000, 400_000);
                self.schedule(at, Ev::Restart { node: victim });
            }
        }
    }

    /// A lost disk: the replica is rebuilt from its peers.
    pub(super) fn wipe(&mut self, scope: std::ops::Range<usize>, g: usize) {
        // A replica that lost its data takes no part until it is
        // rebuilt: every fault counts it as down, so a majority
        // always holds its data (`wipe2` loses two of five at a
        // time).
        let wiped = scope.clone().filter(|i| self.nodes[*i].wiped).count();
        let victim = scope.start + self.rng.index(scope.len());
        if wiped < usize::from(self.cfg.faults.wipes)
            && self.down(self.group_of(scope.start)) < (g - 1) / 2
            && self.nodes[victim].node.is_up()
            && !self.nodes[victim].node.is_lost()
        {
            *self.faults.entry("disk_lost").or_default() += 1;
            if debug_log() {
                eprintln!("wipe replica {victim} at {} us", self.now);
            }
            self.crash(victim, false);
            self.nodes[victim].node.lose_disk();
            self.nodes[victim].wiped = true;
            self.disks_lost.insert(victim);
            let at = self.now + self.rng.range(50_000, 400_000);
            self.schedule(at, Ev::Restart { node: victim });
        }
    }

    /// A replica's clock jumps back.
    pub(super) fn clock_jump(&mut self, scope: std::ops::Range<usize>) {
        *self.faults.entry("clock_jump").or_default() += 1;
        let victim = scope.start + self.rng.index(scope.len());
        self.nodes[victim].clock_offset_us -= self.rng.range(1_000, 50_000) as i64;
    }

    /// A crash: memory is gone, and so is every write not yet synced
    /// (`torn`: except an arbitrary part of them, as a torn write leaves);
    /// executions in flight and messages to the node are lost, and the
    /// clients waiting on it learn nothing more.
    pub(super) fn crash(&mut self, i: usize, torn: bool) {
        if self.cfg.check_invariants || debug_log() {
            eprintln!("crash replica {i} at {} us", self.now);
        }
        if !self.nodes[i].node.is_up() {
            return;
        }
        let rng = &mut self.rng;
        self.nodes[i].node.crash(&mut |n| {
            if torn {
                rng.range(0, n as u64 + 1) as usize
            } else {
                0
            }
        });
        self.went_down(i);
    }

    /// Replica `i` went down: what ran on it is gone.
    pub(super) fn went_down(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.epoch += 1;
        n.disk_wake_at = None;
        n.busy_cores = 0;
        self.drop_waiting(i);
    }

    /// The clients waiting on replica `i` learn nothing more: each op's
    /// outcome is unknown to its client (the op may still commit).
    pub(super) fn drop_waiting(&mut self, i: usize) {
        for (_, index) in std::mem::take(&mut self.nodes[i].handles) {
            self.history.ops[index].origin_crashed = true;
            self.release_client(index);
        }
    }

    pub(super) fn restart(&mut self, i: usize) {
        let node = &mut self.nodes[i].node;
        if node.is_up() {
            return;
        }
        if self.cfg.check_invariants || debug_log() {
            eprintln!("restart replica {i} at {} us", self.now);
        }
        // A replica that cannot restart stays down; the run then does not
        // settle and the checkers say so.
        if let Err(e) = node.restart() {
            eprintln!("replica {i} cannot restart at {} us: {e}", self.now);
            *self.faults.entry("restart_refused").or_default() += 1;
        }
        let len = self.nodes[i].node.committed().len();
        self.checked_len[i] = self.checked_len[i].min(len);
        let wiped = self.nodes[i].wiped;
        if let Some(last) = self.nodes[i].node.last_issued_seq().filter(|_| !wiped) {
            self.forget_lost_ops(i, last);
        }
        self.after(i);
    }

    /// Ops replica `i` issued after `last` were lost: with writes that never
    /// became durable (no peer saw them: messages wait for the disk), or
    /// with the disk itself. Their records keep what the client saw but no
    /// longer name an id (the ids are remembered in `lost_ids`; a
    /// restarted or rebuilt replica resumes past them).
    pub(super) fn forget_lost_ops(&mut self, i: usize, last: u64) {
        let me = ReplicaId(i as u16 + 1);
        for r in &mut self.history.ops {
            if r.replica == i && r.id.is_some_and(|id| id.origin == me && id.seq > last) {
                debug_assert!(
                    r.origin_crashed,
                    "a lost op's client knew its origin crashed"
                );
                *self.faults.entry("ops_lost_unsynced").or_default() += 1;
                if let Some(id) = r.id.take() {
                    self.lost_ids.insert(id);
                }
                r.lost = true;
            }
        }
    }

    /// Replicas of group `s` down, or up but lost (they take no part), or
    /// rebuilt and still catching up: such a replica does not yet hold
    /// what it acknowledged before its disk was lost, so a second lost
    /// disk meanwhile would take entries a majority acknowledged (two of
    /// three), which the group then rightly refuses to elect past.
    pub(super) fn down(&self, s: usize) -> usize {
        self.group_slots(s)
            .map(|i| &self.nodes[i])
            .filter(|x| {
                x.slot == Slot::Member
                    && (!x.node.is_up() || x.node.is_lost() || x.node.catching_up())
            })
            .count()
    }

    /// Whether each replica is in the group, as a member applied it (a
    /// removal whose proposal was lost left its replica in), else as the
    /// slots say: what the end of the run checks.
    pub(super) fn in_group(&self) -> Vec<bool> {
        let mut out = Vec::with_capacity(self.nodes.len());
        for s in 0..self.groups {
            let group = self
                .group_slots(s)
                .map(|i| &self.nodes[i])
                .filter(|n| n.slot == Slot::Member && n.node.is_member())
                .find_map(|n| n.node.group_members());
            out.extend(self.group_slots(s).map(|i| match &group {
                Some(g) => g.contains(&ReplicaId(i as u16 + 1)),
                None => self.nodes[i].slot == Slot::Member,
            }));
        }
        out
    }

    /// The replicas of group `s` in the group (or being added to it).
    pub(super) fn member_slots(&self, s: usize) -> Vec<usize> {
        self.group_slots(s)
            .filter(|i| self.nodes[*i].slot == Slot::Member)
            .collect()
    }

    /// A membership change, as an operator would make it: while the group
    /// has its initial size, a spare is added (it starts on an empty disk,
    /// configured with the members, and joins through state transfer);
    /// once every member holds its data, one more than that, a random
    /// member is removed (the leader too: it hands over first, and the
    /// change is tried again later). The leader proposes; a refusal (a
    /// change in progress, no leader) changes nothing.
    pub(super) fn change_members(&mut self, shard: usize) {
        let Some(group) = self
            .member_slots(shard)
            .into_iter()
            .filter(|&i| self.nodes[i].node.is_member())
            .find_map(|i| self.nodes[i].node.group_members())
        else {
            return;
        };
        let slot_of = |r: ReplicaId| usize::from(r.0) - 1;
        // An add lost with a leader change (or still on its way) is
        // proposed again: the leader refuses it while one is in progress,
        // or once it applied. A removal is not taken back: if it was lost,
        // the replica stays in the group but out of the clients' and the
        // checks' sight, which the end of the run settles (`finish`).
        let change = self
            .group_slots(shard)
            .map(|i| ReplicaId(i as u16 + 1))
            .find(|id| self.nodes[slot_of(*id)].slot == Slot::Member && !group.contains(id))
            .map(MemberChange::AddLearner);
        let spare = self
            .group_slots(shard)
            .find(|i| self.nodes[*i].slot == Slot::Spare);
        let change = match (change, spare) {
            (Some(c), _) => c,
            (None, Some(spare)) if group.len() <= self.cfg.replicas => {
                MemberChange::AddLearner(ReplicaId(spare as u16 + 1))
            }
            _ if group.len() > self.cfg.replicas && self.down(shard) == 0 => {
                MemberChange::Remove(group[self.rng.index(group.len())])
            }
            _ => return,
        };
        // Only the leader takes it; the others refuse.
        let proposers: Vec<usize> = group
            .iter()
            .map(|r| slot_of(*r))
            .filter(|&i| self.nodes[i].node.is_up())
            .collect();
        for i in proposers {
            if self.nodes[i].node.change_group(change).is_err() {
                continue;
            }
            self.after(i);
            let target = slot_of(change.replica());
            if debug_log() {
                eprintln!("{change:?} (replica {target}) at {} us", self.now);
            }
            match change {
                MemberChange::AddLearner(_) => {
                    *self.faults.entry("member_added").or_default() += 1;
                    if self.nodes[target].slot == Slot::Spare {
                        self.nodes[target].node.configure_group(&group);
                        self.nodes[target].slot = Slot::Member;
                        self.restart(target);
                    }
                }
                MemberChange::Remove(_) => {
                    *self.faults.entry("member_removed").or_default() += 1;
                    self.nodes[target].slot = Slot::Removed;
                }
                MemberChange::Promote(_) => {}
            }
            return;
        }
    }
}
