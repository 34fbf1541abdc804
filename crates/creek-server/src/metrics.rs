//! Prometheus metrics, served as text on `GET /metrics`.
//!
//! Counters and histograms are updated where things happen (the client
//! service, the node loop); gauges are refreshed from the node's counters
//! every few ticks.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Labels of the op counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    /// `weak` or `strong`.
    pub level: &'static str,
    /// `ok`, `abort` (the procedure aborted), `rejected` (bad input,
    /// overload), `deadline`, `cancelled` (the client went away),
    /// `unavailable`.
    pub outcome: &'static str,
}

/// Labels of the response latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ViewLabels {
    /// `tentative` or `stable` (confirmations included).
    pub view: &'static str,
}

/// Labels of the op stage histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// `weak` or `strong`.
    pub level: &'static str,
    /// The stage reached ([`Stage::name`]).
    pub stage: &'static str,
}

/// Where an op is on its path through the replica that received it. Each
/// is timed from the op's receipt, so the stages of one level read as a
/// trace: receipt, then the node loop takes it (`invoked`: queued behind
/// other events), executes it and routes its first tentative view
/// (`executed`), the write carrying its payload is durable and the peer
/// messages that name it leave (`persisted`: they are released the moment
/// the write is), and its stable view is routed (`committed`: consensus
/// acknowledged and committed it, and the committed execution ran). The
/// gRPC side adds when the first view was handed to the response stream
/// (`answered`): what lies between it and the view routed is the hand-off
/// from the node loop to the client's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Taken by the node loop.
    Invoked,
    /// First tentative view routed.
    Executed,
    /// Its payload's write durable; held peer messages released.
    Persisted,
    /// Stable view routed.
    Committed,
    /// First view handed to the client's response stream.
    Answered,
}

impl Stage {
    /// The `stage` label.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Invoked => "invoked",
            Stage::Executed => "executed",
            Stage::Persisted => "persisted",
            Stage::Committed => "committed",
            Stage::Answered => "answered",
        }
    }
}

fn stage_histogram() -> Histogram {
    // 10 µs … ~10 s in steps of a quarter, fine enough to read a median.
    Histogram::new(exponential_buckets(10e-6, 1.25, 62))
}

