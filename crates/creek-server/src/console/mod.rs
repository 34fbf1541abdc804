//! The live web console every replica serves on its HTTP port, beside
//! `/metrics`: `GET /` (the page, embedded in the binary: no CDN, works
//! offline), `GET /api/console` (the JSON the page reads, for scripts too),
//! `GET /api/procedures` (what the invoke form offers) and `POST
//! /api/invoke` (invoke a procedure through this replica's own client
//! service and stream each view as a line of JSON).
//!
//! A sampler task builds one [`Report`] a second from what the server
//! already has: the node loop's status snapshot (the data of the `Status`
//! RPC that `creek status` prints), the journal of recent ops the node loop
//! keeps for the strip ([`journal`]), the transport's peer links, and each
//! other member's own `Status`, asked over its client address (over TLS
//! when the replica has a `[tls]` table: [`dial`]). The page and
//! scripts read the last report, so any number of open pages cost the node
//! loop nothing more.
//!
//! # Is a peer down?
//!
//! A member is `up` when it answered its `Status` within
//! [`PEER_STATUS_TIMEOUT`] at the last sample. When it did not, it is
//! `down` if this replica's peer link to it is disconnected too, and
//! `unreachable` if the peer link is still up (its process lives, but its
//! client API did not answer: overloaded, or a firewall between). Asking
//! the member itself is what makes "up" mean "serves clients"; the link
//! tells a dead process from a slow one.
//!
//! This module is not an API for programs to change the cluster: the only
//! write is the invoke endpoint, which is exactly a client's `Invoke`.

pub mod dial;
pub mod invoke;
pub mod journal;
pub mod series;
pub mod values;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use creek_core::ReplicaId;
use creek_proto::pb;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;

use crate::metrics::Metrics;
use crate::node_loop::{Event, StatusSnapshot};
use crate::service::CreekService;
use crate::transport::Transport;
use journal::Strip;
use series::{History, Reading, Sample};

/// How often the console samples.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// How long a member's `Status` may take before it counts as not answering.
pub const PEER_STATUS_TIMEOUT: Duration = Duration::from_millis(700);

/// The page.
const PAGE_HTML: &str = include_str!("assets/console.html");
/// The page's script (charts included).
const PAGE_JS: &str = include_str!("assets/console.js");

/// One member as the serving replica sees it.
#[derive(Clone, Debug, Serialize)]
pub struct Member {
    /// Its id.
    pub replica: u16,
    /// `voter`, `learner`, … (its place in the group).
    pub membership: String,
    /// `up`, `down` or `unreachable` (see the module's doc).
    pub health: &'static str,
    /// Whether this replica's peer link to it is connected (none for the
    /// serving replica itself).
    pub peer_link: Option<bool>,
    /// Its client address.
    pub client_addr: String,
    /// Its consensus role as it reports it (`leader`, `follower`,
    /// `candidate`, `joining`, `lost`, …); none when it did not answer.
    pub role: Option<String>,
    /// The leader it knows of (0: none).
    pub leader: Option<u16>,
    /// Its consensus term.
    pub term: Option<u64>,
    /// Length of its committed list.
    pub committed: Option<u64>,
    /// Length of its tentative list.
    pub tentative: Option<u64>,
    /// Ops its gossip holds out of order or has yet to push.
    pub gossip_backlog: Option<u64>,
    /// Seconds since it last answered (none: never, since this console
    /// started).
    pub last_seen_s: Option<f64>,
    /// Why it did not answer.
    pub error: Option<String>,
}

/// This replica's own numbers (cumulative since it started).
#[derive(Clone, Debug, Serialize)]
pub struct Local {
    /// Its consensus role, or `joining` / `lost` / `removed`.
    pub role: &'static str,
    /// Why it is joining or lost (empty for a member).
    pub standing_detail: String,
    /// A majority of the replicas lost their data.
    pub quorum_lost: bool,
    /// Weak ops invoked here.
    pub invoked_weak: u64,
    /// Strong ops invoked here.
    pub invoked_strong: u64,
    /// Share of finished ops whose first preliminary view was right.
    pub accuracy: Option<f64>,
    /// Executions per op (1.0: nothing re-executed).
    pub execution_ratio: Option<f64>,
    /// Executions beyond the first of each op.
    pub reexecutions: u64,
}

