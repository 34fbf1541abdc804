//! A weak write's final view, which the client waits for in the
//! background for the write's commit time (docs/snapshot-reads.md, "The
//! client cache") — or in the call itself when the cache could not hold
//! the write, which is then acknowledged at its commit.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use creek_types::value::Value;

use super::Client;
use crate::causal::ReadAt;
use crate::stream::ViewReader;
use crate::view::Levels;
use crate::{CallOptions, Error, RequestId};

/// How many times a weak write whose stream broke before its final view is
/// sent again to learn its commit time, the pause before each, and the
/// deadline of each.
const SETTLE_RESENDS: usize = 3;
const SETTLE_RETRY: Duration = Duration::from_millis(200);
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A weak write whose final view the client still waits for.
pub(super) struct Settle {
    pub(super) procedure: String,
    pub(super) args: Vec<Value>,
    pub(super) id: RequestId,
}

impl Client {
    pub(super) async fn settle_owned(self, reader: ViewReader, call: Settle) {
        // Nothing waits for it: a write whose final view never came stays
        // in the cache with its commit time unknown.
        let _ = self.settle(reader, call).await;
    }

    /// Read a weak write's stream on to its final view, for its commit
    /// time. If the stream breaks first (its replica failed), send the
    /// request again under its id, as a strong op — applied at most once,
    /// it answers with the op's outcome — a few times.
    pub(super) fn settle(
        &self,
        mut reader: ViewReader,
        call: Settle,
    ) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + '_>> {
        // Boxed: it sends the request again through `invoke_tracked`,
        // which may call it.
        Box::pin(async move {
            let mut last = match reader.follow().await {
                Ok(()) => {
                    reader.finish();
                    return Ok(());
                }
                Err(e) => e,
            };
            let resend = reader.track().resend_on_loss();
            let track = reader.track().resume();
            drop(reader);
            if !resend {
                return Err(last);
            }
            let options = CallOptions {
                durability: crate::pb::Durability::None,
                timeout: Some(SETTLE_TIMEOUT),
                request_id: Some(call.id),
                weak_final: false,
                revision: None,
            };
            let mut track = Some(track);
            for _ in 0..SETTLE_RESENDS {
                tokio::time::sleep(SETTLE_RETRY).await;
                let Some(tracked) = track.take() else { break };
                let next = tracked.resume();
                let read_time = self.inner.causal.dep_time();
                let sent = self
                    .invoke_tracked(
                        call.procedure.clone(),
                        &call.args,
                        Levels::Strong,
                        &options,
                        call.id,
                        false,
                        (tracked, read_time),
                        ReadAt::default(),
                    )
                    .await;
                match sent {
                    Ok(c) => match c.final_view().await {
                        Ok(_) => return Ok(()),
                        Err(e) => last = e,
                    },
                    Err(e) => last = e,
                }
                track = Some(next);
            }
            Err(last)
        })
    }
}
