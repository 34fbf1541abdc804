//! User procedures and keyspaces (docs/procedures.md): typed helpers over
//! the definition built-ins `proc.register`, `proc.show`, `proc.drop`,
//! `keyspace.create` and `keyspace.list`.
//!
//! The changes (register, drop, create) are strong ops: each helper waits
//! for the op's final view, so when it returns the change is committed and
//! every later call, at any replica, sees it. A change the cluster refuses
//! is an [`Error`] ([`Error::NotRegistered`], [`Error::Refused`]) and
//! changed nothing. Calls of user procedures need no helper: invoke them by
//! name ([`Client::invoke`]); one that may write a strong keyspace must be
//! invoked at a strong level, or it is refused with
//! [`Error::InvalidArgument`].
//!
//! This module is not the compiler: a source file is compiled by the
//! replicas, against the keyspaces that exist at its place in the order.

use std::time::Duration;

use bytes::Bytes;
use creek_types::value::Value;

use crate::client::{CallOptions, Client};
use crate::view::{Levels, Outcome};
use crate::Error;

/// How long a definition helper waits for its op's closing view.
pub const DEFINITION_TIMEOUT: Duration = Duration::from_secs(30);

/// A keyspace's consistency label (docs/procedures.md, "Consistency labels
/// and information flow").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyspaceLabel {
    /// Changed only by strong ops, in one agreed order.
    Strong,
    /// Changed by weak ops too: fast, eventually consistent.
    Weak,
}

impl KeyspaceLabel {
    /// `"strong"` or `"weak"`, as the server writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyspaceLabel::Strong => "strong",
            KeyspaceLabel::Weak => "weak",
        }
    }
}

impl std::fmt::Display for KeyspaceLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for KeyspaceLabel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "strong" => Ok(KeyspaceLabel::Strong),
            "weak" => Ok(KeyspaceLabel::Weak),
            _ => Err(format!("keyspace label {s:?} is not strong or weak")),
        }
    }
}

/// A keyspace and its label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyspace {
    /// Its name.
    pub name: String,
    /// Strong or weak.
    pub label: KeyspaceLabel,
}

/// A procedure [`Client::register_procedures`] registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    /// The procedure's name.
    pub name: String,
    /// 1 for its first registration, one more for each later one.
    pub version: u64,
}

/// A registered user procedure's version and source, from `proc.show`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcedureSource {
    /// The procedure's name.
    pub name: String,
    /// Its version.
    pub version: u64,
    /// The whole source file it was registered from.
    pub source: String,
}

impl Client {
    /// Compile `source` (a whole file of `keyspace` declarations and
    /// `proc`s) and register its procedures, creating the keyspaces it
    /// declares that do not exist yet: a strong op. Returns each
    /// procedure's name and version (one more than the version it
    /// replaces), once committed.
    ///
    /// A file that does not compile registers nothing and fails with
    /// [`Error::NotRegistered`], carrying the compiler's errors one per
    /// line as `line L:C: message` (an information flow from a weak to a
    /// strong keyspace among them).
    pub async fn register_procedures(&self, source: &str) -> Result<Vec<Registered>, Error> {
        let source = Value::Bytes(Bytes::copy_from_slice(source.as_bytes()));
        let result = self
            .definition("proc.register", vec![source], Levels::Strong)
            .await?
            .map_err(Error::NotRegistered)?;
        list_of("proc.register", result)?
            .into_iter()
            .map(|item| match item.as_list() {
                Some([Value::Bytes(name), Value::Int(version)]) => Ok(Registered {
                    name: text("proc.register", name)?,
                    version: u64::try_from(*version).map_err(|_| {
                        Error::Protocol(format!("proc.register answered version {version}"))
                    })?,
                }),
                _ => Err(unexpected("proc.register", &item)),
            })
            .collect()
    }

    /// Remove the user procedure `name` (a strong op; its keyspaces and
    /// their data stay). Calls of it made afterwards are refused as an
    /// unknown procedure. Fails with [`Error::Refused`], changing nothing,
    /// if there is no such user procedure.
    pub async fn drop_procedure(&self, name: &str) -> Result<(), Error> {
        let arg = Value::Bytes(Bytes::copy_from_slice(name.as_bytes()));
        let existed = self
            .definition("proc.drop", vec![arg], Levels::Strong)
            .await?
            .map_err(Error::Refused)?;
        match existed {
            Value::Bool(true) => Ok(()),
            Value::Bool(false) => Err(Error::Refused(format!(
                "no user procedure {name:?} to drop"
            ))),
            other => Err(unexpected("proc.drop", &other)),
        }
    }

