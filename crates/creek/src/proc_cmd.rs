//! `creek proc`: the procedures a cluster runs and their signatures.

use creek_client::pb;

use crate::cli::{self, Endpoints, Failure, Format, Output};

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
    /// Every procedure with its signature, result and whether it only reads.
    List,
    /// One procedure: its signature, result and what it does.
    Show {
        /// The procedure, e.g. kv.incr.
        name: String,
    },
}

/// Run `creek proc`.
pub fn run(args: &Args) -> Result<(), Failure> {
    cli::runtime()?.block_on(async {
        let addrs = args.endpoints.list();
        let client = cli::connect(&addrs).await?;
        let procedures = cli::procedures(&client, &addrs).await?;
        let chosen: Vec<&pb::ProcedureInfo> = match &args.command {
            Command::List => procedures.iter().collect(),
            Command::Show { name } => {
                let p = procedures.iter().find(|p| &p.name == name).ok_or_else(|| {
                    format!("unknown procedure {name:?} (`creek proc list` shows the procedures)")
                })?;
                vec![p]
            }
        };
        match (args.output.output, &args.command) {
            (Format::Json, _) => {
                for p in chosen {
                    println!("{}", info_json(p));
                }
            }
            (Format::Value, _) => {
                for p in chosen {
                    println!("{}", p.name);
                }
            }
            (Format::Table, Command::List) => println!("{}", table(&chosen)),
            (Format::Table, Command::Show { .. }) => {
                for p in chosen {
                    println!("{}{}", p.name, params(p));
                    println!("  returns    {}", p.returns);
                    println!("  read-only  {}", if p.read_only { "yes" } else { "no" });
                    println!("  {}", p.summary);
                }
            }
        }
        Ok(())
    })
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
    serde_json::json!({
        "name": p.name,
        "params": params,
        "returns": p.returns,
        "read_only": p.read_only,
        "summary": p.summary,
    })
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
            p.returns, p.summary
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
