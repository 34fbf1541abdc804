"""Leases (docs/api.md, "Leases"): keys that live while their holder keeps
them alive, as etcd's leases and Redis's `EXPIRE`; and the lock and
leader-election recipes built on them, as etcd's `concurrency` package.

    async with creek.Client(addrs) as c:
        lease = await c.lease_grant(10)                  # its id
        await c.kv_put("worker/1", "up", lease=lease, levels=creek.STRONG).final()
        keep = c.keep_alive(lease, 10)                   # renews in the background
        ...
        await keep.stop()                                # the key goes 10 s later

        async with creek.Lock(c, "nightly", ttl=10):     # one holder at a time
            ...

A holder knows its lease is live until the time it *sent* its last
keep-alive that committed, plus the TTL: the cluster set the deadline from
that op's time, which is no earlier. `KeepAlive.live_until` (a
`time.monotonic()` value) is that bound.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import List, Optional, Union

from .errors import ProcedureAborted
from .txn import Txn, TxnAnswer, TxnOp
from .views import STRONG

Bytes = Union[str, bytes]

#: How often a waiting `Lock` or `Election.campaign` tries again, in seconds.
RETRY_EVERY_S = 0.2


class LeaseNotFound(ProcedureAborted):
    """The lease a call named expired, was revoked or was never granted;
    nothing was applied."""


def _lease_error(e: ProcedureAborted) -> ProcedureAborted:
    if e.message.startswith("lease ") and " not found" in e.message:
        return LeaseNotFound(e.message)
    return e


@dataclass(frozen=True)
class LeaseTtl:
    """A lease's granted TTL, the seconds it has left (rounded up) and its
    keys (at most 1,000)."""

    granted: int
    remaining: int
    keys: List[bytes]


class Leases:
    """Mixed into `Client`: needs `call(procedure, *args, levels=)`."""

    async def _lease_call(self, procedure: str, *args):
        try:
            return await self.call(procedure, *args, levels=STRONG)
        except ProcedureAborted as e:
            raise _lease_error(e) from None

    async def lease_grant(self, ttl: int) -> int:
        """`lease.grant(ttl)`: a new lease of `ttl` seconds (1 to a year); its id."""
        return await self._lease_call("lease.grant", int(ttl))

    async def lease_keep_alive_once(self, lease: int) -> int:
        """`lease.keep_alive(lease)` once: its TTL, renewed from now."""
        return await self._lease_call("lease.keep_alive", int(lease))

    async def lease_revoke(self, lease: int) -> int:
        """`lease.revoke(lease)`: the lease ends now, its keys deleted; how many."""
        return await self._lease_call("lease.revoke", int(lease))

    async def lease_ttl(self, lease: int) -> LeaseTtl:
        """`lease.ttl(lease)`: granted TTL, seconds left, keys."""
        granted, remaining, keys = await self._lease_call("lease.ttl", int(lease))
        return LeaseTtl(granted, remaining, list(keys))

    async def lease_list(self) -> List[int]:
        """`lease.list()`: every live lease's id."""
        return list(await self._lease_call("lease.list"))

    def keep_alive(self, lease: int, ttl: float) -> "KeepAlive":
        """Renew `lease` (granted with `ttl` seconds) every third of its TTL
        from a background task until `KeepAlive.stop()`."""
        return KeepAlive(self, lease, ttl, time.monotonic())


class KeepAlive:
    """A lease renewed by a background task (one keep-alive every third of
    the TTL, retried sooner on failure)."""

    def __init__(self, client, lease: int, ttl: float, since: float):
        self.lease = lease
        self.ttl = float(ttl)
        #: Until when (`time.monotonic()`) the lease is known to be live.
        self.live_until = since + self.ttl
        #: Why the lease was lost, once it was.
        self.lost: Optional[str] = None
        self._client = client
        self._task = asyncio.get_running_loop().create_task(self._run())

    def is_live(self) -> bool:
        """Whether the lease is known to be live now."""
        return self.lost is None and time.monotonic() < self.live_until

    async def _run(self) -> None:
        every = max(self.ttl / 3, 0.1)
        wait = every
        while True:
            await asyncio.sleep(wait)
            sent = time.monotonic()
            try:
                await self._client.lease_keep_alive_once(self.lease)
                self.live_until = max(self.live_until, sent + self.ttl)
                wait = every
            except LeaseNotFound as e:
                self.lost = e.message
                return
            except Exception as e:  # unavailable, deadline: retry while it may help
                if time.monotonic() >= self.live_until:
                    self.lost = f"lease {self.lease} could not be renewed before its TTL ran out: {e}"
                    return
                wait = max(every / 4, 0.05)

    async def stop(self) -> None:
        """Stop renewing; the lease expires a TTL after the last renewal."""
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass


