"""`Client.watch` on separate `creek serve` processes: every committed
change under the prefix once, in the committed order, across the loss of
the replica the iterator is connected to; a compacted position raises
`creek.Compacted` naming the oldest one; bad prefixes are refused."""

from __future__ import annotations

import asyncio
import functools

import pytest

import creek
from cluster import ServeCluster, start
from conftest import run

T = 30.0


async def next_event(events) -> creek.WatchEvent:
    return await asyncio.wait_for(events.__anext__(), T)


async def put_all(client: creek.Client, keys) -> None:
    for k in keys:
        await client.call("kv.put", k, f"v-{k}")
        await client.call("kv.put", "other/" + k, "outside")


def test_watch_delivers_each_committed_change_once_across_a_replica_loss(serve):
    leader = serve.wait_for_leader()
    watched = (leader + 1) % 3
    other = (leader + 2) % 3
    order = [watched, other, leader]

    async def body():
        async with creek.Client([serve.clients[i] for i in order], timeout=T) as w, creek.Client(
            serve.clients, timeout=T
        ) as writer:
            events = w.watch("p/", start=0)
            first = [f"p/{i:02}" for i in range(10)]
            second = [f"p/{i:02}" for i in range(10, 20)]
            await put_all(writer, first)
            seen = [await next_event(events) for _ in first]
            assert w.replica_address == serve.clients[watched]

            serve.kill(watched)
            await put_all(writer, second)
            while len({e.key for e in seen}) < 20:
                seen.append(await next_event(events))
            await events.aclose()
            assert w.replica_address != serve.clients[watched]

            assert [e.key for e in seen] == [k.encode() for k in first + second]
            assert all(e.value == b"v-" + e.key and not e.tentative and not e.deleted for e in seen)
            positions = [e.position for e in seen]
            assert positions == sorted(set(positions)), positions

            # The same sequence, from 0, at a replica that stayed up.
            async with creek.Client([serve.clients[other]], timeout=T) as r:
                again = r.watch(b"p/", start=0)
                want = [await next_event(again) for _ in seen]
                await again.aclose()
            assert want == seen

    run(body(), timeout=120)


def test_a_compacted_position_raises_with_the_oldest_one():
    # A history of about 8 changes.
    cluster = start(functools.partial(ServeCluster, 1, ["watch_history_bytes = 640"]))
    try:

        async def body():
            async with creek.Client(cluster.clients, timeout=T) as c:
                for i in range(30):
                    await c.call("kv.put", f"c/{i:02}", "value")
                with pytest.raises(creek.Compacted) as e:
                    await next_event(c.watch("c/", start=0))
                assert e.value.code == "OUT_OF_RANGE" and e.value.oldest > 0
                assert "compacted" in e.value.message
                assert f"{e.value.oldest}" in e.value.message

                events = c.watch("c/", start=e.value.oldest)
                got = await next_event(events)
                assert got.position >= e.value.oldest and got.key >= b"c/20"
                await events.aclose()

                with pytest.raises(creek.InvalidArgument) as bad:
                    await next_event(c.watch(b"\x00sessions"))
                assert bad.value.code == "INVALID_ARGUMENT"
                with pytest.raises(creek.InvalidArgument):
                    await next_event(c.watch(b"a" * 5000))
                with pytest.raises(TypeError):
                    await next_event(c.watch(7))
                # The replica serves on.
                assert (await c.status()).replica == 1

        run(body(), timeout=90)
    finally:
        cluster.stop()


def test_tentative_changes_are_marked_then_committed(dev):
    async def body():
        async with creek.Client(dev.clients[:1], timeout=T) as c:
            events = c.watch("tw/", tentative=True)
            # Start the stream before writing: its first message is a
            # progress mark, consumed inside the iterator.
            pending = asyncio.ensure_future(next_event(events))
            await asyncio.sleep(0.5)
            await c.invoke_weak("kv.put", "tw/a", "1").final()
            first = await pending
            assert (first.key, first.value, first.tentative) == (b"tw/a", b"1", True)
            second = await next_event(events)
            assert (second.key, second.op, second.tentative) == (b"tw/a", first.op, False)
            await events.aclose()

    run(body())


def test_a_keyspace_is_watched_by_its_name(dev):
    async def body():
        async with creek.Client(dev.clients[:1], timeout=T) as c:
            source = """
keyspace pywatch: weak
proc note(k: bytes, v: bytes) {
    put(pywatch, k, v)
}
"""
            await c.register_procedures(source)
            events = c.watch("n/", keyspace="pywatch")
            pending = asyncio.ensure_future(next_event(events))
            await asyncio.sleep(0.5)
            await c.invoke_strong("note", "n/1", "hello").final()
            got = await pending
            assert (got.key, got.value) == (b"n/1", b"hello")
            await events.aclose()
            with pytest.raises(creek.InvalidArgument, match="is not a name"):
                await next_event(c.watch("", keyspace="no such"))

    run(body())
