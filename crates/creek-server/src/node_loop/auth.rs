//! The node loop's part in authorization: it keeps the committed `\0auth/`
//! records, compiles them into the rules the service checks tokens
//! against, and refuses an op whose user lacks the right it needs before
//! the op is ordered (docs/security.md, "Users, roles and tokens").

use std::collections::BTreeMap;

use super::NodeLoop;

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
    pub(super) fn compile_auth(&self) {
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
