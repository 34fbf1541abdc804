//! One place that checks a client's call and answers it, for both client
//! protocols (gRPC in [`crate::service`], the native frames in
//! [`crate::native`]); neither front door borrows from the other.
//!
//! * [`check`]: what a call meets before it reaches the node loop — the
//!   replica serves, the caller's token, the request's limits and
//!   procedure, its deadline — and handing it over;
//! * [`answer`]: what the node loop's replies, refusals and passed
//!   deadlines become for the client: statuses, views, error frames, the
//!   `Procedures` entries.
//!
//! [`answer`] sits below the node loop (a native call's replies are
//! encoded on the loop's thread); [`check`] above it. Not here: the
//! protocols' own framing (gRPC headers and streams, native frames and
//! call ids).

pub(crate) mod answer;
pub(crate) mod check;
