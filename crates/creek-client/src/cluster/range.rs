//! Range reads and deletes over every shard (docs/api.md, "Ranges and
//! prefixes"): `kv.scan`, `kv.scan_keys`, `kv.count` and `kv.delete_range`
//! run on each shard, which answers for the keys it holds, and the pages
//! are merged here. On a cluster of one group it is one call.
//!
//! A merged page holds the first `limit` keys of the shards' pages, in
//! order; its `next` follows its last key when any shard had more, so the
//! next page misses nothing. Each shard's page is read at the call's level
//! on that shard; pages of different shards are not one snapshot (at the
//! snapshot level each is the shard's committed state at its own stable
//! time). While keys move between shards, a shard that holds a key it
//! does not own (yet, or any more) aborts a page that reads it with
//! `WRONG_SHARD`, unrecorded: the page is asked again, after a pause, as
//! a routed call is, so a merged page never shows a copy of a moving key.

use bytes::Bytes;
use creek_types::value::Value;

use super::{wrong_shard_pause, Cluster, WRONG_SHARD_RETRIES};
use crate::{CallOptions, Client, Error, Levels};

/// One page of a range: its keys in order (with their values for
/// [`Cluster::kv_scan`], empty for [`Cluster::kv_scan_keys`]) and the key
/// the next page starts at, `None` once the range is exhausted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// The keys, and their values where read.
    pub items: Vec<(Bytes, Bytes)>,
    /// Where the next page starts (pass it as `from`; for a reverse
    /// page, where the next one ends: pass it as `to`).
    pub next: Option<Bytes>,
}

/// A shard's answer: its items (or its count) and its next key.
struct Part {
    items: Vec<(Bytes, Bytes)>,
    count: i64,
    next: Option<Bytes>,
}

impl Cluster {
    /// The keys of `[from, to)` (`to` `None`: to the last key) and their
    /// values, at most `limit` (1–10,000) of them, read at `levels`.
    pub async fn kv_scan(
        &self,
        from: impl Into<Bytes>,
        to: Option<Bytes>,
        limit: usize,
        levels: Levels,
    ) -> Result<Page, Error> {
        self.page("kv.scan", range_args(from, to, limit), limit, levels)
            .await
    }

    /// The keys of `[from, to)`, at most `limit` of them.
    pub async fn kv_scan_keys(
        &self,
        from: impl Into<Bytes>,
        to: Option<Bytes>,
        limit: usize,
        levels: Levels,
    ) -> Result<Page, Error> {
        self.page("kv.scan_keys", range_args(from, to, limit), limit, levels)
            .await
    }

    /// The *last* keys of `[from, to)` and their values, descending, at
    /// most `limit` of them; the page's `next` is the `to` of the next
    /// page (etcd's `--sort-order DESCEND`).
    pub async fn kv_scan_reverse(
        &self,
        from: impl Into<Bytes>,
        to: Option<Bytes>,
        limit: usize,
        levels: Levels,
    ) -> Result<Page, Error> {
        let args = range_args(from, to, limit);
        let parts = self.each_shard("kv.scan_reverse", args, levels).await?;
        Ok(merge_reverse(parts, limit))
    }

    /// The last keys of `[from, to)`, descending, at most `limit`.
    pub async fn kv_scan_keys_reverse(
        &self,
        from: impl Into<Bytes>,
        to: Option<Bytes>,
        limit: usize,
        levels: Levels,
    ) -> Result<Page, Error> {
        let args = range_args(from, to, limit);
        let parts = self
            .each_shard("kv.scan_keys_reverse", args, levels)
            .await?;
        Ok(merge_reverse(parts, limit))
    }

    /// How many keys `[from, to)` holds, counting at most `limit`, and
    /// where to go on counting.
    pub async fn kv_count(
        &self,
        from: impl Into<Bytes>,
        to: Option<Bytes>,
        limit: usize,
        levels: Levels,
    ) -> Result<(u64, Option<Bytes>), Error> {
        let args = range_args(from, to, limit);
        let several = self.inner.routes.read().await.clients.len() > 1;
        if several {
            // Counts of several shards cannot be cut at one key: their
            // keys are merged instead.
            let page = self.page("kv.scan_keys", args, limit, levels).await?;
            return Ok((page.items.len() as u64, page.next));
        }
        let mut parts = self.each_shard("kv.count", args, levels).await?;
        let part = parts.pop().unwrap_or(Part {
            items: Vec::new(),
            count: 0,
            next: None,
        });
        Ok((u64::try_from(part.count).unwrap_or(0), part.next))
    }

