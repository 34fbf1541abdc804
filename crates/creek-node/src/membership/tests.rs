use super::*;

fn ids(n: u16) -> Vec<ReplicaId> {
    (1..=n).map(ReplicaId).collect()
}

fn node(me: u16, n: u16, nonce: u64) -> Membership {
    let peers = ids(n).into_iter().filter(|r| r.0 != me).collect();
    Membership::new(ReplicaId(me), peers, Identity::joining(nonce), true, false)
}

/// Deliver every hello until none is left (no replica reserved seqs).
fn run(nodes: &mut [Membership]) {
    run_reserving(nodes, &[]);
}

#[test]
fn a_new_cluster_forms_when_every_member_started() {
    let mut nodes = vec![node(1, 3, 11), node(2, 3, 22)];
    run(&mut nodes);
    assert!(
        nodes.iter().all(|n| !n.is_member()),
        "replica 3 not heard yet"
    );
    assert_eq!(
        nodes[0].standing(),
        Standing::Joining {
            waiting_for: vec![ReplicaId(3)]
        }
    );
    nodes.push(node(3, 3, 33));
    run(&mut nodes);
    assert!(nodes.iter().all(Membership::is_member));
    let ids: BTreeSet<u64> = nodes.iter().map(|n| n.identity.cluster_id()).collect();
    assert_eq!(ids.len(), 1);
    assert!(nodes.iter_mut().all(|n| n.take_write().is_some()));
    // Everyone verified everyone.
    for n in &nodes {
        for p in &n.peers {
            assert!(n.accepts(*p), "{} does not accept {p}", n.me);
        }
    }
}

#[test]
fn a_replica_that_lost_its_data_is_told_so_and_stays_out() {
    let mut nodes = vec![node(1, 3, 11), node(2, 3, 22), node(3, 3, 33)];
    run(&mut nodes);
    // Replica 2 comes back with an empty data directory (a new nonce).
    nodes[1] = node(2, 3, 99);
    run(&mut nodes);
    assert!(matches!(nodes[1].standing(), Standing::Lost { .. }));
    assert!(!nodes[1].is_member());
    assert_eq!(nodes[1].identity.founders, None);
    assert!(nodes[0].lost_peers().contains(&ReplicaId(2)));
    assert!(!nodes[0].accepts(ReplicaId(2)));
    assert!(!nodes[0].quorum_lost());
    // A second one: a majority lost its data.
    nodes[2] = node(3, 3, 98);
    run(&mut nodes);
    assert!(nodes[0].quorum_lost());
    // A restart with the data kept is a member again at once.
    let id = nodes[0].identity.clone();
    let mut restarted = Membership::new(
        ReplicaId(1),
        vec![ReplicaId(2), ReplicaId(3)],
        id,
        false,
        false,
    );
    assert!(restarted.is_member());
    assert!(restarted.take_write().is_none());
}

/// Deliver every hello until none is left, filling in the fields the
/// node fills: each sender's reservation, and what it heard the
/// receiver reserve.
fn run_reserving(nodes: &mut [Membership], reserved: &[(ReplicaId, u64)]) {
    for _ in 0..10 {
        let mut msgs = Vec::new();
        for n in nodes.iter_mut() {
            let from = n.me;
            msgs.extend(n.take_messages().into_iter().map(|(to, h)| (from, to, h)));
        }
        if msgs.is_empty() {
            return;
        }
        for (from, to, mut h) in msgs {
            h.reserved = reserved.iter().find(|(r, _)| *r == from).map_or(0, |r| r.1);
            let sender = nodes.iter().position(|n| n.me == from).unwrap_or(0);
            h.peer_reserved = nodes[sender].reserved_by(to);
            let i = nodes.iter().position(|n| n.me == to).unwrap_or(0);
            nodes[i].on_hello(from, h);
        }
    }
}

#[test]
fn a_lost_replica_resumes_past_the_reservation_its_peers_heard() {
    let mut nodes = vec![node(1, 3, 11), node(2, 3, 22), node(3, 3, 33)];
    run(&mut nodes);
    // Replica 2 reserves seqs through 1,500 and says so at once.
    nodes[1].announce();
    run_reserving(&mut nodes, &[(ReplicaId(2), 1_500)]);
    assert_eq!(nodes[0].reserved_by(ReplicaId(2)), 1_500);
    assert_eq!(nodes[2].reserved_by(ReplicaId(2)), 1_500);
    // It loses its disk: its peers hold none of its ops, but tell it
    // what it reserved, and a restart announces nothing lower.
    nodes[1] = node(2, 3, 99);
    run_reserving(&mut nodes, &[]);
    let marks = nodes[1]
        .rebuild_marks()
        .expect("one of three lost rebuilds");
    assert_eq!(marks.own_seq, 0);
    assert_eq!(marks.own_reserved, 1_500);
    assert_eq!(nodes[0].reserved_by(ReplicaId(2)), 1_500);
}

