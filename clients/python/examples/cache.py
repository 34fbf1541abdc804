"""Correctables over Redis in front of PostgreSQL (`creek.bindings.CachedTable`).

User profiles live in a PostgreSQL table, with Redis as a cache. One read
gives two views: the cached profile at once (preliminary), then the
database's row (final, CONFIRMED when the cache was right). A page rendered
on the cached profile with `speculate` is redone only when the cache turns
out stale, and the binding refreshes the cache before it delivers the final
view. Another service writing to the database alone makes the cache stale.

    pip install './clients/python[redis,postgres]'
    python clients/python/examples/cache.py --redis redis://127.0.0.1:6379 \\
        --postgres 'host=127.0.0.1 user=postgres dbname=postgres'
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid

import creek
from creek.bindings import CachedTable


def render(view: creek.View) -> str:
    """The profile page (the work worth starting on the cached view)."""
    return f"<h1>{view.value.decode()}</h1>" if view.value is not None else "<h1>nobody</h1>"


async def show(table: CachedTable, user: str, title: str) -> creek.View:
    undone: list = []
    page = table.get(user).speculate(render, abort=undone.append)
    views = [v async for v in page]
    print(title)
    for v in views:
        print(f"  {v.kind.value:<12} after {v.latency * 1000:6.2f} ms: {v.value}")
    if undone:
        print(f"  the cache was stale: corrected, page {undone[0]} redone")
    return views[-1]


async def main(redis_url: str, postgres_dsn: str) -> int:
    table_name = f"profiles_{uuid.uuid4().hex[:8]}"
    async with await CachedTable.connect(redis_url, postgres_dsn, table=table_name) as table:
        db = table.db  # the example plays another service, too
        await db.execute(f"CREATE TABLE {table_name} (k text PRIMARY KEY, v bytea NOT NULL)")
        try:
            await table.put("alice", "Alice, Lisbon")  # write-through
            first = await show(table, "alice", "read 1: cache and database agree")

            # Another service updates the database and forgets the cache.
            await db.execute(f"UPDATE {table_name} SET v = 'Alice, Porto' WHERE k = 'alice'")
            second = await show(table, "alice", "read 2: the database changed behind the cache")
            third = await show(table, "alice", "read 3: the cache was refreshed by read 2")
        finally:
            await db.execute(f"DROP TABLE {table_name}")
            await table.cache.delete("alice")
    ok = first.is_confirmation and not second.is_confirmation and third.is_confirmation
    print("speculation held on read 1 and 3, corrected on read 2" if ok else "UNEXPECTED views")
    return 0 if ok else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--postgres", default="host=127.0.0.1 user=postgres dbname=postgres")
    a = p.parse_args()
    sys.exit(asyncio.run(main(a.redis, a.postgres)))
