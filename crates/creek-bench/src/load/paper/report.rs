//! `paper.md`: the summary as tables, ours beside the paper's, with the
//! run's date, machine and command. The numbers come from the summary
//! (`summary.rs`); nothing here measures or judges.

use std::fs;
use std::time::{SystemTime, UNIX_EPOCH};

use creek_sim::config::Protocol;
use serde_json::Value as Json;

use super::summary::{field, judged_series, primary};
use super::targets::TARGETS;
use super::variations::{Variation, PROTOCOLS};

/// What `paper.md` says around the numbers.
pub(super) struct Header {
    /// UTC, `YYYY-MM-DD`.
    pub(super) date: String,
    pub(super) machine: String,
    /// The command as run.
    pub(super) command: String,
    /// The text of `paper-notes.md`, shown under "Analysis".
    pub(super) notes: Option<String>,
}

/// `32.1k` for thousands, else the whole number; `-` when missing.
fn show_rate(x: Option<f64>) -> String {
    match x {
        Some(x) if x >= 1_000.0 => format!("{:.1}k", x / 1e3),
        Some(x) => format!("{x:.0}"),
        None => "-".into(),
    }
}

fn show(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// A list of rates, `5.0k, 10.0k`.
fn rates_text(rates: &Json) -> String {
    rates.as_array().map_or("-".into(), |rs| {
        rs.iter()
            .map(|r| show_rate(r.as_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// `ours (paper: theirs)`, or just ours when the paper has no number.
fn beside(ours: String, paper: Option<String>) -> String {
    match paper {
        Some(p) => format!("{ours} (paper: {p})"),
        None => ours,
    }
}

/// A table row, `| a | b |`.
fn table_row(out: &mut String, cells: impl IntoIterator<Item = String>) {
    let cells: Vec<String> = cells.into_iter().collect();
    out.push_str(&format!("| {} |\n", cells.join(" | ")));
}

// The cells of a protocol's summary `ps`, the same in every table.

/// The peak of the protocol at `PROTOCOLS[i]`, beside the paper's; "≥"
/// when it came at the sweep's highest rate (the sweep may not have
/// reached saturation).
fn peak_cell(v: &Variation, i: usize, ps: &Json) -> String {
    let at_top = ps["peak_at_highest_rate"] == Json::Bool(true);
    beside(
        format!(
            "{}{}",
            if at_top { "≥ " } else { "" },
            show_rate(field(ps, &["peak_throughput_ops_per_sec"]))
        ),
        v.paper.peak[i].map(|x| format!("~{}", show_rate(Some(x)))),
    )
}

fn latency_at_cell(ps: &Json) -> String {
    show_rate(field(ps, &["latency_at_rate"]))
}

/// The mean of a latency series, in milliseconds.
fn mean_ms_cell(ps: &Json, series: &str) -> String {
    show(
        field(ps, &["latency_us", series, "mean"]).map(|us| us / 1e3),
        3,
    )
}

fn accuracy_cell(ps: &Json) -> String {
    show(field(ps, &["accuracy"]), 4)
}

fn execution_ratio_cell(ps: &Json) -> String {
    show(field(ps, &["execution_ratio"]), 3)
}

/// "-" for a protocol without points (nothing checked).
fn consistency(ps: &Json) -> &'static str {
    match ps.get("consistency_ok").and_then(Json::as_bool) {
        Some(true) => "ok",
        Some(false) => "FAILED",
        None => "-",
    }
}

/// The image `scripts/bench-paper.sh` draws for `v`.
fn figure(v: &Variation) -> String {
    format!("![{}](paper-{}.png)", v.title, v.label)
}

/// The main table: metrics by protocol, ours beside the paper's.
fn main_table(out: &mut String, v: &Variation, s: &Json) {
    let proto = |p: Protocol| &s["protocols"][p.name()];
    let text = |t: Option<&str>| t.map(str::to_string);
    let creek_only = |p: Protocol, ours: String, paper: Option<&str>| {
        if p == Protocol::Creek {
            beside(ours, text(paper))
        } else {
            "-".into()
        }
    };
    let target = |name: &str| field(&s["targets"], &[name, "value"]);
    out.push_str("| | creek | archie | smr | bayou |\n|---|---|---|---|---|\n");
    let mut row = |name: &str, f: &dyn Fn(usize, Protocol) -> String| {
        let cells = PROTOCOLS.iter().enumerate().map(|(i, &p)| f(i, p));
        table_row(out, std::iter::once(name.to_string()).chain(cells));
    };
    row("peak throughput (tx/s)", &|i, p| peak_cell(v, i, proto(p)));
    row(
        "sustained throughput (tx/s; latency ≤ 2× low load)",
        &|_, p| show_rate(field(proto(p), &["sustained_throughput_ops_per_sec"])),
    );
    row("latencies read at (offered tx/s)", &|_, p| {
        latency_at_cell(proto(p))
    });
    row("weak tentative, mean (ms)", &|_, p| {
        creek_only(
            p,
            mean_ms_cell(proto(p), "weak_tentative"),
            v.paper.weak_tentative_ms,
        )
    });
    row("strong stable, mean (ms)", &|_, p| {
        creek_only(
            p,
            mean_ms_cell(proto(p), "strong_stable"),
            v.paper.strong_stable_ms,
        )
    });
    row("response, mean (ms)", &|_, p| {
        if p == Protocol::Creek {
            "-".into()
        } else {
            mean_ms_cell(proto(p), "response")
        }
    });
    row("weak tentative / archie's response", &|_, p| {
        creek_only(
            p,
            show(target("weak_tentative_vs_archie"), 2),
            v.paper.weak_vs_archie,
        )
    });
    row("strong stable / archie's response", &|_, p| {
        creek_only(
            p,
            show(target("strong_stable_vs_archie"), 2),
            v.paper.strong_vs_archie,
        )
    });
    // The paper reports Creek's accuracy and execution ratio only.
    let creek_paper = |p: Protocol, t: Option<&str>| text(t).filter(|_| p == Protocol::Creek);
    row("accuracy", &|_, p| {
        beside(accuracy_cell(proto(p)), creek_paper(p, v.paper.accuracy))
    });
    row("execution ratio", &|_, p| {
        beside(
            execution_ratio_cell(proto(p)),
            creek_paper(p, v.paper.execution_ratio),
        )
    });
    row("CPU busy (%)", &|_, p| {
        show(field(proto(p), &["cpu_busy"]).map(|x| x * 100.0), 1)
    });
    row("bytes on the wire per op", &|_, p| {
        show(field(proto(p), &["bytes_per_op"]), 0)
    });
    row("consistency (all points)", &|_, p| {
        consistency(proto(p)).into()
    });
}

/// A variation's table: one row per protocol.
fn variation_table(out: &mut String, v: &Variation, s: &Json) {
    out.push_str(
        "| protocol | peak tx/s | latencies at (offered tx/s) | weak tentative ms | \
         strong stable ms | response ms | accuracy | execution ratio | consistency |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for (i, p) in PROTOCOLS.iter().enumerate() {
        let ps = &s["protocols"][p.name()];
        let series = |name: &str| {
            if judged_series(*p).contains(&name) {
                mean_ms_cell(ps, name)
            } else {
                "-".into()
            }
        };
        table_row(
            out,
            [
                p.name().to_string(),
                peak_cell(v, i, ps),
                latency_at_cell(ps),
                series("weak_tentative"),
                series("strong_stable"),
                series("response"),
                accuracy_cell(ps),
                execution_ratio_cell(ps),
                consistency(ps).to_string(),
            ],
        );
    }
}

/// `paper.md`: the main table (Figure 1's variation, or the first run),
/// the targets, a table and a figure per variation, and the notes.
pub(super) fn markdown(h: &Header, done: &[(Variation, Json)]) -> String {
    let mut out = String::from("# The Creek paper's evaluation, in the simulator\n\n");
    out.push_str(&format!(
        "Written by `creek bench paper` on {} (UTC). Machine: {}. Command:\n\n    {}\n\n",
        h.date, h.machine, h.command
    ));
    let Some((v, s)) = primary(done) else {
        out.push_str("No variation was run.\n");
        return out;
    };
    let st = &s["setting"];
    out.push_str(&format!(
        "Every point: TPC-C in the deterministic simulator, 5 replicas x 16 cores, \
         1 Gbps links with 0.2-0.3 ms one-way latency, no faults, open-loop Poisson \
         arrivals at random replicas, weak transactions answered by one tentative \
         view; {} s of warm-up then {} s measured (virtual time), seed {} ({} run). \
         Each point is a line of `paper.jsonl`; `paper-summary.json` is the summary \
         below as JSON. Latencies are means, read for creek and archie at half of \
         creek's peak throughput, and for smr and bayou (which saturate far below \
         it) at their own sweep point nearest half of their own peak. \"paper\" is \
         what the Creek paper reports (§6) for its own implementation.\n\n",
        show(field(st, &["warmup_s"]), 2),
        show(field(st, &["duration_s"]), 2),
        st["seed"],
        st["run"].as_str().unwrap_or("?"),
    ));
    out.push_str(&format!("## {}\n\n", v.title));
    main_table(&mut out, v, s);
    out.push_str(&format!("\n{}\n\n", figure(v)));
    out.push_str(
        "## Targets\n\n| variation | target | ours | threshold | |\n|---|---|---|---|---|\n",
    );
    for (v, s) in done {
        if let Some(targets) = s["targets"].as_object() {
            for t in TARGETS.iter().filter_map(|name| targets.get(*name)) {
                let met = match t["met"].as_bool() {
                    Some(true) => "met",
                    Some(false) => "missed",
                    None => "(no target here)",
                };
                table_row(
                    &mut out,
                    [
                        v.label.to_string(),
                        t["what"].as_str().unwrap_or("?").to_string(),
                        show(t["value"].as_f64(), 3),
                        t["threshold"].as_str().unwrap_or("?").to_string(),
                        met.to_string(),
                    ],
                );
            }
        }
    }
    out.push_str("\n## Variations\n");
    for (v, s) in done {
        let st = &s["setting"];
        let warehouses = st["warehouses"]
            .as_u64()
            .map_or("The small test database".into(), |w| {
                format!("{w} warehouse(s)")
            });
        let strong = st["strong_share"]
            .as_f64()
            .map_or("Payment strong, the others weak".into(), |x| {
                format!("{:.0}% of transactions strong", x * 100.0)
            });
        out.push_str(&format!(
            "\n### {}: {}\n\n{warehouses}, {strong}, execution costs x{}. Offered \
             rates (tx/s): creek and archie {}; smr and bayou {}.\n\n",
            v.label,
            v.title,
            v.cost_factor,
            rates_text(&st["rates"]["creek"]),
            rates_text(&st["rates"]["smr"]),
        ));
        variation_table(&mut out, v, s);
        out.push_str(&format!("\n{}\n", figure(v)));
    }
    if let Some(notes) = &h.notes {
        out.push_str("\n## Analysis\n\n");
        out.push_str(notes);
        if !notes.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// Today's date in UTC, `YYYY-MM-DD`.
pub(super) fn utc_date() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// CPU model, core count and memory, from /proc.
pub(super) fn machine() -> String {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .filter_map(|l| l.strip_prefix("model name"))
        .find_map(|rest| rest.trim_start().strip_prefix(':'))
        .map_or("unknown CPU", str::trim);
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or("unknown memory".to_string(), |kib| {
            format!("{:.1} GiB RAM", kib / (1024.0 * 1024.0))
        });
    format!("{model}, {cores} cores, {mem_gib}")
}

/// The command line as run, arguments with spaces quoted.
pub(super) fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("'{a}'")
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::super::summary::variation_summary;
    use super::super::testdata::{fig1, point, run, sweep};
    use super::*;

    #[test]
    fn the_markdown_puts_the_paper_beside_ours() {
        let mut points = sweep();
        points.push(point(Protocol::Creek, 12_500.0, 12_450.0, true));
        points.push(point(Protocol::Archie, 12_500.0, 12_480.0, true));
        let done = vec![(fig1(), variation_summary(&run(), &fig1(), &points))];
        let header = Header {
            date: "2026-01-02".into(),
            machine: "a test machine".into(),
            command: "creek bench paper".into(),
            notes: Some("Our own words.".into()),
        };
        let md = markdown(&header, &done);
        assert!(md.contains("| | creek | archie | smr | bayou |"), "{md}");
        assert!(
            md.contains("| peak throughput (tx/s) | 25.0k (paper: ~32.5k) | ≥ 28.0k (paper: ~35.0k) | 2.7k (paper: ~2.7k)"),
            "{md}"
        );
        assert!(
            md.contains("| weak tentative, mean (ms) | 0.125 (paper: ~0.5) | - |"),
            "{md}"
        );
        assert!(
            md.contains("| fig1 | creek's peak / archie's peak | 0.893 | >= 1 | missed |"),
            "{md}"
        );
        assert!(md.contains("![Figure 1: 5 warehouses, Payment strong](paper-fig1.png)"));
        assert!(md.contains("## Analysis\n\nOur own words.\n"), "{md}");
        assert!(md.contains("2026-01-02"));
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_818), (2026, 12, 31));
    }
}
