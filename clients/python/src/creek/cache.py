"""What a client knows of its own causal past (docs/snapshot-reads.md,
"The client cache"), shared by every shard's client of a `Cluster`:

- its **read time**: the largest time of a snapshot view, or of a read's
  final view, it saw. Snapshot reads are sent with it, so they never show
  an older state, on any replica or shard;
- its **dependency time**: that, and the commit times of its own writes.
  Every other request is sent with it, so the client's later ops commit
  after its earlier ones, on any shard;
- the **client cache**: its own acknowledged writes of plain keys, each
  with its commit time once known, laid over its snapshot reads of those
  keys until its read time passes the commit time.

`Track` is one call's part: what each of its views tells the client, and
what the cache lays over a snapshot view. Nothing here does I/O.

The writes the cache holds: `kv.put`, `kv.delete`, `kv.mput` (their
arguments say their effect) and `kv.incr`, `kv.cas`, `kv.transfer` (their
outcome does). The reads it is laid over: snapshot views of `kv.get` and
`kv.mget`. Every other procedure is opaque to the client.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

#: The default bound on the keys' and values' bytes the cache holds.
CACHE_BYTES_MAX_DEFAULT = 1 << 20

#: Read-only built-ins that read no plain key: their final views are reads.
OTHER_READS = frozenset(
    [
        "queue.len",
        "queue.peek",
        "list.read",
        "list.len",
        "set.contains",
        "set.read",
        "keyspace.list",
        "proc.list",
        "proc.show",
        "auth.user_list",
        "auth.role_list",
    ]
)

#: One key's new state after a write: (key, value or None if deleted).
KeyEffect = Tuple[bytes, Optional[bytes]]


@dataclasses.dataclass(frozen=True)
class CachedWrite:
    """A write the cache holds: the key, its value (None: deleted), and the
    write's commit time once its final view told it (µs)."""

    key: bytes
    value: Optional[bytes]
    commit_time: Optional[int]


def _as_bytes(v: Any) -> Optional[bytes]:
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    return None


def _keys(v: Any) -> Optional[List[bytes]]:
    if not isinstance(v, (list, tuple)):
        return None
    out = [_as_bytes(k) for k in v]
    return None if any(k is None for k in out) else out


def known(procedure: str, args: tuple) -> Tuple[str, Any]:
    """What the client knows of `procedure(*args)`: ("key_read", (keys,
    is_list)), ("read", None), ("write", effect), ("by_outcome", (kind,
    parts)) or ("opaque", None)."""
    n = len(args)
    if procedure == "kv.get" and n == 1 and _as_bytes(args[0]) is not None:
        return "key_read", ([_as_bytes(args[0])], False)
    if procedure == "kv.mget" and n == 1 and _keys(args[0]) is not None:
        return "key_read", (_keys(args[0]), True)
    if procedure == "kv.put" and n == 2:
        k, v = _as_bytes(args[0]), _as_bytes(args[1])
        if k is not None and v is not None:
            return "write", [(k, v)]
    if procedure == "kv.delete" and n == 1 and _as_bytes(args[0]) is not None:
        return "write", [(_as_bytes(args[0]), None)]
    if procedure == "kv.mput" and n == 2:
        keys, values = _keys(args[0]), _keys(args[1])
        if keys is not None and values is not None and len(keys) == len(values):
            # A key given twice keeps its last value.
            last: Dict[bytes, bytes] = {}
            for k, v in zip(keys, values):
                last[k] = v
            return "write", list(last.items())
    if procedure == "kv.incr" and n == 2 and _as_bytes(args[0]) is not None:
        return "by_outcome", ("incr", (_as_bytes(args[0]),))
    if procedure == "kv.cas" and n == 3 and _as_bytes(args[0]) is not None:
        new = args[2]
        if new is None or _as_bytes(new) is not None:
            return "by_outcome", ("cas", (_as_bytes(args[0]), None if new is None else _as_bytes(new)))
    if procedure == "kv.transfer" and n == 3:
        a, b = _as_bytes(args[0]), _as_bytes(args[1])
        if a is not None and b is not None and a != b:
            return "by_outcome", ("transfer", (a, b))
    if procedure in OTHER_READS:
        return "read", None
    return "opaque", None


def _decimal(n: Any) -> Optional[bytes]:
    if isinstance(n, bool) or not isinstance(n, int):
        return None
    return str(n).encode()


