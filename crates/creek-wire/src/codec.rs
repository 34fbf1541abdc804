//! Encoding of [`crate::PeerMessage`] (placeholder until written).
use crate::PeerMessage;
use bytes::Bytes;

/// Version of the frame format.
pub const WIRE_VERSION: u8 = 1;

/// Size limits.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits;

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
#[error("not implemented")]
pub struct DecodeError;

/// Encode a message.
pub fn encode(_m: &PeerMessage, _l: &Limits) -> Bytes {
    Bytes::new()
}

/// Decode a message.
pub fn decode(_b: &[u8], _l: &Limits) -> Result<PeerMessage, DecodeError> {
    Err(DecodeError)
}
