"""Why a call failed.

A `CreekError` means the client could not learn the op's outcome: the
request was refused (bad input, overload), its deadline passed, or the
replicas could not be reached. Each subclass matches a gRPC status code the
server documents (proto/creek.proto) and keeps the server's message verbatim
in `message`.

An abort is *not* an error: a procedure that aborts (deterministically, the
same at every replica) produces a view whose `abort` holds its message.
`View.result()` and `Client.call()` raise `ProcedureAborted` for it, which
is deliberately not a `CreekError`: the outcome is known.
"""

from __future__ import annotations

from typing import Optional

import grpc


class CreekError(Exception):
    """The op's outcome is unknown: it was refused, timed out, or no replica
    answered. `code` is the gRPC status code (None for errors found by the
    client itself), `message` the server's words."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None):
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        if self.code is None:
            return self.message
        return f"{self.code.name}: {self.message}"


class InvalidArgument(CreekError):
    """Unknown procedure, malformed arguments or levels. Nothing was applied."""


class ResourceExhausted(CreekError):
    """The request was too large or the replica is overloaded. Nothing was
    applied."""


class DeadlineExceeded(CreekError):
    """The deadline passed before the closing view. The op may still commit;
    a retry with the same request id (which the client does not make on its
    own after a deadline) would learn its result."""


class Unavailable(CreekError):
    """No replica could serve the call: each was shutting down, had a failed
    disk, or could not be reached."""


class ProtocolError(CreekError):
    """The server broke the protocol: the stream ended before the closing
    view, or a view was malformed."""


class ProcedureAborted(Exception):
    """The procedure aborted with `message`. Raised by `View.result()` and
    `Client.call()`; the op's outcome is known (an abort), so this is not a
    `CreekError`."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
}


def from_rpc_error(e: grpc.RpcError) -> CreekError:
    """The `CreekError` for a failed gRPC call, with the server's message (or
    the code's name if the server gave none)."""
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = e.details() if hasattr(e, "details") else None
    message = details or code.name.replace("_", " ").lower()
    return _BY_CODE.get(code, CreekError)(message, code)

