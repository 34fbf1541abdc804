//! One replica a [`Client`](super::Client) may call: its address and
//! endpoint, and the connection (gRPC, and native where it is on) made to
//! it; connecting to the first of several that answers.

use std::sync::Arc;
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Endpoint;

use super::{Channel, Credentials};
use crate::native::{Dial, Native, NativeConn};
use crate::tls::TlsOptions;
use crate::Error;

/// Longest wait for a TCP connection to one replica.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// HTTP/2 pings on an open connection, so a replica that vanished without
/// closing its sockets fails the calls waiting on it.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) struct Replica {
    pub(super) addr: String,
    endpoint: Endpoint,
    credentials: Credentials,
    /// Where, how and as whom invocations go over the native protocol, if
    /// they do.
    pub(super) native: Option<Dial>,
}

#[derive(Clone)]
pub(super) struct Connected {
    pub(super) index: usize,
    pub(super) channel: Channel,
    /// The native connection to the same replica, if it answered.
    pub(super) native: Option<Arc<NativeConn>>,
}

impl Replica {
    pub(super) fn new(
        addr: String,
        tls: Option<&TlsOptions>,
        credentials: &Credentials,
        native: Option<&Native>,
    ) -> Result<Replica, Error> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let uri = match addr.split_once("://") {
            // A leader's address comes without a scheme; one given by hand
            // must agree with the TLS setting.
            Some((given, _)) if given != scheme => {
                return Err(Error::InvalidArgument(format!(
                    "replica address {addr:?} says {given}, but TLS is {}: use {scheme}:// or \
                     host:port",
                    if tls.is_some() { "on" } else { "off" }
                )))
            }
            Some(_) => addr.clone(),
            None => format!("{scheme}://{addr}"),
        };
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(|e| Error::InvalidArgument(format!("bad replica address {addr:?}: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
        if let Some(tls) = tls {
            endpoint = endpoint
                .tls_config(tls.tonic())
                .map_err(|e| Error::InvalidArgument(format!("TLS options for {addr:?}: {e}")))?;
        }
        let uri = endpoint.uri();
        let native = match (native, uri.host(), uri.port_u16()) {
            (Some(native), Some(host), Some(port)) => {
                let tls = match (&native.tls, tls) {
                    (Some(config), Some(options)) => {
                        Some((config.clone(), options.server_name(host)?))
                    }
                    _ => None,
                };
                Some(Dial {
                    addr: format!("{host}:{port}"),
                    token: native.token.clone(),
                    tls,
                })
            }
            _ => None,
        };
        Ok(Replica {
            addr,
            endpoint,
            credentials: credentials.clone(),
            native,
        })
    }

    /// Connect over gRPC, then natively if this client does: a replica
    /// that does not speak the native protocol is called over gRPC only.
    pub(super) async fn connect(
        &self,
    ) -> Result<(Channel, Option<Arc<NativeConn>>), tonic::transport::Error> {
        let channel = self.endpoint.connect().await?;
        let native = self.connect_native().await;
        Ok((
            InterceptedService::new(channel, self.credentials.clone()),
            native,
        ))
    }

    /// A gRPC channel that connects when a call is made over it (and
    /// again after it fails).
    pub(super) fn connect_later(&self) -> Channel {
        InterceptedService::new(self.endpoint.connect_lazy(), self.credentials.clone())
    }

    /// A native connection, if this client invokes natively and the
    /// replica answers the native hello.
    pub(super) async fn connect_native(&self) -> Option<Arc<NativeConn>> {
        match &self.native {
            Some(dial) => NativeConn::connect(dial, CONNECT_TIMEOUT).await,
            None => None,
        }
    }
}

/// Connect to the first replica that answers, trying them all in order
/// from `first` (wrapping around).
pub(super) async fn connect_from(replicas: &[Replica], first: usize) -> Result<Connected, Error> {
    let mut failures = Vec::new();
    for k in 0..replicas.len() {
        let index = (first + k) % replicas.len();
        let replica = &replicas[index];
        match replica.connect().await {
            Ok((channel, native)) => {
                return Ok(Connected {
                    index,
                    channel,
                    native,
                })
            }
            Err(e) => failures.push(format!("{}: {}", replica.addr, Error::from(e))),
        }
    }
    Err(Error::Unavailable(format!(
        "no replica answered: {}",
        failures.join("; ")
    )))
}
