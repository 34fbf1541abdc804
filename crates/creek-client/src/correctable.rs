//! [`Correctable`]: the views of one op, as they arrive.
//!
//! A Correctable is a handle on shared state that one writer, a [`Feeder`]
//! (owned by the task reading the server's stream, or by a speculation),
//! appends views to. Every handle and every consumer sees the same views in
//! the same order; nothing is consumed by reading it.
//!
//! Callbacks run in the writer's task, under a lock that keeps them in
//! order with each other and with late registrations (which replay what
//! already happened). So a callback must be quick and must not register
//! callbacks or speculate on the Correctable that is calling it. The
//! callbacks of a view have run by the time [`Correctable::preliminary`],
//! [`Correctable::final_view`] or [`Correctable::views`] return that view.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::watch;
use tokio_stream::Stream;

use crate::view::View;
use crate::Error;

/// Where a Correctable is in its life (the paper's states).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// No closing view yet: more views may come.
    Updating,
    /// Closed by its final view.
    Final,
    /// Closed by an error.
    Error,
}

/// The views of one op: preliminary ones as they arrive, then a final one
/// or an error. Cheap to clone; every clone sees the same views.
#[derive(Clone)]
pub struct Correctable {
    shared: Arc<Shared>,
    /// The op's id, when a replica accepted the call as one.
    op: Option<crate::OpRef>,
}

/// The writing side of a [`Correctable`]. Dropping it before a closing view
/// or an error closes the Correctable with [`Error::Protocol`], so waiters
/// never hang on a writer that is gone (a panicking callback included).
pub(crate) struct Feeder {
    shared: Arc<Shared>,
    notify: watch::Sender<()>,
}

struct Shared {
    progress: Mutex<Progress>,
    /// Held while events are delivered, so observers see them in order.
    observers: Mutex<Vec<Observer>>,
    /// Bumped after every change of `progress`; cloned by waiters.
    changed: watch::Receiver<()>,
}

struct Progress {
    views: Vec<View>,
    end: End,
}

#[derive(Clone)]
enum End {
    Open,
    Final,
    Failed(Error),
}

/// One thing that happened to a Correctable, as observers see it.
#[derive(Clone, Copy)]
pub(crate) enum Event<'a> {
    /// A new view; `closes` if it is the final one.
    View {
        /// The view.
        view: &'a View,
        /// Whether it closes the Correctable.
        closes: bool,
    },
    /// The Correctable closed with an error.
    Error(&'a Error),
}

pub(crate) type Observer = Box<dyn FnMut(Event<'_>) + Send>;

/// Lock ignoring poison: a panicking callback must not make every later
/// reader panic too; the state it guards is updated before callbacks run.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Progress {
    fn state(&self) -> State {
        match self.end {
            End::Open => State::Updating,
            End::Final => State::Final,
            End::Failed(_) => State::Error,
        }
    }
}

impl Correctable {
    /// A new open Correctable and its writer.
    pub(crate) fn channel() -> (Feeder, Correctable) {
        let (notify, changed) = watch::channel(());
        let shared = Arc::new(Shared {
            progress: Mutex::new(Progress {
                views: Vec::new(),
                end: End::Open,
            }),
            observers: Mutex::new(Vec::new()),
            changed,
        });
        (
            Feeder {
                shared: shared.clone(),
                notify,
            },
            Correctable { shared, op: None },
        )
    }

    /// This Correctable, naming op `op`.
    pub(crate) fn with_op(mut self, op: Option<crate::OpRef>) -> Self {
        self.op = op;
        self
    }

    /// The op this call is, as logs, `Admin.Committed` and watchers name it
    /// (`r2.1841`: the 1841st op replica 2 issued); `None` for a call no
    /// replica ordered as an op (a read-only weak call, answered locally)
    /// or one answered without a replica (from the client cache).
    pub fn op(&self) -> Option<crate::OpRef> {
        self.op
    }

    /// Where the Correctable is: updating, final or error.
    pub fn state(&self) -> State {
        lock(&self.shared.progress).state()
    }

    /// The newest view received so far, if any.
    pub fn latest(&self) -> Option<View> {
        lock(&self.shared.progress).views.last().cloned()
    }

    /// The first view, of any kind: the preliminary view, or the final view
    /// if the request asked for no weak level. Fails only if the op failed
    /// before any view arrived.
    pub async fn preliminary(&self) -> Result<View, Error> {
        self.wait(|p| match (p.views.first(), &p.end) {
            (Some(v), _) => Some(Ok(v.clone())),
            (None, End::Failed(e)) => Some(Err(e.clone())),
            (None, _) => None,
        })
        .await
    }

