//! `creek keyspace`: create and list the keyspaces user procedures store
//! their data in (docs/procedures.md, "Keyspaces, registering and
//! calling").

use bytes::Bytes;
use creek_client::Levels;
use creek_types::value::Value;

use crate::cli::{self, exit, Endpoints, Failure, Format, Output};

/// Arguments of `creek keyspace`.
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
    /// Create a keyspace labelled strong or weak (a strong op; nothing
    /// changes if it exists with that label).
    Create {
        /// Its name: letters, digits and `_`.
        name: String,
        /// strong (every replica agrees on its writes, in one order) or
        /// weak (fast, eventually consistent).
        #[arg(value_parser = ["strong", "weak"])]
        label: String,
    },
    /// Every keyspace with its label.
    List,
}

/// Run `creek keyspace`.
pub fn run(args: &Args) -> Result<(), Failure> {
    cli::runtime()?.block_on(async {
        let addrs = args.endpoints.list();
        let client = cli::connect(&args.endpoints, &addrs).await?;
        match &args.command {
            Command::Create { name, label } => {
                let call = [name, label].map(|s| Value::Bytes(Bytes::from(s.clone())));
                let outcome = cli::call_closing(
                    &client,
                    &addrs,
                    "keyspace.create",
                    call.to_vec(),
                    Levels::Strong,
                )
                .await?;
                outcome.map_err(|abort| Failure::new(exit::ABORTED, abort))?;
                if args.output.output == Format::Json {
                    out!("{}", serde_json::json!({ "name": name, "label": label }));
                } else {
                    out!("keyspace {name} is {label}");
                }
            }
            Command::List => {
                // Weak: answered by the replica at once, from its latest state.
                let outcome =
                    cli::call_closing(&client, &addrs, "keyspace.list", Vec::new(), Levels::Weak)
                        .await?
                        .map_err(|abort| Failure::new(exit::ABORTED, abort))?;
                for item in cli::list_items("keyspace.list", outcome)? {
                    let Value::List(pair) = &item else { continue };
                    let (Some(name), Some(label)) = (pair.first(), pair.get(1)) else {
                        continue;
                    };
                    let (name, label) = (cli::text_of(name), cli::text_of(label));
                    match args.output.output {
                        Format::Json => {
                            out!("{}", serde_json::json!({ "name": name, "label": label }))
                        }
                        Format::Value => out!("{name}"),
                        Format::Table => out!("{name:<24}  {label}"),
                    }
                }
            }
        }
        Ok(())
    })
}