/// The console's JSON (`GET /api/console`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The serving replica.
    pub replica: u16,
    /// When this report was built, in milliseconds since the console
    /// started.
    pub updated_ms: u64,
    /// Milliseconds between samples.
    pub interval_ms: u64,
    /// The leader this replica knows of (0: none).
    pub leader: u16,
    /// This replica's consensus term.
    pub term: u64,
    /// Every member of the group, by id.
    pub members: Vec<Member>,
    /// This replica's cumulative numbers.
    pub local: Local,
    /// One sample per interval, oldest first.
    pub series: Vec<Sample>,
    /// The strip: committed tail, tentative head and recent ops.
    pub strip: Strip,
    /// The cluster's groups, on a sharded cluster.
    pub shards: Option<ShardsView>,
    /// Speculation telemetry by procedure, most called first
    /// (`crate::telemetry`).
    pub procedures: Vec<serde_json::Value>,
}

/// A sharded cluster as the serving replica sees it: the map's epoch and
/// every group (each shard, then the directory), each replica asked for
/// its `Status` at the sample.
#[derive(Clone, Debug, Serialize)]
pub struct ShardsView {
    /// The epoch of the map this replica serves under.
    pub epoch: u64,
    /// The group this replica is one of (`shard 0`, `directory`).
    pub serves: String,
    /// Every group.
    pub groups: Vec<GroupView>,
    /// The move of keys in flight or finishing in this replica's map, if
    /// any (`slots 0..1024 of … from shard 0 to shard 1 (copying)`).
    pub moving: Option<String>,
}

/// One group of a sharded cluster.
#[derive(Clone, Debug, Serialize)]
pub struct GroupView {
    /// `shard N` or `directory`.
    pub name: String,
    /// The leader its replicas name (0: none answered or none elected).
    pub leader: u16,
    /// Its replicas.
    pub replicas: Vec<GroupReplica>,
    /// Stored versions at one of its replicas (about its keys: a size),
    /// if one other than this replica's group answered.
    pub versions: Option<u64>,
    /// Ops committed there (a load, since that replica started).
    pub committed: Option<u64>,
    /// A move of keys its leader is copying into it: round, keys and bytes
    /// copied so far.
    pub moving_in: Option<String>,
}

/// One replica of a group.
#[derive(Clone, Debug, Serialize)]
pub struct GroupReplica {
    /// Its id.
    pub replica: u16,
    /// Its client address.
    pub client_addr: String,
    /// `up` (it answered) or `down`.
    pub health: &'static str,
    /// Its consensus role, if it answered.
    pub role: Option<String>,
}

/// What the console serves from, shared by the HTTP handlers and the
/// sampler.
pub struct Console {
    me: ReplicaId,
    events: mpsc::Sender<Event>,
    pub(crate) service: CreekService,
    transport: Arc<Transport>,
    metrics: Arc<Metrics>,
    started: Instant,
    body_bytes_max: usize,
    /// This replica's TLS, if it has a `[tls]` table: the console then
    /// reaches the other replicas over it and its own page is `https`.
    tls: Option<Arc<crate::tls::Tls>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    history: History,
    report: Option<Arc<String>>,
    /// By replica and client address.
    channels: BTreeMap<(u16, String), Channel>,
    last_seen: BTreeMap<u16, Instant>,
}

impl Console {
    /// A console over this replica's service; with `tls`, it reaches the
    /// other replicas over TLS with this replica's certificate.
    pub fn new(
        service: CreekService,
        body_bytes_max: usize,
        tls: Option<Arc<crate::tls::Tls>>,
    ) -> Console {
        Console {
            me: service.front.me,
            events: service.front.events.clone(),
            transport: service.front.transport.clone(),
            metrics: service.front.metrics.clone(),
            service,
            started: Instant::now(),
            body_bytes_max,
            tls,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The last report as JSON (none before the first sample).
    pub fn report_json(&self) -> Option<Arc<String>> {
        self.state().report.clone()
    }

    /// Sample every [`SAMPLE_INTERVAL`] until the node loop goes away.
    pub async fn run_sampler(self: Arc<Self>) {
        let mut iv = tokio::time::interval(SAMPLE_INTERVAL);
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            iv.tick().await;
            if self.events.is_closed() {
                return;
            }
            match self.sample().await {
                Some(json) => self.state().report = Some(Arc::new(json)),
                None => tracing::debug!("the console skipped a sample: the node loop is busy"),
            }
        }
    }

    /// Ask the node loop for something, giving up after a while (a sample
    /// is skipped rather than queued behind a stuck loop).
    async fn ask<T>(&self, event: impl FnOnce(oneshot::Sender<T>) -> Event) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        let wait = Duration::from_secs(2);
        tokio::time::timeout(wait, self.events.send(event(tx)))
            .await
            .ok()?
            .ok()?;
        tokio::time::timeout(wait, rx).await.ok()?.ok()
    }

