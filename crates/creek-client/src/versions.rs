//! A key with its version and revisions, as `kv.get_meta` answers it
//! (docs/api.md, "Versions and revisions").

use creek_types::value::Value;

use crate::view::Outcome;
use crate::{Client, Correctable, Error, Levels};

/// A key's value with etcd's `KeyValue` fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyMeta {
    /// The value.
    pub value: bytes::Bytes,
    /// Writes since the key was created, that one included (0: written
    /// before the cluster kept versions).
    pub version: u64,
    /// The revision (1-based position in the committed order) of the write
    /// that created it.
    pub create_revision: u64,
    /// The revision of its last committed write.
    pub mod_revision: u64,
    /// The lease it is attached to (0: none).
    pub lease: i64,
}

impl KeyMeta {
    /// Read a view's outcome: `Ok(None)` for an absent key, `Err` with the
    /// abort's message or with what the answer was if it is not one.
    pub fn from_outcome(outcome: &Outcome) -> Result<Option<KeyMeta>, String> {
        let number = |v: &Value| v.as_int().and_then(|n| u64::try_from(n).ok());
        match outcome {
            Ok(Value::Nil) => Ok(None),
            Ok(v @ Value::List(items)) => match items.as_slice() {
                [Value::Bytes(value), version, create, modified, Value::Int(lease)] => {
                    match (number(version), number(create), number(modified)) {
                        (Some(version), Some(create_revision), Some(mod_revision)) => {
                            Ok(Some(KeyMeta {
                                value: value.clone(),
                                version,
                                create_revision,
                                mod_revision,
                                lease: *lease,
                            }))
                        }
                        _ => Err(format!("kv.get_meta answered {v}")),
                    }
                }
                _ => Err(format!("kv.get_meta answered {v}")),
            },
            Ok(other) => Err(format!("kv.get_meta answered {other}")),
            Err(abort) => Err(abort.clone()),
        }
    }
}

impl Client {
    /// `kv.get_meta(key)`: nil if absent, else `[value, version,
    /// create_revision, mod_revision, lease]` ([`KeyMeta::from_outcome`]
    /// reads it). Revisions are those of committed writes: a preliminary
    /// view shows the record of the last write committed before it.
    pub async fn kv_get_meta(&self, key: impl AsRef<[u8]>) -> Result<Correctable, Error> {
        let key = Value::Bytes(bytes::Bytes::copy_from_slice(key.as_ref()));
        self.invoke("kv.get_meta", vec![key], Levels::Both).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_as_a_key_meta() {
        let answer = Value::List(vec![
            Value::from("v"),
            Value::Int(2),
            Value::Int(5),
            Value::Int(9),
            Value::Int(0),
        ]);
        let meta = KeyMeta::from_outcome(&Ok(answer))
            .expect("reads")
            .expect("present");
        assert_eq!(
            (meta.version, meta.create_revision, meta.mod_revision),
            (2, 5, 9)
        );
        assert_eq!(KeyMeta::from_outcome(&Ok(Value::Nil)), Ok(None));
        assert!(KeyMeta::from_outcome(&Ok(Value::Int(1))).is_err());
        assert!(KeyMeta::from_outcome(&Err("no".into())).is_err());
    }
}
