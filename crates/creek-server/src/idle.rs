//! Idle gRPC client connections closed (docs/security.md, "Limits").
//!
//! HTTP/2 gives a server no idle timeout of its own, and bytes alone do not
//! tell an idle connection from a busy one (keepalive pings flow on both).
//! So the calls are counted instead: [`Tracked`] wraps a gRPC service and
//! counts each call of a connection from its request until its response
//! body is dropped (a watch stream counts for as long as it is open), and
//! the connection's socket keeps a [`Watch`] that ends its reads — hyper
//! then closes the connection — once it has had no call in progress for
//! the idle timeout. A client connects again for its next call.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tonic::body::BoxBody;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::Service;
use tonic::server::NamedService;
use tonic::transport::server::TcpConnectInfo;

use crate::limits::{ClientTimeouts, Close, Closes};

/// One connection's calls in progress, and when it last had one.
#[derive(Debug)]
struct Activity {
    calls: AtomicUsize,
    last: Mutex<Instant>,
}

impl Activity {
    fn touch(&self) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    fn last(&self) -> Instant {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The open gRPC connections' activity, by the client's address (which
/// names one connection: its port is the client's own).
#[derive(Debug)]
pub struct Conns {
    timeouts: ClientTimeouts,
    closes: Arc<Closes>,
    by_remote: Mutex<HashMap<SocketAddr, Arc<Activity>>>,
}

impl Conns {
    /// Connections closed after `timeouts.idle` without a call, counted and
    /// logged in `closes`.
    pub fn new(timeouts: ClientTimeouts, closes: Arc<Closes>) -> Arc<Conns> {
        Arc::new(Conns {
            timeouts,
            closes,
            by_remote: Mutex::new(HashMap::new()),
        })
    }

    fn activity(&self, remote: SocketAddr) -> Option<Arc<Activity>> {
        self.by_remote
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&remote)
            .cloned()
    }
}

/// One gRPC connection's watch for idleness, kept by its socket
/// ([`crate::limits::CappedStream::watch_idle`]), whose reads end once
/// [`Watch::ended`] says so.
#[derive(Debug)]
pub struct Watch {
    remote: SocketAddr,
    conns: Arc<Conns>,
    activity: Arc<Activity>,
    /// When to look again (`None`: idle connections are kept).
    check: Option<Pin<Box<Sleep>>>,
    ended: bool,
}

impl Watch {
    /// The connection from `remote`, tracked in `conns`.
    pub fn new(remote: SocketAddr, conns: &Arc<Conns>) -> Watch {
        let activity = Arc::new(Activity {
            calls: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        });
        conns
            .by_remote
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(remote, activity.clone());
        let check = conns
            .timeouts
            .idle
            .map(|idle| Box::pin(tokio::time::sleep(idle)));
        Watch {
            remote,
            conns: conns.clone(),
            activity,
            check,
            ended: false,
        }
    }

    /// Whether the connection's reads are to end: it has idled past the
    /// timeout (closed, counted and logged the first time); else the next
    /// look is set, and wakes `cx`.
    pub fn ended(&mut self, cx: &mut Context<'_>) -> bool {
        if self.ended {
            return true;
        }
        let (Some(check), Some(idle)) = (self.check.as_mut(), self.conns.timeouts.idle) else {
            return false;
        };
        while check.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            let next = if self.activity.calls.load(Ordering::Acquire) > 0 {
                now + idle
            } else {
                self.activity.last() + idle
            };
            if next <= now {
                self.ended = true;
                let why = Close::Idle.why(&self.conns.timeouts);
                self.conns.closes.closed(Close::Idle, self.remote, &why);
                return true;
            }
            check.as_mut().reset(next);
        }
        false
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut by_remote = self
            .conns
            .by_remote
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A new connection may have reused the address since.
        if by_remote
            .get(&self.remote)
            .is_some_and(|a| Arc::ptr_eq(a, &self.activity))
        {
            by_remote.remove(&self.remote);
        }
    }
}

/// A call in progress on a connection, until dropped.
struct InCall(Arc<Activity>);

impl InCall {
    fn new(activity: Arc<Activity>) -> InCall {
        activity.calls.fetch_add(1, Ordering::AcqRel);
        InCall(activity)
    }
}

impl Drop for InCall {
    fn drop(&mut self) {
        self.0.touch();
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A gRPC service whose calls count as their connection's activity (see
/// the module docs).
#[derive(Clone, Debug)]
pub struct Tracked<S> {
    /// The service.
    pub inner: S,
    /// Where its connections' activity is kept.
    pub conns: Arc<Conns>,
}

impl<S: NamedService> NamedService for Tracked<S> {
    const NAME: &'static str = S::NAME;
}

/// The client's address of the connection a request came on.
fn remote_of<B>(req: &Request<B>) -> Option<SocketAddr> {
    let ext = req.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            ext.get::<tonic::transport::server::TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        })
}

impl<S, B> Service<Request<B>> for Tracked<S>
where
    S: Service<Request<B>, Response = Response<BoxBody>>,
    S::Future: Send + 'static,
{
    type Response = Response<BoxBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<BoxBody>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let call = remote_of(&req)
            .and_then(|r| self.conns.activity(r))
            .map(InCall::new);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let response = fut.await?;
            Ok(match call {
                // The call lasts as long as its response's body.
                Some(call) => {
                    response.map(|body| tonic::body::boxed(WithCall { body, _call: call }))
                }
                None => response,
            })
        })
    }
}

/// A response body that holds its call open.
struct WithCall {
    body: BoxBody,
    _call: InCall,
}

impl http_body::Body for WithCall {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// How often the server pings a client connection (HTTP/2 keepalive), and
/// how long it waits for the answer before closing it as dead.
pub const KEEPALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(20));
