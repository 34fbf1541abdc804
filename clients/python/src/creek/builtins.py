"""Typed helpers for the built-in procedures (crates/creek-exec/src/builtins).

Each helper invokes one procedure and returns its `Correctable`, at the
levels asked for (default: a strong op with a preliminary view first).
Names and items may be `str` (sent as UTF-8) or `bytes`; results come back
as the table below says. For user procedures use `invoke` (or `call`).

| helper          | result                                 |
|-----------------|----------------------------------------|
| `kv_get`        | bytes, or None if absent               |
| `kv_get_meta`   | `[value, version, create_revision, mod_revision, lease]`, or None (`KeyMeta.of`) |
| `kv_put`        | None (`lease=` attaches the key to a lease) |
| `kv_put_ttl`    | None                                   |
| `kv_delete`     | bool: the key existed                  |
| `kv_cas`        | bool: swapped (None expected = absent, None new = delete) |
| `kv_incr`       | int: the new value (stored as decimal text) |
| `kv_mget`       | list: each key's value (bytes), or None if absent |
| `kv_mput`       | None                                   |
| `kv_transfer`   | list of two ints: from's and to's new values |
| `kv_scan`       | `[[[key, value], ...], next key or None]` |
| `kv_scan_keys`  | `[[key, ...], next key or None]`       |
| `kv_scan_reverse`, `kv_scan_keys_reverse` | the same, the last keys descending; `next` is the next page's `to` |
| `kv_count`      | `[count, next key or None]`            |
| `kv_delete_range` | `[keys deleted, next key or None]`   |
| `kv_txn`        | `[succeeded, [each op's result, ...]]` (see `creek.Txn`) |
| `queue_enqueue` | int: the item's position               |
| `queue_dequeue` | bytes, or None if empty                |
| `queue_len`     | int                                    |
| `queue_peek`    | bytes, or None if empty                |
| `list_append`   | int: the new length                    |
| `list_read`     | list of bytes                          |
| `list_len`      | int                                    |
| `set_add`       | bool: added                            |
| `set_remove`    | bool: removed                          |
| `set_contains`  | bool                                   |
| `set_read`      | sorted list of bytes                   |
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Optional, Union

from .correctable import Correctable
from .views import BOTH, LevelsArg

Bytes = Union[str, bytes]


def _bytes(what: str, value) -> Union[str, bytes]:
    if not isinstance(value, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")
    return value


def _bytes_or_none(what: str, value):
    return None if value is None else _bytes(what, value)


@dataclass(frozen=True)
class KeyMeta:
    """A key's value with etcd's KeyValue fields, as `kv.get_meta` answers."""

    value: bytes
    version: int
    create_revision: int
    mod_revision: int
    lease: int

    @staticmethod
    def of(view) -> Optional["KeyMeta"]:
        """Read a view of a `kv.get_meta`: None for an absent key;
        `ValueError` for an abort or an answer of another shape."""
        if view.abort is not None:
            raise ValueError(f"kv.get_meta aborted: {view.abort}")
        value = view.value
        if value is None:
            return None
        if isinstance(value, list) and len(value) == 5 and isinstance(value[0], bytes):
            return KeyMeta(*value)
        raise ValueError(f"kv.get_meta answered {value!r}")


class Builtins:
    """Mixed into the clients: needs `self.invoke(procedure, *args, levels=)`."""

    def invoke(self, procedure: str, *args, levels: LevelsArg = BOTH, **options) -> Correctable:
        raise NotImplementedError

    # ------------------------------------------------------------------ kv

    def kv_get(self, key: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`kv.get(key)`: the value, or None if absent."""
        return self.invoke("kv.get", _bytes("key", key), levels=levels, **options)

    def kv_get_meta(self, key: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`kv.get_meta(key)`: None if absent, else `[value, version,
        create_revision, mod_revision, lease]` (`KeyMeta.of(view)` reads it).
        Revisions are those of committed writes: a preliminary view shows
        the record of the last write committed before it."""
        return self.invoke("kv.get_meta", _bytes("key", key), levels=levels, **options)

    def kv_put(
        self,
        key: Bytes,
        value: Bytes,
        *,
        lease: Optional[int] = None,
        levels: LevelsArg = BOTH,
        **options,
    ) -> Correctable:
        """`kv.put(key, value)`: None. With `lease` (`lease_grant`), the key
        is attached to it and deleted when it expires or is revoked."""
        args = [_bytes("key", key), _bytes("value", value)]
        if lease is not None:
            args.append(int(lease))
        return self.invoke("kv.put", *args, levels=levels, **options)

    def kv_put_ttl(self, key: Bytes, value: Bytes, ttl: int, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`kv.put_ttl(key, value, ttl)`: None; the key is deleted `ttl`
        seconds from now (a lease of its own; Redis's `SET key value EX ttl`)."""
        return self.invoke("kv.put_ttl", _bytes("key", key), _bytes("value", value), int(ttl), levels=levels, **options)

    def kv_delete(self, key: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`kv.delete(key)`: whether the key existed."""
        return self.invoke("kv.delete", _bytes("key", key), levels=levels, **options)

    def kv_cas(
        self,
        key: Bytes,
        expected: Optional[Bytes],
        new: Optional[Bytes],
        *,
        levels: LevelsArg = BOTH,
        **options,
    ) -> Correctable:
        """`kv.cas(key, expected, new)`: whether the swap happened. None as
        `expected` means "absent"; None as `new` deletes the key."""
        return self.invoke(
            "kv.cas",
            _bytes("key", key),
            _bytes_or_none("expected", expected),
            _bytes_or_none("new", new),
            levels=levels,
            **options,
        )

    def kv_incr(self, key: Bytes, delta: int = 1, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`kv.incr(key, delta)`: the counter's new value (absent counts as 0;
        the counter is stored as decimal text, so `kv_get` shows b"42")."""
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise TypeError(f"delta must be an int, not {type(delta).__name__}")
        return self.invoke("kv.incr", _bytes("key", key), delta, levels=levels, **options)

    def kv_mget(self, keys, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`kv.mget(keys)`: each key's value, or None if absent (the keys on
        one shard of a sharded cluster)."""
        return self.invoke("kv.mget", [_bytes("key", k) for k in keys], levels=levels, **options)

    def kv_mput(self, items, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`kv.mput(keys, values)` from a dict or (key, value) pairs: every
        key written at once."""
        pairs = list(items.items()) if isinstance(items, dict) else list(items)
        keys = [_bytes("key", k) for k, _ in pairs]
        values = [_bytes("value", v) for _, v in pairs]
        return self.invoke("kv.mput", keys, values, levels=levels, **options)

    def kv_transfer(
        self, source: Bytes, dest: Bytes, amount: int, *, levels: LevelsArg = BOTH, **options
    ) -> Correctable:
        """`kv.transfer(from, to, amount)`: move amount between two counters;
        aborts, changing nothing, if `source` holds less."""
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise TypeError(f"amount must be an int, not {type(amount).__name__}")
        return self.invoke(
            "kv.transfer", _bytes("from", source), _bytes("to", dest), amount, levels=levels, **options
        )

    # -------------------------------------------------------------- ranges
    # `[from, to)` (`to` None: to the last key), at most `limit` keys
    # (1-10,000) and 4 MiB a page; pass `next` as `from` for the next page
    # (docs/api.md, "Ranges and prefixes"). On a sharded cluster each shard
    # answers for its own keys: `Cluster.scan` merges the pages.

    def _range(self, procedure, start, end, limit, levels, options) -> Correctable:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit must be an int, not {type(limit).__name__}")
        return self.invoke(
            procedure,
            _bytes("from", start),
            _bytes_or_none("to", end),
            limit,
            levels=levels,
            **options,
        )

    def kv_scan(
        self, start: Bytes, end: Optional[Bytes] = None, limit: int = 1000, *,
        levels: LevelsArg = BOTH, **options
    ) -> Correctable:
        """`kv.scan(from, to, limit)`: `[[[key, value], ...], next]`."""
        return self._range("kv.scan", start, end, limit, levels, options)

    def kv_scan_keys(
        self, start: Bytes, end: Optional[Bytes] = None, limit: int = 1000, *,
        levels: LevelsArg = BOTH, **options
    ) -> Correctable:
        """`kv.scan_keys(from, to, limit)`: `[[key, ...], next]`."""
        return self._range("kv.scan_keys", start, end, limit, levels, options)

    def kv_scan_reverse(
        self, start: Bytes, end: Optional[Bytes] = None, limit: int = 1000, *,
        levels: LevelsArg = BOTH, **options
    ) -> Correctable:
        """`kv.scan_reverse(from, to, limit)`: the last keys of the range,
        descending, `[[[key, value], ...], next]`; pass `next` as `end` for
        the next page."""
        return self._range("kv.scan_reverse", start, end, limit, levels, options)

    def kv_scan_keys_reverse(
        self, start: Bytes, end: Optional[Bytes] = None, limit: int = 1000, *,
        levels: LevelsArg = BOTH, **options
    ) -> Correctable:
        """`kv.scan_keys_reverse(from, to, limit)`: `[[key, ...], next]`, descending."""
        return self._range("kv.scan_keys_reverse", start, end, limit, levels, options)

    def kv_count(
        self, start: Bytes, end: Optional[Bytes] = None, limit: int = 10_000, *,
        levels: LevelsArg = BOTH, **options
    ) -> Correctable:
        """`kv.count(from, to, limit)`: `[count, next]`."""
        return self._range("kv.count", start, end, limit, levels, options)

    def kv_delete_range(
        self, start: Bytes, end: Optional[Bytes] = None, limit: int = 1000, *,
        levels: LevelsArg = BOTH, **options
    ) -> Correctable:
        """`kv.delete_range(from, to, limit)`: one page deleted at once,
        `[deleted, next]`."""
        return self._range("kv.delete_range", start, end, limit, levels, options)

    def kv_txn(self, txn, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`kv.txn(compares, success, failure)` from a `creek.Txn`:
        `[succeeded, [result, ...]]` (`creek.TxnAnswer.of(view)` reads it)."""
        compares, success, failure = txn.args()
        return self.invoke("kv.txn", compares, success, failure, levels=levels, **options)

    # --------------------------------------------------------------- queue

    def queue_enqueue(self, queue: Bytes, item: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`queue.enqueue(queue, item)`: the item's position."""
        return self.invoke(
            "queue.enqueue", _bytes("queue", queue), _bytes("item", item), levels=levels, **options
        )

    def queue_dequeue(self, queue: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`queue.dequeue(queue)`: the oldest item, or None if empty."""
        return self.invoke("queue.dequeue", _bytes("queue", queue), levels=levels, **options)

    def queue_len(self, queue: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`queue.len(queue)`: how many items it holds."""
        return self.invoke("queue.len", _bytes("queue", queue), levels=levels, **options)

    def queue_peek(self, queue: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`queue.peek(queue)`: the oldest item, or None if empty."""
        return self.invoke("queue.peek", _bytes("queue", queue), levels=levels, **options)

    # ---------------------------------------------------------------- list

    def list_append(self, name: Bytes, item: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`list.append(list, item)`: the list's new length."""
        return self.invoke(
            "list.append", _bytes("list", name), _bytes("item", item), levels=levels, **options
        )

    def list_read(self, name: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`list.read(list)`: its items, oldest first."""
        return self.invoke("list.read", _bytes("list", name), levels=levels, **options)

    def list_len(self, name: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`list.len(list)`: how many items it holds."""
        return self.invoke("list.len", _bytes("list", name), levels=levels, **options)

    # ----------------------------------------------------------------- set

    def set_add(self, name: Bytes, item: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`set.add(set, item)`: whether it was added (absent before)."""
        return self.invoke("set.add", _bytes("set", name), _bytes("item", item), levels=levels, **options)

    def set_remove(self, name: Bytes, item: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`set.remove(set, item)`: whether it was removed (present before)."""
        return self.invoke(
            "set.remove", _bytes("set", name), _bytes("item", item), levels=levels, **options
        )

    def set_contains(self, name: Bytes, item: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`set.contains(set, item)`: whether it holds the item."""
        return self.invoke(
            "set.contains", _bytes("set", name), _bytes("item", item), levels=levels, **options
        )

    def set_read(self, name: Bytes, *, levels: LevelsArg = BOTH, **options) -> Correctable:
        """`set.read(set)`: its items, sorted."""
        return self.invoke("set.read", _bytes("set", name), levels=levels, **options)
