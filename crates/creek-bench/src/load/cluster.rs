//! The cluster target: the workload against `creek serve` processes on
//! loopback, through the Rust client.
//!
//! Each point starts a fresh cluster (as the simulator starts a fresh
//! simulation), runs the workload's setup calls (strong, in order, each to
//! its final view), then the load. Latencies are wall-clock, measured at
//! the client from the invocation to each view's arrival. What the
//! replicas count comes from `Status` (accuracy, executions per op, peer
//! bytes) read at the end of the warm-up and after the run drained; CPU
//! from `/proc/<pid>/stat` of the server processes (not with `--attach`).
//! `consistency_ok` applies the workload's checks to every replica's
//! committed state, read with `Admin.Dump` once the replicas agree.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_check::history::{History, OpRecord, SeenView};
use creek_client::{CallOptions, Client, Levels, ViewKind};
use creek_exec::{Abort, ProcCall};
use creek_sim::bench::{client_side, ratio, Window};
use creek_sim::rng::Rng;
use creek_sim::workload::Workload;
use creek_types::value::{decode_args, Value};
use serde_json::{json, Map, Value as Json};

use super::{describe, point_header, Emit, Load, Plan, Progress};
use crate::cluster::find_leader;
use crate::servers::Target;

/// How long in-flight ops may take to finish after the clients stop.
const DRAIN: Duration = Duration::from_secs(15);
/// Connections an open-loop run spreads its arrivals over, per replica.
const OPEN_CONNS_PER_REPLICA: usize = 4;

pub(super) fn run(p: &Plan, progress: &Progress, emit: Emit<'_>) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let attached = !p.common.attach.is_empty();
    let mut loaded = false;
    for (i, &load) in p.loads.iter().enumerate() {
        let what = describe(load);
        progress.start(i, &what);
        // Built first: bad settings fail before a cluster starts.
        let workload = p.workload(1, 0.0)?;
        let procs = Target::start_or_attach(p.replicas, 1, &p.common.attach, false)?;
        let point = rt.block_on(async {
            find_leader(&procs.clients, None).await?;
            // An attached cluster is loaded once; points then share its data.
            if !(attached && loaded) {
                setup(&procs.clients, workload.as_ref()).await?;
                loaded = true;
            }
            let mut point = point_header(p, load);
            point.extend(measure(p, load, &procs, workload, i, &what, progress).await?);
            Ok::<_, String>(point)
        })?;
        emit(point)?;
    }
    Ok(())
}

/// A workload call as the client sends it.
pub(crate) fn client_args(call: &ProcCall) -> Result<Vec<Value>, String> {
    decode_args(&call.args).map_err(|e| format!("{}: undecodable arguments: {e}", call.name))
}

/// Run the workload's setup calls, strong, in order, each to its final view.
pub(crate) async fn setup(addrs: &[SocketAddr], workload: &dyn Workload) -> Result<(), String> {
    let client = Client::connect(addrs.iter().map(|a| a.to_string()))
        .await
        .map_err(|e| e.to_string())?;
    for call in workload.setup() {
        let op = client
            .invoke(call.name.to_string(), client_args(&call)?, Levels::Strong)
            .await
            .map_err(|e| format!("setup call {}: {e}", call.name))?;
        let view = op
            .final_view()
            .await
            .map_err(|e| format!("setup call {}: {e}", call.name))?;
        if let Err(abort) = view.outcome {
            return Err(format!("setup call {} aborted: {abort}", call.name));
        }
    }
    Ok(())
}

/// The generator shared by the client tasks.
struct Source {
    workload: Box<dyn Workload>,
    rng: Rng,
}

/// What the client tasks share.
struct Shared {
    source: Mutex<Source>,
    records: Mutex<Vec<OpRecord>>,
    errors: Mutex<BTreeMap<String, u64>>,
    /// Ops whose record is not complete yet (views still to come).
    open_records: AtomicU64,
    t0: Instant,
}

