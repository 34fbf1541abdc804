//! LEB128 varints, the integer encoding of every Creek byte format (values,
//! replica-to-replica frames, CAB log entries). Decoding accepts only the
//! shortest encoding, so each integer has exactly one.

/// Why a varint did not decode; the caller knows where it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarintError {
    /// The input ended inside the varint.
    UnexpectedEnd,
    /// More than 64 bits.
    Overflow,
    /// Not the shortest encoding (a trailing zero group).
    NonCanonical,
}

/// Append the encoding of `v` to `out`.
pub fn put<B: bytes::BufMut + ?Sized>(out: &mut B, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// The number of bytes `put` writes for `v`.
pub fn len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Decode a varint from `input` at `*pos`, advancing `*pos` past it.
pub fn get(input: &[u8], pos: &mut usize) -> Result<u64, VarintError> {
    let mut v: u64 = 0;
    for i in 0..10u32 {
        let byte = *input.get(*pos).ok_or(VarintError::UnexpectedEnd)?;
        *pos += 1;
        // The tenth byte holds only the 64th bit.
        if i == 9 && byte > 1 {
            return Err(VarintError::Overflow);
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            if byte == 0 && i > 0 {
                return Err(VarintError::NonCanonical);
            }
            return Ok(v);
        }
    }
    Err(VarintError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_and_length(v in any::<u64>()) {
            let mut out = Vec::new();
            put(&mut out, v);
            prop_assert_eq!(out.len(), len(v));
            let mut pos = 0;
            prop_assert_eq!(get(&out, &mut pos), Ok(v));
            prop_assert_eq!(pos, out.len());
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut pos = 0;
            let _ = get(&data, &mut pos);
        }
    }

    #[test]
    fn rejects_non_canonical_and_overflow() {
        assert_eq!(get(&[0x80, 0x00], &mut 0), Err(VarintError::NonCanonical));
        assert_eq!(get(&[0xff; 10], &mut 0), Err(VarintError::Overflow));
        assert_eq!(get(&[0x80], &mut 0), Err(VarintError::UnexpectedEnd));
    }
}
