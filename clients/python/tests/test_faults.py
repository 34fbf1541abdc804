"""Faults, on separate `creek serve` processes: misspeculation forced by a
partition and concurrent conflicting ops, a deadline passing in a minority,
and failover when the connected replica is killed (idle, and mid-op with the
request resent under the same id)."""

from __future__ import annotations

import asyncio
import time

import pytest

import creek
from creek import ViewKind
from conftest import run

T = 30.0


async def wait_until_weak_read(client: creek.Client, key: str, want, within: float = T) -> None:
    """Until a weak read at the client's replica sees `want`."""
    deadline = time.monotonic() + within
    while (await client.invoke_weak("kv.get", key)).value != want:
        assert time.monotonic() < deadline, f"{key} never became {want!r}"
        await asyncio.sleep(0.05)


def test_concurrent_conflicting_ops_force_a_misspeculation_that_is_redone(serve):
    """Correctables §4.2: when a later view differs from the one the
    speculation ran on, `abort` undoes it and it reruns on the new view. A replica cut off from the majority gives a preliminary view that
    misses the majority's increments; the final view counts them."""
    leader = serve.wait_for_leader()
    minority, majority = (leader + 1) % 3, (leader + 2) % 3

    async def body():
        async with creek.Client([serve.clients[minority]], timeout=T) as cm, creek.Client(
            [serve.clients[majority]], timeout=T
        ) as cj:
            await cj.call("kv.put", "x", "0")
            await wait_until_weak_read(cm, "x", b"0")
            serve.isolate(minority)

            ran, undone = [], []

            def price(view):
                ran.append(view.value)
                return f"quote for {view.value}"

            op = cm.kv_incr("x", 100)
            quote = op.speculate(price, abort=undone.append)
            first = await op.preliminary()
            assert (first.kind, first.value) == (ViewKind.PRELIMINARY, 100)
            assert (await quote.preliminary()).value == "quote for 100"

            # A strong op in the minority cannot finish: its deadline passes
            # after its preliminary view.
            stalled = cm.kv_incr("y", 1, timeout=0.8)
            assert (await stalled.preliminary()).value == 1
            with pytest.raises(creek.DeadlineExceeded) as e:
                await stalled.final()
            assert e.value.code == "DEADLINE_EXCEEDED"
            assert stalled.state is creek.State.ERROR

            # The majority commits conflicting increments meanwhile.
            for _ in range(3):
                assert (await cj.kv_incr("x", 1)).is_stable
            assert op.state is creek.State.UPDATING, "a strong op finished inside the minority"

            serve.isolate(minority, False)
            final = await op.final()
            assert final.value == 103 and final.is_stable
            views = op.received
            assert views[0].value == 100 and views[-1] is final
            assert all(a.latency <= b.latency for a, b in zip(views, views[1:]))

            settled = await quote.final()
            assert settled.value == "quote for 103"
            # The minority may learn the majority's increments one at a time
            # after the heal: each updated view reruns the speculation, and
            # each run but the last is aborted, in order.
            assert ran[0] == 100 and ran[-1] == 103, ran
            assert set(ran) <= {v.value for v in views}, (ran, views)
            assert undone == [f"quote for {v}" for v in ran[:-1]], "abort got the wrong results"
            assert [v.value for v in quote.received][0] == "quote for 100"

    run(body(), timeout=90)


def test_failover_when_the_connected_replica_is_killed(serve):
    leader = serve.wait_for_leader()
    follower = (leader + 1) % 3
    order = [follower] + [i for i in range(3) if i != follower]

    async def body():
        async with creek.Client([serve.clients[i] for i in order], timeout=T) as c:
            assert await c.call("kv.incr", "n", 1) == 1
            assert c.replica_address == serve.clients[follower]

            serve.kill(follower)
            assert await c.call("kv.incr", "n", 1) == 2
            assert c.replica_address != serve.clients[follower]
            assert (await c.status()).replica != follower + 1

            # Every replica gone: the error names each one.
            for i in serve.live():
                serve.kill(i)
            with pytest.raises(creek.Unavailable) as e:
                await c.call("kv.get", "n")
            for address in serve.clients:
                assert address in e.value.message
            assert e.value.code == "UNAVAILABLE" and str(e.value).startswith("UNAVAILABLE: ")

    run(body(), timeout=90)


def test_a_replica_killed_mid_op_the_op_completes_elsewhere_exactly_once(serve):
    """The request is resent to the next replica with the same (client_id,
    request_seq). The connected replica is cut off first, so the op is
    still open (preliminary view only) when it dies."""
    leader = serve.wait_for_leader()
    follower = (leader + 1) % 3
    order = [follower] + [i for i in range(3) if i != follower]

    async def body():
        async with creek.Client([serve.clients[i] for i in order], timeout=T) as c:
            assert await c.call("kv.incr", "m", 1) == 1
            serve.isolate(follower)
            op = c.kv_incr("m", 10)
            assert (await op.preliminary()).value == 11
            serve.kill(follower)
            final = await op.final()
            assert final.value == 11 and final.is_confirmation, op.received
            assert [v.kind for v in op.received] == [ViewKind.PRELIMINARY, ViewKind.CONFIRMED]
            assert c.replica_address != serve.clients[follower]
            # Applied once: the next increment sees 11.
            assert await c.call("kv.incr", "m", 0) == 11

        # The same request id again from another client: deduplicated, it
        # returns the first result instead of applying again.
        async with creek.Client([serve.clients[leader]], client_id=4242) as a:
            assert await a.call("kv.incr", "d", 5) == 5
        async with creek.Client([serve.clients[order[2]]], client_id=4242) as b:
            assert await b.call("kv.incr", "d", 5) == 5
            assert await b.call("kv.get", "d") == b"5"

    run(body(), timeout=90)


def test_a_majority_durable_weak_write_waits_for_a_majority(serve):
    """docs/api.md, "Durable weak writes": cut off from its peers, a
    replica answers a weak write at once (`none`) and after its own disk
    (`local`), but holds a `majority` one until the peers hold it."""
    leader = serve.wait_for_leader()
    cut = (leader + 1) % 3

    async def body():
        async with creek.Client([serve.clients[cut]], timeout=T) as c:
            for durability in ("none", "local", "majority"):
                view = await c.invoke("kv.put", f"dur/{durability}", "v", levels=creek.WEAK, durability=durability).preliminary()
                assert view.value is None, durability
            with pytest.raises(ValueError, match="durability must be none, local or majority"):
                c.invoke("kv.put", "dur/x", "v", levels=creek.WEAK, durability="all")
            serve.isolate(cut)
            await c.invoke("kv.put", "dur/cut-local", "v", levels=creek.WEAK, durability="local", timeout=2).preliminary()
            with pytest.raises(creek.DeadlineExceeded):
                await c.invoke("kv.put", "dur/cut-majority", "v", levels=creek.WEAK, durability="majority", timeout=1.5).preliminary()
            serve.isolate(cut, partitioned=False)
            await c.invoke("kv.put", "dur/healed", "v", levels=creek.WEAK, durability="majority").preliminary()

    run(body())