    /// Delete every key of `[from, to)`, a page of at most `limit` keys at
    /// a time on each shard (each page deleted atomically, the range not):
    /// how many keys were deleted.
    pub async fn kv_delete_range(
        &self,
        from: impl Into<Bytes>,
        to: Option<Bytes>,
        limit: usize,
        levels: Levels,
    ) -> Result<u64, Error> {
        let from = from.into();
        let mut deleted = 0u64;
        for client in self.shard_clients().await {
            let mut start = from.clone();
            loop {
                let args = range_args(start, to.clone(), limit);
                let part = call(&client, "kv.delete_range", args, levels).await?;
                deleted += u64::try_from(part.count).unwrap_or(0);
                match part.next {
                    Some(next) => start = next,
                    None => break,
                }
            }
        }
        Ok(deleted)
    }

    /// The merged page of range read `procedure(args)` on every shard.
    async fn page(
        &self,
        procedure: &str,
        args: Vec<Value>,
        limit: usize,
        levels: Levels,
    ) -> Result<Page, Error> {
        Ok(merge(
            self.each_shard(procedure, args, levels).await?,
            limit,
        ))
    }

    /// `procedure(args)` on every shard, at once.
    async fn each_shard(
        &self,
        procedure: &str,
        args: Vec<Value>,
        levels: Levels,
    ) -> Result<Vec<Part>, Error> {
        let clients = self.shard_clients().await;
        let calls = clients
            .iter()
            .map(|client| call(client, procedure, args.clone(), levels));
        futures_util::future::try_join_all(calls).await
    }

    /// A client of each shard, as the map has them now.
    async fn shard_clients(&self) -> Vec<Client> {
        let routes = self.inner.routes.read().await;
        routes.clients.values().cloned().collect()
    }
}

/// `[from, to or nil, limit]`.
fn range_args(from: impl Into<Bytes>, to: Option<Bytes>, limit: usize) -> Vec<Value> {
    vec![
        Value::Bytes(from.into()),
        to.map_or(Value::Nil, Value::Bytes),
        Value::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
    ]
}

/// One shard's page, from its call's closing view; asked again while the
/// shard refuses it as reading a moving key.
async fn call(
    client: &Client,
    procedure: &str,
    args: Vec<Value>,
    levels: Levels,
) -> Result<Part, Error> {
    let mut attempt = 0;
    let value = loop {
        wrong_shard_pause(attempt).await;
        let op = client
            .invoke_with(procedure, args.clone(), levels, CallOptions::default())
            .await?;
        match op.final_view().await?.outcome {
            Ok(value) => break value,
            Err(abort) if abort.starts_with("WRONG_SHARD") && attempt < WRONG_SHARD_RETRIES => {
                attempt += 1;
            }
            Err(abort) => return Err(Error::Refused(format!("{procedure} aborted: {abort}"))),
        }
    };
    part(value).ok_or_else(|| {
        Error::Protocol(format!(
            "{procedure} answered something other than [page, next]"
        ))
    })
}

