//! End-to-end: the two applications of the Correctables paper (§4.2 ad
//! serving, §4.3 ticket selling) through the Rust client, against three
//! real `creek serve` processes.
//!
//! The applications are the Rust client's examples
//! (`crates/creek-client/examples/{tickets,ads}.rs`). This file includes
//! their source as modules, so these tests exercise exactly the code
//! `cargo run --example` runs, minus its `main`. (Running the example
//! binaries instead would need a cargo build from inside the test: cargo
//! builds another package's examples neither for this test nor where it
//! could find them.)

mod common;

#[allow(dead_code)] // `main` and its argument parsing belong to the example
#[path = "../../creek-client/examples/ads.rs"]
mod ads;
#[allow(dead_code)]
#[path = "../../creek-client/examples/tickets.rs"]
mod tickets;

use std::future::Future;
use std::time::{Duration, Instant};

use common::*;
use creek_client::{Client, ViewKind};

/// Longest a test's body may run once its cluster is up.
const BODY_TIMEOUT: Duration = Duration::from_secs(180);

/// Run `body`, failing the test if it outlives [`BODY_TIMEOUT`]. The
/// cluster it uses is dropped (its processes killed) either way.
async fn bounded<T>(what: &str, body: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = tokio::time::timeout(BODY_TIMEOUT, body)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {BODY_TIMEOUT:?}"));
    eprintln!("{what}: {:.1} s", started.elapsed().as_secs_f64());
    out
}

fn addrs(cluster: &Cluster) -> Vec<String> {
    cluster.clients.iter().map(|a| a.to_string()).collect()
}

/// §4.3: selling on preliminary views while many tickets are left, and on
/// final views for the last ones, never oversells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_sold_on_both_views_are_never_oversold() {
    let cluster = Cluster::start(3).await;
    let config = tickets::Config {
        addrs: addrs(&cluster),
        tickets: 200,
        threshold: 20,
        retailers: 6,
        buyers: 240,
        timeout: Duration::from_secs(30),
    };
    let report = bounded("ticket sale", tickets::run(config.clone()))
        .await
        .expect("the tickets go on sale");
    report.print();

    // The audit: no ticket held twice, none held that was not printed,
    // everyone sold a ticket (on either view) holds one in the final
    // view, no buyer turned away while tickets were left, no call failed.
    assert!(report.problems.is_empty(), "{:#?}", report.problems);

    // The same properties, checked here too rather than only by the
    // example's own audit: each ticket held once, only printed tickets,
    // and everyone sold a ticket (on either view) holds one.
    let mut held: Vec<i64> = report.sales.iter().filter_map(|s| s.final_ticket).collect();
    held.sort_unstable();
    assert_eq!(
        held,
        (1..=200).collect::<Vec<_>>(),
        "each ticket held exactly once"
    );
    let sold_early = report.answered(tickets::Answer::TicketOnPreliminary);
    let sold_late = report.answered(tickets::Answer::TicketOnFinal);
    let sold_out = report.answered(tickets::Answer::SoldOut);
    assert_eq!(
        sold_early.len() + sold_late.len(),
        200,
        "more buyers than tickets"
    );
    assert_eq!(sold_out.len(), 40);
    for s in sold_early.iter().chain(&sold_late) {
        assert!(
            s.final_ticket.is_some(),
            "buyer {} was oversold: {s:?}",
            s.buyer
        );
    }
    for s in &sold_out {
        assert_eq!(s.final_ticket, None, "{s:?}");
    }

    // Both decision paths were taken: a preliminary view is trusted only
    // above the threshold; the last tickets (and every "sold out") wait
    // for the final view, whose ticket is the one held.
    assert!(!sold_early.is_empty(), "no sale on a preliminary view");
    assert!(!sold_late.is_empty(), "no sale on a final view");
    for s in &sold_early {
        let told = s
            .told
            .and_then(|t| t.ticket)
            .expect("an early sale names a ticket");
        assert!(
            told > 20,
            "buyer {} sold on preliminary ticket #{told}",
            s.buyer
        );
    }
    for s in &sold_late {
        assert_eq!(s.told.and_then(|t| t.ticket), s.final_ticket, "{s:?}");
    }

    // The queue is empty in the committed state, seen from every replica.
    for i in 0..3 {
        let mut c = cluster.client(i).await;
        let views = call(
            &mut c,
            req(
                "queue.len",
                &[b(&report.event)],
                &[creek_proto::pb::Level::Strong],
            ),
            Duration::from_secs(20),
        )
        .await
        .expect("queue.len");
        assert_eq!(result(&views), Ok(Value::Int(0)), "replica {i}");
    }
}

