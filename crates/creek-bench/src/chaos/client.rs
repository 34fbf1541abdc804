//! The chaos clients: each issues one op at a time, weak or strong, to its
//! home replica and records every attempt with the op's id and each view
//! as it arrives. An attempt that fails is tried again with the same
//! request id until it gets what it asked for; a client moves to another
//! replica only when its home leaves the group. Even-numbered clients
//! speak raw gRPC, as a client in any language would (the id from the
//! `creek-op` response header); odd-numbered ones use the Rust client,
//! which invokes over the native protocol (the id from
//! `Correctable::op`), so both paths users take are checked.

use std::sync::Arc;
use std::time::Duration;

use creek_check::history::{OpRecord, SeenView};
use creek_client::{Levels, View, ViewKind as ClientViewKind};
use creek_core::ViewKind;
use creek_exec::{Abort, ProcCall};
use creek_proto::pb;
use creek_sim::rng::Rng;
use creek_sim::workload::Workload;
use creek_types::value::decode_args;
use creek_types::ClientRequestId;

use super::world::{Membership, World};

/// How long one attempt may take before the client gives up on it.
pub(crate) const OP_TIMEOUT: Duration = Duration::from_secs(4);

/// A client's workload, shared by the clients that run it (a workload
/// keeps state across clients, e.g. the values last written).
pub(crate) type Shared = Arc<std::sync::Mutex<Box<dyn Workload>>>;

/// One op to issue, as a workload gives it.
pub(crate) struct Op {
    pub(crate) call: ProcCall,
    pub(crate) strong: bool,
    pub(crate) wants_final: bool,
}

/// A view as the checkers read it.
fn seen(view: View, at_us: u64) -> SeenView {
    SeenView {
        at_us,
        kind: match view.kind {
            ClientViewKind::Preliminary => ViewKind::Tentative,
            ClientViewKind::Final => ViewKind::Stable,
            ClientViewKind::Confirmed => ViewKind::Confirmation,
            ClientViewKind::Snapshot => ViewKind::Snapshot,
        },
        outcome: view.outcome.map(|v| v.encode()).map_err(Abort::new),
        time: view.time,
    }
}

/// One attempt of `call` at replica `replica` (0-based) by `client`,
/// recorded in the history unless nothing came back (no op id, no view:
/// the op was not accepted). Returns whether it is done: a strong op got
/// its final view, a weak op its preliminary one.
pub(crate) async fn attempt(
    world: &World,
    client: u32,
    replica: usize,
    op: &Op,
    natives: &mut Natives,
) -> bool {
    let Some((channel, addr, serving)) = world
        .lock()
        .slots
        .get(replica)
        .map(|s| (s.channel.clone(), s.addr, s.serving()))
    else {
        return false;
    };
    let Some(id) = op.call.request_id else {
        return false;
    };
    let args = decode_args(&op.call.args).unwrap_or_default();
    let levels = if op.strong {
        Levels::Both
    } else {
        Levels::Weak
    };
    let request = pb::InvokeRequest {
        durability: 0,
        procedure: op.call.name.to_string(),
        args: args.iter().map(creek_proto::to_wire).collect(),
        levels: levels.to_wire(),
        weak_final: !op.strong && op.wants_final,
        client_id: id.client,
        request_seq: id.seq,
        acked: Vec::new(),
        read_time: 0,
        read_exact: false,
        revision: 0,
    };
    let mut request = tonic::Request::new(request);
    request.set_timeout(OP_TIMEOUT);
    let mut record = OpRecord {
        client,
        replica,
        id: None,
        call: op.call.clone(),
        strong: op.strong,
        wants_final: op.strong || op.wants_final,
        invoked_at_us: world.now_us(),
        views: Vec::new(),
        origin_crashed: false,
        origin_left: false,
        lost: false,
    };
    let native = client % 2 == 1;
    let run = async {
        if native {
            return run_native(natives, replica, addr, op, &args, id, &mut record, world).await;
        }
        let response = pb::creek_client::CreekClient::new(channel)
            .invoke(request)
            .await
            .map_err(|s| s.message().to_owned())?;
        record.id = response
            .metadata()
            .get(creek_server::service::OP_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let mut stream = response.into_inner();
        let mut last_preliminary = None;
        while let Some(view) = stream.message().await.map_err(|s| s.message().to_owned())? {
            let view = View::from_wire(view, last_preliminary.as_ref(), Duration::ZERO)
                .map_err(|e| e.to_string())?;
            if view.kind == ClientViewKind::Preliminary {
                last_preliminary = Some(view.outcome.clone());
            }
            record.views.push(seen(view, world.now_us()));
        }
        Ok::<(), String>(())
    };
    let ended = tokio::time::timeout(OP_TIMEOUT + Duration::from_secs(1), run).await;
    if native && !matches!(ended, Ok(Ok(()))) {
        // Its connection may be what failed: the next attempt makes one.
        natives.remove(&replica);
    }
    // A weak op with a preliminary view is in the system: asking again
    // would only wait for the final view once more.
    let done = if op.strong {
        record.final_view().is_some()
    } else {
        !record.views.is_empty()
    };
    // A restarted replica refuses calls while it runs its recovered ops
    // again: not serving yet, as before its start.
    let recovering = matches!(&ended, Ok(Err(why)) if why.contains(RECOVERING));
    let mut state = world.lock();
    if !op.strong && serving && !recovering {
        let answered = match ended {
            _ if !record.views.is_empty() => Ok(()),
            Ok(Err(why)) => Err(why),
            _ => Err("no answer".to_owned()),
        };
        state
            .weak_attempts
            .push((replica, record.invoked_at_us, answered));
    }
    if record.id.is_some() || !record.views.is_empty() {
        state.history.push(record);
    }
    done
}

/// What a replica's refusal says while it runs its recovered ops again
/// (creek-server's node loop).
const RECOVERING: &str = "ops it recovered from its data directory again";

/// A client's Rust clients, one per replica it sent to (each connected to
/// that replica alone: the chaos client chooses where its ops go).
pub(crate) type Natives = std::collections::HashMap<usize, creek_client::Client>;

/// One attempt through the Rust client: the op's id and each view into
/// `record` as they come.
#[allow(clippy::too_many_arguments)]
async fn run_native(
    natives: &mut Natives,
    replica: usize,
    addr: std::net::SocketAddr,
    op: &Op,
    args: &[creek_types::value::Value],
    id: ClientRequestId,
    record: &mut OpRecord,
    world: &World,
) -> Result<(), String> {
    let client = match natives.get(&replica) {
        Some(c) => c.clone(),
        None => {
            let c = world
                .connect([addr.to_string()])
                .await
                .map_err(|e| e.to_string())?;
            natives.insert(replica, c.clone());
            c
        }
    };
    let levels = if op.strong {
        Levels::Both
    } else {
        Levels::Weak
    };
    let options = creek_client::CallOptions {
        durability: creek_client::Durability::None,
        revision: None,
        timeout: Some(OP_TIMEOUT),
        weak_final: !op.strong && op.wants_final,
        request_id: Some(creek_client::RequestId {
            client: id.client,
            seq: id.seq,
        }),
    };
    let correctable = client
        .invoke_with(op.call.name.to_string(), args.to_vec(), levels, options)
        .await
        .map_err(|e| e.to_string())?;
    record.id = correctable.op().and_then(|o| o.to_string().parse().ok());
    let mut views = correctable.views();
    while let Some(view) = views.next_view().await {
        let view = view.map_err(|e| e.to_string())?;
        record.views.push(seen(view, world.now_us()));
    }
    Ok(())
}

/// Run `op` at `home` until an attempt gets what it asked for, or the
/// clients are stopped (with `stop_too`). Moves `home` when it leaves the
/// group.
async fn until_done(
    world: &World,
    client: u32,
    home: &mut usize,
    op: &Op,
    rng: &mut Rng,
    stop_too: bool,
    natives: &mut Natives,
) -> bool {
    loop {
        if attempt(world, client, *home, op, natives).await {
            return true;
        }
        if stop_too && world.clients_stopped() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(rng.range(100, 300))).await;
        stay_in_group(world, client, home, rng);
    }
}

