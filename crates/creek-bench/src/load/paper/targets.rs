//! The targets: the numbers a variation's summary is judged by,
//! each with its threshold and a verdict.

use creek_sim::config::Protocol;
use serde_json::{json, Map, Value as Json};

use super::summary::field;
use super::variations::Variation;

/// The targets' names, in the order they are shown.
pub(super) const TARGETS: [&str; 6] = [
    "creek_peak_vs_archie",
    "creek_peak_vs_smr",
    "weak_tentative_vs_archie",
    "strong_stable_vs_archie",
    "creek_accuracy",
    "creek_execution_ratio",
];

/// A threshold a measured value is held to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

impl Bound {
    fn holds(self, x: f64) -> bool {
        match self {
            Bound::AtLeast(t) => x >= t,
            Bound::AtMost(t) => x <= t,
        }
    }

    fn show(self) -> String {
        match self {
            Bound::AtLeast(t) => format!(">= {t}"),
            Bound::AtMost(t) => format!("<= {t}"),
        }
    }
}

/// `met` is null where the issue sets no target (the value is shown for
/// comparison only).
fn verdict(what: &str, value: Option<f64>, bound: Bound, judged: bool) -> Json {
    json!({
        "what": what,
        "value": value,
        "threshold": bound.show(),
        "met": judged.then(|| value.is_some_and(|x| bound.holds(x))),
    })
}

/// The targets for a variation, from its protocol summaries:
/// ratios only where both protocols have data; accuracy and execution
/// ratio (Creek's, at the half-peak point) always, unmet when missing.
/// The issue judges the ratios at Figure 1's setting only, and accuracy
/// and execution ratio at 5 warehouses (Figure 1) and 1 (`wh1`); elsewhere
/// the values are shown without a verdict.
pub(super) fn targets(v: &Variation, protocols: &Map<String, Json>) -> Json {
    let at = |p: Protocol, path: &[&str]| field(protocols.get(p.name())?, path);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let peak = |p| at(p, &["peak_throughput_ops_per_sec"]);
    let mean = |p, series| at(p, &["latency_us", series, "mean"]);
    let archie_response = mean(Protocol::Archie, "response");
    let mut t = Map::new();
    let ratios = [
        (
            "creek_peak_vs_archie",
            "creek's peak / archie's peak",
            ratio(peak(Protocol::Creek), peak(Protocol::Archie)),
            Bound::AtLeast(1.0),
        ),
        (
            "creek_peak_vs_smr",
            "creek's peak / smr's peak",
            ratio(peak(Protocol::Creek), peak(Protocol::Smr)),
            Bound::AtLeast(10.0),
        ),
        (
            "weak_tentative_vs_archie",
            "creek's weak tentative / archie's response, means at half of creek's peak",
            ratio(mean(Protocol::Creek, "weak_tentative"), archie_response),
            Bound::AtMost(0.4),
        ),
        (
            "strong_stable_vs_archie",
            "creek's strong stable / archie's response, means at half of creek's peak",
            ratio(mean(Protocol::Creek, "strong_stable"), archie_response),
            Bound::AtMost(0.8),
        ),
    ];
    let paper_setting = v.label == "fig1";
    for (name, what, value, bound) in ratios {
        if value.is_some() {
            t.insert(name.into(), verdict(what, value, bound, paper_setting));
        }
    }
    let one = v.warehouses == 1;
    let judged = paper_setting || v.label == "wh1";
    t.insert(
        "creek_accuracy".into(),
        verdict(
            "creek's accuracy at half of its peak",
            at(Protocol::Creek, &["accuracy"]),
            Bound::AtLeast(if one { 0.95 } else { 0.99 }),
            judged,
        ),
    );
    t.insert(
        "creek_execution_ratio".into(),
        verdict(
            "creek's execution ratio at half of its peak",
            at(Protocol::Creek, &["execution_ratio"]),
            Bound::AtMost(if one { 1.5 } else { 1.05 }),
            judged,
        ),
    );
    Json::Object(t)
}

