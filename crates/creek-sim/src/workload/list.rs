//! `list`: list-append over the built-in `list.append` / `list.read`.
//!
//! Lists `l0..l{keys-1}`; every appended item is unique
//! (`c{client}-{n}`).
//!
//! Invariants, against the committed list (decoded from the state with
//! [`list_state_key`] / [`decode_list`]):
//! - every final view of `list.read` is a prefix of the committed list and
//!   holds only items some op appended to that list;
//! - the committed list holds no item twice, only appended items, and every
//!   item whose append got a final view.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes, BytesMut};
use creek_check::history::History;
use creek_procs::registry::INTERNAL_KEY_PREFIX;
use creek_procs::Registry;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

use super::{
    args_of, bounded, describe, final_result, first_bytes_arg, pick_mode, show, NextOp, Workload,
    WorkloadConfig,
};
use crate::rng::Rng;

/// `list.append(list, item)`.
pub const APPEND: &str = "list.append";
/// `list.read(list)`.
pub const READ: &str = "list.read";

/// The name of list `i`.
pub fn list_name(i: usize) -> Bytes {
    Bytes::from(format!("l{i}"))
}

/// The state key under which the built-ins store list `name`:
/// `[0x00, b'l'] ++ name` (see `creek_procs::builtins`' collections).
pub fn list_state_key(name: &[u8]) -> Bytes {
    let mut k = BytesMut::with_capacity(2 + name.len());
    k.put_slice(&[INTERNAL_KEY_PREFIX, b'l']);
    k.put_slice(name);
    k.freeze()
}

/// Decode a stored list (an encoded `List` of `Bytes`), or a `list.read`
/// result (same encoding).
pub fn decode_list(raw: &[u8]) -> Result<Vec<Bytes>, String> {
    match Value::decode(raw) {
        Ok(Value::List(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::Bytes(b) => Ok(b),
                other => Err(format!("list item is {}, not bytes", other.kind())),
            })
            .collect(),
        Ok(other) => Err(format!("expected a list, got {}", other.kind())),
        Err(e) => Err(format!("undecodable list ({e})")),
    }
}

/// The committed items of list `name` (absent: empty).
pub fn committed_list(state: &BTreeMap<Bytes, Bytes>, name: &[u8]) -> Result<Vec<Bytes>, String> {
    match state.get(&list_state_key(name)) {
        None => Ok(Vec::new()),
        Some(raw) => decode_list(raw),
    }
}

/// The `list` workload.
#[derive(Clone, Debug)]
pub struct ListWorkload {
    keys: usize,
    strong_share: f64,
    final_share: f64,
    next_item: u64,
}

impl ListWorkload {
    /// The workload for `config` (`keys`, `strong_share`, `final_share`).
    pub fn new(config: &WorkloadConfig) -> Self {
        ListWorkload {
            keys: config.keys.max(1),
            strong_share: config.strong_share,
            final_share: config.final_share,
            next_item: 0,
        }
    }
}

/// List and item of a `list.append` call.
fn append_args(call: &ProcCall) -> Option<(Bytes, Bytes)> {
    if call.name.as_ref() != APPEND {
        return None;
    }
    match args_of(call).as_deref() {
        Some([Value::Bytes(l), Value::Bytes(item)]) => Some((l.clone(), item.clone())),
        _ => None,
    }
}

impl Workload for ListWorkload {
    fn name(&self) -> &'static str {
        "list"
    }

    fn register(&self, _registry: &mut Registry) {}

    fn setup(&self) -> Vec<ProcCall> {
        Vec::new()
    }

    fn next_op(&mut self, rng: &mut Rng, client: u32) -> NextOp {
        let (strong, wants_final) = pick_mode(rng, self.strong_share, self.final_share);
        let list = Value::Bytes(list_name(rng.index(self.keys)));
        let call = if rng.chance(0.5) {
            self.next_item += 1;
            let item = Value::Bytes(Bytes::from(format!("c{client}-{}", self.next_item)));
            ProcCall::new(APPEND, encode_args(&[list, item]))
        } else {
            ProcCall::new(READ, encode_args(&[list]))
        };
        NextOp {
            call,
            strong,
            wants_final,
        }
    }

    fn keys(&self, call: &ProcCall) -> Vec<Bytes> {
        match call.name.as_ref() {
            APPEND | READ => first_bytes_arg(call).into_iter().collect(),
            _ => Vec::new(),
        }
    }

    fn check(&self, history: &History, committed_state: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        let setup = self.setup();
        let mut appended: BTreeMap<Bytes, BTreeSet<Bytes>> = BTreeMap::new();
        for call in setup.iter().chain(history.ops.iter().map(|op| &op.call)) {
            if let Some((l, item)) = append_args(call) {
                appended.entry(l).or_default().insert(item);
            }
        }
        // Appends known committed: a final view with a result.
        let mut confirmed: BTreeMap<Bytes, Vec<(Bytes, String)>> = BTreeMap::new();
        for op in &history.ops {
            if let (Some((l, item)), Some(Ok(_))) = (append_args(&op.call), final_result(op)) {
                confirmed.entry(l).or_default().push((item, describe(op)));
            }
        }
        let mut names: BTreeSet<Bytes> = (0..self.keys).map(list_name).collect();
        names.extend(appended.keys().cloned());
        names.extend(
            history
                .ops
                .iter()
                .filter(|op| op.call.name.as_ref() == READ)
                .filter_map(|op| first_bytes_arg(&op.call)),
        );

        let mut out = Vec::new();
        let none = BTreeSet::new();
        let mut committed: BTreeMap<Bytes, Vec<Bytes>> = BTreeMap::new();
        for name in &names {
            let items = match committed_list(committed_state, name) {
                Ok(items) => items,
                Err(e) => {
                    out.push(format!("list: committed list {}: {e}", show(name)));
                    Vec::new()
                }
            };
            let ours = appended.get(name).unwrap_or(&none);
            let mut seen = BTreeSet::new();
            for item in &items {
                if !seen.insert(item) {
                    out.push(format!(
                        "list: committed list {} holds {} twice",
                        show(name),
                        show(item)
                    ));
                } else if !ours.contains(item) {
                    out.push(format!(
                        "list: committed list {} holds {}, which no op appended there",
                        show(name),
                        show(item)
                    ));
                }
            }
            for (item, what) in confirmed.get(name).into_iter().flatten() {
                if !seen.contains(item) {
                    out.push(format!(
                        "list: {} appended by {what} (final view received) is missing from the committed list {}",
                        show(item),
                        show(name)
                    ));
                }
            }
            committed.insert(name.clone(), items);
        }

        for op in history
            .ops
            .iter()
            .filter(|op| op.call.name.as_ref() == READ)
        {
            let (Some(name), Some(result)) = (first_bytes_arg(&op.call), final_result(op)) else {
                continue;
            };
            let what = describe(op);
            let read = match result.and_then(|v| decode_list(&v.encode())) {
                Ok(read) => read,
                Err(e) => {
                    out.push(format!(
                        "list: final view of list.read({}) by {what}: {e}",
                        show(&name)
                    ));
                    continue;
                }
            };
            let ours = appended.get(&name).unwrap_or(&none);
            if let Some(item) = read.iter().find(|item| !ours.contains(*item)) {
                out.push(format!(
                    "list: final view of list.read({}) by {what} holds {}, which no op appended there",
                    show(&name),
                    show(item)
                ));
            }
            let full = committed.get(&name).map_or(&[][..], Vec::as_slice);
            if !full.starts_with(&read) {
                let shown = Value::List(read.into_iter().map(Value::Bytes).collect());
                out.push(format!(
                    "list: final view of list.read({}) by {what} = {shown} is not a prefix of the committed list ({} items)",
                    show(&name),
                    full.len()
                ));
            }
        }
        bounded(out)
    }
}

