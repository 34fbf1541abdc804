//! The one bounded reader and writer under every Creek byte format: values,
//! replica-to-replica frames, checkpoints, the store's records and its
//! write-ahead log.
//!
//! Every read is bounds-checked and returns a [`DecodeError`] naming the
//! byte offset where the input went wrong; a declared length or count is
//! checked against what the rest of the input can hold before anything is
//! reserved for it, so memory stays proportional to the input. A format
//! adds its own checks (tags, limits, ids) on top and wraps this error in
//! its own.

use bytes::{BufMut, Bytes};

use crate::varint::{self, VarintError};

/// Why bytes do not decode. Offsets are byte positions in the input the
/// [`Reader`] was made over.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ends in the middle of a field.
    #[error("input ends unexpectedly at byte {offset}")]
    UnexpectedEnd {
        /// Where more input was needed.
        offset: usize,
    },
    /// A varint does not fit in 64 bits.
    #[error("varint at byte {offset} overflows 64 bits")]
    VarintOverflow {
        /// Where the varint starts.
        offset: usize,
    },
    /// A varint is longer than it needs to be.
    #[error("varint at byte {offset} is not in its shortest form")]
    NonCanonicalVarint {
        /// Where the varint starts.
        offset: usize,
    },
    /// A byte length or item count claims more than the input holds.
    #[error("declared length {len} at byte {offset} exceeds what the {remaining} remaining bytes can hold")]
    LengthTooLarge {
        /// The declared length or count.
        len: u64,
        /// Where the length starts.
        offset: usize,
        /// Bytes left after the length.
        remaining: usize,
    },
    /// Bytes follow a complete record.
    #[error("{count} trailing bytes from byte {offset}")]
    TrailingBytes {
        /// How many.
        count: usize,
        /// Where they start.
        offset: usize,
    },
    /// A value's tag byte names no kind of value.
    #[error("unknown value tag 0x{tag:02x} at byte {offset}")]
    UnknownTag {
        /// The tag.
        tag: u8,
        /// Where it is.
        offset: usize,
    },
    /// Lists are nested deeper than [`crate::value::MAX_DEPTH`].
    #[error("lists nested deeper than {max} levels at byte {offset}")]
    TooDeep {
        /// The limit.
        max: usize,
        /// Where the list that is too deep starts.
        offset: usize,
    },
    /// Arguments must be encoded as a list (see [`crate::value::decode_args`]).
    #[error("arguments must be encoded as a list, got {kind}")]
    NotAList {
        /// The kind of value found instead (see [`crate::Value::kind`]).
        kind: &'static str,
    },
}

