//! `creek get` and `creek del`: read and delete a key, a prefix or a
//! range, as etcdctl's `get` and `del` do (docs/api.md).

use std::io::Write as _;

use bytes::Bytes;
use creek_client::{CallOptions, Cluster, Error, KeyMeta, Levels, Page};
use creek_types::value::Value;

use crate::cli::{self, exit, Endpoints, Failure, Format, Output};

/// Keys asked of the cluster per page.
const PAGE_KEYS: usize = 1000;

/// Which keys a command names.
#[derive(clap::Args, Debug)]
struct Keys {
    /// The key (text), or with a flag below where the range starts.
    #[arg(value_name = "KEY")]
    start: String,
    /// Every key starting with KEY.
    #[arg(long, conflicts_with_all = ["from_key", "range_end"])]
    prefix: bool,
    /// Every key from KEY on.
    #[arg(long, conflicts_with = "range_end")]
    from_key: bool,
    /// The keys from KEY up to (not including) END.
    #[arg(long, value_name = "END")]
    range_end: Option<String>,
    /// The level: strong (linearizable: the committed order), snapshot
    /// (the committed state at a stable time, never waiting) or weak (the
    /// replica's tentative state).
    #[arg(long, default_value = "strong", value_parser = parse_level)]
    level: Levels,
}

impl Keys {
    /// `[from, to)` when a range is named, `None` for one key.
    fn range(&self) -> Option<(Bytes, Option<Bytes>)> {
        let from = Bytes::copy_from_slice(self.start.as_bytes());
        if self.prefix {
            Some((
                from.clone(),
                creek_shard::prefix_end(&from).map(Bytes::from),
            ))
        } else if self.from_key {
            Some((from, None))
        } else {
            let end = self.range_end.as_ref()?;
            Some((from, Some(Bytes::copy_from_slice(end.as_bytes()))))
        }
    }
}

/// Arguments of `creek get`.
#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    endpoints: Endpoints,
    /// `-o table`: `KEY VALUE` lines; `-o json`: one object per line;
    /// `-o value`: the values alone, one per line.
    #[command(flatten)]
    output: Output,
    #[command(flatten)]
    keys: Keys,
    /// Print at most this many keys (0: all of them).
    #[arg(long, default_value_t = 0)]
    limit: usize,
    /// Print the keys without their values.
    #[arg(long, conflicts_with = "count_only")]
    keys_only: bool,
    /// Print how many keys there are.
    #[arg(long)]
    count_only: bool,
    /// From the last key down (etcdctl's `--sort-order DESCEND`):
    /// `--limit N` then prints the last N keys.
    #[arg(long, conflicts_with = "count_only")]
    reverse: bool,
    /// With one key: also print its version (writes since its creation),
    /// the revisions of its creation and last write, and its lease
    /// (etcdctl's `-w json` fields; `-o json` names them).
    #[arg(long, conflicts_with_all = ["count_only", "keys_only", "prefix", "from_key", "range_end"])]
    meta: bool,
    /// With one key: read it as it was right after the op at this revision
    /// (etcdctl's `--rev`): a snapshot read of the state at that place of
    /// the committed order, while the replica keeps it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..),
          conflicts_with_all = ["prefix", "from_key", "range_end"])]
    rev: Option<u64>,
}

/// Arguments of `creek del`.
#[derive(clap::Args, Debug)]
pub struct DelArgs {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    output: Output,
    #[command(flatten)]
    keys: Keys,
}

/// Run `creek get`.
pub fn get(args: &GetArgs) -> Result<(), Failure> {
    cli::runtime()?.block_on(run_get(args))
}

/// Run `creek del`.
pub fn del(args: &DelArgs) -> Result<(), Failure> {
    cli::runtime()?.block_on(run_del(args))
}

async fn run_get(args: &GetArgs) -> Result<(), Failure> {
    let addrs = args.endpoints.list();
    let cluster = cli::connect_cluster(&args.endpoints, &addrs).await?;
    let failed = |e: Error| Failure::new(exit::FAILED, cli::explain(&e, &addrs));
    let level = args.keys.level;
    let Some((mut from, mut to)) = args.keys.range() else {
        let key = Bytes::copy_from_slice(args.keys.start.as_bytes());
        let procedure = if args.meta { "kv.get_meta" } else { "kv.get" };
        // A read at a revision is a snapshot read.
        let level = if args.rev.is_some() {
            Levels::Snapshot
        } else {
            level
        };
        let options = CallOptions {
            revision: args.rev,
            ..CallOptions::default()
        };
        let op = cluster
            .invoke_with(procedure, vec![Value::Bytes(key.clone())], level, options)
            .await
            .map_err(failed)?;
        let view = op.final_view().await.map_err(failed)?;
        if args.meta {
            let meta = KeyMeta::from_outcome(&view.outcome)
                .map_err(|why| Failure::new(exit::ABORTED, format!("kv.get_meta: {why}")))?;
            return meta.map_or(Ok(()), |m| print_meta(args.output.output, &key, &m));
        }
        let value = view
            .outcome
            .map_err(|abort| Failure::new(exit::ABORTED, format!("kv.get aborted: {abort}")))?;
        return match (value, args.count_only) {
            (Value::Bytes(v), false) => print(args.output.output, &[(key, v)], args.keys_only),
            (Value::Bytes(_), true) => print_count(args.output.output, 1),
            (_, true) => print_count(args.output.output, 0),
            _ => Ok(()),
        };
    };
    let mut left = if args.limit == 0 {
        usize::MAX
    } else {
        args.limit
    };
    let mut counted = 0u64;
    while left > 0 {
        let want = left.min(PAGE_KEYS);
        let next = if args.count_only {
            let (n, next) = cluster
                .kv_count(from.clone(), to.clone(), want, level)
                .await
                .map_err(failed)?;
            counted += n;
            left -= usize::try_from(n).unwrap_or(left).min(left);
            next
        } else {
            let Page { items, next } = page(&cluster, args, (&from, &to), want)
                .await
                .map_err(failed)?;
            left -= items.len().min(left);
            if print(args.output.output, &items, args.keys_only).is_err() {
                // A closed pipe (`creek get --prefix a | head`): done.
                return Ok(());
            }
            next
        };
        match next {
            // A reverse page's next is where the next page ends.
            Some(next) if args.reverse => to = Some(next),
            Some(next) => from = next,
            None => break,
        }
    }
    if args.count_only {
        print_count(args.output.output, counted)?;
    }
    Ok(())
}