def effect_of_outcome(by: Tuple[str, tuple], value: Any, abort: Optional[str]) -> Optional[List[KeyEffect]]:
    """A write's effect given its outcome: nothing for an abort or a failed
    swap; None if the outcome is not of the expected shape."""
    if abort is not None:
        return []
    kind, parts = by
    if kind == "incr":
        d = _decimal(value)
        return None if d is None else [(parts[0], d)]
    if kind == "cas":
        if not isinstance(value, bool):
            return None
        return [(parts[0], parts[1])] if value else []
    if kind == "transfer":
        if not isinstance(value, list) or len(value) != 2:
            return None
        a, b = _decimal(value[0]), _decimal(value[1])
        if a is None or b is None:
            return None
        return [(parts[0], a), (parts[1], b)]
    return None


class WriteCache:
    """The client's acknowledged writes not yet in every snapshot it reads:
    key → (value or None, write number, commit time or None), bounded to
    `bytes_max` bytes of keys and values."""

    def __init__(self, bytes_max: int):
        self.bytes_max = bytes_max
        self.bytes = 0
        self._entries: Dict[bytes, Tuple[Optional[bytes], int, Optional[int]]] = {}
        # The read times snapshot reads in flight were sent with (how many
        # at each): an entry stays while one of them may read before it.
        self._in_flight: Dict[int, int] = {}

    @staticmethod
    def _size(key: bytes, value: Optional[bytes]) -> int:
        return len(key) + (len(value) if value is not None else 0)

    def record(self, write: int, effect: List[KeyEffect], commit_time: Optional[int]) -> bool:
        """Hold write number `write`'s effect with its commit time if known;
        a key a later write holds keeps that write. False if it does not
        fit: nothing of it is held, and the keys' earlier writes are
        dropped (it supersedes them)."""
        size = self.bytes
        for key, value in effect:
            have = self._entries.get(key)
            if have is not None:
                if have[1] > write:
                    continue
                size -= self._size(key, have[0])
            size += self._size(key, value)
        if size > self.bytes_max:
            for key, _ in effect:
                have = self._entries.get(key)
                if have is not None and have[1] <= write:
                    self._remove(key)
            return False
        for key, value in effect:
            have = self._entries.get(key)
            if have is not None:
                if have[1] > write:
                    continue
                self.bytes -= self._size(key, have[0])
            self._entries[key] = (value, write, commit_time)
            self.bytes += self._size(key, value)
        assert self.bytes == size, "the cache's byte count"
        return True

    def forget(self, write: int) -> None:
        """Drop every key write number `write` still holds."""
        for key in [k for k, e in self._entries.items() if e[1] == write]:
            self._remove(key)

    def _remove(self, key: bytes) -> None:
        have = self._entries.pop(key, None)
        if have is not None:
            self.bytes -= self._size(key, have[0])

    def overlay(self, key: bytes, time: int):
        """(True, value) if a snapshot at `time` shows the cached write of
        `key` (its commit time unknown or after `time`); (False, None) if
        the snapshot holds the client's writes of it."""
        have = self._entries.get(key)
        if have is None or (have[2] is not None and have[2] <= time):
            return False, None
        return True, have[0]

    def evict(self, read_time: int) -> None:
        """Drop the writes committed at or before `read_time` and before
        every read time a read in flight was sent with."""
        horizon = min([read_time, *self._in_flight])
        for key in [k for k, e in self._entries.items() if e[2] is not None and e[2] <= horizon]:
            self._remove(key)

    def read_started(self, time: int) -> None:
        self._in_flight[time] = self._in_flight.get(time, 0) + 1

    def read_ended(self, time: int) -> None:
        n = self._in_flight.get(time, 0) - 1
        if n > 0:
            self._in_flight[time] = n
        else:
            self._in_flight.pop(time, None)

    def entries(self) -> List[CachedWrite]:
        return [CachedWrite(k, e[0], e[2]) for k, e in sorted(self._entries.items())]


