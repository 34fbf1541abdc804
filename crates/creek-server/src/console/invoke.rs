//! `POST /api/invoke`: invoke a procedure through this replica's own client
//! service (the code path of a gRPC `Invoke`: the same checks, limits,
//! metrics and views) and stream what happens as newline-delimited JSON.
//!
//! The request body is JSON:
//! `{"procedure": "kv.put", "args": ["greeting", "hello"], "level": "both"}`
//! with `level` one of `weak`, `strong`, `both` (the default), optional
//! `weak_final` (a weak op also waits for its final view) and `timeout_ms`
//! (default 10 000, at most 60 000). The answer is `200` with one JSON
//! object per line: `{"event":"accepted","op":"r1.17"}`, then one
//! `{"event":"view","kind":"preliminary"|"final"|"confirmed",...}` per view,
//! then `{"event":"end"}` — or `{"event":"error",...}` if the op fails after
//! it was accepted. A request refused before anything was applied is a 4xx
//! (or 503 when the replica cannot take it now) with
//! `{"error": "...", "code": "..."}`.
//!
//! On a sharded cluster a call on a key another shard owns (by the map
//! this replica serves under) is sent to a replica of that shard, over
//! its client address, and its views streamed back the same way; the
//! `accepted` line then names the shard (`"shard": 1`).
//!
//! Browsers may not invoke from other sites: the body must be
//! `application/json` (a cross-site form cannot send that without a CORS
//! preflight, which is never granted) and an `Origin` header, when present,
//! must name this server.

#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use creek_proto::pb;
use serde::Deserialize;
use serde_json::json;
use tonic::Code;

use super::values;
use super::Console;

