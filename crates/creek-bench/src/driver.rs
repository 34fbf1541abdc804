//! The closed-loop driver of `creek bench cluster` (over Creek's client)
//! and of `creek bench peers` (over etcd's, PostgreSQL's and Redis'): one
//! connection timing sequential writes after a warm-up of a tenth of them,
//! at least 50; then closed-loop clients, one connection each, counted for
//! a fixed time after 500 ms of warm-up, over the keys `bench-{n}`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use creek_sim::bench::percentile;

/// The longest one write may take before it counts as failed: a system
/// that stopped answering ends the run instead of hanging it.
const OP_TIMEOUT: Duration = Duration::from_secs(10);

/// What the driver measures with.
#[cfg(feature = "peers")]
pub(crate) struct Settings {
    pub(crate) latency_ops: usize,
    pub(crate) seconds: f64,
    pub(crate) clients: Vec<usize>,
    pub(crate) keys: u64,
    pub(crate) value_bytes: usize,
}

/// One client connection of a system under test.
pub(crate) trait Conn: Send + 'static {
    /// Write `value` to key number `n`; done when the system acknowledged
    /// the write as its measurement defines it.
    fn write(&mut self, n: u64, value: &[u8]) -> impl Future<Output = Result<(), String>> + Send;
}

/// The key of number `n`, as `creek bench cluster` names it.
pub(crate) fn key(n: u64) -> String {
    format!("bench-{n}")
}

async fn timed<C: Conn>(c: &mut C, n: u64, value: &[u8]) -> Result<Duration, String> {
    let start = Instant::now();
    match tokio::time::timeout(OP_TIMEOUT, c.write(n, value)).await {
        Ok(r) => r.map(|()| start.elapsed()),
        Err(_) => Err(format!("a write took over {} s", OP_TIMEOUT.as_secs())),
    }
}

/// p50 and p99 (µs) of `ops` sequential writes on `c`, over `keys` keys.
/// They run in a task of the runtime, as an application's requests would:
/// from the thread that blocks on the runtime, every hand-off to the
/// connection's own tasks (every system's client has some) would wake
/// another thread, and the client's wake-ups would be timed, not the
/// system's.
pub(crate) async fn latency<C: Conn>(
    mut c: C,
    ops: usize,
    keys: u64,
    value: &[u8],
) -> Result<(u64, u64), String> {
    let value = value.to_vec();
    let timing = tokio::spawn(async move {
        let warmup = (ops / 10).max(50);
        let mut samples = Vec::with_capacity(ops);
        for i in 0..(warmup + ops) as u64 {
            let d = timed(&mut c, i % keys, &value).await?;
            if i as usize >= warmup {
                samples.push(d.as_micros() as u64);
            }
        }
        samples.sort_unstable();
        Ok((percentile(&samples, 0.5), percentile(&samples, 0.99)))
    });
    timing
        .await
        .map_err(|e| format!("the latency client stopped: {e}"))?
}

/// Sets its flag when dropped: the clients of a throughput point stop
/// when the point's future goes (the run was interrupted or failed).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Writes per second of closed-loop clients, one per connection, counted
/// for `seconds` over `keys` keys; `label` names them in a report of
/// failed writes.
pub(crate) async fn throughput<C: Conn>(
    conns: Vec<C>,
    seconds: f64,
    keys: u64,
    value: &[u8],
    label: &str,
) -> Result<f64, String> {
    // A `sleep` starts counting when it is made: made inside the block, the
    // window starts when it is first polled, after the warm-up.
    let window = async move { tokio::time::sleep(Duration::from_secs_f64(seconds)).await };
    throughput_during(conns, keys, value, label, window)
        .await
        .map(|(t, ())| t)
}

/// Writes per second of closed-loop clients, one per connection, counted
/// while `during` runs (after a warm-up), with what `during` gave: a load
/// under which another measurement runs.
pub(crate) async fn throughput_during<C: Conn, T>(
    conns: Vec<C>,
    keys: u64,
    value: &[u8],
    label: &str,
    during: impl Future<Output = T>,
) -> Result<(f64, T), String> {
    let clients = conns.len();
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let mut tasks = Vec::with_capacity(clients);
    for (i, mut c) in conns.into_iter().enumerate() {
        let (measuring, stop, done, errors) = (
            measuring.clone(),
            stop.clone(),
            done.clone(),
            errors.clone(),
        );
        let value = value.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut n = i as u64 * 7919;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                match timed(&mut c, n % keys, &value).await {
                    Ok(_) if measuring.load(Ordering::Relaxed) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        // A server gone fails writes at once: do not spin
                        // (nor keep the runtime from shutting down).
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // warm-up
    measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    let out = during.await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    let count = done.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let e = errors.load(Ordering::Relaxed);
    if e > 0 {
        eprintln!("bench: {e} writes failed at {clients} clients ({label})");
    }
    Ok((count as f64 / elapsed, out))
}

/// Measure one kind of write: the latency on `leader`, then the
/// throughput at each of `settings.clients`, client `i` on the connection
/// `connect(i)` makes. Returns `{"p50_us", "p99_us",
/// "throughput_ops_per_sec": {"clients_N": …}}`, as `creek bench cluster`
/// reports a level.
#[cfg(feature = "peers")]
pub(crate) async fn measure<C, F, Fut>(
    label: &str,
    settings: &Settings,
    leader: C,
    mut connect: F,
) -> Result<serde_json::Value, String>
where
    C: Conn,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<C, String>>,
{
    let value = vec![b'v'; settings.value_bytes];
    eprintln!("bench peers: {label} latency at 1 client…");
    let (p50, p99) = latency(leader, settings.latency_ops, settings.keys, &value).await?;
    let mut tput = serde_json::Map::new();
    for &n in &settings.clients {
        eprintln!("bench peers: {label} throughput at {n} clients…");
        let mut conns = Vec::with_capacity(n);
        for i in 0..n {
            conns.push(connect(i).await?);
        }
        let t = throughput(conns, settings.seconds, settings.keys, &value, label).await?;
        tput.insert(format!("clients_{n}"), serde_json::json!(t.round()));
    }
    Ok(serde_json::json!({
        "p50_us": p50,
        "p99_us": p99,
        "throughput_ops_per_sec": tput,
    }))
}
