//! What the client commands share: where the cluster is (`--addr`,
//! `CREEK_ENDPOINTS`), how data is printed (`-o`), values as JSON, the exit
//! codes scripts can test, and errors that say what was reached.

/// `println!` for a client command's output: a reader that went away
/// (`creek proc show X | head`) ends the command quietly instead of a
/// panic on the broken pipe.
macro_rules! out {
    () => {
        $crate::cli::write_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_line(format_args!($($arg)*))
    };
}

use std::process::ExitCode;

use creek_client::Error;
use creek_types::value::Value;

/// The client addresses of the three replicas of `creek dev`.
pub(crate) const DEV_ADDRS: [&str; 3] = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"];

/// Exit codes (docs/operations.md, "Exit codes"). 2 is a usage error
/// (clap's own).
pub(crate) mod exit {
    /// The command failed: a refused request, no replica reached.
    pub const FAILED: u8 = 1;
    /// A replica of the group is down or unreachable; the group keeps a
    /// quorum.
    pub const DEGRADED: u8 = 3;
    /// The group has no quorum (or no leader): strong ops cannot finish.
    pub const NO_QUORUM: u8 = 4;
    /// The deadline passed before the final view; the op may still commit
    /// (retry with `--request-id`).
    pub const DEADLINE: u8 = 5;
    /// The procedure aborted.
    pub const ABORTED: u8 = 6;
}

/// A command's failure: what to print and the exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::new(exit::FAILED, message)
    }
}

/// Print the failure (if any) and turn it into the process's exit code.
pub(crate) fn finish(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if !f.message.is_empty() {
                eprintln!("creek: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}

/// `--addr` (repeated or comma-separated) or `CREEK_ENDPOINTS`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Endpoints {
    /// Replicas' client addresses, comma-separated or repeated: the first
    /// that answers is used, the others on failure. Default: the
    /// CREEK_ENDPOINTS variable, else the three replicas of `creek dev`.
    #[arg(
        long = "addr",
        value_name = "ADDR,...",
        value_delimiter = ',',
        env = "CREEK_ENDPOINTS",
        global = true
    )]
    addrs: Vec<String>,
    /// TLS: the CA certificate (PEM) that signed the replicas'
    /// certificates; addresses are then reached with TLS
    /// (docs/security.md).
    #[arg(long, value_name = "FILE", env = "CREEK_CA", global = true)]
    ca: Option<std::path::PathBuf>,
    /// TLS: this client's certificate (PEM), for clusters that require one.
    #[arg(long, value_name = "FILE", env = "CREEK_CERT", global = true)]
    cert: Option<std::path::PathBuf>,
    /// TLS: this client's private key (PEM).
    #[arg(long, value_name = "FILE", env = "CREEK_KEY", global = true)]
    key: Option<std::path::PathBuf>,
    /// The token (`creek_<id>_<secret>`) sent with every call, for
    /// clusters with `[auth] enabled` (docs/security.md). Prefer the
    /// variable: a flag shows in the process list.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "CREEK_TOKEN",
        global = true,
        hide_env_values = true
    )]
    token: Option<String>,
}

/// How this command reaches the replicas, for explaining a refused
/// connection (one command, one set of endpoints).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsUse {
    /// Plaintext (no `--ca`).
    Plain,
    /// TLS with the CA only, no client certificate.
    CaOnly,
    /// TLS with a client certificate.
    WithCert,
}

static TLS_USE: std::sync::OnceLock<TlsUse> = std::sync::OnceLock::new();

impl Endpoints {
    /// The TLS options `--ca`, `--cert` and `--key` make (none without
    /// `--ca`: plaintext).
    pub(crate) fn tls(&self) -> Result<Option<creek_client::TlsOptions>, Failure> {
        let _ = TLS_USE.set(match (&self.ca, &self.cert) {
            (None, _) => TlsUse::Plain,
            (Some(_), None) => TlsUse::CaOnly,
            (Some(_), Some(_)) => TlsUse::WithCert,
        });
        creek_client::TlsFiles {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
        }
        .options()
        .map_err(|e| Failure::new(exit::FAILED, e.to_string()))
    }

    /// The TLS options and the token: how clients connect.
    pub(crate) fn options(&self) -> Result<creek_client::ConnectOptions, Failure> {
        Ok(creek_client::ConnectOptions {
            tls: self.tls()?,
            token: self.token.clone().filter(|t| !t.trim().is_empty()),
            ..creek_client::ConnectOptions::default()
        })
    }

