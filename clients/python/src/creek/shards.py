"""Sharded clusters (docs/shards.md): the shard map as replicas hand it out
in `Status`, the placement rule, and `Cluster`, a client that sends each
call to a replica of the shard owning its key.

    async with creek.Cluster(["127.0.0.1:7001"]) as c:   # any replica
        await c.call("kv.put", "greeting", "hi")           # to greeting's shard

A call the map places on another shard than the replica's is refused with
`WrongShard` and applies nothing; `Cluster.call` then learns the map again
and sends the call to the owner.
"""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

from ._pb import creek_pb2 as pb
from .cache import CACHE_BYTES_MAX_DEFAULT, CachedWrite, Causal
from .client import DEFAULT, Client
from .correctable import Correctable
from .errors import WRONG_SHARD, ProcedureAborted, ProtocolError, Unavailable, WrongShard
from .txn import txn_keys
from .views import SNAPSHOT, STRONG, Level, LevelsArg, View, ViewKind, parse_levels

#: Hash slots a hashed placement divides keys into.
SLOTS = 4096

#: Times `Cluster.call` sends a call again after a `WrongShard` refusal (or
#: a `WRONG_SHARD` abort where it ran: its key moved to another shard as it
#: ran): at once the first time, then after a pause that doubles from
#: `WRONG_SHARD_PAUSE` seconds (keys switching shards are served by neither
#: for a moment: 0.63 s of pauses in all, 10 + 20 + ... + 320 ms).
WRONG_SHARD_RETRIES = 7
WRONG_SHARD_PAUSE = 0.010

#: Times a snapshot `kv.mget` across shards starts again after a part
#: answered `Unavailable` (a replica no longer keeps that time's versions).
UNAVAILABLE_RETRIES = 1


