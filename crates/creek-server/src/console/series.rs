//! The console's time series: one sample per interval of what changed at
//! this replica (op rates, view latencies, speculation accuracy,
//! re-executions) and in the cluster (op rates summed over the members that
//! answered), kept for the last [`SAMPLES_MAX`] intervals.
//!
//! View latencies come from [`ViewBuckets`], a second, coarse record of
//! what the `view_latency_seconds` histogram records (that histogram's
//! buckets cannot be read back); both are fed by the same call,
//! [`Metrics::view`](crate::metrics::Metrics::view).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Samples kept (at one a second, five minutes).
pub const SAMPLES_MAX: usize = 300;
/// Power-of-two latency buckets in microseconds: bucket `i` holds
/// `[2^i, 2^(i+1))` µs, the last everything above.
const BUCKETS: usize = 32;

/// Counts of view latencies by power-of-two bucket, for tentative and
/// stable views.
#[derive(Debug, Default)]
pub struct ViewBuckets {
    tentative: [AtomicU64; BUCKETS],
    stable: [AtomicU64; BUCKETS],
}

/// A copy of [`ViewBuckets`] at one moment.
pub type BucketCounts = [[u64; BUCKETS]; 2];

impl ViewBuckets {
    /// Count one view `seconds` after its op's receipt.
    pub fn observe(&self, stable: bool, seconds: f64) {
        let us = (seconds * 1e6).max(1.0) as u64;
        let i = (63 - us.leading_zeros() as usize).min(BUCKETS - 1);
        let row = if stable {
            &self.stable
        } else {
            &self.tentative
        };
        row[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The `q` quantile (0..=1) in milliseconds of every view counted
    /// (stable ones, or tentative ones), or `None` if there were none.
    pub fn quantile_ms(&self, stable: bool, q: f64) -> Option<f64> {
        let counts = self.counts();
        quantile_ms(&[0; BUCKETS], &counts[usize::from(stable)], q)
    }

    /// The counts now.
    pub fn counts(&self) -> BucketCounts {
        let mut out = [[0; BUCKETS]; 2];
        for (row, src) in out.iter_mut().zip([&self.tentative, &self.stable]) {
            for (o, a) in row.iter_mut().zip(src.iter()) {
                *o = a.load(Ordering::Relaxed);
            }
        }
        out
    }
}

/// The `q` quantile (0..=1) in milliseconds of the views counted between
/// `before` and `after` (one row), or `None` if there were none. A bucket
/// reads as its geometric middle: the answer is within a factor of 1.5.
fn quantile_ms(before: &[u64; BUCKETS], after: &[u64; BUCKETS], q: f64) -> Option<f64> {
    let d: Vec<u64> = after
        .iter()
        .zip(before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let total: u64 = d.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in d.iter().enumerate() {
        seen += n;
        if seen >= rank {
            let low_us = (1u64 << i) as f64;
            return Some(low_us * std::f64::consts::SQRT_2 / 1000.0);
        }
    }
    None
}

/// The counters one sample is the difference of.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    /// Milliseconds since the console started.
    pub at_ms: u64,
    /// This replica's status counters.
    pub counters: BTreeMap<String, u64>,
    /// Each member's `(invoked_weak, invoked_strong)`, for those that
    /// answered.
    pub cluster_ops: BTreeMap<u16, (u64, u64)>,
    /// View latency buckets.
    pub buckets: BucketCounts,
}

/// What changed over one interval.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// End of the interval, in milliseconds since the console started.
    pub t_ms: u64,
    /// Weak ops invoked at this replica per second.
    pub weak_per_s: f64,
    /// Strong ops invoked at this replica per second.
    pub strong_per_s: f64,
    /// Weak ops invoked at all the members that answered, per second.
    pub cluster_weak_per_s: f64,
    /// Strong ops invoked at all the members that answered, per second.
    pub cluster_strong_per_s: f64,
    /// Median latency of preliminary (tentative) views sent here (ms).
    pub tentative_p50_ms: Option<f64>,
    /// 99th percentile of the same.
    pub tentative_p99_ms: Option<f64>,
    /// Median latency of final (stable or confirmation) views (ms).
    pub stable_p50_ms: Option<f64>,
    /// 99th percentile of the same.
    pub stable_p99_ms: Option<f64>,
    /// Share of this interval's finished ops whose first preliminary view
    /// equalled the final one (none if no op finished).
    pub accuracy: Option<f64>,
    /// Executions beyond the first of an op, per second.
    pub reexecutions_per_s: f64,
}

fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, key: &str) -> u64 {
    let get = |m: &BTreeMap<String, u64>| m.get(key).copied().unwrap_or(0);
    get(after).saturating_sub(get(before))
}