/// The buckets of view latencies (here and by procedure,
/// `crate::telemetry`).
pub(crate) fn latency_histogram() -> Histogram {
    // 10 µs … ~5 s.
    Histogram::new(exponential_buckets(10e-6, 2.0, 20))
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Every metric of one replica.
pub struct Metrics {
    registry: Registry,
    /// Ops by level and outcome.
    pub ops: Family<OpLabels, Counter>,
    /// Server-side latency from receipt to each view, in seconds.
    pub view_latency: Family<ViewLabels, Histogram, fn() -> Histogram>,
    /// Time from receipt to each stage of an op's path, in seconds.
    pub op_stage: Family<StageLabels, Histogram, fn() -> Histogram>,
    /// Share of first tentative views equal to the final result.
    pub accuracy: FloatGauge,
    /// Executions per op (1.0 means nothing was re-executed).
    pub execution_ratio: FloatGauge,
    /// Executions beyond the first of each op.
    pub reexecutions: Gauge,
    /// 2 leader, 1 follower, 0 no known leader.
    pub consensus_role: Gauge,
    /// The consensus term.
    pub consensus_term: Gauge,
    /// Length of the committed list.
    pub committed: Gauge,
    /// Length of the tentative list.
    pub tentative: Gauge,
    /// Ops gossip holds out of order or has not pushed yet.
    pub gossip_backlog: Gauge,
    /// Payloads gossip holds for peers.
    pub gossip_payloads_held: Gauge,
    /// Decided ids waiting for their causal context.
    pub decided_waiting: Gauge,
    /// Group commits (durable batches).
    pub durable_batches: Gauge,
    /// Folds of the write-ahead log into the database.
    pub wal_folds: Gauge,
    /// Entries held in the consensus log (compaction keeps it bounded).
    pub log_entries: Gauge,
    /// Disk writes handed out and not yet durable (client invocations are
    /// refused past `pending_writes_max`: the disk pushes back).
    pub pending_writes: Gauge,
    /// Payloads of committed ops kept for peers that may still ask.
    pub payloads_retained: Gauge,
    /// Peer frames dropped (full queues and injected faults).
    pub peer_frames_dropped: Gauge,
    /// Peer bytes sent.
    pub peer_bytes_sent: Gauge,
    /// Inbound peer connections refused (handshake, TLS, certificate, the
    /// cap on inbound peer connections).
    pub peer_connections_refused: Gauge,
    /// Inbound peer connections closed after their handshake for what they
    /// sent (an oversized frame, a frame not finished in time).
    pub peer_connections_closed: Gauge,
    /// Peer frames the decoder refused.
    pub peer_frames_malformed: Gauge,
    /// Claims about this replica's own ops refused: ops of its origin it
    /// never issued or issued to another op, digests claiming its ops past
    /// the last one it issued.
    pub own_origin_refused: Gauge,
    /// Client connections open now over the native protocol.
    pub native_connections: Gauge,
    /// Client connections closed before they were served: a TLS handshake
    /// that failed or timed out, or no first bytes in time.
    pub client_connections_refused: Counter,
    /// Client connections the replica closed while serving them: idle, a
    /// frame stalled, a client reading too slowly.
    pub client_connections_closed: Counter,
    /// HTTP port connections closed before they were served: a TLS
    /// handshake that failed or timed out.
    pub http_connections_refused: Counter,
    /// The largest round trip to a peer measured anywhere in the group (µs).
    pub peer_rtt_us: Gauge,
    /// This replica's consensus election timeout now (ms; grows on slow links).
    pub election_timeout_ms: Gauge,
    /// How old the global stable time is at this replica (ms; -1 while it
    /// is not known, or stable times are off).
    pub stable_global_age_ms: Gauge,
    /// View latencies again, in buckets the console can read back.
    pub view_buckets: crate::console::series::ViewBuckets,
    /// Speculation telemetry by procedure.
    pub procedures: crate::telemetry::Procedures,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Register every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("creek");
        let m = Metrics {
            ops: Family::default(),
            view_latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            op_stage: Family::new_with_constructor(stage_histogram as fn() -> Histogram),
            accuracy: FloatGauge::default(),
            execution_ratio: FloatGauge::default(),
            reexecutions: Gauge::default(),
            consensus_role: Gauge::default(),
            consensus_term: Gauge::default(),
            committed: Gauge::default(),
            tentative: Gauge::default(),
            gossip_backlog: Gauge::default(),
            gossip_payloads_held: Gauge::default(),
            decided_waiting: Gauge::default(),
            durable_batches: Gauge::default(),
            wal_folds: Gauge::default(),
            log_entries: Gauge::default(),
            pending_writes: Gauge::default(),
            payloads_retained: Gauge::default(),
            peer_frames_dropped: Gauge::default(),
            peer_bytes_sent: Gauge::default(),
            peer_connections_refused: Gauge::default(),
            peer_connections_closed: Gauge::default(),
            peer_frames_malformed: Gauge::default(),
            own_origin_refused: Gauge::default(),
            native_connections: Gauge::default(),
            client_connections_refused: Counter::default(),
            client_connections_closed: Counter::default(),
            http_connections_refused: Counter::default(),
            peer_rtt_us: Gauge::default(),
            election_timeout_ms: Gauge::default(),
            stable_global_age_ms: Gauge::default(),
            view_buckets: Default::default(),
            procedures: Default::default(),
            registry: Registry::default(),
        };
        m.procedures.register(&mut registry);
        registry.register("ops", "Client ops by level and outcome", m.ops.clone());
        registry.register(
            "view_latency_seconds",
            "Latency from request receipt to each view, by view",
            m.view_latency.clone(),
        );
        registry.register(
            "op_stage_seconds",
            "Time from an op's receipt to each stage of its path at this replica, by level and stage",
            m.op_stage.clone(),
        );
        registry.register(
            "accuracy_ratio",
            "Share of first tentative views equal to the final result",
            m.accuracy.clone(),
        );
        registry.register(
            "execution_ratio",
            "Executions per op (1 means no re-execution)",
            m.execution_ratio.clone(),
        );
        registry.register(
            "reexecutions",
            "Executions beyond the first of each op",
            m.reexecutions.clone(),
        );
        registry.register(
            "consensus_role",
            "2 leader, 1 follower, 0 no known leader",
            m.consensus_role.clone(),
        );
        registry.register("consensus_term", "Consensus term", m.consensus_term.clone());
        registry.register(
            "committed_ops",
            "Length of the committed list",
            m.committed.clone(),
        );
        registry.register(
            "tentative_ops",
            "Length of the tentative list",
            m.tentative.clone(),
        );
        registry.register(
            "gossip_backlog",
            "Ops gossip buffers out of order or has yet to push",
            m.gossip_backlog.clone(),
        );
        registry.register(
            "gossip_payloads_held",
            "Payloads gossip holds for peers",
            m.gossip_payloads_held.clone(),
        );
        registry.register(
            "decided_waiting",
            "Decided ids waiting for their causal context",
            m.decided_waiting.clone(),
        );
        registry.register(
            "durable_batches",
            "Group commits written to disk",
            m.durable_batches.clone(),
        );
        registry.register(
            "wal_folds",
            "Folds of the write-ahead log into the database since the replica started",
            m.wal_folds.clone(),
        );
        registry.register(
            "peer_frames_dropped",
            "Peer frames dropped (full queues, injected faults)",
            m.peer_frames_dropped.clone(),
        );
        registry.register(
            "peer_bytes_sent",
            "Peer bytes sent",
            m.peer_bytes_sent.clone(),
        );
        registry.register(
            "peer_connections_refused",
            "Inbound peer connections refused (bad handshake, unknown peer, TLS or certificate, \
             over peer_connections_max)",
            m.peer_connections_refused.clone(),
        );
        registry.register(
            "peer_connections_closed",
            "Inbound peer connections closed for an oversized frame or one not finished within \
             peer_read_timeout_ms",
            m.peer_connections_closed.clone(),
        );
        registry.register(
            "peer_frames_malformed",
            "Peer frames the decoder refused",
            m.peer_frames_malformed.clone(),
        );
        registry.register(
            "own_origin_refused",
            "Peer messages refused for claiming ops of this replica's origin it never issued \
             (or issued to another op)",
            m.own_origin_refused.clone(),
        );
        registry.register(
            "native_connections",
            "Client connections open now over the native protocol",
            m.native_connections.clone(),
        );
        registry.register(
            "client_connections_refused",
            "Client connections closed before they were served (a TLS handshake that failed or \
             timed out, no first bytes in time)",
            m.client_connections_refused.clone(),
        );
        registry.register(
            "client_connections_closed",
            "Client connections the replica closed while serving them (idle past \
             client_idle_timeout_ms, a frame or a write stalled past client_io_timeout_ms, \
             answers unread past client_out_bytes_max)",
            m.client_connections_closed.clone(),
        );
        registry.register(
            "http_connections_refused",
            "Connections to the HTTP port (console, metrics) closed before they were served (a \
             TLS handshake that failed or timed out)",
            m.http_connections_refused.clone(),
        );
        registry.register(
            "log_entries",
            "Entries held in the consensus log",
            m.log_entries.clone(),
        );
        registry.register(
            "pending_writes",
            "Disk writes handed out and not yet durable (invocations are refused past \
             pending_writes_max)",
            m.pending_writes.clone(),
        );
        registry.register(
            "payloads_retained",
            "Payloads of committed ops kept for peers that may still ask",
            m.payloads_retained.clone(),
        );
        registry.register(
            "peer_rtt_us",
            "Largest peer round trip measured in the group (microseconds)",
            m.peer_rtt_us.clone(),
        );
        registry.register(
            "election_timeout_ms",
            "Consensus election timeout now (milliseconds; stretched for slow links)",
            m.election_timeout_ms.clone(),
        );
        m.stable_global_age_ms.set(-1);
        registry.register(
            "stable_global_age_ms",
            "Age of the global stable time at this replica (milliseconds; -1: not known, or \
             stable times off)",
            m.stable_global_age_ms.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Count one finished op.
    pub fn op(&self, strong: bool, outcome: &'static str) {
        let level = if strong { "strong" } else { "weak" };
        self.ops.get_or_create(&OpLabels { level, outcome }).inc();
    }

    /// Record that an op reached `stage` `seconds` after its receipt.
    pub fn stage(&self, strong: bool, stage: Stage, seconds: f64) {
        let level = if strong { "strong" } else { "weak" };
        self.op_stage
            .get_or_create(&StageLabels {
                level,
                stage: stage.name(),
            })
            .observe(seconds);
    }

    /// Record the latency of a view.
    pub fn view(&self, stable: bool, seconds: f64) {
        self.view_buckets.observe(stable, seconds);
        let view = if stable { "stable" } else { "tentative" };
        self.view_latency
            .get_or_create(&ViewLabels { view })
            .observe(seconds);
    }
}

/// Serve `GET /metrics` on `listener`, beside the `routes` given (the
/// console's), every request through `guard` first, over TLS with `tls`
/// (`crate::http_port`), until `shutdown` says `true`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    routes: axum::Router,
    guard: crate::http_guard::HttpGuard,
    tls: Option<Arc<crate::tls::Tls>>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let refused = metrics.http_connections_refused.clone();
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    m.encode(),
                )
            }
        }),
    );
    let app = app
        .merge(routes)
        .layer(axum::middleware::from_fn_with_state(
            guard,
            crate::http_guard::guard,
        ));
    crate::http_port::serve(listener, app, tls, refused, shutdown).await
}