impl Shared {
    fn now_us(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    /// Record a view (or count an error).
    fn seen(&self, record: &mut OpRecord, view: Result<creek_client::View, creek_client::Error>) {
        match view {
            Ok(v) => record.views.push(SeenView {
                at_us: self.now_us(),
                kind: match v.kind {
                    ViewKind::Preliminary => creek_core::ViewKind::Tentative,
                    ViewKind::Final => creek_core::ViewKind::Stable,
                    ViewKind::Confirmed => creek_core::ViewKind::Confirmation,
                    ViewKind::Snapshot => creek_core::ViewKind::Snapshot,
                },
                outcome: v.outcome.map(|x| x.encode()).map_err(Abort),
                time: v.time,
            }),
            Err(e) => self.error(&e),
        }
    }

    /// A record is complete.
    fn close(&self, record: OpRecord) {
        if let Ok(mut records) = self.records.lock() {
            records.push(record);
        }
        self.open_records.fetch_sub(1, Ordering::Relaxed);
    }

    fn error(&self, e: &creek_client::Error) {
        let kind = format!("{e}");
        let kind = kind.split(':').next().unwrap_or("error").to_owned();
        if let Ok(mut errors) = self.errors.lock() {
            *errors.entry(kind).or_default() += 1;
        }
    }
}

/// One op from the workload, sent through `client`, its views recorded.
/// Returns when the client has its answer: a weak op's first view (its
/// final view, if asked for, is recorded in the background), a strong op's
/// final view.
async fn one_op(shared: &Arc<Shared>, client: &Client, session: u32, replica: usize) {
    let next = {
        let Ok(mut s) = shared.source.lock() else {
            return;
        };
        let Source { workload, rng } = &mut *s;
        workload.next_op(rng, session)
    };
    let Ok(args) = client_args(&next.call) else {
        return;
    };
    let (levels, weak_final) = if next.strong {
        (Levels::Both, false)
    } else {
        (Levels::Weak, next.wants_final)
    };
    let options = CallOptions {
        weak_final,
        timeout: Some(DRAIN),
        ..Default::default()
    };
    let mut record = OpRecord {
        client: session,
        replica,
        id: None,
        call: next.call.clone(),
        strong: next.strong,
        wants_final: next.wants_final,
        invoked_at_us: shared.now_us(),
        views: Vec::new(),
        origin_crashed: false,
        origin_left: false,
        lost: false,
    };
    shared.open_records.fetch_add(1, Ordering::Relaxed);
    let op = match client
        .invoke_with(next.call.name.to_string(), args, levels, options)
        .await
    {
        Ok(op) => op,
        Err(e) => {
            shared.error(&e);
            shared.close(record);
            return;
        }
    };
    let mut views = op.views();
    if !next.strong {
        if let Some(v) = views.next_view().await {
            shared.seen(&mut record, v);
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            while let Some(v) = views.next_view().await {
                shared.seen(&mut record, v);
            }
            shared.close(record);
        });
        return;
    }
    while let Some(v) = views.next_view().await {
        shared.seen(&mut record, v);
    }
    shared.close(record);
}

/// Counters summed over the replicas' `Status`.
async fn counters(addrs: &[SocketAddr]) -> Result<BTreeMap<String, u64>, String> {
    let mut sum = BTreeMap::new();
    for a in addrs {
        let c = Client::connect([a.to_string()])
            .await
            .map_err(|e| e.to_string())?;
        let s = c.status().await.map_err(|e| e.to_string())?;
        for (k, v) in s.counters {
            *sum.entry(k).or_default() += v;
        }
    }
    Ok(sum)
}

fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>, key: &str) -> u64 {
    after
        .get(key)
        .copied()
        .unwrap_or(0)
        .saturating_sub(before.get(key).copied().unwrap_or(0))
}

