//! `creek status`: one row per replica, from each replica's own `Status`,
//! and whether the group has a quorum, in words and in the exit code.

use std::collections::BTreeMap;

use creek_client::{pb, Client, ConnectOptions};

use crate::cli::{self, exit, Endpoints, Failure, Format, Output};

/// Counters shown in the table: (column, counter names summed). The
/// stable times show as their ages at the replica (its group's, the
/// global one), with the clock no-ops it committed; `-` where stable
/// times are off (or not known yet).
const COLUMNS: [(&str, &[&str]); 8] = [
    ("weak", &["invoked_weak"]),
    ("strong", &["invoked_strong"]),
    ("views", &["views"]),
    ("finalized", &["finalized"]),
    ("reexec", &["reexecutions"]),
    ("stable-age-ms", &["stable_group_age_ms"]),
    ("gst-age-ms", &["stable_global_age_ms"]),
    ("noops", &["clock_noops"]),
];

/// Roles of a replica that takes part in the group.
const MEMBER_ROLES: [&str; 4] = ["leader", "follower", "candidate", "pre-candidate"];

/// Arguments of `creek status`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit codes: 0 every member up and a leader known; 1 no replica \
                        answered; 3 a member down, the group keeps a quorum; 4 no quorum or \
                        no leader (strong ops cannot finish)."
)]
pub struct Args {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    output: Output,
    /// Also print every counter of every replica.
    #[arg(long)]
    counters: bool,
}

/// One replica asked: its address and its answer.
type Reply = (String, Result<pb::StatusReply, String>);

/// Run `creek status`. Every member the answering replicas name is asked
/// too, so a member missing from `--addr` is not missed.
pub fn run(args: &Args) -> Result<(), Failure> {
    let addrs = args.endpoints.list();
    let options = args.endpoints.options()?;
    let runtime = cli::runtime()?;
    // The given replicas first: on a sharded cluster their map says which
    // groups to survey; otherwise they and the members they name are it.
    let given = runtime.block_on(query_all(&addrs, &options));
    // A sharded cluster: each shard, and the directory, is a group of its
    // own, reported in turn (the exit code is the worst group's).
    // The newest map any answering replica serves under.
    let map = given
        .iter()
        .filter_map(|(_, r)| {
            r.as_ref()
                .ok()
                .filter(|r| !r.shard_map.is_empty())
                .and_then(|r| creek_shard::decode(&r.shard_map).ok())
        })
        .max_by_key(|m| m.epoch);
    let Some(map) = map else {
        let (replies, voters) = runtime.block_on(complete(addrs, given, options.clone()));
        return report(args, &replies, &voters);
    };
    let mut groups: Vec<(String, &creek_shard::Shard)> = map
        .shards
        .iter()
        .map(|(id, shard)| (format!("shard {}", id.0), shard))
        .collect();
    if !map.directory.replicas.is_empty() {
        groups.push(("directory".to_owned(), &map.directory));
    }
    let mut worst: Result<(), Failure> = Ok(());
    for (name, shard) in groups {
        if args.output.output == Format::Table {
            out!("{name} (map epoch {})", map.epoch);
        }
        let addrs: Vec<String> = shard.replicas.values().map(|e| e.client.clone()).collect();
        let (replies, voters) = runtime.block_on(survey(addrs, options.clone()));
        let result = report(args, &replies, &voters);
        if args.output.output == Format::Table {
            out!();
        }
        worst = match (worst, result) {
            (Err(a), Err(b)) => Err(if b.code > a.code { b } else { a }),
            (Ok(()), r) | (r, Ok(())) => r,
        };
    }
    worst
}

