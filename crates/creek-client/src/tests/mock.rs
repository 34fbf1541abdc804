//! A scripted `Creek` server on 127.0.0.1:0: each `Invoke` plays the steps
//! its script returns for the request.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use creek_proto::pb::creek_server::{Creek, CreekServer};
use creek_proto::{pb, to_wire};
use creek_types::value::Value;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

/// One step of a scripted `Invoke` stream.
pub enum Step {
    /// Send a view.
    View(pb::View),
    /// End the stream with this status.
    Fail(Status),
    /// As the first step: refuse the call with this status, no stream.
    Refuse(Status),
    /// Wait until the test opens the gate.
    Wait(Arc<Notify>),
    /// Wait a while.
    Sleep(Duration),
}

pub fn preliminary(v: impl Into<Value>) -> Step {
    view(pb::view::Kind::Preliminary, Some(value(v)))
}

pub fn final_(v: impl Into<Value>) -> Step {
    view(pb::view::Kind::Final, Some(value(v)))
}

pub fn final_abort(message: &str) -> Step {
    view(
        pb::view::Kind::Final,
        Some(pb::view::Outcome::Abort(message.into())),
    )
}

pub fn confirmed() -> Step {
    view(pb::view::Kind::Confirmed, None)
}

/// A snapshot view of `v` at commit time `time`.
pub fn snapshot_at(v: impl Into<Value>, time: u64) -> Step {
    view_at(pb::view::Kind::Snapshot, Some(value(v)), time)
}

/// A final view of `v` at commit time `time`.
pub fn final_at(v: impl Into<Value>, time: u64) -> Step {
    view_at(pb::view::Kind::Final, Some(value(v)), time)
}

/// A confirmation at commit time `time`.
pub fn confirmed_at(time: u64) -> Step {
    view_at(pb::view::Kind::Confirmed, None, time)
}

fn view_at(kind: pb::view::Kind, outcome: Option<pb::view::Outcome>, time: u64) -> Step {
    Step::View(pb::View {
        kind: kind as i32,
        outcome,
        across_shards: false,
        time,
    })
}

fn value(v: impl Into<Value>) -> pb::view::Outcome {
    pb::view::Outcome::Value(to_wire(&v.into()))
}

fn view(kind: pb::view::Kind, outcome: Option<pb::view::Outcome>) -> Step {
    Step::View(pb::View {
        kind: kind as i32,
        outcome,
        across_shards: false,
        time: if kind == pb::view::Kind::Preliminary {
            0
        } else {
            7
        },
    })
}

type Script = dyn Fn(&pb::InvokeRequest) -> Vec<Step> + Send + Sync;

/// One step of a scripted `Watch` stream.
pub enum WatchStep {
    /// Send a message.
    Event(pb::WatchEvent),
    /// End the stream with this status.
    Fail(Status),
    /// As the first step: refuse the call with this status, no stream.
    Refuse(Status),
    /// Keep the stream open and send nothing more.
    Hang,
}

type WatchScript = dyn Fn(&pb::WatchRequest) -> Vec<WatchStep> + Send + Sync;

/// A committed change of `key` at `position` by op `r1.<position + 1>`.
pub fn committed(position: u64, key: &str) -> WatchStep {
    WatchStep::Event(pb::WatchEvent {
        kind: pb::watch_event::Kind::Committed as i32,
        position,
        op: Some(pb::OpRef {
            origin: 1,
            seq: position + 1,
            client_id: 0,
            request_seq: 0,
        }),
        changes: vec![pb::Change {
            key: key.as_bytes().to_vec().into(),
            value: format!("v{position}").into_bytes().into(),
            deleted: false,
        }],
    })
}

/// A progress mark at `position`.
pub fn progress(position: u64) -> WatchStep {
    WatchStep::Event(pb::WatchEvent {
        kind: pb::watch_event::Kind::Progress as i32,
        position,
        op: None,
        changes: Vec::new(),
    })
}

/// What a mock replica saw of one `Invoke`.
#[derive(Clone, Debug)]
pub struct Seen {
    pub request: pb::InvokeRequest,
    /// The `grpc-timeout` header, if any.
    pub grpc_timeout: Option<String>,
}

#[derive(Clone)]
pub struct Mock {
    script: Arc<Script>,
    seen: Arc<Mutex<Vec<Seen>>>,
    replica: u32,
    watch: Arc<WatchScript>,
    watches: Arc<Mutex<Vec<pb::WatchRequest>>>,
}

