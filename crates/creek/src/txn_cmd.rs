//! `creek txn`: a conditional transaction (`kv.txn`) read from standard
//! input in etcdctl's `txn` format (docs/api.md, "Transactions"):
//!
//! ```text
//! value("user/1") = "alice"
//! value("lock") = nil
//!
//! put user/1 bob
//! put lock held
//!
//! get user/1
//! ```
//!
//! The compares, a blank line, the ops run if every compare holds, a blank
//! line, the ops run otherwise. Ops are `get KEY`, `put KEY VALUE` and
//! `del KEY`, each with `--prefix` for a prefix (`get`, `del`); arguments
//! may be double-quoted (with `\"` and `\\` inside). From a terminal each
//! part is prompted for.

use std::io::{BufRead, IsTerminal};

use bytes::Bytes;
use creek_client::{Error, Levels};
use creek_types::value::Value;

use crate::cli::{self, exit, Endpoints, Failure, Format, Output};

/// Keys a `--prefix` op reads or deletes at most (one page).
const PREFIX_KEYS: i64 = 1000;

/// Arguments of `creek txn`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    endpoints: Endpoints,
    /// `-o table`: SUCCESS or FAILURE, then each op's result; `-o json`:
    /// one object with `succeeded` and `results`.
    #[command(flatten)]
    output: Output,
    /// The level: strong (linearizable) or weak (this replica's tentative
    /// state, answered at once); snapshot is refused, as for any call that
    /// may write.
    #[arg(long, default_value = "strong", value_parser = crate::kv_cmd::parse_level)]
    level: Levels,
}

/// Run `creek txn`.
pub fn run(args: &Args) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    let prompt = stdin.is_terminal();
    let txn = read(stdin.lock(), prompt).map_err(|e| Failure::new(exit::FAILED, e))?;
    cli::runtime()?.block_on(send(args, txn))
}

/// A transaction as read: `kv.txn`'s three arguments, and what each op
/// was, to print its result.
#[derive(Debug, PartialEq)]
struct Read {
    compares: Vec<Value>,
    success: Vec<(Kind, Value)>,
    failure: Vec<(Kind, Value)>,
}

/// What an op answers, for printing.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Get,
    Put,
    Del,
    GetPrefix,
    DelPrefix,
}

/// Read the three parts from `input`, prompting on stderr if `prompt`.
fn read(input: impl BufRead, prompt: bool) -> Result<Read, String> {
    let titles = [
        "compares:",
        "success requests (get, put, del):",
        "failure requests (get, put, del):",
    ];
    let mut parts: Vec<Vec<(usize, String)>> = vec![Vec::new()];
    if prompt {
        eprintln!("{}", titles[0]);
    }
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("reading the transaction: {e}"))?;
        let line = line.trim();
        if line.is_empty() {
            if parts.len() == 3 {
                break;
            }
            parts.push(Vec::new());
            if prompt {
                eprintln!("\n{}", titles[parts.len() - 1]);
            }
            continue;
        }
        if let Some(part) = parts.last_mut() {
            part.push((n + 1, line.to_owned()));
        }
    }
    parts.resize(3, Vec::new());
    let compares = parts[0]
        .iter()
        .map(|(n, l)| compare(l).map_err(|e| format!("line {n}: {e}")))
        .collect::<Result<_, _>>()?;
    let ops = |part: &[(usize, String)]| {
        part.iter()
            .map(|(n, l)| op(l).map_err(|e| format!("line {n}: {e}")))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(Read {
        compares,
        success: ops(&parts[1])?,
        failure: ops(&parts[2])?,
    })
}