/// Print one group's replies and judge it.
fn report(args: &Args, replies: &[Reply], voters: &[u32]) -> Result<(), Failure> {
    if replies.iter().all(|(_, r)| r.is_err()) {
        let why: Vec<String> = replies
            .iter()
            .map(|(a, r)| format!("{a}: {}", r.as_ref().err().map_or("", String::as_str)))
            .collect();
        return Err(Failure::new(
            exit::FAILED,
            format!("no replica answered ({})", why.join("; ")),
        ));
    }
    let health = assess(replies, voters);
    match args.output.output {
        Format::Json => {
            for (addr, reply) in replies {
                out!("{}", row_json(addr, reply));
            }
            out!(
                "{}",
                serde_json::json!({ "health": health.word, "summary": health.summary })
            );
        }
        Format::Value => out!("{}", health.word),
        Format::Table => {
            let mut rows = vec![header()];
            rows.extend(replies.iter().map(|(addr, reply)| row(addr, reply)));
            out!("{}", format_table(&rows));
            // Why a replica takes no part (joining, or lost its data and
            // being rebuilt, with the rebuild's progress).
            for (_, reply) in replies {
                if let Ok(r) = reply {
                    if !r.standing_detail.is_empty() {
                        out!("replica {} is {}: {}", r.replica, r.role, r.standing_detail);
                    }
                }
            }
            if args.counters {
                for (addr, reply) in replies {
                    if let Ok(s) = reply {
                        out!("\nreplica {} ({addr})", s.replica);
                        for (name, value) in sorted(&s.counters) {
                            out!("  {name:<24} {value}");
                        }
                    }
                }
            }
            out!("{}", health.summary);
        }
    }
    match health.code {
        0 => Ok(()),
        code => Err(Failure::new(code, "")),
    }
}

/// Ask every address, then every member the answers name that was not
/// asked; the group's voters as the first answering replica applied them
/// (empty if it could not say).
async fn survey(addrs: Vec<String>, tls: ConnectOptions) -> (Vec<Reply>, Vec<u32>) {
    let replies = query_all(&addrs, &tls).await;
    complete(addrs, replies, tls).await
}

/// [`survey`] from the answers of `addrs` already had.
async fn complete(
    addrs: Vec<String>,
    mut replies: Vec<Reply>,
    tls: ConnectOptions,
) -> (Vec<Reply>, Vec<u32>) {
    let asked: Vec<String> = addrs.clone();
    let mut more: Vec<String> = Vec::new();
    for (_, reply) in &replies {
        if let Ok(r) = reply {
            for a in r.client_addrs.values() {
                if !asked.contains(a) && !more.contains(a) {
                    more.push(a.clone());
                }
            }
        }
    }
    replies.extend(query_all(&more, &tls).await);
    let mut voters = Vec::new();
    for (addr, reply) in &replies {
        if reply.is_err() {
            continue;
        }
        let members = match Client::connect_with_options([addr.clone()], tls.clone()).await {
            Ok(c) => c.members().await,
            Err(e) => Err(e),
        };
        if let Ok(m) = members {
            voters = m
                .members
                .iter()
                .filter(|m| m.role.contains("voter"))
                .map(|m| m.replica)
                .collect();
            break;
        }
    }
    (replies, voters)
}

/// Query every address at once; the replies in the order of `addrs`.
async fn query_all(addrs: &[String], tls: &ConnectOptions) -> Vec<Reply> {
    let tasks: Vec<_> = addrs
        .iter()
        .map(|a| tokio::spawn(query(a.clone(), tls.clone())))
        .collect();
    let mut replies = Vec::with_capacity(tasks.len());
    for (t, addr) in tasks.into_iter().zip(addrs) {
        let reply = t.await.unwrap_or_else(|e| Err(e.to_string()));
        replies.push((addr.clone(), reply));
    }
    replies
}

async fn query(addr: String, tls: ConnectOptions) -> Result<pb::StatusReply, String> {
    let addrs = [addr];
    let client = Client::connect_with_options(addrs.clone(), tls)
        .await
        .map_err(|e| {
            // The usual cause in a few words: nothing listens, or no answer.
            let text = e.to_string();
            if text.contains("Connection refused") {
                "connection refused".to_owned()
            } else if text.contains("timed out") {
                "connection timed out".to_owned()
            } else {
                cli::explain(&e, &addrs)
            }
        })?;
    client.status().await.map_err(|e| cli::explain(&e, &addrs))
}

/// The group's health: an exit code, a word and a sentence.
#[derive(Debug, PartialEq)]
struct Health {
    code: u8,
    word: &'static str,
    summary: String,
}