/// A cursor over encoded bytes; every access is bounds-checked.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    /// The same bytes as `buf`, when byte strings may share them.
    shared: Option<&'a Bytes>,
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`; byte strings it returns are copies.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            shared: None,
            pos: 0,
        }
    }

    /// A reader over `buf` whose byte strings share `buf`'s memory.
    pub fn shared(buf: &'a Bytes) -> Self {
        Reader {
            buf,
            shared: Some(buf),
            pos: 0,
        }
    }

    /// The offset of the next byte to read.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Whether everything has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Succeeds only when everything has been read.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes {
                count,
                offset: self.pos,
            }),
        }
    }

    /// One byte.
    pub fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(DecodeError::UnexpectedEnd { offset: self.pos })?;
        self.pos += 1;
        Ok(b)
    }

    /// The next `len` bytes, borrowed.
    pub fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        let s = start
            .checked_add(len)
            .and_then(|end| self.buf.get(start..end))
            .ok_or(DecodeError::UnexpectedEnd {
                offset: self.buf.len(),
            })?;
        self.pos += len;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// A little-endian `u16`.
    pub fn u16le(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_le_bytes)
    }

    /// A little-endian `u32`.
    pub fn u32le(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }

    /// A little-endian `u64`.
    pub fn u64le(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }

    /// A varint in its shortest form (see [`crate::varint`]).
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let offset = self.pos;
        varint::get(self.buf, &mut self.pos).map_err(|e| match e {
            VarintError::UnexpectedEnd => DecodeError::UnexpectedEnd { offset: self.pos },
            VarintError::Overflow => DecodeError::VarintOverflow { offset },
            VarintError::NonCanonical => DecodeError::NonCanonicalVarint { offset },
        })
    }

    /// A varint count of items each taking at least `unit_bytes_min` bytes,
    /// or a byte length (`unit_bytes_min == 1`): never more than the rest of
    /// the input can hold, so whatever is reserved for the items is
    /// proportional to the input.
    pub fn count(&mut self, unit_bytes_min: usize) -> Result<usize, DecodeError> {
        let offset = self.pos;
        let len = self.varint()?;
        self.bound(len, offset, unit_bytes_min)
    }

    /// Check a count `len` read at `offset` as [`Reader::count`] does: for
    /// formats that read the count themselves (to check a limit first).
    pub fn bound(
        &self,
        len: u64,
        offset: usize,
        unit_bytes_min: usize,
    ) -> Result<usize, DecodeError> {
        let remaining = self.remaining();
        match usize::try_from(len) {
            Ok(n) if n <= remaining / unit_bytes_min.max(1) => Ok(n),
            _ => Err(DecodeError::LengthTooLarge {
                len,
                offset,
                remaining,
            }),
        }
    }

    /// The next `len` bytes as a byte string, sharing the input's memory
    /// when the reader was made with [`Reader::shared`].
    pub fn bytes_of(&mut self, len: usize) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        let s = self.take(len)?;
        Ok(match self.shared {
            Some(shared) => shared.slice(start..self.pos),
            None => Bytes::copy_from_slice(s),
        })
    }

    /// A varint-length-prefixed byte string (see [`Reader::bytes_of`]).
    pub fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.count(1)?;
        self.bytes_of(len)
    }
}

/// The writing half: what every format appends through, over any
/// [`BufMut`].
pub trait Writer: BufMut {
    /// A varint (see [`crate::varint`]).
    fn put_varint(&mut self, v: u64) {
        varint::put(self, v);
    }

    /// A length or count, as a varint.
    fn put_len(&mut self, n: usize) {
        self.put_varint(n as u64);
    }

    /// A byte string behind its varint length (read by [`Reader::bytes`]).
    fn put_prefixed(&mut self, b: &[u8]) {
        self.put_len(b.len());
        self.put_slice(b);
    }
}

impl<B: BufMut + ?Sized> Writer for B {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use bytes::BytesMut;
    use proptest::prelude::*;

    #[test]
    fn fields_round_trip() {
        let mut out = BytesMut::new();
        out.put_u8(7);
        out.put_u16_le(513);
        out.put_u32_le(70_000);
        out.put_u64_le(u64::MAX - 1);
        out.put_varint(300);
        out.put_prefixed(b"abc");
        let bytes = out.freeze();
        let mut r = Reader::shared(&bytes);
        assert_eq!(r.byte().unwrap(), 7);
        assert_eq!(r.u16le().unwrap(), 513);
        assert_eq!(r.u32le().unwrap(), 70_000);
        assert_eq!(r.u64le().unwrap(), u64::MAX - 1);
        assert_eq!(r.varint().unwrap(), 300);
        let s = r.bytes().unwrap();
        assert_eq!(&s[..], b"abc");
        // Shared: the slice points into the input.
        assert_eq!(s.as_ptr(), bytes[bytes.len() - 3..].as_ptr());
        assert!(r.finish().is_ok());
        assert_eq!(r.byte(), Err(DecodeError::UnexpectedEnd { offset: 21 }));
    }

    #[test]
    fn counts_are_bounded_by_the_input() {
        // A count of 3 items of at least 2 bytes needs 6 bytes; 5 remain.
        let mut r = Reader::new(&[3, 0, 0, 0, 0, 0]);
        assert_eq!(
            r.count(2),
            Err(DecodeError::LengthTooLarge {
                len: 3,
                offset: 0,
                remaining: 5
            })
        );
        let mut r = Reader::new(&[2, 0, 0, 0, 0]);
        assert_eq!(r.count(2), Ok(2));
        assert_eq!(
            r.finish(),
            Err(DecodeError::TrailingBytes {
                count: 4,
                offset: 1
            })
        );
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics(data in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&data);
            while !r.is_empty() {
                let step = r.byte().unwrap() % 6;
                let _ = match step {
                    0 => r.varint().map(drop),
                    1 => r.bytes().map(drop),
                    2 => r.u64le().map(drop),
                    3 => r.count(3).map(drop),
                    4 => r.take(usize::MAX).map(drop),
                    _ => r.u16le().map(drop),
                };
            }
        }
    }
}