    /// `message` as a request carrying the token, for a channel of
    /// [`Endpoints::channel`].
    pub(crate) fn request<T>(&self, message: T) -> Result<tonic::Request<T>, String> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = self.token.as_deref().filter(|t| !t.trim().is_empty()) {
            let value = format!("Bearer {}", token.trim())
                .parse()
                .map_err(|_| "the token is not printable ASCII".to_owned())?;
            request.metadata_mut().insert("authorization", value);
        }
        Ok(request)
    }

    /// A tonic channel to `addr` with these TLS options (calls on it carry
    /// the token only through [`Endpoints::request`]).
    pub(crate) async fn channel(&self, addr: &str) -> Result<tonic::transport::Channel, String> {
        let tls = self.tls().map_err(|f| f.message)?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let uri = if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("{scheme}://{addr}")
        };
        let mut endpoint = tonic::transport::Endpoint::from_shared(uri)
            .map_err(|e| format!("bad address {addr:?}: {e}"))?;
        if let Some(tls) = tls {
            endpoint = endpoint
                .tls_config(tls.tonic())
                .map_err(|e| format!("TLS options: {e}"))?;
        }
        endpoint.connect().await.map_err(|e| e.to_string())
    }

    /// The addresses given, or `creek dev`'s.
    pub(crate) fn list(&self) -> Vec<String> {
        let given: Vec<String> = self
            .addrs
            .iter()
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect();
        if given.is_empty() {
            DEV_ADDRS.iter().map(|a| (*a).to_owned()).collect()
        } else {
            given
        }
    }
}

/// How a command prints data.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Format {
    /// Aligned columns for people.
    #[default]
    Table,
    /// One JSON object per line (per view, per row).
    Json,
    /// The bare value only (bytes written as they are), for scripts.
    Value,
}

/// `-o table|json|value`.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(crate) struct Output {
    /// Output format: table, json (one object per line) or value (the bare
    /// result).
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        default_value_t,
        global = true
    )]
    pub(crate) output: Format,
}

/// A value as JSON: nil is null, bytes a string (or `{"hex": ...}` if
/// they are not UTF-8), lists arrays.
pub(crate) fn value_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Nil => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(n) => J::from(*n),
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => J::String(s.to_owned()),
            Err(_) => serde_json::json!({ "hex": hex(b) }),
        },
        Value::List(items) => J::Array(items.iter().map(value_json).collect()),
    }
}

/// Lower-case hex of `b`.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Connect to the first of `addrs` that answers (with `endpoints`' TLS
/// options), with an error that says what was tried.
pub(crate) async fn connect(
    endpoints: &Endpoints,
    addrs: &[String],
) -> Result<creek_client::Client, Failure> {
    creek_client::Client::connect_with_options(addrs.iter().cloned(), endpoints.options()?)
        .await
        .map_err(|e| Failure::new(exit::FAILED, explain(&e, addrs)))
}

/// Connect to the cluster through the first of `addrs` that answers (any
/// replica of any shard), learn its shard map and connect to every shard.
pub(crate) async fn connect_cluster(
    endpoints: &Endpoints,
    addrs: &[String],
) -> Result<creek_client::Cluster, Failure> {
    creek_client::Cluster::connect_with_options(addrs.iter().cloned(), endpoints.options()?)
        .await
        .map_err(|e| Failure::new(exit::FAILED, explain(&e, addrs)))
}

/// The procedures the cluster runs, with their signatures.
pub(crate) async fn procedures(
    client: &creek_client::Client,
    addrs: &[String],
) -> Result<Vec<creek_client::pb::ProcedureInfo>, Failure> {
    client
        .procedures()
        .await
        .map_err(|e| Failure::new(exit::FAILED, explain(&e, addrs)))
}

/// How long the definition commands (`creek proc register`, `creek
/// keyspace create`, …) wait for their closing view.
pub(crate) const DEFINITION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Invoke `procedure` at `levels` and wait for its closing view: its
/// outcome (`Err` with the procedure's message when it aborted).
pub(crate) async fn call_closing(
    client: &creek_client::Client,
    addrs: &[String],
    procedure: &str,
    args: Vec<Value>,
    levels: creek_client::Levels,
) -> Result<Result<Value, String>, Failure> {
    let failed = |e: Error| Failure::new(exit::FAILED, explain(&e, addrs));
    let options = creek_client::CallOptions {
        timeout: Some(DEFINITION_TIMEOUT),
        ..creek_client::CallOptions::default()
    };
    let op = client
        .invoke_with(procedure, args, levels, options)
        .await
        .map_err(failed)?;
    let view = op.final_view().await.map_err(failed)?;
    Ok(view.outcome)
}

/// The items of a list result, or a failure naming what came instead.
pub(crate) fn list_items(procedure: &str, v: Value) -> Result<Vec<Value>, Failure> {
    match v {
        Value::List(items) => Ok(items),
        other => Err(Failure::new(
            exit::FAILED,
            format!("{procedure} answered {other}, not a list"),
        )),
    }
}

/// Bytes as text (lossy), for names and labels.
pub(crate) fn text_of(v: &Value) -> String {
    match v {
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        other => other.to_string(),
    }
}