def _fmix32(h: int) -> int:
    """MurmurHash3's 32-bit finalizer."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _tag(key: bytes) -> Optional[bytes]:
    open_ = key.find(b"{")
    if open_ < 0:
        return None
    close = key.find(b"}", open_ + 1)
    if close <= open_ + 1:
        return None
    return key[open_ + 1 : close]


def _prefix_end(prefix: bytes) -> Optional[bytes]:
    """The first key after every key starting with `prefix` (None: none)."""
    end = bytearray(prefix)
    while end:
        last = end.pop()
        if last < 0xFF:
            end.append(last + 1)
            return bytes(end)
    return None


def slot_of(key: Union[bytes, str]) -> int:
    """The hash slot of `key`: MurmurHash3's finalizer over the CRC-32 of
    the key (or of its non-empty `{tag}`), modulo 4096."""
    if isinstance(key, str):
        key = key.encode()
    return _fmix32(zlib.crc32(_tag(key) or key)) % SLOTS


@dataclass
class Placement:
    """How a keyspace's keys are placed: `kind` is "pinned" (`shard`),
    "hashed" (`entries` of (first slot, shard)) or "ranges" (`entries` of
    (first key, shard))."""

    kind: str
    shard: int = 0
    entries: List[Tuple[Union[int, bytes], int]] = field(default_factory=list)

    def owners_of_prefix(self, prefix: bytes) -> List[int]:
        """The shards that may own a key starting with `prefix`: one where
        the placement keeps them together (pinned; hashed with a whole
        `{tag}` in the prefix; ranges holding every key from the prefix to
        its end in one shard's range), else every shard that may."""
        if self.kind == "pinned":
            return [self.shard]
        if self.kind == "hashed":
            if _tag(prefix) is not None:
                return [self.owner(prefix)]
            return sorted({shard for _, shard in self.entries})
        end = _prefix_end(prefix)
        owners = {self.owner(prefix)}
        for first, shard in self.entries:
            if first > prefix and (end is None or first < end):
                owners.add(shard)
        return sorted(owners)

    def owner(self, key: bytes) -> int:
        if self.kind == "pinned":
            return self.shard
        point = slot_of(key) if self.kind == "hashed" else key
        owner = self.entries[0][1]
        for first, shard in self.entries:
            if first <= point:
                owner = shard
        return owner


@dataclass
class Move:
    """Keys on their way between shards (docs/shards.md, "Moves in the
    map"): of `keyspace`'s placement (None: the default's), `kind` "slots"
    (`first`..`end` slot numbers), "range" (`first`..`end` keys, `end`
    None: to the end) or "all"; owned by shard `source` until the move
    switches, then by `target`."""

    keyspace: Optional[str]
    kind: str
    first: Union[int, bytes, None]
    end: Union[int, bytes, None]
    source: int
    target: int


@dataclass
class ShardMap:
    """A cluster's shard map: its id, epoch, every shard's replicas (id →
    client address), the default placement, each keyspace's own, and the
    directory group's replicas (id → client address; empty when the map
    is a file every replica is given)."""

    cluster: int
    epoch: int
    shards: Dict[int, Dict[int, str]]
    default: Placement
    keyspaces: Dict[str, Placement]
    directory: Dict[int, str] = field(default_factory=dict)
    #: The move in flight, if any (its keys still belong to its source).
    moving: Optional[Move] = None
    #: How many moves have switched since the cluster was formed.
    moved: int = 0
    #: The last move switched, until it finishes (its keys belong to its
    #: target; no move begins meanwhile).
    finishing: Optional[Move] = None

    def placement(self, keyspace: Optional[str] = None) -> Placement:
        """The placement of `keyspace` (None: the built-in data)."""
        return self.keyspaces.get(keyspace, self.default) if keyspace else self.default

    def owner(self, key: Union[bytes, str], keyspace: Optional[str] = None) -> int:
        """The shard owning `key` (of `keyspace`; None: the built-in data)."""
        if isinstance(key, str):
            key = key.encode()
        return self.placement(keyspace).owner(key)


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.at = 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise ProtocolError(f"shard map: ends at byte {self.at}")
        b = self.data[self.at]
        self.at += 1
        return b

    def varint(self) -> int:
        value, shift = 0, 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ProtocolError(f"shard map: varint too long at byte {self.at}")

    def prefixed(self) -> bytes:
        n = self.varint()
        if self.at + n > len(self.data):
            raise ProtocolError(f"shard map: {n} bytes past the end at byte {self.at}")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def flag(self) -> bool:
        b = self.byte()
        if b > 1:
            raise ProtocolError(f"shard map: presence flag {b} at byte {self.at - 1}")
        return b == 1

    def placement(self) -> Placement:
        tag = self.byte()
        if tag == 0:
            return Placement("pinned", shard=self.varint())
        if tag == 1:
            return Placement("hashed", entries=[(self.varint(), self.varint()) for _ in range(self.varint())])
        if tag == 2:
            return Placement("ranges", entries=[(self.prefixed(), self.varint()) for _ in range(self.varint())])
        raise ProtocolError(f"shard map: unknown placement tag {tag} at byte {self.at - 1}")


def decode_map(data: bytes) -> ShardMap:
    """A shard map from its bytes (as `Status.shard_map` carries them)."""
    r = _Reader(data)
    version = r.byte()
    if version not in (1, 2, 3):
        raise ProtocolError(f"shard map: unknown format version {version}")
    cluster, epoch = r.varint(), r.varint()

    def replicas() -> Dict[int, str]:
        group = {}
        for _ in range(r.varint()):
            replica = r.varint()
            group[replica] = r.prefixed().decode()
            r.prefixed()  # the peer address
        return group

    shards: Dict[int, Dict[int, str]] = {}
    for _ in range(r.varint()):
        shard = r.varint()
        shards[shard] = replicas()
    default = r.placement()
    keyspaces = {r.prefixed().decode(): r.placement() for _ in range(r.varint())}
    # Version 2 ends with the directory group's replicas, version 3 with
    # the count of switched moves and the move in flight.
    directory = replicas() if version >= 2 else {}
    moved, moving, finishing = 0, None, None
    if version >= 3:
        moved = r.varint()
        state = r.byte()
        if state not in (0, 1, 2):
            raise ProtocolError(f"shard map: unknown state of a move {state} at byte {r.at - 1}")
        if state:
            keyspace = r.prefixed().decode() if r.flag() else None
            tag = r.byte()
            if tag == 0:
                kind, first, end = "slots", r.varint(), r.varint()
            elif tag == 1:
                kind, first = "range", r.prefixed()
                end = r.prefixed() if r.flag() else None
            elif tag == 2:
                kind, first, end = "all", None, None
            else:
                raise ProtocolError(f"shard map: unknown kind of moving keys {tag} at byte {r.at - 1}")
            m = Move(keyspace, kind, first, end, r.varint(), r.varint())
            moving, finishing = (m, None) if state == 1 else (None, m)
    if r.at != len(data):
        raise ProtocolError(f"shard map: {len(data) - r.at} bytes after the map")
    return ShardMap(cluster, epoch, shards, default, keyspaces, directory, moving, moved, finishing)


async def _page(client: Client, procedure: str, start, end, limit: int, levels):
    """One shard's `[page, next]`, asked again after a pause while the shard
    aborts it with `WRONG_SHARD` (it read a key moving between shards)."""
    for attempt in range(WRONG_SHARD_RETRIES + 1):
        if attempt > 1:
            await asyncio.sleep(WRONG_SHARD_PAUSE * 2 ** min(attempt - 2, 8))
        try:
            return (await client._range(procedure, start, end, limit, levels, {}).final()).result()
        except ProcedureAborted as e:
            if not e.message.startswith(WRONG_SHARD) or attempt == WRONG_SHARD_RETRIES:
                raise


class Cluster:
    """A client of every shard of a cluster: `Client`s per shard, each call
    sent to the shard owning its key by the map the replicas hand out. On
    a cluster of one group it is one `Client`. Connect with `await
    cluster.connect()` or `async with`.

    The shards' clients share one read time, one dependency time and one
    client cache (`Client`'s `cache` and `cache_bytes_max` options), so the
    client is causal across shards and reads its own writes on any of them.
    A snapshot `kv.mget` whose keys span shards reads the first key's
    shard's part at the read time, then every other shard's part at exactly
    the time that part answered at, and answers with one view at that
    time."""

    def __init__(self, addresses: List[str], **options):
        self._causal = Causal(
            options.pop("cache", True), options.pop("cache_bytes_max", CACHE_BYTES_MAX_DEFAULT)
        )
        self._options = dict(options, _causal=self._causal)
        self._seed = Client(addresses, **self._options)
        self._map: Optional[ShardMap] = None
        self._clients: Dict[int, Client] = {}
        # Procedure name → where its calls' keys are, as the replicas
        # publish it (`Procedures`: route, route_arg, route_args,
        # declared_keys): ("arg", [n, ...]) the keys in those arguments,
        # ("list", [n]) the keys in the list in argument n, ("declared",
        # [(n, keyspace, prefix), ...]) the keys a user procedure declares,
        # ("everywhere", []) every shard; a name not here goes to every
        # shard too, once the routes were learnt again.
        self._routes: Dict[str, Tuple[str, list]] = {}

    async def connect(self) -> "Cluster":
        """Learn the map and the procedures' routes from any replica and
        make a client per shard."""
        await self.refresh()
        await self._learn_routes()
        return self

    async def _learn_routes(self) -> None:
        source = next(iter(self._clients.values()), self._seed)
        routes: Dict[str, Tuple[str, list]] = {}
        for p in await source.procedures():
            if p.route == pb.ROUTE_BY_ARG:
                routes[p.name] = ("arg", [p.route_arg])
            elif p.route == pb.ROUTE_BY_ARGS:
                routes[p.name] = ("arg", list(p.route_args))
            elif p.route == pb.ROUTE_BY_LIST_ARG:
                routes[p.name] = ("list", [p.route_arg])
            elif p.route == pb.ROUTE_BY_TXN_KEYS:
                routes[p.name] = ("txn", [])
            elif p.route == pb.ROUTE_BY_DECLARED_KEYS:
                declared = [(d.arg, d.keyspace, d.prefix) for d in p.declared_keys]
                routes[p.name] = ("declared", declared)
            else:
                routes[p.name] = ("everywhere", [])
        self._routes = routes

    @property
    def map(self) -> Optional[ShardMap]:
        """The map calls are routed by (None before `connect`)."""
        return self._map

    @property
    def read_time(self) -> int:
        """The read time every shard's client shares (see `Client.read_time`)."""
        return self._causal.read_time

    @property
    def dep_time(self) -> int:
        """The dependency time every shard's client shares (see
        `Client.dep_time`): the client's writes on one shard commit after
        what it saw or wrote on any other."""
        return self._causal.dep_time

    def observe_read_time(self, time_us: int) -> None:
        """Raise the shared read time to `time_us`."""
        self._causal.observe_read(int(time_us))

    def cache_entries(self) -> List[CachedWrite]:
        """The writes the shared client cache holds (see `Client.cache_entries`)."""
        cache = self._causal.cache
        return cache.entries() if cache is not None else []

    @property
    def cache_bytes(self) -> int:
        """The bytes the shared client cache holds."""
        cache = self._causal.cache
        return cache.bytes if cache is not None else 0

    async def refresh(self) -> None:
        """Learn the map again: from the directory, which holds the newest,
        else from a replica that answers."""
        sources = list(self._clients.values()) or [self._seed]
        directory = None
        if self._map is not None and self._map.directory:
            directory = Client(sorted(self._map.directory.values()), **self._options)
            sources = [directory] + sources
        try:
            await self._learn(sources)
        finally:
            if directory is not None:
                await directory.close()

    async def _learn(self, sources: List[Client]) -> None:
        last: Optional[Exception] = None
        for source in sources:
            try:
                status = await source.status()
            except Exception as e:  # noqa: BLE001 - the next replica may answer
                last = e
                continue
            if not status.shard_map:
                self._map = None
                self._clients = {0: self._seed}
                return
            new = decode_map(status.shard_map)
            old = self._clients
            self._clients = {}
            for shard, replicas in new.shards.items():
                keep = old.get(shard)
                if keep is not None and sorted(keep.addresses) == sorted(replicas.values()):
                    self._clients[shard] = keep
                else:
                    self._clients[shard] = Client(sorted(replicas.values()), **self._options)
            self._map = new
            return
        raise last if last is not None else ProtocolError("no replica to learn the map from")

    def shard_of(self, procedure: str, *args) -> Optional[int]:
        """The shard a call goes to; None: every shard (definitions, users)."""
        if self._map is None:
            return 0
        route = self._routes.get(procedure)
        if route is None or route[0] == "everywhere":
            return None
        first = next(iter(self._map.shards))
        kind, ns = route
        if kind == "declared":
            return self._declared_shard(ns, args, first)
        if kind == "txn":
            # No key, a range op or a lease: any shard runs it or refuses
            # it, saying why; keys on several shards: the first key's
            # shard runs a strong one across shards.
            keys = txn_keys(args)
            return self._map.owner(keys[0]) if keys else first
        if kind == "list":
            keys = args[ns[0]] if ns[0] < len(args) else None
        else:
            keys = [args[n] if n < len(args) else None for n in ns]
        if not isinstance(keys, (list, tuple)) or not all(
            isinstance(k, (bytes, str)) for k in keys
        ):
            # Malformed: any shard refuses it, saying why.
            return first
        owners = [self._map.owner(k) for k in keys]
        # Keys on several shards: the first key's shard refuses the call,
        # naming the shards.
        return owners[0] if owners else first

    def _declared_shard(self, declared: list, args: tuple, first: int) -> int:
        """The shard owning every key a user procedure's call declares;
        with malformed arguments or keys spanning shards, the first
        declared key's shard, which runs a strong call across shards as
        its origin or refuses the call saying why."""
        owners: List[List[int]] = []
        for n, keyspace, prefix in declared:
            arg = args[n] if n < len(args) else None
            if isinstance(arg, str):
                arg = arg.encode()
            if not isinstance(arg, bytes):
                return first
            placement = self._map.placement(keyspace)
            owners.append(placement.owners_of_prefix(arg) if prefix else [placement.owner(arg)])
        every = {shard for o in owners for shard in o}
        if len(every) == 1:
            return every.pop()
        return owners[0][0] if owners and owners[0] else first

    def client(self, shard: int) -> Client:
        """The client of `shard`."""
        return self._clients[shard]

    def invoke(self, procedure: str, *args, **options) -> Correctable:
        """Invoke on the owning shard by the current map (see
        `Client.invoke`); a call without a key goes to the first shard.
        A stale map's call closes its Correctable with `WrongShard`. A
        snapshot `kv.mget` whose keys span shards is read at one time
        across them (at other levels it is one operation across shards)."""
        if procedure == "kv.mget" and len(args) == 1 and self._across(args[0], options.get("levels")):
            return self._read_across(list(args[0]), options.get("timeout", DEFAULT))
        shard = self.shard_of(procedure, *args)
        first = next(iter(self._clients))
        return self._clients[first if shard is None else shard].invoke(procedure, *args, **options)

    async def call(self, procedure: str, *args, levels: LevelsArg = STRONG, timeout=None):
        """Invoke and return the closing view's result. A call refused as
        another shard's, or aborted with `WRONG_SHARD` where it ran (its key
        moved away meanwhile: either way it applied nowhere), makes the
        client learn the map again and send it to the owner; a call without
        a key (a definition, a user change) goes to every shard in turn."""
        options = {"levels": levels}
        if timeout is not None:
            options["timeout"] = timeout
        if self._map is not None and procedure not in self._routes:
            # A user procedure registered since the routes were learnt.
            await self._learn_routes()
        if self.shard_of(procedure, *args) is None:
            result = None
            for client in list(self._clients.values()):
                result = (await client.invoke(procedure, *args, **options).final()).result()
            return result
        for attempt in range(WRONG_SHARD_RETRIES + 1):
            try:
                return (await self.invoke(procedure, *args, **options).final()).result()
            except (WrongShard, ProcedureAborted) as e:
                moved = isinstance(e, WrongShard) or e.message.startswith(WRONG_SHARD)
                if not moved or attempt == WRONG_SHARD_RETRIES:
                    raise
                if attempt > 0:
                    await asyncio.sleep(WRONG_SHARD_PAUSE * 2 ** min(attempt - 1, 8))
                await self.refresh()
                if self._routes.get(procedure, ("",))[0] == "declared":
                    # Registered again, perhaps with other declared keys.
                    await self._learn_routes()
        raise AssertionError("unreachable")

    async def scan(
        self, start, end=None, limit: int = 1000, *, keys_only: bool = False,
        reverse: bool = False, levels: LevelsArg = STRONG,
    ):
        """One page of `[start, end)` from every shard, merged in key order:
        `(items, next)`, items `(key, value)` pairs (keys alone with
        `keys_only`), `next` the key to go on from or None (docs/api.md,
        "Ranges and prefixes"). A shard that had more gave every key it
        holds below its `next` and no more, so the page stops before the
        least of those. With `reverse`, the last keys of the range,
        descending (`kv.scan_reverse`): `next` is then where the next page
        ends (pass it as `end`), and the page stops at the greatest of the
        shards' `next`s."""
        procedure = "kv.scan_keys" if keys_only else "kv.scan"
        if reverse:
            procedure += "_reverse"
        parts = await asyncio.gather(
            *(_page(c, procedure, start, end, limit, levels) for c in list(self._clients.values()))
        )
        nexts = [bytes(n) for _, n in parts if n is not None]
        cut = (max(nexts) if reverse else min(nexts)) if nexts else None
        items = {}
        for page, _ in parts:
            for item in page:
                k = bytes(item if keys_only else item[0])
                if cut is None or (k >= cut if reverse else k < cut):
                    items.setdefault(k, k if keys_only else (k, bytes(item[1])))
        ordered = [items[k] for k in sorted(items, reverse=reverse)]
        more = cut is not None or len(ordered) > limit
        ordered = ordered[:limit]
        nxt = None
        if more and ordered:
            last = ordered[-1] if keys_only else ordered[-1][0]
            nxt = last if reverse else last + b"\0"
        return ordered, nxt

    async def delete_range(self, start, end=None, *, levels: LevelsArg = STRONG) -> int:
        """Delete every key of `[start, end)` on every shard, a page at a
        time (each page at once, the range not): how many were deleted."""
        deleted = 0
        for client in list(self._clients.values()):
            at = start
            while True:
                n, at = await _page(client, "kv.delete_range", at, end, 1000, levels)
                deleted += n
                if at is None:
                    break
        return deleted

    def _across(self, keys, levels) -> bool:
        """Whether a `kv.mget` of `keys` at `levels` is a snapshot read whose
        keys span shards."""
        if self._map is None or levels is None or not isinstance(keys, (list, tuple)):
            return False
        if parse_levels(levels) != {Level.SNAPSHOT}:
            return False
        if not all(isinstance(k, (bytes, str)) for k in keys):
            return False
        return len({self._map.owner(k) for k in keys}) > 1

    def _parts(self, keys: list) -> List[Tuple[int, List[int]]]:
        """The keys' positions by shard, in the order of their shards'
        first keys."""
        parts: Dict[int, List[int]] = {}
        for at, key in enumerate(keys):
            parts.setdefault(self._map.owner(key), []).append(at)
        return list(parts.items())

    def _read_across(self, keys: list, timeout) -> Correctable:
        first = next(iter(self._clients.values()))
        loop = first._bind_loop()
        c = Correctable(loop, threading.get_ident(), fns_in_thread=first._fns_in_thread)
        first._spawn(self._run_across(c, keys, timeout))
        return c

    async def _run_across(self, c: Correctable, keys: list, timeout) -> None:
        unavailable, wrong_shard = UNAVAILABLE_RETRIES, WRONG_SHARD_RETRIES
        try:
            while True:
                try:
                    value, abort, at = await self._read_parts(keys, timeout)
                except Unavailable:
                    if unavailable == 0:
                        raise
                    unavailable -= 1
                    continue
                except WrongShard:
                    if wrong_shard == 0:
                        raise
                    wrong_shard -= 1
                    await self.refresh()
                    continue
                view = View(ViewKind.SNAPSHOT, Level.SNAPSHOT, value, abort, time.monotonic() - c._start, time=at)
                c._push(view, True)
                return
        except asyncio.CancelledError:
            c._fail(ProtocolError("the read was cancelled: the client was closed"))
            raise
        except Exception as e:  # noqa: BLE001 - every failure closes the Correctable
            c._fail(e)

    async def _read_parts(self, keys: list, timeout):
        """Read every shard's part of a `kv.mget`: (values, abort, time)."""
        parts = self._parts(keys)
        options = {"levels": SNAPSHOT, "timeout": timeout}
        (shard, positions), rest = parts[0], parts[1:]
        first = await self._clients[shard].invoke("kv.mget", [keys[i] for i in positions], **options).final()
        at = first.time
        reads = [
            self._clients[s].invoke("kv.mget", [keys[i] for i in ps], _read_exact=at, **options).final()
            for s, ps in rest
        ]
        views = [first, *await asyncio.gather(*reads)]
        values: list = [None] * len(keys)
        for (shard, positions), view in zip(parts, views):
            if view.time != at:
                raise ProtocolError(f"shard {shard} read at {view.time} when asked for exactly {at}")
            if view.abort is not None:
                return None, view.abort, at
            if not isinstance(view.value, list) or len(view.value) != len(positions):
                raise ProtocolError(f"a kv.mget of {len(positions)} keys answered {view.value!r}")
            for i, v in zip(positions, view.value):
                values[i] = v
        return values, None, at

    async def close(self) -> None:
        clients = {id(c): c for c in [self._seed, *self._clients.values()]}
        for c in clients.values():
            await c.close()

    async def __aenter__(self) -> "Cluster":
        return await self.connect()

    async def __aexit__(self, *exc) -> None:
        await self.close()
