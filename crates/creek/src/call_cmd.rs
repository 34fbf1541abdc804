//! `creek call`: invoke one procedure and print each view as it arrives.

use std::io::{Read, Write};
use std::time::Duration;

use bytes::Bytes;
use creek_client::{pb, CallOptions, Error, Levels, RequestId, View, ViewKind};
use creek_types::value::Value;

use crate::cli::{self, exit, Endpoints, Failure, Format, Output};

/// Deepest list nesting accepted in an argument.
const LIST_DEPTH_MAX: usize = 8;

const ARGS_HELP: &str = "\
Arguments (one per procedure parameter; `creek proc list` shows them):
  5, -7          an int
  true, false    a bool
  nil            nil
  \"5\", s:5       bytes: the text 5 (quotes or s: keep it from being read as an int)
  x:0a1bff       bytes given in hex
  @path          bytes: the contents of a file
  -              bytes: all of standard input (once per call)
  [a,1,[b]]      a list
  anything else  bytes: its text
Where the procedure's signature says a parameter is bytes, a bare 5, true
or nil is sent as its text (`creek call kv.put n 5` stores \"5\"); where it
says int, the argument must be an integer.

Exit codes: 0 ok; 1 failed; 2 usage; 4 no quorum; 5 deadline passed (the
op may still commit: retry with the --request-id printed); 6 the procedure
aborted.";

/// Arguments of `creek call`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = ARGS_HELP, after_help = ARGS_HELP)]
pub struct Args {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    output: Output,
    /// Levels, comma-separated, each adding a view: weak (a preliminary
    /// view), snapshot (for read-only calls: the committed state at a
    /// stable time, never waiting for consensus), strong (the final view);
    /// both = weak,strong.
    #[arg(long, visible_alias = "levels", default_value = "both", value_parser = parse_levels)]
    level: Levels,
    /// With --level weak: also wait for the weak op's final view.
    #[arg(long)]
    weak_final: bool,
    /// Deadline for the final view, e.g. 5s, 500ms.
    #[arg(long, default_value = "5s", value_parser = parse_timeout)]
    timeout: Duration,
    /// Send the call under this request id (CLIENT:SEQ, as a deadline
    /// error prints it) to learn the outcome of an earlier call: the
    /// cluster applies an id once and answers a retry with its outcome.
    #[arg(long, value_name = "CLIENT:SEQ")]
    request_id: Option<RequestId>,
    /// When the preliminary view may leave: none (at once, from the
    /// replica's tentative execution), local (once the replica's write of
    /// the op is durable) or majority (once a majority of the replicas
    /// hold it durably); always before the op commits.
    #[arg(long, default_value = "none", value_parser = parse_durability)]
    durability: creek_client::Durability,
    /// Read the committed state right after the op at this revision (a
    /// read-only call at the snapshot level alone; `etcdctl get --rev`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    rev: Option<u64>,
    /// With kv.put: attach the key to this lease (`creek lease grant`),
    /// so it is deleted when the lease expires or is revoked.
    #[arg(long, value_name = "ID")]
    lease: Option<i64>,
    /// The procedure, e.g. kv.put.
    #[arg(value_name = "PROC")]
    procedure: String,
    /// Arguments; see below.
    #[arg(value_name = "ARGS", allow_negative_numbers = true)]
    args: Vec<String>,
}

/// Run `creek call`.
pub fn run(args: &Args) -> Result<(), Failure> {
    let mut stdin_used = false;
    let parsed = args
        .args
        .iter()
        .map(|a| parse_arg(a, &mut stdin_used))
        .collect::<Result<Vec<_>, _>>()?;
    cli::runtime()?.block_on(call(args, parsed))
}

async fn call(args: &Args, parsed: Vec<Arg>) -> Result<(), Failure> {
    let addrs = args.endpoints.list();
    let cluster = cli::connect_cluster(&args.endpoints, &addrs).await?;
    let first = cluster
        .first()
        .await
        .map_err(|e| Failure::new(exit::FAILED, cli::explain(&e, &addrs)))?;
    let procedures = cli::procedures(&first, &addrs).await?;
    if args.lease.is_some() && args.procedure != "kv.put" {
        return Err(Failure::new(
            exit::FAILED,
            format!(
                "--lease attaches a key written by kv.put, not by {}",
                args.procedure
            ),
        ));
    }
    let mut values = match procedures.iter().find(|p| p.name == args.procedure) {
        Some(p) if p.described => typed(p, parsed)?,
        Some(_) => parsed.into_iter().map(|a| a.value).collect(),
        None => {
            return Err(Failure::new(
                exit::FAILED,
                format!(
                    "unknown procedure {:?} (`creek proc list` shows the procedures)",
                    args.procedure
                ),
            ))
        }
    };
    values.extend(args.lease.map(Value::Int));
    // The id comes from the client of the shard the call goes to (its
    // sessions are that shard's).
    let client = cluster
        .route(&args.procedure, &values)
        .await
        .unwrap_or(first);
    let id = client.request_id(args.request_id);
    let options = CallOptions {
        durability: args.durability,
        timeout: Some(args.timeout),
        weak_final: args.weak_final,
        request_id: Some(id),
        revision: args.rev,
    };
    // A read at a revision is a snapshot read, whatever the default level.
    let level = if args.rev.is_some() {
        Levels::Snapshot
    } else {
        args.level
    };
    let failed = |e: Error| failure(&e, &addrs, args, id);
    let op = cluster
        .invoke_with(args.procedure.as_str(), values, level, options)
        .await
        .map_err(failed)?;
    let mut views = op.views();
    let mut last = None;
    while let Some(view) = views.next_view().await {
        let view = view.map_err(failed)?;
        print_view(&view, args.output.output, id)?;
        last = Some(view);
    }
    if let (Format::Value, Some(view)) = (args.output.output, &last) {
        print_bare(view)?;
    }
    match last.map(|v| v.outcome) {
        Some(Err(abort)) => Err(Failure::new(
            exit::ABORTED,
            format!("{} aborted: {abort}", args.procedure),
        )),
        _ => Ok(()),
    }
}

/// `none`, `local` or `majority`.
fn parse_durability(s: &str) -> Result<creek_client::Durability, String> {
    match s {
        "none" => Ok(creek_client::Durability::None),
        "local" => Ok(creek_client::Durability::Local),
        "majority" => Ok(creek_client::Durability::Majority),
        other => Err(format!(
            "durability is none, local or majority, not {other:?}"
        )),
    }
}

/// The failure for an error of the call: a deadline names the request id
/// to retry with, and quorum loss gets its own exit code.
fn failure(e: &Error, addrs: &[String], args: &Args, id: RequestId) -> Failure {
    let text = cli::explain(e, addrs);
    match e {
        Error::DeadlineExceeded(m) => {
            let code = if m.contains("no quorum") {
                exit::NO_QUORUM
            } else {
                exit::DEADLINE
            };
            Failure::new(
                code,
                format!(
                    "{text}\n  request id {id}; to learn its outcome: creek call --request-id \
                     {id} {} {}",
                    args.procedure,
                    args.args.join(" ")
                ),
            )
        }
        Error::InvalidArgument(m) if m.contains("must be bytes, got int") => Failure::new(
            exit::FAILED,
            format!("{text} (quote a number to pass it as bytes: '\"5\"' or s:5)"),
        ),
        _ => Failure::new(exit::FAILED, text),
    }
}

/// Print one view in `format` (`value` prints only the last view, later).
fn print_view(view: &View, format: Format, id: RequestId) -> Result<(), String> {
    match format {
        Format::Table => out!("{}", format_view(view)),
        Format::Json => out!("{}", view_json(view, id)),
        Format::Value => {}
    }
    Ok(())
}

/// The view's outcome alone: bytes as they are, other values as text, an
/// abort on stderr (with exit code 6).
fn print_bare(view: &View) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    let written = match &view.outcome {
        Ok(Value::Bytes(b)) => out.write_all(b),
        Ok(Value::Nil) => Ok(()),
        Ok(v) => writeln!(out, "{v}"),
        Err(_) => Ok(()),
    };
    written
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing the value: {e}"))
}

