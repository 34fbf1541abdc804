"""The Python client of Creek (DESIGN §7), with the Correctables API.

Invoke procedures on a replicated store and receive each op's views as a
`Correctable`: a fast preliminary view from the replica's tentative
execution, then the final view once the op's position is committed.

    import asyncio, creek

    async def main():
        async with creek.Client(["127.0.0.1:7001", "127.0.0.1:7002"]) as c:
            op = c.kv_incr("visits", 1)            # a strong op, both views
            early = await op.preliminary()         # tentative: may change
            settled = await op.final()             # stable
            print(early.value, settled.value, settled.is_confirmation)

            # Start dependent work on the preliminary view; it is redone
            # (and `abort` called) only if the final view differs.
            page = c.kv_get("greeting").speculate(lambda v: f"<p>{v.value}</p>")
            print((await page).value)

    asyncio.run(main())

Without asyncio, `BlockingClient` gives the same calls; read their
Correctables with `final_blocking()`, `preliminary_blocking()` and
`views_blocking()`.

The same Correctables over other stores — Redis in front of PostgreSQL, a
quorum read over Creek's replicas, or any two readers — are in
`creek.bindings`.

User procedures (docs/procedures.md) are registered from source with
`register_procedures`, their keyspaces made with `create_keyspace`, and
they are called by name like any procedure.

Aborts are outcomes, not errors: a procedure that aborts produces views
whose `abort` holds its message. A `CreekError` means the outcome is unknown
(refused, deadline passed, no replica reachable).
"""

from .blocking import BlockingClient
from .cache import CachedWrite
from .client import Client
from .correctable import Correctable, State
from .errors import (
    Compacted,
    OutOfRange,
    CreekError,
    DeadlineExceeded,
    InvalidArgument,
    PermissionDenied,
    ProcedureAborted,
    ProtocolError,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    WrongShard,
)
from .lease import Election, KeepAlive, LeaseNotFound, LeaseTtl, Lock
from .shards import Cluster, ShardMap, slot_of
from .procedures import Keyspace, KeyspaceLabel, NotRegistered, ProcedureSource, Refused, Registered
from .builtins import KeyMeta
from .txn import Txn, TxnAnswer, TxnOp
from .views import ALL, BOTH, SNAPSHOT, STRONG, WEAK, Level, View, ViewKind
from .watch import WatchEvent

__all__ = [
    "ALL",
    "BOTH",
    "BlockingClient",
    "CachedWrite",
    "Client",
    "Cluster",
    "Compacted",
    "OutOfRange",
    "Correctable",
    "Election",
    "KeepAlive",
    "LeaseNotFound",
    "LeaseTtl",
    "Lock",
    "CreekError",
    "DeadlineExceeded",
    "InvalidArgument",
    "Keyspace",
    "KeyspaceLabel",
    "Level",
    "NotRegistered",
    "PermissionDenied",
    "ProcedureAborted",
    "ProcedureSource",
    "ProtocolError",
    "Refused",
    "ShardMap",
    "Registered",
    "ResourceExhausted",
    "SNAPSHOT",
    "STRONG",
    "State",
    "KeyMeta",
    "Txn",
    "TxnAnswer",
    "TxnOp",
    "Unauthenticated",
    "Unavailable",
    "View",
    "ViewKind",
    "WEAK",
    "WatchEvent",
    "WrongShard",
    "slot_of",
]
