//! The background task that turns the server's `Invoke` stream into a
//! [`crate::Correctable`]'s views.

use std::time::{Duration, Instant};

use creek_proto::pb;
use tonic::Streaming;

use crate::client::Acks;
use crate::correctable::Feeder;
use crate::view::{Outcome, View, ViewKind};
use crate::Error;

/// Most messages read after the closing view while waiting for the stream
/// to end cleanly (the server sends none; this bounds a faulty one).
const DRAIN_MESSAGES_MAX: usize = 4;
/// Longest wait for the stream's end after the closing view.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// How long past the deadline the reader waits for the server's own
/// deadline status, which says why the final view did not come (no
/// quorum, for one) and arrives at the deadline; the reader's own error
/// is for a server that says nothing.
const SERVER_WORD_GRACE: Duration = Duration::from_millis(250);

/// What the reader needs to know about the request.
pub(crate) struct Expect {
    /// Whether a stable view will come; if not, the first view closes.
    pub(crate) final_view: bool,
    /// When the invocation started (views' latency is measured from it).
    pub(crate) start: Instant,
    /// The caller's deadline for the closing view.
    pub(crate) deadline: Option<Instant>,
    /// The caller's timeout, for the deadline error's message.
    pub(crate) timeout: Option<Duration>,
    /// Where to acknowledge the request once its closing view arrived, if
    /// it was sent once.
    pub(crate) ack: Option<(Acks, u64)>,
}

/// Read views until the closing one, an error, or the deadline.
pub(crate) async fn read_views(
    mut stream: Streaming<pb::View>,
    mut feeder: Feeder,
    expect: Expect,
) {
    let mut last_preliminary: Option<Outcome> = None;
    loop {
        let next = match expect.deadline {
            Some(deadline) => {
                let deadline = tokio::time::Instant::from_std(deadline + SERVER_WORD_GRACE);
                match tokio::time::timeout_at(deadline, stream.message()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let within = expect.timeout.unwrap_or_default();
                        feeder.fail(Error::DeadlineExceeded(format!(
                            "no final view within {within:?}"
                        )));
                        return;
                    }
                }
            }
            None => stream.message().await,
        };
        let wire = match next {
            Ok(Some(wire)) => wire,
            Ok(None) => {
                feeder.fail(Error::Protocol(
                    "the server ended the stream before the final view".into(),
                ));
                return;
            }
            Err(status) => {
                feeder.fail(status.into());
                return;
            }
        };
        let view = match View::from_wire(wire, last_preliminary.as_ref(), expect.start.elapsed()) {
            Ok(view) => view,
            Err(e) => {
                feeder.fail(e);
                return;
            }
        };
        let closes = view.kind.is_stable() || !expect.final_view;
        if view.kind == ViewKind::Preliminary {
            last_preliminary = Some(view.outcome.clone());
        }
        feeder.view(view, closes);
        if closes {
            if let Some((acks, seq)) = &expect.ack {
                acks.push(*seq);
            }
            drop(feeder);
            drain(stream).await;
            return;
        }
    }
}

/// Read the stream to its end, so the call finishes rather than being
/// cancelled (a cancelled call looks like a failure in the server's
/// metrics).
async fn drain(mut stream: Streaming<pb::View>) {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        for _ in 0..DRAIN_MESSAGES_MAX {
            if !matches!(stream.message().await, Ok(Some(_))) {
                break;
            }
        }
    })
    .await;
}
