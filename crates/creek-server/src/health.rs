//! `GET /health` and `GET /ready` on the HTTP port, for load balancers,
//! orchestrators and monitoring (docs/operations.md, "Health and
//! readiness"). Both answer JSON without a token: they say whether to send
//! traffic here, never what the data holds.
//!
//! - `/health`: the process serves. 503 with a reason when the node loop
//!   does not answer within `health.loop_stall_ms`, the replica stopped on
//!   a fatal error (the process exits next), or a disk write has waited
//!   `health.disk_behind_ms` for its fsync. etcd's `/health` in spirit.
//! - `/ready`: healthy, and a voting member of its group that knows a
//!   leader (consensus checks quorum: a leader that loses its majority
//!   steps down within an election timeout, and a follower cut off from
//!   its leader forgets it) and has applied all but at most
//!   `health.ready_lag_entries` of the entries it knows committed, the
//!   ops it recovered from its log after a restart run again.
//!   CockroachDB's `/health?ready=1` in spirit.

use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::{mpsc, oneshot};

use crate::config::HealthConfig;
use crate::node_loop::{Event, HealthSnapshot};

/// The health routes, to merge with `/metrics` and the console.
pub fn router(events: mpsc::Sender<Event>, config: HealthConfig) -> axum::Router {
    use axum::routing::get;
    let (ev, cfg) = (events.clone(), config.clone());
    axum::Router::new()
        .route(
            "/health",
            get(move || {
                let (ev, cfg) = (ev.clone(), cfg.clone());
                async move {
                    let asked = ask(&ev, &cfg).await;
                    answer(health(&asked, &cfg).map(|()| serde_json::json!({"status": "ok"})))
                }
            }),
        )
        .route(
            "/ready",
            get(move || {
                let (ev, cfg) = (events.clone(), config.clone());
                async move {
                    let asked = ask(&ev, &cfg).await;
                    answer(ready(&asked, &cfg))
                }
            }),
        )
}

/// The node loop's health snapshot, or why there is none within the
/// stall bound.
async fn ask(events: &mpsc::Sender<Event>, cfg: &HealthConfig) -> Result<HealthSnapshot, String> {
    let stall = Duration::from_millis(cfg.loop_stall_ms);
    let stuck = || {
        format!(
            "the node loop has not answered for {} ms (health.loop_stall_ms): it is stuck or overloaded",
            cfg.loop_stall_ms
        )
    };
    let (tx, rx) = oneshot::channel();
    let asked = async {
        events
            .send(Event::Health(tx))
            .await
            .map_err(|_| "the node loop has stopped".to_owned())?;
        rx.await.map_err(|_| "the node loop has stopped".to_owned())
    };
    tokio::time::timeout(stall, asked)
        .await
        .map_err(|_| stuck())?
}

/// Whether the process serves, or why not.
fn health(asked: &Result<HealthSnapshot, String>, cfg: &HealthConfig) -> Result<(), String> {
    let s = asked.as_ref().map_err(Clone::clone)?;
    if let Some(why) = &s.failed {
        return Err(format!("the replica stopped: {why}"));
    }
    if let Some(waited) = s.disk_waiting {
        if waited >= Duration::from_millis(cfg.disk_behind_ms) {
            return Err(format!(
                "the disk is behind: a write has waited {} ms for its fsync (health.disk_behind_ms = {})",
                waited.as_millis(),
                cfg.disk_behind_ms
            ));
        }
    }
    Ok(())
}

/// Whether to send traffic here: the answer's body, or why not.
fn ready(
    asked: &Result<HealthSnapshot, String>,
    cfg: &HealthConfig,
) -> Result<serde_json::Value, String> {
    health(asked, cfg)?;
    let s = asked.as_ref().map_err(Clone::clone)?;
    if s.standing != "member" {
        return Err(format!(
            "the replica is {}, not a member serving its group",
            s.standing
        ));
    }
    if !s.voter {
        return Err("the replica is a learner of its group, not yet a voter".into());
    }
    if s.leader == 0 {
        return Err(format!(
            "no known leader: this replica ({}) reaches no majority of its group",
            s.role
        ));
    }
    if s.recovering_ops > 0 {
        return Err(format!(
            "running the {} ops it recovered from its data directory again (client calls are \
             refused until then)",
            s.recovering_ops
        ));
    }
    let lag = s.commit_index.saturating_sub(s.applied_index);
    if lag > cfg.ready_lag_entries {
        return Err(format!(
            "catching up: {lag} committed entries not applied yet (health.ready_lag_entries = {})",
            cfg.ready_lag_entries
        ));
    }
    Ok(serde_json::json!({
        "status": "ready",
        "role": s.role,
        "leader": s.leader,
        "lag_entries": lag,
    }))
}

/// 200 with the body, or 503 with the reason.
fn answer(judged: Result<serde_json::Value, String>) -> Response {
    let (code, body) = match judged {
        Ok(body) => (StatusCode::OK, body),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "unavailable", "reason": reason}),
        ),
    };
    (
        code,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serving() -> HealthSnapshot {
        HealthSnapshot {
            failed: None,
            disk_waiting: None,
            standing: "member",
            voter: true,
            role: "follower",
            leader: 1,
            commit_index: 500,
            applied_index: 480,
            recovering_ops: 0,
        }
    }

    fn reason(judged: Result<serde_json::Value, String>) -> String {
        judged.expect_err("not ready")
    }

    #[test]
    fn a_serving_voter_with_a_leader_is_healthy_and_ready() {
        let cfg = HealthConfig::default();
        assert!(health(&Ok(serving()), &cfg).is_ok());
        let body = ready(&Ok(serving()), &cfg).expect("ready");
        assert_eq!(body["lag_entries"], 20);
        assert_eq!(body["leader"], 1);
    }

    #[test]
    fn each_cause_is_named() {
        let cfg = HealthConfig::default();
        let with = |f: fn(&mut HealthSnapshot)| {
            let mut s = serving();
            f(&mut s);
            Ok(s)
        };
        let stuck = Err("the node loop has not answered".to_owned());
        assert!(health(&stuck, &cfg)
            .expect_err("unhealthy")
            .contains("not answered"));
        let failed = with(|s| s.failed = Some("fsync failed".into()));
        assert!(health(&failed, &cfg)
            .expect_err("unhealthy")
            .contains("stopped: fsync failed"));
        let slow_disk = with(|s| s.disk_waiting = Some(Duration::from_secs(3)));
        assert!(health(&slow_disk, &cfg)
            .expect_err("unhealthy")
            .contains("the disk is behind"));
        let brief = with(|s| s.disk_waiting = Some(Duration::from_millis(5)));
        assert!(health(&brief, &cfg).is_ok(), "a write in flight is normal");
        assert!(reason(ready(&slow_disk, &cfg)).contains("the disk is behind"));
        let joining = with(|s| s.standing = "joining");
        assert!(reason(ready(&joining, &cfg)).contains("is joining"));
        let learner = with(|s| s.voter = false);
        assert!(reason(ready(&learner, &cfg)).contains("learner"));
        let alone = with(|s| {
            s.leader = 0;
            s.role = "pre-candidate";
        });
        assert!(reason(ready(&alone, &cfg)).contains("no known leader"));
        let behind = with(|s| s.commit_index = 1_490);
        assert!(reason(ready(&behind, &cfg)).contains("1010 committed entries not applied"));
        let recovering = with(|s| s.recovering_ops = 70_000);
        assert!(health(&recovering, &cfg).is_ok(), "it turns: healthy");
        assert!(reason(ready(&recovering, &cfg)).contains("the 70000 ops it recovered"));
    }
}
