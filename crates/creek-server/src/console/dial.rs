//! How the console reaches the other replicas' client ports: for their
//! `Status` at each sample, and to forward an invocation to the shard that
//! owns its keys.
//!
//! Without TLS it dials `http://ADDR`. With TLS it speaks gRPC over a TLS
//! session it makes itself (`TlsDial`): trusting the CA, presenting the
//! replica's own certificate (a client port requires one of the CA by
//! default), and naming the replica dialed, `replica-N.creek`, as the
//! server name, so the replica reached must be the one its id says, as on
//! a peer link. The configuration is taken from [`Tls`] at every connect,
//! so a SIGHUP reload reaches the console's connections as it reaches the
//! others.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use creek_core::ReplicaId;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

use crate::tls::{replica_name, Tls};

/// A channel to replica `id` at the client address `addr`, connected on
/// first use and again whenever its connection is lost; over TLS with
/// `tls`. `timeout` bounds each connect (the handshake included).
pub fn channel(
    id: ReplicaId,
    addr: &str,
    tls: Option<&Arc<Tls>>,
    timeout: Duration,
) -> Result<Channel, String> {
    // With TLS the scheme stays `http`: the session is made by `TlsDial`,
    // and tonic would want its own TLS settings for `https`.
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("bad address {addr}: {e}"))?
        .connect_timeout(timeout)
        .tcp_nodelay(true);
    Ok(match tls {
        None => endpoint.connect_lazy(),
        Some(tls) => endpoint.connect_with_connector_lazy(TlsDial {
            tls: tls.clone(),
            id,
            addr: addr.to_owned(),
        }),
    })
}

/// Makes a TLS session to replica `id`'s client port at `addr`.
#[derive(Clone)]
struct TlsDial {
    tls: Arc<Tls>,
    id: ReplicaId,
    addr: String,
}

type Dialed = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

impl tonic::codegen::Service<Uri> for TlsDial {
    type Response = Dialed;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Dialed>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let connector = self.tls.replica_connector();
        let name = replica_name(self.id);
        let addr = self.addr.clone();
        Box::pin(async move {
            let name = ServerName::try_from(name)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            let tcp = TcpStream::connect(&addr).await?;
            let _ = tcp.set_nodelay(true);
            Ok(TokioIo::new(connector.connect(name, tcp).await?))
        })
    }
}
