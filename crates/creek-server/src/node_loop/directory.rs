//! The node loop's part on a directory replica: it hands the map its
//! group's committed state holds to the replica's gate (what `Status`
//! serves the shards' replicas and clients), and forms the group with the
//! map file's map when the state holds none yet (docs/shards.md, "The
//! directory").

use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_core::Request;
use creek_procs::builtins::directory::{MAP_KEY, SET};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
use tokio::sync::mpsc;

use super::{Invocation, NodeLoop, ReplyTo};

/// How long a formation op may go unanswered before it is sent again.
const FORM_RETRY: Duration = Duration::from_secs(2);

impl NodeLoop {
    /// Hand a map the turn's committed changes wrote to the gate (a walk
    /// of the writes, as the auth rules follow theirs; the state is read
    /// only by [`NodeLoop::follow_directory_state`], once a second).
    pub(super) fn on_directory_changes(&mut self, changes: &[creek_core::Change]) {
        if self.directory.gate.is_none() {
            return;
        }
        let written = changes
            .iter()
            .filter(|c| c.position.is_some())
            .flat_map(|c| c.writes.iter())
            .filter(|(k, _)| k.as_ref() == MAP_KEY)
            .filter_map(|(_, v)| v.clone())
            .last();
        if let Some(bytes) = written {
            self.publish_directory_map(bytes);
        }
    }

    /// On a shard's replica: a map the turn's committed changes wrote into
    /// the shard's own state (a move's release, adoption or first chunk;
    /// docs/shards.md, "Moving keys between shards") goes to the gate at
    /// once if it is newer than the gate's, so the invoke check agrees
    /// with the state from that point instead of a directory poll later.
    pub(super) fn on_owned_changes(&mut self, changes: &[creek_core::Change]) {
        if self.directory.gate.is_some() {
            return;
        }
        let Some(gate) = &self.shards else {
            return;
        };
        let written = changes
            .iter()
            .filter(|c| c.position.is_some())
            .flat_map(|c| c.writes.iter())
            .filter(|(k, _)| k.as_ref() == creek_procs::ownership::MAP_KEY)
            .filter_map(|(_, v)| v.clone())
            .last();
        let Some((_, map)) = written
            .as_ref()
            .and_then(creek_procs::ownership::split_owned)
        else {
            return;
        };
        match gate.adopt(&map) {
            Ok(Some(epoch)) => {
                tracing::info!(epoch, "serving under the map this shard's state adopted")
            }
            Ok(None) => {}
            Err(why) => tracing::warn!("the map this shard's state holds: {why}"),
        }
    }

    fn publish_directory_map(&mut self, bytes: Bytes) {
        let Some(gate) = &self.directory.gate else {
            return;
        };
        if self.directory.published.as_ref() == Some(&bytes) {
            return;
        }
        match gate.adopt(&bytes) {
            Ok(Some(epoch)) => tracing::info!(epoch, "the directory's map changed"),
            Ok(None) => {}
            Err(why) => tracing::error!("the directory's committed map: {why}"),
        }
        self.directory.published = Some(bytes);
    }

    /// Hand the committed map to the gate if it changed (after a rebuild
    /// from a checkpoint, no change carries it); without one,
    /// propose the map file's as the first (`directory.set(0, map)`, a
    /// strong op: every directory replica may propose it, the first
    /// ordered wins and the others abort on its epoch). Called every
    /// second.
    pub(super) fn follow_directory_state(&mut self) {
        let Some(gate) = self.directory.gate.clone() else {
            return;
        };
        use creek_exec::Engine as _;
        let mut committed: Option<Bytes> = None;
        self.node
            .replica()
            .engine()
            .committed_with_prefix(MAP_KEY, &mut |k, v| {
                if k.as_ref() == MAP_KEY {
                    committed = Some(v.clone());
                }
            });
        match committed {
            Some(bytes) => self.publish_directory_map(bytes),
            None => self.form_directory(gate.seed().clone()),
        }
    }

    fn form_directory(&mut self, seed: Bytes) {
        if self.node.standing() != creek_node::Standing::Member
            || self
                .directory
                .formed_at
                .is_some_and(|t| t.elapsed() < FORM_RETRY)
        {
            return;
        }
        self.directory.formed_at = Some(Instant::now());
        tracing::info!("forming the directory with the map file's map");
        // Nobody waits for the answer: the committed state says what won.
        let (tx, _rx) = mpsc::unbounded_channel();
        self.invoke(Invocation {
            answer_after: creek_node::AnswerAfter::Execution,
            request: Request::strong(ProcCall::new(
                SET,
                encode_args(&[Value::Int(0), Value::Bytes(seed)]),
            )),
            reply: ReplyTo::Stream(tx),
            received: Instant::now(),
            principal: None,
        });
    }
}

/// What the node loop keeps for a directory replica.
#[derive(Default)]
pub(super) struct DirectoryState {
    /// The replica's gate, on a directory replica.
    pub(super) gate: Option<std::sync::Arc<crate::shards::ShardGate>>,
    /// The committed map last handed to the gate.
    pub(super) published: Option<Bytes>,
    /// When the map file's map was last proposed as the first.
    pub(super) formed_at: Option<Instant>,
}
