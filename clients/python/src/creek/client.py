"""`Client`: an asyncio connection to a Creek cluster that fails over between
replicas and numbers its requests so that retries are applied at most once.

This is not a connection pool or a load balancer: a client talks to one
replica at a time and moves on only when it is unavailable.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from typing import AsyncIterator, Awaitable, Callable, Dict, List, Optional, Sequence, Set, TypeVar, Union

import grpc

from ._pb import creek_pb2 as pb
from ._pb import creek_pb2_grpc as pb_grpc
from .builtins import Builtins
from .cache import CACHE_BYTES_MAX_DEFAULT, CachedWrite, Causal, Track
from .correctable import Correctable
from .errors import CreekError, DeadlineExceeded, ProtocolError, Unavailable, from_rpc_error
from .lease import Leases
from .procedures import Procedures
from .values import to_wire
from .views import BOTH, STRONG, Level, LevelsArg, View, levels_to_wire, parse_levels, view_from_wire
from .watch import WatchEvent
from .watch import watch as _watch

T = TypeVar("T")

#: HTTP/2 pings on a connection with calls open, so a replica that vanished
#: without closing its sockets fails the calls waiting on it.
KEEPALIVE_MS = 10_000
KEEPALIVE_TIMEOUT_MS = 5_000
#: Reconnection backoff: a replica that comes back is used again soon.
RECONNECT_BACKOFF_MAX_MS = 2_000
#: After the closing view, how long to wait for the stream's clean end, and
#: how many stray messages to read (the server sends none; this bounds a
#: faulty one).
DRAIN_TIMEOUT_S = 1.0
DRAIN_MESSAGES_MAX = 4
# Acknowledgements one request carries (the server takes this many), and
# how many wait at most (older ones are dropped: their entries expire).
# How long a group change is retried (a leader hand-over, another change in
# progress), and the pause between tries.
GROUP_CHANGE_WAIT_S = 30.0
GROUP_CHANGE_RETRY_S = 0.2

ACKS_PER_REQUEST = 256
ACKS_WAITING_MAX = 4096

_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", KEEPALIVE_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
]


#: `durability=` values and their wire enum.
_DURABILITY = {
    "none": pb.DURABILITY_NONE,
    "local": pb.DURABILITY_LOCAL,
    "majority": pb.DURABILITY_MAJORITY,
}


class _Default:
    def __repr__(self) -> str:
        return "<client default>"


#: "Use the client's default timeout."
DEFAULT = _Default()


def _read_file(what: str, path: Optional[str]) -> Optional[bytes]:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"reading the TLS {what} {path}: {e}") from e


def _credentials(
    ca: Optional[str], cert: Optional[str], key: Optional[str]
) -> Optional[grpc.ChannelCredentials]:
    """TLS credentials from PEM files (docs/security.md), or None for
    plaintext: the CA that signed the replicas' certificates, and the
    client's certificate and key (both or neither)."""
    if ca is None:
        if cert is not None or key is not None:
            raise ValueError("a client certificate or key is given without a CA (ca=...)")
        return None
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs its key, and a key its certificate")
    return grpc.ssl_channel_credentials(
        root_certificates=_read_file("CA", ca),
        private_key=_read_file("key", key),
        certificate_chain=_read_file("certificate", cert),
    )


def _address(a: str) -> str:
    if not isinstance(a, str) or not a:
        raise ValueError(f"bad replica address {a!r}: expected 'host:port'")
    for scheme in ("http://", "https://", "grpc://"):
        if a.startswith(scheme):
            a = a[len(scheme):]
    return a.rstrip("/")


def _with_token(details, header):
    metadata = list(details.metadata or ())
    metadata.append(header)
    return details._replace(metadata=metadata)


