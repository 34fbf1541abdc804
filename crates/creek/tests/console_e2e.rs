//! End-to-end: the web console of a 3-replica cluster of real `creek serve`
//! processes, in a real headless browser (Debian's `chromium` driven by
//! `chromium-driver` over W3C WebDriver). The page must load and show the
//! members, update while ops run (numbers, strip, charts' data), run an op
//! from its form and show its views, and show a replica as down once it is
//! killed. The invoke endpoint's refusals are checked over plain HTTP.
//!
//! Without chromium and chromedriver on the PATH the test says so and
//! passes, unless `CREEK_TEST_BROWSER=required` (CI), where it fails.

mod common;
#[path = "console_e2e/webdriver.rs"]
mod webdriver;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use creek_proto::pb::Level;
use webdriver::{http, Browser};

const T: Duration = Duration::from_secs(10);

fn api(addr: SocketAddr) -> serde_json::Value {
    let (code, body) = http("GET", addr, "/api/console", None).expect("GET /api/console");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

fn invoke_http(addr: SocketAddr, body: &str) -> (u16, String) {
    http(
        "POST",
        addr,
        "/api/invoke",
        Some(("application/json", body.as_bytes())),
    )
    .expect("POST /api/invoke")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_cluster_live_in_a_browser() {
    let Some((driver, chromium)) = webdriver::find_browser() else {
        let required = std::env::var("CREEK_TEST_BROWSER").is_ok_and(|v| v == "required");
        assert!(
            !required,
            "CREEK_TEST_BROWSER=required but chromium or chromedriver is not on the PATH \
             (apt-get install chromium chromium-driver)"
        );
        eprintln!(
            "SKIPPED the_console_shows_the_cluster_live_in_a_browser: chromium and chromedriver \
             are not installed (apt-get install chromium chromium-driver; set \
             CREEK_TEST_BROWSER=required to fail instead)"
        );
        return;
    };
    let started = Instant::now();
    let mut cluster = Cluster::prepare_with(3, |_| {});
    let consoles: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    for (i, addr) in consoles.iter().enumerate() {
        cluster.configure(i, |c| c.metrics_addr = Some(*addr));
    }
    cluster.spawn_all();
    cluster.wait_for_leader(Duration::from_secs(20)).await;

    // The JSON for scripts: every member up, and a leader (replica 1 may
    // learn of it a moment after the leader itself knows).
    let deadline = Instant::now() + T;
    let mut last = serde_json::Value::Null;
    let report = loop {
        if let Ok((200, body)) = http("GET", consoles[0], "/api/console", None) {
            let r: serde_json::Value = serde_json::from_str(&body).expect("JSON");
            let up = r["members"]
                .as_array()
                .map_or(0, |m| m.iter().filter(|m| m["health"] == "up").count());
            let leader = r["leader"].as_u64().is_some_and(|l| (1..=3).contains(&l));
            if up == 3 && leader {
                break r;
            }
            last = r;
        }
        assert!(
            Instant::now() < deadline,
            "the console never showed 3 members up and a leader: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(report["replica"], 1);

    // Bad input to the invoke endpoint: 4xx with a JSON error, and nothing
    // applied.
    for (body, want) in [
        (r#"{"procedure":"no.such","args":[]}"#, 400),
        (r#"{"procedure":"kv.put","args":["k"#, 400),
        (r#"{"procedure":"kv.put","args":[{"a":1}]}"#, 400),
        (
            r#"{"procedure":"kv.put","args":["k","v"],"level":"medium"}"#,
            400,
        ),
    ] {
        let (code, answer) = invoke_http(consoles[0], body);
        assert_eq!(code, want, "{body} → {answer}");
        let e: serde_json::Value = serde_json::from_str(&answer).expect("a JSON error");
        assert!(
            e["error"].as_str().is_some_and(|m| !m.is_empty()),
            "{answer}"
        );
    }
    let huge = format!(
        r#"{{"procedure":"kv.put","args":["k","{}"]}}"#,
        "x".repeat(3 << 20)
    );
    let (code, answer) = invoke_http(consoles[0], &huge);
    assert_eq!(code, 413, "{answer}");
    assert_eq!(strong_get(&cluster, 0, "k").await, Value::Nil);
    // A good one streams its views as lines of JSON.
    let (code, answer) = invoke_http(
        consoles[0],
        r#"{"procedure":"kv.put","args":["k","v"],"level":"both"}"#,
    );
    assert_eq!(code, 200, "{answer}");
    let events: Vec<serde_json::Value> = answer
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["kind"].as_str().or(e["event"].as_str()).unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        ["accepted", "preliminary", "confirmed", "end"],
        "{answer}"
    );

    let step = |what: &str| eprintln!("console e2e: {what} ({:?})", started.elapsed());
    step("cluster up, invoke endpoint checked; starting the browser");
    let profile = cluster.dir.join("chromium-profile");
    let browser = Browser::start(&driver, &chromium, free_addr(), profile.clone());
    browser.goto(&format!("http://{}/", consoles[0]));
    browser.wait_for(
        "the page lists the three members, all up",
        T,
        "return document.querySelectorAll('#members tbody tr[data-health=\"up\"]').length === 3",
        "return document.querySelector('#members').innerText",
    );
    let leader = browser.eval("return document.getElementById('leader').textContent");
    assert_ne!(leader, "–", "the page shows a leader");
    let committed_before = browser
        .eval("return Number(document.getElementById('committed').textContent)")
        .as_f64()
        .expect("a committed length");

    step("page loaded with three members up; running ops");
    // Load: weak and strong ops at replica 1 (whose console is open) and 2.
    let mut c1 = cluster.client(0).await;
    let mut c2 = cluster.client(1).await;
    for i in 0..40 {
        let n = Value::Int(1);
        let key = b("counter");
        call(
            &mut c1,
            req("kv.incr", &[key.clone(), n.clone()], &[Level::Weak]),
            T,
        )
        .await
        .expect("weak incr");
        if i % 4 == 0 {
            call(
                &mut c1,
                req(
                    "kv.incr",
                    &[key.clone(), n.clone()],
                    &[Level::Weak, Level::Strong],
                ),
                T,
            )
            .await
            .expect("strong incr");
            call(
                &mut c2,
                req("kv.incr", &[key, n], &[Level::Weak, Level::Strong]),
                T,
            )
            .await
            .expect("strong incr at replica 2");
        }
    }
    browser.wait_for(
        "the committed length grows on the page",
        T,
        &format!("return Number(document.getElementById('committed').textContent) > {committed_before} + 40"),
        "return document.querySelector('header').innerText",
    );
    browser.wait_for(
        "the strip shows committed ops invoked here, and the recent ops their views",
        T,
        "return document.querySelectorAll('#lane-committed .chip.here').length > 0 \
         && document.querySelectorAll('#recent tbody tr').length > 0 \
         && [...document.querySelectorAll('#recent tbody tr')].some(r => r.innerText.includes('confirmed'))",
        "return document.getElementById('strip').innerText + document.getElementById('recent').innerText",
    );
    browser.wait_for(
        "the rate chart's data shows the load",
        T,
        "return fetch('/api/console').then(r => r.json()).then(r => r.series.some(s => s.weak_per_s > 0 && s.cluster_strong_per_s > 0))",
        "return 'series without load'",
    );

    step("the page followed the ops; trying the form");
    // The form offers the replica's procedures, with their signatures.
    browser.wait_for(
        "the form lists the procedures and shows kv.incr's signature",
        T,
        "return [...document.querySelectorAll('#procs option')].some(o => o.value === 'kv.put') \
         && document.getElementById('signature').textContent.startsWith('kv.incr(')",
        "return document.getElementById('signature').textContent",
    );

    // The form: a strong increment, its views as they arrive.
    browser.eval(
        "document.getElementById('proc').value = 'kv.incr'; \
         document.getElementById('args').value = '[\"from-the-form\", 7]'; \
         document.getElementById('level').value = 'both'; return true",
    );
    browser.click("#invoke-btn");
    browser.wait_for(
        "the form shows the op's preliminary and final views",
        T,
        "const t = document.getElementById('invoke-log').textContent; \
         return t.includes('accepted as') && t.includes('preliminary') && t.includes('7') && t.includes('done')",
        "return document.getElementById('invoke-log').textContent",
    );
    assert_eq!(strong_get(&cluster, 2, "from-the-form").await, b("7"));

    step("the form showed the views; killing replica 3");
    // Replica 3 dies: the page says so.
    cluster.kill(2);
    browser.wait_for(
        "the page shows replica 3 down",
        T,
        "const r = document.querySelector('#members tbody tr[data-replica=\"3\"]'); \
         return !!r && r.dataset.health === 'down'",
        "return document.querySelector('#members').innerText",
    );
    let r = api(consoles[0]);
    let three = &r["members"][2];
    assert_eq!(three["health"], "down", "{three}");
    assert_eq!(three["peer_link"], false, "{three}");
    assert_eq!(r["members"][1]["health"], "up", "{r}");

    step("the page showed replica 3 down; closing the browser");
    drop(browser);
    let left = webdriver::processes_mentioning(&profile.display().to_string());
    assert!(left.is_empty(), "browser processes left behind: {left:?}");
    eprintln!("console e2e took {:?}", started.elapsed());
}