/// The audit above can fail: it flags a buyer sold a ticket the final view
/// did not give them, a ticket held twice, and a buyer turned away while
/// tickets were left. (No cluster: the sales are made up.)
#[test]
fn the_ticket_audit_catches_overselling() {
    let sale = |buyer, answer, told: Option<i64>, final_ticket| tickets::Sale {
        buyer,
        retailer: 0,
        told: Some(tickets::Told {
            answer,
            ticket: told,
            after: Duration::ZERO,
        }),
        final_ticket,
        error: None,
    };
    use tickets::Answer::{SoldOut, TicketOnFinal, TicketOnPreliminary};
    let fine = [
        sale(0, TicketOnPreliminary, Some(3), Some(2)),
        sale(1, TicketOnPreliminary, Some(3), Some(3)),
        sale(2, TicketOnFinal, Some(1), Some(1)),
        sale(3, SoldOut, None, None),
    ];
    assert_eq!(tickets::audit(3, &fine), Vec::<String>::new());

    let oversold = [
        sale(0, TicketOnPreliminary, Some(2), Some(2)),
        sale(1, TicketOnPreliminary, Some(2), None),
    ];
    let problems = tickets::audit(1, &oversold);
    assert!(
        problems.iter().any(|p| p.contains("oversold")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("never printed")),
        "{problems:?}"
    );

    let twice = [
        sale(0, TicketOnPreliminary, Some(2), Some(2)),
        sale(1, TicketOnPreliminary, Some(2), Some(2)),
        sale(2, SoldOut, None, None),
    ];
    let problems = tickets::audit(2, &twice);
    assert!(
        problems.iter().any(|p| p.contains("sold to buyers [0, 1]")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("1 tickets were unsold")),
        "{problems:?}"
    );
}

/// §4.2: with nothing changing, the ads fetched on the preliminary view
/// are delivered; the speculation runs once and is never aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ad_speculation_holds_when_the_references_do_not_change() {
    let cluster = Cluster::start(3).await;
    bounded("quiet ad requests", async {
        let all = Client::connect(addrs(&cluster)).await.expect("connect");
        let seeder = ads::AdServer::new(all);
        seeder.seed().await.expect("seed");
        for i in 0..3 {
            let at = Client::connect([cluster.clients[i].to_string()])
                .await
                .expect("connect");
            let server = seeder.with_client(at);
            for (user, refs) in ads::PROFILES {
                // A strong read here first: this replica has then applied
                // the whole seed, so its preliminary view cannot be stale.
                assert_eq!(server.interests(user).await.expect("interests"), *refs);
                let served = server.fetch_ads_by_user_id(user).await.expect("served");
                served.print();
                assert!(served.speculation_held(), "replica {i}: {served:#?}");
                assert_eq!(served.ads, ads::expected_ads(refs), "replica {i}");
                let kinds: Vec<_> = served.refs_views.iter().map(|v| v.kind).collect();
                assert_eq!(kinds, [ViewKind::Preliminary, ViewKind::Confirmed]);
            }
        }
    })
    .await;
}

/// §4.2: a preliminary view that misses a committed change makes the
/// speculation wrong; the abort callback discards the stale render and
/// the ads delivered are those of the final view.
///
/// Deterministic: the read is invoked at a replica cut off from the
/// majority, after the majority committed the change, so its preliminary
/// view cannot contain the change and its final view (ordered after the
/// heal) must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ad_misspeculation_is_aborted_and_redone_on_the_final_view() {
    let cluster = Cluster::start(3).await;
    bounded("misspeculated ad request", async {
        let leader = cluster.wait_for_leader(Duration::from_secs(20)).await;
        let minority = (leader + 1) % 3;
        let majority = (leader + 2) % 3;
        let connect = |i: usize| Client::connect([cluster.clients[i].to_string()]);
        let at_majority =
            ads::AdServer::new(connect(majority).await.expect("connect to the majority"));
        let at_minority = at_majority.with_client(connect(minority).await.expect("connect"));
        at_majority.seed().await.expect("seed");
        // The minority replica has the whole seed before it is cut off.
        assert_eq!(
            at_minority.interests("alice").await.expect("interests"),
            ["a1", "a2"]
        );

        cluster.isolate(minority, true).await;
        at_majority
            .add_interest("alice", "a4")
            .await
            .expect("the majority commits");
        let request = at_minority.request("alice").await.expect("request");
        let early = request
            .refs
            .preliminary()
            .await
            .expect("a preliminary view");
        assert_eq!(early.kind, ViewKind::Preliminary);
        // The speculation already runs on the stale view.
        let speculative = request.page.preliminary().await.expect("speculation");
        assert_eq!(speculative.outcome, Ok(Value::Int(1)), "render 1 started");
        cluster.isolate(minority, false).await;

        let served = request.deliver().await.expect("served after the heal");
        served.print();
        let stale = vec!["a1".to_owned(), "a2".to_owned()];
        let fresh = vec!["a1".to_owned(), "a2".to_owned(), "a4".to_owned()];
        assert_eq!(
            served.ran.first(),
            Some(&(ViewKind::Preliminary, stale.clone()))
        );
        assert_eq!(
            served.discarded,
            [stale],
            "abort discarded the stale render"
        );
        assert_eq!(
            served.ran.len(),
            2,
            "one rerun, on the corrected view: {served:#?}"
        );
        assert_eq!(served.ran[1].1, fresh);
        assert_eq!(served.ads, ads::expected_ads(&["a1", "a2", "a4"]));
        // The references' views: stale first, the change in the stable one
        // (a new preliminary view may come between, after the heal).
        let last = served.refs_views.last().expect("views");
        assert!(last.kind.is_stable(), "{served:#?}");
        assert_eq!(
            last.outcome,
            Ok(Value::List(fresh.iter().map(|r| b(r)).collect()))
        );
    })
    .await;
}