    /// The closing view: the final (or confirmed) view, or for a weak op
    /// without a final view its one preliminary view. Fails if the op
    /// failed before its closing view.
    pub async fn final_view(&self) -> Result<View, Error> {
        self.wait(|p| match &p.end {
            End::Open => None,
            End::Final => p.views.last().cloned().map(Ok),
            End::Failed(e) => Some(Err(e.clone())),
        })
        .await
    }

    /// Every view, from the first: those received so far, then new ones as
    /// they arrive. Ends after the closing view, or after yielding the
    /// error the Correctable closed with. Any number of streams may be open
    /// at once.
    pub fn views(&self) -> Views {
        struct Cursor {
            shared: Arc<Shared>,
            changed: watch::Receiver<()>,
            next: usize,
            done: bool,
        }
        let cursor = Cursor {
            changed: self.shared.changed.clone(),
            shared: self.shared.clone(),
            next: 0,
            done: false,
        };
        let stream = futures_util::stream::unfold(cursor, |mut c| async move {
            if c.done {
                return None;
            }
            let item = wait_on(&c.shared, &mut c.changed, |p| {
                match (p.views.get(c.next), &p.end) {
                    (Some(v), _) => Some(Some(Ok(v.clone()))),
                    (None, End::Open) => None,
                    (None, End::Final) => Some(None),
                    (None, End::Failed(e)) => Some(Some(Err(e.clone()))),
                }
            })
            .await
            .unwrap_or_else(|e| Some(Err(e)))?;
            c.next += 1;
            c.done = item.is_err();
            Some((item, c))
        });
        Views {
            inner: Box::pin(stream),
        }
    }

    /// How many views it closed with (`None`: still open, or closed by an
    /// error).
    pub(crate) fn closed_with(&self) -> Option<usize> {
        let p = lock(&self.shared.progress);
        matches!(p.end, End::Final).then_some(p.views.len())
    }

    /// Call `cb` on every view, in order: those received so far at once
    /// (from this thread), then each new one from the background task. The
    /// closing view is passed too, before [`Correctable::on_final`]'s
    /// callback.
    pub fn on_update(&self, mut cb: impl FnMut(&View) + Send + 'static) -> &Self {
        self.observe(Box::new(move |e| {
            if let Event::View { view, .. } = e {
                cb(view);
            }
        }));
        self
    }

    /// Call `cb` once with the closing view, now if it already arrived.
    pub fn on_final(&self, cb: impl FnOnce(&View) + Send + 'static) -> &Self {
        let mut cb = Some(cb);
        self.observe(Box::new(move |e| {
            if let Event::View { view, closes: true } = e {
                if let Some(cb) = cb.take() {
                    cb(view);
                }
            }
        }));
        self
    }

    /// Call `cb` once if the Correctable closes with an error, now if it
    /// already did.
    pub fn on_error(&self, cb: impl FnOnce(&Error) + Send + 'static) -> &Self {
        let mut cb = Some(cb);
        self.observe(Box::new(move |e| {
            if let Event::Error(err) = e {
                if let Some(cb) = cb.take() {
                    cb(err);
                }
            }
        }));
        self
    }

    /// Register an observer: replay what already happened to it, then keep
    /// it for what happens next (if anything can).
    pub(crate) fn observe(&self, mut observer: Observer) {
        let mut observers = lock(&self.shared.observers);
        // Delivery holds `observers` while it updates `progress` and calls
        // the observers, so this snapshot and the later events neither
        // overlap nor leave a gap.
        let (views, end) = {
            let p = lock(&self.shared.progress);
            (p.views.clone(), p.end.clone())
        };
        let last = views.len().saturating_sub(1);
        for (i, view) in views.iter().enumerate() {
            let closes = matches!(end, End::Final) && i == last;
            observer(Event::View { view, closes });
        }
        match &end {
            End::Open => observers.push(observer),
            End::Final => {}
            End::Failed(e) => observer(Event::Error(e)),
        }
    }

    /// Wait until `ready` returns a result.
    async fn wait<T>(
        &self,
        ready: impl FnMut(&Progress) -> Option<Result<T, Error>>,
    ) -> Result<T, Error> {
        let mut changed = self.shared.changed.clone();
        wait_on(&self.shared, &mut changed, ready).await?
    }
}

