//! Calls to user procedures through `Replica::invoke` (DESIGN §14): a
//! procedure is checked at invoke time against the replica's latest state
//! (committed and tentative), a weak call of one that may write a strong
//! keyspace is refused before it becomes an op, and user procedures are
//! broadcast like any writing op.
#![allow(clippy::unwrap_used)]

mod harness;

use creek_core::{ExecKey, InvokeError, Pos, Request, Views};
use creek_exec::basic::BasicEngine;
use creek_exec::mvcc::MvccExecutor;
use creek_exec::{Outcome, ProcCall};
use creek_procs::CallError;
use creek_types::value::{encode_args, Value};
use harness::{Cluster, TestEngine};

const GROUPS: &str = include_str!("../../../examples/procedures/message_groups.creek");

fn call(name: &str, args: &[Value]) -> ProcCall {
    ProcCall::new(name, encode_args(args))
}

fn register(source: &str) -> ProcCall {
    call("proc.register", &[Value::from(source)])
}

fn request(call: ProcCall, strong: bool) -> Request {
    let mut r = Request::weak(call);
    if strong {
        (r.strong, r.views) = (true, Views::BOTH);
    }
    r
}

/// Invoke at node `i`, which must refuse.
fn refused<E: TestEngine>(
    c: &mut Cluster<E>,
    i: usize,
    call: ProcCall,
    strong: bool,
) -> InvokeError {
    let now = c.now_us + 10;
    c.nodes[i]
        .replica
        .invoke(request(call, strong), now)
        .unwrap_err()
}

fn last_outcome<E: TestEngine>(c: &Cluster<E>, i: usize, h: ExecKey) -> Outcome {
    let views = &c.nodes[i].views[&h];
    views
        .iter()
        .rev()
        .find(|v| v.kind.is_final())
        .or_else(|| views.last())
        .unwrap()
        .outcome
        .clone()
}

fn run_all<E: TestEngine>(c: &mut Cluster<E>, i: usize) {
    while c.exec_one(i) {}
}

fn scenario<E: TestEngine>() {
    let mut c: Cluster<E> = Cluster::with_views(2, 50_000, true);
    // Before registering, the name is unknown.
    let before = call("post", &[Value::from("g1"), Value::from("hi")]);
    assert!(matches!(
        refused(&mut c, 0, before, false),
        InvokeError::Call(CallError::UnknownProcedure(_))
    ));

    let reg = c.invoke(0, request(register(GROUPS), true)).unwrap();
    // Executed here, not yet committed: the latest state holds it.
    run_all(&mut c, 0);
    let listed: Vec<String> = c.nodes[0]
        .replica
        .user_procedures()
        .into_iter()
        .map(|u| u.name)
        .collect();
    assert_eq!(listed, ["inbox", "join", "post"]);
    assert!(c.nodes[1].replica.user_procedures().is_empty());

    // `join` writes the strong keyspace `members`: refused weak, with the
    // procedure and the keyspace named, and nothing becomes an op.
    let join = call("join", &[Value::from("g1"), Value::from("ann")]);
    let ops_before = c.ops.len();
    match refused(&mut c, 0, join.clone(), false) {
        InvokeError::Call(e @ CallError::NeedsStrong { .. }) => assert_eq!(
            e.to_string(),
            "join writes strong keyspace members: invoke it at the strong level"
        ),
        other => panic!("weak join: {other:?}"),
    }
    // Bad arguments are refused with the procedure's own message.
    match refused(&mut c, 0, call("post", &[Value::from("g1")]), false) {
        InvokeError::Call(CallError::MalformedArgs { name, reason }) => {
            assert_eq!(name, "post");
            assert!(reason.contains("post takes 2 argument(s)"), "{reason}");
        }
        other => panic!("post with one argument: {other:?}"),
    }
    assert_eq!(c.ops.len(), ops_before);
    assert!(c.undecided.len() <= 1, "only the register op is cast");

    let j = c.invoke(0, request(join, true)).unwrap();
    let p = c
        .invoke(
            0,
            request(call("post", &[Value::from("g1"), Value::from("hi")]), false),
        )
        .unwrap();
    // A read-only user procedure is broadcast, not answered locally.
    let inbox = call("inbox", &[Value::from("ann")]);
    let r = c.invoke(0, request(inbox, false)).unwrap();
    assert!(matches!(r, ExecKey::Op(_)), "{r:?}");
    c.settle();
    c.check_final();
    assert_eq!(
        last_outcome(&c, 0, reg),
        Ok(Value::List(vec![
            Value::List(vec![Value::from("join"), Value::Int(1)]),
            Value::List(vec![Value::from("post"), Value::Int(1)]),
            Value::List(vec![Value::from("inbox"), Value::Int(1)]),
        ])
        .encode())
    );
    assert_eq!(last_outcome(&c, 0, j), Ok(Value::Nil.encode()));
    assert_eq!(last_outcome(&c, 0, p), Ok(Value::Int(1).encode()));
    assert_eq!(
        last_outcome(&c, 0, r),
        Ok(Value::List(vec![Value::from("hi")]).encode())
    );
    // The other replica now knows the procedures too.
    assert_eq!(c.nodes[1].replica.user_procedures().len(), 3);
}

#[test]
fn user_procedures_are_checked_against_the_latest_state_mvcc() {
    scenario::<MvccExecutor<ExecKey, Pos>>();
}

#[test]
fn user_procedures_are_checked_against_the_latest_state_basic() {
    scenario::<BasicEngine<ExecKey, Pos>>();
}
