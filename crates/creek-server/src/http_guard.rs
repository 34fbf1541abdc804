//! What every request to the HTTP port (the console, its API, `/metrics`)
//! meets first (docs/security.md, "The HTTP port"):
//!
//! - **Its `Host` must be this replica's.** A page on another site whose
//!   name was rebound to this address (DNS rebinding) sends its own name
//!   as `Host`; only loopback names, the hosts of the addresses this
//!   replica and its group are configured with, and the names in
//!   `http_hosts` are served. Others get `403 host_not_allowed`.
//! - **With `[auth] enabled`, the API and the metrics need a token**
//!   (`Authorization: Bearer <token>`, any user): `401 unauthenticated`
//!   without one or with a bad one. `/metrics` stays open to scrapers
//!   only when `metrics_open = true`. The page and its script carry no
//!   data and are served to anyone whose `Host` passes.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use creek_procs::auth::Need;
use tonic::metadata::MetadataMap;

use crate::config::ServerConfig;
use crate::console::invoke::json_error;

/// The checks of one replica's HTTP port.
#[derive(Clone)]
pub struct HttpGuard {
    /// Host names (no port, lowercase) requests may name.
    hosts: Arc<BTreeSet<String>>,
    /// Users and their tokens, when `[auth] enabled`.
    auth: Option<Arc<crate::auth::Auth>>,
    /// `/metrics` answers without a token.
    metrics_open: bool,
}

/// Loopback names every replica answers to.
const LOOPBACK_NAMES: [&str; 4] = ["localhost", "127.0.0.1", "::1", "[::1]"];

impl HttpGuard {
    /// The guard of the replica `config` describes.
    pub fn new(config: &ServerConfig, auth: Option<Arc<crate::auth::Auth>>) -> HttpGuard {
        let mut hosts: BTreeSet<String> = LOOPBACK_NAMES.iter().map(|h| (*h).to_owned()).collect();
        let addrs = config
            .replicas
            .iter()
            .flat_map(|r| [r.client_addr, r.peer_addr])
            .chain(config.metrics_addr);
        for addr in addrs.filter(|a| !a.ip().is_unspecified()) {
            hosts.insert(addr.ip().to_string());
            if addr.is_ipv6() {
                hosts.insert(format!("[{}]", addr.ip()));
            }
        }
        hosts.extend(config.http_hosts.iter().map(|h| h.to_ascii_lowercase()));
        HttpGuard {
            hosts: Arc::new(hosts),
            auth,
            metrics_open: config.metrics_open,
        }
    }

    /// Whether `headers` name a host this replica serves (its name, the
    /// port left out; a request without `Host` is not from a browser and
    /// passes).
    fn host_allowed(&self, headers: &HeaderMap) -> Result<(), String> {
        let Some(host) = headers.get(header::HOST) else {
            return Ok(());
        };
        let host = host.to_str().unwrap_or("").to_ascii_lowercase();
        if self.hosts.contains(host_name(&host)) {
            return Ok(());
        }
        Err(format!(
            "Host {host:?} is not a name this replica serves (loopback names, its group's \
             configured addresses, and http_hosts): a page on another site cannot reach it \
             through a rebound name; add the name to http_hosts to serve it"
        ))
    }

    /// Whether a request for `path` needs a token.
    fn needs_token(&self, path: &str) -> bool {
        self.auth.as_ref().is_some_and(|a| a.enabled())
            && (path.starts_with("/api/") || (path == "/metrics" && !self.metrics_open))
    }
}

/// The host name of a `Host` header's value, without its port.
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        // `[::1]:7301`: up to the closing bracket.
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// The middleware: refuse a request whose `Host` is not this replica's,
/// or that needs a token and has no valid one; pass the rest on.
pub async fn guard(State(g): State<HttpGuard>, request: Request, next: Next) -> Response {
    if let Err(why) = g.host_allowed(request.headers()) {
        return json_error(StatusCode::FORBIDDEN, "host_not_allowed", &why);
    }
    if g.needs_token(request.uri().path()) {
        if let Some(auth) = &g.auth {
            let meta = MetadataMap::from_headers(request.headers().clone());
            if let Err(status) = auth.authorize(&meta, None, &Need::Nothing) {
                let code = match status.code() {
                    tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
                    _ => StatusCode::UNAUTHORIZED,
                };
                let mut response = json_error(code, "unauthenticated", status.message());
                if code == StatusCode::UNAUTHORIZED {
                    response.headers_mut().insert(
                        header::WWW_AUTHENTICATE,
                        header::HeaderValue::from_static("Bearer realm=\"creek\""),
                    );
                }
                return response;
            }
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_left_out_of_a_host() {
        assert_eq!(host_name("localhost:7301"), "localhost");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_name("[::1]:7301"), "[::1]");
        assert_eq!(host_name("evil.example:7301"), "evil.example");
    }

    #[test]
    fn only_the_replicas_names_pass() {
        let mut config = ServerConfig::local_group(3, 7100, 7200, std::path::Path::new("/tmp/x"))
            .expect("a group")
            .remove(0);
        config.http_hosts = vec!["Creek.Example".into()];
        let g = HttpGuard::new(&config, None);
        let with = |host: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, host.parse().expect("header"));
            g.host_allowed(&h)
        };
        assert!(with("127.0.0.1:9101").is_ok());
        assert!(with("localhost:9101").is_ok());
        assert!(with("creek.example:9101").is_ok());
        let refused = with("evil.example:9101").expect_err("rebound name");
        assert!(refused.contains("\"evil.example:9101\" is not a name this replica serves"));
        assert!(g.host_allowed(&HeaderMap::new()).is_ok());
        assert!(!g.needs_token("/api/console"), "no users checked");
    }
}