    async fn sample(&self) -> Option<String> {
        let status = self.ask(Event::Status).await?;
        let strip = self.ask(Event::Strip).await?;
        let me = self.me.0;
        let members_addrs: Vec<(ReplicaId, String)> = status
            .group
            .members()
            .into_iter()
            .filter(|id| *id != self.me)
            .map(|id| {
                let addr = status.addrs.get(&id).map(|a| a.client.clone());
                (id, addr.unwrap_or_default())
            })
            .collect();
        let asked = futures_util::future::join_all(
            members_addrs
                .iter()
                .map(|(id, addr)| self.peer_status(*id, addr.clone())),
        )
        .await;
        // What this sample already knows of its own group's members, for
        // the shards view (asked once).
        let mut known: BTreeMap<u16, Option<(String, u16)>> = members_addrs
            .iter()
            .zip(&asked)
            .map(|((id, _), answer)| {
                let seen = answer
                    .as_ref()
                    .ok()
                    .map(|s| (s.role.clone(), u16::try_from(s.leader).unwrap_or(0)));
                (id.0, seen)
            })
            .collect();
        known.insert(me, Some((status.role.to_owned(), status.leader)));
        let shards = self.shards_view(&known).await;
        let links: BTreeMap<u16, bool> = self
            .transport
            .peers()
            .into_iter()
            .map(|(id, _, connected)| (id.0, connected))
            .collect();
        let now = Instant::now();
        let mut members = vec![self.own_member(&status)];
        let mut cluster_ops = BTreeMap::new();
        cluster_ops.insert(me, ops_of(&status.counters));
        {
            let mut st = self.state();
            for ((id, addr), answer) in members_addrs.into_iter().zip(asked) {
                if answer.is_ok() {
                    st.last_seen.insert(id.0, now);
                }
                let last_seen_s = st
                    .last_seen
                    .get(&id.0)
                    .map(|t| now.duration_since(*t).as_secs_f64());
                let link = links.get(&id.0).copied();
                let mut m = Member {
                    replica: id.0,
                    membership: membership(&status, id).to_owned(),
                    health: "up",
                    peer_link: Some(link.unwrap_or(false)),
                    client_addr: addr,
                    role: None,
                    leader: None,
                    term: None,
                    committed: None,
                    tentative: None,
                    gossip_backlog: None,
                    last_seen_s,
                    error: None,
                };
                match answer {
                    Ok(s) => {
                        let counters: BTreeMap<String, u64> = s.counters.into_iter().collect();
                        cluster_ops.insert(id.0, ops_of(&counters));
                        m.role = Some(s.role);
                        m.leader = u16::try_from(s.leader).ok();
                        m.term = Some(s.term);
                        m.committed = Some(s.committed);
                        m.tentative = Some(s.tentative);
                        m.gossip_backlog = counters.get("gossip_backlog").copied();
                    }
                    Err(e) => {
                        m.health = if link == Some(true) {
                            "unreachable"
                        } else {
                            "down"
                        };
                        m.error = Some(e);
                    }
                }
                members.push(m);
            }
            members.sort_by_key(|m| m.replica);
            let at_ms = now.duration_since(self.started).as_millis() as u64;
            st.history.push(Reading {
                at_ms,
                counters: status.counters.clone(),
                cluster_ops,
                buckets: self.metrics.view_buckets.counts(),
            });
            let report = Report {
                replica: me,
                updated_ms: at_ms,
                interval_ms: SAMPLE_INTERVAL.as_millis() as u64,
                leader: status.leader,
                term: status.term,
                members,
                local: local(&status),
                series: st.history.samples(),
                strip,
                shards,
                procedures: self.metrics.procedures.table(),
            };
            serde_json::to_string(&report).ok()
        }
    }

