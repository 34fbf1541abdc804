//! A native connection's writing side ([`Out`]), shared by its task and
//! the node loop, and the node loop's handle on one call ([`Call`]).
//!
//! A call id is in the connection's table of open calls exactly while the
//! call is in flight: from the moment the connection hands it to the node
//! loop until its closing frame (`End` or `Error`) is queued, by the node
//! loop or by the deadline. Only open calls get frames.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::BytesMut;
use creek_core::{ExecKey, Views};
use creek_proto::native::{self, Kind};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::call::answer::{
    answer, first_view, op_name, put_error, to_pb_view, Answer, Gone, Reply,
};
use crate::limits::Close;
use crate::metrics::Metrics;

/// A connection's writing side, shared by its task and the node loop.
///
/// Order: bytes reach the socket in the order they were handed over. A
/// sender writes to the socket itself only while nothing is pending and the
/// task is not writing; otherwise its bytes join `pending`, which the task
/// writes, so frames never interleave.
pub(super) struct Out {
    socket: Arc<TcpStream>,
    /// Bytes queued and not yet written, at most: past it the client reads
    /// too slowly, and the connection breaks ([`OutState::overflowed`]).
    queued_max: usize,
    state: Mutex<OutState>,
    /// Wakes the task: bytes are pending, or the connection broke.
    pub(super) wake: Notify,
}

/// Where an open call stands: what the node loop may send it next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Handed to the node loop: its first reply says accepted or refused.
    Handed,
    /// Accepted as this op: views follow.
    Accepted(ExecKey),
    /// It had its first view (the `answered` stage is timed).
    Viewed(ExecKey),
}

#[derive(Default)]
pub(super) struct OutState {
    /// Bytes waiting for the task.
    pending: BytesMut,
    /// The task has taken bytes it has not finished writing.
    writing: bool,
    /// The connection is gone: nothing more is written.
    pub(super) broken: bool,
    /// It broke because its client left more than the queue holds unread.
    pub(super) overflowed: bool,
    /// The calls still open (no closing frame written), and where each
    /// stands; see [`OutState::open_call`] and [`OutState::close_call`].
    open: HashMap<u64, Phase>,
    /// Frames the node loop wrote this turn, written at its end
    /// ([`Corked`]).
    corked: BytesMut,
    /// The connection's TLS session, if it has one: what is written is
    /// sealed in it first, and `pending` holds its records
    /// ([`super::tls`]).
    pub(super) tls: Option<rustls::ServerConnection>,
}

impl OutState {
    /// Calls in flight.
    pub(super) fn calls_open(&self) -> usize {
        self.open.len()
    }

    /// Whether call `id` is in flight.
    pub(super) fn is_open(&self, id: u64) -> bool {
        self.open.contains_key(&id)
    }

    /// Call `id` is handed to the node loop: it is in flight until its
    /// closing frame. The connection refuses an id already in flight and a
    /// call past `calls_max` before it gets here.
    pub(super) fn open_call(&mut self, id: u64, calls_max: usize) {
        let fresh = self.open.insert(id, Phase::Handed).is_none();
        assert!(fresh, "call {id} opened while in flight");
        assert!(
            self.open.len() <= calls_max,
            "{} calls in flight, over the limit of {calls_max}",
            self.open.len()
        );
    }

    /// Call `id`'s closing frame is queued (or it never reached the node
    /// loop): no frame for it follows. `None` if it was not open, else
    /// the op it was accepted as, if it was.
    pub(super) fn close_call(&mut self, id: u64) -> Option<Option<ExecKey>> {
        self.open.remove(&id).map(|phase| match phase {
            Phase::Handed => None,
            Phase::Accepted(op) | Phase::Viewed(op) => Some(op),
        })
    }

    /// Whether `more` bytes fit beside those queued under `queued_max`;
    /// if not, the connection is broken as overflowed.
    fn room_for(&mut self, more: usize, queued_max: usize) -> bool {
        if self.pending.len() + self.corked.len() + more <= queued_max {
            return true;
        }
        self.broken = true;
        self.overflowed = true;
        false
    }
}