#[test]
fn a_lost_replica_rebuilds_only_while_a_majority_holds_data() {
    let mut nodes = vec![node(1, 3, 11), node(2, 3, 22), node(3, 3, 33)];
    run(&mut nodes);
    nodes[1] = node(2, 3, 99);
    run(&mut nodes);
    let source = nodes[1]
        .rebuild_marks()
        .expect("one of three lost rebuilds")
        .source;
    assert_ne!(source, ReplicaId(2));
    nodes[1].rebuilt(7, 40);
    assert!(nodes[1].is_member());
    assert_eq!(nodes[1].identity.nonce, 22, "it takes back its old nonce");
    assert_eq!(nodes[1].identity.floor, 7);
    assert!(nodes[1].take_write().is_some());
    run(&mut nodes);
    assert!(nodes[0].accepts(ReplicaId(2)) && nodes[2].accepts(ReplicaId(2)));
    for n in &nodes {
        n.check_invariants().expect("invariants");
    }
    // Two of three lost at once: the one left with data may lack what
    // only they acknowledged, so neither rebuilds from it.
    nodes[1] = node(2, 3, 98);
    nodes[2] = node(3, 3, 97);
    run(&mut nodes);
    for _ in 0..3 {
        for n in nodes.iter_mut() {
            for _ in 0..HELLO_RETRY_TICKS {
                n.tick();
            }
        }
        run(&mut nodes);
    }
    assert!(matches!(nodes[1].standing(), Standing::Lost { .. }));
    assert!(nodes[1].rebuild_marks().is_none());
    assert!(nodes[2].rebuild_marks().is_none());
    assert!(nodes[0].quorum_lost());
    // Unless the operator says so.
    nodes[1].rebuild_despite_data_loss = true;
    assert_eq!(
        nodes[1].rebuild_marks().map(|m| m.source),
        Some(ReplicaId(1))
    );
}

/// Deliver every hello, as the node sends them (a member names its
/// group, with `voters` among it, at configuration index 10), to the
/// nodes present (others are gone: what is sent to them is lost).
fn run_naming(nodes: &mut [Membership], group: &BTreeSet<ReplicaId>, voters: &BTreeSet<ReplicaId>) {
    for _ in 0..10 {
        let mut msgs = Vec::new();
        for n in nodes.iter_mut() {
            let (from, member) = (n.me, n.is_member());
            for (to, mut h) in n.take_messages() {
                if member {
                    h.group = group.iter().copied().collect();
                    h.voters = voters.iter().copied().collect();
                    h.conf_index = 10;
                }
                msgs.push((from, to, h));
            }
        }
        for (from, to, h) in msgs {
            if let Some(n) = nodes.iter_mut().find(|n| n.me == to) {
                n.on_hello(from, h);
            }
        }
    }
}

/// A learner just added (replica 4, new, not yet rebuilt from a
/// checkpoint) holds no data, and neither does replica 1, which lost
/// its disk: replica 1 still rebuilds, since the voters holding data
/// (2 and 3) are a majority of the voters; a learner acknowledged
/// nothing.
#[test]
fn a_learner_without_data_does_not_count_against_a_rebuild() {
    let mut nodes = vec![node(1, 3, 11), node(2, 3, 22), node(3, 3, 33)];
    run(&mut nodes);
    let group: BTreeSet<ReplicaId> = [1, 2, 3, 4].map(ReplicaId).into();
    let voters: BTreeSet<ReplicaId> = [1, 2, 3].map(ReplicaId).into();
    for n in &mut nodes {
        n.set_group(&group, voters.clone());
    }
    nodes[0] = node(1, 3, 99);
    nodes.push(node(4, 4, 44));
    run_naming(&mut nodes, &group, &voters);
    assert!(matches!(nodes[0].standing(), Standing::Lost { .. }));
    assert_eq!(
        nodes[0].peers,
        vec![ReplicaId(2), ReplicaId(3), ReplicaId(4)]
    );
    let marks = nodes[0]
        .rebuild_marks()
        .expect("a majority of voters holds data");
    assert_ne!(marks.source, ReplicaId(4));
}