/// CPU seconds (user + system) the processes used so far; `None` if any
/// cannot be read.
fn cpu_seconds(pids: &[u32]) -> Option<f64> {
    // Linux reports these in clock ticks of USER_HZ, 100 on every
    // mainstream architecture.
    const TICKS_PER_SEC: f64 = 100.0;
    let mut total = 0u64;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces) in ')'.
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        total += utime + stime;
    }
    Some(total as f64 / TICKS_PER_SEC)
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    p: &Plan,
    load: Load,
    procs: &Target,
    workload: Box<dyn Workload>,
    point: usize,
    what: &str,
    progress: &Progress,
) -> Result<Map<String, Json>, String> {
    let addrs = &procs.clients;
    let n_conns = match load {
        Load::Closed(c) => c,
        Load::Open(_) => OPEN_CONNS_PER_REPLICA * addrs.len(),
    };
    let conns = connect_all(addrs, n_conns).await?;
    let shared = Arc::new(Shared {
        source: Mutex::new(Source {
            workload,
            rng: Rng::new(p.common.seed),
        }),
        records: Mutex::new(Vec::new()),
        errors: Mutex::new(BTreeMap::new()),
        open_records: AtomicU64::new(0),
        t0: Instant::now(),
    });
    let total_us = p.warmup_us + p.duration_us;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = spawn_clients(load, conns, &shared, &stop, p.common.seed);
    // Warm-up, then the measured window with the replicas' counters and
    // the servers' CPU read at its start and end.
    let tick = Duration::from_millis(100);
    let wait_until = |us: u64| {
        let shared = shared.clone();
        async move {
            while shared.now_us() < us {
                progress.update(point, shared.now_us() as f64 / total_us as f64, what);
                tokio::time::sleep(tick).await;
            }
        }
    };
    wait_until(p.warmup_us).await;
    let before = counters(addrs).await?;
    let cpu_before = cpu_seconds(&procs.pids());
    let window_start = shared.now_us();
    wait_until(total_us).await;
    let cpu_after = cpu_seconds(&procs.pids());
    let window_end = shared.now_us();
    stop.store(true, Ordering::Relaxed);
    let drained = tokio::time::timeout(DRAIN, async {
        while tasks.join_next().await.is_some() {}
        while shared.open_records.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok();
    tasks.abort_all();
    let after = counters(addrs).await?;
    let states = committed_states(addrs).await;

    let history = History {
        ops: shared
            .records
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default(),
    };
    let window = Window {
        start_us: window_start,
        end_us: window_end,
    };
    let shared =
        Arc::try_unwrap(shared).map_err(|_| "client tasks still hold the workload".to_string())?;
    let errors = shared.errors.into_inner().unwrap_or_default();
    let Source { workload, .. } = shared
        .source
        .into_inner()
        .map_err(|_| "a client task panicked".to_string())?;
    let mut m = client_side(&history, window, workload.as_ref());
    server_side(
        &mut m,
        &before,
        &after,
        (cpu_before, cpu_after),
        procs,
        window,
    );
    // Unanswered ops are in `ops.unanswered` (client_side).
    m.insert(
        "errors".into(),
        json!({"by_kind": errors, "drained": drained}),
    );
    m.insert(
        "consistency_ok".into(),
        match states {
            Ok(states) => json!(states
                .iter()
                .all(|s| workload.check(&history, s).is_empty())),
            Err(e) => {
                eprintln!("bench: no consistency check: {e}");
                json!(null)
            }
        },
    );
    Ok(m)
}

/// Connections for `n` clients, spread over the replicas in turn, each
/// with the index of the replica it talks to.
async fn connect_all(addrs: &[SocketAddr], n: usize) -> Result<Vec<(Client, usize)>, String> {
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let a = addrs[i % addrs.len()];
        let c = Client::connect([a.to_string()])
            .await
            .map_err(|e| e.to_string())?;
        conns.push((c, i % addrs.len()));
    }
    Ok(conns)
}

/// Start the clients: one closed loop per connection, or one task
/// invoking ops at the open-loop rate (Poisson arrivals from `seed`)
/// across the connections; all stop at `stop`.
fn spawn_clients(
    load: Load,
    conns: Vec<(Client, usize)>,
    shared: &Arc<Shared>,
    stop: &Arc<AtomicBool>,
    seed: u64,
) -> tokio::task::JoinSet<()> {
    let mut tasks = tokio::task::JoinSet::new();
    match load {
        Load::Closed(_) => {
            for (session, (c, replica)) in conns.into_iter().enumerate() {
                let (shared, stop) = (Arc::clone(shared), Arc::clone(stop));
                tasks.spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        one_op(&shared, &c, session as u32, replica).await;
                    }
                });
            }
        }
        Load::Open(rate) => {
            let (shared, stop) = (Arc::clone(shared), Arc::clone(stop));
            let mut rng = Rng::new(seed ^ 0x0BE7);
            tasks.spawn(async move {
                let conns: Vec<Arc<(Client, usize)>> = conns.into_iter().map(Arc::new).collect();
                let mut next_at = Duration::ZERO;
                let mut session = 0u32;
                let mut ops = tokio::task::JoinSet::new();
                while !stop.load(Ordering::Relaxed) {
                    next_at += Duration::from_secs_f64(rng.exp(1.0 / rate));
                    tokio::time::sleep_until((shared.t0 + next_at).into()).await;
                    let conn = conns[session as usize % conns.len()].clone();
                    let shared = shared.clone();
                    ops.spawn(async move {
                        one_op(&shared, &conn.0, session, conn.1).await;
                    });
                    session = session.wrapping_add(1);
                }
                while ops.join_next().await.is_some() {}
            });
        }
    }
    tasks
}