/// Default deadline for the final view.
const TIMEOUT_DEFAULT_MS: u64 = 10_000;
/// Longest deadline accepted.
const TIMEOUT_MAX_MS: u64 = 60_000;

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InvokeBody {
    procedure: String,
    #[serde(default)]
    args: Vec<serde_json::Value>,
    #[serde(default)]
    level: Option<String>,
    #[serde(default)]
    weak_final: bool,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// A JSON error answer.
pub fn json_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({ "error": message, "code": code }).to_string();
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

fn bad(message: impl AsRef<str>) -> Response {
    json_error(
        StatusCode::BAD_REQUEST,
        "invalid_argument",
        message.as_ref(),
    )
}

/// The HTTP answer of a status the service refused an op with.
fn refused(s: &tonic::Status) -> Response {
    let (status, code) = match s.code() {
        Code::InvalidArgument => (StatusCode::BAD_REQUEST, "invalid_argument"),
        Code::ResourceExhausted if s.message().contains("exceeds the limit") => {
            (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
        }
        Code::ResourceExhausted => (StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
        Code::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        Code::FailedPrecondition => (StatusCode::CONFLICT, "failed_precondition"),
        Code::DeadlineExceeded => (StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded"),
        Code::PermissionDenied => (StatusCode::FORBIDDEN, "permission_denied"),
        Code::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    };
    json_error(status, code, s.message())
}

/// Whether a browser's `Origin` (if any) is this server, which serves
/// `scheme` (`http`, or `https` over TLS).
fn same_origin(headers: &HeaderMap, scheme: &str) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (origin.to_str().ok(), host) {
        (Some(o), Some(h)) => o == format!("{scheme}://{h}"),
        _ => false,
    }
}

/// Check and convert the request into the service's (this server serves
/// `scheme`).
fn parse(
    headers: &HeaderMap,
    body: &[u8],
    scheme: &str,
) -> Result<(pb::InvokeRequest, Duration), Response> {
    if !same_origin(headers, scheme) {
        return Err(json_error(
            StatusCode::FORBIDDEN,
            "cross_origin",
            "invocations from another site's page are refused",
        ));
    }
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().map(str::trim) == Some("application/json"));
    if !json_body {
        return Err(json_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be JSON (Content-Type: application/json)",
        ));
    }
    let b: InvokeBody =
        serde_json::from_slice(body).map_err(|e| bad(format!("malformed request: {e}")))?;
    let levels = match b.level.as_deref() {
        Some("weak") => vec![pb::Level::Weak as i32],
        Some("strong") => vec![pb::Level::Strong as i32],
        None | Some("both") => vec![pb::Level::Weak as i32, pb::Level::Strong as i32],
        Some(other) => {
            return Err(bad(format!(
                "unknown level {other:?}: use \"weak\", \"strong\" or \"both\""
            )))
        }
    };
    let timeout_ms = b.timeout_ms.unwrap_or(TIMEOUT_DEFAULT_MS);
    if timeout_ms == 0 || timeout_ms > TIMEOUT_MAX_MS {
        return Err(bad(format!(
            "timeout_ms must be within 1..={TIMEOUT_MAX_MS}"
        )));
    }
    let args = b
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| values::from_json(i, a).map(|v| creek_proto::to_wire(&v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    let request = pb::InvokeRequest {
        procedure: b.procedure,
        args,
        levels,
        weak_final: b.weak_final,
        ..Default::default()
    };
    Ok((request, Duration::from_millis(timeout_ms)))
}

/// One line of the answer.
fn line(v: serde_json::Value) -> bytes::Bytes {
    let mut s = v.to_string();
    s.push('\n');
    s.into()
}

fn view_line(v: &pb::View, at_ms: f64) -> bytes::Bytes {
    use pb::view::{Kind, Outcome};
    let kind = match Kind::try_from(v.kind) {
        Ok(Kind::Preliminary) => "preliminary",
        Ok(Kind::Final) => "final",
        Ok(Kind::Confirmed) => "confirmed",
        _ => "unspecified",
    };
    let mut out = json!({ "event": "view", "kind": kind, "at_ms": at_ms });
    match &v.outcome {
        Some(Outcome::Value(w)) => {
            out["value"] = match creek_proto::from_wire(w) {
                Ok(val) => values::to_json(&val),
                Err(e) => json!({ "undecodable": e.to_string() }),
            }
        }
        Some(Outcome::Abort(a)) => out["abort"] = json!(a),
        None => {}
    }
    line(out)
}

/// Give `request` the caller's `Authorization` header, as a gRPC client
/// sends its token.
fn with_token<T>(request: &mut tonic::Request<T>, headers: &HeaderMap) {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| tonic::metadata::MetadataValue::try_from(v.as_bytes()).ok());
    if let Some(token) = token {
        request.metadata_mut().insert("authorization", token);
    }
}

/// Serve one invocation.
pub async fn handle(console: Arc<Console>, headers: HeaderMap, body: Body) -> Response {
    let started = Instant::now();
    let Ok(bytes) = axum::body::to_bytes(body, console.body_bytes_max).await else {
        return json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            &format!(
                "the request body is larger than {} bytes (or was cut off)",
                console.body_bytes_max
            ),
        );
    };
    let (request, timeout) = match parse(&headers, &bytes, console.scheme()) {
        Ok(r) => r,
        Err(response) => return response,
    };
    let elsewhere = console.service.front.shards.as_ref().and_then(|gate| {
        let call = crate::request::to_request(&request, usize::MAX).ok()?.call;
        gate.owner_elsewhere(&call)
    });
    let (response, shard) = match elsewhere {
        None => {
            let mut request = tonic::Request::new(request);
            request.set_timeout(timeout);
            with_token(&mut request, &headers);
            match pb::creek_server::Creek::invoke(&console.service, request).await {
                Ok(r) => (r, None),
                Err(status) => return refused(&status),
            }
        }
        Some((shard, addrs)) => match forward(&console, &addrs, request, &headers, timeout).await {
            Ok(r) => (r, Some(shard.0)),
            Err(status) => return refused(&status),
        },
    };
    let op = response
        .metadata()
        .get(crate::service::OP_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let views = response.into_inner();
    let ms = move || started.elapsed().as_secs_f64() * 1000.0;
    let mut accepted = json!({ "event": "accepted", "op": op, "at_ms": ms() });
    if let Some(shard) = shard {
        accepted["shard"] = json!(shard);
    }
    let first = line(accepted);
    use futures_util::StreamExt as _;
    let lines = views
        .map(move |item| {
            Ok::<_, std::convert::Infallible>(match item {
                Ok(v) => view_line(&v, ms()),
                Err(s) => line(json!({
                    "event": "error",
                    "code": format!("{:?}", s.code()),
                    "error": s.message(),
                    "at_ms": ms(),
                })),
            })
        })
        .chain(futures_util::stream::once(async move {
            Ok(line(json!({ "event": "end", "at_ms": ms() })))
        }));
    let stream = futures_util::stream::once(async move { Ok(first) }).chain(lines);
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// The views of `request`, invoked at the first replica of `addrs` (the
/// owning shard's: ids and client addresses) that takes it, with the
/// caller's token.
async fn forward(
    console: &Console,
    addrs: &[(u16, String)],
    request: pb::InvokeRequest,
    headers: &HeaderMap,
    timeout: Duration,
) -> Result<tonic::Response<crate::service::ViewStream>, tonic::Status> {
    let mut last = tonic::Status::unavailable("the owning shard lists no replica");
    for (id, addr) in addrs {
        let channel = console
            .channel(creek_core::ReplicaId(*id), addr)
            .map_err(tonic::Status::unavailable)?;
        let mut r = tonic::Request::new(request.clone());
        r.set_timeout(timeout);
        with_token(&mut r, headers);
        match pb::creek_client::CreekClient::new(channel).invoke(r).await {
            Ok(response) => {
                let (meta, stream, ext) = response.into_parts();
                let stream: crate::service::ViewStream = Box::pin(stream);
                return Ok(tonic::Response::from_parts(meta, stream, ext));
            }
            // Down or not serving: the next replica of the shard may.
            Err(s) if s.code() == Code::Unavailable => last = s,
            Err(s) => return Err(s),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(content_type: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, content_type.parse().expect("ascii"));
        h.insert(header::HOST, "127.0.0.1:9101".parse().expect("ascii"));
        h
    }

    fn refused_with(h: &HeaderMap, body: &str) -> StatusCode {
        match parse(h, body.as_bytes(), "http") {
            Ok(_) => StatusCode::OK,
            Err(r) => r.status(),
        }
    }

    #[test]
    fn requests_parse_into_the_service_request() {
        let h = headers("application/json; charset=utf-8");
        let (r, t) = parse(
            &h,
            br#"{"procedure":"kv.incr","args":["n",5],"level":"weak","timeout_ms":500}"#,
            "http",
        )
        .map_err(|r| r.status())
        .expect("a good request");
        assert_eq!(r.procedure, "kv.incr");
        assert_eq!(r.args.len(), 2);
        assert_eq!(r.levels, vec![pb::Level::Weak as i32]);
        assert_eq!(t, Duration::from_millis(500));
    }

    #[test]
    fn bad_requests_are_4xx() {
        let h = headers("application/json");
        assert_eq!(refused_with(&h, "{"), StatusCode::BAD_REQUEST);
        assert_eq!(refused_with(&h, r#"{"args":[]}"#), StatusCode::BAD_REQUEST);
        assert_eq!(
            refused_with(&h, r#"{"procedure":"kv.get","args":[1.5]}"#),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            refused_with(&h, r#"{"procedure":"kv.get","level":"medium"}"#),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            refused_with(&h, r#"{"procedure":"kv.get","nonsense":1}"#),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            refused_with(&h, r#"{"procedure":"kv.get","timeout_ms":0}"#),
            StatusCode::BAD_REQUEST
        );
        let form = headers("application/x-www-form-urlencoded");
        assert_eq!(
            refused_with(&form, r#"{"procedure":"kv.get"}"#),
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
        let mut other_site = headers("application/json");
        other_site.insert(
            header::ORIGIN,
            "http://evil.example".parse().expect("ascii"),
        );
        assert_eq!(
            refused_with(&other_site, r#"{"procedure":"kv.get"}"#),
            StatusCode::FORBIDDEN
        );
        let mut same_site = headers("application/json");
        same_site.insert(
            header::ORIGIN,
            "http://127.0.0.1:9101".parse().expect("ascii"),
        );
        assert_eq!(
            refused_with(&same_site, r#"{"procedure":"kv.get"}"#),
            StatusCode::OK
        );
    }

    /// Over TLS the page's origin is `https://` and this host; the same
    /// host under `http://` is another origin.
    #[test]
    fn an_https_port_takes_its_own_origin_only() {
        let with_origin = |origin: &str| {
            let mut h = headers("application/json");
            h.insert(header::ORIGIN, origin.parse().expect("ascii"));
            h
        };
        let body = br#"{"procedure":"kv.get"}"#;
        let https = with_origin("https://127.0.0.1:9101");
        assert!(parse(&https, body, "https").is_ok());
        let status = |r: Result<_, Response>| r.map(|_| ()).map_err(|r| r.status());
        assert_eq!(
            status(parse(&https, body, "http")),
            Err(StatusCode::FORBIDDEN)
        );
        let http = with_origin("http://127.0.0.1:9101");
        assert_eq!(
            status(parse(&http, body, "https")),
            Err(StatusCode::FORBIDDEN)
        );
        assert!(parse(&headers("application/json"), body, "https").is_ok());
    }
}