/// The error's text, with what was reached when the address answered but
/// is not a replica's client port (a metrics or peer port, another
/// server).
pub(crate) fn explain(e: &Error, addrs: &[String]) -> String {
    explain_with(e, addrs, TLS_USE.get().copied().unwrap_or(TlsUse::Plain))
}

/// [`explain`], for a command that reached the replicas as `tls` says.
fn explain_with(e: &Error, addrs: &[String], tls: TlsUse) -> String {
    let text = e.to_string();
    let reached = addrs.join(", ");
    if let Some(code) = http_status(&text) {
        return format!(
            "{reached} answered HTTP {code}, not gRPC: not a Creek client port (the metrics \
             or console port?). Replicas serve clients on their client_addr; `creek dev` on \
             127.0.0.1:7001-7003"
        );
    }
    let not_http2 = [
        "frame with invalid size",
        "invalid HTTP version",
        "connection error: protocol error",
        "http2 error",
        "received unexpected",
    ];
    // A connection closed without any HTTP/2 answer (a peer port hangs up
    // on a stranger's first bytes).
    let closed = matches!(e, Error::Transport(m)
        if m == "transport error" || m.contains("operation was canceled"));
    let not_our_ca = ["BadSignature", "UnknownIssuer"];
    if not_our_ca.iter().any(|m| text.contains(m)) {
        return format!(
            "{reached} presented a certificate the CA given (--ca, CREEK_CA) did not sign: \
             give the CA of the cluster's certificates (docs/security.md)"
        );
    }
    if closed || not_http2.iter().any(|m| text.contains(m)) {
        return match tls {
            TlsUse::Plain => format!(
                "{reached} closed the connection without a gRPC (HTTP/2) answer. If the \
                 cluster uses TLS, give its CA (--ca or CREEK_CA) and, if it requires one, a \
                 client certificate (--cert and --key; docs/security.md); otherwise, is it a \
                 Creek client port? (a replica's peer port hangs up like this, and so does a \
                 replica that stops)"
            ),
            TlsUse::CaOnly => format!(
                "{reached} closed the TLS connection: the cluster requires a client \
                 certificate signed by its CA (--cert and --key, or CREEK_CERT and \
                 CREEK_KEY; `creek certs create-client` makes one)"
            ),
            TlsUse::WithCert => format!(
                "{reached} closed the TLS connection: it did not accept the client \
                 certificate (is it signed by the cluster's CA? `creek certs create-client` \
                 makes one), or it is not a Creek client port"
            ),
        };
    }
    text
}

/// The HTTP status in tonic's "mapped from HTTP status code 404".
fn http_status(text: &str) -> Option<u16> {
    let rest = text.split("HTTP status code ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A current-thread runtime for a client command.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))
}

/// Write one line of a client command's output (see [`out!`]).
pub(crate) fn write_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"));
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            // The reader has what it wanted; nothing is left to say.
            std::process::exit(0);
        }
        eprintln!("creek: writing the output: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn values_print_as_json() {
        let v = Value::List(vec![
            Value::Nil,
            Value::Int(-3),
            Value::Bytes(Bytes::from_static(b"hi")),
            Value::Bytes(Bytes::from_static(&[0xff, 0x00])),
            Value::Bool(true),
        ]);
        assert_eq!(
            value_json(&v).to_string(),
            r#"[null,-3,"hi",{"hex":"ff00"},true]"#
        );
    }

    #[test]
    fn a_wrong_port_is_named() {
        let addrs = vec!["127.0.0.1:9101".to_owned()];
        let e = Error::Rpc {
            code: tonic::Code::Unimplemented,
            message: "grpc-status header missing, mapped from HTTP status code 404".into(),
        };
        let text = explain(&e, &addrs);
        assert!(
            text.starts_with("127.0.0.1:9101 answered HTTP 404, not gRPC"),
            "{text}"
        );
        let closed = Error::Transport("transport error".into());
        let text = explain_with(&closed, &addrs, TlsUse::Plain);
        assert!(text.contains("without a gRPC (HTTP/2) answer"), "{text}");
        assert!(text.contains("give its CA (--ca or CREEK_CA)"), "{text}");
        let text = explain_with(&closed, &addrs, TlsUse::CaOnly);
        assert!(text.contains("requires a client certificate"), "{text}");
        let text = explain_with(&closed, &addrs, TlsUse::WithCert);
        assert!(
            text.contains("did not accept the client certificate"),
            "{text}"
        );
        let foreign = Error::Unavailable(
            "no replica answered: 127.0.0.1:9101: transport error: invalid peer certificate: \
             BadSignature"
                .into(),
        );
        let text = explain_with(&foreign, &addrs, TlsUse::WithCert);
        assert!(
            text.contains("the CA given (--ca, CREEK_CA) did not sign"),
            "{text}"
        );
        let other = Error::Unavailable("stopping".into());
        assert_eq!(explain(&other, &addrs), "unavailable: stopping");
    }
}