impl Out {
    /// The writing side of `socket` (through `tls`, if given), queueing
    /// at most `queued_max` bytes.
    pub(super) fn new(
        socket: Arc<TcpStream>,
        queued_max: usize,
        mut tls: Option<rustls::ServerConnection>,
    ) -> Out {
        if let Some(tls) = tls.as_mut() {
            // `seal` empties the session's buffer each time, so it needs
            // no bound of its own (the queue's bound applies to what is
            // sealed).
            tls.set_buffer_limit(None);
        }
        Out {
            socket,
            queued_max,
            state: Mutex::new(OutState {
                tls,
                ..OutState::default()
            }),
            wake: Notify::new(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, OutState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Write `frames` now if nothing waits, else after what waits.
    pub(super) fn write(
        &self,
        mut st: MutexGuard<'_, OutState>,
        frames: &[u8],
    ) -> Result<(), Gone> {
        if st.broken {
            return Err(Gone);
        }
        let sealed;
        let frames = match st.tls.as_mut() {
            None => frames,
            Some(tls) => {
                let mut records = Vec::with_capacity(frames.len() + 64);
                if super::tls::seal(tls, frames, &mut records).is_err() {
                    st.broken = true;
                    drop(st);
                    self.wake.notify_one();
                    return Err(Gone);
                }
                sealed = records;
                &sealed
            }
        };
        let mut rest = frames;
        if st.pending.is_empty() && !st.writing {
            match crate::socket::write_now(&self.socket, frames) {
                Ok(n) if n == frames.len() => return Ok(()),
                Ok(n) => rest = &frames[n..],
                Err(_) => {
                    st.broken = true;
                    drop(st);
                    self.wake.notify_one();
                    return Err(Gone);
                }
            }
        }
        if !st.room_for(rest.len(), self.queued_max) {
            drop(st);
            self.wake.notify_one();
            return Err(Gone);
        }
        st.pending.extend_from_slice(rest);
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// Write what is pending, until nothing is; each write must make
    /// progress within `stall`. `Err` once the connection is gone, with why
    /// the replica closed it, if it did.
    pub(super) async fn flush(&self, stall: std::time::Duration) -> Result<(), Option<Close>> {
        loop {
            let bytes = {
                let mut st = self.lock();
                if st.broken {
                    return Err(st.overflowed.then_some(Close::SlowReader));
                }
                if st.pending.is_empty() {
                    st.writing = false;
                    return Ok(());
                }
                st.writing = true;
                st.pending.split().freeze()
            };
            let written = crate::socket::write_all_shared(&self.socket, &bytes, Some(stall)).await;
            if let Err(e) = written {
                self.lock().broken = true;
                let stalled = e.kind() == std::io::ErrorKind::TimedOut;
                return Err(stalled.then_some(Close::WriteStalled));
            }
        }
    }
}

/// The native connections the node loop wrote frames to this turn. It
/// writes them at the end of the turn, one write per connection (a weak
/// op's acceptance and view in one), before any peer frame of the turn:
/// a client's answer does not wait behind the wake-ups of the peers.
#[derive(Default)]
pub struct Corked(Mutex<Vec<Arc<Out>>>);

impl Corked {
    /// Write every connection's frames of this turn.
    pub(crate) fn uncork(&self) {
        let outs = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        for out in outs {
            let mut st = out.lock();
            let frames = st.corked.split();
            if !frames.is_empty() {
                let _ = out.write(st, &frames);
            }
        }
    }
}

/// One call on a native connection: where the node loop sends its replies
/// ([`crate::node_loop::ReplyTo::Native`]), written at the end of its turn
/// ([`Corked`]).
#[derive(Clone)]
pub struct Call {
    out: Arc<Out>,
    corked: Arc<Corked>,
    id: u64,
    /// The views the call asked for: which one closes it.
    views: Views,
    strong: bool,
    received: Instant,
    metrics: Arc<Metrics>,
}

impl Call {
    /// The node loop's handle on call `id` of the connection writing to
    /// `out`, which has just opened it ([`OutState::open_call`]).
    pub(super) fn new(
        out: Arc<Out>,
        corked: Arc<Corked>,
        id: u64,
        views: Views,
        strong: bool,
        received: Instant,
        metrics: Arc<Metrics>,
    ) -> Call {
        debug_assert!(out.lock().is_open(id), "a handle on call {id}, not open");
        Call {
            out,
            corked,
            id,
            views,
            strong,
            received,
            metrics,
        }
    }

    /// Queue `reply`'s frames (and `End` after the closing view) for the
    /// end of the turn; `Err` once the connection is gone or the call is
    /// closed (its deadline passed).
    pub(crate) fn send(&self, reply: Reply) -> Result<(), Gone> {
        let mut st = self.out.lock();
        if st.broken {
            return Err(Gone);
        }
        let first = st.corked.is_empty();
        let st = &mut *st;
        let frames = &mut st.corked;
        // Only an open call gets frames: one the deadline closed is gone.
        let Some(phase) = st.open.get_mut(&self.id) else {
            return Err(Gone);
        };
        let id = self.id;
        // Paired with the node loop's turn, which tells a call it was
        // accepted before it routes the call's first view, and refuses a
        // call only before accepting it.
        if matches!(
            reply,
            Reply::Rejected(_) | Reply::Denied(_) | Reply::Refused(_)
        ) {
            assert_eq!(
                *phase,
                Phase::Handed,
                "call {id} refused after its acceptance"
            );
        }
        let closes = match answer(reply) {
            Answer::Accepted(handle) => {
                assert_eq!(*phase, Phase::Handed, "call {id} accepted twice");
                *phase = Phase::Accepted(handle);
                let op = op_name(handle).unwrap_or_default();
                native::put_frame(frames, Kind::Accepted, id, op.as_bytes());
                false
            }
            Answer::View(v) => {
                assert_ne!(
                    *phase,
                    Phase::Handed,
                    "a view of call {id} before its acceptance"
                );
                if let Phase::Accepted(op) = *phase {
                    *phase = Phase::Viewed(op);
                    first_view(&self.metrics, self.strong, self.received);
                }
                let view = to_pb_view(&v);
                native::put_message(frames, Kind::View, id, &view);
                let closes = self.views.closes_with(v.kind);
                if closes {
                    native::put_frame(frames, Kind::End, id, &[]);
                }
                closes
            }
            Answer::Refused(status) => {
                put_error(frames, id, &status);
                true
            }
        };
        if closes {
            st.close_call(id);
        }
        if !st.room_for(0, self.out.queued_max) {
            // The task closes the connection; the frames are never written.
            self.out.wake.notify_one();
            return Err(Gone);
        }
        if first {
            self.corked
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(self.out.clone());
        }
        Ok(())
    }

    /// Whether the connection is gone or the call closed.
    pub(crate) fn is_closed(&self) -> bool {
        let st = self.out.lock();
        st.broken || !st.open.contains_key(&self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use creek_proto::native::{FrameReader, Read};
    use std::time::Duration;

    /// A connection's two ends on loopback: the replica's side as an
    /// [`Out`], the client's as a plain socket. Small socket buffers, so
    /// large answers fill them.
    async fn pair() -> (Arc<Out>, tokio::net::TcpStream) {
        pair_holding(usize::MAX).await
    }

    /// [`pair`], its queue holding at most `queued_max` bytes.
    async fn pair_holding(queued_max: usize) -> (Arc<Out>, tokio::net::TcpStream) {
        let small = |s: &tokio::net::TcpSocket| {
            s.set_send_buffer_size(4096).expect("sndbuf");
            s.set_recv_buffer_size(4096).expect("rcvbuf");
        };
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        small(&socket);
        socket
            .bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
        let listener = socket.listen(8).expect("listen");
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        small(&socket);
        let client = socket.connect(listener.local_addr().expect("addr"));
        let (client, accepted) = tokio::join!(client, listener.accept());
        let out = Arc::new(Out::new(
            Arc::new(accepted.expect("accept").0),
            queued_max,
            None,
        ));
        (out, client.expect("connect"))
    }

    fn call(out: &Arc<Out>, corked: &Arc<Corked>, id: u64, final_view: bool) -> Call {
        out.lock().open_call(id, usize::MAX);
        Call::new(
            out.clone(),
            corked.clone(),
            id,
            if final_view { Views::BOTH } else { Views::WEAK },
            false,
            Instant::now(),
            Arc::new(Metrics::new()),
        )
    }

    fn view(id: u64, kind: creek_core::ViewKind, value_bytes: usize) -> Reply {
        Reply::View(creek_core::View {
            handle: creek_core::ExecKey::Local(id),
            kind,
            outcome: Ok(Bytes::from(vec![b'v'; value_bytes])),
            across_shards: false,
            executions: 1,
            time: 0,
        })
    }

    /// What the client reads until `n` `End` frames came: (kind, id) of
    /// every frame, in order.
    async fn read_until_ends(client: &mut tokio::net::TcpStream, n: usize) -> Vec<(u8, u64)> {
        use tokio::io::AsyncReadExt;
        let mut reader = FrameReader::new(64 << 20);
        let mut input = BytesMut::new();
        let mut got = Vec::new();
        while got.iter().filter(|(k, _)| *k == Kind::End as u8).count() < n {
            let read = tokio::time::timeout(Duration::from_secs(10), client.read_buf(&mut input))
                .await
                .expect("frames within 10 s")
                .expect("read");
            assert!(read > 0, "the connection closed early");
            // A slow client: the writer often finds the socket full.
            tokio::time::sleep(Duration::from_micros(50)).await;
            while let Some(r) = reader.next(&mut input) {
                match r {
                    Read::Frame(h, _) => got.push((h.kind, h.id)),
                    Read::Oversized(h) => panic!("a frame of {} bytes", h.body_bytes),
                }
            }
        }
        got
    }

    #[tokio::test]
    async fn answers_written_from_another_thread_arrive_whole_and_in_order() {
        let (out, mut client) = pair().await;
        let corked = Arc::new(Corked::default());
        // The connection's task: it writes what the socket did not take,
        // late (a busy runtime), so the socket drains meanwhile and the
        // writer finds room while bytes still wait.
        let task_out = out.clone();
        let task = tokio::spawn(async move {
            loop {
                task_out.wake.notified().await;
                tokio::time::sleep(Duration::from_millis(2)).await;
                if task_out.flush(Duration::from_secs(10)).await.is_err() {
                    return;
                }
            }
        });
        // The "node loop": 32 turns of 4 calls, each answered with a
        // preliminary view of 16 KiB and a final one: more than the socket
        // takes at once.
        let calls: Vec<Call> = (1..=128).map(|id| call(&out, &corked, id, true)).collect();
        let writer = std::thread::spawn(move || {
            for turn in calls.chunks(4) {
                for c in turn {
                    c.send(Reply::Accepted(creek_core::ExecKey::Local(c.id)))
                        .expect("open");
                    c.send(view(c.id, creek_core::ViewKind::Tentative, 16 << 10))
                        .expect("open");
                    c.send(view(c.id, creek_core::ViewKind::Stable, 8))
                        .expect("open");
                }
                corked.uncork();
                // The client reads meanwhile: the socket takes more while
                // earlier bytes may still wait for the task.
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let got = read_until_ends(&mut client, 128).await;
        writer.join().expect("the writer");
        let expected: Vec<(u8, u64)> = (1..=128)
            .flat_map(|id| {
                [Kind::Accepted, Kind::View, Kind::View, Kind::End].map(|k| (k as u8, id))
            })
            .collect();
        assert_eq!(got, expected);
        assert!(out.lock().open.is_empty(), "every call closed");
        task.abort();
    }

    #[tokio::test]
    async fn a_closed_call_takes_no_more_answers() {
        let (out, mut client) = pair().await;
        let corked = Arc::new(Corked::default());
        // A weak op's one view closes its call; a later reply is refused.
        let weak = call(&out, &corked, 1, false);
        weak.send(Reply::Accepted(creek_core::ExecKey::Local(1)))
            .expect("open");
        weak.send(view(1, creek_core::ViewKind::Tentative, 8))
            .expect("open");
        assert!(weak.is_closed());
        assert_eq!(
            weak.send(view(1, creek_core::ViewKind::Stable, 8)),
            Err(Gone)
        );
        // A call whose deadline closed it (the task removes it) too.
        let strong = call(&out, &corked, 2, true);
        assert!(out.lock().close_call(2).is_some());
        assert_eq!(
            strong.send(view(2, creek_core::ViewKind::Stable, 8)),
            Err(Gone)
        );
        corked.uncork();
        let got = read_until_ends(&mut client, 1).await;
        let kinds = [Kind::Accepted, Kind::View, Kind::End].map(|k| (k as u8, 1));
        assert_eq!(got, kinds);
        // A broken connection refuses every reply.
        let third = call(&out, &corked, 3, true);
        out.lock().broken = true;
        assert_eq!(
            third.send(view(3, creek_core::ViewKind::Stable, 8)),
            Err(Gone)
        );
        assert!(third.is_closed());
    }

    /// A client that never reads: the answers fill the socket, then the
    /// queue up to its bound, and the connection breaks as overflowed
    /// instead of holding more.
    #[tokio::test]
    async fn a_client_that_does_not_read_is_cut_off_at_the_queue_bound() {
        let (out, _client) = pair_holding(256 << 10).await;
        let corked = Arc::new(Corked::default());
        let mut refused = None;
        for id in 1..=64 {
            let c = call(&out, &corked, id, false);
            let sent = c
                .send(Reply::Accepted(creek_core::ExecKey::Local(id)))
                .and_then(|()| c.send(view(id, creek_core::ViewKind::Tentative, 16 << 10)));
            corked.uncork();
            if sent.is_err() || out.lock().broken {
                refused = Some(id);
                break;
            }
        }
        let id = refused.expect("cut off before 64 views of 16 KiB (1 MiB)");
        let (overflowed, queued) = {
            let st = out.lock();
            (st.overflowed && st.broken, st.pending.len())
        };
        assert!(overflowed, "call {id}: broken as overflowed");
        assert!(queued <= 256 << 10, "{queued} bytes queued");
        assert_eq!(
            out.flush(Duration::from_secs(1)).await,
            Err(Some(Close::SlowReader))
        );
    }

    /// A write that makes no progress within the stall bound ends the
    /// connection as stalled.
    #[tokio::test]
    async fn a_write_stalled_past_its_bound_ends_the_connection() {
        let (out, _client) = pair().await;
        {
            let st = out.lock();
            out.write(st, &vec![b'x'; 4 << 20]).expect("queued");
        }
        assert_eq!(
            out.flush(Duration::from_millis(200)).await,
            Err(Some(Close::WriteStalled))
        );
        assert!(out.lock().broken);
    }
}
