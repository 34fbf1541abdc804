//! `creek admin`: change and show the replica group of a running cluster.

use creek_client::{pb, Client};

use crate::cli::{self, Endpoints, Format, Output};

/// Arguments of `creek admin`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where the cluster is (the first replica that answers is asked; group
    /// changes are sent on to the leader).
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Add a replica under a new id (above every id the cluster ever had):
    /// it joins as a learner and becomes a voter once caught up. Start its
    /// `creek serve` with a configuration that lists the current members
    /// and itself (docs/operations.md, "Adding and removing replicas").
    AddReplica {
        /// The new replica's id.
        id: u16,
        /// Where it listens for peers (host:port).
        #[arg(long)]
        peer_addr: String,
        /// Where it serves clients (host:port).
        #[arg(long)]
        client_addr: String,
    },
    /// Remove a replica (it may be down). Removing the leader hands
    /// leadership to another voter first.
    RemoveReplica {
        /// The replica's id.
        id: u16,
    },
    /// Show the members, their roles and addresses.
    Members,
}

/// Run `creek admin`.
pub fn run(args: &Args) -> Result<(), String> {
    cli::runtime()?.block_on(async {
        let addrs = args.endpoints.list();
        let options = args.endpoints.options().map_err(|f| f.message)?;
        let client = Client::connect_with_options(addrs.iter().cloned(), options)
            .await
            .map_err(|e| format!("no replica answered: {}", cli::explain(&e, &addrs)))?;
        let members = match &args.command {
            Command::AddReplica {
                id,
                peer_addr,
                client_addr,
            } => client
                .add_replica(*id, peer_addr, client_addr)
                .await
                .map_err(|e| format!("adding replica {id}: {e}"))?,
            Command::RemoveReplica { id } => client
                .remove_replica(*id)
                .await
                .map_err(|e| format!("removing replica {id}: {e}"))?,
            Command::Members => client
                .members()
                .await
                .map_err(|e| format!("asking for the members: {e}"))?,
        };
        match args.output.output {
            Format::Table => print_members(&members),
            Format::Json => {
                for m in &members.members {
                    let j = serde_json::json!({
                        "replica": m.replica,
                        "role": m.role,
                        "leader": m.replica == members.leader,
                        "peer_addr": m.peer_addr,
                        "client_addr": m.client_addr,
                    });
                    out!("{j}");
                }
            }
            Format::Value => {
                for m in &members.members {
                    out!("{}", m.replica);
                }
            }
        }
        Ok(())
    })
}

fn print_members(m: &pb::MembersReply) {
    out!(
        "{:<8} {:<15} {:<22} {:<22}",
        "replica",
        "role",
        "peer address",
        "client address"
    );
    for member in &m.members {
        let leader = if member.replica == m.leader {
            " (leader)"
        } else {
            ""
        };
        out!(
            "{:<8} {:<15} {:<22} {:<22}",
            member.replica,
            format!("{}{leader}", member.role),
            member.peer_addr,
            member.client_addr
        );
    }
    out!(
        "as applied by replica {} (last change at log index {})",
        m.replica,
        m.conf_index
    );
}
