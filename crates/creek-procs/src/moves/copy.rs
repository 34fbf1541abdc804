//! The copy of a move's keys from the shard they leave: pages of its
//! committed state ([`export`]), and what the shard they go to must
//! change to hold the same ([`diff`]).
//!
//! A page covers a range of stored keys, `[from, next)` (to the end when
//! `next` is `None`), and lists every key of the move the source holds in
//! it, with its value or, in the rounds that catch up, its value's
//! [`digest`]: the target compares the digests with its own copy and asks
//! for the values of the keys that differ only ([`Diff::fetch`]), and
//! deletes the keys of the range it holds that the page does not list.
//! A page stops after [`PAGE_KEYS`] keys, [`PAGE_BYTES`] bytes, or
//! [`SCAN_KEYS`] keys looked at (a move of hash slots takes a few keys
//! out of many).

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_shard::Move;

use super::Chunk;
use crate::ownership::placed_key;

/// Most keys of the move one page lists.
pub const PAGE_KEYS: usize = 512;
/// Most bytes of keys and values one page carries (past one key's).
pub const PAGE_BYTES: usize = 512 * 1024;
/// Most stored keys one page looks at.
pub const SCAN_KEYS: usize = 16 * 1024;
/// How many stored keys one scan of the source's state reads at a time.
const SCAN_BATCH: usize = 256;

/// How a page reads the source's committed state: `scan(from, limit,
/// out)` appends to `out` the committed keys and values from `from` on,
/// ascending, at most `limit`.
pub type Scan<'a> = dyn FnMut(&[u8], usize, &mut Vec<(Bytes, Bytes)>) + 'a;

/// A value's digest: the first 16 bytes of its SHA-256.
pub type Digest = [u8; 16];

/// The digest of `value`.
pub fn digest(value: &[u8]) -> Digest {
    let full = ring::digest::digest(&ring::digest::SHA256, value);
    let mut out = [0; 16];
    out.copy_from_slice(&full.as_ref()[..16]);
    out
}

/// Whether stored key `stored` is one of the keys `m` moves.
pub fn moving(m: &Move, stored: &[u8]) -> bool {
    placed_key(stored).is_some_and(|(ks, k)| ks == m.keyspace.as_deref() && m.keys.contains(k))
}

/// What a page says of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Its value.
    Value(Bytes),
    /// Its value's digest.
    Digest(Digest),
}

/// The keys of a move one shard holds in a range of stored keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// The first stored key of the range.
    pub from: Bytes,
    /// The move's keys in it, ascending.
    pub entries: Vec<(Bytes, Entry)>,
    /// The first stored key after the range; `None`: the range runs to the
    /// end, and the page is the last.
    pub next: Option<Bytes>,
}

impl Page {
    /// Whether stored key `key` lies in the page's range.
    pub fn covers(&self, key: &[u8]) -> bool {
        key >= &self.from[..] && self.next.as_ref().is_none_or(|n| key < &n[..])
    }
}

/// The page of `m`'s keys from stored key `from` on, with values or (with
/// `digests`) their digests, read through `scan`.
pub fn export(m: &Move, from: Bytes, digests: bool, scan: &mut Scan<'_>) -> Page {
    let mut page = Page {
        from: from.clone(),
        ..Page::default()
    };
    let (mut cursor, mut looked, mut bytes) = (from, 0, 0);
    let mut batch = Vec::with_capacity(SCAN_BATCH);
    loop {
        batch.clear();
        scan(&cursor, SCAN_BATCH, &mut batch);
        let got = batch.len();
        for (k, v) in batch.drain(..) {
            looked += 1;
            cursor = after(&k);
            if moving(m, &k) {
                bytes += k.len() + if digests { 16 } else { v.len() };
                let entry = match digests {
                    true => Entry::Digest(digest(&v)),
                    false => Entry::Value(v),
                };
                page.entries.push((k, entry));
            }
            if page.entries.len() >= PAGE_KEYS || bytes >= PAGE_BYTES || looked >= SCAN_KEYS {
                page.next = Some(cursor);
                return page;
            }
        }
        if got < SCAN_BATCH {
            // A short batch: the state has no key after it.
            return page;
        }
    }
}

/// The least stored key after `key`.
fn after(key: &[u8]) -> Bytes {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next.into()
}

/// What the target must change in a page's range to hold what the page
/// lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Values to install and keys to delete now.
    pub chunk: Chunk,
    /// Keys whose digests differ: their values must be fetched from the
    /// source (one absent there by then is deleted).
    pub fetch: Vec<Bytes>,
}