    /// The user procedure `name`'s version and source file, from the
    /// connected replica's latest state (a weak read); `None` if there is
    /// no such user procedure. Signatures and labels are in
    /// [`Client::procedures`].
    pub async fn show_procedure(&self, name: &str) -> Result<Option<ProcedureSource>, Error> {
        let arg = Value::Bytes(Bytes::copy_from_slice(name.as_bytes()));
        let shown = self
            .definition("proc.show", vec![arg], Levels::Weak)
            .await?
            .map_err(|abort| Error::Protocol(format!("proc.show aborted: {abort}")))?;
        match shown.as_list() {
            None if shown.is_nil() => Ok(None),
            Some([Value::Bytes(name), Value::Int(version), Value::Bytes(source)]) => {
                Ok(Some(ProcedureSource {
                    name: text("proc.show", name)?,
                    version: u64::try_from(*version).map_err(|_| {
                        Error::Protocol(format!("proc.show answered version {version}"))
                    })?,
                    source: text("proc.show", source)?,
                }))
            }
            _ => Err(unexpected("proc.show", &shown)),
        }
    }

    /// Create keyspace `name` labelled `label` (a strong op). Nothing
    /// changes if it exists with that label; it fails with
    /// [`Error::Refused`] if it exists with the other label or the name is
    /// not a name (ASCII letters, digits and `_`, not starting with a
    /// digit, not a keyword).
    pub async fn create_keyspace(&self, name: &str, label: KeyspaceLabel) -> Result<(), Error> {
        let args = vec![
            Value::Bytes(Bytes::copy_from_slice(name.as_bytes())),
            Value::from(label.as_str()),
        ];
        self.definition("keyspace.create", args, Levels::Strong)
            .await?
            .map_err(Error::Refused)?;
        Ok(())
    }

    /// Every keyspace with its label, by name, from the connected
    /// replica's latest state (a weak read).
    pub async fn list_keyspaces(&self) -> Result<Vec<Keyspace>, Error> {
        let result = self
            .definition("keyspace.list", Vec::new(), Levels::Weak)
            .await?
            .map_err(|abort| Error::Protocol(format!("keyspace.list aborted: {abort}")))?;
        list_of("keyspace.list", result)?
            .into_iter()
            .map(|item| match item.as_list() {
                Some([Value::Bytes(name), Value::Bytes(label)]) => Ok(Keyspace {
                    name: text("keyspace.list", name)?,
                    label: text("keyspace.list", label)?
                        .parse()
                        .map_err(|e| Error::Protocol(format!("keyspace.list: {e}")))?,
                }),
                _ => Err(unexpected("keyspace.list", &item)),
            })
            .collect()
    }

    /// Invoke a definition built-in and wait for its closing view.
    async fn definition(
        &self,
        procedure: &str,
        args: Vec<Value>,
        levels: Levels,
    ) -> Result<Outcome, Error> {
        let options = CallOptions {
            timeout: Some(DEFINITION_TIMEOUT),
            ..CallOptions::default()
        };
        let op = self.invoke_with(procedure, args, levels, options).await?;
        Ok(op.final_view().await?.outcome)
    }
}

fn list_of(procedure: &str, v: Value) -> Result<Vec<Value>, Error> {
    match v {
        Value::List(items) => Ok(items),
        other => Err(unexpected(procedure, &other)),
    }
}

fn text(procedure: &str, b: &Bytes) -> Result<String, Error> {
    String::from_utf8(b.to_vec())
        .map_err(|_| Error::Protocol(format!("{procedure} answered a name that is not UTF-8")))
}

fn unexpected(procedure: &str, v: &Value) -> Error {
    Error::Protocol(format!("{procedure} answered {v}, which is not its result"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_and_print_as_the_server_writes_them() {
        for label in [KeyspaceLabel::Strong, KeyspaceLabel::Weak] {
            assert_eq!(label.to_string().parse::<KeyspaceLabel>(), Ok(label));
        }
        assert!("Strong".parse::<KeyspaceLabel>().is_err());
    }
}
