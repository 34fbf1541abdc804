//! `creek status`: one row per replica, from each replica's own `Status`.

use creek_client::{pb, Client};

/// The client addresses of the three replicas of `creek dev`.
pub(crate) const DEV_ADDRS: [&str; 3] = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"];

/// Counters shown in the table: (column, counter names summed).
const COLUMNS: [(&str, &[&str]); 5] = [
    ("weak", &["invoked_weak"]),
    ("strong", &["invoked_strong"]),
    ("views", &["views"]),
    ("finalized", &["finalized"]),
    ("reexec", &["reexecutions"]),
];

/// Arguments of `creek status`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A replica's client address; repeat for several (the default is the
    /// three replicas of `creek dev`).
    #[arg(long = "addr", value_name = "ADDR", default_values = DEV_ADDRS)]
    addrs: Vec<String>,
    /// Also print every counter of every replica.
    #[arg(long)]
    counters: bool,
}

/// Run `creek status`. An unreachable replica gets a row saying so; the
/// command fails only if no replica answered.
pub fn run(args: &Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let replies = runtime.block_on(query_all(&args.addrs));
    let mut rows = vec![header()];
    for (addr, reply) in args.addrs.iter().zip(&replies) {
        rows.push(row(addr, reply));
    }
    print_table(&rows);
    // Why a replica takes no part (joining, or lost its data and being
    // rebuilt, with the rebuild's progress).
    for reply in replies.iter().flatten() {
        if !reply.standing_detail.is_empty() {
            println!(
                "replica {} is {}: {}",
                reply.replica, reply.role, reply.standing_detail
            );
        }
    }
    if args.counters {
        for (addr, reply) in args.addrs.iter().zip(&replies) {
            if let Ok(s) = reply {
                println!("\nreplica {} ({addr})", s.replica);
                for (name, value) in sorted(&s.counters) {
                    println!("  {name:<24} {value}");
                }
            }
        }
    }
    if replies.iter().all(Result::is_err) {
        return Err("no replica answered".into());
    }
    Ok(())
}

/// Query every address at once; the replies in the order of `addrs`.
async fn query_all(addrs: &[String]) -> Vec<Result<pb::StatusReply, String>> {
    let tasks: Vec<_> = addrs
        .iter()
        .map(|a| tokio::spawn(query(a.clone())))
        .collect();
    let mut replies = Vec::with_capacity(tasks.len());
    for t in tasks {
        replies.push(t.await.unwrap_or_else(|e| Err(e.to_string())));
    }
    replies
}

async fn query(addr: String) -> Result<pb::StatusReply, String> {
    let client = Client::connect([addr]).await.map_err(|e| e.to_string())?;
    client.status().await.map_err(|e| e.to_string())
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
fn print_table(rows: &[Vec<String>]) {
    println!("{}", format_table(rows));
}

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
            counters: [("invoked_weak".to_string(), 7), ("views".to_string(), 9)]
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
                "-"
            ]
        );
        assert!(lines[2].ends_with("127.0.0.1:7003  unreachable: unavailable: refused"));
    }
}
