//! A small self-describing value type for procedure arguments and results.
//!
//! The binary encoding is compact and canonical: one tag byte, then
//!
//! | tag  | value        | payload                                   |
//! |------|--------------|-------------------------------------------|
//! | 0x00 | `Nil`        | none                                      |
//! | 0x01 | `Bool(false)`| none                                      |
//! | 0x02 | `Bool(true)` | none                                      |
//! | 0x03 | `Int`        | zigzag LEB128 varint                      |
//! | 0x04 | `Bytes`      | LEB128 length, then the bytes             |
//! | 0x05 | `List`       | LEB128 item count, then the items         |
//!
//! Varints must be in their shortest form, so every value has exactly one
//! encoding and `encode(decode(b)) == b` whenever decoding succeeds.
//! [`Value::decode`] never panics: nesting is bounded by [`MAX_DEPTH`],
//! lengths are checked against the remaining input before anything is
//! allocated, and varints are checked for overflow.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{Reader, Writer};

/// Deepest nesting of lists [`Value::decode`] accepts.
pub const MAX_DEPTH: usize = 32;

const TAG_NIL: u8 = 0x00;
const TAG_FALSE: u8 = 0x01;
const TAG_TRUE: u8 = 0x02;
const TAG_INT: u8 = 0x03;
const TAG_BYTES: u8 = 0x04;
const TAG_LIST: u8 = 0x05;

/// Most list slots reserved up front while decoding; longer lists grow as
/// their items actually decode, so memory stays proportional to the input.
const PREALLOC_MAX: usize = 64;

/// A self-describing value: the argument and result type of the built-in
/// procedures.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    /// Nothing (an absent key, an empty result).
    Nil,
    /// A boolean.
    Bool(bool),
    /// A signed 64-bit integer.
    Int(i64),
    /// A byte string.
    Bytes(Bytes),
    /// A list of values.
    List(Vec<Value>),
}

pub use crate::codec::DecodeError;

impl Value {
    /// The encoding of this value.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode_into(&mut b);
        b.freeze()
    }

    /// Append the encoding of this value to `out`.
    pub fn encode_into(&self, out: &mut BytesMut) {
        match self {
            Value::Nil => out.put_u8(TAG_NIL),
            Value::Bool(false) => out.put_u8(TAG_FALSE),
            Value::Bool(true) => out.put_u8(TAG_TRUE),
            Value::Int(n) => {
                out.put_u8(TAG_INT);
                out.put_varint(zigzag(*n));
            }
            Value::Bytes(b) => {
                out.put_u8(TAG_BYTES);
                out.put_varint(b.len() as u64);
                out.put_slice(b);
            }
            Value::List(items) => {
                out.put_u8(TAG_LIST);
                out.put_varint(items.len() as u64);
                for item in items {
                    item.encode_into(out);
                }
            }
        }
    }

    /// Decode one value that must span all of `input`. Never panics.
    pub fn decode(input: &[u8]) -> Result<Value, DecodeError> {
        Self::decode_from(input, None)
    }

    /// Like [`Value::decode`], but byte strings in the result share `input`'s
    /// memory instead of being copied.
    pub fn decode_shared(input: &Bytes) -> Result<Value, DecodeError> {
        Self::decode_from(input, Some(input))
    }

    fn decode_from(input: &[u8], shared: Option<&Bytes>) -> Result<Value, DecodeError> {
        let mut r = match shared {
            Some(shared) => Reader::shared(shared),
            None => Reader::new(input),
        };
        let v = value(&mut r, 0)?;
        r.finish()?;
        Ok(v)
    }

    /// The name of this value's kind: `nil`, `bool`, `int`, `bytes` or `list`.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
        }
    }

    /// The byte string, if this is `Bytes`.
    pub fn as_bytes(&self) -> Option<&Bytes> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// The integer, if this is `Int`.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The boolean, if this is `Bool`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The items, if this is `List`.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) => Some(items),
            _ => None,
        }
    }

    /// Whether this is `Nil`.
    pub fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }
}

/// Encode procedure arguments as one `List` value.
pub fn encode_args(args: &[Value]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(TAG_LIST);
    b.put_varint(args.len() as u64);
    for a in args {
        a.encode_into(&mut b);
    }
    b.freeze()
}

/// Decode procedure arguments encoded by [`encode_args`]: the whole input
/// must be one `List`. Never panics.
pub fn decode_args(b: &[u8]) -> Result<Vec<Value>, DecodeError> {
    into_args(Value::decode(b)?)
}