impl Sample {
    /// The sample between two readings.
    pub fn between(before: &Reading, after: &Reading) -> Sample {
        let secs = (after.at_ms.saturating_sub(before.at_ms) as f64 / 1000.0).max(1e-3);
        let rate = |key: &str| delta(&before.counters, &after.counters, key) as f64 / secs;
        let (mut weak, mut strong) = (0u64, 0u64);
        for (id, (w, s)) in &after.cluster_ops {
            // A member that did not answer last time, or restarted (its
            // counters went back), counts from zero.
            let (w0, s0) = before
                .cluster_ops
                .get(id)
                .copied()
                .filter(|(w0, s0)| w0 <= w && s0 <= s)
                .unwrap_or((*w, *s));
            weak += w - w0;
            strong += s - s0;
        }
        let checked = delta(&before.counters, &after.counters, "accuracy_checked");
        let hits = delta(&before.counters, &after.counters, "accuracy_hits");
        let [t0, s0] = &before.buckets;
        let [t1, s1] = &after.buckets;
        Sample {
            t_ms: after.at_ms,
            weak_per_s: rate("invoked_weak"),
            strong_per_s: rate("invoked_strong"),
            cluster_weak_per_s: weak as f64 / secs,
            cluster_strong_per_s: strong as f64 / secs,
            tentative_p50_ms: quantile_ms(t0, t1, 0.5),
            tentative_p99_ms: quantile_ms(t0, t1, 0.99),
            stable_p50_ms: quantile_ms(s0, s1, 0.5),
            stable_p99_ms: quantile_ms(s0, s1, 0.99),
            accuracy: (checked > 0).then(|| hits as f64 / checked as f64),
            reexecutions_per_s: rate("reexecutions"),
        }
    }
}

/// The last samples, oldest first.
#[derive(Debug, Default)]
pub struct History {
    last: Option<Reading>,
    samples: VecDeque<Sample>,
}

impl History {
    /// Take in a reading; from the second on, each adds a sample.
    pub fn push(&mut self, reading: Reading) {
        if let Some(before) = &self.last {
            if self.samples.len() >= SAMPLES_MAX {
                self.samples.pop_front();
            }
            self.samples.push_back(Sample::between(before, &reading));
        }
        self.last = Some(reading);
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_read_the_interval_only() {
        let b = ViewBuckets::default();
        b.observe(false, 0.001); // ~1 ms
        let before = b.counts();
        for _ in 0..99 {
            b.observe(false, 0.000_1); // ~100 µs
        }
        b.observe(false, 0.5);
        let after = b.counts();
        let p50 = quantile_ms(&before[0], &after[0], 0.5).expect("views");
        assert!((0.06..0.2).contains(&p50), "{p50}");
        let p100 = quantile_ms(&before[0], &after[0], 1.0).expect("views");
        assert!((300.0..800.0).contains(&p100), "{p100}");
        assert_eq!(quantile_ms(&before[1], &after[1], 0.5), None);
    }

    #[test]
    fn rates_are_per_second_and_survive_a_member_restart() {
        let mut h = History::default();
        let mut r = Reading::default();
        r.counters.insert("invoked_weak".into(), 10);
        r.cluster_ops.insert(1, (10, 0));
        r.cluster_ops.insert(2, (500, 7));
        h.push(r.clone());
        r.at_ms = 2000;
        r.counters.insert("invoked_weak".into(), 30);
        r.cluster_ops.insert(1, (30, 0));
        r.cluster_ops.insert(2, (4, 1)); // restarted
        h.push(r);
        let s = &h.samples()[0];
        assert_eq!(s.weak_per_s, 10.0);
        assert_eq!(s.cluster_weak_per_s, 10.0);
        assert_eq!(s.accuracy, None);
    }
}
