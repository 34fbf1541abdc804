//! The summary of a variation's points: each protocol's peak, the point
//! its latencies are read at (half of Creek's peak), its measurements
//! there, and the setting and the paper's numbers beside them.

use creek_sim::config::{Protocol, SimConfig};
use serde_json::{json, Map, Value as Json};

use super::run::{Point, Run, Spec, CORES, LINK_US, REPLICAS};
use super::targets::targets;
use super::variations::{strong_share_json, Paper, Variation, PROTOCOLS};

/// The number at `key` of a point.
pub(super) fn num(p: &Point, key: &str) -> Option<f64> {
    p.get(key).and_then(Json::as_f64)
}

fn of(points: &[Point], protocol: Protocol) -> impl Iterator<Item = &Point> {
    points
        .iter()
        .filter(move |p| p.get("protocol").and_then(Json::as_str) == Some(protocol.name()))
}

fn is_sweep(p: &Point) -> bool {
    p.get("point").and_then(Json::as_str) != Some("half_peak")
}

/// The number at `path` inside `j`.
pub(super) fn field(j: &Json, path: &[&str]) -> Option<f64> {
    path.iter()
        .try_fold(j, |j, k| j.get(*k))
        .and_then(Json::as_f64)
}

/// The sweep point of `protocol` with the highest measured throughput
/// (the lower rate on a tie).
fn peak_point(points: &[Point], protocol: Protocol) -> Option<&Point> {
    of(points, protocol)
        .filter(|p| is_sweep(p) && num(p, "throughput_ops_per_sec").is_some())
        .fold(None, |best: Option<&Point>, p| match best {
            Some(b) if num(b, "throughput_ops_per_sec") >= num(p, "throughput_ops_per_sec") => {
                Some(b)
            }
            _ => Some(p),
        })
}

/// The highest throughput `protocol` sustained: over the sweep points that
/// kept up (measured ≥ 95% of offered) with a mean response latency at
/// most twice the one at its lowest rate — the paper's reading of a peak,
/// "before the backlog builds up and latency strikes up" (§6.2).
fn sustained_throughput(points: &[Point], protocol: Protocol) -> Option<f64> {
    let response = |p: &Point| field(p.get("latency_us")?, &["response", "mean"]);
    let sweep: Vec<&Point> = of(points, protocol).filter(|p| is_sweep(p)).collect();
    let low = sweep
        .iter()
        .filter(|p| num(p, "offered_rate").is_some())
        .min_by(|a, b| {
            num(a, "offered_rate")
                .partial_cmp(&num(b, "offered_rate"))
                .unwrap_or(std::cmp::Ordering::Equal)
        })?;
    let bound = 2.0 * response(low)?;
    sweep
        .iter()
        .filter(|p| {
            let (Some(t), Some(r)) = (num(p, "throughput_ops_per_sec"), num(p, "offered_rate"))
            else {
                return false;
            };
            t >= 0.95 * r && response(p).is_some_and(|l| l <= bound)
        })
        .filter_map(|p| num(p, "throughput_ops_per_sec"))
        .reduce(f64::max)
}

/// Half of Creek's peak throughput, a whole rate; `None` without one.
fn creek_half_peak(points: &[Point]) -> Option<f64> {
    let peak = num(
        peak_point(points, Protocol::Creek)?,
        "throughput_ops_per_sec",
    )?;
    let half = (peak / 2.0).round();
    (half > 0.0).then_some(half)
}

/// The extra points of a variation after its sweep: creek and archie (those
/// of them among `protocols`) at half of Creek's peak, unless a sweep point
/// has exactly that rate.
pub(super) fn half_peak_specs(
    v: &Variation,
    protocols: &[Protocol],
    points: &[Point],
) -> Vec<Spec> {
    let Some(half) = creek_half_peak(points) else {
        return Vec::new();
    };
    [Protocol::Creek, Protocol::Archie]
        .into_iter()
        .filter(|p| protocols.contains(p))
        .filter(|&p| !of(points, p).any(|pt| num(pt, "offered_rate") == Some(half)))
        .map(|protocol| Spec {
            variation: *v,
            protocol,
            rate: half,
            half_peak: true,
        })
        .collect()
}

/// Where `protocol`'s latencies are read, and how that rate was chosen:
/// creek and archie at half of Creek's peak; smr and bayou at their own
/// sweep point nearest half of their own peak.
fn latency_point(points: &[Point], protocol: Protocol) -> Option<(&Point, String)> {
    match protocol {
        Protocol::Creek | Protocol::Archie => {
            let half = creek_half_peak(points)?;
            let p = of(points, protocol).find(|p| num(p, "offered_rate") == Some(half))?;
            Some((p, "half of creek's peak".into()))
        }
        Protocol::Smr | Protocol::Bayou => {
            let own = num(peak_point(points, protocol)?, "throughput_ops_per_sec")?;
            let target = own / 2.0;
            let distance =
                |p: &Point| num(p, "offered_rate").map_or(f64::MAX, |r| (r - target).abs());
            let p = of(points, protocol).filter(|p| is_sweep(p)).fold(
                None,
                |best: Option<&Point>, p| match best {
                    Some(b) if distance(b) <= distance(p) => Some(b),
                    _ => Some(p),
                },
            )?;
            let below = match creek_half_peak(points) {
                Some(h) if own < h => " (its peak is below half of creek's peak)",
                _ => "",
            };
            Some((
                p,
                format!("its sweep point nearest half of its own peak{below}"),
            ))
        }
    }
}

