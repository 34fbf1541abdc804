"""Watching changes: `Client.watch(prefix)` as an async iterator of
`WatchEvent`s that survives replica failures.

Committed changes carry their op's position in the committed order, the
same on every replica. The iterator remembers the position after the last
committed change (or progress mark) it received and, when its replica
fails, resumes there at another one: the caller sees every committed change
exactly once, in the committed order (docs/operations.md, "Watching
changes").
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, AsyncIterator, Optional, Set, Union

import grpc

from ._pb import creek_pb2 as pb
from ._pb import creek_pb2_grpc as pb_grpc
from .errors import Compacted, CreekError, from_rpc_error

if TYPE_CHECKING:
    from .client import Client

#: How long a watch tries to reconnect before it gives up.
RECONNECT_WAIT_S = 30.0
#: The pause between two reconnection attempts.
RECONNECT_PAUSE_S = 0.1

#: Errors no other replica would answer differently.
_FINAL_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
}


@dataclass(frozen=True)
class WatchEvent:
    """One change to one key.

    `value` is None when the key was deleted. `op` names the op that made
    the change (`r<origin>.<seq>`). For a committed change, `position` is
    the op's position in the committed order (the keys one op wrote share
    it); a tentative change (`tentative` true) may be corrected by a later
    execution or never commit, and its `position` is the committed length
    when it was sent.
    """

    key: bytes
    value: Optional[bytes]
    op: str
    position: int
    tentative: bool = False

    @property
    def deleted(self) -> bool:
        return self.value is None


def _prefix(prefix: Union[str, bytes]) -> bytes:
    if isinstance(prefix, str):
        return prefix.encode()
    if isinstance(prefix, (bytes, bytearray, memoryview)):
        return bytes(prefix)
    raise TypeError(f"a watch prefix is str or bytes, not {type(prefix).__name__}")


async def watch(
    client: "Client",
    prefix: Union[str, bytes],
    start: Optional[int],
    tentative: bool,
    keyspace: Optional[str] = None,
) -> AsyncIterator[WatchEvent]:
    """See `Client.watch`."""
    client._bind_loop()
    key_prefix = _prefix(prefix)
    if start is not None and not 0 <= start < 2**64:
        raise ValueError(f"start must be a committed position in 0..2**64-1, not {start!r}")
    resume = start
    compacted: Set[int] = set()
    give_up: Optional[float] = None
    index = client._current
    while True:
        request = pb.WatchRequest(prefix=key_prefix, tentative=tentative, keyspace=keyspace or "")
        if resume is not None:
            setattr(request, "from", resume)
        call = pb_grpc.CreekStub(client._channel(index)).Watch(request)
        error: Optional[CreekError] = None
        try:
            async for m in call:
                give_up = None
                compacted.clear()
                if m.kind == pb.WatchEvent.PROGRESS:
                    resume = m.position if resume is None else max(resume, m.position)
                    continue
                if m.kind == pb.WatchEvent.COMMITTED:
                    if resume is not None and m.position < resume:
                        continue
                    resume = m.position + 1
                elif m.kind != pb.WatchEvent.TENTATIVE:
                    continue
                op = f"r{m.op.origin}.{m.op.seq}"
                is_tentative = m.kind == pb.WatchEvent.TENTATIVE
                for c in m.changes:
                    yield WatchEvent(
                        key=c.key,
                        value=None if c.deleted else c.value,
                        op=op,
                        position=m.position,
                        tentative=is_tentative,
                    )
        except grpc.aio.AioRpcError as e:
            if e.code() in _FINAL_CODES:
                raise from_rpc_error(e) from None
            error = from_rpc_error(e)
        finally:
            call.cancel()
        if isinstance(error, Compacted):
            # Another replica may still hold the changes from `resume`.
            compacted.add(index)
            if len(compacted) >= len(client._addresses):
                raise error
        else:
            now = time.monotonic()
            give_up = give_up if give_up is not None else now + RECONNECT_WAIT_S
            if now >= give_up:
                raise error if error is not None else CreekError("the watch stream kept ending")
            await asyncio.sleep(RECONNECT_PAUSE_S)
        # The next replica, unless another call moved on already.
        if client._current == index:
            client._current = (index + 1) % len(client._addresses)
        index = client._current


__all__ = ["WatchEvent", "watch"]
