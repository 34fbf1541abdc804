//! `creek watch`: print the changes under a key prefix as they commit.

use creek_client::{WatchEvent, WatchOptions};

use crate::cli::{self, Endpoints, Format, Output};
use tokio_stream::StreamExt as _;

/// Arguments of `creek watch`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where the cluster is; give several so the watch can resume at the
    /// next ones when its replica fails.
    #[command(flatten)]
    endpoints: Endpoints,
    /// `-o table` one line per change, `-o json` one object per line,
    /// `-o value` the new values alone (one per line).
    #[command(flatten)]
    output: Output,
    /// The first committed position wanted (a position printed earlier,
    /// plus one, resumes after it); the default is changes from now on.
    #[arg(long, value_name = "POS")]
    from: Option<u64>,
    /// Also print tentative changes (marked; they may be corrected or
    /// never commit).
    #[arg(long)]
    tentative: bool,
    /// Watch the keys of this keyspace (written by user procedures)
    /// instead of the built-in data; PREFIX is within the keyspace.
    #[arg(long, value_name = "NAME")]
    keyspace: Option<String>,
    /// Keys starting with this (text; empty: every key).
    #[arg(value_name = "PREFIX", default_value = "")]
    prefix: String,
}

/// Run `creek watch` until interrupted or the watch fails.
pub fn run(args: &Args) -> Result<(), String> {
    cli::runtime()?.block_on(watch(args))
}

async fn watch(args: &Args) -> Result<(), String> {
    use std::io::Write as _;
    let addrs = args.endpoints.list();
    let client = cli::connect(&args.endpoints, &addrs)
        .await
        .map_err(|f| f.message)?;
    let options = WatchOptions {
        from: args.from,
        tentative: args.tentative,
        keyspace: args.keyspace.clone(),
    };
    let mut events = std::pin::pin!(client.watch(args.prefix.as_bytes(), options));
    let mut out = std::io::stdout();
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| cli::explain(&e, &addrs))?;
        let line = match args.output.output {
            Format::Json => to_json(&event),
            Format::Table => to_text(&event),
            Format::Value => match &event.value {
                Some(v) => v.escape_ascii().to_string(),
                None => String::new(),
            },
        };
        // A closed pipe (`creek watch | head`) ends the watch quietly.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// `POSITION OP put KEY VALUE` or `POSITION OP delete KEY`; a tentative
/// change starts with `~` and ends with `(tentative)`.
pub fn to_text(e: &WatchEvent) -> String {
    let pos = if e.tentative {
        "~".to_owned()
    } else {
        e.position.to_string()
    };
    let change = match &e.value {
        Some(v) => format!("put {} {}", e.key.escape_ascii(), v.escape_ascii()),
        None => format!("delete {}", e.key.escape_ascii()),
    };
    let mark = if e.tentative { " (tentative)" } else { "" };
    format!("{pos} {} {change}{mark}", e.op)
}

/// One JSON object: bytes as text when they are UTF-8, as hex otherwise
/// (`key_hex`, `value_hex`).
pub fn to_json(e: &WatchEvent) -> String {
    let mut o = serde_json::Map::new();
    o.insert("position".into(), e.position.into());
    o.insert("tentative".into(), e.tentative.into());
    o.insert("op".into(), e.op.to_string().into());
    let mut bytes = |name: &str, b: &[u8]| match std::str::from_utf8(b) {
        Ok(s) => {
            o.insert(name.into(), s.into());
        }
        Err(_) => {
            o.insert(format!("{name}_hex"), cli::hex(b).into());
        }
    };
    bytes("key", &e.key);
    match &e.value {
        Some(v) => bytes("value", v),
        None => {
            o.insert("value".into(), serde_json::Value::Null);
        }
    }
    o.insert("deleted".into(), e.value.is_none().into());
    serde_json::Value::Object(o).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use creek_client::OpRef;

    fn event(value: Option<&'static [u8]>, tentative: bool) -> WatchEvent {
        WatchEvent {
            key: Bytes::from_static(b"user/1"),
            value: value.map(Bytes::from_static),
            op: OpRef { origin: 2, seq: 7 },
            position: 41,
            tentative,
        }
    }

    #[test]
    fn text_lines() {
        assert_eq!(
            to_text(&event(Some(b"alice"), false)),
            "41 r2.7 put user/1 alice"
        );
        assert_eq!(to_text(&event(None, false)), "41 r2.7 delete user/1");
        assert_eq!(
            to_text(&event(Some(b"\xff"), true)),
            "~ r2.7 put user/1 \\xff (tentative)"
        );
    }

    #[test]
    fn json_objects() {
        let v: serde_json::Value =
            serde_json::from_str(&to_json(&event(Some(b"\xff"), false))).expect("json");
        assert_eq!(v["position"], 41);
        assert_eq!(v["op"], "r2.7");
        assert_eq!(v["key"], "user/1");
        assert_eq!(v["value_hex"], "ff");
        assert_eq!(v["deleted"], false);
        let v: serde_json::Value =
            serde_json::from_str(&to_json(&event(None, false))).expect("json");
        assert!(v["value"].is_null());
        assert_eq!(v["deleted"], true);
    }
}