/// What the target, whose keys of the move in `page`'s range are `mine`,
/// must change to hold what `page` lists.
pub fn diff(page: &Page, mine: &BTreeMap<Bytes, Bytes>) -> Diff {
    let mut out = Diff::default();
    for (k, entry) in &page.entries {
        let held = mine.get(k);
        match entry {
            Entry::Value(v) if held != Some(v) => out.chunk.puts.push((k.clone(), v.clone())),
            Entry::Digest(d) if held.is_none_or(|h| digest(h) != *d) => out.fetch.push(k.clone()),
            _ => {}
        }
    }
    let listed: std::collections::BTreeSet<&Bytes> = page.entries.iter().map(|(k, _)| k).collect();
    out.chunk.deletes = mine
        .keys()
        .filter(|k| page.covers(k) && !listed.contains(k))
        .cloned()
        .collect();
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use creek_shard::{MoveKeys, ShardId};

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn range_move(first: &str, end: &str) -> Move {
        Move {
            keyspace: None,
            keys: MoveKeys::Range {
                first: b(first),
                end: Some(b(end)),
            },
            from: ShardId(0),
            to: ShardId(1),
        }
    }

    fn scanner(
        state: &BTreeMap<Bytes, Bytes>,
    ) -> impl FnMut(&[u8], usize, &mut Vec<(Bytes, Bytes)>) + '_ {
        |from, limit, out| {
            out.extend(
                state
                    .range::<[u8], _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
                    .take(limit)
                    .map(|(k, v)| (k.clone(), v.clone())),
            )
        }
    }

    /// Pages walk the whole state once, list only the move's keys (lists
    /// by their name, other tables never), and a target that installs
    /// each page's diff ends with exactly the source's keys of the move.
    #[test]
    fn pages_cover_the_state_and_the_diffs_make_the_target_equal() {
        let m = range_move("k100", "k500");
        let mut source = BTreeMap::new();
        for n in 0..2000 {
            source.insert(b(&format!("k{n:03}")), b(&format!("v{n}")));
        }
        source.insert(b("\0lk200"), b("a list's record"));
        source.insert(b("\0sessions/x"), b("a session"));
        let wanted: BTreeMap<Bytes, Bytes> = source
            .iter()
            .filter(|(k, _)| moving(&m, k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert!(wanted.contains_key(&b("\0lk200")));
        assert!(!wanted.contains_key(&b("\0sessions/x")));

        // The target holds a stale value, a key the source deleted, and
        // misses the rest.
        let mut target: BTreeMap<Bytes, Bytes> = BTreeMap::new();
        target.insert(b("k150"), b("stale"));
        target.insert(b("k1500"), b("deleted at the source"));
        source.remove(&b("k1500"));
        let wanted: BTreeMap<Bytes, Bytes> = wanted
            .into_iter()
            .filter(|(k, _)| source.contains_key(k))
            .collect();

        for digests in [false, true] {
            let mut from = Bytes::new();
            let mut pages = 0;
            loop {
                let page = export(&m, from.clone(), digests, &mut scanner(&source));
                pages += 1;
                assert!(page.entries.len() <= PAGE_KEYS);
                let mine = target
                    .iter()
                    .filter(|(k, _)| page.covers(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let d = diff(&page, &mine);
                for (k, v) in d.chunk.puts {
                    target.insert(k, v);
                }
                for k in d.chunk.deletes {
                    target.remove(&k);
                }
                for k in d.fetch {
                    match source.get(&k) {
                        Some(v) => target.insert(k, v.clone()),
                        None => target.remove(&k),
                    };
                }
                match page.next {
                    Some(next) => from = next,
                    None => break,
                }
            }
            assert!(pages >= 1);
            assert_eq!(target, wanted, "digests: {digests}");
            // A second pass finds nothing to change.
            let page = export(&m, Bytes::new(), true, &mut scanner(&source));
            assert!(diff(&page, &BTreeMap::new()).chunk.deletes.is_empty());
        }
    }

    #[test]
    fn a_page_stops_at_its_limits_and_says_where_the_next_starts() {
        let m = range_move("", "\u{7f}");
        let mut source = BTreeMap::new();
        for n in 0..(PAGE_KEYS + 10) {
            source.insert(b(&format!("k{n:05}")), b("v"));
        }
        let first = export(&m, Bytes::new(), false, &mut scanner(&source));
        assert_eq!(first.entries.len(), PAGE_KEYS);
        let next = first.next.clone().unwrap();
        assert!(first.covers(&first.entries.last().unwrap().0));
        assert!(!first.covers(&next));
        let second = export(&m, next, false, &mut scanner(&source));
        assert_eq!(second.entries.len(), 10);
        assert_eq!(second.next, None);
        // An empty state: one empty last page.
        let empty = export(&m, Bytes::new(), true, &mut scanner(&BTreeMap::new()));
        assert_eq!((empty.entries.len(), empty.next), (0, None));
    }
}
