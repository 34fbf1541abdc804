"""Leases from Python, on separate `creek serve` processes (docs/api.md,
"Leases"): grant, attach, keep alive through a leader kill, expire; the
lock held by one holder at a time; an election; bad input refused."""

from __future__ import annotations

import asyncio
import time

import pytest

import creek
from conftest import run

T = 30.0


def test_a_kept_lease_outlives_a_leader_kill_and_its_keys_go_when_it_stops(serve):
    async def body():
        async with creek.Client(serve.clients, timeout=T) as c:
            sent = time.monotonic()
            lease = await c.lease_grant(3)
            await c.kv_put("py/lease/a", "1", lease=lease, levels=creek.STRONG).final()
            await c.kv_put_ttl("py/ttl", "x", 60, levels=creek.STRONG).final()
            ttl = await c.lease_ttl(lease)
            assert (ttl.granted, ttl.keys) == (3, [b"py/lease/a"])
            assert 0 < ttl.remaining <= 3
            assert lease in await c.lease_list()
            keep = c.keep_alive(lease, 3)
            assert keep.live_until >= sent + 3

            # The cluster helpers block: run them off the loop, so the
            # keep-alives go on meanwhile.
            serve.kill(await asyncio.to_thread(serve.wait_for_leader))
            await asyncio.to_thread(serve.wait_for_leader, live=serve.live())
            await asyncio.sleep(5)
            assert keep.is_live(), keep.lost
            assert await c.call("kv.get", "py/lease/a") == b"1"

            live_until = keep.live_until
            await keep.stop()
            deadline = time.monotonic() + 15
            while await c.call("kv.get", "py/lease/a") is not None:
                assert time.monotonic() < deadline, "the key outlived its lease"
                await asyncio.sleep(0.05)
            assert time.monotonic() >= live_until, "the key went before the holder's lease ran out"
            with pytest.raises(creek.LeaseNotFound, match=f"lease {lease} not found"):
                await c.lease_keep_alive_once(lease)
            # The key with a TTL of its own is still there.
            assert await c.call("kv.get", "py/ttl") == b"x"

    run(body(), timeout=90)


def test_a_lock_is_held_by_one_holder_at_a_time_and_an_election_names_one_leader(serve):
    async def body():
        async with creek.Client(serve.clients, timeout=T) as a, creek.Client(
            list(reversed(serve.clients)), timeout=T
        ) as b:
            turns = []

            async def worker(c, who):
                for _ in range(3):
                    async with creek.Lock(c, "py", ttl=5, wait=30) as lock:
                        start = time.monotonic()
                        await asyncio.sleep(0.1)
                        assert lock.is_held()
                        turns.append((start, time.monotonic(), who))

            await asyncio.gather(worker(a, "a"), worker(b, "b"))
            turns.sort()
            assert len(turns) == 6
            for one, two in zip(turns, turns[1:]):
                assert one[1] <= two[0], f"{one[2]} and {two[2]} held the lock at once"
            assert await a.call("kv.get", "lock/py") is None

            ea, eb = creek.Election(a, "py"), creek.Election(b, "py")
            await ea.campaign("node-a", ttl=5)
            assert await eb.leader() == b"node-a"
            with pytest.raises(TimeoutError):
                await eb.campaign("node-b", ttl=5, wait=0.5)
            assert await ea.proclaim("node-a2")
            assert await eb.leader() == b"node-a2"
            await ea.resign()
            await eb.campaign("node-b", ttl=5, wait=10)
            assert await ea.leader() == b"node-b"
            await eb.resign()

    run(body(), timeout=90)


def test_bad_lease_input_is_refused_by_name(serve):
    async def body():
        async with creek.Client(serve.clients, timeout=T) as c:
            with pytest.raises(creek.InvalidArgument, match="ttl must be within 1..=31536000 seconds, got 0"):
                await c.lease_grant(0)
            with pytest.raises(creek.InvalidArgument, match="lease id must be positive"):
                await c.lease_revoke(0)
            with pytest.raises(creek.LeaseNotFound, match="lease 4242 not found"):
                await c.lease_ttl(4242)
            view = await c.kv_put("py/bad", "v", lease=4242, levels=creek.STRONG).final()
            assert "lease 4242 not found" in view.abort
            assert await c.call("kv.get", "py/bad") is None
            weak = await c.invoke("lease.grant", 5, levels=creek.WEAK).final()
            assert "invoke it at the strong level" in weak.abort

    run(body())
