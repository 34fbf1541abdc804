//! `creek admin`: change and show the replica group of a running cluster.

use creek_client::{pb, Client};

use crate::status_cmd::DEV_ADDRS;

/// Arguments of `creek admin`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A replica's client address; repeat for several (the first that
    /// answers is asked; group changes are sent on to the leader). The
    /// default is the three replicas of `creek dev`.
    #[arg(long = "addr", value_name = "ADDR", default_values = DEV_ADDRS, global = true)]
    addrs: Vec<String>,
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    runtime.block_on(async {
        let client = Client::connect(args.addrs.iter().cloned())
            .await
            .map_err(|e| format!("no replica answered at {:?}: {e}", args.addrs))?;
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
        print_members(&members);
        Ok(())
    })
}

fn print_members(m: &pb::MembersReply) {
    println!(
        "{:<8} {:<15} {:<22} {:<22}",
        "replica", "role", "peer address", "client address"
    );
    for member in &m.members {
        let leader = if member.replica == m.leader {
            " (leader)"
        } else {
            ""
        };
        println!(
            "{:<8} {:<15} {:<22} {:<22}",
            member.replica,
            format!("{}{leader}", member.role),
            member.peer_addr,
            member.client_addr
        );
    }
    println!(
        "as applied by replica {} (last change at log index {})",
        m.replica, m.conf_index
    );
}
