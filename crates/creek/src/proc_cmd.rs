//! `creek proc`: the procedures a cluster runs and their signatures —
//! the built-ins and the user procedures registered from source files
//! (docs/procedures.md).

use std::path::PathBuf;

use bytes::Bytes;
use creek_client::{pb, Levels};
use creek_types::value::Value;

use crate::cli::{self, exit, Endpoints, Failure, Format, Output};

/// Arguments of `creek proc`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Every procedure with its signature, result and whether it only
    /// reads (user procedures with their version).
    List,
    /// One procedure: its signature, result and what it does; for a user
    /// procedure also its version, keyspaces and source file.
    Show {
        /// The procedure, e.g. kv.incr.
        name: String,
    },
    /// Compile a source file and register its procedures and keyspaces (a
    /// strong op): each procedure's name and version. A file that does not
    /// compile changes nothing; its errors are printed with line:column.
    Register {
        /// The source file, e.g. examples/procedures/message_groups.creek.
        file: PathBuf,
    },
    /// Remove a user procedure (a strong op; its keyspaces and their data
    /// stay).
    Drop {
        /// The procedure.
        name: String,
    },
}

/// Run `creek proc`.
pub fn run(args: &Args) -> Result<(), Failure> {
    cli::runtime()?.block_on(async {
        let addrs = args.endpoints.list();
        let client = cli::connect(&args.endpoints, &addrs).await?;
        match &args.command {
            Command::Register { file } => {
                return register(&client, &addrs, file, args.output.output).await
            }
            Command::Drop { name } => {
                let arg = vec![Value::Bytes(Bytes::from(name.clone()))];
                let existed = cli::call_closing(&client, &addrs, "proc.drop", arg, Levels::Strong)
                    .await?
                    .map_err(|abort| Failure::new(exit::ABORTED, abort))?;
                if existed != Value::Bool(true) {
                    return Err(Failure::new(
                        exit::FAILED,
                        format!("no user procedure {name:?} to drop"),
                    ));
                }
                out!("dropped {name}");
                return Ok(());
            }
            Command::List | Command::Show { .. } => {}
        }
        let procedures = cli::procedures(&client, &addrs).await?;
        let chosen: Vec<&pb::ProcedureInfo> = match &args.command {
            Command::Show { name } => {
                let p = procedures.iter().find(|p| &p.name == name).ok_or_else(|| {
                    format!("unknown procedure {name:?} (`creek proc list` shows the procedures)")
                })?;
                vec![p]
            }
            _ => procedures.iter().collect(),
        };
        match (args.output.output, &args.command) {
            (Format::Json, _) => {
                for p in chosen {
                    out!("{}", info_json(p));
                }
            }
            (Format::Value, _) => {
                for p in chosen {
                    out!("{}", p.name);
                }
            }
            (Format::Table, Command::Show { name }) => {
                for p in chosen {
                    out!("{}{}", p.name, params(p));
                    out!("  returns    {}", p.returns);
                    out!("  read-only  {}", if p.read_only { "yes" } else { "no" });
                    if p.user {
                        print_user(p);
                        if let Some(source) = source(&client, &addrs, name).await? {
                            out!("  source:");
                            for line in source.lines() {
                                out!("    {line}");
                            }
                        }
                    } else {
                        out!("  {}", p.summary);
                    }
                }
            }
            (Format::Table, _) => out!("{}", table(&chosen)),
        }
        Ok(())
    })
}

/// The lines `creek proc show` adds for a user procedure.
fn print_user(p: &pb::ProcedureInfo) {
    out!("  version    {}", p.version);
    let strong = if p.writes_strong {
        "only: it may write a strong keyspace"
    } else {
        "not needed"
    };
    out!("  strong     {strong}");
    let keyspaces: Vec<String> = p
        .keyspaces
        .iter()
        .map(|k| format!("{} ({})", k.name, k.label))
        .collect();
    out!("  keyspaces  {}", keyspaces.join(", "));
    if !p.summary.is_empty() {
        out!("  {}", p.summary);
    }
}

/// A user procedure's source file, from `proc.show` (`None` if it went
/// meanwhile).
async fn source(
    client: &creek_client::Client,
    addrs: &[String],
    name: &str,
) -> Result<Option<String>, Failure> {
    let arg = vec![Value::Bytes(Bytes::from(name.to_owned()))];
    let shown = cli::call_closing(client, addrs, "proc.show", arg, Levels::Weak)
        .await?
        .map_err(|abort| Failure::new(exit::ABORTED, abort))?;
    match shown {
        Value::List(fields) => Ok(fields.get(2).map(cli::text_of)),
        _ => Ok(None),
    }
}

