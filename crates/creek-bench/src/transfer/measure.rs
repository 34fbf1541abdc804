//! What `creek bench transfer` measures while the victim is rebuilt: the
//! probe's ops in each stretch of the run, and every replica's status
//! replies (node-thread and disk-writer stalls). Pure functions over what
//! was recorded, plus the poller that records the status replies.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use creek_client::Client;
use creek_sim::bench::percentile;

use super::{OP_TIMEOUT, POLL};

/// One probe op.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProbeOp {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    pub(crate) ok: bool,
}

/// Ask `addr` for its status (connecting first when `client` is `None`),
/// with when it was asked and when it answered. A failure drops the
/// connection, so the next call connects again.
pub(crate) async fn ask_status(
    client: &mut Option<Client>,
    addr: SocketAddr,
) -> Result<(creek_client::pb::StatusReply, Instant, Instant), String> {
    if client.is_none() {
        *client = Client::connect([addr.to_string()]).await.ok();
    }
    let Some(c) = client.as_ref() else {
        return Err(format!("cannot connect to {addr}"));
    };
    let asked = Instant::now();
    let reply = match tokio::time::timeout(OP_TIMEOUT, c.status()).await {
        Ok(Ok(s)) => return Ok((s, asked, Instant::now())),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no status reply within {OP_TIMEOUT:?}"),
    };
    *client = None;
    Err(reply)
}

/// One status reply of a replica, for the stalls of its node thread
/// (status is answered there) and of its disk writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StatusSample {
    pub(crate) asked: Instant,
    pub(crate) replied: Instant,
    /// The last write submitted to the disk, and the last one durable.
    pub(crate) submitted: u64,
    pub(crate) durable: u64,
}

/// Poll `addr`'s status every [`POLL`] until `stop`; a replica that does
/// not answer (killed, restarting) is asked again at the next poll.
pub(crate) async fn monitor(addr: SocketAddr, stop: Arc<AtomicBool>) -> Vec<StatusSample> {
    let mut samples = Vec::new();
    let mut client: Option<Client> = None;
    while !stop.load(Ordering::Relaxed) {
        let polled = Instant::now();
        // A failure drops the connection: the replica may have been
        // restarted.
        if let Ok((s, asked, replied)) = ask_status(&mut client, addr).await {
            let counter = |k: &str| s.counters.get(k).copied().unwrap_or(0);
            samples.push(StatusSample {
                asked,
                replied,
                submitted: counter("submitted_seq"),
                durable: counter("durable_seq"),
            });
        }
        tokio::time::sleep_until((polled + POLL).into()).await;
    }
    samples
}

/// A replica's worst stalls in a window, from its status replies.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Stalls {
    /// The slowest status reply overlapping the window: how long its node
    /// thread was busy with something else.
    pub(crate) status_max_us: u64,
    /// The longest time writes were pending without any becoming durable,
    /// overlapping the window: how long its disk writer was busy.
    pub(crate) write_wait_max_us: u64,
}

pub(crate) fn stalls(samples: &[StatusSample], from: Instant, to: Instant) -> Stalls {
    let overlaps = |a: Instant, b: Instant| a < to && b > from;
    let status_max_us = samples
        .iter()
        .filter(|s| overlaps(s.asked, s.replied))
        .map(|s| micros(s.replied - s.asked))
        .max()
        .unwrap_or(0);
    // From the first reply showing a write pending at durable seq `d` to
    // the first showing a later durable seq.
    let mut write_wait_max_us = 0;
    let mut stuck: Option<(u64, Instant)> = None;
    for s in samples {
        if let Some((d, since)) = stuck {
            if s.durable != d {
                if overlaps(since, s.replied) {
                    write_wait_max_us = write_wait_max_us.max(micros(s.replied - since));
                }
                stuck = None;
            }
        }
        if stuck.is_none() && s.submitted > s.durable {
            stuck = Some((s.durable, s.replied));
        }
    }
    if let Some((_, since)) = stuck {
        if let Some(last) = samples.last() {
            if overlaps(since, last.replied) {
                write_wait_max_us = write_wait_max_us.max(micros(last.replied - since));
            }
        }
    }
    Stalls {
        status_max_us,
        write_wait_max_us,
    }
}