/// One page of keys (with their values unless `--keys-only`).
async fn page(
    cluster: &Cluster,
    args: &GetArgs,
    (from, to): (&Bytes, &Option<Bytes>),
    want: usize,
) -> Result<Page, Error> {
    let level = args.keys.level;
    let (from, to) = (from.clone(), to.clone());
    match (args.keys_only, args.reverse) {
        (true, false) => cluster.kv_scan_keys(from, to, want, level).await,
        (false, false) => cluster.kv_scan(from, to, want, level).await,
        (true, true) => cluster.kv_scan_keys_reverse(from, to, want, level).await,
        (false, true) => cluster.kv_scan_reverse(from, to, want, level).await,
    }
}

async fn run_del(args: &DelArgs) -> Result<(), Failure> {
    let addrs = args.endpoints.list();
    let cluster = cli::connect_cluster(&args.endpoints, &addrs).await?;
    let failed = |e: Error| Failure::new(exit::FAILED, cli::explain(&e, &addrs));
    let level = args.keys.level;
    let deleted = match args.keys.range() {
        Some((from, to)) => cluster
            .kv_delete_range(from, to, PAGE_KEYS, level)
            .await
            .map_err(failed)?,
        None => {
            let key = Bytes::copy_from_slice(args.keys.start.as_bytes());
            let op = cluster
                .invoke("kv.delete", vec![Value::Bytes(key)], level)
                .await
                .map_err(failed)?;
            let view = op.final_view().await.map_err(failed)?;
            match view.outcome {
                Ok(Value::Bool(existed)) => u64::from(existed),
                Ok(other) => {
                    return Err(Failure::new(
                        exit::FAILED,
                        format!("kv.delete answered {other}, not a bool"),
                    ))
                }
                Err(abort) => {
                    return Err(Failure::new(
                        exit::ABORTED,
                        format!("kv.delete aborted: {abort}"),
                    ))
                }
            }
        }
    };
    print_count(args.output.output, deleted)
}

/// Print keys (and values) in `format`; `Err` once stdout is closed.
fn print(format: Format, items: &[(Bytes, Bytes)], keys_only: bool) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    for (k, v) in items {
        let line = match (format, keys_only) {
            (Format::Json, _) => {
                let mut o = serde_json::Map::new();
                o.insert("key".into(), cli::value_json(&Value::Bytes(k.clone())));
                if !keys_only {
                    o.insert("value".into(), cli::value_json(&Value::Bytes(v.clone())));
                }
                serde_json::Value::Object(o).to_string()
            }
            (_, true) => k.escape_ascii().to_string(),
            (Format::Table, false) => format!("{} {}", k.escape_ascii(), v.escape_ascii()),
            (Format::Value, false) => v.escape_ascii().to_string(),
        };
        writeln!(out, "{line}").map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
    }
    out.flush()
        .map_err(|e| Failure::new(exit::FAILED, e.to_string()))
}

/// Print a key with its version and revisions in `format`.
fn print_meta(format: Format, key: &Bytes, m: &KeyMeta) -> Result<(), Failure> {
    match format {
        Format::Json => out!(
            "{}",
            serde_json::json!({
                "key": cli::value_json(&Value::Bytes(key.clone())),
                "value": cli::value_json(&Value::Bytes(m.value.clone())),
                "version": m.version,
                "create_revision": m.create_revision,
                "mod_revision": m.mod_revision,
                "lease": m.lease,
            })
        ),
        Format::Table => out!(
            "{} {} version={} create_revision={} mod_revision={} lease={}",
            key.escape_ascii(),
            m.value.escape_ascii(),
            m.version,
            m.create_revision,
            m.mod_revision,
            m.lease
        ),
        Format::Value => out!("{}", m.value.escape_ascii()),
    }
    Ok(())
}

/// Print a count in `format`.
fn print_count(format: Format, n: u64) -> Result<(), Failure> {
    match format {
        Format::Json => out!("{}", serde_json::json!({ "count": n })),
        Format::Table | Format::Value => out!("{n}"),
    }
    Ok(())
}

/// One level: weak, snapshot or strong.
pub(crate) fn parse_level(s: &str) -> Result<Levels, String> {
    match s {
        "weak" => Ok(Levels::Weak),
        "snapshot" => Ok(Levels::Snapshot),
        "strong" => Ok(Levels::Strong),
        _ => Err(format!("unknown level {s:?}: weak, snapshot or strong")),
    }
}
