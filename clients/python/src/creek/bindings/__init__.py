"""Correctables over other stores (Correctables §5, bindings): a
`Correctable` made from two reads — a fast one for the preliminary view and
an authoritative one for the final view, CONFIRMED when they agree — read
like any other (`await c.preliminary()`, `await c.final()`, `async for`,
`set_callbacks`, `speculate`).

    from creek.bindings import MISS, from_readers

    async def from_cache():
        got = await cache.get(key)
        return MISS if got is None else got     # a miss: no preliminary view

    async def from_db():
        return await db.fetch(key)

    page = from_readers(from_cache, from_db).speculate(render)

Two bindings ship:

- `CachedTable`: Redis in front of PostgreSQL; the
  preliminary view from Redis, the final from PostgreSQL, Redis refreshed
  when they differ. Needs `pip install 'creek[redis,postgres]'`.
- `QuorumReader`: a quorum read over Creek's
  replicas; the preliminary view from the first replica to answer weakly,
  the final from a strong read, ordered by a majority.

`import creek.bindings` needs neither redis nor psycopg: `CachedTable`
imports them when it is used.
"""

from .cache import CachedTable
from .quorum import READ_ONLY_BUILTINS, QuorumReader
from .readers import FAST_TIMEOUT_S, MISS, TIMEOUT_S, OnDiffer, Reader, StoreError, from_readers

__all__ = [
    "CachedTable",
    "FAST_TIMEOUT_S",
    "MISS",
    "OnDiffer",
    "QuorumReader",
    "READ_ONLY_BUILTINS",
    "Reader",
    "StoreError",
    "TIMEOUT_S",
    "from_readers",
]
