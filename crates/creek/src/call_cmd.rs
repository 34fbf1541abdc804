//! `creek call`: invoke one procedure and print each view as it arrives.

use std::time::Duration;

use bytes::Bytes;
use creek_client::{CallOptions, Client, Error, Levels, View, ViewKind};
use creek_exec::value::Value;

/// The first replica of `creek dev`.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7001";

/// Deepest list nesting accepted in an argument.
const LIST_DEPTH_MAX: usize = 8;

/// Arguments of `creek call`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A replica's client address; repeat to fail over to the next ones.
    #[arg(long = "addr", value_name = "ADDR", default_value = DEFAULT_ADDR)]
    addrs: Vec<String>,
    /// Levels: weak (one preliminary view), strong (final view only) or
    /// both (preliminary, then final).
    #[arg(long, default_value = "both", value_parser = parse_levels)]
    level: Levels,
    /// With --level weak: also wait for the weak op's final view.
    #[arg(long)]
    weak_final: bool,
    /// Deadline for the final view, e.g. 5s, 500ms.
    #[arg(long, default_value = "5s", value_parser = parse_timeout)]
    timeout: Duration,
    /// The procedure, e.g. kv.put.
    #[arg(value_name = "PROC")]
    procedure: String,
    /// Arguments: integers, true, false, nil, lists like [a,1]; "quoted"
    /// text and anything else are bytes.
    #[arg(value_name = "ARGS", allow_negative_numbers = true)]
    args: Vec<String>,
}

/// Run `creek call`. A failure or an abort in the closing view is an error
/// (so the exit code is non-zero).
pub fn run(args: &Args) -> Result<(), String> {
    let values = args
        .args
        .iter()
        .map(|a| parse_value(a))
        .collect::<Result<Vec<_>, _>>()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    runtime.block_on(call(args, values))
}

async fn call(args: &Args, values: Vec<Value>) -> Result<(), String> {
    let client = Client::connect(args.addrs.iter().cloned())
        .await
        .map_err(|e| e.to_string())?;
    let options = CallOptions {
        timeout: Some(args.timeout),
        weak_final: args.weak_final,
    };
    let op = client
        .invoke_with(args.procedure.as_str(), values, args.level, options)
        .await
        .map_err(|e| explain(&e))?;
    let mut views = op.views();
    let mut last = None;
    while let Some(view) = views.next_view().await {
        let view = view.map_err(|e| explain(&e))?;
        println!("{}", format_view(&view));
        last = Some(view);
    }
    match last.map(|v| v.outcome) {
        Some(Err(abort)) => Err(format!("{} aborted: {abort}", args.procedure)),
        _ => Ok(()),
    }
}

/// The error's text, with a hint for the commonest CLI mistake.
fn explain(e: &Error) -> String {
    match e {
        Error::InvalidArgument(m) if m.contains("must be bytes, got int") => {
            format!("{e} (quote a number to pass it as bytes: '\"5\"')")
        }
        _ => e.to_string(),
    }
}

/// `preliminary        12.3 µs  5`.
fn format_view(view: &View) -> String {
    let label = match view.kind {
        ViewKind::Preliminary => "preliminary",
        ViewKind::Final => "final",
        ViewKind::Confirmed => "final (confirmed)",
    };
    let outcome = match &view.outcome {
        Ok(v) => v.to_string(),
        Err(abort) => format!("aborted: {abort}"),
    };
    format!(
        "{label:<17}  {:>9}  {outcome}",
        format_latency(view.latency)
    )
}

fn format_latency(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 100.0 {
        format!("{us:.1} µs")
    } else if us < 10_000.0 {
        format!("{us:.0} µs")
    } else if us < 10_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

fn parse_levels(s: &str) -> Result<Levels, String> {
    match s {
        "weak" => Ok(Levels::Weak),
        "strong" => Ok(Levels::Strong),
        "both" => Ok(Levels::Both),
        _ => Err(format!("unknown level {s:?}: weak, strong or both")),
    }
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let (num, unit) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(format!("timeout {s:?} needs a unit: s, ms or us"));
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad timeout {s:?}"))?;
    Duration::try_from_secs_f64(n * unit)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("timeout {s:?} must be positive"))
}

