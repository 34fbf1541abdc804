"""Why a call failed.

A `CreekError` means the client could not learn the op's outcome: the
request was refused (bad input, overload), its deadline passed, or the
replicas could not be reached. Each subclass matches a gRPC status code the
server documents (proto/creek.proto); every error exposes the status code's
name in `code` (e.g. "FAILED_PRECONDITION" for a code without a subclass,
which raises a plain `CreekError`) and the server's message verbatim in
`message`, as the Rust client's `Error` does.

An abort is *not* an error: a procedure that aborts (deterministically, the
same at every replica) produces a view whose `abort` holds its message.
`View.result()` and `Client.call()` raise `ProcedureAborted` for it, which
is deliberately not a `CreekError`: the outcome is known.
"""

from __future__ import annotations

from typing import Optional, Union

import grpc


class CreekError(Exception):
    """The op's outcome is unknown: it was refused, timed out, or no replica
    answered.

    `code` is the name of the gRPC status code (e.g. "UNAVAILABLE",
    "INVALID_ARGUMENT"; None for errors the client found itself, such as a
    broken protocol or a closed client), `status_code` the same as a
    `grpc.StatusCode`, and `message` the server's words, verbatim. `str(e)`
    is "CODE: message". Each subclass has its code, used when none is given.
    """

    #: The code of this class's errors when the constructor gets none.
    default_code: Optional[str] = None

    def __init__(self, message: str, code: Union[grpc.StatusCode, str, None] = None):
        super().__init__(message)
        self.message = message
        self.status_code = _status_code(code if code is not None else self.default_code)
        self.code: Optional[str] = None if self.status_code is None else self.status_code.name

    def __str__(self) -> str:
        if self.code is None:
            return self.message
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"

    def __reduce__(self):
        return (type(self), (self.message, self.code))


def _status_code(code: Union[grpc.StatusCode, str, None]) -> Optional[grpc.StatusCode]:
    if code is None or isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, str):
        try:
            return grpc.StatusCode[code.upper()]
        except KeyError:
            pass
    raise ValueError(f"{code!r} is not a gRPC status code (a grpc.StatusCode or its name)")


class InvalidArgument(CreekError):
    """Unknown procedure, malformed arguments or levels. Nothing was applied."""

    default_code = "INVALID_ARGUMENT"


class ResourceExhausted(CreekError):
    """The request was too large or the replica is overloaded. Nothing was
    applied."""

    default_code = "RESOURCE_EXHAUSTED"


class DeadlineExceeded(CreekError):
    """The deadline passed before the closing view. The op may still commit;
    a retry with the same request id (which the client does not make on its
    own after a deadline) would learn its result."""

    default_code = "DEADLINE_EXCEEDED"


class Unavailable(CreekError):
    """No replica could serve the call: each was shutting down, had a failed
    disk, or could not be reached."""

    default_code = "UNAVAILABLE"


class Unauthenticated(CreekError):
    """The cluster checks users and the call carried no token, or one it does
    not know (mistyped, revoked, its user removed). Nothing was applied."""

    default_code = "UNAUTHENTICATED"


class PermissionDenied(CreekError):
    """The user lacks a right the call needs; the message names it ("user
    alice lacks write on keyspace default"). Nothing was applied."""

    default_code = "PERMISSION_DENIED"


class OutOfRange(CreekError):
    """A position, revision or time outside what the replica serves: a read
    at a revision it no longer keeps or has not committed yet, a read time
    too far ahead of its clock."""

    default_code = "OUT_OF_RANGE"


class Compacted(OutOfRange):
    """A watch asked for changes from a committed position that no replica
    still holds (compacted, or the watcher fell that far behind). `oldest`
    is the oldest position the replica that answered can resume from."""

    default_code = "OUT_OF_RANGE"

    def __init__(self, message: str, code: Union[grpc.StatusCode, str, None] = None, oldest: int = 0):
        super().__init__(message, code)
        self.oldest = oldest

    def __reduce__(self):
        return (type(self), (self.message, self.code, self.oldest))


class WrongShard(CreekError):
    """The call's key belongs to another shard than the replica's (the
    client's shard map is out of date, or it does not route): nothing was
    applied. `epoch` is the replica's map epoch, `shard` the owner.
    `creek.Cluster.call` learns the map again and sends the call there."""

    default_code = "FAILED_PRECONDITION"

    def __init__(self, message: str, code: Union[grpc.StatusCode, str, None] = None):
        super().__init__(message, code)
        self.epoch = _number_after(message, "(map epoch ")
        self.shard = _number_after(message, "goes to another shard: shard ")


def _number_after(message: str, marker: str) -> int:
    at = message.find(marker)
    digits = ""
    if at >= 0:
        for ch in message[at + len(marker) :]:
            if not ch.isdigit():
                break
            digits += ch
    return int(digits) if digits else 0


#: The first word of a replica's refusal of a call on another shard's key.
WRONG_SHARD = "WRONG_SHARD"


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
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
}


def from_rpc_error(e: grpc.RpcError) -> CreekError:
    """The `CreekError` for a failed gRPC call, with the server's message (or
    the code's name if the server gave none)."""
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = e.details() if hasattr(e, "details") else None
    message = details or code.name.replace("_", " ").lower()
    if code == grpc.StatusCode.OUT_OF_RANGE:
        trailers = dict(e.trailing_metadata() or ()) if hasattr(e, "trailing_metadata") else {}
        oldest = trailers.get(COMPACTED_HEADER)
        if oldest is not None:
            try:
                return Compacted(message, code, int(oldest))
            except ValueError:
                pass
    if code == grpc.StatusCode.FAILED_PRECONDITION and message.startswith(WRONG_SHARD):
        return WrongShard(message, code)
    return _BY_CODE.get(code, CreekError)(message, code)


#: The trailing metadata naming the oldest position a replica can resume a
#: watch from.
COMPACTED_HEADER = "creek-compacted"