/// Judge the group from the replies: which members are up (answered, in a
/// member role), whether a majority of the voters is, and whether a leader
/// is known. `voters` empty: every replica the replies name counts.
fn assess(replies: &[Reply], voters: &[u32]) -> Health {
    let mut named: BTreeMap<u32, String> = BTreeMap::new();
    let mut up: Vec<u32> = Vec::new();
    let mut leader = 0;
    let mut lost_data = false;
    for (_, reply) in replies {
        let Ok(r) = reply else { continue };
        for (id, a) in &r.client_addrs {
            named.entry(*id).or_insert_with(|| a.clone());
        }
        named.entry(r.replica).or_default();
        if MEMBER_ROLES.contains(&r.role.as_str()) {
            up.push(r.replica);
        }
        if r.role == "leader" {
            leader = r.replica;
        }
        lost_data |= r.quorum_lost;
    }
    let voters: Vec<u32> = if voters.is_empty() {
        named.keys().copied().collect()
    } else {
        voters.to_vec()
    };
    let down: Vec<u32> = named
        .keys()
        .copied()
        .filter(|id| !up.contains(id))
        .collect();
    let voters_up = voters.iter().filter(|v| up.contains(v)).count();
    let need = voters.len() / 2 + 1;
    let tally = format!("{voters_up} of {} voters up", voters.len());
    if lost_data {
        return Health {
            code: exit::NO_QUORUM,
            word: "no-quorum",
            summary: "no quorum: a majority of the replicas lost their data; strong ops are \
                      refused (docs/operations.md, \"When a majority lost its disks\")"
                .into(),
        };
    }
    if voters_up < need {
        let down_voters: Vec<u32> = voters.iter().copied().filter(|v| !up.contains(v)).collect();
        return Health {
            code: exit::NO_QUORUM,
            word: "no-quorum",
            summary: format!(
                "no quorum: {} unreachable ({tally}, {need} needed); strong ops cannot finish",
                replicas(&down_voters)
            ),
        };
    }
    if leader == 0 {
        return Health {
            code: exit::NO_QUORUM,
            word: "no-leader",
            summary: format!("no leader known ({tally}): an election is under way"),
        };
    }
    if !down.is_empty() {
        return Health {
            code: exit::DEGRADED,
            word: "degraded",
            summary: format!(
                "degraded: {} down or unreachable; the group keeps its quorum ({tally}, \
                 leader {leader})",
                replicas(&down)
            ),
        };
    }
    Health {
        code: 0,
        word: "ok",
        summary: format!("ok: {tally}, leader {leader}"),
    }
}

/// `replica 2`, `replicas 2 and 3`, `replicas 1, 2 and 4`.
fn replicas(ids: &[u32]) -> String {
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    match ids.as_slice() {
        [] => "no replica".into(),
        [one] => format!("replica {one}"),
        [rest @ .., last] => format!("replicas {} and {last}", rest.join(", ")),
    }
}

fn row_json(addr: &str, reply: &Result<pb::StatusReply, String>) -> serde_json::Value {
    match reply {
        Err(e) => serde_json::json!({ "address": addr, "error": e }),
        Ok(s) => serde_json::json!({
            "address": addr,
            "replica": s.replica,
            "role": s.role,
            "leader": s.leader,
            "term": s.term,
            "committed": s.committed,
            "tentative": s.tentative,
            "raft_log_entries": s.raft_log_entries,
            "standing_detail": s.standing_detail,
            "counters": sorted(&s.counters)
                .into_iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::from(*v)))
                .collect::<serde_json::Map<_, _>>(),
        }),
    }
}

fn header() -> Vec<String> {
    let mut h: Vec<String> = [
        "replica",
        "address",
        "role",
        "leader",
        "term",
        "committed",
        "tentative",
        "log",
    ]
    .map(String::from)
    .to_vec();
    h.extend(COLUMNS.iter().map(|(c, _)| c.to_string()));
    h
}

fn row(addr: &str, reply: &Result<pb::StatusReply, String>) -> Vec<String> {
    let s = match reply {
        Ok(s) => s,
        Err(e) => return vec!["-".into(), addr.into(), format!("unreachable: {e}")],
    };
    let leader = if s.leader == 0 {
        "-".to_string()
    } else {
        s.leader.to_string()
    };
    let mut r = vec![
        s.replica.to_string(),
        addr.to_string(),
        s.role.clone(),
        leader,
        s.term.to_string(),
        s.committed.to_string(),
        s.tentative.to_string(),
        s.raft_log_entries.to_string(),
    ];
    r.extend(COLUMNS.iter().map(|(_, names)| {
        let values: Vec<u64> = names
            .iter()
            .filter_map(|n| s.counters.get(*n).copied())
            .collect();
        if values.is_empty() {
            "-".to_string()
        } else {
            values.iter().sum::<u64>().to_string()
        }
    }));
    r
}

