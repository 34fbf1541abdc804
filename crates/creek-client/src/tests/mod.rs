//! The client against scripted replicas (see `mock`).

mod across;
mod cache;
mod mock;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use creek_proto::pb;
use creek_types::value::Value;
use tokio::sync::Notify;
use tokio_stream::StreamExt;
use tonic::Status;

use self::mock::{
    committed, confirmed, dead_addr, final_, final_abort, preliminary, progress, serve, Mock,
    Server, Step, WatchStep,
};
use crate::{
    CallOptions, Client, Correctable, Error, Level, Levels, RequestId, State, View, ViewKind,
};

/// A replica that plays `steps()` for every request.
async fn replica(steps: impl Fn() -> Vec<Step> + Send + Sync + 'static) -> (Server, Client) {
    let server = serve(Mock::new(1, move |_| steps())).await;
    let client = Client::connect([server.addr.clone()])
        .await
        .expect("connect");
    (server, client)
}

async fn all_views(c: &Correctable) -> Vec<Result<View, Error>> {
    c.views().collect().await
}

fn outcomes(views: &[Result<View, Error>]) -> Vec<Result<(ViewKind, Value), String>> {
    views
        .iter()
        .map(|v| match v {
            Ok(v) => Ok((v.kind, v.outcome.clone().unwrap_or(Value::Nil))),
            Err(e) => Err(e.to_string()),
        })
        .collect()
}

#[tokio::test]
async fn a_confirmed_view_carries_the_preliminary_value() {
    let (_server, client) = replica(|| vec![preliminary(5), confirmed()]).await;
    let c = client.kv_incr("k", 5).await.expect("invoke");
    let early = c.preliminary().await.expect("preliminary");
    assert_eq!(
        (early.level, early.kind, early.outcome.clone()),
        (Level::Weak, ViewKind::Preliminary, Ok(Value::Int(5)))
    );
    let last = c.final_view().await.expect("final");
    assert_eq!(
        (last.level, last.kind, last.outcome.clone()),
        (Level::Strong, ViewKind::Confirmed, Ok(Value::Int(5)))
    );
    assert!(last.latency >= early.latency);
    assert_eq!(c.state(), State::Final);
    // Several consumers each see every view.
    let other = c.clone();
    let (a, b) = tokio::join!(all_views(&c), all_views(&other));
    assert_eq!(a, vec![Ok(early), Ok(last)]);
    assert_eq!(a, b);
}

#[tokio::test]
async fn a_final_view_that_differs_replaces_the_preliminary_one() {
    let (_server, client) = replica(|| vec![preliminary(5), final_(6)]).await;
    let c = client
        .invoke("p", vec![], Levels::Both)
        .await
        .expect("invoke");
    assert_eq!(
        outcomes(&all_views(&c).await),
        vec![
            Ok((ViewKind::Preliminary, Value::Int(5))),
            Ok((ViewKind::Final, Value::Int(6)))
        ]
    );
    assert_eq!(
        c.final_view().await.map(|v| v.outcome),
        Ok(Ok(Value::Int(6)))
    );
}

#[tokio::test]
async fn an_abort_is_an_outcome_not_an_error() {
    let (_server, client) =
        replica(|| vec![preliminary(1), final_abort("insufficient funds")]).await;
    let c = client
        .invoke("p", vec![], Levels::Both)
        .await
        .expect("invoke");
    let last = c.final_view().await.expect("a final view");
    assert_eq!(last.outcome, Err("insufficient funds".to_string()));
    assert_eq!(c.state(), State::Final);
}

#[tokio::test]
async fn a_strong_op_gets_its_final_view_only() {
    let server = serve(Mock::new(1, |req| {
        assert_eq!(req.levels, vec![pb::Level::Strong as i32]);
        vec![final_("v")]
    }))
    .await;
    let client = Client::connect([server.addr.clone()])
        .await
        .expect("connect");
    let c = client
        .invoke_strong("kv.get", vec![Value::from("k")])
        .await
        .expect("invoke");
    let first = c.preliminary().await.expect("first view");
    assert_eq!((first.level, first.kind), (Level::Strong, ViewKind::Final));
    assert_eq!(c.final_view().await, Ok(first));
    assert_eq!(all_views(&c).await.len(), 1);
    assert_eq!(server.mock.seen()[0].request.procedure, "kv.get");
}

