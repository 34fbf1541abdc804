"""`CachedTable`: rows of a PostgreSQL table read through a Redis cache as
Correctables — the preliminary view from the cache, the final view from the
database, and the cache refreshed when they differ (Correctables §5.2, the
binding over a store with a cache in front).

Needs the extras: `pip install 'creek[redis,postgres]'` (redis-py's asyncio
client, psycopg 3). The table holds one value per key:

    CREATE TABLE kv (k text PRIMARY KEY, v bytea NOT NULL)

Not a cache policy engine: no expiry, no size bound (give Redis a
`maxmemory` policy), and only the keys read or written through this object
are cached.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Optional, TypeVar, Union

from ..correctable import Correctable
from ..errors import DeadlineExceeded
from ..views import BOTH, LevelsArg
from .readers import FAST_TIMEOUT_S, MISS, TIMEOUT_S, from_readers, store_error

T = TypeVar("T")

Bytes = Union[str, bytes]

# Replace the cached value only if it is still what the reader saw
# (ARGV[1] "1" and the value ARGV[2], or "0": absent), with ARGV[4] (if
# ARGV[3] is "1") or nothing: a reader never overwrites a newer value that
# a writer put there meanwhile.
_REFRESH_LUA = """
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if cur ~= ARGV[2] then return 0 end
elseif cur then
  return 0