#[cfg(test)]
mod tests {
    use creek_core::ViewKind;

    use super::*;
    use crate::workload::testkit::{call, history, record, run_sequential, stable};
    use creek_check::history::OpRecord;

    fn b(s: &str) -> Value {
        Value::from(s)
    }

    fn items(xs: &[&str]) -> Value {
        Value::List(xs.iter().map(|s| b(s)).collect())
    }

    fn w() -> ListWorkload {
        ListWorkload::new(&WorkloadConfig {
            keys: 2,
            ..WorkloadConfig::default()
        })
    }

    fn state(lists: &[(&str, &[&str])]) -> BTreeMap<Bytes, Bytes> {
        lists
            .iter()
            .map(|(name, xs)| (list_state_key(name.as_bytes()), items(xs).encode()))
            .collect()
    }

    fn honest_ops() -> Vec<OpRecord> {
        vec![
            stable(1, call(APPEND, &[b("l0"), b("a")]), Value::Int(1)),
            stable(2, call(READ, &[b("l0")]), items(&["a"])),
            // No final view: may or may not have been committed.
            record(3, call(APPEND, &[b("l0"), b("b")]), vec![]),
            record(4, call(APPEND, &[b("l0"), b("c")]), vec![]),
            stable(5, call(READ, &[b("l1")]), items(&[])),
            record(
                6,
                call(READ, &[b("l0")]),
                vec![(ViewKind::Tentative, Ok(items(&["x"]).encode()))],
            ),
            stable(7, call(READ, &[b("l0")]), items(&["a", "c"])),
        ]
    }

    #[test]
    fn honest_history_passes() {
        let h = history(honest_ops());
        let s = state(&[("l0", &["a", "c"])]);
        assert_eq!(w().check(&h, &s), Vec::<String>::new());
    }

    #[test]
    fn violations_are_flagged() {
        let mut ops = honest_ops();
        ops.push(stable(8, call(READ, &[b("l0")]), items(&["c"])));
        let h = history(ops);
        let out = w().check(&h, &state(&[("l0", &["a", "c"])]));
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].contains("by op r0.8 (client 0) = [\"c\"] is not a prefix"),
            "{out:?}"
        );

        let h = history(honest_ops());
        let out = w().check(&h, &state(&[("l0", &["c", "c"]), ("l1", &["z"])]));
        assert_eq!(out.len(), 5, "{out:?}");
        assert!(out[0].contains("\"l0\" holds \"c\" twice"), "{out:?}");
        assert!(
            out[1].contains("\"a\" appended by op r0.1 (client 0)"),
            "{out:?}"
        );
        assert!(
            out[2].contains("\"l1\" holds \"z\", which no op"),
            "{out:?}"
        );
        // ["a"] and ["a", "c"] are not prefixes of ["c", "c"]; [] is a
        // prefix of ["z"].
        assert!(out[3].contains("list.read(\"l0\") by op r0.2"), "{out:?}");
        assert!(out[4].contains("list.read(\"l0\") by op r0.7"), "{out:?}");
    }

    #[test]
    fn keys_are_the_list_name() {
        assert_eq!(
            w().keys(&call(APPEND, &[b("l1"), b("x")])),
            vec![Bytes::from_static(b"l1")]
        );
    }

    #[test]
    fn sequential_run_passes() {
        let mut w = w();
        let (state, h) = run_sequential(&mut w, 3, 400);
        assert_eq!(w.check(&h, &state), Vec::<String>::new());
        let longest = (0..2)
            .filter_map(|i| committed_list(&state, &list_name(i)).ok())
            .map(|l| l.len())
            .max();
        assert!(longest.is_some_and(|n| n > 20), "{longest:?}");
    }
}