# grpc.aio files an interceptor under the first kind it is an instance of,
# so each kind of call needs an object of its own.
class _UnaryToken(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds `authorization: Bearer <token>` to every unary call."""

    def __init__(self, header):
        self._header = header

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(_with_token(client_call_details, self._header), request)


class _StreamToken(grpc.aio.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every server-streaming call."""

    def __init__(self, header):
        self._header = header

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(_with_token(client_call_details, self._header), request)


def _token_interceptors(token: Optional[str]) -> list:
    """The interceptors that send `token` with every call (a cluster with
    `[auth] enabled`, docs/security.md); none without a token."""
    if token is None:
        return []
    if not isinstance(token, str) or not token.strip() or not token.strip().isascii():
        raise ValueError("token must be the printable text creek_<id>_<secret>")
    header = ("authorization", f"Bearer {token.strip()}")
    return [_UnaryToken(header), _StreamToken(header)]


class Client(Builtins, Procedures, Leases):
    """A client of a Creek cluster, for asyncio code.

    `addresses` are replicas' client endpoints (`host:port`), tried in order:
    calls go to one replica and move to the next when it is unavailable,
    sending the same request again with the same `(client_id,
    request_seq)`, so the cluster applies it at most once. Nothing connects
    until the first call. Use it from one event loop (the first it is used
    in); `BlockingClient` is the twin for scripts without asyncio.

        async with creek.Client(["127.0.0.1:7001", "127.0.0.1:7002"]) as c:
            view = await c.kv_incr("visits", 1).final()

    `timeout` (seconds, None for none) is the default deadline of each call's
    closing view.

    TLS (a cluster with a `[tls]` table, docs/security.md): `ca` is the PEM
    file of the CA that signed the replicas' certificates, `cert` and `key`
    the client's certificate and key (needed when the cluster requires
    client certificates, its default). Without `ca` the channel is
    plaintext.

    Users (a cluster with `[auth] enabled`): `token` (`creek_<id>_<secret>`,
    from `creek user add`) is sent with every call. A call without a valid
    token raises `Unauthenticated`; one its user lacks a right for raises
    `PermissionDenied`, whose message names the right; nothing is applied.

    User procedures: `register_procedures`, `drop_procedure`,
    `show_procedure`, `create_keyspace`, `list_keyspaces` and `procedures`
    (creek.procedures); call them by name with `invoke` or `call`.

    The client cache (docs/snapshot-reads.md, "The client cache"; on unless
    `cache=False`): the client's own acknowledged writes of plain keys
    (`kv.put`, `kv.delete`, `kv.mput`, `kv.incr`, `kv.cas`, `kv.transfer`)
    are laid over its snapshot reads of those keys (`kv.get`, `kv.mget`)
    until its read time passes their commit times, so it reads its writes
    after switching replica. A weak write is followed to its final view in
    the background for its commit time. `cache_bytes_max` (default 1 MiB)
    bounds the keys' and values' bytes; a weak write that does not fit
    closes its Correctable only once its final view came, and the client's
    snapshot reads are then sent at its commit time.
    """

    def __init__(
        self,
        addresses: Union[str, Sequence[str]],
        *,
        timeout: Optional[float] = None,
        client_id: Optional[int] = None,
        ca: Optional[str] = None,
        cert: Optional[str] = None,
        key: Optional[str] = None,
        token: Optional[str] = None,
        cache: bool = True,
        cache_bytes_max: int = CACHE_BYTES_MAX_DEFAULT,
        _causal: Optional[Causal] = None,
    ):
        if isinstance(addresses, str):
            addresses = [addresses]
        self._credentials = _credentials(ca, cert, key)
        self._interceptors = _token_interceptors(token)
        self._addresses: List[str] = [_address(a) for a in addresses]
        if not self._addresses:
            raise ValueError("no replica address given")
        if client_id is not None and not 0 < client_id < 2**64:
            raise ValueError("client_id must be in 1..2**64-1 (0 means no id)")
        self._client_id = client_id if client_id is not None else secrets.randbits(64) or 1
        self._timeout = timeout
        self._next_seq = 1
        self._seq_lock = threading.Lock()
        # Seqs answered after one send: the next requests acknowledge them,
        # and the cluster forgets their deduplication entries.
        self._acks: List[int] = []
        # The read and dependency times and the cache of the client's own
        # writes, shared with the other shards' clients of a Cluster.
        self._causal = _causal if _causal is not None else Causal(cache, cache_bytes_max)
        self._current = 0
        self._channels: Dict[int, grpc.aio.Channel] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._tasks: Set[asyncio.Task] = set()
        self._closed = False
        # Set by BlockingClient: speculation functions run in worker threads.
        self._fns_in_thread = False

    # ------------------------------------------------------------ identity

    @property
    def client_id(self) -> int:
        """This client's id, sent with every request (never zero)."""
        return self._client_id

    @property
    def replica_address(self) -> str:
        """The replica calls currently go to."""
        return self._addresses[self._current]

    @property
    def addresses(self) -> List[str]:
        return list(self._addresses)

    # --------------------------------------------------------------- calls

    def invoke(
        self,
        procedure: str,
        *args,
        levels: LevelsArg = BOTH,
        weak_final: bool = False,
        timeout=DEFAULT,
        durability: str = "none",
        revision: Optional[int] = None,
        _read_exact: Optional[int] = None,
    ) -> Correctable:
        """Invoke `procedure(*args)` and return its Correctable at once.

        `levels`: `BOTH` (default: a strong op, preliminary view(s) then the
        final one), `STRONG` (final view only) or `WEAK` (a weak op, one
        preliminary view; `weak_final=True` also streams its final view).
        `SNAPSHOT`, alone or added to the others, for a read-only call: a
        snapshot view of the committed state, after the preliminary view and
        before the final one, never older than what this client saw
        (`ALL` asks for the three).
        A level may also be given by name, in any case (`levels="weak"`,
        `levels=["weak", "strong"]`); anything else raises `ValueError` (an
        unknown name, no level) or `TypeError` (another type) here.
        `durability`: when a preliminary view may leave (docs/api.md,
        "Durable weak writes"): `"none"` (at once, the default), `"local"`
        (once the replica's write of the op is durable) or `"majority"`
        (once a majority of the replicas hold it durably); always before
        the op commits. Another value raises `ValueError` here.
        `revision`: with `levels=SNAPSHOT` alone and a read-only call, read
        the committed state right after the op at that revision (its
        1-based place in the committed order; `etcdctl get --rev`); a
        revision the replica no longer keeps, or has not committed yet,
        closes the Correctable with an out-of-range error.
        Arguments are converted as `creek.values` says (`TypeError` or
        `ValueError` here if one cannot be). Errors of the call (refusal,
        deadline, no replica) close the Correctable.
        """
        loop = self._bind_loop()
        if not isinstance(procedure, str):
            raise TypeError(f"procedure must be a str, not {type(procedure).__name__}")
        wanted = parse_levels(levels)
        if weak_final and (Level.WEAK not in wanted or Level.STRONG in wanted):
            raise ValueError("weak_final applies to a weak op only (levels without STRONG)")
        if durability not in _DURABILITY:
            raise ValueError(f"durability must be none, local or majority, not {durability!r}")
        if revision is not None:
            if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
                raise ValueError(f"revision must be an int of at least 1, not {revision!r}")
            if wanted != {Level.SNAPSHOT}:
                raise ValueError("a read at a revision is a snapshot read: levels=SNAPSHOT alone")
        wire_args = [to_wire(a) for a in args]
        snapshot = Level.SNAPSHOT in wanted
        weak_only = wanted == {Level.WEAK}
        track, read_time = self._causal.track(
            procedure, args, snapshot, weak_only, _read_exact, past=revision is not None
        )
        # A weak write's commit time matters to the cache even when the
        # caller does not ask for its final view: the stream goes on to it.
        follow = weak_only and not weak_final and track.is_write
        request = pb.InvokeRequest(
            procedure=procedure,
            args=wire_args,
            levels=levels_to_wire(wanted),
            weak_final=weak_final or follow,
            client_id=self._client_id,
            request_seq=self._take_seq(),
            acked=self._take_acks(),
            read_time=read_time,
            read_exact=snapshot and _read_exact is not None,
            durability=_DURABILITY[durability],
            revision=revision or 0,
        )
        timeout = self._timeout if timeout is DEFAULT else timeout
        correctable = Correctable(loop, threading.get_ident(), fns_in_thread=self._fns_in_thread)
        closing_is_stable = Level.STRONG in wanted or weak_final
        snapshot_after_weak = wanted == {Level.WEAK, Level.SNAPSHOT} and not weak_final
        reader = _Reader(self, correctable, closing_is_stable, snapshot_after_weak, track, follow)
        self._spawn(self._run_invoke(request, correctable, reader, timeout))
        return correctable

    @property
    def read_time(self) -> int:
        """The largest time of a snapshot view, or of a read's final view,
        this client saw (µs; 0 before any). Its snapshot reads are sent
        with it, so they never read an older state, on any replica."""
        return self._causal.read_time

    @property
    def dep_time(self) -> int:
        """The read time, or the commit time of the client's own latest
        write if later (µs). Every request but a snapshot read is sent with
        it, so the client's later ops commit after its earlier ones, on
        any shard."""
        return self._causal.dep_time

    def observe_read_time(self, time_us: int) -> None:
        """Raise this client's read time to `time_us` (one another client
        saw, say): its next snapshot reads are never older."""
        self._causal.observe_read(int(time_us))

    def cache_entries(self) -> List[CachedWrite]:
        """The writes the client cache holds now: each key the client wrote
        whose write a later snapshot read may not include yet, with its
        value (None: deleted) and its commit time once known."""
        cache = self._causal.cache
        return cache.entries() if cache is not None else []

    @property
    def cache_bytes(self) -> int:
        """The bytes of keys and values the client cache holds now."""
        cache = self._causal.cache
        return cache.bytes if cache is not None else 0

    def invoke_weak(self, procedure: str, *args, weak_final: bool = False, timeout=DEFAULT) -> Correctable:
        """A weak op: one preliminary view, which closes the Correctable
        (unless `weak_final`, which also streams its final view)."""
        return self.invoke(procedure, *args, levels=Level.WEAK, weak_final=weak_final, timeout=timeout)

    def invoke_strong(self, procedure: str, *args, timeout=DEFAULT) -> Correctable:
        """A strong op, final view only."""
        return self.invoke(procedure, *args, levels=Level.STRONG, timeout=timeout)

    async def call(self, procedure: str, *args, levels: LevelsArg = STRONG, timeout=DEFAULT):
        """Invoke and return the result of the closing view (by default a
        strong op's final view); `ProcedureAborted` if it aborted."""
        view = await self.invoke(procedure, *args, levels=levels, timeout=timeout).final()
        return view.result()

    async def status(self, timeout: Optional[float] = 5.0) -> pb.StatusReply:
        """The status of the replica calls currently go to (or, if it is
        unavailable, of the next that answers)."""
        self._bind_loop()

        def one(channel: grpc.aio.Channel) -> Awaitable[pb.StatusReply]:
            return pb_grpc.CreekStub(channel).Status(pb.StatusRequest(), timeout=timeout)

        return await self._unary_with_failover(one)

    # ------------------------------------------------------------ watch

    def watch(
        self,
        prefix: Union[str, bytes] = b"",
        *,
        start: Optional[int] = None,
        tentative: bool = False,
        keyspace: Optional[str] = None,
    ) -> AsyncIterator[WatchEvent]:
        """The changes to keys under `prefix`, as an async iterator of
        `WatchEvent`s: committed changes in the committed order, each
        exactly once, from committed position `start` (default: changes
        committed from now on); with `tentative=True`, tentative changes
        too, marked. When the replica fails the iterator resumes at another
        one from the position after the last committed change it delivered.
        With `keyspace`, the keys of that keyspace (written by user
        procedures) instead of the built-in data: `prefix` and the keys of
        the changes are within it.
        It never ends on its own: it raises `Compacted` when no replica
        still holds the changes from the position it needs,
        `InvalidArgument` for a prefix in Creek's internal key space or
        over 4 KiB or a bad keyspace name, `PermissionDenied` without the
        right to read the keyspace, and `Unavailable` (or another
        `CreekError`) when no replica could be reached for 30 s.

            async for e in client.watch("user/"):
                print(e.position, e.key, e.value)
        """
        return _watch(self, prefix, start, tentative, keyspace)

    # ------------------------------------------------------- membership

    async def members(self, timeout: Optional[float] = 5.0) -> pb.MembersReply:
        """The replica group as the connected replica applied it: each
        member's id, role ("voter", "learner", and while a change is under
        way "incoming voter" / "outgoing voter") and addresses."""
        self._bind_loop()

        def one(channel: grpc.aio.Channel) -> Awaitable[pb.MembersReply]:
            return pb_grpc.AdminStub(channel).Members(pb.MembersRequest(), timeout=timeout)

        return await self._unary_with_failover(one)

    async def add_replica(self, replica: int, peer_addr: str, client_addr: str) -> pb.MembersReply:
        """Add a replica under `replica`, an id the group never had: it joins
        as a learner and becomes a voter once it has caught up. Start its
        `creek serve` with a configuration listing the current members and
        itself. Sent on to the leader; returns the group once the change is
        applied. Refusals (an id in use or used before, a bad address) raise
        a `CreekError` and change nothing."""
        request = pb.AddReplicaRequest(replica=replica, peer_addr=peer_addr, client_addr=client_addr)
        return await self._at_leader(lambda stub: stub.AddReplica(request, timeout=GROUP_CHANGE_WAIT_S))

    async def remove_replica(self, replica: int) -> pb.MembersReply:
        """Remove `replica` from the group (it may be down); a leader hands
        leadership over first. Returns the group once the change is
        applied."""
        request = pb.RemoveReplicaRequest(replica=replica)
        return await self._at_leader(lambda stub: stub.RemoveReplica(request, timeout=GROUP_CHANGE_WAIT_S))

    async def _at_leader(self, call: Callable[[pb_grpc.AdminStub], Awaitable[pb.MembersReply]]) -> pb.MembersReply:
        """Run a group change at the leader: a replica that is not the leader
        names it (followed); one busy with another change, or handing
        leadership over, says so (retried), for up to GROUP_CHANGE_WAIT_S."""
        self._bind_loop()
        give_up = time.monotonic() + GROUP_CHANGE_WAIT_S
        channel = self._channel(self._current)
        extra: List[grpc.aio.Channel] = []
        try:
            while True:
                try:
                    return await call(pb_grpc.AdminStub(channel))
                except grpc.aio.AioRpcError as e:
                    leader = dict(e.trailing_metadata() or ()).get("creek-leader-addr")
                    code = e.code()
                    if code == grpc.StatusCode.FAILED_PRECONDITION and leader:
                        # A leader that just went down fails the next try as
                        # UNAVAILABLE: then another replica is asked again.
                        channel = self._open_channel(_address(leader))
                        extra.append(channel)
                    elif code in (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE):
                        await asyncio.sleep(GROUP_CHANGE_RETRY_S)
                        if code == grpc.StatusCode.UNAVAILABLE:
                            self._current = self._next_replica(self._current, {self._current})
                            channel = self._channel(self._current)
                    else:
                        raise from_rpc_error(e) from None
                    if time.monotonic() >= give_up:
                        raise from_rpc_error(e) from None
        finally:
            for c in extra:
                await c.close(grace=None)

    # ------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Close the connections; open Correctables fail with a CreekError."""
        self._closed = True
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close(grace=None)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---------------------------------------------------------- internals

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "creek.Client is for asyncio code (call it inside a coroutine); "
                "scripts without asyncio can use creek.BlockingClient"
            ) from None
        if self._closed:
            raise CreekError("the client is closed")
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("a creek.Client belongs to the event loop it was first used in")
        return loop

    def _take_acks(self) -> List[int]:
        with self._seq_lock:
            taken, self._acks = self._acks[:ACKS_PER_REQUEST], self._acks[ACKS_PER_REQUEST:]
            return taken

    def _ack(self, seq: int) -> None:
        with self._seq_lock:
            if len(self._acks) >= ACKS_WAITING_MAX:
                del self._acks[:ACKS_PER_REQUEST]
            self._acks.append(seq)

    def _take_seq(self) -> int:
        with self._seq_lock:
            seq = self._next_seq
            self._next_seq += 1
            return seq

    def _spawn(self, coro) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _channel(self, index: int) -> grpc.aio.Channel:
        channel = self._channels.get(index)
        if channel is None:
            channel = self._open_channel(self._addresses[index])
            self._channels[index] = channel
        return channel

    def _open_channel(self, address: str) -> grpc.aio.Channel:
        interceptors = self._interceptors or None
        if self._credentials is None:
            return grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS, interceptors=interceptors)
        return grpc.aio.secure_channel(
            address, self._credentials, options=_CHANNEL_OPTIONS, interceptors=interceptors
        )

    def _next_replica(self, failed: int, tried: Set[int]) -> int:
        """Leave replica `failed` for the next one this call has not tried,
        unless another call already moved to such a replica."""
        if self._current not in tried:
            return self._current
        n = len(self._addresses)
        for k in range(1, n + 1):
            j = (failed + k) % n
            if j not in tried:
                self._current = j
                return j
        return self._current

    async def _unary_with_failover(self, one: Callable[[grpc.aio.Channel], Awaitable[T]]) -> T:
        tried: Set[int] = set()
        failures: List[str] = []
        index = self._current
        while True:
            tried.add(index)
            try:
                return await one(self._channel(index))
            except grpc.aio.AioRpcError as e:
                error = from_rpc_error(e)
            if not isinstance(error, Unavailable):
                raise error
            failures.append(f"{self._addresses[index]}: {error.message}")
            if len(tried) >= len(self._addresses):
                raise Unavailable("no replica could serve the call: " + "; ".join(failures), error.code)
            index = self._next_replica(index, tried)

    async def _run_invoke(
        self,
        request: pb.InvokeRequest,
        c: Correctable,
        reader: "_Reader",
        timeout: Optional[float],
    ) -> None:
        """Send `request` until a replica streams its closing view; feed `c`."""
        deadline = None if timeout is None else c._start + timeout
        tried: Set[int] = set()
        failures: List[str] = []
        index = self._current
        try:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    reader.fail(
                        DeadlineExceeded(
                            f"no final view within {timeout} s", grpc.StatusCode.DEADLINE_EXCEEDED
                        )
                    )
                    return
                tried.add(index)
                try:
                    await reader.attempt(self._channel(index), request, remaining)
                    if len(tried) == 1:
                        # Sent once: no copy of it can come later.
                        self._ack(request.request_seq)
                    return
                except grpc.aio.AioRpcError as e:
                    error = from_rpc_error(e)
                if not isinstance(error, Unavailable):
                    reader.fail(error)
                    return
                failures.append(f"{self._addresses[index]}: {error.message}")
                if len(tried) >= len(self._addresses):
                    reader.fail(
                        Unavailable("no replica could serve the call: " + "; ".join(failures), error.code)
                    )
                    return
                # Same (client_id, request_seq): applied at most once.
                index = self._next_replica(index, tried)
        except asyncio.CancelledError:
            reader.fail(CreekError("the call was cancelled: the client was closed"))
            raise
        except CreekError as e:
            reader.fail(e)
        except Exception as e:  # a bug: never leave a Correctable hanging
            reader.fail(e)
            raise