/// An argument: `nil`, `true`, `false`, an integer, a list `[a,b]`, a
/// `"quoted"` string (bytes, so `"5"` is not a number), or anything else as
/// its UTF-8 bytes.
pub fn parse_value(s: &str) -> Result<Value, String> {
    parse_at(s, 0)
}

fn parse_at(s: &str, depth: usize) -> Result<Value, String> {
    let t = s.trim();
    if let Some(inner) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        if depth >= LIST_DEPTH_MAX {
            return Err(format!("lists nest deeper than {LIST_DEPTH_MAX} in {s:?}"));
        }
        return split_items(inner)?
            .into_iter()
            .map(|item| parse_at(item, depth + 1))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::List);
    }
    if let Some(quoted) = t
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .filter(|_| t.len() >= 2)
    {
        return Ok(Value::Bytes(Bytes::copy_from_slice(quoted.as_bytes())));
    }
    Ok(match t {
        "nil" => Value::Nil,
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => match t.parse::<i64>() {
            Ok(n) => Value::Int(n),
            // Outside lists, spaces are the user's: keep them.
            Err(_) if depth == 0 => Value::Bytes(Bytes::copy_from_slice(s.as_bytes())),
            Err(_) => Value::Bytes(Bytes::copy_from_slice(t.as_bytes())),
        },
    })
}

/// The comma-separated items of a list's inside, nested lists kept whole.
fn split_items(inner: &str) -> Result<Vec<&str>, String> {
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut items = Vec::new();
    let (mut depth, mut start, mut quoted) = (0usize, 0, false);
    for (i, c) in inner.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '[' if !quoted => depth += 1,
            ']' if !quoted => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("unbalanced ']' in [{inner}]"))?;
            }
            ',' if !quoted && depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced '[' in [{inner}]"));
    }
    items.push(&inner[start..]);
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn arguments_parse_as_values() {
        let cases = [
            ("42", Value::Int(42)),
            ("-7", Value::Int(-7)),
            ("true", Value::Bool(true)),
            ("false", Value::Bool(false)),
            ("nil", Value::Nil),
            ("key", b("key")),
            ("\"5\"", b("5")),
            ("hello world", b("hello world")),
            ("[]", Value::List(vec![])),
            (
                "[a, 1,[nil,\"x,y\"]]",
                Value::List(vec![
                    b("a"),
                    Value::Int(1),
                    Value::List(vec![Value::Nil, b("x,y")]),
                ]),
            ),
        ];
        for (arg, want) in cases {
            assert_eq!(parse_value(arg), Ok(want), "{arg}");
        }
        assert!(parse_value("[a,[b]").is_err());
        assert!(parse_value(&"[".repeat(20)).is_ok(), "not a list: bytes");
        let deep = format!("{}{}", "[".repeat(20), "]".repeat(20));
        assert!(parse_value(&deep).is_err());
    }

    #[test]
    fn views_print_readably() {
        let view = View {
            level: creek_client::Level::Strong,
            kind: ViewKind::Confirmed,
            outcome: Ok(b("v")),
            latency: Duration::from_micros(843),
        };
        assert_eq!(format_view(&view), "final (confirmed)     843 µs  \"v\"");
        assert_eq!(format_latency(Duration::from_nanos(12_345)), "12.3 µs");
        assert_eq!(format_latency(Duration::from_millis(25)), "25.0 ms");
    }

    #[test]
    fn timeouts_and_levels_parse() {
        assert_eq!(parse_timeout("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_timeout("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_timeout("5").is_err() && parse_timeout("0s").is_err());
        assert_eq!(parse_levels("weak"), Ok(Levels::Weak));
        assert!(parse_levels("strongest").is_err());
    }
}
