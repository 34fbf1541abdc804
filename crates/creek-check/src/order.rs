//! Order checks of the committed order against what clients saw.
//!
//! Both take the history and the committed order (op ids, first committed
//! first) and return human-readable violation lines, at most
//! [`MAX_REPORTED`]; an empty list means the check passed. Ops missing from
//! the committed order are ignored here (other checkers report loss).

use std::collections::BTreeMap;

use creek_core::OpId;
use rustc_hash::FxHashMap;

use crate::history::History;

/// Most violation lines a check returns.
pub const MAX_REPORTED: usize = 20;

/// Position of every op in `committed` (the first, should an id repeat).
fn positions(committed: &[OpId]) -> FxHashMap<OpId, usize> {
    let mut pos = FxHashMap::default();
    for (i, id) in committed.iter().enumerate() {
        pos.entry(*id).or_insert(i);
    }
    pos
}

/// A replicated op found in the committed order.
struct Placed {
    index: usize,
    id: OpId,
    client: u32,
    invoked_at_us: u64,
    pos: usize,
}

/// Real-time order of strong ops: if a's final view arrived before b was
/// invoked, a precedes b in the committed order.
///
/// "Before" is strict: a final view and an invocation at the same
/// microsecond are treated as concurrent. Strong ops sorted by final-view
/// time are swept against strong ops sorted by invocation time, keeping the
/// op with the highest committed position among those answered so far:
/// `O(n log n)`. Each violating `b` is reported once, against that op.
pub fn check_real_time(history: &History, committed: &[OpId]) -> Vec<String> {
    let pos = positions(committed);
    let mut invoked: Vec<Placed> = Vec::new();
    let mut answered: Vec<(u64, usize)> = Vec::new(); // (final view time, into `invoked`)
    for (index, r) in history.ops.iter().enumerate() {
        let Some(id) = r.id.filter(|_| r.strong) else {
            continue;
        };
        let Some(&p) = pos.get(&id) else { continue };
        if let Some(v) = r.final_view() {
            answered.push((v.at_us, invoked.len()));
        }
        invoked.push(Placed {
            index,
            id,
            client: r.client,
            invoked_at_us: r.invoked_at_us,
            pos: p,
        });
    }
    answered.sort_unstable_by_key(|&(t, i)| (t, invoked[i].index));
    let mut order: Vec<usize> = (0..invoked.len()).collect();
    order.sort_unstable_by_key(|&i| (invoked[i].invoked_at_us, invoked[i].index));

    let mut out = Vec::new();
    let mut next = 0;
    // The answered op with the highest committed position: (time, into `invoked`).
    let mut latest: Option<(u64, usize)> = None;
    for b in order {
        let b = &invoked[b];
        while let Some(&(t, a)) = answered.get(next) {
            if t >= b.invoked_at_us {
                break;
            }
            if latest.is_none_or(|(_, l)| invoked[a].pos > invoked[l].pos) {
                latest = Some((t, a));
            }
            next += 1;
        }
        let Some((t, a)) = latest else { continue };
        let a = &invoked[a];
        if a.pos > b.pos {
            out.push(format!(
                "real-time order: strong op {} (history #{}, client {}) got its final view at \
                 {t} us, before strong op {} (history #{}, client {}) was invoked at {} us, yet \
                 is committed after it (position {} > {})",
                a.id, a.index, a.client, b.id, b.index, b.client, b.invoked_at_us, a.pos, b.pos
            ));
            if out.len() == MAX_REPORTED {
                break;
            }
        }
    }
    out
}

/// Session order: each client's replicated ops (those with an id) appear in
/// the committed order in the order the client issued them (a client issues
/// one op at a time to one replica).
///
/// An abandoned op — its origin crashed (or left the group) before the
/// client received a final view, so the client went on without knowing its
/// outcome — must still
/// follow the session's earlier ops, but it may take effect after the
/// session's later ones (as a timed-out request may in any replicated
/// store: it sits on the crashed origin's disk until that replica returns,
/// and the session's next ops cannot wait for it without losing
/// availability).
///
/// Issue order is invocation time, ties broken by history index. Each op is
/// compared with the client's earlier op committed latest, so any inversion
/// is caught: `O(n log n)` for the sort, linear after.
pub fn check_session_order(history: &History, committed: &[OpId]) -> Vec<String> {
    let pos = positions(committed);
    let mut placed: Vec<Placed> = history
        .ops
        .iter()
        .enumerate()
        .filter_map(|(index, r)| {
            let id = r.id?;
            let &p = pos.get(&id)?;
            Some(Placed {
                index,
                id,
                client: r.client,
                invoked_at_us: r.invoked_at_us,
                pos: p,
            })
        })
        .collect();
    placed.sort_unstable_by_key(|p| (p.invoked_at_us, p.index));

    let mut out = Vec::new();
    // Per client, its earlier op committed latest (into `placed`).
    let mut latest: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, b) in placed.iter().enumerate() {
        match latest.get(&b.client).copied() {
            Some(a) if placed[a].pos > b.pos => {
                let a = &placed[a];
                out.push(format!(
                    "session order: client {} issued op {} (history #{}, invoked at {} us) before \
                     op {} (history #{}, invoked at {} us), yet it is committed after it \
                     (position {} > {})",
                    b.client,
                    a.id,
                    a.index,
                    a.invoked_at_us,
                    b.id,
                    b.index,
                    b.invoked_at_us,
                    a.pos,
                    b.pos
                ));
                if out.len() == MAX_REPORTED {
                    break;
                }
            }
            _ if is_abandoned(&history.ops[b.index]) => {}
            _ => {
                latest.insert(b.client, i);
            }
        }
    }
    out
}