/// Move `home` to a member if it left the group; the client's ops there
/// without a final view are abandoned (it never learns their outcome).
fn stay_in_group(world: &World, client: u32, home: &mut usize, rng: &mut Rng) {
    let mut state = world.lock();
    if state.slots[*home].membership == Membership::Member {
        return;
    }
    let members = state.members();
    if members.is_empty() {
        return;
    }
    let old = *home;
    *home = members[rng.index(members.len())];
    for r in state.history.iter_mut() {
        if r.client == client && r.replica == old && r.final_view().is_none() {
            r.origin_left = true;
        }
    }
}

/// A client: ops from `workload` until the clients are stopped; with
/// `weak_only`, each of them weak and content with its preliminary view
/// (such a client keeps working in a minority, where strong ops and final
/// views wait for the partition to heal).
pub(crate) async fn run(
    world: Arc<World>,
    client: u32,
    client_id: u64,
    mut home: usize,
    workload: Shared,
    weak_only: bool,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let mut seq = 0;
    let mut natives = Natives::new();
    while !world.clients_stopped() {
        stay_in_group(&world, client, &mut home, &mut rng);
        let next = workload
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .next_op(&mut rng, client);
        seq += 1;
        let mut call = next.call;
        call.request_id = Some(ClientRequestId {
            client: client_id,
            seq,
        });
        let op = Op {
            call,
            strong: next.strong && !weak_only,
            wants_final: next.wants_final && !weak_only,
        };
        until_done(&world, client, &mut home, &op, &mut rng, true, &mut natives).await;
        if weak_only {
            // Preliminary views come back in microseconds: without a pause,
            // a few clients would offer more than consensus commits, and
            // the run would measure overload instead of faults.
            tokio::time::sleep(Duration::from_millis(rng.range(5, 15))).await;
        }
    }
}

/// Run `calls` strong, one after the other, as `client` (setup calls and
/// final reads), each until it has its final view. Fails past `within`.
pub(crate) async fn run_strong(
    world: &World,
    client: u32,
    client_id: u64,
    calls: Vec<ProcCall>,
    seed: u64,
    within: Duration,
) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let mut natives = Natives::new();
    let mut home = world.lock().members().first().copied().unwrap_or(0);
    let deadline = tokio::time::Instant::now() + within;
    for (seq, mut call) in (1..).zip(calls) {
        call.request_id = Some(ClientRequestId {
            client: client_id,
            seq,
        });
        let name = call.name.to_string();
        let op = Op {
            call,
            strong: true,
            wants_final: true,
        };
        let done = tokio::time::timeout_at(
            deadline,
            until_done(world, client, &mut home, &op, &mut rng, false, &mut natives),
        )
        .await;
        if done.is_err() {
            return Err(format!(
                "{name} got no final view within {} s",
                within.as_secs()
            ));
        }
    }
    Ok(())
}
