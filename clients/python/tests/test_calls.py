"""Every call of the client against a real `creek dev` cluster: the views of
each level in order, confirmations, callbacks, the blocking twins, the
typed helpers, aborts, bad input and speculation that holds."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import grpc
import pytest

import creek
from creek import ViewKind
from conftest import run

T = 20.0  # seconds: bound of every call here


def key(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def kinds(views):
    return [(v.kind, v.value) for v in views]


def test_a_strong_op_streams_its_preliminary_view_then_its_confirmation(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            k = key("both")
            put = c.kv_put(k, "v1")
            views = [v async for v in put]
            assert kinds(views) == [(ViewKind.PRELIMINARY, None), (ViewKind.CONFIRMED, None)]
            assert [v.level for v in views] == [creek.Level.WEAK, creek.Level.STRONG]
            assert [v.is_confirmation for v in views] == [False, True]
            assert views[0].latency <= views[1].latency
            assert put.state is creek.State.FINAL

            # A confirmation does not repeat the result: the client fills it
            # in from the last preliminary view.
            incr = c.kv_incr(k + "-n", 5)
            early = await incr.preliminary()
            settled = await incr.final()
            assert (early.kind, early.value) == (ViewKind.PRELIMINARY, 5)
            assert (settled.kind, settled.value) == (ViewKind.CONFIRMED, 5)
            assert settled.is_stable and settled.is_confirmation
            # Reading again replays, nothing was consumed.
            assert kinds([v async for v in incr]) == [(ViewKind.PRELIMINARY, 5), (ViewKind.CONFIRMED, 5)]
            assert incr.received == (early, settled)

    run(body())


def test_weak_and_strong_levels(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            k = key("levels")
            # [WEAK]: one preliminary view, which closes the Correctable.
            weak = c.invoke_weak("kv.incr", k, 2)
            views = [v async for v in weak]
            assert kinds(views) == [(ViewKind.PRELIMINARY, 2)]
            assert weak.state is creek.State.FINAL and (await weak.final()).value == 2

            # [WEAK] with weak_final: its final view too.
            views = [v async for v in c.invoke_weak("kv.incr", k, 1, weak_final=True)]
            assert [v.kind for v in views][0] is ViewKind.PRELIMINARY and views[0].value == 3
            assert views[1].is_stable and views[1].value == 3

            # [STRONG]: the final view alone; the weak ops are in it.
            views = [v async for v in c.invoke_strong("kv.get", k)]
            assert kinds(views) == [(ViewKind.FINAL, b"3")]
            assert views[0].level is creek.Level.STRONG and not views[0].is_confirmation

            # The same through `levels=`.
            views = [v async for v in c.invoke("kv.get", k, levels=[creek.STRONG])]
            assert kinds(views) == [(ViewKind.FINAL, b"3")]
            assert (await c.invoke("kv.get", k, levels=creek.WEAK).final()).value == b"3"

    run(body())


def test_snapshot_reads_show_the_committed_state_never_older_than_seen(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            k = key("snapshot")
            # A strong write: its final view carries its commit time, which
            # the client keeps as its dependency time (not its read time:
            # the client cache shows the write to its snapshot reads).
            put = await c.invoke("kv.put", k, "v1").final()
            assert put.time > 0 and c.dep_time >= put.time
            # [SNAPSHOT]: one view, of the committed state, never older
            # than the client's read time, with the client's write in it
            # (from the snapshot, or from the cache if it is older).
            views = [v async for v in c.invoke("kv.get", k, levels=creek.SNAPSHOT)]
            assert kinds(views) == [(ViewKind.SNAPSHOT, b"v1")]
            assert views[0].level is creek.Level.SNAPSHOT and c.read_time >= views[0].time
            # [WEAK, SNAPSHOT, STRONG]: three views in order; the final one
            # confirms the snapshot.
            views = [v async for v in c.invoke("kv.get", k, levels=creek.ALL)]
            assert [v.kind for v in views] == [
                ViewKind.PRELIMINARY,
                ViewKind.SNAPSHOT,
                ViewKind.CONFIRMED,
            ]
            assert all(v.value == b"v1" for v in views)
            # [WEAK, SNAPSHOT]: the snapshot view closes it.
            both = c.invoke("kv.get", k, levels=["weak", "snapshot"])
            views = [v async for v in both]
            assert [v.kind for v in views] == [ViewKind.PRELIMINARY, ViewKind.SNAPSHOT]
            # A write at the snapshot level is refused, and changes nothing.
            with pytest.raises(creek.InvalidArgument, match="read-only"):
                await c.invoke("kv.put", k, "v2", levels=creek.SNAPSHOT).final()
            assert (await c.invoke("kv.get", k, levels=creek.SNAPSHOT).final()).value == b"v1"

    run(body())


def test_a_client_reads_its_weak_write_at_snapshot_after_switching_replica(serve):
    """The client cache: a weak write taken by a replica cut off from the
    others, which then dies, shows in the client's snapshot reads through
    another replica; the client sends the write again under its request id
    for its final view, so it commits (once) and leaves the cache."""
    leader = serve.wait_for_leader()
    follower = (leader + 1) % 3
    order = [follower] + [i for i in range(3) if i != follower]

    async def body():
        async with creek.Client([serve.clients[i] for i in order], timeout=T) as c:
            k = key("ryw")
            await c.call("kv.put", k, "before")
            serve.isolate(follower)
            put = await c.kv_put(k, "after", levels=creek.WEAK).final()
            assert put.is_preliminary and c.cache_entries()[0].value == b"after"
            serve.kill(follower)
            view = await c.kv_get(k, levels=creek.SNAPSHOT).final()
            assert (view.kind, view.value) == (ViewKind.SNAPSHOT, b"after")
            assert c.replica_address != serve.clients[follower]
            # Committed once it was sent again: a strong read shows it, and
            # the cache learns its commit time.
            deadline = asyncio.get_running_loop().time() + T
            while await c.call("kv.get", k) != b"after" or any(
                e.commit_time is None for e in c.cache_entries()
            ):
                assert asyncio.get_running_loop().time() < deadline, c.cache_entries()
                await asyncio.sleep(0.1)
            assert (await c.kv_get(k, levels=creek.SNAPSHOT).final()).value == b"after"

    run(body(), timeout=90)


def test_levels_by_name(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            k = key("named")
            # "weak": a weak op, one preliminary view.
            views = [v async for v in c.invoke("kv.incr", k, 2, levels="weak")]
            assert kinds(views) == [(ViewKind.PRELIMINARY, 2)]
            # ["weak", "strong"]: a strong op, preliminary view then confirmation.
            views = [v async for v in c.invoke("kv.incr", k, 1, levels=["weak", "strong"])]
            assert kinds(views) == [(ViewKind.PRELIMINARY, 3), (ViewKind.CONFIRMED, 3)]
            # Any case, a tuple, mixed with Levels; the helpers and `call` too.
            views = [v async for v in c.kv_get(k, levels="STRONG")]
            assert kinds(views) == [(ViewKind.FINAL, b"3")]
            views = [v async for v in c.kv_get(k, levels=("Weak", creek.STRONG))]
            assert kinds(views) == [(ViewKind.PRELIMINARY, b"3"), (ViewKind.CONFIRMED, b"3")]
            assert await c.call("kv.get", k, levels="weak") == b"3"
            views = [v async for v in c.invoke("kv.incr", k, 1, levels="weak", weak_final=True)]
            assert views[0].is_preliminary and views[-1].is_stable and views[-1].value == 4

            # Anything else is refused before anything is sent.
            with pytest.raises(ValueError, match='"weak", "snapshot" or "strong"'):
                c.invoke("kv.incr", k, 1, levels="eventual")
            with pytest.raises(ValueError, match="unknown level 'both'"):
                c.kv_incr(k, 1, levels=["weak", "both"])
            with pytest.raises(TypeError, match='"weak", "snapshot" or "strong"'):
                c.invoke("kv.incr", k, 1, levels=1)
            with pytest.raises(ValueError, match="weak_final"):
                c.invoke("kv.incr", k, 1, levels="strong", weak_final=True)
            assert await c.call("kv.get", k) == b"4"  # nothing refused was applied

    run(body())


def test_levels_by_name_with_the_blocking_client(dev):
    with creek.BlockingClient(dev.clients, timeout=T) as c:
        k = key("named-blocking")
        assert kinds(c.invoke("kv.incr", k, 2, levels="weak").views_blocking(timeout=T)) == [
            (ViewKind.PRELIMINARY, 2)
        ]
        views = c.kv_incr(k, 1, levels=["weak", "strong"]).views_blocking(timeout=T)
        assert kinds(views) == [(ViewKind.PRELIMINARY, 3), (ViewKind.CONFIRMED, 3)]
        assert c.call("kv.get", k, levels="Strong") == b"3"
        with pytest.raises(ValueError, match='"weak", "snapshot" or "strong"'):
            c.invoke("kv.get", k, levels="eventual")
        with pytest.raises(TypeError, match='"weak", "snapshot" or "strong"'):
            c.call("kv.get", k, levels=object())


def test_callbacks_run_in_order_and_late_ones_replay(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            events = []
            op = c.kv_incr(key("cb"), 7).set_callbacks(
                on_update=lambda v: events.append(("update", v.kind, v.value)),
                on_final=lambda v: events.append(("final", v.kind, v.value)),
                on_error=lambda e: events.append(("error", e)),
            )
            await op
            assert events == [("update", ViewKind.PRELIMINARY, 7), ("final", ViewKind.CONFIRMED, 7)]
            late = []
            op.set_callbacks(on_final=lambda v: late.append(v.value))
            assert late == [7]

            errors = []
            bad = c.invoke("no.such.proc").set_callbacks(on_error=errors.append)
            with pytest.raises(creek.InvalidArgument):
                await bad.final()
            assert len(errors) == 1 and isinstance(errors[0], creek.InvalidArgument)
            assert bad.state is creek.State.ERROR

    run(body())


def test_the_blocking_client_and_blocking_twins(dev):
    with creek.BlockingClient(dev.clients, timeout=T) as c:
        k = key("blocking")
        op = c.kv_incr(k, 4)
        assert op.preliminary_blocking(timeout=T).value == 4
        assert op.final_blocking(timeout=T).is_confirmation
        assert kinds(op.views_blocking(timeout=T)) == [(ViewKind.PRELIMINARY, 4), (ViewKind.CONFIRMED, 4)]
        assert c.call("kv.get", k) == b"4"
        assert c.invoke_weak("kv.incr", k, 1).final_blocking(timeout=T).value == 5
        assert c.invoke_strong("kv.get", k).final_blocking(timeout=T).kind is ViewKind.FINAL
        assert c.status().replica in (1, 2, 3)

        # A blocking speculation function runs in a worker thread, so it may
        # itself wait on the client.
        spec = c.kv_get(k).speculate(lambda v: c.call("kv.get", k) + b"!")
        assert spec.final_blocking(timeout=T).value == b"5!"

        # Its Correctables can be awaited from another event loop, too.
        assert asyncio.run(c.kv_get(k).final(timeout=T)).value == b"5"

        # A Correctable of the blocking client can be read from several
        # threads at once.
        op = c.kv_incr(k, 1)
        got = []
        threads = [threading.Thread(target=lambda: got.append(op.final_blocking(timeout=T).value)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(T)
        assert got == [6, 6, 6]


def test_every_typed_helper(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            k, q, lst, st = key("kv"), key("q"), key("l"), key("s")

            async def result(op):
                return (await op).result()

            assert await result(c.kv_get(k)) is None
            assert await result(c.kv_put(k, b"\x00bin")) is None
            assert await result(c.kv_get(k)) == b"\x00bin"
            assert await result(c.kv_cas(k, b"wrong", "x")) is False
            assert await result(c.kv_cas(k, b"\x00bin", "x")) is True
            assert await result(c.kv_cas(k, "x", None)) is True  # None deletes
            assert await result(c.kv_cas(k, None, "y")) is True  # None: absent
            assert await result(c.kv_delete(k)) is True
            assert await result(c.kv_delete(k)) is False
            assert await result(c.kv_incr(k + "n", -3)) == -3
            assert await result(c.kv_get(k + "n")) == b"-3"

            assert await result(c.queue_enqueue(q, "a")) == 0
            assert await result(c.queue_enqueue(q, "b")) == 1
            assert await result(c.queue_len(q)) == 2
            assert await result(c.queue_peek(q)) == b"a"
            assert await result(c.queue_dequeue(q)) == b"a"
            assert await result(c.queue_dequeue(q)) == b"b"
            assert await result(c.queue_dequeue(q)) is None

            assert await result(c.list_append(lst, "x")) == 1
            assert await result(c.list_append(lst, "y")) == 2
            assert await result(c.list_read(lst)) == [b"x", b"y"]
            assert await result(c.list_len(lst)) == 2

            assert await result(c.set_add(st, "b")) is True
            assert await result(c.set_add(st, "a")) is True
            assert await result(c.set_add(st, "a")) is False
            assert await result(c.set_contains(st, "a")) is True
            assert await result(c.set_read(st)) == [b"a", b"b"]
            assert await result(c.set_remove(st, "a")) is True
            assert await result(c.set_remove(st, "a")) is False
            assert await result(c.set_contains(st, "a")) is False

            # The generic call, for any procedure.
            assert await c.call("list.len", lst) == 2
            assert await c.call("sys.noop") is None
            assert (await c.status()).client_addrs[1] == dev.clients[0]

            with pytest.raises(TypeError):
                c.kv_incr(k, "1")
            with pytest.raises(TypeError):
                c.kv_put(k, 3)

    run(body())


def test_a_transaction_swaps_across_keys_or_runs_its_failure_ops(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            a, b = key("txn-a"), key("txn-b")
            await c.kv_put(a, "1", levels=creek.STRONG).final()
            op = creek.TxnOp
            txn = creek.Txn().when(a, "=", "1").when_absent(b).then(op.put(b, "2")).then(op.get(a)).otherwise(op.get(b))
            first = creek.TxnAnswer.of(await c.kv_txn(txn, levels=creek.STRONG).final())
            assert first == creek.TxnAnswer(True, [None, b"1"])
            # b exists now: the failure ops run, and nothing else changes.
            again = creek.TxnAnswer.of(await c.kv_txn(txn, levels=creek.STRONG).final())
            assert again == creek.TxnAnswer(False, [b"2"])
            # A range op inside, and a delete: one page, atomically.
            wipe = creek.Txn().when_present(b).then(op.delete_range(b, b + "~", 10)).then(op.delete(a))
            done = creek.TxnAnswer.of(await c.kv_txn(wipe, levels=creek.STRONG).final())
            assert done == creek.TxnAnswer(True, [[1, None], True])
            assert await c.call("kv.get", b) is None
            # A compare on what keys do not carry, or of the wrong type, is
            # refused before it runs.
            bad = creek.Txn()
            bad.compares.append([a, "size", "=", "1"])
            with pytest.raises(creek.InvalidArgument, match="the target must be one of"):
                await c.kv_txn(bad, levels=creek.STRONG).final()
            bad = creek.Txn()
            bad.compares.append([a, "version", "=", "1"])
            with pytest.raises(creek.InvalidArgument, match="takes an int"):
                await c.kv_txn(bad, levels=creek.STRONG).final()
            with pytest.raises(ValueError):
                creek.Txn().when(a, "~", "1")

    run(body())


def test_an_abort_is_a_view_not_an_error(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            k = key("abort")
            await c.kv_put(k, "not a number")
            op = c.kv_incr(k, 1)
            views = [v async for v in op]
            assert [v.kind for v in views] == [ViewKind.PRELIMINARY, ViewKind.CONFIRMED]
            assert all(v.aborted and "not an integer" in v.abort for v in views)
            assert op.state is creek.State.FINAL
            with pytest.raises(creek.ProcedureAborted, match="not an integer"):
                views[-1].result()
            with pytest.raises(creek.ProcedureAborted, match="not an integer"):
                await c.call("kv.incr", k, 1)

    run(body())


def test_bad_input_fails_with_the_server_message_and_changes_nothing(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            k = key("bad")
            op = c.invoke("no.such.proc", "x")
            with pytest.raises(creek.InvalidArgument) as e:
                await op.preliminary()
            assert e.value.message == 'unknown procedure "no.such.proc"'  # the server's words
            assert e.value.code == "INVALID_ARGUMENT" and op.error is e.value
            assert e.value.status_code is grpc.StatusCode.INVALID_ARGUMENT
            assert str(e.value) == f"INVALID_ARGUMENT: {e.value.message}"

            with pytest.raises(creek.InvalidArgument, match="kv.put"):
                await c.invoke("kv.put", k)  # wrong arity
            with pytest.raises(creek.InvalidArgument):
                await c.invoke("kv.incr", k, "one")  # wrong type

            big = b"\x07" * (1024 * 1024 + 1)
            with pytest.raises(creek.ResourceExhausted, match="exceeds the limit of 1048576 bytes"):
                await c.kv_put(k, big)
            assert await c.call("kv.get", k) is None  # nothing was applied

            with pytest.raises(ValueError):
                c.invoke("kv.get", k, levels=[])
            with pytest.raises(ValueError):
                c.invoke("kv.get", k, weak_final=True)  # needs levels=WEAK
            with pytest.raises(TypeError):
                c.invoke("kv.put", k, {"a": 1})

    run(body())


def test_speculation_that_holds_runs_once(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            k = key("spec")
            await c.kv_put(k, "hello")
            ran, undone = [], []

            async def render(view):
                ran.append(view.kind)
                return f"<p>{view.value.decode()}</p>"

            page = c.kv_get(k).speculate(render, abort=undone.append)
            views = [v async for v in page]
            assert kinds(views) == [(ViewKind.PRELIMINARY, "<p>hello</p>"), (ViewKind.CONFIRMED, "<p>hello</p>")]
            assert ran == [ViewKind.PRELIMINARY] and undone == []

            # An error of the source reaches the speculation.
            failed = c.invoke("no.such.proc").speculate(lambda v: v)
            with pytest.raises(creek.InvalidArgument):
                await failed

    run(body())


def test_the_examples_and_the_readme_example_run_against_the_cluster(dev, tmp_path):
    examples = Path(__file__).resolve().parents[1] / "examples"
    scripts = [
        (examples / "tickets.py", "none sold twice, none oversold"),
        (examples / "ads.py", "round 2"),
    ]
    # The README's example, pointed at this cluster.
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    block = re.search(r"## Python\n.*?```python\n(.*?)```", readme, re.S)
    assert block, "README.md has a Python section with an example"
    code = block.group(1)
    for i, address in enumerate(dev.clients):
        code = code.replace(f"127.0.0.1:700{i + 1}", address)
    (tmp_path / "readme_example.py").write_text(code)
    scripts.append((tmp_path / "readme_example.py", "confirmed"))

    for script, expect in scripts:
        out = subprocess.run(
            [sys.executable, str(script), "--addresses", ",".join(dev.clients)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert expect in out.stdout, out.stdout


def test_answered_requests_are_acknowledged_by_the_next_ones(dev):
    """A request answered after one send is acknowledged by the client's
    next request, so the cluster can forget its deduplication entry."""

    async def acks_become(c, want):
        for _ in range(200):
            if c._acks == want:
                return
            await asyncio.sleep(0.01)
        assert c._acks == want

    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            k = key("acks")
            for seq in range(1, 4):
                # Each request takes the waiting acknowledgement with it;
                # its own waits for the next.
                await c.kv_put(k, "v").final()
                await acks_become(c, [seq])
            await c.kv_get(k).final()
            await acks_become(c, [4])

    run(body())


def test_members_and_refused_group_changes(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            m = await c.members()
            assert [(x.replica, x.role) for x in m.members] == [(1, "voter"), (2, "voter"), (3, "voter")]
            assert m.members[0].client_addr and m.members[0].peer_addr
            with pytest.raises(creek.CreekError) as e:
                await c.add_replica(2, "127.0.0.1:1", "127.0.0.1:2")
            assert e.value.status_code is grpc.StatusCode.ALREADY_EXISTS, e.value
            with pytest.raises(creek.InvalidArgument, match="not a reachable host:port"):
                await c.add_replica(4, "no-such-host.invalid:1", "127.0.0.1:2")
            with pytest.raises(creek.CreekError) as e:
                await c.remove_replica(9)
            assert e.value.status_code is grpc.StatusCode.NOT_FOUND, e.value
            # Nothing changed.
            assert (await c.members()).members == m.members

    run(body())
    with creek.BlockingClient(dev.clients, timeout=T) as c:
        assert len(c.members().members) == 3


def test_range_reads_page_through_a_prefix_and_bad_ranges_are_refused(dev):
    async def body():
        async with creek.Client(dev.clients, timeout=T) as c:
            p = key("range") + "/"
            for i in range(5):
                await c.kv_put(f"{p}{i}", f"v{i}", levels=creek.STRONG).final()
            end = p[:-1] + "0"  # the first key past the prefix ("/" + 1)
            page, nxt = (await c.kv_scan(p, end, 3, levels=creek.STRONG).final()).result()
            assert page == [[f"{p}{i}".encode(), f"v{i}".encode()] for i in range(3)]
            keys, done = (await c.kv_scan_keys(nxt, end, 3, levels=creek.STRONG).final()).result()
            assert keys == [f"{p}3".encode(), f"{p}4".encode()] and done is None
            # From the end down: the next page ends before this one's last key.
            page, below = (await c.kv_scan_reverse(p, end, 2, levels=creek.STRONG).final()).result()
            assert page == [[f"{p}{i}".encode(), f"v{i}".encode()] for i in (4, 3)]
            assert below == f"{p}3".encode()
            keys, _ = (await c.kv_scan_keys_reverse(p, below, 10, levels=creek.STRONG).final()).result()
            assert keys == [f"{p}{i}".encode() for i in (2, 1, 0)]
            assert (await c.kv_count(p, end, levels=creek.STRONG).final()).result() == [5, None]
            deleted, _ = (await c.kv_delete_range(p, end, levels=creek.STRONG).final()).result()
            assert deleted == 5
            assert (await c.kv_count(p, end, levels=creek.STRONG).final()).result() == [0, None]
            with pytest.raises(creek.InvalidArgument, match="the range is empty"):
                await c.kv_scan("b", "a", levels=creek.STRONG).final()
            with pytest.raises(creek.InvalidArgument, match="limit must be within"):
                await c.kv_scan("a", None, 0, levels=creek.STRONG).final()

    asyncio.run(body())
