//! Procedure arguments and results as JSON, for the console's invoke
//! endpoint: a JSON string is bytes (UTF-8), an integer is an integer, and
//! so on; anything without a `Value` counterpart (fractions, objects) is
//! refused with the argument's position.

use creek_types::value::Value;
use serde_json::Value as Json;

/// Deepest list nesting accepted in an argument (as `creek call`).
const LIST_DEPTH_MAX: usize = 8;

/// Why an argument has no `Value`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgError {
    /// A number that is not a 64-bit integer.
    #[error("argument {0}: {1} is not a 64-bit integer (fractions have no value type)")]
    NotInteger(usize, String),
    /// A JSON object.
    #[error("argument {0}: objects are not values (use a string, integer, boolean, null or list)")]
    Object(usize),
    /// Lists nested too deep.
    #[error("argument {0}: lists nest deeper than {LIST_DEPTH_MAX}")]
    TooDeep(usize),
}

/// Argument `at` (0-based, for the error) as a `Value`.
pub fn from_json(at: usize, j: &Json) -> Result<Value, ArgError> {
    fn go(at: usize, j: &Json, depth: usize) -> Result<Value, ArgError> {
        Ok(match j {
            Json::Null => Value::Nil,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => return Err(ArgError::NotInteger(at, n.to_string())),
            },
            Json::String(s) => Value::Bytes(bytes::Bytes::copy_from_slice(s.as_bytes())),
            Json::Array(items) => {
                if depth >= LIST_DEPTH_MAX {
                    return Err(ArgError::TooDeep(at));
                }
                let list = items
                    .iter()
                    .map(|i| go(at, i, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                Value::List(list)
            }
            Json::Object(_) => return Err(ArgError::Object(at)),
        })
    }
    go(at, j, 0)
}

/// A result as JSON: bytes that are UTF-8 as a string, other bytes as
/// `{"hex": "…"}`.
pub fn to_json(v: &Value) -> Json {
    match v {
        Value::Nil => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => Json::String(s.to_owned()),
            Err(_) => serde_json::json!({ "hex": hex(b) }),
        },
        Value::List(items) => Json::Array(items.iter().map(to_json).collect()),
    }
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(b.len() * 2);
    for byte in b {
        let _ = write!(s, "{byte:02x}");
    }
    s
}

/// A result as one short line of text (the strip's op details).
pub fn display(v: &Value) -> String {
    match v {
        Value::Nil => "nil".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => format!("{s:?}"),
            Err(_) => format!("0x{}", hex(b)),
        },
        Value::List(items) => {
            let inner: Vec<String> = items.iter().map(display).collect();
            format!("[{}]", inner.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_arguments_map_to_values_and_back() {
        let j: Json = serde_json::from_str(r#"["k", 5, true, null, ["a", -1]]"#).expect("json");
        let Json::Array(items) = j else {
            panic!("an array")
        };
        let values: Vec<Value> = items
            .iter()
            .enumerate()
            .map(|(i, a)| from_json(i, a).expect("a value"))
            .collect();
        assert_eq!(values[1], Value::Int(5));
        assert_eq!(
            to_json(&Value::List(values)).to_string(),
            r#"["k",5,true,null,["a",-1]]"#
        );
        assert_eq!(display(&Value::Bytes("hi".into())), "\"hi\"");
        assert_eq!(
            to_json(&Value::Bytes(vec![0xff].into())).to_string(),
            r#"{"hex":"ff"}"#
        );
    }

    #[test]
    fn arguments_without_a_value_are_refused_with_their_position() {
        let frac: Json = serde_json::from_str("1.5").expect("json");
        assert!(matches!(
            from_json(2, &frac),
            Err(ArgError::NotInteger(2, _))
        ));
        let obj: Json = serde_json::from_str(r#"{"a":1}"#).expect("json");
        assert_eq!(from_json(0, &obj), Err(ArgError::Object(0)));
        let deep: Json = serde_json::from_str("[[[[[[[[[[1]]]]]]]]]]").expect("json");
        assert_eq!(from_json(1, &deep), Err(ArgError::TooDeep(1)));
    }
}