/// `value("key") OP "operand"` (or `nil`), or `version`, `create`, `mod`
/// or `lease("key") OP "number"`.
fn compare(line: &str) -> Result<Value, String> {
    let usage = || {
        format!(
            "not a compare: {line:?} (write value(\"KEY\") =|!=|<|> \"VALUE\", or nil for absent)"
        )
    };
    let (target, rest) = line.split_once('(').ok_or_else(usage)?;
    let rest = rest.trim_start();
    let (key, rest) = quoted(rest).ok_or_else(usage)?;
    let rest = rest
        .trim_start()
        .strip_prefix(')')
        .ok_or_else(usage)?
        .trim();
    let (op, operand) = ["!=", "==", "=", "<", ">"]
        .iter()
        .find_map(|op| rest.strip_prefix(op).map(|r| (*op, r.trim())))
        .ok_or_else(usage)?;
    let target = target.trim();
    let operand = match operand {
        "nil" => Value::Nil,
        _ => match quoted(operand) {
            // A version, revision or lease is a number, quoted or not
            // (etcdctl quotes it).
            Some((v, "")) if target != "value" => Value::Int(number(target, &v)?),
            Some((v, "")) => Value::Bytes(Bytes::from(v)),
            _ if target != "value" => Value::Int(number(target, operand)?),
            _ => return Err(usage()),
        },
    };
    Ok(Value::List(vec![
        Value::Bytes(Bytes::from(key)),
        Value::from(target),
        Value::from(op),
        operand,
    ]))
}

/// The operand of a `target` compare other than the value: an integer.
fn number(target: &str, text: &str) -> Result<i64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("a {target} compare takes an integer, not {text:?}"))
}

/// An op line as `kv.txn` takes it.
fn op(line: &str) -> Result<(Kind, Value), String> {
    let words = words(line)?;
    let b = |s: &str| Value::Bytes(Bytes::copy_from_slice(s.as_bytes()));
    let prefix = |p: &str| {
        let end =
            creek_shard::prefix_end(p.as_bytes()).map_or(Value::Nil, |e| Value::Bytes(e.into()));
        (b(p), end)
    };
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let (kind, items) = match words.as_slice() {
        ["get", k] => (Kind::Get, vec![b("get"), b(k)]),
        ["get", k, "--prefix"] | ["get", "--prefix", k] => {
            let (from, to) = prefix(k);
            (
                Kind::GetPrefix,
                vec![b("scan"), from, to, Value::Int(PREFIX_KEYS)],
            )
        }
        ["put", k, v] => (Kind::Put, vec![b("put"), b(k), b(v)]),
        ["del", k] => (Kind::Del, vec![b("delete"), b(k)]),
        ["del", k, "--prefix"] | ["del", "--prefix", k] => {
            let (from, to) = prefix(k);
            (
                Kind::DelPrefix,
                vec![b("delete_range"), from, to, Value::Int(PREFIX_KEYS)],
            )
        }
        _ => {
            return Err(format!(
            "not an op: {line:?} (write get KEY [--prefix], put KEY VALUE or del KEY [--prefix])"
        ))
        }
    };
    Ok((kind, Value::List(items)))
}

/// A double-quoted string at the start of `s` (with `\"` and `\\`), and
/// what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => out.push(chars.next()?.1),
            c => out.push(c),
        }
    }
    None
}

/// A line's words: separated by spaces, or double-quoted.
fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        if rest.starts_with('"') {
            let (w, after) =
                quoted(rest).ok_or_else(|| format!("an unclosed quote in {line:?}"))?;
            out.push(w);
            rest = after.trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            out.push(rest[..end].to_owned());
            rest = rest[end..].trim_start();
        }
    }
    Ok(out)
}

async fn send(args: &Args, txn: Read) -> Result<(), Failure> {
    let addrs = args.endpoints.list();
    let cluster = cli::connect_cluster(&args.endpoints, &addrs).await?;
    let failed = |e: Error| Failure::new(exit::FAILED, cli::explain(&e, &addrs));
    let list = |ops: &[(Kind, Value)]| Value::List(ops.iter().map(|(_, v)| v.clone()).collect());
    let call_args = vec![
        Value::List(txn.compares.clone()),
        list(&txn.success),
        list(&txn.failure),
    ];
    let op = cluster
        .invoke("kv.txn", call_args, args.level)
        .await
        .map_err(failed)?;
    let view = op.final_view().await.map_err(failed)?;
    let answer = view
        .outcome
        .map_err(|abort| Failure::new(exit::ABORTED, format!("kv.txn aborted: {abort}")))?;
    let (succeeded, results) = match answer {
        Value::List(mut two) if two.len() == 2 => match (two.remove(0), two.remove(0)) {
            (Value::Bool(s), Value::List(r)) => (s, r),
            _ => {
                return Err(Failure::new(
                    exit::FAILED,
                    "kv.txn answered an unknown shape",
                ))
            }
        },
        other => {
            return Err(Failure::new(
                exit::FAILED,
                format!("kv.txn answered {other}, not [succeeded, results]"),
            ))
        }
    };
    let ran = if succeeded {
        &txn.success
    } else {
        &txn.failure
    };
    print(args.output.output, succeeded, ran, &results);
    Ok(())
}

