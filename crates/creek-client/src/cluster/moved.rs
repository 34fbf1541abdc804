//! Calls whose keys moved to another shard as they ran (docs/shards.md,
//! "Moving keys between shards"): a shard that no longer owns a key when
//! an op on it executes aborts the op with `WRONG_SHARD`, unrecorded, so
//! it was applied nowhere. The client then learns the map anew and sends
//! the call again, under the same request id, to the shard that owns the
//! key now: the caller's Correctable carries the views of the attempt
//! that ends it (a weak op's preliminary view of the first attempt
//! included: the final view corrects it).

use creek_types::value::Value;

use super::{wrong_shard_pause, Cluster, WRONG_SHARD_RETRIES};
use crate::client::RequestId;
use crate::{CallOptions, Correctable, Levels};

/// Whether `outcome` is the abort of an execution at a shard that no
/// longer owns the key.
fn moved(outcome: &crate::Outcome) -> bool {
    outcome
        .as_ref()
        .is_err_and(|abort| abort.starts_with("WRONG_SHARD"))
}

impl Cluster {
    /// `op`, sent under request id `id`, as the caller sees it: its views,
    /// but for a closing `WRONG_SHARD` abort, which sends the call again
    /// to the key's owner (at most [`WRONG_SHARD_RETRIES`] times, pausing
    /// as after a refusal) and
    /// carries on with that attempt's views.
    pub(super) fn follow_moves(
        &self,
        op: Correctable,
        procedure: String,
        args: Vec<Value>,
        levels: Levels,
        options: CallOptions,
        id: RequestId,
    ) -> Correctable {
        let (mut feeder, out) = Correctable::channel();
        let cluster = self.clone();
        tokio::spawn(async move {
            let mut op = op;
            let mut attempt = 0;
            loop {
                let mut views = op.views();
                let mut seen = 0;
                let mut again = false;
                while let Some(next) = views.next_view().await {
                    let view = match next {
                        Ok(view) => view,
                        Err(e) => return feeder.fail(e),
                    };
                    seen += 1;
                    let closes = op.closed_with() == Some(seen);
                    if closes && moved(&view.outcome) && attempt < WRONG_SHARD_RETRIES {
                        again = true;
                        break;
                    }
                    feeder.view(view, closes);
                }
                if !again {
                    return;
                }
                attempt += 1;
                wrong_shard_pause(attempt).await;
                if let Err(e) = cluster.refresh().await {
                    return feeder.fail(e);
                }
                let placed = cluster.placed(&procedure).await;
                let routes = cluster.inner.routes.read().await.clone();
                let Some(shard) = routes.shard_of(&placed, &args) else {
                    return;
                };
                let client = match routes.client(shard) {
                    Ok(c) => c,
                    Err(e) => return feeder.fail(e),
                };
                let options = CallOptions {
                    request_id: Some(id),
                    ..options
                };
                op = match cluster
                    .send_routed(
                        &procedure, &args, levels, &options, id, false, placed, shard, client,
                    )
                    .await
                {
                    Ok(op) => op,
                    Err(e) => return feeder.fail(e),
                };
            }
        });
        out
    }
}