/// The client gave up on the op: its origin crashed, or left the group,
/// before the final view.
fn is_abandoned(op: &crate::history::OpRecord) -> bool {
    (op.origin_crashed || op.origin_left) && op.final_view().is_none()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::history::{OpRecord, SeenView};
    use bytes::Bytes;
    use creek_core::{ReplicaId, ViewKind};
    use creek_types::ProcCall;

    fn id(seq: u64) -> OpId {
        OpId::new(ReplicaId(0), seq)
    }

    /// An op of `client` with id `seq`, invoked at `from`, final view at `to`.
    fn rec(client: u32, seq: u64, strong: bool, from: u64, to: Option<u64>) -> OpRecord {
        OpRecord {
            client,
            replica: 0,
            id: Some(id(seq)),
            call: ProcCall::new("kv.get", Bytes::new()),
            strong,
            wants_final: true,
            invoked_at_us: from,
            views: to
                .map(|at_us| SeenView {
                    at_us,
                    kind: ViewKind::Stable,
                    outcome: Ok(Bytes::new()),
                    time: 0,
                })
                .into_iter()
                .collect(),
            origin_crashed: false,
            origin_left: false,
            lost: false,
        }
    }

    fn history(ops: Vec<OpRecord>) -> History {
        History { ops }
    }

    #[test]
    fn real_time_ok() {
        let h = history(vec![
            rec(0, 1, true, 0, Some(10)),
            rec(1, 2, true, 5, Some(15)),  // concurrent with 1
            rec(2, 3, true, 10, Some(20)), // invoked when 1 answered: concurrent
            rec(0, 4, true, 21, None),
            rec(1, 5, false, 30, Some(31)), // weak: ignored
        ]);
        let committed = [id(2), id(3), id(1), id(4)];
        assert!(check_real_time(&h, &committed).is_empty());
        // Missing ops are ignored.
        assert!(check_real_time(&h, &[id(4)]).is_empty());
    }

    #[test]
    fn real_time_violation() {
        let h = history(vec![
            rec(0, 1, true, 0, Some(10)),
            rec(1, 2, true, 11, Some(20)),
            rec(2, 3, true, 12, None),
            rec(3, 4, false, 0, Some(1)),
        ]);
        // 2 and 3 are both invoked after 1 was answered, yet committed first.
        let v = check_real_time(&h, &[id(4), id(2), id(3), id(1)]);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(
            v[0].contains("strong op r0.1 (history #0, client 0)"),
            "{}",
            v[0]
        );
        assert!(
            v[0].contains("before strong op r0.2 (history #1"),
            "{}",
            v[0]
        );
        assert!(v[0].contains("position 3 > 1"), "{}", v[0]);
        assert!(v[1].contains("strong op r0.3"), "{}", v[1]);
    }

    #[test]
    fn real_time_reports_at_most_twenty() {
        let mut ops = vec![rec(0, 1, true, 0, Some(1))];
        ops.extend((2..40).map(|s| rec(1, s, true, 10 + s, Some(100 + s))));
        let mut committed: Vec<OpId> = (2..40).map(id).collect();
        committed.push(id(1));
        assert_eq!(
            check_real_time(&history(ops), &committed).len(),
            MAX_REPORTED
        );
    }

    #[test]
    fn session_order_ok() {
        let h = history(vec![
            rec(0, 1, false, 0, None),
            rec(1, 2, true, 1, Some(5)),
            rec(0, 3, true, 2, Some(8)),
            rec(1, 4, false, 6, None),
            OpRecord {
                id: None,
                ..rec(0, 0, false, 9, Some(9))
            }, // local read: ignored
            rec(0, 5, false, 10, None),
        ]);
        // Clients interleave freely; each client's own ops keep their order.
        let committed = [id(2), id(1), id(4), id(3), id(5)];
        assert!(check_session_order(&h, &committed).is_empty());
        // Missing ops are ignored.
        assert!(check_session_order(&h, &[id(5), id(4)]).is_empty());
    }

    #[test]
    fn session_order_violation() {
        let h = history(vec![
            rec(0, 1, false, 0, None),
            rec(0, 2, true, 1, Some(3)),
            rec(0, 3, false, 4, None),
            rec(1, 4, false, 0, None),
        ]);
        // Client 0's op 1 is committed after its ops 2 and 3.
        let v = check_session_order(&h, &[id(2), id(4), id(3), id(1)]);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(
            v[0].contains("client 0 issued op r0.1 (history #0"),
            "{}",
            v[0]
        );
        assert!(v[0].contains("before op r0.2 (history #1"), "{}", v[0]);
        assert!(v[0].contains("position 3 > 0"), "{}", v[0]);
        assert!(v[1].contains("before op r0.3"), "{}", v[1]);
        // Swapping two later ops is caught too.
        let v = check_session_order(&h, &[id(1), id(3), id(2), id(4)]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("issued op r0.2"), "{}", v[0]);
    }

    #[test]
    fn abandoned_op_may_follow_later_ops_but_not_precede_earlier_ones() {
        let abandoned = OpRecord {
            origin_crashed: true,
            origin_left: false,
            ..rec(0, 2, true, 1, None)
        };
        let h = history(vec![
            rec(0, 1, false, 0, Some(0)),
            abandoned,
            rec(0, 3, false, 4, Some(4)),
        ]);
        // Committed after the session's later op: allowed.
        assert!(check_session_order(&h, &[id(1), id(3), id(2)]).is_empty());
        // Committed before the session's earlier op: still a violation.
        let v = check_session_order(&h, &[id(2), id(1), id(3)]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("issued op r0.1"), "{}", v[0]);
        // With a final view the client knew the outcome: order holds.
        let h = history(vec![
            rec(0, 1, false, 0, Some(0)),
            OpRecord {
                origin_crashed: true,
                origin_left: false,
                ..rec(0, 2, true, 1, Some(2))
            },
            rec(0, 3, false, 4, Some(4)),
        ]);
        assert_eq!(check_session_order(&h, &[id(1), id(3), id(2)]).len(), 1);
    }

    /// Random histories against quadratic oracles: how many ops each check
    /// flags (each violating `b` is reported once).
    mod oracle {
        use super::*;
        use proptest::prelude::*;

        type Spec = (u32, bool, u64, u64, bool, bool, bool);

        fn build(specs: &[Spec], order: &[usize]) -> (History, Vec<OpId>) {
            let ops = specs
                .iter()
                .enumerate()
                .map(
                    |(i, &(client, strong, from, len, answered, _, crashed))| OpRecord {
                        origin_crashed: crashed,
                        origin_left: false,
                        ..rec(
                            client % 3,
                            i as u64 + 1,
                            strong,
                            from,
                            answered.then_some(from + len),
                        )
                    },
                )
                .collect();
            let committed = order
                .iter()
                .filter(|&&i| specs[i].5)
                .map(|&i| id(i as u64 + 1))
                .collect();
            (history(ops), committed)
        }

        fn position(committed: &[OpId], r: &OpRecord) -> Option<usize> {
            committed.iter().position(|c| Some(*c) == r.id)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]

            #[test]
            fn checks_match_oracles(
                specs in proptest::collection::vec(
                    (0u32..3, any::<bool>(), 0u64..50, 0u64..20, any::<bool>(), proptest::bool::weighted(0.9), proptest::bool::weighted(0.2)),
                    0..15,
                ),
                seed in any::<u64>(),
            ) {
                let mut order: Vec<usize> = (0..specs.len()).collect();
                // A seeded shuffle of the committed order.
                let mut x = seed | 1;
                for i in (1..order.len()).rev() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    order.swap(i, (x % (i as u64 + 1)) as usize);
                }
                let (h, committed) = build(&specs, &order);

                let mut rt = 0;
                let mut session = 0;
                for (bi, b) in h.ops.iter().enumerate() {
                    let Some(pb) = position(&committed, b) else { continue };
                    let late = |a: &OpRecord| position(&committed, a).is_some_and(|pa| pa > pb);
                    if b.strong
                        && h.ops.iter().any(|a| {
                            a.strong
                                && late(a)
                                && a.final_view().is_some_and(|v| v.at_us < b.invoked_at_us)
                        })
                    {
                        rt += 1;
                    }
                    if h.ops.iter().enumerate().any(|(ai, a)| {
                        a.client == b.client
                            && (a.invoked_at_us, ai) < (b.invoked_at_us, bi)
                            && late(a)
                            && !(a.origin_crashed && a.final_view().is_none())
                    }) {
                        session += 1;
                    }
                }
                prop_assert_eq!(check_real_time(&h, &committed).len(), rt);
                prop_assert_eq!(check_session_order(&h, &committed).len(), session);
            }
        }
    }
}