impl Mock {
    pub fn new(
        replica: u32,
        script: impl Fn(&pb::InvokeRequest) -> Vec<Step> + Send + Sync + 'static,
    ) -> Mock {
        Mock {
            script: Arc::new(script),
            seen: Arc::default(),
            replica,
            watch: Arc::new(|_| vec![WatchStep::Refuse(Status::unimplemented("no watch"))]),
            watches: Arc::default(),
        }
    }

    /// Answer `Watch` calls with `script`.
    pub fn with_watch(
        mut self,
        script: impl Fn(&pb::WatchRequest) -> Vec<WatchStep> + Send + Sync + 'static,
    ) -> Mock {
        self.watch = Arc::new(script);
        self
    }

    /// The `Watch` requests received.
    pub fn watches(&self) -> Vec<pb::WatchRequest> {
        self.watches.lock().expect("watches lock").clone()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen lock").clone()
    }
}

#[tonic::async_trait]
impl Creek for Mock {
    type InvokeStream = Pin<Box<dyn Stream<Item = Result<pb::View, Status>> + Send>>;

    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<Self::InvokeStream>, Status> {
        let grpc_timeout = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let request = request.into_inner();
        self.seen.lock().expect("seen lock").push(Seen {
            request: request.clone(),
            grpc_timeout,
        });
        let mut steps = (self.script)(&request);
        if let Some(Step::Refuse(_)) = steps.first() {
            if let Step::Refuse(status) = steps.remove(0) {
                return Err(status);
            }
        }
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tokio::spawn(async move {
            for step in steps {
                match step {
                    Step::View(v) => {
                        if tx.send(Ok(v)).await.is_err() {
                            return;
                        }
                    }
                    Step::Fail(status) | Step::Refuse(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                    Step::Wait(gate) => gate.notified().await,
                    Step::Sleep(d) => tokio::time::sleep(d).await,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn procedures(
        &self,
        _request: Request<pb::ProceduresRequest>,
    ) -> Result<Response<pb::ProceduresReply>, Status> {
        // The routes of the built-ins the tests call through a cluster.
        let route = |name: &str, route: pb::Route| pb::ProcedureInfo {
            name: name.into(),
            route: route as i32,
            ..Default::default()
        };
        Ok(Response::new(pb::ProceduresReply {
            procedures: vec![
                route("kv.get", pb::Route::ByArg),
                route("kv.put", pb::Route::ByArg),
                route("kv.mget", pb::Route::ByListArg),
            ],
        }))
    }

    async fn mpo(
        &self,
        _request: Request<pb::MpoEnvelope>,
    ) -> Result<Response<pb::MpoEnvelope>, Status> {
        Err(Status::failed_precondition(
            "a mock replica serves one group",
        ))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let request = request.into_inner();
        self.watches
            .lock()
            .expect("watches lock")
            .push(request.clone());
        let mut steps = (self.watch)(&request);
        if let Some(WatchStep::Refuse(_)) = steps.first() {
            if let WatchStep::Refuse(status) = steps.remove(0) {
                return Err(status);
            }
        }
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tokio::spawn(async move {
            for step in steps {
                match step {
                    WatchStep::Event(e) => {
                        if tx.send(Ok(e)).await.is_err() {
                            return;
                        }
                    }
                    WatchStep::Fail(status) | WatchStep::Refuse(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                    WatchStep::Hang => {
                        tx.closed().await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        Ok(Response::new(pb::StatusReply {
            replica: self.replica,
            role: "leader".into(),
            leader: self.replica,
            term: 3,
            committed: 10,
            tentative: 2,
            ..Default::default()
        }))
    }
}

/// A running mock replica.
pub struct Server {
    pub addr: String,
    pub mock: Mock,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

pub async fn serve(mock: Mock) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr").to_string();
    let incoming = TcpIncoming::from_listener(listener, true, None).expect("incoming");
    let (shutdown, stop) = oneshot::channel::<()>();
    let service = CreekServer::new(mock.clone());
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stop.await;
            })
            .await;
    });
    Server {
        addr,
        mock,
        shutdown: Some(shutdown),
        task: Some(task),
    }
}

impl Server {
    /// Stop accepting connections and close the open ones.
    pub async fn stop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

/// An address nothing listens on.
pub async fn dead_addr() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").to_string()
}
