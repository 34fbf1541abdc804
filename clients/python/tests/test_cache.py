"""The client cache and the two times, without a server
(docs/snapshot-reads.md, "The client cache"): which writes it holds, how
they are laid over snapshot views, when they leave, and its bound."""

from __future__ import annotations

from creek.cache import CachedWrite, Causal, WriteCache, effect_of_outcome, known
from creek.views import Level, View, ViewKind


def view(kind: ViewKind, value, time: int = 0, abort=None) -> View:
    level = {ViewKind.PRELIMINARY: Level.WEAK, ViewKind.SNAPSHOT: Level.SNAPSHOT}.get(kind, Level.STRONG)
    return View(kind, level, value, abort, 0.0, time=time)


def test_a_write_shows_over_snapshots_older_than_its_commit_time():
    c = WriteCache(1024)
    assert c.record(1, [(b"a", b"1")], None)
    # Commit time unknown: every snapshot shows it.
    assert c.overlay(b"a", 10**9) == (True, b"1")
    assert c.overlay(b"b", 0) == (False, None)
    assert c.record(1, [(b"a", b"1")], 50)
    assert c.overlay(b"a", 49) == (True, b"1")
    assert c.overlay(b"a", 50) == (False, None), "the snapshot at 50 holds it"
    # A delete shows as absent.
    assert c.record(2, [(b"d", None)], None)
    assert c.overlay(b"d", 10) == (True, None)


def test_a_later_write_of_a_key_wins_whatever_order_they_are_recorded_in():
    c = WriteCache(1024)
    assert c.record(2, [(b"a", b"new")], None)
    assert c.record(1, [(b"a", b"old"), (b"b", b"x")], 5)
    assert c.overlay(b"a", 0) == (True, b"new")
    assert c.bytes == len(b"anew") + len(b"bx")
    c.forget(1)
    assert c.overlay(b"b", 0) == (False, None) and c.overlay(b"a", 0) == (True, b"new")


def test_entries_leave_once_the_read_time_passes_them_and_no_read_in_flight_is_older():
    c = WriteCache(1024)
    c.record(1, [(b"a", b"1")], 10)
    c.record(2, [(b"b", b"2")], 20)
    c.record(3, [(b"c", b"3")], None)
    c.evict(15)
    assert [e.key for e in c.entries()] == [b"b", b"c"]
    c.read_started(12)
    c.evict(25)
    assert len(c.entries()) == 2, "a read sent at 12 may read before b's commit"
    c.read_ended(12)
    c.evict(25)
    assert c.entries() == [CachedWrite(b"c", b"3", None)] and c.bytes == 2


def test_a_write_that_does_not_fit_is_not_held_and_supersedes_the_keys_earlier_writes():
    c = WriteCache(10)
    assert c.record(1, [(b"a", b"1234")], None)
    assert c.record(2, [(b"b", b"1234")], None)
    assert c.record(3, [(b"a", b"5678")], None), "replacing counts the difference"
    assert not c.record(4, [(b"a", b"123456"), (b"c", b"1")], None)
    assert c.overlay(b"a", 0) == (False, None) and c.overlay(b"c", 0) == (False, None)
    assert c.overlay(b"b", 0) == (True, b"1234") and c.bytes == 5


def test_which_calls_the_client_knows():
    assert known("kv.put", ("a", b"1")) == ("write", [(b"a", b"1")])
    assert known("kv.delete", ("a",)) == ("write", [(b"a", None)])
    assert known("kv.mput", (["a", "b", "a"], ["1", "2", "3"])) == ("write", [(b"a", b"3"), (b"b", b"2")])
    assert known("kv.mput", (["a"], [])) == ("opaque", None)
    assert known("kv.get", ("a",)) == ("key_read", ([b"a"], False))
    assert known("kv.mget", (["a", b"b"],)) == ("key_read", ([b"a", b"b"], True))
    assert known("set.read", ("s",)) == ("read", None)
    assert known("list.append", ("l", "x")) == ("opaque", None)
    assert known("my.proc", ("a",)) == ("opaque", None)
    incr = known("kv.incr", ("n", 2))[1]
    assert effect_of_outcome(incr, 42, None) == [(b"n", b"42")]
    assert effect_of_outcome(incr, None, "overflow") == []
    assert effect_of_outcome(incr, None, None) is None
    cas = known("kv.cas", ("c", None, None))[1]
    assert effect_of_outcome(cas, True, None) == [(b"c", None)]
    assert effect_of_outcome(cas, False, None) == []
    transfer = known("kv.transfer", ("x", "y", 1))[1]
    assert effect_of_outcome(transfer, [4, 6], None) == [(b"x", b"4"), (b"y", b"6")]