#[tokio::test]
async fn a_weak_op_closes_on_its_preliminary_view_unless_it_asks_for_the_final_one() {
    let server = serve(Mock::new(1, |req| {
        assert_eq!(req.levels, vec![pb::Level::Weak as i32]);
        if req.weak_final {
            vec![preliminary(1), final_(2)]
        } else {
            vec![preliminary(1)]
        }
    }))
    .await;
    let client = Client::connect([server.addr.clone()])
        .await
        .expect("connect");
    let c = client.invoke_weak("p", vec![]).await.expect("invoke");
    let only = c.final_view().await.expect("closing view");
    assert_eq!(
        (only.kind, only.outcome),
        (ViewKind::Preliminary, Ok(Value::Int(1)))
    );

    let options = CallOptions {
        weak_final: true,
        ..CallOptions::default()
    };
    let c = client
        .invoke_with("p", vec![], Levels::Weak, options)
        .await
        .expect("invoke");
    let last = c.final_view().await.expect("final view");
    assert_eq!(
        (last.kind, last.outcome),
        (ViewKind::Final, Ok(Value::Int(2)))
    );
}

#[tokio::test]
async fn an_error_mid_stream_closes_the_correctable_with_the_server_message() {
    let (_server, client) = replica(|| {
        vec![
            preliminary(5),
            Step::Fail(Status::unavailable("disk failed")),
        ]
    })
    .await;
    let c = client
        .invoke("p", vec![], Levels::Both)
        .await
        .expect("invoke");
    let errors = Arc::new(Mutex::new(Vec::new()));
    let log = errors.clone();
    c.on_error(move |e| log.lock().expect("log").push(e.clone()));
    let want = Error::Unavailable("disk failed".into());
    assert_eq!(c.final_view().await, Err(want.clone()));
    assert!(c.preliminary().await.is_ok(), "the preliminary view stays");
    assert_eq!(c.state(), State::Error);
    assert_eq!(*errors.lock().expect("log"), vec![want.clone()]);
    assert_eq!(
        outcomes(&all_views(&c).await),
        vec![
            Ok((ViewKind::Preliminary, Value::Int(5))),
            Err(want.to_string())
        ]
    );
}

#[tokio::test]
async fn a_refused_request_fails_the_invocation() {
    let (_server, client) = replica(|| {
        vec![Step::Refuse(Status::invalid_argument(
            "unknown procedure \"nope\"",
        ))]
    })
    .await;
    let err = client
        .invoke("nope", vec![], Levels::Both)
        .await
        .expect_err("refused");
    assert_eq!(
        err,
        Error::InvalidArgument("unknown procedure \"nope\"".into())
    );
}

#[tokio::test]
async fn a_stream_that_breaks_the_protocol_is_an_error() {
    // Ends before the final view.
    let (_s1, client) = replica(|| vec![preliminary(5)]).await;
    let c = client
        .invoke("p", vec![], Levels::Both)
        .await
        .expect("invoke");
    assert!(matches!(c.final_view().await, Err(Error::Protocol(_))));
    // Confirms a preliminary view it never sent.
    let (_s2, client) = replica(|| vec![confirmed()]).await;
    let c = client
        .invoke("p", vec![], Levels::Strong)
        .await
        .expect("invoke");
    assert!(matches!(c.final_view().await, Err(Error::Protocol(_))));
}

#[tokio::test]
async fn the_deadline_closes_a_correctable_waiting_for_its_final_view() {
    let (server, client) = replica(|| {
        vec![
            preliminary(5),
            Step::Sleep(Duration::from_secs(30)),
            final_(5),
        ]
    })
    .await;
    let options = CallOptions {
        timeout: Some(Duration::from_millis(300)),
        ..CallOptions::default()
    };
    let c = client
        .invoke_with("p", vec![], Levels::Both, options)
        .await
        .expect("invoke");
    assert!(c.preliminary().await.is_ok());
    assert!(matches!(
        c.final_view().await,
        Err(Error::DeadlineExceeded(_))
    ));
    let header = server.mock.seen()[0].grpc_timeout.clone();
    assert!(header.is_some(), "the deadline is sent to the server");
}

