//! Speculation telemetry by procedure: for the ops this replica answers,
//! how often each procedure's preliminary view held, how its final views
//! came (a confirmation, or a correction of the preliminary one), how
//! often it re-executed, why it aborted, and how long each view took. As
//! Prometheus metrics labelled `procedure="NAME"` (docs/operations.md,
//! "Observability") and as the console's table of procedures.
//!
//! Cardinality is bounded: the first [`PROCEDURES_MAX`] procedure names
//! this replica answers get labels of their own (built-ins and user
//! procedures alike; a name is only taken once a call of it was accepted,
//! so an unknown name a client sends never takes one), the rest count as
//! [`OTHER`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::console::series::ViewBuckets;

/// Most procedures with a label of their own.
pub const PROCEDURES_MAX: usize = 64;
/// The label of every procedure past [`PROCEDURES_MAX`].
pub const OTHER: &str = "other";

/// `procedure` and `level` and `outcome` of a finished call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The procedure's name, or `other`.
    pub procedure: &'static str,
    /// `weak` or `strong`.
    pub level: &'static str,
    /// `ok`, `abort`, `rejected` or `cancelled` (as `creek_ops_total`).
    pub outcome: &'static str,
}

/// `procedure` and one more label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The procedure's name, or `other`.
    pub procedure: &'static str,
    /// What is counted (each metric names its kinds).
    pub kind: &'static str,
}

/// `procedure` alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProcLabels {
    /// The procedure's name, or `other`.
    pub procedure: &'static str,
}

/// One procedure's row of the console's table (since the replica
/// started). It counts beside the Prometheus families rather than being
/// read back from them: a family yields a label set's value only by
/// creating it (every combination would show on `/metrics` as a zero),
/// and a histogram gives no quantiles back at all.
#[derive(Default)]
struct Row {
    weak: u64,
    strong: u64,
    aborts: u64,
    /// Final views after a preliminary one: equal to the first
    /// preliminary (`held`) or not.
    held: u64,
    changed: u64,
    /// Final views that confirmed the last preliminary one, or corrected
    /// it.
    confirmed: u64,
    corrected: u64,
    /// Final views, and the re-executions of their ops here.
    finals: u64,
    reexecutions: u64,
    latency: ViewBuckets,
}

/// The per-procedure metrics of one replica.
pub struct Procedures {
    names: Mutex<HashMap<String, &'static str>>,
    rows: Mutex<BTreeMap<&'static str, Row>>,
    calls: Family<CallLabels, Counter>,
    preliminary: Family<KindLabels, Counter>,
    final_views: Family<KindLabels, Counter>,
    reexecutions: Family<ProcLabels, Counter>,
    aborts: Family<KindLabels, Counter>,
    latency: Family<KindLabels, Histogram, fn() -> Histogram>,
}

impl Default for Procedures {
    fn default() -> Self {
        Procedures {
            names: Mutex::default(),
            rows: Mutex::default(),
            calls: Family::default(),
            preliminary: Family::default(),
            final_views: Family::default(),
            reexecutions: Family::default(),
            aborts: Family::default(),
            latency: Family::new_with_constructor(
                crate::metrics::latency_histogram as fn() -> Histogram,
            ),
        }
    }
}

