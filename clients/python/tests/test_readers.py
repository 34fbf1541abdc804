"""`from_readers`, the core of the bindings, on readers made by hand
(deterministic, no server): which views arrive for each answer of the fast
and the authoritative reader, and what each failure does (Correctables
§3, §5.1)."""

from __future__ import annotations

import asyncio

import pytest

import creek
from creek import ViewKind
from creek.bindings import MISS, StoreError, from_readers
from conftest import run


def answers(value, delay: float = 0.0, calls: list = None):
    """A reader answering `value` (raising it, if an exception) after `delay` s."""

    async def read():
        if calls is not None:
            calls.append(value)
        await asyncio.sleep(delay)
        if isinstance(value, BaseException):
            raise value
        return value

    return read


def kinds(views):
    return [(v.kind, v.value) for v in views]


def test_agreeing_readers_give_a_preliminary_view_and_its_confirmation():
    async def body():
        differed = []

        async def on_differ(fast, final):
            differed.append((fast, final))

        c = from_readers(answers(b"v1"), answers(b"v1", 0.02), on_differ=on_differ)
        views = [v async for v in c]
        assert kinds(views) == [(ViewKind.PRELIMINARY, b"v1"), (ViewKind.CONFIRMED, b"v1")]
        assert [v.level for v in views] == [creek.WEAK, creek.STRONG]
        assert views[0].latency <= views[1].latency and differed == []

        # A Creek view keeps its outcome, abort included.
        aborted = creek.View(ViewKind.FINAL, creek.STRONG, None, "no such key", 0.0)
        assert (await from_readers(answers(aborted), answers(aborted, 0.01))).abort == "no such key"

        # Speculation on it runs once (Correctables §4.2).
        ran = []
        page = from_readers(answers(b"v1"), answers(b"v1", 0.02)).speculate(lambda v: ran.append(v) or "page")
        assert (await page).is_confirmation and len(ran) == 1

    run(body())


def test_differing_readers_correct_the_preliminary_view_after_on_differ():
    async def body():
        events = []

        async def on_differ(fast, final):
            await asyncio.sleep(0.01)
            events.append(("differ", fast, final))

        c = from_readers(answers(b"old"), answers(b"new", 0.02), on_differ=on_differ)
        c.set_callbacks(on_update=lambda v: events.append(("update", v.value)),
                        on_final=lambda v: events.append(("final", v.kind, v.value)))
        await c
        # on_differ (e.g. a cache refresh) is done when the final view comes.
        assert events == [("update", b"old"), ("differ", b"old", b"new"), ("final", ViewKind.FINAL, b"new")]

        # A miss gives no preliminary view, and differs from any value.
        events.clear()
        views = [v async for v in from_readers(answers(MISS), answers(None, 0.01), on_differ=on_differ)]
        assert kinds(views) == [(ViewKind.FINAL, None)] and events == [("differ", MISS, None)]

        # A failing on_differ is logged; the final view still comes.
        async def broken(fast, final):
            raise ConnectionError("cache down")

        views = [v async for v in from_readers(answers(1), answers(2, 0.01), on_differ=broken)]
        assert kinds(views) == [(ViewKind.PRELIMINARY, 1), (ViewKind.FINAL, 2)]

    run(body())


def test_views_come_in_order_even_when_the_fast_read_is_slower():
    async def body():
        slow_cache = from_readers(answers(b"old", 0.03), answers(b"new"))
        assert kinds([v async for v in slow_cache]) == [(ViewKind.PRELIMINARY, b"old"), (ViewKind.FINAL, b"new")]

    run(body())


def test_a_failed_or_hung_fast_read_is_skipped_and_the_final_view_still_comes():
    async def body():
        differed = []

        async def on_differ(fast, final):
            differed.append(fast)

        failed = from_readers(answers(ConnectionError("refused")), answers(b"v", 0.01), on_differ=on_differ)
        assert kinds([v async for v in failed]) == [(ViewKind.FINAL, b"v")]
        # Past fast_timeout: abandoned, nothing to compare.
        hung = from_readers(answers(b"v", 5.0), answers(b"v"), fast_timeout=0.05, on_differ=on_differ)
        assert kinds([v async for v in hung]) == [(ViewKind.FINAL, b"v")]
        assert differed == []

    run(body())


def test_a_failed_authoritative_read_fails_the_correctable_with_a_typed_error():
    async def body():
        store = from_readers(answers(b"v"), answers(OSError("connection refused"), 0.01), store="postgresql")
        assert (await store.preliminary()).value == b"v"
        with pytest.raises(StoreError, match=r"^postgresql: OSError: connection refused$") as e:
            await store
        assert isinstance(e.value, creek.CreekError) and isinstance(e.value.__cause__, OSError)
        assert store.state is creek.State.ERROR

        # A CreekError goes through as it is.
        creek_error = from_readers(answers(MISS), answers(creek.Unavailable("all down")))
        with pytest.raises(creek.Unavailable, match="all down"):
            await creek_error

        # No final view in time: DeadlineExceeded, never a hang.
        slow = from_readers(answers(b"v"), answers(b"v", 5.0), timeout=0.05)
        with pytest.raises(creek.DeadlineExceeded, match="within 0.05 s"):
            await slow.final(timeout=5)
        assert kinds(slow.received) == [(ViewKind.PRELIMINARY, b"v")]

    run(body())


def test_levels_choose_the_readers():
    async def body():
        calls = []
        # WEAK: the fast reader alone, its one view closes the Correctable.
        weak = from_readers(answers(b"c", calls=calls), answers(b"db", calls=calls), levels="weak")
        assert kinds([v async for v in weak]) == [(ViewKind.PRELIMINARY, b"c")] and calls == [b"c"]
        # ... unless it misses or fails: then the authoritative reader answers.
        differed = []

        async def on_differ(fast, final):
            differed.append((fast, final))

        missed = from_readers(answers(MISS), answers(b"db"), levels=creek.WEAK, on_differ=on_differ)
        assert kinds([v async for v in missed]) == [(ViewKind.PRELIMINARY, b"db")]
        assert differed == [(MISS, b"db")]
        down = from_readers(answers(OSError("down")), answers(b"db"), levels=creek.WEAK)
        assert kinds([v async for v in down]) == [(ViewKind.PRELIMINARY, b"db")]
        # STRONG: the authoritative reader alone.
        calls.clear()
        strong = from_readers(answers(b"c", calls=calls), answers(b"db", calls=calls), levels=creek.STRONG)
        assert kinds([v async for v in strong]) == [(ViewKind.FINAL, b"db")] and calls == [b"db"]

    run(body())


def test_bad_arguments_are_refused_at_once():
    async def body():
        ok = answers(1)
        with pytest.raises(TypeError, match="callables"):
            from_readers(b"not a reader", ok)
        with pytest.raises(ValueError, match='"weak", "snapshot" or "strong"'):
            from_readers(ok, ok, levels="eventual")
        with pytest.raises(ValueError, match="timeout"):
            from_readers(ok, ok, timeout=0)
        with pytest.raises(ValueError, match="fast_timeout"):
            from_readers(ok, ok, fast_timeout="1")
        # A reader that is not async fails its read, typed, without a hang.
        sync = from_readers(ok, lambda: 1, timeout=1)
        with pytest.raises(StoreError, match="TypeError"):
            await sync

    run(body())
    with pytest.raises(RuntimeError, match="inside a coroutine"):
        from_readers(answers(1), answers(1))