/// `creek proc register FILE`.
async fn register(
    client: &creek_client::Client,
    addrs: &[String],
    file: &std::path::Path,
    format: Format,
) -> Result<(), Failure> {
    let source = std::fs::read(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let outcome = cli::call_closing(
        client,
        addrs,
        "proc.register",
        vec![Value::Bytes(Bytes::from(source))],
        Levels::Strong,
    )
    .await?;
    let registered = outcome.map_err(|abort| {
        Failure::new(
            exit::ABORTED,
            format!(
                "{} was not registered (nothing changed):\n{abort}",
                file.display()
            ),
        )
    })?;
    for item in cli::list_items("proc.register", registered)? {
        let Value::List(pair) = &item else { continue };
        let (Some(name), Some(version)) = (pair.first(), pair.get(1)) else {
            continue;
        };
        let name = cli::text_of(name);
        match format {
            Format::Json => out!(
                "{}",
                serde_json::json!({ "name": name, "version": cli::value_json(version) })
            ),
            Format::Value => out!("{name}"),
            Format::Table => out!("registered {name} version {version}"),
        }
    }
    Ok(())
}

/// `(key: bytes, delta: int)`, or `(…)` for a procedure without a
/// signature.
pub(crate) fn params(p: &pb::ProcedureInfo) -> String {
    if !p.described {
        return "(…)".into();
    }
    let params: Vec<String> = p
        .params
        .iter()
        .map(|q| format!("{}: {}", q.name, q.r#type))
        .collect();
    format!("({})", params.join(", "))
}

fn info_json(p: &pb::ProcedureInfo) -> serde_json::Value {
    let params: Vec<serde_json::Value> = p
        .params
        .iter()
        .map(|q| serde_json::json!({ "name": q.name, "type": q.r#type }))
        .collect();
    let mut j = serde_json::json!({
        "name": p.name,
        "params": params,
        "returns": p.returns,
        "read_only": p.read_only,
        "summary": p.summary,
    });
    if p.user {
        let keyspaces: Vec<serde_json::Value> = p
            .keyspaces
            .iter()
            .map(|k| serde_json::json!({ "name": k.name, "label": k.label }))
            .collect();
        j["user"] = true.into();
        j["version"] = p.version.into();
        j["writes_strong"] = p.writes_strong.into();
        j["keyspaces"] = keyspaces.into();
    }
    j
}

/// The last column of `creek proc list`: what it does; for a user
/// procedure its version and level first.
fn what(p: &pb::ProcedureInfo) -> String {
    if !p.user {
        return p.summary.clone();
    }
    let level = if p.writes_strong { ", strong only" } else { "" };
    let summary = if p.summary.is_empty() {
        String::new()
    } else {
        format!(" {}", p.summary)
    };
    format!("[user v{}{level}]{summary}", p.version)
}

/// `NAME(PARAMS)  RETURNS  R  SUMMARY`, aligned.
fn table(procedures: &[&pb::ProcedureInfo]) -> String {
    let heads: Vec<String> = procedures
        .iter()
        .map(|p| format!("{}{}", p.name, params(p)))
        .collect();
    let width = heads.iter().map(|h| h.chars().count()).max().unwrap_or(0);
    let returns = procedures
        .iter()
        .map(|p| p.returns.chars().count())
        .max()
        .unwrap_or(0);
    let mut lines = vec![format!(
        "{:<width$}  {:<returns$}  {:<9}  {}",
        "procedure", "returns", "read-only", "what it does"
    )];
    for (p, head) in procedures.iter().zip(&heads) {
        let ro = if p.read_only { "yes" } else { "" };
        lines.push(format!(
            "{head:<width$}  {:<returns$}  {ro:<9}  {}",
            p.returns,
            what(p)
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procedures_print_with_their_signatures() {
        let incr = pb::ProcedureInfo {
            name: "kv.incr".into(),
            params: vec![
                pb::Param {
                    name: "key".into(),
                    r#type: "bytes".into(),
                },
                pb::Param {
                    name: "delta".into(),
                    r#type: "int".into(),
                },
            ],
            returns: "int: new value".into(),
            summary: "Add delta.".into(),
            read_only: false,
            described: true,
            ..Default::default()
        };
        let t = table(&[&incr]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("procedure"));
        assert!(lines[1].starts_with("kv.incr(key: bytes, delta: int)  int: new value"));
        assert_eq!(
            info_json(&incr)["params"][1],
            serde_json::json!({"name": "delta", "type": "int"})
        );
        let bare = pb::ProcedureInfo {
            name: "x".into(),
            ..Default::default()
        };
        assert_eq!(params(&bare), "(…)");
    }
}