fn sorted(counters: &std::collections::HashMap<String, u64>) -> Vec<(&String, &u64)> {
    let mut v: Vec<_> = counters.iter().collect();
    v.sort();
    v
}

/// Columns aligned on their widest cell; each row's last cell (an
/// unreachable replica's message) runs on freely.
fn format_table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for r in rows {
        let aligned = r.len().saturating_sub(1);
        for (w, cell) in widths.iter_mut().zip(&r[..aligned]) {
            *w = (*w).max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|r| {
            let last = r.len().saturating_sub(1);
            r.iter()
                .enumerate()
                .map(|(i, cell)| {
                    if i == last {
                        cell.clone()
                    } else {
                        format!("{cell:<w$}", w = widths[i])
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(id: u32, role: &str) -> Reply {
        let addrs = (1..=3).map(|i| (i, format!("127.0.0.1:700{i}"))).collect();
        let r = pb::StatusReply {
            replica: id,
            role: role.into(),
            client_addrs: addrs,
            ..Default::default()
        };
        (format!("127.0.0.1:700{id}"), Ok(r))
    }

    fn unreachable(id: u32) -> Reply {
        (format!("127.0.0.1:700{id}"), Err("refused".into()))
    }

    #[test]
    fn health_says_whether_the_group_has_a_quorum() {
        let all = [
            reply(1, "leader"),
            reply(2, "follower"),
            reply(3, "follower"),
        ];
        let h = assess(&all, &[1, 2, 3]);
        assert_eq!(
            (h.code, h.summary.as_str()),
            (0, "ok: 3 of 3 voters up, leader 1")
        );
        let one_down = [reply(1, "leader"), reply(2, "follower"), unreachable(3)];
        let h = assess(&one_down, &[1, 2, 3]);
        assert_eq!(h.code, exit::DEGRADED);
        assert!(
            h.summary.starts_with("degraded: replica 3 down"),
            "{}",
            h.summary
        );
        let two_down = [reply(1, "candidate"), unreachable(2), unreachable(3)];
        let h = assess(&two_down, &[]);
        assert_eq!(h.code, exit::NO_QUORUM);
        assert_eq!(
            h.summary,
            "no quorum: replicas 2 and 3 unreachable (1 of 3 voters up, 2 needed); strong ops \
             cannot finish"
        );
        let electing = [reply(1, "candidate"), reply(2, "follower"), unreachable(3)];
        assert_eq!(assess(&electing, &[1, 2, 3]).word, "no-leader");
        let learner_down = [reply(1, "leader"), reply(2, "follower"), unreachable(3)];
        let h = assess(&learner_down, &[1, 2]);
        assert_eq!(
            h.code,
            exit::DEGRADED,
            "a learner down: degraded, quorum kept"
        );
    }

    #[test]
    fn rows_show_replies_and_unreachable_replicas() {
        let reply = pb::StatusReply {
            replica: 2,
            role: "follower".into(),
            leader: 1,
            term: 4,
            committed: 120,
            tentative: 3,
            raft_log_entries: 42,
            counters: [
                ("invoked_weak".to_string(), 7),
                ("views".to_string(), 9),
                ("stable_global_age_ms".to_string(), 12),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let rows = vec![
            header(),
            row("127.0.0.1:7002", &Ok(reply)),
            row("127.0.0.1:7003", &Err("unavailable: refused".into())),
        ];
        let table = format_table(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("replica  address"));
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "2",
                "127.0.0.1:7002",
                "follower",
                "1",
                "4",
                "120",
                "3",
                "42",
                "7",
                "-",
                "9",
                "-",
                "-",
                "-",
                "12",
                "-"
            ]
        );
        assert!(lines[2].ends_with("127.0.0.1:7003  unreachable: unavailable: refused"));
    }
}