#[tokio::test]
async fn callbacks_run_in_order_and_late_ones_replay_what_happened() {
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    let (_server, client) =
        replica(move || vec![preliminary(5), Step::Wait(g.clone()), final_(6)]).await;
    let c = client
        .invoke("p", vec![], Levels::Both)
        .await
        .expect("invoke");

    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let register = |name: &'static str| {
        let (u, f, e) = (log.clone(), log.clone(), log.clone());
        c.on_update(move |v| {
            u.lock()
                .expect("log")
                .push(format!("{name} update {v:?}", v = v.outcome))
        })
        .on_final(move |v| {
            f.lock()
                .expect("log")
                .push(format!("{name} final {v:?}", v = v.outcome))
        })
        .on_error(move |err| e.lock().expect("log").push(format!("{name} error {err}")));
    };
    let take = || std::mem::take(&mut *log.lock().expect("log"));

    register("early");
    c.preliminary().await.expect("preliminary");
    assert_eq!(take(), ["early update Ok(Int(5))"]);
    register("late");
    assert_eq!(
        take(),
        ["late update Ok(Int(5))"],
        "replayed at registration"
    );

    gate.notify_one();
    c.final_view().await.expect("final");
    assert_eq!(
        take(),
        [
            "early update Ok(Int(6))",
            "early final Ok(Int(6))",
            "late update Ok(Int(6))",
            "late final Ok(Int(6))"
        ]
    );
    register("after");
    assert_eq!(
        take(),
        [
            "after update Ok(Int(5))",
            "after update Ok(Int(6))",
            "after final Ok(Int(6))"
        ]
    );
}

/// `f` multiplies by 10 and counts its runs; `abort` records what it gets.
fn speculate_x10(c: &Correctable) -> (Correctable, Arc<AtomicUsize>, Arc<Mutex<Vec<String>>>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let aborted = Arc::new(Mutex::new(Vec::new()));
    let (r, a) = (runs.clone(), aborted.clone());
    let derived = c.speculate_with_abort(
        move |v| {
            r.fetch_add(1, Ordering::SeqCst);
            match &v.outcome {
                Ok(Value::Int(n)) => Ok(Value::Int(n * 10)),
                other => Err(format!("not an int: {other:?}")),
            }
        },
        move |old| a.lock().expect("aborted").push(format!("{old:?}")),
    );
    (derived, runs, aborted)
}

