//! The reader that turns the server's `Invoke` stream (gRPC or native)
//! into a [`crate::Correctable`]'s views: in a background task, or, for a
//! weak op's one view, in the call itself.

use std::time::{Duration, Instant};

use creek_proto::pb;
use tonic::{Status, Streaming};

use crate::causal::Track;
use crate::client::Acks;
use crate::correctable::Feeder;
use crate::native::NativeViews;
use crate::view::{Outcome, View, ViewKind};
use crate::Error;

/// Most messages read after the closing view while waiting for the stream
/// to end cleanly (the server sends none; this bounds a faulty one).
const DRAIN_MESSAGES_MAX: usize = 4;
/// Longest wait for the stream's end after the closing view.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for a followed final view (a weak write's commit).
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(60);

/// How long past the deadline the reader waits for the server's own
/// deadline status, which says why the final view did not come (no
/// quorum, for one) and arrives at the deadline; the reader's own error
/// is for a server that says nothing.
const SERVER_WORD_GRACE: Duration = Duration::from_millis(250);

/// What the reader needs to know about the request.
pub(crate) struct Expect {
    /// Whether a stable view will come (it closes the call).
    pub(crate) final_view: bool,
    /// Without a final view: whether a snapshot view follows a preliminary
    /// one (it closes the call); otherwise the first view closes it.
    pub(crate) snapshot_after_weak: bool,
    /// When the invocation started (views' latency is measured from it).
    pub(crate) start: Instant,
    /// The caller's deadline for the closing view.
    pub(crate) deadline: Option<Instant>,
    /// The caller's timeout, for the deadline error's message.
    pub(crate) timeout: Option<Duration>,
    /// Where to acknowledge the request once its closing view arrived, if
    /// it was sent once.
    pub(crate) ack: Option<(Acks, u64)>,
    /// What the views tell the client's times and cache, and what the
    /// cache lays over a snapshot view.
    pub(crate) track: Track,
    /// Whether the stream goes on past the Correctable's closing view to
    /// the op's final view, which the client reads for its times and cache
    /// only (a weak write's, with the cache on).
    pub(crate) follow: bool,
}

/// The views of one accepted call, from either protocol.
pub(crate) enum ViewSource {
    Grpc(Box<Streaming<pb::View>>),
    Native(NativeViews),
}

impl ViewSource {
    /// The next view; `None` once the call ended.
    async fn message(&mut self) -> Result<Option<pb::View>, Status> {
        match self {
            ViewSource::Grpc(s) => s.message().await,
            ViewSource::Native(n) => n.message().await,
        }
    }
}

/// Reads an `Invoke` stream's views into a Correctable's feeder.
pub(crate) struct ViewReader {
    stream: ViewSource,
    feeder: Feeder,
    expect: Expect,
    /// The last preliminary or snapshot view's outcome as the server sent
    /// it: what a confirmation repeats.
    last_preliminary: Option<Outcome>,
    /// The last view's outcome as the caller was shown it (with the cache
    /// laid over a snapshot view).
    last_shown: Option<Outcome>,
}

impl ViewReader {
    pub(crate) fn new(stream: ViewSource, feeder: Feeder, expect: Expect) -> Self {
        ViewReader {
            stream,
            feeder,
            expect,
            last_preliminary: None,
            last_shown: None,
        }
    }

    /// Read views until the closing one, an error, or the deadline; then
    /// read the stream to its end.
    pub(crate) async fn run(mut self) {
        while self.step().await {}
        self.drain().await;
    }

