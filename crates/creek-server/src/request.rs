//! The conversion of a decoded `InvokeRequest` into the node's [`Request`]:
//! every check a client's bytes meet before the op reaches the node loop
//! (levels, the procedure's name, the arguments' values, the request's
//! size). The node then checks the arguments against the procedure (arity,
//! types, key sizes) before it orders anything.
//!
//! Kept apart from the service so that a fuzz target (`fuzz/`) can feed it
//! arbitrary decoded messages without a server.

// tonic's handlers return `Status` by value; boxing it in the helpers would
// only move the allocation.
#![allow(clippy::result_large_err)]

use creek_core::{Request, Views};
use creek_node::AnswerAfter;
use creek_proto::pb;
use creek_types::ClientRequestId;
use creek_types::ProcCall;
use tonic::Status;

/// The op a request asks for: (strong, views).
pub(crate) fn levels(req: &pb::InvokeRequest) -> Result<(bool, Views), Status> {
    let mut weak = false;
    let mut snapshot = false;
    let mut strong = false;
    for l in &req.levels {
        match pb::Level::try_from(*l) {
            Ok(pb::Level::Weak) => weak = true,
            Ok(pb::Level::Snapshot) => snapshot = true,
            Ok(pb::Level::Strong) => strong = true,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "unknown level {l}: use WEAK, SNAPSHOT, STRONG or several"
                )))
            }
        }
    }
    Ok(match (weak, strong) {
        (true, false) => (
            false,
            Views {
                tentative: true,
                snapshot,
                final_view: req.weak_final,
            },
        ),
        (false, false) if snapshot => (false, Views::SNAPSHOT),
        (false, true) => (
            true,
            Views {
                snapshot,
                ..Views::STRONG
            },
        ),
        _ => (
            true,
            Views {
                snapshot,
                ..Views::BOTH
            },
        ),
    })
}

/// The node's request for `req`, or the status that refuses it:
/// `INVALID_ARGUMENT` for a malformed request, `RESOURCE_EXHAUSTED` for one
/// whose procedure name and encoded arguments exceed `max_request_bytes`.
pub fn to_request(req: &pb::InvokeRequest, max_request_bytes: usize) -> Result<Request, Status> {
    let (strong, views) = levels(req)?;
    if req.procedure.is_empty() {
        return Err(Status::invalid_argument("no procedure named"));
    }
    if req
        .procedure
        .starts_with(creek_procs::session::INTERNAL_PROC_PREFIX)
    {
        return Err(Status::invalid_argument(format!(
            "procedure {:?} is internal to the replicas (names starting {:?} are reserved)",
            req.procedure,
            creek_procs::session::INTERNAL_PROC_PREFIX
        )));
    }
    let args = req
        .args
        .iter()
        .map(creek_proto::from_wire)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Status::invalid_argument(format!("malformed arguments: {e}")))?;
    let encoded = creek_types::value::encode_args(&args);
    let size = encoded.len() + req.procedure.len();
    if size > max_request_bytes {
        return Err(too_large(size, max_request_bytes));
    }
    let mut call = ProcCall::new(&req.procedure, encoded);
    if req.client_id != 0 {
        call.request_id = Some(ClientRequestId {
            client: req.client_id,
            seq: req.request_seq,
        });
        call.acked = req.acked.clone();
        call.acked.truncate(creek_procs::session::ACKED_MAX);
    }
    Ok(Request {
        call,
        strong,
        views,
        read_time: req.read_time,
        read_exact: req.read_exact,
        read_revision: (req.revision > 0).then_some(req.revision),
    })
}

/// When the request's preliminary view may leave (its `durability`).
pub fn answer_after(req: &pb::InvokeRequest) -> Result<AnswerAfter, Status> {
    match pb::Durability::try_from(req.durability) {
        Ok(pb::Durability::None) => Ok(AnswerAfter::Execution),
        Ok(pb::Durability::Local) => Ok(AnswerAfter::Local),
        Ok(pb::Durability::Majority) => Ok(AnswerAfter::Majority),
        Err(_) => Err(Status::invalid_argument(format!(
            "durability must be none, local or majority, got {}",
            req.durability
        ))),
    }
}

/// The answer to a request over `max_request_bytes`, whichever layer
/// measured it: the service (`size` is then the procedure's name and its
/// encoded arguments) or the gRPC decoder (`size` is the message's length).
pub(crate) fn too_large(size: usize, max_request_bytes: usize) -> Status {
    Status::resource_exhausted(format!(
        "request of {size} bytes exceeds the limit of {max_request_bytes} bytes \
         (max_request_bytes)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn levels_map_to_ops_and_views() {
        let mk = |levels: Vec<pb::Level>, weak_final| pb::InvokeRequest {
            levels: levels.into_iter().map(|l| l as i32).collect(),
            weak_final,
            ..Default::default()
        };
        assert_eq!(
            levels(&mk(vec![pb::Level::Weak], false)).ok(),
            Some((false, Views::WEAK))
        );
        assert_eq!(
            levels(&mk(vec![pb::Level::Weak], true)).ok(),
            Some((false, Views::BOTH))
        );
        assert_eq!(
            levels(&mk(vec![pb::Level::Strong], false)).ok(),
            Some((true, Views::STRONG))
        );
        assert_eq!(levels(&mk(vec![], false)).ok(), Some((true, Views::BOTH)));
        let bad = pb::InvokeRequest {
            levels: vec![7],
            ..Default::default()
        };
        assert_eq!(
            levels(&bad).map_err(|s| s.code()).err(),
            Some(Code::InvalidArgument)
        );
    }

    fn bytes_arg(n: usize) -> pb::Value {
        creek_proto::to_wire(&creek_types::value::Value::Bytes(vec![7u8; n].into()))
    }

    #[test]
    fn a_request_over_the_limit_is_resource_exhausted_and_names_the_setting() {
        let req = |n| pb::InvokeRequest {
            procedure: "put".into(),
            args: vec![bytes_arg(1), bytes_arg(n)],
            ..Default::default()
        };
        assert!(to_request(&req(900), 1024).is_ok());
        let refused = to_request(&req(1100), 1024)
            .err()
            .map(|s| (s.code(), s.message().to_owned()));
        let (code, message) = refused.expect("refused");
        assert_eq!(code, Code::ResourceExhausted);
        assert!(message.contains("max_request_bytes"), "{message}");
    }

    #[test]
    fn malformed_requests_are_invalid_arguments() {
        let empty_value = pb::InvokeRequest {
            procedure: "put".into(),
            args: vec![pb::Value { kind: None }],
            ..Default::default()
        };
        let internal = pb::InvokeRequest {
            procedure: format!("{}x", creek_procs::session::INTERNAL_PROC_PREFIX),
            ..Default::default()
        };
        for req in [pb::InvokeRequest::default(), empty_value, internal] {
            assert_eq!(
                to_request(&req, 1 << 20).err().map(|s| s.code()),
                Some(Code::InvalidArgument)
            );
        }
    }
}