#[tokio::test]
async fn a_speculation_that_holds_is_confirmed_without_rerunning() {
    let (_server, client) = replica(|| vec![preliminary(5), confirmed()]).await;
    let c = client
        .invoke("p", vec![], Levels::Both)
        .await
        .expect("invoke");
    let (derived, runs, aborted) = speculate_x10(&c);
    assert_eq!(
        outcomes(&all_views(&derived).await),
        vec![
            Ok((ViewKind::Preliminary, Value::Int(50))),
            Ok((ViewKind::Confirmed, Value::Int(50)))
        ]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(aborted.lock().expect("aborted").is_empty());
}

#[tokio::test]
async fn a_misspeculation_is_aborted_once_and_rerun_on_the_final_view() {
    let (_server, client) = replica(|| vec![preliminary(5), final_(6)]).await;
    let c = client
        .invoke("p", vec![], Levels::Both)
        .await
        .expect("invoke");
    let (derived, runs, aborted) = speculate_x10(&c);
    assert_eq!(
        outcomes(&all_views(&derived).await),
        vec![
            Ok((ViewKind::Preliminary, Value::Int(50))),
            Ok((ViewKind::Final, Value::Int(60)))
        ]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(*aborted.lock().expect("aborted"), ["Ok(Int(50))"]);
    // Speculating after the fact replays the same decisions.
    let (late, runs, _) = speculate_x10(&c);
    assert_eq!(
        late.final_view().await.map(|v| v.outcome),
        Ok(Ok(Value::Int(60)))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_failed_op_fails_its_speculation_and_aborts_it() {
    let (_server, client) = replica(|| {
        vec![
            preliminary(5),
            Step::Fail(Status::resource_exhausted("overloaded")),
        ]
    })
    .await;
    let c = client
        .invoke("p", vec![], Levels::Both)
        .await
        .expect("invoke");
    let (derived, _, aborted) = speculate_x10(&c);
    assert_eq!(
        derived.final_view().await,
        Err(Error::ResourceExhausted("overloaded".into()))
    );
    assert_eq!(*aborted.lock().expect("aborted"), ["Ok(Int(50))"]);
}

#[tokio::test]
async fn connect_skips_a_dead_replica() {
    let dead = dead_addr().await;
    let (live, _) = replica(|| vec![final_(1)]).await;
    let client = Client::connect([dead, live.addr.clone()])
        .await
        .expect("connect");
    assert_eq!(client.replica_addr(), live.addr);
    let c = client.invoke_strong("p", vec![]).await.expect("invoke");
    assert!(c.final_view().await.is_ok());
}

#[tokio::test]
async fn an_unavailable_replica_is_left_and_the_retry_keeps_the_request_id() {
    let refusing = serve(Mock::new(1, |_| {
        vec![Step::Refuse(Status::unavailable("shutting down"))]
    }))
    .await;
    let (live, _) = replica(|| vec![final_(1)]).await;
    let client = Client::connect([refusing.addr.clone(), live.addr.clone()])
        .await
        .expect("connect");
    assert_eq!(client.replica_addr(), refusing.addr);
    let c = client.invoke_strong("p", vec![]).await.expect("invoke");
    assert!(c.final_view().await.is_ok());
    assert_eq!(client.replica_addr(), live.addr);
    let (a, b) = (
        &refusing.mock.seen()[0].request,
        &live.mock.seen()[0].request,
    );
    assert_eq!((a.client_id, a.request_seq), (b.client_id, b.request_seq));
}

#[tokio::test]
async fn a_stopped_replica_is_left_for_the_next_one() {
    let (mut first, _) = replica(|| vec![final_(1)]).await;
    let (second, _) = replica(|| vec![final_(2)]).await;
    let client = Client::connect([first.addr.clone(), second.addr.clone()])
        .await
        .expect("connect");
    let c = client.invoke_strong("p", vec![]).await.expect("invoke");
    assert_eq!(
        c.final_view().await.map(|v| v.outcome),
        Ok(Ok(Value::Int(1)))
    );
    first.stop().await;
    let c = client
        .invoke_strong("p", vec![])
        .await
        .expect("invoke after failover");
    assert_eq!(
        c.final_view().await.map(|v| v.outcome),
        Ok(Ok(Value::Int(2)))
    );
}

#[tokio::test]
async fn no_reachable_replica_and_bad_addresses_are_errors() {
    let dead = dead_addr().await;
    let err = Client::connect([dead]).await.expect_err("nothing listens");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("tcp connect error"), "{message}");
    assert_eq!(message.matches("transport error").count(), 1, "{message}");
    let err = Client::connect(Vec::<String>::new())
        .await
        .expect_err("no address");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let err = Client::connect(["not an address"])
        .await
        .expect_err("bad address");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

#[tokio::test]
async fn request_ids_increase_and_clones_share_them() {
    let (server, client) = replica(|| vec![final_(1)]).await;
    let clone = client.clone();
    for c in [&client, &clone, &client] {
        c.invoke_strong("p", vec![]).await.expect("invoke");
    }
    let seen = server.mock.seen();
    let ids: Vec<(u64, u64)> = seen
        .iter()
        .map(|s| (s.request.client_id, s.request.request_seq))
        .collect();
    assert!(ids
        .iter()
        .all(|&(id, _)| id == client.client_id() && id != 0));
    assert!(ids.windows(2).all(|w| w[0].1 < w[1].1), "{ids:?}");
    let other = Client::connect([server.addr.clone()])
        .await
        .expect("connect");
    assert_ne!(other.client_id(), client.client_id());
}

#[tokio::test]
async fn a_given_request_id_is_sent_as_is_without_acknowledgements() {
    let (server, client) = replica(|| vec![final_(1)]).await;
    let c = client.invoke_strong("p", vec![]).await.expect("invoke");
    c.final_view().await.expect("final");
    let given: RequestId = "00000000000000ab:7".parse().expect("parses");
    let options = CallOptions {
        request_id: Some(given),
        ..CallOptions::default()
    };
    let c = client
        .invoke_with("p", vec![], Levels::Strong, options)
        .await
        .expect("invoke");
    c.final_view().await.expect("final");
    let seen = server.mock.seen();
    let last = &seen.last().expect("sent").request;
    assert_eq!((last.client_id, last.request_seq), (0xab, 7));
    assert!(
        last.acked.is_empty(),
        "another client's acks: {:?}",
        last.acked
    );
    assert_eq!(given.to_string(), "00000000000000ab:7");
    assert!("0:1".parse::<RequestId>().is_err());
    assert!("ab".parse::<RequestId>().is_err());
    assert!("xy:1".parse::<RequestId>().is_err());
}

#[tokio::test]
async fn status_returns_the_replica_reply() {
    let (_server, client) = replica(Vec::new).await;
    let reply = client.status().await.expect("status");
    assert_eq!(
        (reply.replica, reply.role.as_str(), reply.term),
        (1, "leader", 3)
    );
}

#[tokio::test]
async fn arguments_and_levels_reach_the_server() {
    let (server, client) = replica(|| vec![preliminary(Value::Nil), confirmed()]).await;
    client.kv_put("k", "v").await.expect("invoke");
    let req = &server.mock.seen()[0].request;
    assert_eq!(req.procedure, "kv.put");
    let args: Vec<Value> = req
        .args
        .iter()
        .map(|a| creek_proto::from_wire(a).expect("value"))
        .collect();
    assert_eq!(args, vec![Value::from("k"), Value::from("v")]);
    assert_eq!(
        req.levels,
        vec![pb::Level::Weak as i32, pb::Level::Strong as i32]
    );
}

fn compacted_status(oldest: u64) -> Status {
    let mut s = Status::out_of_range(format!(
        "position 0 is compacted: the oldest position this replica can resume a watch from is \
         {oldest}"
    ));
    s.metadata_mut().insert("creek-compacted", oldest.into());
    s
}

#[tokio::test]
async fn a_watch_resumes_at_the_next_replica_after_the_last_position_it_delivered() {
    // The first replica delivers positions 0 and 1 and fails; the second,
    // asked from 2, repeats 1 (ignored), then sends 2 and 4 and a progress
    // mark.
    let a = serve(Mock::new(1, |_| Vec::new()).with_watch(|_| {
        vec![
            committed(0, "p/a"),
            committed(1, "p/b"),
            WatchStep::Fail(Status::unavailable("going down")),
        ]
    }))
    .await;
    let b = serve(Mock::new(2, |_| Vec::new()).with_watch(|_| {
        vec![
            committed(1, "p/b"),
            committed(2, "p/c"),
            committed(4, "p/d"),
            progress(7),
            WatchStep::Hang,
        ]
    }))
    .await;
    let client = Client::connect([a.addr.clone(), b.addr.clone()])
        .await
        .expect("connect");
    let events = client.watch(
        "p/",
        crate::WatchOptions {
            from: Some(0),
            tentative: false,
            ..Default::default()
        },
    );
    let got: Vec<_> =
        tokio::time::timeout(Duration::from_secs(10), events.take(4).collect::<Vec<_>>())
            .await
            .expect("four events");
    let got: Vec<(u64, String)> = got
        .into_iter()
        .map(|e| {
            let e = e.expect("an event");
            assert!(!e.tentative);
            assert_eq!(e.op.to_string(), format!("r1.{}", e.position + 1));
            (e.position, String::from_utf8_lossy(&e.key).into_owned())
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, "p/a".into()),
            (1, "p/b".into()),
            (2, "p/c".into()),
            (4, "p/d".into())
        ]
    );
    assert_eq!(a.mock.watches()[0].from, Some(0));
    assert_eq!(b.mock.watches()[0].from, Some(2));
    assert_eq!(b.mock.watches()[0].prefix.as_ref(), b"p/");
}

#[tokio::test]
async fn a_watch_from_a_position_no_replica_holds_is_a_typed_error() {
    let a = serve(
        Mock::new(1, |_| Vec::new()).with_watch(|_| vec![WatchStep::Refuse(compacted_status(40))]),
    )
    .await;
    let b = serve(
        Mock::new(2, |_| Vec::new()).with_watch(|_| vec![WatchStep::Refuse(compacted_status(50))]),
    )
    .await;
    let client = Client::connect([a.addr.clone(), b.addr.clone()])
        .await
        .expect("connect");
    let mut events = Box::pin(client.watch(
        "",
        crate::WatchOptions {
            from: Some(3),
            tentative: false,
            ..Default::default()
        },
    ));
    match events.next().await {
        Some(Err(Error::Compacted { oldest, message })) => {
            assert!(oldest == 40 || oldest == 50, "{oldest}");
            assert!(message.contains("compacted"), "{message}");
        }
        other => panic!("expected a compacted error, got {other:?}"),
    }
    assert!(events.next().await.is_none());
    assert_eq!(a.mock.watches().len() + b.mock.watches().len(), 2);
}

#[tokio::test]
async fn a_refused_watch_is_not_retried() {
    let (server, client) = {
        let server = serve(Mock::new(1, |_| Vec::new()).with_watch(|_| {
            vec![WatchStep::Refuse(Status::invalid_argument(
                "internal prefix",
            ))]
        }))
        .await;
        let client = Client::connect([server.addr.clone()])
            .await
            .expect("connect");
        (server, client)
    };
    let mut events = Box::pin(client.watch("\0x", crate::WatchOptions::default()));
    assert_eq!(
        events.next().await.map(|e| e.map(|_| ())),
        Some(Err(Error::InvalidArgument("internal prefix".into())))
    );
    assert!(events.next().await.is_none());
    assert_eq!(server.mock.watches().len(), 1);
}
