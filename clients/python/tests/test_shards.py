"""A sharded cluster (`creek dev --shards 2`): the map from any replica,
calls routed by key, a replica refusing another shard's key with
`WrongShard` (nothing applied), a strong call across shards run as one
operation on both, a stale map learned again, keys moved between the
shards while the client writes them."""

from __future__ import annotations

import asyncio
import copy

import pytest

import creek
from creek import ViewKind
from creek.shards import Placement, decode_map, slot_of
from conftest import run
from cluster import DevCluster, creek_bin, start


@pytest.fixture(scope="module")
def sharded():
    c = start(lambda: DevCluster(replicas=3, shards=2))
    yield c
    c.stop()


def key_of(m: creek.ShardMap, shard: int, stem: str) -> str:
    return next(f"{stem}{n}" for n in range(10_000) if m.owner(f"{stem}{n}") == shard)


def test_the_slot_rule_matches_the_replicas():
    # The reference values of crates/creek-shard's tests.
    assert slot_of("user1") == 3027 and slot_of("acct/0") == 1003
    assert slot_of(b"{user1}.name") == slot_of("user1")


def test_calls_go_to_the_owning_shard(sharded):
    async def body():
        async with creek.Cluster([sharded.clients[3]]) as c:
            m = c.map
            assert m is not None and sorted(m.shards) == [0, 1] and m.epoch == 1
            k0, k1 = key_of(m, 0, "left"), key_of(m, 1, "right")
            # Routes as the replicas publish them: by the key, or everywhere.
            assert c.shard_of("kv.put", k1, "v") == 1 and c.shard_of("set.add", k0, "x") == 0
            assert c.shard_of("proc.list") is None and c.shard_of("my.user.proc", k0) is None
            await c.call("kv.put", k0, "a")
            await c.call("kv.put", k1, "b")
            assert await c.call("kv.get", k0) == b"a"
            assert await c.call("kv.get", k1, levels=creek.WEAK) == b"b"

            # A replica of shard 0 refuses shard 1's key; nothing is applied.
            async with creek.Client([sharded.clients[0]]) as plain:
                with pytest.raises(creek.WrongShard) as refused:
                    await plain.call("kv.put", k1, "wrong")
                assert (refused.value.epoch, refused.value.shard) == (1, 1)
            assert await c.call("kv.get", k1) == b"b"

    run(body())


def test_a_scan_merges_every_shards_page_in_key_order(sharded):
    async def body():
        async with creek.Cluster([sharded.clients[0]]) as c:
            keys = [f"scan/{n:02}".encode() for n in range(30)]
            for k in keys:
                await c.call("kv.put", k, "v")
            assert {c.map.owner(k) for k in keys} == {0, 1}
            seen, at = [], b"scan/"
            while at is not None:
                page, at = await c.scan(at, b"scan0", 7, keys_only=True)
                assert len(page) <= 7
                seen.extend(page)
            assert seen == keys
            seen, below = [], b"scan0"
            while below is not None:
                page, below = await c.scan(b"scan/", below, 4, keys_only=True, reverse=True)
                assert len(page) <= 4
                seen.extend(page)
            assert seen == keys[::-1]
            items, nxt = await c.scan(b"scan/", b"scan0", 100)
            assert items == [(k, b"v") for k in keys] and nxt is None
            assert await c.delete_range(b"scan/", b"scan0") == 30
            assert await c.scan(b"scan/", b"scan0") == ([], None)

    run(body())


def test_multi_key_calls_run_on_the_shard_owning_their_keys(sharded):
    async def body():
        async with creek.Cluster([sharded.clients[0]]) as c:
            m = c.map
            a, b = key_of(m, 1, "acct-a"), key_of(m, 1, "acct-b")
            other = key_of(m, 0, "acct-c")
            assert c.shard_of("kv.mput", [a, b], ["1", "2"]) == 1
            assert c.shard_of("kv.transfer", a, b, 1) == 1
            await c.call("kv.mput", [a, b], ["10", "0"])
            assert await c.call("kv.transfer", a, b, 3) == [7, 3]
            assert await c.call("kv.mget", [a, b], levels=creek.WEAK) == [b"7", b"3"]
            # Keys on both shards: a strong call is one operation across
            # shards, applied on both once; a weak one is refused, naming
            # them, and applies nothing.
            await c.call("kv.put", other, "5")
            assert await c.call("kv.transfer", a, other, 1) == [6, 6]
            assert await c.call("kv.mget", [a, other]) == [b"6", b"6"]
            # At both levels, the preliminary view says it was computed
            # without the other shard's values; the final view has them.
            both = c.invoke("kv.transfer", a, other, 1, levels=creek.BOTH)
            first = await both.preliminary()
            assert first.across_shards
            last = await both.final()
            assert not last.across_shards and last.value == [5, 7]
            assert await c.call("kv.transfer", other, a, 1) == [6, 6]
            with pytest.raises(creek.CreekError) as refused:
                await c.call("kv.transfer", a, other, 1, levels=creek.WEAK)
            assert "its keys span shards 0, 1" in str(refused.value)
            assert "a weak operation never spans shards" in str(refused.value)
            assert await c.call("kv.get", a) == b"6"
        # The typed helpers of a plain client, on one shard's replicas.
        async with creek.Client([sharded.clients[3]]) as plain:
            assert (await plain.kv_mget([a, b]).final()).value == [b"6", b"3"]
            assert (await plain.kv_transfer(b, a, 3).final()).value == [0, 9]
            assert (await plain.kv_mput({a: "1", b: "2"}).final()).value is None
            assert (await plain.kv_mget([a, b]).final()).value == [b"1", b"2"]

    run(body())


