//! User procedures over three `creek serve` processes, driven the way a
//! user drives them (docs/procedures.md, "Keyspaces, registering and
//! calling"): `creek proc register` a source file, `creek call` its
//! procedures with arguments typed by their signatures, `creek proc
//! list/show`, `creek keyspace create/list`. A file the compiler rejects
//! names the line and the flow and changes nothing; a weak call of a
//! procedure that writes a strong keyspace is refused with
//! INVALID_ARGUMENT before it becomes an op. The same through the Rust
//! client's typed helpers; re-registration (a new version, used by later
//! calls, while calls in flight finish) and `creek proc drop`.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{b, call, req, Cluster, Value};
use creek_client::{Client, Error, Keyspace, KeyspaceLabel, Levels};
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

/// The typed helpers of the Rust client (`creek_client`): keyspaces by
/// hand, a file registered, its procedures listed with their signatures
/// and labels and called by name; each refusal is a typed error naming
/// the reason, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_registers_creates_keyspaces_and_calls_user_procedures() {
    let cluster = Cluster::start(3).await;
    let client = Client::connect(cluster.clients.iter().map(|a| a.to_string()))
        .await
        .expect("connect");

    client
        .create_keyspace("members", KeyspaceLabel::Strong)
        .await
        .expect("create members");
    client
        .create_keyspace("inboxes", KeyspaceLabel::Weak)
        .await
        .expect("create inboxes");
    // Again with the same label: nothing changes, no error.
    client
        .create_keyspace("members", KeyspaceLabel::Strong)
        .await
        .expect("create members again");
    let other = client
        .create_keyspace("members", KeyspaceLabel::Weak)
        .await
        .expect_err("members is strong");
    assert!(
        matches!(&other, Error::Refused(m) if m.contains("keyspace members already exists as strong, not weak")),
        "{other:?}"
    );
    let bad = client
        .create_keyspace("9lives", KeyspaceLabel::Weak)
        .await
        .expect_err("not a name");
    assert!(
        matches!(&bad, Error::Refused(m) if m.contains("9lives")),
        "{bad:?}"
    );
    let keyspaces = vec![
        Keyspace {
            name: "inboxes".into(),
            label: KeyspaceLabel::Weak,
        },
        Keyspace {
            name: "members".into(),
            label: KeyspaceLabel::Strong,
        },
    ];
    assert_eq!(client.list_keyspaces().await.expect("list"), keyspaces);

    let source = std::fs::read_to_string(GROUPS).expect("read the example");
    let registered = client.register_procedures(&source).await.expect("register");
    let names: Vec<(&str, u64)> = registered
        .iter()
        .map(|r| (r.name.as_str(), r.version))
        .collect();
    assert_eq!(names, [("join", 1), ("post", 1), ("inbox", 1)]);

    // Listed beside the built-ins with signature, version and labels.
    let procedures = client.procedures().await.expect("procedures");
    let find = |name: &str| {
        procedures
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{name} listed"))
            .clone()
    };
    assert!(!find("kv.incr").user);
    let join = find("join");
    let params: Vec<(&str, &str)> = join
        .params
        .iter()
        .map(|p| (p.name.as_str(), p.r#type.as_str()))
        .collect();
    assert_eq!(params, [("group", "bytes"), ("user", "bytes")]);
    assert!(join.user && join.described && join.writes_strong && !join.read_only);
    assert_eq!(join.version, 1);
    let labels = |p: &creek_proto::pb::ProcedureInfo| -> Vec<(String, String)> {
        p.keyspaces
            .iter()
            .map(|k| (k.name.clone(), k.label.clone()))
            .collect()
    };
    assert_eq!(labels(&join), [("members".into(), "strong".into())]);
    let post = find("post");
    assert_eq!(post.returns, "int");
    assert!(!post.writes_strong && !post.read_only);
    assert_eq!(
        labels(&post),
        [
            ("inboxes".into(), "weak".into()),
            ("members".into(), "strong".into())
        ]
    );
    assert!(find("inbox").read_only);

    // Calls by name.
    for user in ["ann", "bob"] {
        let op = client
            .invoke_strong("join", vec![b("g1"), b(user)])
            .await
            .expect("join");
        assert_eq!(
            op.final_view().await.expect("joined").outcome,
            Ok(Value::Nil)
        );
    }
    let op = client
        .invoke("post", vec![b("g1"), b("hello")], Levels::Both)
        .await
        .expect("post");
    assert_eq!(
        op.final_view().await.expect("posted").outcome,
        Ok(Value::Int(2))
    );
    let op = client
        .invoke_strong("inbox", vec![b("bob")])
        .await
        .expect("inbox");
    assert_eq!(
        op.final_view().await.expect("read").outcome,
        Ok(Value::List(vec![b("hello")]))
    );

    // A weak call of a strong-writing procedure: INVALID_ARGUMENT.
    let weak = match client.invoke_weak("join", vec![b("g1"), b("eve")]).await {
        Err(e) => e,
        Ok(op) => op.final_view().await.expect_err("a weak join is refused"),
    };
    assert!(
        matches!(&weak, Error::InvalidArgument(m)
            if m.contains("join writes strong keyspace members: invoke it at the strong level")),
        "{weak:?}"
    );

    // A file the compiler rejects: the line, the column and the flow.
    let unsafe_source = std::fs::read_to_string(UNSAFE).expect("read the example");
    let rejected = client
        .register_procedures(&unsafe_source)
        .await
        .expect_err("the unsafe contest does not compile");
    assert!(
        matches!(&rejected, Error::NotRegistered(m)
            if m.contains("line 13:9: write to winner (strong) is controlled by weak data")),
        "{rejected:?}"
    );
    assert_eq!(client.list_keyspaces().await.expect("list"), keyspaces);
    let after = client.procedures().await.expect("procedures");
    assert!(after.iter().all(|p| p.name != "deliver"));
    assert_eq!(after.len(), procedures.len());

    let shown = client
        .show_procedure("post")
        .await
        .expect("show")
        .expect("post exists");
    assert_eq!((shown.version, shown.source), (1, source));
    assert_eq!(client.show_procedure("nosuch").await.expect("show"), None);
    let unknown = client
        .drop_procedure("nosuch")
        .await
        .expect_err("nothing to drop");
    assert!(
        matches!(&unknown, Error::Refused(m) if m.contains("no user procedure \"nosuch\"")),
        "{unknown:?}"
    );
}

/// `which(k)`: writes a weak keyspace (so it is an op like any write) and
/// answers its version's word.
fn which_source(word: &str) -> String {
    format!(
        "keyspace calls: weak\n\n# Which version answered.\n\
         proc which(k: bytes) -> bytes {{\n    put(calls, k ++ \"/\" ++ op_id(), \"{word}\")\n    return \"{word}\"\n}}\n"
    )
}

/// The final outcome of `which(k)`, invoked at both levels.
async fn which(client: &Client, k: &str) -> Result<Value, String> {
    let op = client
        .invoke("which", vec![b(k)], Levels::Both)
        .await
        .expect("which accepted");
    op.final_view().await.expect("which's final view").outcome
}

/// Registering a file again gives its procedures a new version, used by
/// every call ordered after it, while calls in flight finish with one
/// version or the other; `proc drop` makes a procedure unknown (its
/// keyspace and data stay), and dropping an unknown one is an error that
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_registration_and_drop() {
    let cluster = Cluster::start(3).await;
    let client = Client::connect(cluster.clients.iter().map(|a| a.to_string()))
        .await
        .expect("connect");
    let v1 = cluster.dir.join("which_v1.creek");
    let v2 = cluster.dir.join("which_v2.creek");
    std::fs::write(&v1, which_source("v1")).expect("write v1");
    std::fs::write(&v2, which_source("v2")).expect("write v2");
    let (v1, v2) = (v1.to_string_lossy(), v2.to_string_lossy());

    assert_eq!(
        ok(&cluster, &["proc", "register", &v1]),
        "registered which version 1\n"
    );
    assert_eq!(which(&client, "a").await, Ok(b("v1")));

    // Calls in flight while v2 is registered: calls started one every few
    // milliseconds from before the registration until after it, none
    // awaited, and a sequence of calls, one after another, running
    // through it. Link latency keeps them in flight.
    cluster.delay_all(Duration::from_millis(50)).await;
    let caller = client.clone();
    let sequence = tokio::spawn(async move {
        // Until v2 has answered three times (bounded: a hang is a failure).
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        while seen.iter().filter(|o| **o == Ok(b("v2"))).count() < 3
            && std::time::Instant::now() < give_up
        {
            seen.push(which(&caller, "s").await);
        }
        seen
    });
    let endpoints: Vec<String> = cluster.clients.iter().map(|a| a.to_string()).collect();
    let v2_path = v2.to_string();
    let mut registering = tokio::task::spawn_blocking(move || {
        Command::new(CREEK)
            .args(["proc", "register", &v2_path])
            .env("CREEK_ENDPOINTS", endpoints.join(","))
            .output()
            .expect("run creek")
    });
    let mut in_flight = Vec::new();
    let register = loop {
        let op = client
            .invoke(
                "which",
                vec![b(&format!("f{}", in_flight.len()))],
                Levels::Both,
            )
            .await
            .expect("accepted");
        in_flight.push(op);
        tokio::select! {
            done = &mut registering => break done.expect("register v2"),
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    };
    for i in 0..4 {
        let op = client
            .invoke("which", vec![b(&format!("after{i}"))], Levels::Both)
            .await
            .expect("accepted");
        in_flight.push(op);
    }
    assert!(register.status.success(), "{}", text(&register.stderr));
    assert_eq!(text(&register.stdout), "registered which version 2\n");
    // Every call ordered after the registration runs v2.
    assert_eq!(which(&client, "b").await, Ok(b("v2")));
    let seen = sequence.await.expect("the sequence of calls");
    // Each call answered by one version; once v2 answered, v1 never again.
    let first_v2 = seen.iter().position(|o| *o == Ok(b("v2")));
    let first_v2 = first_v2.unwrap_or_else(|| panic!("v2 never answered: {seen:?}"));
    assert!(
        seen[..first_v2].iter().all(|o| *o == Ok(b("v1"))),
        "{seen:?}"
    );
    assert!(
        seen[first_v2..].iter().all(|o| *o == Ok(b("v2"))),
        "{seen:?}"
    );
    let mut answers = std::collections::BTreeMap::new();
    for op in in_flight {
        let outcome = op
            .final_view()
            .await
            .expect("an in-flight call finishes")
            .outcome;
        assert!(
            outcome == Ok(b("v1")) || outcome == Ok(b("v2")),
            "{outcome:?}"
        );
        *answers.entry(format!("{outcome:?}")).or_insert(0) += 1;
    }
    cluster.delay_all(Duration::ZERO).await;
    eprintln!("in-flight calls answered: {answers:?}; the sequence: {seen:?}");

    let shown = ok(&cluster, &["proc", "show", "which"]);
    assert!(
        shown.contains("version    2")
            && shown.contains("return \"v2\"")
            && !shown.contains("return \"v1\""),
        "{shown}"
    );
    let listed = ok(&cluster, &["proc", "list"]);
    assert!(listed.contains("[user v2]"), "{listed}");
    assert_eq!(
        ok(
            &cluster,
            &["call", "-o", "value", "--level", "strong", "which", "c"]
        ),
        "v2"
    );
    assert_eq!(
        client
            .show_procedure("which")
            .await
            .expect("show")
            .map(|s| s.version),
        Some(2)
    );

    // Dropped: unknown afterwards, with the name in the error.
    assert_eq!(ok(&cluster, &["proc", "drop", "which"]), "dropped which\n");
    let out = creek(&cluster, &["call", "--level", "strong", "which", "d"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("unknown procedure \"which\""),
        "{}",
        text(&out.stderr)
    );
    let refused = client
        .invoke_strong("which", vec![b("d")])
        .await
        .expect_err("which is gone");
    assert!(
        matches!(&refused, Error::InvalidArgument(m) if m.contains("unknown procedure \"which\"")),
        "{refused:?}"
    );
    let out = creek(&cluster, &["proc", "show", "which"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("unknown procedure \"which\""),
        "{}",
        text(&out.stderr)
    );
    assert!(!ok(&cluster, &["proc", "list"]).contains("which("));
    assert_eq!(client.show_procedure("which").await.expect("show"), None);

    // Dropping it again (or any unknown name) is an error; nothing changes.
    let procedures_before = ok(&cluster, &["proc", "list", "-o", "json"]);
    let keyspaces_before = ok(&cluster, &["keyspace", "list"]);
    for name in ["which", "nosuch", "kv.get"] {
        let out = creek(&cluster, &["proc", "drop", name]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(&format!("no user procedure \"{name}\" to drop")),
            "{}",
            text(&out.stderr)
        );
    }
    assert!(matches!(
        client.drop_procedure("which").await,
        Err(Error::Refused(_))
    ));
    assert_eq!(
        ok(&cluster, &["proc", "list", "-o", "json"]),
        procedures_before
    );
    assert_eq!(ok(&cluster, &["keyspace", "list"]), keyspaces_before);

    // The keyspace and its data stayed: a new procedure reads them.
    let counter = cluster.dir.join("count.creek");
    std::fs::write(
        &counter,
        "proc count_calls(k: bytes) -> int {\n    return len(scan(calls, k ++ \"/\", k ++ \"0\", 1000))\n}\n",
    )
    .expect("write count");
    ok(&cluster, &["proc", "register", &counter.to_string_lossy()]);
    let n = ok(
        &cluster,
        &[
            "call",
            "-o",
            "value",
            "--level",
            "strong",
            "count_calls",
            "c",
        ],
    );
    assert_eq!(n.trim(), "1");
}