    fn own_member(&self, s: &StatusSnapshot) -> Member {
        Member {
            replica: self.me.0,
            membership: membership(s, self.me).to_owned(),
            health: "up",
            peer_link: None,
            client_addr: s
                .addrs
                .get(&self.me)
                .map(|a| a.client.clone())
                .unwrap_or_default(),
            role: Some(s.role.to_owned()),
            leader: Some(s.leader),
            term: Some(s.term),
            committed: Some(s.committed),
            tentative: Some(s.tentative),
            gossip_backlog: s.counters.get("gossip_backlog").copied(),
            last_seen_s: Some(0.0),
            error: None,
        }
    }

    /// A member's `Status`, through a channel kept per address (it
    /// reconnects by itself).
    /// Every group of a sharded cluster, each replica asked for its
    /// `Status` — but those `known` already answered for this sample (this
    /// replica and its own group's members: their role and leader, `None`
    /// if they did not answer).
    async fn shards_view(
        &self,
        known: &BTreeMap<u16, Option<(String, u16)>>,
    ) -> Option<ShardsView> {
        let gate = self.service.front.shards.clone()?;
        let crate::shards::Groups { own, epoch, groups } = gate.groups();
        let map = gate.map();
        let moving = match (&map.moving, &map.finishing) {
            (Some(m), _) => Some(format!("{m} (copying)")),
            (None, Some(m)) => Some(format!("{m} (switched, cleaning up)")),
            (None, None) => None,
        };
        let mut view = ShardsView {
            epoch,
            serves: own,
            groups: Vec::with_capacity(groups.len()),
            moving,
        };
        for (name, replicas) in groups {
            let statuses = futures_util::future::join_all(replicas.iter().map(|(id, addr)| {
                let seen = known.get(id).cloned();
                async move {
                    if let Some(seen) = seen {
                        return seen.map(|s| (s, None));
                    }
                    let s = self.peer_status(ReplicaId(*id), addr.clone()).await.ok()?;
                    let counters: BTreeMap<String, u64> = s.counters.into_iter().collect();
                    let about = (s.role, u16::try_from(s.leader).unwrap_or(0));
                    Some((about, Some((counters, s.committed))))
                }
            }))
            .await;
            let counted: Vec<&(BTreeMap<String, u64>, u64)> = statuses
                .iter()
                .flatten()
                .filter_map(|(_, c)| c.as_ref())
                .collect();
            let versions = counted
                .first()
                .and_then(|(c, _)| c.get("exec_versions_alive").copied());
            let committed = counted.first().map(|(_, n)| *n);
            let moving_in = counted.iter().find_map(|(c, _)| {
                (c.get("move_active") == Some(&1)).then(|| {
                    let get = |k: &str| c.get(k).copied().unwrap_or(0);
                    format!(
                        "round {}: {} keys, {} bytes copied",
                        get("move_rounds") + 1,
                        get("move_keys_copied"),
                        get("move_bytes_copied")
                    )
                })
            });
            let answers: Vec<Option<(String, u16)>> = statuses
                .into_iter()
                .map(|s| s.map(|(about, _)| about))
                .collect();
            let leader = answers
                .iter()
                .flatten()
                .map(|(_, leader)| *leader)
                .find(|l| *l != 0)
                .unwrap_or(0);
            let replicas = replicas
                .into_iter()
                .zip(answers)
                .map(|((replica, client_addr), answer)| GroupReplica {
                    replica,
                    client_addr,
                    health: if answer.is_some() { "up" } else { "down" },
                    role: answer.map(|(role, _)| role),
                })
                .collect();
            view.groups.push(GroupView {
                name,
                leader,
                replicas,
                versions,
                committed,
                moving_in,
            });
        }
        Some(view)
    }

    /// A channel to replica `id` at the client address `addr` (kept for
    /// the next call), over TLS when this replica has it ([`dial`]).
    pub(crate) fn channel(&self, id: ReplicaId, addr: &str) -> Result<Channel, String> {
        let mut st = self.state();
        let key = (id.0, addr.to_owned());
        if let Some(c) = st.channels.get(&key) {
            return Ok(c.clone());
        }
        let c = dial::channel(id, addr, self.tls.as_ref(), PEER_STATUS_TIMEOUT)?;
        st.channels.insert(key, c.clone());
        Ok(c)
    }

