//! Creek's ground floor: the few types and byte formats every room shares.
//!
//! - [`Value`], the self-describing argument and result type, and its
//!   canonical encoding ([`value`]);
//! - LEB128 varints ([`varint`]) and the one bounded [`Reader`] and
//!   [`Writer`] every Creek format decodes and encodes through, with its
//!   typed [`DecodeError`] ([`codec`]);
//! - what a client asks a replica to run: [`ProcCall`] and
//!   [`ClientRequestId`] ([`call`]);
//! - the bugs a test or the simulator may plant on purpose, one set every
//!   configuration carries ([`planted`]).
//!
//! ```
//! use creek_types::{Value, value::{decode_args, encode_args}};
//!
//! let args = encode_args(&[Value::from("k"), Value::Int(3)]);
//! assert_eq!(decode_args(&args).unwrap()[1], Value::Int(3));
//! ```
//!
//! This crate is not for anything that executes, orders or stores: it has
//! no dependency on another Creek crate, and the client and the wire format
//! build on it without compiling the executor.
#![deny(missing_docs)]

pub mod call;
pub mod codec;
pub mod planted;
pub mod value;
pub mod varint;

pub use call::{ClientRequestId, ProcCall};
pub use codec::{DecodeError, Reader, Writer};
pub use value::Value;