/// Print the outcome as etcdctl does (`-o table`), or as one JSON object.
fn print(format: Format, succeeded: bool, ran: &[(Kind, Value)], results: &[Value]) {
    if format == Format::Json {
        let results: Vec<_> = results.iter().map(cli::value_json).collect();
        out!(
            "{}",
            serde_json::json!({ "succeeded": succeeded, "results": results })
        );
        return;
    }
    out!("{}", if succeeded { "SUCCESS" } else { "FAILURE" });
    for ((kind, op), result) in ran.iter().zip(results) {
        out!();
        let key = match op {
            Value::List(items) => items.get(1).cloned().unwrap_or(Value::Nil),
            _ => Value::Nil,
        };
        match (kind, result) {
            (Kind::Put, _) => out!("OK"),
            (Kind::Del, Value::Bool(existed)) => out!("{}", u8::from(*existed)),
            (Kind::Get, Value::Bytes(v)) => print_pair(format, &key, v),
            (Kind::Get, _) => {}
            (Kind::GetPrefix, Value::List(page)) => {
                if let Some(Value::List(items)) = page.first() {
                    for item in items {
                        if let Value::List(kv) = item {
                            if let [k, Value::Bytes(v)] = kv.as_slice() {
                                print_pair(format, k, v);
                            }
                        }
                    }
                }
            }
            (Kind::DelPrefix, Value::List(page)) => {
                out!("{}", page.first().cloned().unwrap_or(Value::Int(0)));
            }
            (_, other) => out!("{other}"),
        }
    }
}

fn print_pair(format: Format, key: &Value, value: &Bytes) {
    let k = match key {
        Value::Bytes(k) => k.escape_ascii().to_string(),
        other => other.to_string(),
    };
    match format {
        Format::Value => out!("{}", value.escape_ascii()),
        _ => {
            out!("{k}");
            out!("{}", value.escape_ascii());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn etcdctl_txn_input_is_read_into_kv_txn_arguments() {
        let input = "value(\"user/1\") = \"alice\"\nvalue(\"lock\") = nil\nmod(\"k\") > \"3\"\n\nput user/1 bob\nput \"a key\" \"a \\\"quoted\\\" value\"\ndel lock\n\nget user/1\nget user/ --prefix\n";
        let read = read(input.as_bytes(), false).expect("reads");
        assert_eq!(
            read.compares,
            vec![
                Value::List(vec![b("user/1"), b("value"), b("="), b("alice")]),
                Value::List(vec![b("lock"), b("value"), b("="), Value::Nil]),
                Value::List(vec![b("k"), b("mod"), b(">"), Value::Int(3)]),
            ]
        );
        assert_eq!(
            read.success,
            vec![
                (
                    Kind::Put,
                    Value::List(vec![b("put"), b("user/1"), b("bob")])
                ),
                (
                    Kind::Put,
                    Value::List(vec![b("put"), b("a key"), b("a \"quoted\" value")])
                ),
                (Kind::Del, Value::List(vec![b("delete"), b("lock")])),
            ]
        );
        assert_eq!(
            read.failure,
            vec![
                (Kind::Get, Value::List(vec![b("get"), b("user/1")])),
                (
                    Kind::GetPrefix,
                    Value::List(vec![b("scan"), b("user/"), b("user0"), Value::Int(1000)])
                ),
            ]
        );
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        for (input, says) in [
            ("value(user) = \"x\"\n", "line 1: not a compare"),
            ("value(\"k\") ~ \"x\"\n", "line 1: not a compare"),
            ("\nincr k 1\n", "line 2: not an op"),
            ("\n\nput k\n", "line 3: not an op"),
            ("\nput \"k v\n", "line 2: an unclosed quote"),
        ] {
            let e = read(input.as_bytes(), false).expect_err(input);
            assert!(e.contains(says), "{input:?}: {e}");
        }
    }
}