    /// Read and feed the next view. `false` once the Correctable is closed
    /// (by its closing view or an error): nothing more is fed.
    pub(crate) async fn step(&mut self) -> bool {
        let expect = &self.expect;
        let next = match expect.deadline {
            Some(deadline) => {
                let deadline = tokio::time::Instant::from_std(deadline + SERVER_WORD_GRACE);
                match tokio::time::timeout_at(deadline, self.stream.message()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let within = expect.timeout.unwrap_or_default();
                        self.fail(Error::DeadlineExceeded(format!(
                            "no final view within {within:?}"
                        )));
                        return false;
                    }
                }
            }
            None => self.stream.message().await,
        };
        let wire = match next {
            Ok(Some(wire)) => wire,
            Ok(None) => {
                self.fail(Error::Protocol(
                    "the server ended the stream before the final view".into(),
                ));
                return false;
            }
            Err(status) => {
                self.fail(status.into());
                return false;
            }
        };
        let view =
            match View::from_wire(wire, self.last_preliminary.as_ref(), expect.start.elapsed()) {
                Ok(view) => view,
                Err(e) => {
                    self.fail(e);
                    return false;
                }
            };
        let closes = view.kind.is_stable()
            || (!expect.final_view
                && (!expect.snapshot_after_weak || view.kind == ViewKind::Snapshot));
        if matches!(view.kind, ViewKind::Preliminary | ViewKind::Snapshot) {
            self.last_preliminary = Some(view.outcome.clone());
        }
        let mut view = self.expect.track.on_view(view);
        // A stable view confirms the last view the caller was shown, which
        // differs from the one the server sent where the client cache was
        // laid over a snapshot view.
        let shown = self.last_shown.as_ref() == Some(&view.outcome);
        match view.kind {
            ViewKind::Confirmed if !shown => view.kind = ViewKind::Final,
            ViewKind::Final if shown => view.kind = ViewKind::Confirmed,
            _ => {}
        }
        self.last_shown = Some(view.outcome.clone());
        self.feeder.view(view, closes);
        if closes && !self.following() {
            self.ack();
        }
        !closes
    }

    /// Close the Correctable with `error`.
    fn fail(&mut self, error: Error) {
        self.expect.track.on_failed();
        self.feeder.fail(error);
    }

    fn ack(&self) {
        if let Some((acks, seq)) = &self.expect.ack {
            acks.push(*seq);
        }
    }

    /// Whether the stream is read on past the closing view, to the op's
    /// final view.
    pub(crate) fn following(&self) -> bool {
        self.expect.follow && !self.expect.track.settled()
    }

    /// After the Correctable closed: read the stream to the op's final
    /// view for the client's times and cache. An error if the stream
    /// broke or ended first, or none came within [`FOLLOW_TIMEOUT`].
    pub(crate) async fn follow(&mut self) -> Result<(), Error> {
        let outcome = tokio::time::timeout(FOLLOW_TIMEOUT, async {
            while !self.expect.track.settled() {
                let wire = match self.stream.message().await {
                    Ok(Some(wire)) => wire,
                    Ok(None) => {
                        return Err(Error::Protocol(
                            "the server ended the stream before the final view".into(),
                        ))
                    }
                    Err(status) => return Err(Error::from(status)),
                };
                let view = View::from_wire(
                    wire,
                    self.last_preliminary.as_ref(),
                    self.expect.start.elapsed(),
                )?;
                self.expect.track.on_view(view);
            }
            Ok(())
        })
        .await
        .unwrap_or_else(|_| {
            Err(Error::DeadlineExceeded(format!(
                "no final view within {FOLLOW_TIMEOUT:?}"
            )))
        });
        if outcome.is_ok() {
            self.ack();
        }
        outcome
    }

    /// This call's tracking, to go on with a resend of the request.
    pub(crate) fn track(&self) -> &Track {
        &self.expect.track
    }

    /// Whether the Correctable's closing view comes first: a weak op's one
    /// view.
    pub(crate) fn first_view_closes(&self) -> bool {
        !self.expect.final_view && !self.expect.snapshot_after_weak
    }

    /// Finish the call once the Correctable closed: a gRPC stream is read
    /// to its end in the background (see [`drain`]); a native call needs
    /// nothing (its replica ends it on its own).
    pub(crate) fn finish(self) {
        if matches!(self.stream, ViewSource::Grpc(_)) {
            tokio::spawn(self.drain());
        }
    }

    /// Read the stream to its end (after the Correctable closed).
    pub(crate) async fn drain(self) {
        let ViewReader { stream, feeder, .. } = self;
        drop(feeder);
        drain(stream).await;
    }
}

/// Read the stream to its end, so the call finishes rather than being
/// cancelled (a cancelled call looks like a failure in the server's
/// metrics).
async fn drain(mut stream: ViewSource) {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        for _ in 0..DRAIN_MESSAGES_MAX {
            if !matches!(stream.message().await, Ok(Some(_))) {
                break;
            }
        }
    })
    .await;
}