/// A voter was removed while the replica added before it was still a
/// learner, leaving two voters (1 and 2, learner 3); then replica 1
/// loses its disk. Every entry committed since needed both voters, so
/// replica 2 holds all of it: replica 1 rebuilds from it, and the group
/// has not lost data (a majority rule would have stalled it for good).
#[test]
fn one_voter_of_two_holding_data_is_enough_to_rebuild() {
    let mut nodes = vec![node(1, 3, 11), node(2, 3, 22), node(3, 3, 33)];
    run(&mut nodes);
    let group: BTreeSet<ReplicaId> = [1, 2, 3].map(ReplicaId).into();
    let voters: BTreeSet<ReplicaId> = [1, 2].map(ReplicaId).into();
    for n in &mut nodes {
        n.set_group(&group, voters.clone());
    }
    nodes[0] = node(1, 3, 99);
    run_naming(&mut nodes, &group, &voters);
    assert!(matches!(nodes[0].standing(), Standing::Lost { .. }));
    assert!(!nodes[1].quorum_lost(), "replica 2 holds every commit");
    let marks = nodes[0]
        .rebuild_marks()
        .expect("the voter left meets every majority of two");
    assert_ne!(marks.source, ReplicaId(1));
    // Of four voters, two holding data still meet every majority
    // (three); one does not.
    assert!(holders_meet_every_quorum(4, 2));
    assert!(!holders_meet_every_quorum(4, 3));
    assert!(holders_meet_every_quorum(3, 1));
    assert!(!holders_meet_every_quorum(3, 2));
    assert!(holders_meet_every_quorum(5, 2));
    assert!(!holders_meet_every_quorum(5, 3));
}

/// After the group changed (replica 2 removed for good, replica 4
/// added), replica 3 loses its data and restarts with the configuration
/// it was first given. It waits for the group the members name, not
/// for replica 2, and rebuilds once replicas 1 and 4 answered.
#[test]
fn a_lost_replica_waits_for_the_group_the_members_name() {
    let mut nodes = vec![node(1, 3, 11), node(2, 3, 22), node(3, 3, 33)];
    run(&mut nodes);
    let group: BTreeSet<ReplicaId> = [1, 3, 4].map(ReplicaId).into();
    nodes.remove(1);
    for n in &mut nodes {
        n.set_group(&group, group.clone());
    }
    let mut added = nodes[0].identity.clone();
    added.nonce = 44;
    nodes.push(Membership::new(
        ReplicaId(4),
        vec![ReplicaId(1), ReplicaId(3)],
        added,
        false,
        false,
    ));
    nodes[1] = node(3, 3, 98);
    // Replica 2 is gone: what is sent to it is lost.
    run_naming(&mut nodes, &group, &group);
    assert!(matches!(nodes[1].standing(), Standing::Lost { .. }));
    assert_eq!(nodes[1].peers, vec![ReplicaId(1), ReplicaId(4)]);
    let marks = nodes[1].rebuild_marks().expect("every member answered");
    assert!([ReplicaId(1), ReplicaId(4)].contains(&marks.source));
}

#[test]
fn a_founder_that_learns_late_joins_and_another_cluster_is_refused() {
    let mut a = vec![node(1, 2, 1), node(2, 2, 2)];
    run(&mut a);
    let mut b = vec![node(1, 2, 5), node(2, 2, 6)];
    run(&mut b);
    // Replica 1 of cluster b hears replica 2 of cluster a.
    let hello = Hello {
        nonce: 2,
        state: MemberState::Member,
        founders: a[1].identity.founders.clone().unwrap_or_default(),
        reply: false,
        term: 1,
        peer_seq: 0,
        reserved: 0,
        peer_reserved: 0,
        floor: 0,
        last_index: 0,
        group: Vec::new(),
        voters: Vec::new(),
        conf_index: 0,
        directory: Directory::default(),
    };
    b[0].on_hello(ReplicaId(2), hello);
    assert_eq!(b[0].foreign_peers(), vec![ReplicaId(2)]);
    assert!(!b[0].accepts(ReplicaId(2)));
    // A joining founder hears a member naming it.
    let mut late = node(2, 2, 2);
    let founders = a[0].identity.founders.clone();
    let hello = Hello {
        nonce: 1,
        state: MemberState::Member,
        founders: founders.clone().unwrap_or_default(),
        reply: true,
        term: 1,
        peer_seq: 0,
        reserved: 0,
        peer_reserved: 0,
        floor: 0,
        last_index: 0,
        group: Vec::new(),
        voters: Vec::new(),
        conf_index: 0,
        directory: Directory::default(),
    };
    assert!(late.on_hello(ReplicaId(1), hello));
    assert_eq!(late.identity.founders, founders);
}

#[test]
fn told_to_rejoin_a_lost_replica_becomes_a_member() {
    let mut nodes = vec![node(1, 2, 1), node(2, 2, 2)];
    run(&mut nodes);
    nodes[1] = Membership::new(
        ReplicaId(2),
        vec![ReplicaId(1)],
        Identity::joining(7),
        true,
        true,
    );
    run(&mut nodes);
    assert!(nodes[1].is_member());
    assert!(nodes[1]
        .take_events()
        .iter()
        .any(|e| matches!(e, Event::RejoinedDespiteLoss(_))));
}
