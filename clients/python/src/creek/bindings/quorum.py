"""`QuorumReader`: a quorum read over Creek's own replicas, as a binding of
`from_readers` — the preliminary view from whichever replica answers a weak
read first, the final view from a strong read, whose place in the committed
order a majority of the replicas agreed on (Correctables §5.2, the
Cassandra binding's first-replica view, over Creek).

Creek's own `Client.invoke` gives both views in one request to one replica
(the server-side support of §5.2). This binding spends one weak read per
replica to take the first answer from any of them: useful when the replica
a client talks to is slow or cut off, and a second, independent binding to
compare Creek's with. Reads only: every replica runs the op.
"""

from __future__ import annotations

import asyncio
from typing import Iterable, List, Optional, Sequence, Union

from ..client import Client
from ..correctable import Correctable
from ..errors import Unavailable
from ..values import to_wire
from ..views import BOTH, LevelsArg, View
from .readers import FAST_TIMEOUT_S, TIMEOUT_S, from_readers

#: The built-in procedures that write nothing (crates/creek-exec builtins).
READ_ONLY_BUILTINS = frozenset(
    {"kv.get", "list.len", "list.read", "queue.len", "queue.peek", "set.contains", "set.read", "sys.noop"}
)


class QuorumReader:
    """Quorum reads of a Creek cluster.

    `addresses` are the replicas' client endpoints: the weak reads go to
    each of them, the strong read to the first that serves it (failing over
    like `Client`). `read_only` names user procedures that write nothing,
    beyond `READ_ONLY_BUILTINS`; any other procedure is refused, since each
    replica would apply it. `timeout` (seconds) bounds each read,
    `fast_timeout` the wait for the first weak answer (`from_readers`).

        async with QuorumReader(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]) as q:
            early = await q.kv_get("greeting").preliminary()  # first replica to answer
    """

    def __init__(
        self,
        addresses: Union[str, Sequence[str]],
        *,
        read_only: Iterable[str] = (),
        timeout: Optional[float] = TIMEOUT_S,
        fast_timeout: Optional[float] = FAST_TIMEOUT_S,
    ):
        if isinstance(addresses, str):
            addresses = [addresses]
        self._cluster = Client(addresses, timeout=timeout)
        # One client per replica, each pinned to it: no failover, so every
        # weak read reaches a different replica.
        self._replicas: List[Client] = [Client([a], timeout=timeout) for a in self._cluster.addresses]
        extra = frozenset(read_only)
        if not all(isinstance(p, str) for p in extra):
            raise TypeError("read_only must name procedures (str)")
        self._read_only = READ_ONLY_BUILTINS | extra
        self._timeout = timeout
        self._fast_timeout = fast_timeout

    def invoke(self, procedure: str, *args, levels: LevelsArg = BOTH) -> Correctable:
        """Read `procedure(*args)`: a preliminary view from the first
        replica whose weak read succeeds (none if every one fails), then
        the final view from a strong read. `levels=WEAK` takes the first
        weak answer alone; `levels=STRONG` the strong read alone.
        `ValueError` for a procedure not known to be read-only; `TypeError`
        or `ValueError` for arguments Creek cannot take."""
        if not isinstance(procedure, str):
            raise TypeError(f"procedure must be a str, not {type(procedure).__name__}")
        if procedure not in self._read_only:
            raise ValueError(
                f"{procedure!r} is not known to be read-only: a quorum read runs it at every replica "
                "(name user procedures that write nothing in read_only=)"
            )
        for a in args:
            to_wire(a)  # refuse bad arguments here, not in a background read

        async def first_weak() -> View:
            return await self._first_weak(procedure, args)

        async def strong() -> View:
            return await self._cluster.invoke_strong(procedure, *args)

        return from_readers(
            first_weak,
            strong,
            levels=levels,
            timeout=self._timeout,
            fast_timeout=self._fast_timeout,
            store="creek",
            fast_store="creek weak reads",
        )

    def kv_get(self, key: Union[str, bytes], *, levels: LevelsArg = BOTH) -> Correctable:
        """`kv.get(key)`: the value, or None if absent."""
        return self.invoke("kv.get", key, levels=levels)

    def list_read(self, name: Union[str, bytes], *, levels: LevelsArg = BOTH) -> Correctable:
        """`list.read(list)`: its items, oldest first."""
        return self.invoke("list.read", name, levels=levels)

    async def close(self) -> None:
        """Close every connection."""
        for c in [self._cluster, *self._replicas]:
            await c.close()

    async def __aenter__(self) -> "QuorumReader":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _first_weak(self, procedure: str, args: tuple) -> View:
        """The first weak answer of any replica; the other reads run on
        unobserved. `Unavailable` (with each replica's error) if none
        answers."""
        first: asyncio.Future = asyncio.get_running_loop().create_future()
        failures: List[str] = []

        def answered(view: View) -> None:
            if not first.done():
                first.set_result(view)

        def failed(address: str, error: BaseException) -> None:
            failures.append(f"{address}: {error}")
            if len(failures) == len(self._replicas) and not first.done():
                first.set_exception(Unavailable("no replica answered the weak read: " + "; ".join(failures)))

        for replica in self._replicas:
            address = replica.replica_address
            replica.invoke_weak(procedure, *args).set_callbacks(
                on_final=answered, on_error=lambda e, a=address: failed(a, e)
            )
        return await first