impl Procedures {
    /// Register the families in `registry` (prefixed `creek_`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "procedure_calls",
            "Calls answered here, by procedure, level and outcome",
            self.calls.clone(),
        );
        registry.register(
            "procedure_preliminary_views",
            "Final views of calls that had a preliminary view, by procedure: kind=held (the \
             first preliminary view equalled the final one) or changed; accuracy is \
             held / (held + changed)",
            self.preliminary.clone(),
        );
        registry.register(
            "procedure_final_views",
            "Final views after a preliminary one, by procedure: kind=confirmed (a \
             confirmation of the last preliminary view) or corrected (a different result)",
            self.final_views.clone(),
        );
        registry.register(
            "procedure_reexecutions",
            "Executions beyond the first of the calls answered here with a final view, by \
             procedure",
            self.reexecutions.clone(),
        );
        registry.register(
            "procedure_aborts",
            "Aborted calls by procedure and reason (kind=denied, session_expired, \
             undeclared_key, limit, read_only_write or procedure)",
            self.aborts.clone(),
        );
        registry.register(
            "procedure_view_latency_seconds",
            "Latency from receipt to the first preliminary view (kind=preliminary) and to the \
             final view (kind=final), by procedure",
            self.latency.clone(),
        );
    }

    /// The label of procedure `name`, taking one of the [`PROCEDURES_MAX`]
    /// if it has none yet: for a call that was accepted (its procedure
    /// exists).
    pub fn label(&self, name: &str) -> &'static str {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(label) = names.get(name) {
            return label;
        }
        if names.len() >= PROCEDURES_MAX {
            return OTHER;
        }
        // Leaked once per name, at most PROCEDURES_MAX of them.
        let label: &'static str = Box::leak(name.to_owned().into_boxed_str());
        names.insert(name.to_owned(), label);
        label
    }

    /// The label of `name` if it has one, else [`OTHER`]: for a call that
    /// was refused (its name may be anything a client sent).
    pub fn label_if_known(&self, name: &str) -> &'static str {
        let names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        names.get(name).copied().unwrap_or(OTHER)
    }

    fn row(&self, procedure: &'static str, f: impl FnOnce(&mut Row)) {
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        f(rows.entry(procedure).or_default());
    }

    /// A call's first preliminary view, `seconds` after its receipt.
    pub fn preliminary(&self, procedure: &'static str, seconds: f64) {
        let kind = "preliminary";
        self.latency
            .get_or_create(&KindLabels { procedure, kind })
            .observe(seconds);
        self.row(procedure, |r| r.latency.observe(false, seconds));
    }

    /// A call's final view, `seconds` after its receipt: `held`, whether
    /// its first preliminary view equalled it (`None`: no preliminary view
    /// was sent); `corrected`, whether it corrects the last preliminary
    /// one (`None`: none was sent); the op's `reexecutions` here.
    pub fn final_view(
        &self,
        procedure: &'static str,
        seconds: f64,
        held: Option<bool>,
        corrected: Option<bool>,
        reexecutions: u32,
    ) {
        let kind = "final";
        self.latency
            .get_or_create(&KindLabels { procedure, kind })
            .observe(seconds);
        if let Some(held) = held {
            let kind = if held { "held" } else { "changed" };
            self.preliminary
                .get_or_create(&KindLabels { procedure, kind })
                .inc();
        }
        if let Some(corrected) = corrected {
            let kind = if corrected { "corrected" } else { "confirmed" };
            self.final_views
                .get_or_create(&KindLabels { procedure, kind })
                .inc();
        }
        if reexecutions > 0 {
            self.reexecutions
                .get_or_create(&ProcLabels { procedure })
                .inc_by(u64::from(reexecutions));
        }
        self.row(procedure, |r| {
            r.latency.observe(true, seconds);
            r.finals += 1;
            r.reexecutions += u64::from(reexecutions);
            match held {
                Some(true) => r.held += 1,
                Some(false) => r.changed += 1,
                None => {}
            }
            match corrected {
                Some(true) => r.corrected += 1,
                Some(false) => r.confirmed += 1,
                None => {}
            }
        });
    }

    /// A call is done with: its `outcome` (as `creek_ops_total`'s), and
    /// the abort's `reason` if it aborted
    /// ([`creek_procs::abort::reason`]).
    pub fn finished(
        &self,
        procedure: &'static str,
        strong: bool,
        outcome: &'static str,
        reason: Option<&'static str>,
    ) {
        let level = if strong { "strong" } else { "weak" };
        self.calls
            .get_or_create(&CallLabels {
                procedure,
                level,
                outcome,
            })
            .inc();
        if let Some(kind) = reason {
            self.aborts
                .get_or_create(&KindLabels { procedure, kind })
                .inc();
        }
        self.row(procedure, |r| {
            if strong {
                r.strong += 1;
            } else {
                r.weak += 1;
            }
            r.aborts += u64::from(reason.is_some());
        });
    }

    /// The console's table: one row per procedure, most called first.
    pub fn table(&self) -> Vec<serde_json::Value> {
        let rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<(u64, serde_json::Value)> = rows
            .iter()
            .map(|(name, r)| {
                let q = |stable: bool, q: f64| r.latency.quantile_ms(stable, q);
                let ratio = |a: u64, b: u64| (a + b > 0).then(|| a as f64 / (a + b) as f64);
                let calls = r.weak + r.strong;
                let row = serde_json::json!({
                    "procedure": name,
                    "weak": r.weak,
                    "strong": r.strong,
                    "aborts": r.aborts,
                    "accuracy": ratio(r.held, r.changed),
                    "confirmed": r.confirmed,
                    "corrected": r.corrected,
                    "reexecutions_per_final": (r.finals > 0).then(|| r.reexecutions as f64 / r.finals as f64),
                    "preliminary_p50_ms": q(false, 0.5),
                    "preliminary_p99_ms": q(false, 0.99),
                    "final_p50_ms": q(true, 0.5),
                    "final_p99_ms": q(true, 0.99),
                });
                (calls, row)
            })
            .collect();
        out.sort_by_key(|row| std::cmp::Reverse(row.0));
        out.into_iter().map(|(_, row)| row).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_past_the_cap_count_as_other_and_refused_names_take_none() {
        let p = Procedures::default();
        assert_eq!(p.label_if_known("kv.put"), OTHER, "not accepted yet");
        assert_eq!(p.label("kv.put"), "kv.put");
        assert_eq!(p.label_if_known("kv.put"), "kv.put");
        for i in 1..PROCEDURES_MAX {
            assert_eq!(p.label(&format!("user.p{i}")), format!("user.p{i}"));
        }
        assert_eq!(p.label("one.too.many"), OTHER);
        assert_eq!(p.label("kv.put"), "kv.put", "a known name keeps its label");
    }

    #[test]
    fn the_table_reads_accuracy_corrections_and_reexecutions() {
        let p = Procedures::default();
        let put = p.label("kv.put");
        // Three strong calls with both views: two held, one corrected
        // after two re-executions; one weak call aborted.
        p.final_view(put, 0.002, Some(true), Some(false), 0);
        p.final_view(put, 0.002, Some(true), Some(false), 0);
        p.final_view(put, 0.004, Some(false), Some(true), 2);
        for _ in 0..3 {
            p.finished(put, true, "ok", None);
        }
        p.preliminary(put, 0.0001);
        p.finished(put, false, "abort", Some("limit"));
        let table = p.table();
        let row = &table[0];
        assert_eq!(row["procedure"], "kv.put");
        assert_eq!(
            (row["strong"].as_u64(), row["weak"].as_u64()),
            (Some(3), Some(1))
        );
        assert_eq!(row["aborts"], 1);
        let accuracy = row["accuracy"].as_f64().expect("accuracy");
        assert!((accuracy - 2.0 / 3.0).abs() < 1e-9, "{accuracy}");
        assert_eq!(
            (row["confirmed"].as_u64(), row["corrected"].as_u64()),
            (Some(2), Some(1))
        );
        let per = row["reexecutions_per_final"]
            .as_f64()
            .expect("re-executions");
        assert!((per - 2.0 / 3.0).abs() < 1e-9, "{per}");
        assert!(row["final_p50_ms"]
            .as_f64()
            .is_some_and(|ms| ms > 1.0 && ms < 4.0));
        let mut registry = Registry::with_prefix("creek");
        p.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"creek_procedure_calls_total{procedure="kv.put",level="strong",outcome="ok"} 3"#,
            r#"creek_procedure_preliminary_views_total{procedure="kv.put",kind="held"} 2"#,
            r#"creek_procedure_final_views_total{procedure="kv.put",kind="corrected"} 1"#,
            r#"creek_procedure_reexecutions_total{procedure="kv.put"} 2"#,
            r#"creek_procedure_aborts_total{procedure="kv.put",kind="limit"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