#[cfg(test)]
mod tests {
    use super::super::run::Point;
    use super::super::summary::variation_summary;
    use super::super::testdata::{fig1, point, run, sweep};
    use super::super::variations::VARIATIONS;
    use super::*;

    #[test]
    fn targets_compare_the_right_numbers_with_their_thresholds() {
        let mut points = sweep();
        points.push(point(Protocol::Creek, 12_500.0, 12_450.0, true));
        points.push(point(Protocol::Archie, 12_500.0, 12_480.0, true));
        let s = variation_summary(&run(), &fig1(), &points);
        let t = &s["targets"];
        // 25k / 28k: missed; 25k / 2.7k = 9.26: missed.
        assert_eq!(t["creek_peak_vs_archie"]["met"], json!(false));
        assert_eq!(t["creek_peak_vs_smr"]["met"], json!(false));
        let v = t["creek_peak_vs_smr"]["value"].as_f64().unwrap_or(0.0);
        assert!((v - 25_000.0 / 2_700.0).abs() < 1e-9);
        // Means at 12.5k: weak tentative 125 / archie response 1250 = 0.1;
        // strong stable 250 / 1250 = 0.2: both met.
        assert_eq!(t["weak_tentative_vs_archie"]["value"], json!(0.1));
        assert_eq!(t["weak_tentative_vs_archie"]["met"], json!(true));
        assert_eq!(t["strong_stable_vs_archie"]["value"], json!(0.2));
        assert_eq!(t["strong_stable_vs_archie"]["threshold"], json!("<= 0.8"));
        // 5 warehouses: accuracy 0.995 >= 0.99, execution ratio 1.02 <= 1.05.
        assert_eq!(t["creek_accuracy"]["met"], json!(true));
        assert_eq!(t["creek_execution_ratio"]["met"], json!(true));

        // One warehouse relaxes the thresholds; a worse accuracy fails 5.
        for p in &mut points {
            p.insert("accuracy".into(), json!(0.96));
            p.insert("execution_ratio".into(), json!(1.4));
        }
        let t = &variation_summary(&run(), &fig1(), &points)["targets"];
        assert_eq!(t["creek_accuracy"]["met"], json!(false));
        assert_eq!(t["creek_execution_ratio"]["met"], json!(false));
        let t = &variation_summary(&run(), &VARIATIONS[1], &points)["targets"];
        assert_eq!(t["creek_accuracy"]["met"], json!(true));
        assert_eq!(t["creek_execution_ratio"]["met"], json!(true));
        // Other settings show the values without a verdict.
        let long5 = VARIATIONS
            .iter()
            .find(|v| v.label == "long5")
            .expect("long5");
        let t = &variation_summary(&run(), long5, &points)["targets"];
        assert_eq!(t["creek_accuracy"]["met"], json!(null));
        assert_eq!(t["creek_peak_vs_smr"]["met"], json!(null));
        assert!(t["creek_peak_vs_smr"]["value"].is_number());
    }

    #[test]
    fn ratio_targets_need_both_protocols() {
        let points: Vec<Point> = sweep()
            .into_iter()
            .filter(|p| p["protocol"] == json!("creek"))
            .collect();
        let s = variation_summary(&run(), &fig1(), &points);
        let t = s["targets"].as_object().expect("targets is an object");
        assert!(!t.contains_key("creek_peak_vs_archie"));
        assert!(!t.contains_key("weak_tentative_vs_archie"));
        // Creek's accuracy is missing without its half-peak point: unmet.
        assert_eq!(t["creek_accuracy"]["value"], json!(null));
        assert_eq!(t["creek_accuracy"]["met"], json!(false));
        // No smr point: nothing checked, nothing failed.
        assert_eq!(s["protocols"]["smr"]["consistency_ok"], json!(null));
        assert_eq!(s["protocols"]["creek"]["consistency_ok"], json!(true));
    }
}