/// The latency series a protocol is judged by: Creek's two views, the
/// others' one response.
pub(super) fn judged_series(protocol: Protocol) -> &'static [&'static str] {
    match protocol {
        Protocol::Creek => &["weak_tentative", "strong_stable"],
        _ => &["response"],
    }
}

/// One protocol's line of a variation's summary.
fn protocol_summary(points: &[Point], protocol: Protocol) -> Json {
    let all: Vec<&Point> = of(points, protocol).collect();
    let sweep_max = all
        .iter()
        .filter(|p| is_sweep(p))
        .filter_map(|p| num(p, "offered_rate"))
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    let peak = peak_point(points, protocol);
    let peak_rate = peak.and_then(|p| num(p, "offered_rate"));
    let mut s = Map::new();
    s.insert(
        "peak_throughput_ops_per_sec".into(),
        json!(peak.and_then(|p| num(p, "throughput_ops_per_sec"))),
    );
    s.insert("peak_at_rate".into(), json!(peak_rate));
    s.insert(
        "sustained_throughput_ops_per_sec".into(),
        json!(sustained_throughput(points, protocol)),
    );
    s.insert(
        "peak_at_highest_rate".into(),
        json!(peak_rate.is_some() && peak_rate == sweep_max),
    );
    let at = latency_point(points, protocol);
    let get = |key: &str| at.as_ref().and_then(|(p, _)| p.get(key).cloned());
    s.insert(
        "latency_at_rate".into(),
        json!(at.as_ref().and_then(|(p, _)| num(p, "offered_rate"))),
    );
    s.insert(
        "latency_at".into(),
        json!(at.as_ref().map(|(_, why)| why.clone())),
    );
    let mut latency = Map::new();
    for series in judged_series(protocol) {
        let l = get("latency_us").and_then(|l| l.get(*series).cloned());
        latency.insert((*series).into(), l.unwrap_or(Json::Null));
    }
    s.insert("latency_us".into(), Json::Object(latency));
    s.insert(
        "throughput_at_latency_point".into(),
        get("throughput_ops_per_sec").unwrap_or(Json::Null),
    );
    for key in ["accuracy", "execution_ratio", "cpu_busy"] {
        s.insert(key.into(), get(key).unwrap_or(Json::Null));
    }
    s.insert(
        "bytes_per_op".into(),
        json!(get("bytes").and_then(|b| b.get("per_op").and_then(Json::as_f64))),
    );
    let values = |key: &'static str| all.iter().filter_map(move |p| num(p, key));
    s.insert(
        "accuracy_min".into(),
        json!(values("accuracy").reduce(f64::min)),
    );
    s.insert(
        "execution_ratio_max".into(),
        json!(values("execution_ratio").reduce(f64::max)),
    );
    let ok = |key: &str| all.iter().all(|p| p.get(key) == Some(&json!(true)));
    // Null without points: nothing was checked.
    let checked = |key: &str| json!((!all.is_empty()).then(|| ok(key)));
    s.insert("consistency_ok".into(), checked("consistency_ok"));
    s.insert("settled".into(), checked("settled"));
    s.insert("points".into(), json!(all.len()));
    Json::Object(s)
}

fn paper_json(paper: &Paper) -> Json {
    let mut peak = Map::new();
    for (p, x) in PROTOCOLS.iter().zip(paper.peak) {
        peak.insert(p.name().into(), json!(x));
    }
    json!({
        "source": "Creek paper, section 6",
        "peak_throughput_ops_per_sec": peak,
        "creek_weak_tentative_ms": paper.weak_tentative_ms,
        "creek_strong_stable_ms": paper.strong_stable_ms,
        "weak_tentative_vs_archie": paper.weak_vs_archie,
        "strong_stable_vs_archie": paper.strong_vs_archie,
        "creek_accuracy": paper.accuracy,
        "creek_execution_ratio": paper.execution_ratio,
    })
}

/// The setting of a variation as run.
fn setting_json(run: &Run, v: &Variation) -> Json {
    let mut rates = Map::new();
    for p in PROTOCOLS {
        rates.insert(p.name().into(), json!(run.mode.rates(v, p)));
    }
    json!({
        "variation": v.label,
        "title": v.title,
        "run": run.mode.name(),
        "replicas": REPLICAS,
        "cores": CORES,
        "link_us": [LINK_US.0, LINK_US.1],
        "bandwidth_bps": SimConfig::default().bandwidth_bps,
        "faults": "none",
        "warehouses": run.mode.warehouses(v),
        "strong_share": strong_share_json(v),
        "cost_factor": v.cost_factor,
        "weak_views": "tentative only (final_share 0)",
        "warmup_s": run.mode.warmup_us() as f64 / 1e6,
        "duration_s": run.mode.duration_us() as f64 / 1e6,
        "seed": run.seed,
        "rates": rates,
    })
}

