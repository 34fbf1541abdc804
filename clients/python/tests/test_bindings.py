"""The two bindings against real servers: `CachedTable` over a throwaway
Redis in front of a throwaway PostgreSQL, `QuorumReader` over a `creek dev`
cluster (Correctables §5), and their examples. Skipped, saying why, where
Redis or PostgreSQL is missing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import creek
from creek import ViewKind
from creek.bindings import CachedTable, QuorumReader, StoreError
from cluster import free_ports
from conftest import run

T = 20.0
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def key(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def kinds(views):
    return [(v.kind, v.value) for v in views]


async def connect(redis_server, postgres_server, **options) -> CachedTable:
    table = await CachedTable.connect(redis_server.url, postgres_server.dsn, timeout=T, **options)
    await table.db.execute("CREATE TABLE IF NOT EXISTS kv (k text PRIMARY KEY, v bytea NOT NULL)")
    return table


def test_the_cache_gives_the_preliminary_view_and_the_database_the_final(redis_server, postgres_server):
    async def body():
        async with await connect(redis_server, postgres_server) as table:
            db, cache = table.db, table.cache
            k = key("user")
            await table.put(k, "v1")  # write-through: both hold v1
            views = [v async for v in table.get(k)]
            assert kinds(views) == [(ViewKind.PRELIMINARY, b"v1"), (ViewKind.CONFIRMED, b"v1")]
            assert [v.level for v in views] == [creek.WEAK, creek.STRONG]

            # The database changed behind the cache's back: corrected, and
            # the cache refreshed before the final view is delivered.
            await db.execute("UPDATE kv SET v = 'v2' WHERE k = %s", (k,))
            views = [v async for v in table.get(k)]
            assert kinds(views) == [(ViewKind.PRELIMINARY, b"v1"), (ViewKind.FINAL, b"v2")]
            assert await cache.get(f"kv:{k}") == b"v2"
            assert kinds([v async for v in table.get(k)])[-1] == (ViewKind.CONFIRMED, b"v2")

            # Speculating on the cached value: redone only when it was stale.
            ran, undone = [], []
            await db.execute("UPDATE kv SET v = 'v3' WHERE k = %s", (k,))
            page = table.get(k).speculate(lambda v: ran.append(v.value) or f"<p>{v.value.decode()}</p>",
                                          abort=undone.append)
            assert (await page).value == "<p>v3</p>" and ran == [b"v2", b"v3"] and undone == ["<p>v2</p>"]

            # A row only in the database: no preliminary view, then cached.
            fresh = key("fresh")
            await db.execute("INSERT INTO kv VALUES (%s, 'db')", (fresh,))
            assert kinds([v async for v in table.get(fresh)]) == [(ViewKind.FINAL, b"db")]
            assert await cache.get(f"kv:{fresh}") == b"db"

            # A row deleted behind the cache's back: the cache entry goes.
            await db.execute("DELETE FROM kv WHERE k = %s", (fresh,))
            assert kinds([v async for v in table.get(fresh)]) == [(ViewKind.PRELIMINARY, b"db"), (ViewKind.FINAL, None)]
            assert await cache.get(f"kv:{fresh}") is None
            assert await table.delete(k) is True and await table.delete(k) is False
            assert kinds([v async for v in table.get(k)]) == [(ViewKind.FINAL, None)]

    run(body())


def test_cache_levels_and_the_refresh_that_never_overwrites_a_writer(redis_server, postgres_server):
    async def body():
        async with await connect(redis_server, postgres_server) as table:
            db, cache = table.db, table.cache
            k = key("levels")
            await db.execute("INSERT INTO kv VALUES (%s, 'db')", (k,))
            # WEAK on a miss reads through to the database and fills the cache.
            assert kinds([v async for v in table.get(k, levels="weak")]) == [(ViewKind.PRELIMINARY, b"db")]
            assert await cache.get(f"kv:{k}") == b"db"
            await cache.set(f"kv:{k}", b"cached")
            assert kinds([v async for v in table.get(k, levels="weak")]) == [(ViewKind.PRELIMINARY, b"cached")]
            # STRONG bypasses the cache (and leaves it alone).
            assert kinds([v async for v in table.get(k, levels="strong")]) == [(ViewKind.FINAL, b"db")]
            assert await cache.get(f"kv:{k}") == b"cached"

            # A refresh replaces only what the read saw: a writer's newer
            # value, set meanwhile, stays.
            await cache.set(f"kv:{k}", b"writer")
            await table._refresh(f"kv:{k}", b"cached", b"db")
            assert await cache.get(f"kv:{k}") == b"writer"
            await table._refresh(f"kv:{k}", b"writer", b"db")
            assert await cache.get(f"kv:{k}") == b"db"

    run(body())


def test_cache_failures_and_bad_input(redis_server, postgres_server):
    async def body():
        import psycopg
        import redis.asyncio as aioredis

        async with await connect(redis_server, postgres_server) as table:
            k = key("fail")
            await table.put(k, b"\x00bytes")
            # Redis down: no preliminary view; the final view still comes.
            dead = aioredis.Redis(port=free_ports(1)[0], socket_connect_timeout=1)
            no_cache = CachedTable(dead, table.db, timeout=T, fast_timeout=0.5)
            assert kinds([v async for v in no_cache.get(k)]) == [(ViewKind.FINAL, b"\x00bytes")]
            # The database refuses the read: a StoreError naming it.
            missing = CachedTable(table.cache, table.db, table="no_such_table", timeout=T)
            with pytest.raises(StoreError, match='^postgresql: UndefinedTable: relation "no_such_table" does not exist'):
                await missing.get(k)
            with pytest.raises(StoreError, match="^postgresql: "):
                await missing.put(k, "v")
            await dead.aclose()

            with pytest.raises(TypeError, match="key must be a str"):
                table.get(42)
            with pytest.raises(TypeError, match="value must be str or bytes"):
                await table.put(k, 42)
            with pytest.raises(ValueError, match='"weak", "snapshot" or "strong"'):
                table.get(k, levels="eventual")
            with pytest.raises(ValueError, match="table must be a non-empty str"):
                CachedTable(table.cache, table.db, table="")
            with pytest.raises(TypeError, match="redis.asyncio.Redis"):
                CachedTable(object(), table.db)
            text = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
            with pytest.raises(ValueError, match="decode_responses=False"):
                CachedTable(text, table.db)
            await text.aclose()
            async with await psycopg.AsyncConnection.connect(postgres_server.dsn) as in_transactions:
                with pytest.raises(ValueError, match="autocommit"):
                    CachedTable(table.cache, in_transactions)

    run(body())


def test_a_quorum_read_over_creek_replicas(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c, QuorumReader(dev.clients, timeout=T) as q:
            k = key("quorum")
            await c.kv_put(k, "v1")
            views = [v async for v in q.kv_get(k)]
            assert kinds(views) == [(ViewKind.PRELIMINARY, b"v1"), (ViewKind.CONFIRMED, b"v1")]
            await c.list_append(k, "a")
            assert (await q.list_read(k)).value == [b"a"]
            assert kinds([v async for v in q.kv_get(k, levels="strong")]) == [(ViewKind.FINAL, b"v1")]
            # Reads only: anything that could write is refused before sending.
            with pytest.raises(ValueError, match="not known to be read-only"):
                q.invoke("kv.incr", k, 1)
            with pytest.raises(TypeError):
                q.invoke("kv.get", {"a": 1})

        # A replica that does not answer: the others do, the strong read
        # fails over.
        nobody = f"127.0.0.1:{free_ports(1)[0]}"
        async with QuorumReader([nobody, *dev.clients], timeout=T) as q:
            assert kinds([v async for v in q.kv_get(k)]) == [(ViewKind.PRELIMINARY, b"v1"), (ViewKind.CONFIRMED, b"v1")]
        async with QuorumReader([nobody], timeout=T) as q:
            with pytest.raises(creek.Unavailable):
                await q.kv_get(k)

    run(body())


def test_a_stale_replica_gives_the_preliminary_view_and_the_majority_corrects_it(dev):
    """Replica 3, cut off, answers the weak read with what it last heard; the
    strong read it forwards is ordered by the majority once it is back."""

    async def body():
        async with creek.Client(dev.clients[:2], timeout=T) as c, QuorumReader([dev.clients[2]], timeout=T) as q:
            k = key("stale")
            await c.kv_put(k, "old")
            for _ in range(200):  # until replica 3 has it
                if (await q.kv_get(k, levels="weak")).value == b"old":
                    break
                await asyncio.sleep(0.05)
            dev.isolate(2)
            try:
                await c.kv_put(k, "new")
                read = q.kv_get(k)
                assert (await read.preliminary()).value == b"old"
            finally:
                dev.isolate(2, partitioned=False)
            assert kinds(read.received)[0] == (ViewKind.PRELIMINARY, b"old")
            assert kinds([await read])[0] == (ViewKind.FINAL, b"new")

    run(body())


@pytest.mark.parametrize("script", ["cache.py", "quorum.py"])
def test_the_binding_examples_run(script, request):
    if script == "cache.py":
        redis_server = request.getfixturevalue("redis_server")
        postgres_server = request.getfixturevalue("postgres_server")
        args = ["--redis", redis_server.url, "--postgres", postgres_server.dsn]
        expect = "corrected"
    else:
        args = ["--addresses", ",".join(request.getfixturevalue("dev").clients)]
        expect = "read 2: racing"
    out = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert expect in out.stdout, out.stdout