def test_a_weak_write_is_laid_over_snapshot_views_until_the_read_time_passes_it():
    causal = Causal()
    put, sent = causal.track("kv.put", ("k", "mine"), snapshot=False, weak_only=True)
    assert put.is_write and sent == 0
    put.on_view(view(ViewKind.PRELIMINARY, None))
    assert causal.cache.entries() == [CachedWrite(b"k", b"mine", None)]

    read, sent = causal.track("kv.mget", (["k", "j"],), snapshot=True, weak_only=False)
    shown = read.on_view(view(ViewKind.SNAPSHOT, [b"theirs", b"j"], time=50))
    assert shown.value == [b"mine", b"j"] and causal.read_time == 50

    put.on_view(view(ViewKind.FINAL, None, time=100))
    assert causal.cache.entries() == [CachedWrite(b"k", b"mine", 100)]
    assert (causal.read_time, causal.dep_time) == (50, 100)
    # Snapshot reads go at the read time (the cache holds the write);
    # everything else at the dependency time.
    read, sent = causal.track("kv.get", ("k",), snapshot=True, weak_only=False)
    assert sent == 50
    assert read.on_view(view(ViewKind.SNAPSHOT, b"theirs", time=80)).value == b"mine"
    read, sent = causal.track("kv.get", ("k",), snapshot=True, weak_only=False)
    assert read.on_view(view(ViewKind.SNAPSHOT, b"theirs", time=100)).value == b"theirs"
    assert causal.cache.entries() == [] and causal.cache.bytes == 0
    assert causal.track("kv.put", ("k", "x"), snapshot=False, weak_only=True)[1] == 100


def test_a_confirmation_of_a_snapshot_the_cache_changed_is_a_final_view():
    from creek.views import view_from_wire
    from creek._pb import creek_pb2 as pb

    server = view(ViewKind.SNAPSHOT, b"x", time=5)
    shown = view(ViewKind.SNAPSHOT, b"mine", time=5)
    confirmed = pb.View(kind=pb.View.CONFIRMED, time=9)
    assert view_from_wire(confirmed, server, 0.0).kind is ViewKind.CONFIRMED
    last = view_from_wire(confirmed, server, 0.0, shown=shown)
    assert (last.kind, last.value) == (ViewKind.FINAL, b"x")


def test_a_write_the_cache_cannot_hold_is_read_at_its_commit_time():
    causal = Causal(cache_bytes_max=4)
    put, _ = causal.track("kv.put", ("k", "too big"), snapshot=False, weak_only=True)
    put.on_view(view(ViewKind.PRELIMINARY, None))
    assert put.must_settle(), "acknowledged at its commit"
    put.on_view(view(ViewKind.FINAL, None, time=400))
    assert not put.must_settle() and causal.cache.entries() == []
    assert causal.track("kv.get", ("k",), snapshot=True, weak_only=False)[1] == 400


def test_without_the_cache_writes_are_read_at_their_commit_time():
    causal = Causal(cache=False)
    put, _ = causal.track("kv.put", ("k", "v"), snapshot=False, weak_only=True)
    assert not put.is_write, "not followed to its final view"
    put.on_view(view(ViewKind.FINAL, None, time=70))
    read, sent = causal.track("kv.get", ("k",), snapshot=True, weak_only=False)
    assert sent == 70
    assert read.on_view(view(ViewKind.SNAPSHOT, b"old", time=70)).value == b"old"


def test_a_strong_write_that_fails_leaves_the_cache_and_a_weak_one_stays():
    causal = Causal()
    strong, _ = causal.track("kv.put", ("s", "v"), snapshot=False, weak_only=False)
    strong.on_view(view(ViewKind.PRELIMINARY, None))
    weak, _ = causal.track("kv.put", ("w", "v"), snapshot=False, weak_only=True)
    weak.on_view(view(ViewKind.PRELIMINARY, None))
    strong.on_failed()
    weak.on_failed()
    assert [e.key for e in causal.cache.entries()] == [b"w"]


def test_staleness_is_for_snapshot_views_only():
    import time

    now_us = int(time.time() * 1e6)
    assert 0.9 < view(ViewKind.SNAPSHOT, None, time=now_us - 1_000_000).staleness < 60
    assert view(ViewKind.SNAPSHOT, None, time=0).staleness is None
    assert view(ViewKind.FINAL, None, time=now_us).staleness is None