/// `{"view":"final","level":"strong","latency_us":843.0,"value":"v","request_id":"…"}`.
fn view_json(view: &View, id: RequestId) -> serde_json::Value {
    let kind = match view.kind {
        ViewKind::Preliminary => "preliminary",
        ViewKind::Final => "final",
        ViewKind::Confirmed => "confirmed",
        ViewKind::Snapshot => "snapshot",
    };
    let level = match view.level {
        creek_client::Level::Weak => "weak",
        creek_client::Level::Snapshot => "snapshot",
        creek_client::Level::Strong => "strong",
    };
    let mut j = serde_json::json!({
        "view": kind,
        "level": level,
        "latency_us": (view.latency.as_secs_f64() * 1e7).round() / 10.0,
        "request_id": id.to_string(),
    });
    match &view.outcome {
        Ok(v) => j["value"] = cli::value_json(v),
        Err(abort) => j["abort"] = serde_json::Value::String(abort.to_string()),
    }
    if view.across_shards {
        j["across_shards"] = serde_json::Value::Bool(true);
    }
    if view.time != 0 {
        j["time_us"] = view.time.into();
    }
    j
}

/// `preliminary        12.3 µs  5`.
fn format_view(view: &View) -> String {
    let label = match view.kind {
        ViewKind::Preliminary => "preliminary",
        ViewKind::Final => "final",
        ViewKind::Confirmed => "final (confirmed)",
        ViewKind::Snapshot => "snapshot",
    };
    let outcome = match &view.outcome {
        Ok(v) => v.to_string(),
        Err(abort) => format!("aborted: {abort}"),
    };
    let note = if view.across_shards {
        "  (across shards: other shards' keys read as absent)"
    } else {
        ""
    };
    format!(
        "{label:<17}  {:>9}  {outcome}{note}",
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
    let (mut weak, mut snapshot, mut strong) = (false, false, false);
    for level in s.split(',').map(str::trim) {
        match level {
            "weak" => weak = true,
            "snapshot" => snapshot = true,
            "strong" => strong = true,
            "both" => (weak, strong) = (true, true),
            _ => {
                return Err(format!(
                    "unknown level {level:?}: weak, snapshot, strong or both, \
                     or several separated by commas"
                ))
            }
        }
    }
    Levels::of(weak, snapshot, strong).ok_or_else(|| "no level given".to_owned())
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

/// One argument as typed: its value, and whether it was bare (no quotes,
/// prefix or brackets), so a signature may read it as text instead.
#[derive(Debug, PartialEq)]
struct Arg {
    value: Value,
    text: String,
    bare: bool,
}

/// Read one argument (see [`ARGS_HELP`]): `s:`, `x:`, `@path` and `-`
/// give bytes; otherwise [`parse_value`].
fn parse_arg(s: &str, stdin_used: &mut bool) -> Result<Arg, String> {
    let bytes = |b: Vec<u8>| Arg {
        value: Value::Bytes(Bytes::from(b)),
        text: s.to_owned(),
        bare: false,
    };
    if let Some(text) = s.strip_prefix("s:") {
        return Ok(bytes(text.as_bytes().to_vec()));
    }
    if let Some(h) = s.strip_prefix("x:") {
        return unhex(h).map(bytes);
    }
    if let Some(path) = s.strip_prefix('@') {
        return std::fs::read(path)
            .map(bytes)
            .map_err(|e| format!("argument {s:?}: reading {path}: {e}"));
    }
    if s == "-" {
        if std::mem::replace(stdin_used, true) {
            return Err("standard input (-) can be given once per call".into());
        }
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .map_err(|e| format!("reading standard input: {e}"))?;
        return Ok(bytes(b));
    }
    let value = parse_value(s)?;
    let t = s.trim();
    let bare = !(t.starts_with('"') || t.starts_with('['));
    Ok(Arg {
        value,
        text: s.to_owned(),
        bare,
    })
}

/// Bytes from hex (`0a1B`, even length; spaces and `0x` not allowed).
fn unhex(h: &str) -> Result<Vec<u8>, String> {
    if !h.len().is_multiple_of(2) {
        return Err(format!("x:{h}: hex needs an even number of digits"));
    }
    (0..h.len())
        .step_by(2)
        .map(|i| {
            h.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| {
                    format!("x:{h}: {:?} is not a hex byte", &h[i..(i + 2).min(h.len())])
                })
        })
        .collect()
}

/// The arguments as `p`'s signature types them: a bare scalar where bytes
/// are expected is sent as its text; an int parameter needs an integer.
fn typed(p: &pb::ProcedureInfo, args: Vec<Arg>) -> Result<Vec<Value>, Failure> {
    let signature = || format!("{}{}", p.name, crate::proc_cmd::params(p));
    if args.len() != p.params.len() {
        return Err(Failure::new(
            exit::FAILED,
            format!(
                "{} takes {} argument{}, got {}",
                signature(),
                p.params.len(),
                if p.params.len() == 1 { "" } else { "s" },
                args.len()
            ),
        ));
    }
    args.into_iter()
        .zip(&p.params)
        .enumerate()
        .map(|(i, (arg, param))| {
            let wrong = |what: &str| {
                Failure::new(
                    exit::FAILED,
                    format!(
                        "{}: argument {} ({}) must be {what}, got {:?}",
                        signature(),
                        i + 1,
                        param.name,
                        arg.text
                    ),
                )
            };
            // A declared key or prefix (`key(KS)`, `prefix(KS)`) is bytes.
            let ty = param.r#type.as_str();
            let ty = match ty.starts_with("key(") || ty.starts_with("prefix(") {
                true => "bytes",
                false => ty,
            };
            match (ty, arg.value) {
                ("bytes", Value::Int(_) | Value::Bool(_) | Value::Nil) if arg.bare => {
                    Ok(Value::Bytes(Bytes::from(arg.text.clone())))
                }
                ("bytes?", Value::Int(_) | Value::Bool(_)) if arg.bare => {
                    Ok(Value::Bytes(Bytes::from(arg.text.clone())))
                }
                ("int", v @ Value::Int(_)) => Ok(v),
                // Digits that do not fit: say the range, not "an integer".
                ("int", _) if is_integral(&arg.text) => Err(wrong(&format!(
                    "an integer from {} to {}",
                    i64::MIN,
                    i64::MAX
                ))),
                ("int", _) => Err(wrong("an integer")),
                (_, v) => Ok(v),
            }
        })
        .collect()
}

/// Whether `text` is written as an integer (a sign, then digits), whatever
/// its size.
fn is_integral(text: &str) -> bool {
    let t = text.trim();
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// An argument: `nil`, `true`, `false`, an integer, a list `[a,b]`, a
/// `"quoted"` string (bytes, so `"5"` is not a number), or anything else as
/// its UTF-8 bytes.
fn parse_value(s: &str) -> Result<Value, String> {
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

    fn info(params: &[(&str, &str)]) -> pb::ProcedureInfo {
        pb::ProcedureInfo {
            name: "p".into(),
            params: params
                .iter()
                .map(|(n, t)| pb::Param {
                    name: (*n).into(),
                    r#type: (*t).into(),
                })
                .collect(),
            described: true,
            ..Default::default()
        }
    }

    fn args(raw: &[&str]) -> Vec<Arg> {
        let mut stdin = false;
        raw.iter()
            .map(|a| parse_arg(a, &mut stdin).expect("parses"))
            .collect()
    }

    #[test]
    fn prefixes_give_bytes() {
        let mut stdin = false;
        let v = |s: &str, stdin: &mut bool| parse_arg(s, stdin).map(|a| a.value);
        assert_eq!(v("s:5", &mut stdin), Ok(b("5")));
        assert_eq!(
            v("x:0aff", &mut stdin),
            Ok(Value::Bytes(Bytes::from_static(&[0x0a, 0xff])))
        );
        assert!(v("x:0af", &mut stdin).is_err());
        assert!(v("x:zz", &mut stdin).is_err());
        let dir = std::env::temp_dir().join(format!("creek-call-arg-{}", std::process::id()));
        std::fs::write(&dir, b"\x00file").expect("write");
        let at = format!("@{}", dir.display());
        assert_eq!(
            v(&at, &mut stdin),
            Ok(Value::Bytes(Bytes::from_static(b"\x00file")))
        );
        std::fs::remove_file(&dir).expect("remove");
        assert!(v("@/no/such/file", &mut stdin)
            .expect_err("refused")
            .contains("/no/such/file"));
        let mut used = true;
        assert!(v("-", &mut used).expect_err("refused").contains("once"));
    }

    #[test]
    fn signatures_type_bare_arguments() {
        let put = info(&[("key", "bytes"), ("value", "bytes")]);
        assert_eq!(
            typed(&put, args(&["n", "5"])).ok(),
            Some(vec![b("n"), b("5")])
        );
        assert_eq!(
            typed(&put, args(&["true", "nil"])).ok(),
            Some(vec![b("true"), b("nil")])
        );
        let deposit = info(&[("acct", "key(accounts)"), ("notes", "prefix(notes)")]);
        assert_eq!(
            typed(&deposit, args(&["7", "12"])).ok(),
            Some(vec![b("7"), b("12")])
        );
        let incr = info(&[("key", "bytes"), ("delta", "int")]);
        assert_eq!(
            typed(&incr, args(&["n", "-2"])).ok(),
            Some(vec![b("n"), Value::Int(-2)])
        );
        let e = typed(&incr, args(&["visits", "1.5"])).expect_err("refused");
        assert_eq!(
            e.message,
            "p(key: bytes, delta: int): argument 2 (delta) must be an integer, got \"1.5\""
        );
        let e = typed(&incr, args(&["n", "99999999999999999999"])).expect_err("refused");
        assert_eq!(
            e.message,
            "p(key: bytes, delta: int): argument 2 (delta) must be an integer from \
             -9223372036854775808 to 9223372036854775807, got \"99999999999999999999\""
        );
        let e = typed(&incr, args(&["n"])).expect_err("refused");
        assert!(
            e.message.contains("takes 2 arguments, got 1"),
            "{}",
            e.message
        );
        let cas = info(&[("key", "bytes"), ("expected", "bytes?"), ("new", "bytes?")]);
        assert_eq!(
            typed(&cas, args(&["k", "nil", "7"])).ok(),
            Some(vec![b("k"), Value::Nil, b("7")])
        );
    }

    #[test]
    fn views_print_readably() {
        let view = View {
            level: creek_client::Level::Strong,
            kind: ViewKind::Confirmed,
            outcome: Ok(b("v")),
            latency: Duration::from_micros(843),
            across_shards: false,
            time: 0,
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
        assert_eq!(parse_levels("snapshot"), Ok(Levels::Snapshot));
        assert_eq!(parse_levels("weak,snapshot,strong"), Ok(Levels::All));
        assert_eq!(parse_levels("snapshot, strong"), Ok(Levels::SnapshotStrong));
        assert!(parse_levels("weak,bogus").is_err());
        assert!(parse_levels("strongest").is_err());
    }
}