/// Wait until `ready(progress)` is `Some`. Fails only if the writer is gone
/// while the Correctable is still open, which [`Feeder`]'s `Drop` prevents.
async fn wait_on<T>(
    shared: &Shared,
    changed: &mut watch::Receiver<()>,
    mut ready: impl FnMut(&Progress) -> Option<T>,
) -> Result<T, Error> {
    loop {
        changed.borrow_and_update();
        let outcome = ready(&lock(&shared.progress));
        if let Some(t) = outcome {
            // A delivery in progress holds `observers` until its callbacks
            // have run: waiting for it here means the callbacks of a view
            // have run by the time an awaited method returns that view.
            drop(lock(&shared.observers));
            return Ok(t);
        }
        if changed.changed().await.is_err() {
            // The writer is gone; whatever it left is all there will be.
            return ready(&lock(&shared.progress)).ok_or_else(|| {
                Error::Protocol("the op's view stream stopped before its final view".into())
            });
        }
    }
}

/// The views of a [`Correctable`], as a [`Stream`] (from
/// [`Correctable::views`]).
pub struct Views {
    inner: Pin<Box<dyn Stream<Item = Result<View, Error>> + Send>>,
}

impl Views {
    /// The next view; `None` after the closing view or the error.
    pub async fn next_view(&mut self) -> Option<Result<View, Error>> {
        std::future::poll_fn(|cx| self.inner.as_mut().poll_next(cx)).await
    }
}

impl Stream for Views {
    type Item = Result<View, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl std::fmt::Debug for Views {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Views").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Correctable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = lock(&self.shared.progress);
        f.debug_struct("Correctable")
            .field("state", &p.state())
            .field("views", &p.views)
            .finish()
    }
}

impl Feeder {
    /// Append a view; `closes` makes it the final one.
    pub(crate) fn view(&mut self, view: View, closes: bool) {
        self.deliver(
            |p| {
                p.views.push(view.clone());
                if closes {
                    p.end = End::Final;
                }
            },
            Event::View {
                view: &view,
                closes,
            },
        );
    }

    /// Close with an error.
    pub(crate) fn fail(&mut self, error: Error) {
        self.deliver(|p| p.end = End::Failed(error.clone()), Event::Error(&error));
    }

    /// Whether nothing has closed the Correctable yet.
    pub(crate) fn is_open(&self) -> bool {
        matches!(lock(&self.shared.progress).end, End::Open)
    }

    fn deliver(&mut self, update: impl FnOnce(&mut Progress), event: Event<'_>) {
        let mut observers = lock(&self.shared.observers);
        let closes = {
            let mut p = lock(&self.shared.progress);
            // Only a bug feeds a closed Correctable: the readers stop at the
            // closing view.
            debug_assert!(matches!(p.end, End::Open), "event after the closing one");
            if !matches!(p.end, End::Open) {
                return;
            }
            update(&mut p);
            !matches!(p.end, End::Open)
        };
        self.notify.send_replace(());
        for o in observers.iter_mut() {
            o(event);
        }
        if closes {
            // Nothing more can happen: free what the callbacks hold.
            observers.clear();
        }
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        if self.is_open() {
            self.fail(Error::Protocol(
                "the op's view stream stopped before its final view".into(),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use creek_types::value::Value;
    use tokio_stream::StreamExt;

    use super::*;
    use crate::view::{Level, ViewKind};

    fn view(n: i64, kind: ViewKind) -> View {
        View {
            level: if kind.is_stable() {
                Level::Strong
            } else {
                Level::Weak
            },
            kind,
            outcome: Ok(Value::Int(n)),
            latency: Duration::ZERO,
            across_shards: false,
            time: 0,
        }
    }

    #[tokio::test]
    async fn a_stream_opened_early_sees_views_as_they_arrive() {
        let (mut feeder, c) = Correctable::channel();
        let reader = tokio::spawn({
            let c = c.clone();
            async move { c.views().collect::<Vec<_>>().await }
        });
        tokio::task::yield_now().await;
        feeder.view(view(1, ViewKind::Preliminary), false);
        assert_eq!(c.state(), State::Updating);
        feeder.view(view(2, ViewKind::Final), true);
        let got = reader.await.expect("reader");
        assert_eq!(
            got,
            vec![
                Ok(view(1, ViewKind::Preliminary)),
                Ok(view(2, ViewKind::Final))
            ]
        );
        assert_eq!(c.latest(), Some(view(2, ViewKind::Final)));
    }

    #[tokio::test]
    async fn a_writer_that_vanishes_closes_the_correctable_with_an_error() {
        let (mut feeder, c) = Correctable::channel();
        feeder.view(view(1, ViewKind::Preliminary), false);
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.final_view().await }
        });
        drop(feeder);
        assert!(matches!(
            waiter.await.expect("waiter"),
            Err(Error::Protocol(_))
        ));
        assert_eq!(c.state(), State::Error);
    }
}
