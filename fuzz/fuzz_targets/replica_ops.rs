//! Random op sequences on one replica (a single-member group), through the
//! same sans-IO `creek_node::Node` the server and the simulator drive:
//! invocations of the built-ins with random keys, values and levels, calls
//! with raw argument bytes, frames of random bytes from peers, ticks,
//! executions and disk completions in any interleaving. Nothing may panic,
//! and the node's invariants (`Node::check_invariants`, every room's) hold
//! after every step and once everything settles.
#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use bytes::Bytes;
use creek_cab::MemCabStorage;
use creek_core::{ReplicaId, Request, Views};
use creek_types::value::{encode_args, Value};
use creek_exec::ProcCall;
use creek_procs::Registry;
use creek_node::{Node, NodeConfig};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Proc {
    Get,
    Put,
    Delete,
    Cas,
    Incr,
    Enqueue,
    Dequeue,
    SetAdd,
    ListAppend,
    ListRead,
}

#[derive(Arbitrary, Debug)]
enum Step {
    /// A built-in with well-typed arguments.
    Invoke {
        proc: Proc,
        key: u8,
        long_key: bool,
        value: Vec<u8>,
        delta: i64,
        strong: bool,
        final_view: bool,
    },
    /// Any name with any argument bytes.
    Raw {
        name: String,
        args: Vec<u8>,
        strong: bool,
    },
    /// A frame from a peer (not a member: refused, never a panic).
    Frame { from: u16, bytes: Vec<u8> },
    /// The protocol clock advances.
    Tick { ms: u8 },
    /// Run every execution ready.
    Execute,
    /// The disk catches up with every write handed out.
    Durable,
}

fn call(proc: &Proc, key: Bytes, value: Bytes, delta: i64) -> ProcCall {
    let b = Value::Bytes;
    let (name, args) = match proc {
        Proc::Get => ("kv.get", vec![b(key)]),
        Proc::Put => ("kv.put", vec![b(key), b(value)]),
        Proc::Delete => ("kv.delete", vec![b(key)]),
        Proc::Cas => ("kv.cas", vec![b(key), b(value.clone()), b(value)]),
        Proc::Incr => ("kv.incr", vec![b(key), Value::Int(delta)]),
        Proc::Enqueue => ("queue.enqueue", vec![b(key), b(value)]),
        Proc::Dequeue => ("queue.dequeue", vec![b(key)]),
        Proc::SetAdd => ("set.add", vec![b(key), b(value)]),
        Proc::ListAppend => ("list.append", vec![b(key), b(value)]),
        Proc::ListRead => ("list.read", vec![b(key), Value::Int(delta), Value::Int(8)]),
    };
    ProcCall::new(name, encode_args(&args))
}

fn check(node: &Node<MemCabStorage>) {
    if let Err(e) = node.check_invariants() {
        panic!("invariant broken: {e}");
    }
}

fuzz_target!(|steps: Vec<Step>| {
    let me = ReplicaId(1);
    let config = NodeConfig::for_group(me, &[me]);
    let storage = MemCabStorage::new(vec![creek_cab::raft_id(me)]);
    let registry = Arc::new(Registry::with_builtins());
    let Ok(mut node) = Node::new(config, registry, storage, 0) else {
        panic!("a default single-replica node does not start");
    };
    let mut now_us = 0u64;
    node.campaign();
    for step in steps.into_iter().take(256) {
        match step {
            Step::Invoke {
                proc,
                key,
                long_key,
                value,
                delta,
                strong,
                final_view,
            } => {
                // A key past the limit now and then: it must be refused or
                // aborted, never break the replica.
                let key = if long_key {
                    Bytes::from(vec![key; 5000])
                } else {
                    Bytes::from(vec![b'k', key % 8])
                };
                let call = call(&proc, key, Bytes::from(value), delta);
                let views = if strong || final_view {
                    Views::BOTH
                } else {
                    Views::WEAK
                };
                let _ = node.invoke(
                    Request {
                        strong,
                        views,
                        ..Request::weak(call)
                    },
                    now_us,
                );
            }
            Step::Raw { name, args, strong } => {
                let request = Request {
                    strong,
                    views: Views::BOTH,
                    ..Request::weak(ProcCall::new(&name, args))
                };
                let _ = node.invoke(request, now_us);
            }
            Step::Frame { from, bytes } => {
                let _ = node.on_frame(ReplicaId(from), &Bytes::from(bytes));
            }
            Step::Tick { ms } => {
                now_us += u64::from(ms) * 1000 + 1;
                node.tick(now_us);
            }
            Step::Execute => node.execute_all(),
            Step::Durable => node.on_durable(node.written()),
        }
        let _ = node.ready();
        check(&node);
    }
    // Settle: time passes, everything executes and becomes durable.
    for _ in 0..50 {
        now_us += 10_000;
        node.tick(now_us);
        node.execute_all();
        node.on_durable(node.written());
        let _ = node.ready();
    }
    check(&node);
});