class Causal:
    """A client's read time, dependency time and cache (None: off)."""

    def __init__(self, cache: bool = True, cache_bytes_max: int = CACHE_BYTES_MAX_DEFAULT):
        if isinstance(cache_bytes_max, bool) or not isinstance(cache_bytes_max, int) or cache_bytes_max < 0:
            raise ValueError(f"cache_bytes_max must be an int >= 0, not {cache_bytes_max!r}")
        self.read_time = 0
        self._dep_time = 0
        # The largest commit time of the client's writes the cache does not
        # hold: snapshot reads are sent at least at it.
        self.uncached_time = 0
        self._next_write = 1
        self.cache: Optional[WriteCache] = WriteCache(cache_bytes_max) if cache else None

    @property
    def dep_time(self) -> int:
        return max(self._dep_time, self.read_time)

    def snapshot_time(self) -> int:
        return max(self.read_time, self.uncached_time)

    def observe_read(self, time: int) -> None:
        if time > self.read_time:
            self.read_time = time
            if self.cache is not None:
                self.cache.evict(self.read_time)

    def observe_write(self, time: int, cached: bool) -> None:
        self._dep_time = max(self._dep_time, time)
        if not cached:
            self.uncached_time = max(self.uncached_time, time)

    def track(
        self,
        procedure: str,
        args: tuple,
        snapshot: bool,
        weak_only: bool,
        exact: Optional[int] = None,
        past: bool = False,
    ):
        """The tracking of a call, and the read time to send it with.
        `snapshot`: its levels include SNAPSHOT; `weak_only`: it is a weak
        op (its preliminary view acknowledges it); `past`: a read at a past
        revision, over which the cache of the client's own writes is not
        laid."""
        what, detail = known(procedure, args)
        if past and what == "key_read":
            what = "read"
        if snapshot:
            time = exact if exact is not None else self.snapshot_time()
        else:
            time = self.dep_time
        if what == "key_read":
            kind = ("key_read", detail)
        elif snapshot or what == "read":
            kind = ("read", None)
        elif what in ("write", "by_outcome") and self.cache is not None:
            kind = (what, (self._next_write, detail))
            self._next_write += 1
        else:
            kind = ("opaque", None)
        in_flight = None
        if snapshot and self.cache is not None:
            self.cache.read_started(time)
            in_flight = time
        return Track(self, kind, weak_only, in_flight), time


class Track:
    """One call's effect on the client's times and cache, view by view."""

    def __init__(self, causal: Causal, kind: Tuple[str, Any], acked_by_preliminary: bool, in_flight: Optional[int]):
        self.causal = causal
        self.kind = kind
        self.acked_by_preliminary = acked_by_preliminary
        self.acknowledged = False
        self.in_flight = in_flight
        self.recorded = False
        self.cached = False
        self.settled = False

    @property
    def is_write(self) -> bool:
        """A write the cache may hold: its commit time matters even when
        the call closes at its preliminary view."""
        return self.kind[0] in ("write", "by_outcome")

    def must_settle(self) -> bool:
        """Acknowledged without the cache holding it: the call's closing
        view waits for its final view (acknowledged at commit)."""
        return self.is_write and self.recorded and not self.cached and not self.settled

    def on_view(self, view):
        """Apply `view` (as the server sent it) and return the view the
        caller is shown."""
        from .views import View, ViewKind  # views imports nothing from here

        if view.kind is ViewKind.SNAPSHOT:
            self.causal.observe_read(view.time)
            if self.kind[0] == "key_read" and view.abort is None:
                shown = self._overlay(view.value, view.time)
                if shown is not view.value:
                    view = dataclasses.replace(view, value=shown)
            self._read_ended()
        elif view.kind is ViewKind.PRELIMINARY:
            if self.acked_by_preliminary:
                self.acknowledged = True
            if not self.recorded:
                self._record(view, None)
        else:
            self.settled = True
            self.acknowledged = True
            self._read_ended()
            what = self.kind[0]
            if what in ("key_read", "read"):
                self.causal.observe_read(view.time)
            elif what == "opaque":
                self.causal.observe_write(view.time, False)
            else:
                self._record(view, view.time)
                self.causal.observe_write(view.time, self.cached)
                if self.causal.cache is not None:
                    self.causal.cache.evict(self.causal.read_time)
        assert isinstance(view, View)
        return view

    def on_failed(self) -> None:
        """The call failed: a write acknowledged only at its stable view
        leaves the cache; one acknowledged at its preliminary view stays."""
        self._read_ended()
        if self.is_write and not self.acknowledged and self.causal.cache is not None:
            self.causal.cache.forget(self.kind[1][0])

    def _record(self, view, commit_time: Optional[int]) -> None:
        cache = self.causal.cache
        if not self.is_write or cache is None:
            return
        write, detail = self.kind[1]
        if self.kind[0] == "write":
            effect = detail if view.abort is None else []
        else:
            effect = effect_of_outcome(detail, view.value, view.abort)
        # A final view's effect replaces what the preliminary one said.
        cache.forget(write)
        self.recorded = True
        self.cached = effect is not None and cache.record(write, effect, commit_time)

    def _overlay(self, value: Any, time: int) -> Any:
        cache = self.causal.cache
        keys, is_list = self.kind[1]
        if cache is None:
            return value
        if not is_list:
            mine, v = cache.overlay(keys[0], time)
            return v if mine else value
        if not isinstance(value, list) or len(value) != len(keys):
            return value
        out, changed = [], False
        for k, v in zip(keys, value):
            mine, cached = cache.overlay(k, time)
            out.append(cached if mine else v)
            changed |= mine
        return out if changed else value

    def _read_ended(self) -> None:
        if self.in_flight is not None and self.causal.cache is not None:
            self.causal.cache.read_ended(self.in_flight)
            self.in_flight = None
            self.causal.cache.evict(self.causal.read_time)