/// Latency percentiles and gaps of the probe ops in a stretch of the run
/// (before the kill, during the rebuild, after it).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ProbeStats {
    pub(crate) ops: usize,
    pub(crate) failed: usize,
    pub(crate) p50_us: u64,
    pub(crate) p99_us: u64,
    pub(crate) max_us: u64,
    /// The longest time between two consecutive successful completions
    /// where that interval overlaps the window (a stall that began before
    /// it counts whole).
    pub(crate) max_gap_us: u64,
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The ops `within` admits, and the gaps between completions overlapping
/// `[from, to]`.
pub(crate) fn probe_stats(
    ops: &[ProbeOp],
    from: Instant,
    to: Instant,
    within: impl Fn(&ProbeOp) -> bool,
) -> ProbeStats {
    let chosen: Vec<&ProbeOp> = ops.iter().filter(|o| within(o)).collect();
    let mut latencies: Vec<u64> = chosen
        .iter()
        .filter(|o| o.ok)
        .map(|o| micros(o.end - o.start))
        .collect();
    latencies.sort_unstable();
    let mut ends: Vec<Instant> = ops.iter().filter(|o| o.ok).map(|o| o.end).collect();
    ends.sort_unstable();
    let max_gap_us = ends
        .windows(2)
        .filter(|w| w[1] > from && w[0] < to)
        .map(|w| micros(w[1] - w[0]))
        .max()
        .unwrap_or(0);
    ProbeStats {
        ops: chosen.len(),
        failed: chosen.iter().filter(|o| !o.ok).count(),
        p50_us: percentile(&latencies, 0.5),
        p99_us: percentile(&latencies, 0.99),
        max_us: latencies.last().copied().unwrap_or(0),
        max_gap_us,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::ops;
    use super::*;

    #[test]
    fn a_window_has_percentiles_of_its_ops_and_the_gaps_that_overlap_it() {
        let t0 = Instant::now();
        // Ends at 10, 20, …, 100 ms; then one 300 ms op ending at 400 ms,
        // then 10 ms ops to 500 ms.
        let mut all = ops(t0, 0, &[10; 10]);
        all.extend(ops(t0, 100, &[300]));
        all.extend(ops(t0, 400, &[10; 10]));
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let overlap = |from: Instant, to: Instant| move |o: &ProbeOp| o.start < to && o.end > from;
        // A window inside the slow op: it counts whole, as op and gap.
        let w = probe_stats(&all, ms(200), ms(300), overlap(ms(200), ms(300)));
        assert_eq!(w.ops, 1);
        assert_eq!(w.max_us, 300_000);
        assert_eq!(w.max_gap_us, 300_000);
        // Before it: 10 ms ops only.
        let w = probe_stats(&all, ms(0), ms(100), |o| o.end <= ms(100));
        assert_eq!(
            (w.ops, w.p50_us, w.p99_us, w.max_us),
            (10, 10_000, 10_000, 10_000)
        );
        assert_eq!(w.max_gap_us, 10_000);
        // An empty window is all zeros but for gaps crossing it.
        let w = probe_stats(&[], ms(0), ms(100), |_| true);
        assert_eq!(w, ProbeStats::default());
    }

    #[test]
    fn failed_probe_ops_are_counted_not_timed() {
        let t0 = Instant::now();
        let mut all = ops(t0, 0, &[10, 10]);
        all[1].ok = false;
        let w = probe_stats(&all, t0, t0 + Duration::from_secs(1), |_| true);
        assert_eq!((w.ops, w.failed, w.max_us), (2, 1, 10_000));
    }

    #[test]
    fn stalls_are_the_slowest_status_reply_and_the_longest_write_wait() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // (asked, replied, submitted, durable), in ms and seqs.
        let samples: Vec<StatusSample> = [
            (0, 1, 5, 5),
            (20, 21, 6, 5),
            (40, 41, 7, 5),
            (60, 300, 7, 5),
            (300, 301, 8, 7),
            (320, 321, 8, 8),
        ]
        .iter()
        .map(|&(a, r, submitted, durable)| StatusSample {
            asked: at(a),
            replied: at(r),
            submitted,
            durable,
        })
        .collect();
        // Writes pending from 21 ms, durable again at 301 ms; pending at 7
        // from 301 ms to 321 ms.
        let s = stalls(&samples, at(0), at(400));
        assert_eq!(
            s,
            Stalls {
                status_max_us: 240_000,
                write_wait_max_us: 280_000,
            }
        );
        // A window after the stalls sees neither.
        assert_eq!(stalls(&samples, at(310), at(400)).status_max_us, 1_000);
        assert_eq!(stalls(&samples, at(310), at(400)).write_wait_max_us, 20_000);
        assert_eq!(stalls(&[], at(0), at(1)), Stalls::default());
    }
}
