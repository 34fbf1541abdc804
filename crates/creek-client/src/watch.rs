//! [`Client::watch`]: the changes under a key prefix as a stream that
//! survives replica failures.
//!
//! Committed changes carry their op's position in the committed order,
//! which is the same on every replica. The stream remembers the position
//! after the last committed change (or progress mark) it received and,
//! when its replica fails, resumes there at another one: the caller sees
//! every committed change exactly once, in the committed order.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_proto::pb;
use futures_util::stream::Stream;
use tonic::Code;

use crate::client::Client;
use crate::Error;

/// How long a watch tries to reconnect before it gives up.
const RECONNECT_WAIT: Duration = Duration::from_secs(30);
/// The pause between two reconnection attempts.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// Options of [`Client::watch`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// The first committed position wanted; `None`: changes committed from
    /// now on.
    pub from: Option<u64>,
    /// Also deliver tentative changes ([`WatchEvent::tentative`]).
    pub tentative: bool,
    /// Watch the keys of this keyspace (of user procedures) instead of the
    /// built-in data; the prefix and the changes' keys are within it.
    pub keyspace: Option<String>,
}

/// An op's id: the replica it was invoked at and its sequence number there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpRef {
    /// The replica that received it.
    pub origin: u32,
    /// Its sequence number there.
    pub seq: u64,
}

impl fmt::Display for OpRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}.{}", self.origin, self.seq)
    }
}

impl OpRef {
    /// An id as replicas write it (`r3.17`); `None` for anything else.
    pub fn parse(s: &str) -> Option<OpRef> {
        let (origin, seq) = s.strip_prefix('r')?.split_once('.')?;
        Some(OpRef {
            origin: origin.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

/// One change to one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// The key.
    pub key: Bytes,
    /// Its new value; `None`: the key was deleted.
    pub value: Option<Bytes>,
    /// The op that made the change.
    pub op: OpRef,
    /// For a committed change, the op's position in the committed order
    /// (several keys of one op share it). For a tentative one, the
    /// committed length when it was sent.
    pub position: u64,
    /// A tentative change: a later execution may correct it, or the op may
    /// never commit. Committed changes are final.
    pub tentative: bool,
}

/// A watch in progress; see [`Client::watch`].
pub(crate) struct Watching {
    client: Client,
    prefix: Bytes,
    tentative: bool,
    keyspace: String,
    /// The position to resume from: every committed change before it was
    /// received (`None`: nothing known yet, resume as first asked).
    next: Option<u64>,
    buffer: VecDeque<WatchEvent>,
    stream: Option<tonic::Streaming<pb::WatchEvent>>,
    done: bool,
}

impl Watching {
    pub(crate) fn new(client: Client, prefix: Bytes, options: WatchOptions) -> Self {
        Watching {
            client,
            prefix,
            tentative: options.tentative,
            keyspace: options.keyspace.unwrap_or_default(),
            next: options.from,
            buffer: VecDeque::new(),
            stream: None,
            done: false,
        }
    }

    /// The stream of events.
    pub(crate) fn into_stream(self) -> impl Stream<Item = Result<WatchEvent, Error>> + Send {
        futures_util::stream::unfold(self, |mut w| async move {
            let item = w.next_event().await?;
            Some((item, w))
        })
    }

    async fn next_event(&mut self) -> Option<Result<WatchEvent, Error>> {
        loop {
            if let Some(e) = self.buffer.pop_front() {
                return Some(Ok(e));
            }
            if self.done {
                return None;
            }
            if self.stream.is_none() {
                match self.open().await {
                    Ok(s) => self.stream = Some(s),
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
            let Some(stream) = self.stream.as_mut() else {
                continue;
            };
            match stream.message().await {
                Ok(Some(m)) => self.take(m),
                // The replica ended the stream or failed: resume elsewhere.
                Ok(None) => self.stream = None,
                Err(status) => {
                    self.stream = None;
                    let e = Error::from(status);
                    if !resumable(&e) {
                        self.done = true;
                        return Some(Err(e));
                    }
                    // Resume at the next replica: this one failed, or (a
                    // compacted position) dropped what we still need and
                    // another one may have it (`open` tells when none has).
                    let failed = self.client.current_index();
                    if !matches!(e, Error::Compacted { .. }) {
                        tokio::time::sleep(RECONNECT_PAUSE).await;
                    }
                    let _ = self.client.fail_over_from(failed).await;
                }
            }
        }
    }

    fn take(&mut self, m: pb::WatchEvent) {
        use pb::watch_event::Kind;
        let kind = Kind::try_from(m.kind).unwrap_or(Kind::Unspecified);
        let op = m.op.map_or(OpRef { origin: 0, seq: 0 }, |o| OpRef {
            origin: o.origin,
            seq: o.seq,
        });
        match kind {
            Kind::Committed => {
                if self.next.is_some_and(|n| m.position < n) {
                    return; // already delivered (never sent twice by a replica)
                }
                self.next = Some(m.position.saturating_add(1));
            }
            Kind::Progress => {
                self.next = Some(self.next.map_or(m.position, |n| n.max(m.position)));
                return;
            }
            Kind::Tentative => {}
            Kind::Unspecified => return,
        }
        let tentative = kind == Kind::Tentative;
        for c in m.changes {
            self.buffer.push_back(WatchEvent {
                key: c.key,
                value: (!c.deleted).then_some(c.value),
                op,
                position: m.position,
                tentative,
            });
        }
    }

    /// Start (or resume) the watch at the current replica, moving on to
    /// the others while it cannot be had there.
    async fn open(&mut self) -> Result<tonic::Streaming<pb::WatchEvent>, Error> {
        let give_up = Instant::now() + RECONNECT_WAIT;
        let replicas = self.client.replica_count();
        let mut compacted = 0;
        loop {
            let channel = self.client.current_channel();
            let index = self.client.current_index();
            let request = pb::WatchRequest {
                prefix: self.prefix.clone(),
                from: self.next,
                tentative: self.tentative,
                keyspace: self.keyspace.clone(),
            };
            let error = match pb::creek_client::CreekClient::new(channel)
                .watch(request)
                .await
            {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) => Error::from(status),
            };
            if !resumable(&error) || Instant::now() >= give_up {
                return Err(error);
            }
            if let Error::Compacted { .. } = error {
                compacted += 1;
                if compacted >= replicas {
                    return Err(error);
                }
            } else {
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
            // No replica answering is one more reason to wait and retry.
            let _ = self.client.fail_over_from(index).await;
        }
    }
}

/// Whether a watch that failed with `e` may resume at another replica.
fn resumable(e: &Error) -> bool {
    match e {
        Error::InvalidArgument(_) | Error::Unauthenticated(_) | Error::PermissionDenied(_) => false,
        Error::Rpc { code, .. } => !matches!(
            code,
            Code::Unimplemented | Code::PermissionDenied | Code::Unauthenticated
        ),
        _ => true,
    }
}