def test_a_transaction_across_shards_runs_on_both_or_is_refused_saying_why(sharded):
    async def body():
        async with creek.Cluster([sharded.clients[0]]) as c:
            m = c.map
            a, b = key_of(m, 0, "txn-a"), key_of(m, 1, "txn-b")
            op = creek.TxnOp
            txn = creek.Txn().when_absent(a).then(op.put(a, "1")).then(op.put(b, "2")).otherwise(op.get(b))
            compares, success, failure = txn.args()
            assert c.shard_of("kv.txn", compares, success, failure) == 0
            assert await c.call("kv.txn", compares, success, failure) == [True, [None, None]]
            assert await c.call("kv.mget", [a, b]) == [b"1", b"2"]
            assert await c.call("kv.txn", compares, success, failure) == [False, [b"2"]]
            ranged = creek.Txn().then(op.put(a, "x")).then(op.scan(b"txn", None, 10)).args()
            with pytest.raises(creek.CreekError, match="a range op reads keys of every shard"):
                await c.call("kv.txn", *ranged)
            assert await c.call("kv.get", a) == b"1"

    run(body())


def test_a_snapshot_mget_across_shards_reads_every_shard_at_one_time(sharded):
    async def body():
        async with creek.Cluster([sharded.clients[0]], timeout=20) as c:
            m = c.map
            k0, k1 = key_of(m, 0, "at-once"), key_of(m, 1, "at-once")
            await c.call("kv.put", k0, "a")
            await c.call("kv.put", k1, "b")
            # The first key's shard answers at a time; the other shard's
            # part is read at exactly that time; one view at that time.
            view = await c.invoke("kv.mget", [k1, k0], levels=creek.SNAPSHOT).final()
            assert (view.kind, view.value) == (ViewKind.SNAPSHOT, [b"b", b"a"])
            assert view.time > 0 and c.read_time >= view.time
            # The shards' clients share one read time and one cache: a weak
            # write on shard 1 shows in the next read across both.
            assert c.client(0).read_time == c.client(1).read_time == c.read_time
            await c.invoke("kv.put", k1, "c", levels=creek.WEAK).final()
            view = await c.invoke("kv.mget", [k0, k1], levels=creek.SNAPSHOT).final()
            assert view.value == [b"a", b"c"]

    run(body())


DEPOSIT = """
keyspace wallets: strong

proc deposit(owner: key(wallets), amount: int) -> int {
    let v = get(wallets, owner)
    let n = amount
    if v != nil { n = int(v) + amount }
    put(wallets, owner, str(n))
    return n
}

proc listing(owner: prefix(wallets)) -> list {
    return scan(wallets, owner, owner ++ "~", 10)
}

proc give(src: key(wallets), dst: key(wallets), amount: int) -> int {
    let x = int(get(wallets, src))
    if x < amount { abort "insufficient funds" }
    let y = 0
    if get(wallets, dst) != nil { y = int(get(wallets, dst)) }
    put(wallets, src, str(x - amount))
    put(wallets, dst, str(y + amount))
    return y + amount
}
"""


def test_user_procedures_run_on_the_shard_owning_their_declared_keys(sharded):
    async def body():
        async with creek.Cluster([sharded.clients[1]]) as c:
            m = c.map
            # Registered on every shard after the client connected: the
            # client learns their routes on the first call.
            await c.call("proc.register", DEPOSIT)
            k0, k1 = key_of(m, 0, "w"), key_of(m, 1, "w")
            assert await c.call("deposit", k0, 2) == 2
            assert await c.call("deposit", k1, 3) == 3
            assert c.shard_of("deposit", k1, 1) == 1
            # A prefix with a whole {tag} lives on its tag's shard.
            tagged = next(f"{{t{n}}}/" for n in range(1000) if m.owner(f"t{n}") == 1)
            assert c.shard_of("listing", tagged) == 1
            assert await c.call("deposit", tagged + "x", 1) == 1
            assert await c.call("listing", tagged) == [[(tagged + "x").encode(), b"1"]]
            # A prefix whose keys hash anywhere spans the shards: refused.
            with pytest.raises(creek.CreekError) as refused:
                await c.call("listing", "w")
            assert "span shards, and it declares a prefix" in str(refused.value)
            # Keys on both shards: one operation across shards (strong),
            # all or nothing; weak, refused.
            assert await c.call("give", k0, k1, 2) == 5
            with pytest.raises(creek.ProcedureAborted) as refused:
                await c.call("give", k1, k0, 9)
            assert "insufficient funds" in str(refused.value)
            with pytest.raises(creek.CreekError) as refused:
                await c.call("give", k1, k0, 1, levels=creek.WEAK)
            assert "a weak operation never spans shards" in str(refused.value)
            assert await c.call("deposit", k0, 0) == 0
            async with creek.Client([sharded.clients[0]]) as plain:
                with pytest.raises(creek.WrongShard):
                    await plain.call("deposit", k1, 1)
            assert await c.call("deposit", k1, 0) == 5

    run(body())