    /// The scheme of this replica's own HTTP port.
    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    async fn peer_status(&self, id: ReplicaId, addr: String) -> Result<pb::StatusReply, String> {
        if addr.is_empty() {
            return Err("no known client address".to_owned());
        }
        let channel = self.channel(id, &addr)?;
        let mut client = pb::creek_client::CreekClient::new(channel);
        match tokio::time::timeout(PEER_STATUS_TIMEOUT, client.status(pb::StatusRequest {})).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(format!("{:?}: {}", s.code(), s.message())),
            Err(_) => Err(format!("no answer within {PEER_STATUS_TIMEOUT:?}")),
        }
    }
}

fn ops_of(counters: &BTreeMap<String, u64>) -> (u64, u64) {
    let get = |k: &str| counters.get(k).copied().unwrap_or(0);
    (get("invoked_weak"), get("invoked_strong"))
}

fn membership(s: &StatusSnapshot, id: ReplicaId) -> &'static str {
    let g = &s.group;
    if g.voters.contains(&id) || g.voters_outgoing.contains(&id) {
        "voter"
    } else {
        "learner"
    }
}

fn local(s: &StatusSnapshot) -> Local {
    let get = |k: &str| s.counters.get(k).copied().unwrap_or(0);
    let checked = get("accuracy_checked");
    let ops = get("exec_ops");
    Local {
        role: s.role,
        standing_detail: s.standing_detail.clone(),
        quorum_lost: s.quorum_lost,
        invoked_weak: get("invoked_weak"),
        invoked_strong: get("invoked_strong"),
        accuracy: (checked > 0).then(|| get("accuracy_hits") as f64 / checked as f64),
        execution_ratio: (ops > 0).then(|| get("executions") as f64 / ops as f64),
        reexecutions: get("reexecutions"),
    }
}

/// The procedures this replica runs, as JSON (`GET /api/procedures`), from
/// the same answer as the `Procedures` RPC.
async fn procedures_json(console: &Console) -> String {
    let request = tonic::Request::new(pb::ProceduresRequest {});
    let list = match pb::creek_server::Creek::procedures(&console.service, request).await {
        Ok(r) => r.into_inner().procedures,
        Err(_) => Vec::new(),
    };
    let procedures: Vec<serde_json::Value> = list
        .iter()
        .filter(|p| {
            !p.name
                .starts_with(creek_procs::session::INTERNAL_PROC_PREFIX)
        })
        .map(|p| {
            let params: Vec<serde_json::Value> = p
                .params
                .iter()
                .map(|a| serde_json::json!({ "name": a.name, "type": a.r#type }))
                .collect();
            serde_json::json!({
                "name": p.name,
                "params": params,
                "returns": p.returns,
                "summary": p.summary,
                "read_only": p.read_only,
            })
        })
        .collect();
    serde_json::json!({ "procedures": procedures }).to_string()
}

/// The console's routes, to merge with `/metrics`.
pub fn router(console: Arc<Console>) -> axum::Router {
    use axum::http::header;
    use axum::response::IntoResponse;
    use axum::routing::{get, post};
    let page = || async {
        (
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            PAGE_HTML,
        )
    };
    let api = console.clone();
    let procs = console.clone();
    axum::Router::new()
        .route("/", get(page))
        .route("/console", get(page))
        .route(
            "/console.js",
            get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
                        (header::CACHE_CONTROL, "no-cache"),
                    ],
                    PAGE_JS,
                )
            }),
        )
        .route(
            "/api/console",
            get(move || {
                let c = api.clone();
                async move {
                    match c.report_json() {
                        Some(json) => (
                            [
                                (header::CONTENT_TYPE, "application/json"),
                                (header::CACHE_CONTROL, "no-store"),
                            ],
                            json.as_str().to_owned(),
                        )
                            .into_response(),
                        None => invoke::json_error(
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            "unavailable",
                            "the console has not sampled yet; retry in a second",
                        ),
                    }
                }
            }),
        )
        .route(
            "/api/procedures",
            get(move || {
                let c = procs.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        procedures_json(&c).await,
                    )
                }
            }),
        )
        .route(
            "/api/invoke",
            post(move |headers, body| invoke::handle(console.clone(), headers, body)),
        )
}
