//! User procedures over three `creek serve` processes, driven the way a
//! user drives them (docs/procedures.md, "Keyspaces, registering and
//! calling"): `creek proc register` a source file, `creek call` its
//! procedures with arguments typed by their signatures, `creek proc
//! list/show`, `creek keyspace create/list`. A file the compiler rejects
//! names the line and the flow and changes nothing; a weak call of a
//! procedure that writes a strong keyspace is refused with
//! INVALID_ARGUMENT before it becomes an op.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{b, call, req, Cluster};
use creek_proto::pb::Level;

const CREEK: &str = env!("CARGO_BIN_EXE_creek");
const GROUPS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/procedures/message_groups.creek"
);
const UNSAFE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/procedures/unsafe_contest.creek"
);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `creek ARGS` against the cluster.
fn creek(cluster: &Cluster, args: &[&str]) -> Output {
    let endpoints: Vec<String> = cluster.clients.iter().map(|a| a.to_string()).collect();
    Command::new(CREEK)
        .args(args)
        .env("CREEK_ENDPOINTS", endpoints.join(","))
        .output()
        .expect("run creek")
}

/// `creek ARGS` must succeed; its stdout.
fn ok(cluster: &Cluster, args: &[&str]) -> String {
    let out = creek(cluster, args);
    assert!(
        out.status.success(),
        "creek {args:?}: {:?}\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_procedures_register_call_list_and_refuse() {
    let cluster = Cluster::start(3).await;

    let registered = ok(&cluster, &["proc", "register", GROUPS]);
    assert_eq!(
        registered,
        "registered join version 1\nregistered post version 1\nregistered inbox version 1\n"
    );

    // Listed with the built-ins, with signature, version and level.
    let listed = ok(&cluster, &["proc", "list", "-o", "json"]);
    let post: serde_json::Value = listed
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON"))
        .find(|p| p["name"] == "post")
        .expect("post listed");
    assert_eq!(post["user"], true);
    assert_eq!(post["version"], 1);
    assert_eq!(post["writes_strong"], false);
    assert_eq!(post["returns"], "int");
    assert_eq!(post["params"][1]["name"], "msg");
    assert!(listed.contains(r#""name":"kv.incr""#), "{listed}");
    let table = ok(&cluster, &["proc", "list"]);
    assert!(
        table.contains("join(group: bytes, user: bytes)")
            && table.contains("[user v1, strong only]"),
        "{table}"
    );

    // Calls typed by the signatures the CLI fetched.
    ok(
        &cluster,
        &["call", "--level", "strong", "join", "g1", "ann"],
    );
    ok(
        &cluster,
        &["call", "--level", "strong", "join", "g1", "bob"],
    );
    let n = ok(
        &cluster,
        &[
            "call", "-o", "value", "--level", "strong", "post", "s:g1", "s:hello",
        ],
    );
    assert_eq!(n.trim(), "2");
    let inbox = ok(
        &cluster,
        &["call", "-o", "json", "--level", "strong", "inbox", "bob"],
    );
    assert!(inbox.contains(r#""value":["hello"]"#), "{inbox}");

    // A weak call of `join` (it writes the strong keyspace `members`) is
    // refused before it becomes an op: INVALID_ARGUMENT, with the reason.
    let out = creek(&cluster, &["call", "--level", "weak", "join", "g1", "eve"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("join writes strong keyspace members: invoke it at the strong level"),
        "{}",
        text(&out.stderr)
    );
    let mut client = cluster.client(0).await;
    let refused = call(
        &mut client,
        req("join", &[b("g1"), b("eve")], &[Level::Weak]),
        Duration::from_secs(10),
    )
    .await
    .expect_err("a weak join is refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    // Bad arguments are refused by the procedure's own check.
    let bad = call(
        &mut client,
        req("post", &[b("g1")], &[Level::Weak]),
        Duration::from_secs(10),
    )
    .await
    .expect_err("post with one argument is refused");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
    assert!(
        bad.message().contains("post takes 2 argument(s)"),
        "{bad:?}"
    );
    let members = ok(
        &cluster,
        &["call", "-o", "json", "--level", "strong", "proc.list"],
    );
    assert!(members.contains("join"), "{members}");

    // A file the compiler rejects: the line and the flow, nothing changed.
    let before = ok(&cluster, &["proc", "list", "-o", "json"]);
    let keyspaces_before = ok(&cluster, &["keyspace", "list"]);
    let out = creek(&cluster, &["proc", "register", UNSAFE]);
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("was not registered (nothing changed)")
            && err.contains("line 13:9: write to winner (strong) is controlled by weak data"),
        "{err}"
    );
    assert_eq!(ok(&cluster, &["proc", "list", "-o", "json"]), before);
    let keyspaces = ok(&cluster, &["keyspace", "list"]);
    assert_eq!(keyspaces, keyspaces_before);
    assert!(!keyspaces.contains("winner"), "{keyspaces}");

    // `proc show` prints a user procedure's source; keyspaces by hand.
    let shown = ok(&cluster, &["proc", "show", "post"]);
    assert!(
        shown.contains("version    1")
            && shown.contains("proc post(group: bytes, msg: bytes) -> int {"),
        "{shown}"
    );
    assert_eq!(
        ok(&cluster, &["keyspace", "create", "notes", "weak"]),
        "keyspace notes is weak\n"
    );
    let keyspaces = ok(&cluster, &["keyspace", "list"]);
    assert!(
        keyspaces.contains("members") && keyspaces.contains("notes"),
        "{keyspaces}"
    );
    let out = creek(&cluster, &["keyspace", "create", "notes", "strong"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("keyspace notes already exists as weak"),
        "{}",
        text(&out.stderr)
    );
}