def test_a_stale_map_is_learned_again(sharded):
    async def body():
        async with creek.Cluster([sharded.clients[0]]) as c:
            m = c.map
            counter = key_of(m, 0, "counter")
            # Swap the shards' halves: calls go to the wrong shard first.
            stale = copy.deepcopy(m)
            stale.epoch = 0
            stale.default = Placement("hashed", entries=[(0, 1), (2048, 0)])
            c._map = stale
            assert await c.call("kv.incr", counter, 1) == 1
            assert c.map.epoch == 1 and c.map.default.entries == m.default.entries
            assert await c.call("kv.get", counter) == b"1"

    run(body())


def test_the_directory_serves_the_map(sharded):
    async def body():
        # Replicas 7-9 are the directory's: a client that starts from one
        # learns the map there and routes to the shards.
        async with creek.Cluster([sharded.clients[6]]) as c:
            m = c.map
            assert sorted(m.directory) == [7, 8, 9] and sorted(m.shards) == [0, 1]
            k1 = key_of(m, 1, "dir")
            await c.call("kv.put", k1, "x")
            assert await c.call("kv.get", k1) == b"x"
            await c.refresh()
            assert c.map.epoch >= 1 and sorted(c.map.directory) == [7, 8, 9]

    run(body())


def test_a_map_that_does_not_decode_is_a_protocol_error():
    with pytest.raises(creek.ProtocolError):
        decode_map(b"\x07")
    with pytest.raises(creek.ProtocolError):
        decode_map(b"\x01\x05")


def test_a_map_with_a_move_in_flight_decodes():
    # Format 3 (creek_shard::encode): two shards, slots 0..2048 on shard 0,
    # one move switched so far, and slots 10..20 on their way to shard 1.
    data = bytes(
        [3, 7, 2, 2, 0, 0, 1, 0, 1, 2, 0, 0, 0x80, 0x10, 1, 0, 0, 1, 1, 0, 0, 10, 20, 0, 1]
    )
    m = decode_map(data)
    assert (m.epoch, m.moved) == (2, 1)
    assert m.moving == creek.shards.Move(None, "slots", 10, 20, 0, 1)
    assert m.finishing is None
    # The same move switched and finishing (state 2).
    finishing = decode_map(data[:18] + bytes([2]) + data[19:])
    assert (finishing.moving, finishing.finishing) == (None, m.moving)
    with pytest.raises(creek.ProtocolError):
        decode_map(data[:18] + bytes([3]) + data[19:])
    # Format 2 has neither.
    older = decode_map(bytes([2]) + data[1:-8])
    assert (older.moving, older.moved) == (None, 0)
    with pytest.raises(creek.ProtocolError):
        decode_map(data[:-1])


def test_keys_move_between_shards_while_the_cluster_client_writes(sharded):
    # Last in this file: it changes the map the other tests start from.
    async def body():
        async with creek.Cluster([sharded.clients[0]]) as c:
            keys = [f"py{n}" for n in range(80)]
            moving = [k for k in keys if slot_of(k) < 1024]
            assert moving and all(c.map.owner(k) == 0 for k in moving)
            for k in keys:
                await c.call("kv.put", k, "v0")
            mover = await asyncio.create_subprocess_exec(
                str(creek_bin()), "shards", "move", "--from", "0", "--to", "1",
                "--slots", "0..1024", "--wait-secs", "90", "--addr", sharded.clients[6],
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            last, n = {}, 0
            # Writes go on through the move: each one is applied once, at
            # the shard that owns its key when it runs.
            while mover.returncode is None:
                k = moving[n % len(moving)]
                await c.call("kv.put", k, f"w{n}")
                last[k] = f"w{n}"
                n += 1
                try:
                    await asyncio.wait_for(mover.wait(), 0.001)
                except asyncio.TimeoutError:
                    pass
            out, err = await mover.communicate()
            assert mover.returncode == 0, (out, err)
            assert b"over" in out, out
            await c.refresh()
            assert c.map.moved == 1 and c.map.moving is None and c.map.finishing is None
            assert all(c.map.owner(k) == 1 for k in moving)
            for k in keys:
                assert await c.call("kv.get", k) == last.get(k, "v0").encode(), k
            assert n > 0

    run(body())