/// Like [`decode_args`], sharing `b`'s memory for byte-string arguments.
pub fn decode_args_shared(b: &Bytes) -> Result<Vec<Value>, DecodeError> {
    into_args(Value::decode_shared(b)?)
}

fn into_args(v: Value) -> Result<Vec<Value>, DecodeError> {
    match v {
        Value::List(items) => Ok(items),
        other => Err(DecodeError::NotAList { kind: other.kind() }),
    }
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// One value from `r`, at list nesting `depth`.
fn value(r: &mut Reader<'_>, depth: usize) -> Result<Value, DecodeError> {
    let offset = r.pos();
    match r.byte()? {
        TAG_NIL => Ok(Value::Nil),
        TAG_FALSE => Ok(Value::Bool(false)),
        TAG_TRUE => Ok(Value::Bool(true)),
        TAG_INT => Ok(Value::Int(unzigzag(r.varint()?))),
        TAG_BYTES => Ok(Value::Bytes(r.bytes()?)),
        TAG_LIST => {
            if depth >= MAX_DEPTH {
                return Err(DecodeError::TooDeep {
                    max: MAX_DEPTH,
                    offset,
                });
            }
            let count = r.count(1)?;
            let mut items = Vec::with_capacity(count.min(PREALLOC_MAX));
            for _ in 0..count {
                items.push(value(r, depth + 1)?);
            }
            Ok(Value::List(items))
        }
        tag => Err(DecodeError::UnknownTag { tag, offset }),
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Nil => f.write_str("nil"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(n) => write!(f, "{n}"),
            Value::Bytes(b) => match std::str::from_utf8(b) {
                Ok(s) => write!(f, "{s:?}"),
                Err(_) => {
                    f.write_str("0x")?;
                    b.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
                }
            },
            Value::List(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// `impl From<$t> for Value` by the given conversion.
macro_rules! from_impls {
    ($([$($gen:tt)*] $t:ty => |$x:ident| $body:expr;)*) => {$(
        impl<$($gen)*> From<$t> for Value {
            fn from($x: $t) -> Self {
                $body
            }
        }
    )*};
}

from_impls! {
    [] i64 => |n| Value::Int(n);
    [] bool => |b| Value::Bool(b);
    [] &str => |s| Value::Bytes(Bytes::copy_from_slice(s.as_bytes()));
    [] &[u8] => |b| Value::Bytes(Bytes::copy_from_slice(b));
    [const N: usize] &[u8; N] => |b| Value::Bytes(Bytes::copy_from_slice(b));
    [] Bytes => |b| Value::Bytes(b);
    [] Vec<Value> => |items| Value::List(items);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nested(depth: usize) -> Value {
        (0..depth).fold(Value::Nil, |v, _| Value::List(vec![v]))
    }

    fn enc(v: impl Into<Value>) -> Vec<u8> {
        v.into().encode().to_vec()
    }

    fn err(input: &[u8]) -> String {
        Value::decode(input).map_or_else(|e| e.to_string(), |v| format!("decoded {v}"))
    }

    #[test]
    fn encodings_are_compact() {
        assert_eq!(enc(Value::Nil), [0x00]);
        assert_eq!((enc(false), enc(true)), (vec![0x01], vec![0x02]));
        assert_eq!(
            (enc(0), enc(-1), enc(1)),
            (vec![3, 0], vec![3, 1], vec![3, 2])
        );
        assert_eq!(enc(64), [0x03, 0x80, 0x01]);
        assert_eq!(enc("ab"), [0x04, 2, b'a', b'b']);
        let list = Value::from(vec![Value::Nil, Value::Int(2)]);
        assert_eq!(enc(list.clone()), [0x05, 2, 0x00, 0x03, 4]);
        assert_eq!(encode_args(&[Value::Nil, Value::Int(2)]), list.encode());
        let mut out = BytesMut::from(&b"x"[..]);
        Value::Nil.encode_into(&mut out);
        assert_eq!(&out[..], b"x\x00");
    }

    #[test]
    fn extreme_ints_round_trip() {
        for n in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX] {
            assert_eq!(Value::decode(&enc(n)), Ok(Value::Int(n)));
        }
        assert_eq!(enc(i64::MIN).len(), 11);
    }

    #[test]
    fn malformed_input_is_rejected_with_clear_errors() {
        assert_eq!(err(&[]), "input ends unexpectedly at byte 0");
        assert_eq!(err(&[0x09]), "unknown value tag 0x09 at byte 0");
        assert_eq!(err(&[0x03, 0x80]), "input ends unexpectedly at byte 2");
        let msg = "varint at byte 1 is not in its shortest form";
        assert_eq!(err(&[0x03, 0x80, 0x00]), msg);
        let mut overflow = vec![0x03];
        overflow.extend([0xff; 9]);
        overflow.push(0x02);
        assert_eq!(err(&overflow), "varint at byte 1 overflows 64 bits");
        let msg = "declared length 5 at byte 1 exceeds what the 1 remaining bytes can hold";
        assert_eq!(err(&[0x04, 5, b'a']), msg);
        let huge_count = [0x05, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(err(&huge_count).starts_with("declared length 4294967295"));
        assert_eq!(err(&[0x00, 0x00]), "1 trailing bytes from byte 1");
        let not_list = decode_args(&[0x03, 2]).map_err(|e| e.to_string());
        assert_eq!(
            not_list,
            Err("arguments must be encoded as a list, got int".into())
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let ok = nested(MAX_DEPTH);
        assert_eq!(Value::decode(&ok.encode()), Ok(ok));
        let too_deep = Value::decode(&nested(MAX_DEPTH + 1).encode());
        assert!(matches!(
            too_deep,
            Err(DecodeError::TooDeep { max: MAX_DEPTH, .. })
        ));
        // A long run of list headers must not recurse without bound.
        let deep: Vec<u8> = [0x05, 0x01].repeat(100_000);
        assert!(err(&deep).starts_with("lists nested deeper than 32 levels"));
    }

    #[test]
    fn display() {
        let v = Value::from(vec![
            Value::Nil,
            true.into(),
            Value::Int(-42),
            "a\"b\n".into(),
            Value::from(&[0xff, 0x00, 0x1a][..]),
            Value::from(vec![]),
            Value::from(""),
        ]);
        let want = r#"[nil, true, -42, "a\"b\n", 0xff001a, [], ""]"#;
        assert_eq!(v.to_string(), want);
    }

    #[test]
    fn accessors_and_conversions() {
        let x = Bytes::from_static(b"x");
        assert_eq!(Value::from(7).as_int(), Some(7));
        assert_eq!(Value::from("x").as_int(), None);
        assert_eq!(Value::from(x.clone()).as_bytes(), Some(&x));
        assert_eq!(Value::from(b"x").as_bytes(), Some(&x));
        assert_eq!(Value::Nil.as_bytes(), None);
        assert_eq!(Value::from(false).as_bool(), Some(false));
        assert!(Value::Nil.is_nil() && !Value::Int(0).is_nil());
        assert_eq!(
            Value::from(vec![Value::Nil]).as_list(),
            Some(&[Value::Nil][..])
        );
        assert_eq!(decode_args(&encode_args(&[])), Ok(vec![]));
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::Int),
            prop::collection::vec(any::<u8>(), 0..24).prop_map(|v| Value::Bytes(Bytes::from(v))),
        ];
        leaf.prop_recursive(6, 96, 8, |inner| {
            prop::collection::vec(inner, 0..8).prop_map(Value::List)
        })
    }

    proptest! {
        #[test]
        fn round_trip(v in arb_value()) {
            prop_assert_eq!(Value::decode(&v.encode()), Ok(v.clone()));
            let args = vec![v, Value::Int(1)];
            prop_assert_eq!(decode_args(&encode_args(&args)), Ok(args));
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(b in prop::collection::vec(any::<u8>(), 0..256)) {
            // Decoding is canonical: whatever decodes re-encodes to the input.
            if let Ok(v) = Value::decode(&b) {
                prop_assert_eq!(&v.encode()[..], &b[..]);
            }
            let _ = decode_args(&b);
        }

        #[test]
        fn decoding_mutated_encodings_never_panics(
            v in arb_value(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut b = v.encode().to_vec();
            for (at, byte) in edits {
                let i = at.index(b.len());
                b[i] = byte;
            }
            if let Ok(d) = Value::decode(&b) {
                prop_assert_eq!(&d.encode()[..], &b[..]);
            }
            b.truncate(cut.index(b.len() + 1));
            let _ = Value::decode(&b);
        }
    }
}