/// A variation's summary: `{setting, protocols, targets, paper}`.
pub(super) fn variation_summary(run: &Run, v: &Variation, points: &[Point]) -> Json {
    let mut protocols = Map::new();
    for p in PROTOCOLS {
        protocols.insert(p.name().into(), protocol_summary(points, p));
    }
    json!({
        "setting": setting_json(run, v),
        "targets": targets(v, &protocols),
        "protocols": protocols,
        "paper": paper_json(&v.paper),
    })
}

/// The variation a run is summarised by: Figure 1's, or the first one run.
pub(super) fn primary(done: &[(Variation, Json)]) -> Option<&(Variation, Json)> {
    done.iter()
        .find(|(v, _)| v.label == "fig1")
        .or(done.first())
}

/// The run's summary: the object of Figure 1's variation (or the first one
/// run), plus every variation's under `variations` when more than one ran.
pub(super) fn summary(done: &[(Variation, Json)]) -> Json {
    let Some((_, primary)) = primary(done) else {
        return json!({});
    };
    let mut s = primary.clone();
    if done.len() > 1 {
        let all: Map<String, Json> = done
            .iter()
            .map(|(v, j)| (v.label.to_string(), j.clone()))
            .collect();
        if let Json::Object(m) = &mut s {
            m.insert("variations".into(), Json::Object(all));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::testdata::{fig1, point, sweep};
    use super::*;

    #[test]
    fn peak_is_the_highest_measured_throughput_not_the_highest_rate() {
        let points = sweep();
        let peak = peak_point(&points, Protocol::Creek).expect("creek has points");
        assert_eq!(num(peak, "offered_rate"), Some(30e3));
        let s = protocol_summary(&points, Protocol::Creek);
        assert_eq!(s["peak_throughput_ops_per_sec"], json!(25_000.0));
        assert_eq!(s["peak_at_highest_rate"], json!(false));
        assert_eq!(
            protocol_summary(&points, Protocol::Archie)["peak_at_highest_rate"],
            json!(true)
        );
    }

    /// Sustained: kept up, and mean response within twice the lowest
    /// rate's (the made-up response latency is rate / 10).
    #[test]
    fn sustained_throughput_stops_where_latency_doubles() {
        let points = sweep();
        assert_eq!(
            sustained_throughput(&points, Protocol::Creek),
            Some(19_800.0)
        );
        assert_eq!(
            sustained_throughput(&points, Protocol::Archie),
            Some(9_950.0)
        );
        assert_eq!(sustained_throughput(&points, Protocol::Smr), Some(2_000.0));
        assert_eq!(
            protocol_summary(&points, Protocol::Creek)["sustained_throughput_ops_per_sec"],
            json!(19_800.0)
        );
    }

    #[test]
    fn half_peak_points_are_added_for_creek_and_archie_unless_swept() {
        let mut points = sweep();
        assert_eq!(creek_half_peak(&points), Some(12_500.0));
        let extra = half_peak_specs(&fig1(), &PROTOCOLS, &points);
        let got: Vec<(Protocol, f64, bool)> = extra
            .iter()
            .map(|s| (s.protocol, s.rate, s.half_peak))
            .collect();
        assert_eq!(
            got,
            [
                (Protocol::Creek, 12_500.0, true),
                (Protocol::Archie, 12_500.0, true)
            ]
        );
        // A sweep point at exactly that rate is used instead.
        points.push(point(Protocol::Archie, 12_500.0, 12_400.0, false));
        let extra = half_peak_specs(&fig1(), &PROTOCOLS, &points);
        assert_eq!(extra.len(), 1);
        assert_eq!(extra[0].protocol, Protocol::Creek);
        // Only the protocols the run runs.
        assert!(half_peak_specs(&fig1(), &[Protocol::Archie], &points).is_empty());
    }

    #[test]
    fn latencies_are_read_at_the_half_peak_point() {
        let mut points = sweep();
        points.push(point(Protocol::Creek, 12_500.0, 12_450.0, true));
        points.push(point(Protocol::Archie, 12_500.0, 12_480.0, true));
        let creek = protocol_summary(&points, Protocol::Creek);
        assert_eq!(creek["latency_at_rate"], json!(12_500.0));
        assert_eq!(creek["latency_us"]["weak_tentative"]["mean"], json!(125.0));
        assert_eq!(creek["latency_us"]["strong_stable"]["mean"], json!(250.0));
        assert!(creek["latency_us"].get("response").is_none());
        let archie = protocol_summary(&points, Protocol::Archie);
        assert_eq!(archie["latency_us"]["response"]["mean"], json!(1_250.0));
        // smr peaks at 2.7k: its point nearest 1.35k is the 1k one, and the
        // summary says its peak is below half of creek's.
        let smr = protocol_summary(&points, Protocol::Smr);
        assert_eq!(smr["latency_at_rate"], json!(1e3));
        assert!(smr["latency_at"]
            .as_str()
            .is_some_and(|s| s.contains("below half of creek's peak")));
        assert_eq!(smr["points"], json!(4));
    }
}