class _Reader:
    """Turns `Invoke` streams (one per attempt) into one Correctable's views,
    and tells the client's times and cache what each view says."""

    def __init__(
        self,
        client,
        c: Correctable,
        closing_is_stable: bool,
        snapshot_after_weak: bool,
        track: Track,
        follow: bool,
    ):
        self.client = client
        self.c = c
        # Whether a stable view will come (it closes the call).
        self.closing_is_stable = closing_is_stable
        # Without one: whether a snapshot view follows the preliminary one
        # (it closes the call); otherwise the first view closes it.
        self.snapshot_after_weak = snapshot_after_weak
        self.track = track
        # Whether the stream goes on past the closing view to the op's final
        # view, read for the client's times and cache only.
        self.follow = follow
        # The last preliminary or snapshot view as the server sent it: what
        # a confirmation repeats.
        self.last_preliminary: Optional[View] = None
        # The last view the caller was shown (the cache laid over a
        # snapshot view).
        self.last_shown: Optional[View] = None
        # A weak write's closing view, held until its final view came (the
        # cache could not hold the write: it is acknowledged at commit).
        self.held: Optional[View] = None

    def fail(self, error: BaseException) -> None:
        """The call failed (or its final view was lost after it closed)."""
        self.track.on_failed()
        if self.held is not None:
            # The write's closing view was held for its commit: the outcome
            # of that is unknown.
            self.held = None
        self.c._fail(error)

    async def attempt(self, channel: grpc.aio.Channel, request: pb.InvokeRequest, timeout) -> None:
        call = pb_grpc.CreekStub(channel).Invoke(request, timeout=timeout)
        preliminary_in_stream = False
        try:
            while True:
                wire = await call.read()
                if wire is grpc.aio.EOF:
                    break
                if wire.kind == pb.View.CONFIRMED and not preliminary_in_stream:
                    raise ProtocolError("a confirmed view with no preliminary view before it")
                view = view_from_wire(
                    wire,
                    self.last_preliminary,
                    time.monotonic() - self.c._start,
                    shown=self.last_shown,
                )
                if view.is_snapshot or view.is_preliminary:
                    preliminary_in_stream = True
                if not self.c._is_open or self.held is not None:
                    # Closed (or its closing view held): the views are for
                    # the client's times and cache only.
                    self.track.on_view(view)
                    if self.track.settled:
                        if self.held is not None:
                            held, self.held = self.held, None
                            self.c._push(held, True)
                        await _drain(call)
                        return
                    continue
                closes = view.is_stable or (
                    not self.closing_is_stable and (not self.snapshot_after_weak or view.is_snapshot)
                )
                if view.is_preliminary and not closes and self.last_preliminary is not None and view.same_outcome(
                    self.last_preliminary
                ):
                    # A retry at another replica repeating what we know.
                    continue
                if view.is_snapshot or view.is_preliminary:
                    self.last_preliminary = view
                shown = self.track.on_view(view)
                self.last_shown = shown
                if closes and self.follow and self.track.must_settle():
                    self.held = shown
                    continue
                self.c._push(shown, closes)
                if closes:
                    if self.follow and not self.track.settled:
                        continue
                    await _drain(call)
                    return
        except BaseException:
            call.cancel()
            raise
        raise ProtocolError("the server ended the stream before the final view")


async def _drain(call) -> None:
    """Read the stream to its end, so the call finishes rather than being
    cancelled (a cancelled call looks like a failure in the server's
    metrics)."""

    async def rest() -> None:
        for _ in range(DRAIN_MESSAGES_MAX):
            if await call.read() is grpc.aio.EOF:
                return

    try:
        await asyncio.wait_for(rest(), DRAIN_TIMEOUT_S)
    except Exception:
        call.cancel()