async def _hold(client, key: Bytes, value: Bytes, ttl: float, wait: float, what: str) -> KeepAlive:
    ttl_s = max(1, int(ttl))
    sent = time.monotonic()
    lease = await client.lease_grant(ttl_s)
    keep = KeepAlive(client, lease, ttl_s, sent)
    txn = Txn().when_absent(key).then(TxnOp.put(key, value, lease=lease))
    started = time.monotonic()
    while True:
        view = await client.kv_txn(txn, levels=STRONG).final()
        if view.abort is not None:
            await keep.stop()
            raise _lease_error(ProcedureAborted(view.abort))
        if TxnAnswer.of(view).succeeded:
            return keep
        if keep.lost is not None:
            raise LeaseNotFound(keep.lost)
        if time.monotonic() - started >= wait:
            await keep.stop()
            try:
                await client.lease_revoke(lease)
            except LeaseNotFound:
                pass
            raise TimeoutError(f"{what} {key!r} is held by another client after {wait} s")
        await asyncio.sleep(RETRY_EVERY_S)


async def _end(client, keep: Optional[KeepAlive]) -> None:
    """Stop renewing `keep`'s lease and revoke it (its keys go with it)."""
    if keep is None:
        return
    await keep.stop()
    try:
        await client.lease_revoke(keep.lease)
    except LeaseNotFound:
        pass


class Lock:
    """A lock held through a lease: the key `lock/<name>` exists, attached
    to the holder's lease, while the holder keeps it alive; taking it is a
    `kv.txn` that puts the key only if it is absent. Released by `release()`
    (or leaving `async with`), or by the lease's expiry when the holder
    stops renewing. Waiters retry every 0.2 s, in no particular order.

        async with creek.Lock(client, "nightly", ttl=10, wait=60) as lock:
            ...   # lock.is_held() while it is known to be ours
    """

    def __init__(self, client, name: str, *, ttl: float = 10.0, wait: float = 3600.0):
        self.key = f"lock/{name}"
        self._client = client
        self._ttl = ttl
        self._wait = wait
        self._keep: Optional[KeepAlive] = None

    async def acquire(self) -> "Lock":
        """Wait until the lock is ours (`TimeoutError` after `wait` seconds)."""
        self._keep = await _hold(self._client, self.key, b"", self._ttl, self._wait, "lock")
        return self

    def is_held(self) -> bool:
        """Whether the lock is known to be still ours."""
        return self._keep is not None and self._keep.is_live()

    async def release(self) -> None:
        """Release the lock: revoke its lease, deleting its key."""
        keep, self._keep = self._keep, None
        await _end(self._client, keep)

    async def __aenter__(self) -> "Lock":
        return await self.acquire()

    async def __aexit__(self, *exc) -> None:
        await self.release()


class Election:
    """Leader election through a lease, as etcd's `concurrency.Election`:
    the leader holds `election/<name>` (its value: what the leader
    proclaims) attached to its lease."""

    def __init__(self, client, name: str):
        self.key = f"election/{name}"
        self._client = client
        self._keep: Optional[KeepAlive] = None

    async def campaign(self, value: Bytes, *, ttl: float = 10.0, wait: float = 3600.0) -> None:
        """Wait until this client leads, announcing `value`."""
        self._keep = await _hold(self._client, self.key, value, ttl, wait, "election")

    def is_leader(self) -> bool:
        """Whether leadership is known to be still ours."""
        return self._keep is not None and self._keep.is_live()

    async def leader(self) -> Optional[bytes]:
        """What the current leader announced, or None (a strong read)."""
        return await self._client.call("kv.get", self.key, levels=STRONG)

    async def proclaim(self, value: Bytes) -> bool:
        """Announce a new value if this client still leads: whether it did."""
        if self._keep is None:
            return False
        txn = Txn().when_present(self.key).then(TxnOp.put(self.key, value, lease=self._keep.lease))
        view = await self._client.kv_txn(txn, levels=STRONG).final()
        if view.abort is not None:
            err = _lease_error(ProcedureAborted(view.abort))
            if isinstance(err, LeaseNotFound):
                return False
            raise err
        return TxnAnswer.of(view).succeeded

    async def resign(self) -> None:
        """Step down: revoke the lease, deleting the key."""
        keep, self._keep = self._keep, None
        await _end(self._client, keep)