/// `[page, next]` read: a page of `[key, value]` pairs, of keys, or a
/// count.
fn part(value: Value) -> Option<Part> {
    let Value::List(two) = value else {
        return None;
    };
    let [page, next] = <[Value; 2]>::try_from(two).ok()?;
    let next = match next {
        Value::Nil => None,
        Value::Bytes(b) => Some(b),
        _ => return None,
    };
    let (items, count) = match page {
        Value::Int(n) => (Vec::new(), n),
        Value::List(items) => {
            let items = items
                .into_iter()
                .map(|item| match item {
                    Value::Bytes(k) => Some((k, Bytes::new())),
                    Value::List(kv) => match <[Value; 2]>::try_from(kv).ok()? {
                        [Value::Bytes(k), Value::Bytes(v)] => Some((k, v)),
                        _ => None,
                    },
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            let count = items.len() as i64;
            (items, count)
        }
        _ => return None,
    };
    Some(Part { items, count, next })
}

/// The first `limit` keys of the shards' pages, in order, and where the
/// next page starts. A shard that had more gave every key it holds below
/// its `next`, and no more: only keys below the least such `next` are
/// known to be all there, so the page stops before it.
fn merge(parts: Vec<Part>, limit: usize) -> Page {
    merge_in(parts, limit, false)
}

/// [`merge`] going down: the first `limit` keys of the shards' pages in
/// descending order. A shard that had more gave every key it holds from
/// its `next` (its least key returned) up, and no more: only keys at or
/// above the greatest such `next` are known to be all there, and the next
/// page ends before the last key of this one.
fn merge_reverse(parts: Vec<Part>, limit: usize) -> Page {
    merge_in(parts, limit, true)
}

fn merge_in(parts: Vec<Part>, limit: usize, reverse: bool) -> Page {
    let nexts = parts.iter().filter_map(|p| p.next.clone());
    let cut = if reverse { nexts.max() } else { nexts.min() };
    let mut more = cut.is_some();
    let mut items: Vec<(Bytes, Bytes)> = parts.into_iter().flat_map(|p| p.items).collect();
    if let Some(cut) = &cut {
        items.retain(|(k, _)| if reverse { k >= cut } else { k < cut });
    }
    items.sort_by(|a, b| {
        if reverse {
            b.0.cmp(&a.0)
        } else {
            a.0.cmp(&b.0)
        }
    });
    // A key both shards hold while it moves between them: once.
    items.dedup_by(|a, b| a.0 == b.0);
    if items.len() > limit {
        items.truncate(limit);
        more = true;
    }
    let next = match items.last() {
        Some((last, _)) if more && reverse => Some(last.clone()),
        Some((last, _)) if more => {
            let mut successor = last.to_vec();
            successor.push(0);
            Some(Bytes::from(successor))
        }
        _ => None,
    };
    Page { items, next }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(keys: &[&str], next: Option<&str>) -> Part {
        Part {
            items: keys
                .iter()
                .map(|k| (Bytes::copy_from_slice(k.as_bytes()), Bytes::new()))
                .collect(),
            count: keys.len() as i64,
            next: next.map(|n| Bytes::copy_from_slice(n.as_bytes())),
        }
    }

    fn keys(page: &Page) -> Vec<&[u8]> {
        page.items.iter().map(|(k, _)| k.as_ref()).collect()
    }

    #[test]
    fn pages_merge_in_order_and_the_next_page_misses_nothing() {
        // Shard 0 had more after "c"; shard 1 was exhausted.
        let page = merge(
            vec![part(&["a", "c"], Some("c\0")), part(&["b", "d"], None)],
            3,
        );
        assert_eq!(keys(&page), [&b"a"[..], b"b", b"c"]);
        assert_eq!(page.next.as_deref(), Some(&b"c\0"[..]));
        // All exhausted and within the limit: no next page.
        let page = merge(vec![part(&["a"], None), part(&["b"], None)], 3);
        assert_eq!(keys(&page), [&b"a"[..], b"b"]);
        assert_eq!(page.next, None);
        // A shard had more though the merged page is short: go on after
        // the last key.
        let page = merge(vec![part(&["a"], Some("a\0")), part(&[], None)], 3);
        assert_eq!(page.next.as_deref(), Some(&b"a\0"[..]));
        // Shard 0 stopped after "a" (its byte bound): shard 1's "z" waits
        // for the next page, which shard 0's keys before it may precede.
        let page = merge(vec![part(&["a"], Some("a\0")), part(&["b", "z"], None)], 3);
        assert_eq!(keys(&page), [&b"a"[..]]);
        assert_eq!(page.next.as_deref(), Some(&b"a\0"[..]));
    }

    #[test]
    fn reverse_pages_merge_descending_and_the_next_page_misses_nothing() {
        // Shard 0 had more below "c"; shard 1 was exhausted.
        let page = merge_reverse(
            vec![part(&["e", "c"], Some("c")), part(&["d", "a"], None)],
            3,
        );
        assert_eq!(keys(&page), [&b"e"[..], b"d", b"c"]);
        assert_eq!(page.next.as_deref(), Some(&b"c"[..]));
        // Shard 1's "a" lies below what shard 0 covered: it waits.
        let page = merge_reverse(
            vec![part(&["e", "c"], Some("c")), part(&["d", "a"], None)],
            10,
        );
        assert_eq!(keys(&page), [&b"e"[..], b"d", b"c"]);
        assert_eq!(page.next.as_deref(), Some(&b"c"[..]));
        let page = merge_reverse(vec![part(&["b"], None), part(&["a"], None)], 3);
        assert_eq!(keys(&page), [&b"b"[..], b"a"]);
        assert_eq!(page.next, None);
    }
}