/// What the replicas' counters and the servers' CPU say about the
/// measured window: accuracy, execution ratio, CPU busy, peer bytes.
fn server_side(
    m: &mut Map<String, Json>,
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    (cpu_before, cpu_after): (Option<f64>, Option<f64>),
    procs: &Target,
    window: Window,
) {
    m.insert(
        "accuracy".into(),
        ratio(
            delta(after, before, "accuracy_hits"),
            delta(after, before, "accuracy_checked"),
        ),
    );
    m.insert(
        "execution_ratio".into(),
        ratio(
            delta(after, before, "executions"),
            delta(after, before, "exec_ops"),
        ),
    );
    let machine_cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    m.insert(
        "cpu_busy".into(),
        match (cpu_before, cpu_after) {
            (Some(a), Some(b)) if !procs.pids().is_empty() => {
                json!((b - a) / (window.seconds() * machine_cores as f64))
            }
            _ => json!(null),
        },
    );
    m.insert("machine_cores".into(), json!(machine_cores));
    let measured = m["ops"]["measured"].as_u64().unwrap_or(0).max(1);
    let peer_bytes = delta(after, before, "peer_bytes_sent");
    m.insert(
        "bytes".into(),
        json!({"peer": peer_bytes, "per_op": peer_bytes as f64 / measured as f64}),
    );
}

/// Every replica's committed state, once all replicas committed the same
/// number of ops and hold nothing tentative (at most 30 s).
async fn committed_states(addrs: &[SocketAddr]) -> Result<Vec<BTreeMap<Bytes, Bytes>>, String> {
    let mut clients = Vec::new();
    for a in addrs {
        clients.push(
            Client::connect([a.to_string()])
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut lens = Vec::new();
        for c in &clients {
            let s = c.status().await.map_err(|e| e.to_string())?;
            lens.push((s.committed, s.tentative));
        }
        if lens.iter().all(|&(c, t)| t == 0 && c == lens[0].0) {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("replicas did not settle: {lens:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut states = Vec::new();
    for c in &clients {
        states.push(c.dump().await.map_err(|e| e.to_string())?.1);
    }
    Ok(states)
}
