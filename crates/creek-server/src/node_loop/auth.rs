//! The node loop's part in authorization: it keeps the committed `\0auth/`
//! records, compiles them into the rules the service checks tokens
//! against, and refuses an op whose user lacks the right it needs before
//! the op is ordered (docs/security.md, "Users, roles and tokens").
//!
//! It also keeps the cluster's one switch: a replica whose `[auth]` is on
//! proposes `auth.enable` with its root token's hash until the committed
//! state holds the switch, and every replica checks users once it does,
//! whatever its own `[auth]` says (a replica started with `[auth]` off in
//! a cluster that checks users refuses to start: [`NodeLoop::auth_refusal`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use creek_core::Request;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
use tokio::sync::mpsc;

use super::{Invocation, NodeLoop, ReplyTo};

/// How often a replica whose `[auth]` is on proposes the switch until the
/// committed state holds it.
const PROPOSE_EVERY: Duration = Duration::from_secs(2);

/// What the node loop remembers of the switch.
#[derive(Debug, Default)]
pub(super) struct SwitchState {
    proposed_at: Option<Instant>,
    /// The root hash of the switch it last logged a disagreement about.
    warned: Option<[u8; creek_procs::auth::TOKEN_HASH_BYTES]>,
}

impl NodeLoop {
    /// Read the committed `\0auth/` records from the state and compile
    /// them (a walk of the committed keys: at start and after a rebuild
    /// from a checkpoint).
    pub(super) fn reload_auth(&mut self) {
        if self.auth.is_none() {
            return;
        }
        use creek_exec::Engine as _;
        let mut records = BTreeMap::new();
        self.node.replica().engine().committed_with_prefix(
            creek_procs::auth::AUTH_PREFIX,
            &mut |k, v| {
                records.insert(k.clone(), v.clone());
            },
        );
        self.auth_records = records;
        self.auth_next = self.node.replica().counters().finalized;
        self.compile_auth();
    }

    /// Compile the records into the rules the service checks.
    pub(super) fn compile_auth(&mut self) {
        let Some(auth) = &self.auth else {
            return;
        };
        let rules = creek_procs::auth::Rules::from_records(
            self.auth_records
                .iter()
                .map(|(k, v)| (k.as_ref(), v.as_ref())),
        );
        for key in &rules.corrupt {
            tracing::error!(key, "an auth record does not decode: it grants nothing");
        }
        if let Some(why) = self.auth_disagreement(&rules) {
            let switch = rules.enabled;
            if self.auth_switch.warned != switch {
                self.auth_switch.warned = switch;
                tracing::warn!("{why}; this replica checks users as the cluster does");
            }
        }
        tracing::debug!(
            records = self.auth_records.len(),
            "auth rules compiled from the committed records"
        );
        auth.set_rules(rules);
    }

    /// Follow the committed changes' writes to auth records; reload from
    /// the state when positions were skipped (a rebuild from a checkpoint).
    pub(super) fn on_auth_changes(&mut self, changes: &[creek_core::Change]) {
        if self.auth.is_none() {
            return;
        }
        let (mut jumped, mut wrote) = (false, false);
        for c in changes {
            let Some(p) = c.position else { continue };
            jumped |= p != self.auth_next;
            for (k, v) in &c.writes {
                if k.starts_with(creek_procs::auth::AUTH_PREFIX) {
                    wrote = true;
                    match v {
                        Some(v) => self.auth_records.insert(k.clone(), v.clone()),
                        None => self.auth_records.remove(k),
                    };
                }
            }
            self.auth_next = p + 1;
        }
        if jumped || self.node.replica().counters().finalized != self.auth_next {
            self.reload_auth();
        } else if wrote {
            self.compile_auth();
        }
    }

    /// How this replica's `[auth]` disagrees with the cluster's switch in
    /// `rules`, if it does.
    fn auth_disagreement(&self, rules: &creek_procs::auth::Rules) -> Option<String> {
        let auth = self.auth.as_ref()?;
        let switch = rules.enabled?;
        if !auth.configured() {
            return Some(
                "the cluster checks users (auth.enable ran), but this replica's configuration has \
                 [auth] enabled = false: set enabled = true and root_token_sha256 to the \
                 cluster's"
                    .to_owned(),
            );
        }
        match auth.configured_root() {
            Some(root) if root != switch => Some(format!(
                "this replica's [auth] root_token_sha256 is not the cluster's ({}): set it to \
                 the cluster's",
                crate::auth::to_hex(&switch)
            )),
            _ => None,
        }
    }

    /// Why this replica must not start: its `[auth]` disagrees with the
    /// switch its recovered state holds (`None`: it agrees, or the state
    /// holds no switch).
    pub fn auth_refusal(&self) -> Option<String> {
        let rules = creek_procs::auth::Rules::from_records(
            self.auth_records
                .iter()
                .map(|(k, v)| (k.as_ref(), v.as_ref())),
        );
        self.auth_disagreement(&rules)
    }

    /// With `[auth]` on and a root token configured, propose the cluster's
    /// switch until the committed state holds it (a strong op of the
    /// replica's own, no client waiting: the committed state says whether
    /// it took).
    pub(super) fn propose_auth_switch(&mut self) {
        let Some(auth) = &self.auth else { return };
        let Some(root) = auth.configured_root().filter(|_| auth.configured()) else {
            return;
        };
        if self
            .auth_records
            .contains_key(creek_procs::auth::ENABLED_KEY)
            || self.node.standing() != creek_node::Standing::Member
            || self
                .auth_switch
                .proposed_at
                .is_some_and(|t| t.elapsed() < PROPOSE_EVERY)
        {
            return;
        }
        self.auth_switch.proposed_at = Some(Instant::now());
        tracing::info!("proposing the cluster's auth switch ([auth] enabled here)");
        let (tx, _rx) = mpsc::unbounded_channel();
        self.invoke(Invocation {
            answer_after: creek_node::AnswerAfter::Execution,
            request: Request::strong(ProcCall::new(
                "auth.enable",
                encode_args(&[Value::Bytes(bytes::Bytes::copy_from_slice(&root))]),
            )),
            reply: ReplyTo::Stream(tx),
            received: Instant::now(),
            principal: None,
        });
    }

    /// Whether `who` may make `call`, as the latest state defines the user
    /// procedure it names (where the replica checks the call itself).
    pub(super) fn authorize(
        &self,
        who: &creek_procs::auth::Principal,
        call: &creek_exec::ProcCall,
    ) -> Result<(), creek_procs::auth::Denied> {
        let replica = self.node.replica();
        let registry = replica.registry();
        let user = if registry.get(&call.name).is_none() {
            creek_procs::user_procs::resolve(registry, &call.name, &mut |k| replica.read_latest(k))
                .ok()
                .flatten()
        } else {
            None
        };
        who.check(&creek_procs::auth::need(registry, call, user.as_ref()))
    }
}