end
if ARGV[3] == '1' then redis.call('SET', KEYS[1], ARGV[4]) else redis.call('DEL', KEYS[1]) end
return 1
"""


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, not {type(key).__name__}")
    return key


def _value(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"value must be str or bytes, not {type(value).__name__}")


class CachedTable:
    """Reads and writes of one PostgreSQL table, with Redis in front.

    `cache` is a `redis.asyncio.Redis` (without `decode_responses`), `db` a
    `psycopg.AsyncConnection` in autocommit mode (so every read sees the
    latest committed row); `connect` makes both. Keys are `str`; values go
    in as `str` (UTF-8) or `bytes` and come back as `bytes`, None when the
    row is absent. Redis holds a row under `cache_prefix + key` (default
    `"<table>:"`). `timeout` (seconds) bounds each call, `fast_timeout`
    each cache read (`from_readers`).

        table = await CachedTable.connect("redis://127.0.0.1:6379", "host=... dbname=...")
        view = await table.get("alice").preliminary()   # from Redis
        view = await table.get("alice")                 # from PostgreSQL
    """

    def __init__(
        self,
        cache,
        db,
        *,
        table: str = "kv",
        key_column: str = "k",
        value_column: str = "v",
        cache_prefix: Optional[str] = None,
        timeout: Optional[float] = TIMEOUT_S,
        fast_timeout: Optional[float] = FAST_TIMEOUT_S,
    ):
        try:
            from psycopg import sql
        except ImportError:
            raise ImportError("CachedTable needs psycopg 3: pip install 'creek[postgres]'") from None
        for what, name in (("table", table), ("key_column", key_column), ("value_column", value_column)):
            if not isinstance(name, str) or not name:
                raise ValueError(f"{what} must be a non-empty str, not {name!r}")
        if getattr(cache, "get_encoder", None) is None or getattr(cache, "register_script", None) is None:
            raise TypeError(f"cache must be a redis.asyncio.Redis, not {type(cache).__name__}")
        if cache.get_encoder().decode_responses:
            raise ValueError("the Redis client must not decode responses (decode_responses=False): values are bytes")
        if not getattr(db, "autocommit", False):
            raise ValueError(
                "the PostgreSQL connection must be in autocommit mode "
                "(psycopg.AsyncConnection.connect(..., autocommit=True)), so each read sees the latest commit"
            )
        self._cache = cache
        self._db = db
        self._prefix = f"{table}:" if cache_prefix is None else cache_prefix
        self._timeout = timeout
        self._fast_timeout = fast_timeout
        self._refresh_script = cache.register_script(_REFRESH_LUA)
        self._owned = False
        t, k, v = sql.Identifier(table), sql.Identifier(key_column), sql.Identifier(value_column)
        self._select = sql.SQL("SELECT {v} FROM {t} WHERE {k} = %s").format(t=t, k=k, v=v)
        self._upsert = sql.SQL(
            "INSERT INTO {t} ({k}, {v}) VALUES (%s, %s) ON CONFLICT ({k}) DO UPDATE SET {v} = EXCLUDED.{v}"
        ).format(t=t, k=k, v=v)
        self._delete = sql.SQL("DELETE FROM {t} WHERE {k} = %s").format(t=t, k=k)

    @classmethod
    async def connect(
        cls,
        redis_url: str,
        postgres_dsn: str,
        *,
        connect_timeout_s: float = 5.0,
        **options,
    ) -> "CachedTable":
        """Connect to both stores (each within `connect_timeout_s`) and
        return a table that closes them on `close()`. `options` are the
        constructor's."""
        try:
            import psycopg
            import redis.asyncio as aioredis
        except ImportError as e:
            raise ImportError(f"CachedTable needs {e.name}: pip install 'creek[redis,postgres]'") from None
        cache = aioredis.Redis.from_url(
            redis_url, socket_connect_timeout=connect_timeout_s, socket_timeout=connect_timeout_s
        )
        try:
            db = await psycopg.AsyncConnection.connect(
                postgres_dsn, autocommit=True, connect_timeout=max(1, round(connect_timeout_s))
            )
        except BaseException:
            await cache.aclose()
            raise
        table = cls(cache, db, **options)
        table._owned = True
        return table

    @property
    def cache(self):
        """The Redis client (for commands of your own)."""
        return self._cache

    @property
    def db(self):
        """The PostgreSQL connection (for queries of your own)."""
        return self._db

    async def close(self) -> None:
        """Close the connections, if `connect` made them."""
        if self._owned:
            self._owned = False
            try:
                await self._cache.aclose()
            finally:
                await self._db.close()

    async def __aenter__(self) -> "CachedTable":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---------------------------------------------------------------- reads

    def get(self, key: str, *, levels: LevelsArg = BOTH) -> Correctable:
        """The row's value: preliminary from Redis (none on a miss or a
        Redis error), final from PostgreSQL (None if absent). `levels=WEAK`
        reads Redis only, falling back to PostgreSQL on a miss (which fills
        the cache); `levels=STRONG` reads PostgreSQL only."""
        key = _key(key)
        cache_key = self._prefix + key

        async def from_cache():
            got = await self._cache.get(cache_key)
            return MISS if got is None else got

        async def from_db():
            return await self._db_get(key)

        async def refresh(seen, final) -> None:
            await self._refresh(cache_key, seen, final)

        return from_readers(
            from_cache,
            from_db,
            levels=levels,
            timeout=self._timeout,
            fast_timeout=self._fast_timeout,
            on_differ=refresh,
            store="postgresql",
            fast_store="redis",
        )

    # --------------------------------------------------------------- writes

    async def put(self, key: str, value: Bytes) -> None:
        """Write the row, then the cache (write-through). A `StoreError`
        naming "redis" means the row was written but the cache may be stale
        (until a read corrects it)."""
        key, value = _key(key), _value(value)
        await self._bounded("postgresql", self._db.execute(self._upsert, (key, value)))
        await self._bounded("redis", self._cache.set(self._prefix + key, value))

    async def delete(self, key: str) -> bool:
        """Delete the row, then its cache entry; whether the row existed."""
        key = _key(key)
        cur = await self._bounded("postgresql", self._db.execute(self._delete, (key,)))
        await self._bounded("redis", self._cache.delete(self._prefix + key))
        return cur.rowcount > 0

    # ------------------------------------------------------------ internals

    async def _db_get(self, key: str) -> Optional[bytes]:
        cur = await self._db.execute(self._select, (key,))
        row = await cur.fetchone()
        return None if row is None else bytes(row[0])

    async def _refresh(self, cache_key: str, seen: Any, final: Optional[bytes]) -> None:
        """Put the database's value in the cache, if the cache still holds
        what the fast read saw there."""
        if seen is MISS and final is None:
            return  # absent in both: nothing to do
        args = ["0", b""] if seen is MISS else ["1", seen]
        args += ["0", b""] if final is None else ["1", final]
        await self._refresh_script(keys=[cache_key], args=args)

    async def _bounded(self, store: str, awaitable: Awaitable[T]) -> T:
        """`awaitable` within the timeout, its errors typed."""
        try:
            return await asyncio.wait_for(awaitable, self._timeout)
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"{store}: no answer within {self._timeout} s") from None
        except Exception as e:
            raise store_error(store, e) from e
