"""`from_readers`: a Correctable made from two reads of any store — a fast
one for the preliminary view, an authoritative one for the final view
(Correctables §5.1, a binding's `submitOperation`, with both reads sent at
once as §5.1 suggests a better binding would).

This module knows no store: `cache.py` and `quorum.py` are bindings built on
it. It is not a write path either; bindings write as their store wants.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Awaitable, Callable, Optional, Set, Tuple

from ..correctable import Correctable
from ..errors import CreekError, DeadlineExceeded
from ..views import BOTH, Level, LevelsArg, View, ViewKind, parse_levels

log = logging.getLogger("creek.bindings")

#: Default bound (seconds) from the invocation to the final view.
TIMEOUT_S = 10.0
#: Default bound (seconds) of the fast read; past it, it counts as failed.
FAST_TIMEOUT_S = 1.0


class _Miss:
    def __repr__(self) -> str:
        return "MISS"


#: What a fast reader returns when it has nothing to say (a cache miss):
#: no preliminary view is given.
MISS: Any = _Miss()

#: A read: called once, returns the value (or a `View`, whose value and
#: abort are taken; or, for a fast reader, `MISS`).
Reader = Callable[[], Awaitable[Any]]
#: Called with the fast reader's value (or `MISS`) and the final value when
#: they differ, before the final view is delivered (e.g. to refresh a cache).
OnDiffer = Callable[[Any, Any], Awaitable[None]]


class StoreError(CreekError):
    """The authoritative read failed in the store (a connection refused, a
    query the database rejected, ...). `message` names the store and says
    what it said; the store's own exception is the `__cause__`."""


def store_error(store: str, e: BaseException) -> StoreError:
    """`e`, a store's own exception, as a `StoreError` naming `store`."""
    said = f": {e}" if str(e) else ""
    return StoreError(f"{store}: {type(e).__name__}{said}")


# Running reads. The event loop keeps only weak references to tasks.
_RUNNING: Set[asyncio.Task] = set()


def from_readers(
    fast: Reader,
    authoritative: Reader,
    *,
    levels: LevelsArg = BOTH,
    timeout: Optional[float] = TIMEOUT_S,
    fast_timeout: Optional[float] = FAST_TIMEOUT_S,
    on_differ: Optional[OnDiffer] = None,
    store: str = "store",
    fast_store: str = "fast store",
) -> Correctable:
    """Start the reads `levels` asks for and return their Correctable at
    once (call it inside a coroutine: its views are delivered by the
    running loop).

    - `BOTH` (default): both reads at once. The fast value is the
      preliminary view; the authoritative value closes the Correctable,
      CONFIRMED if it equals the preliminary view, else FINAL. Views come
      in that order: a final value that is in first waits for the fast
      read (so the final view's latency is the slower read's). When the
      fast reader answered (a value or `MISS`) and its answer differs from
      the final one, `on_differ(fast, final)` runs before the final view
      is delivered.
    - `WEAK`: the fast read alone, one view that closes the Correctable;
      if it misses or fails, the authoritative read answers instead (and
      `on_differ` runs, as it differs from a miss).
    - `STRONG`: the authoritative read alone, one FINAL view.

    A fast read that fails, or gives no answer within `fast_timeout`
    seconds, is logged and gives no view. An authoritative read that fails
    closes the Correctable with its error: a `CreekError` as it is,
    anything else as a `StoreError` naming `store` (`fast_store` names the
    fast reader's in the log). No final view within
    `timeout` seconds closes it with `DeadlineExceeded` (None, for either
    bound: none). A failing `on_differ` is logged; the final view still
    comes.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("from_readers runs in asyncio code: call it inside a coroutine") from None
    if not callable(fast) or not callable(authoritative):
        raise TypeError("fast and authoritative must be callables returning awaitables (e.g. async functions)")
    wanted = parse_levels(levels)
    for name, bound in (("timeout", timeout), ("fast_timeout", fast_timeout)):
        if bound is not None and not (isinstance(bound, (int, float)) and bound > 0):
            raise ValueError(f"{name} must be a positive number of seconds or None, not {bound!r}")
    c = Correctable(loop, threading.get_ident())
    read = _Read(c, store, fast_store, on_differ, fast_timeout)
    if wanted == {Level.WEAK}:
        steps = read.weak(fast, authoritative)
    elif wanted == {Level.STRONG}:
        steps = read.strong(authoritative)
    else:
        steps = read.both(fast, authoritative)
    task = loop.create_task(_bounded(c, steps, timeout))
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)
    return c


async def _bounded(c: Correctable, steps: Awaitable[None], timeout: Optional[float]) -> None:
    """Run `steps`; whatever goes wrong closes `c`, never leaves it open."""
    try:
        await asyncio.wait_for(steps, timeout)
    except asyncio.TimeoutError:
        c._fail(DeadlineExceeded(f"no final view within {timeout} s"))
    except asyncio.CancelledError:
        c._fail(CreekError("the read was cancelled (its event loop is closing?)"))
        raise
    except CreekError as e:  # the authoritative read failed
        c._fail(e)
    except Exception as e:  # only a bug gets here
        c._fail(e)
        raise


class _Read:
    """One invocation's reads, feeding its Correctable."""

    def __init__(
        self, c: Correctable, store: str, fast_store: str, on_differ: Optional[OnDiffer], fast_timeout: Optional[float]
    ):
        self.c = c
        self.store = store
        self.fast_store = fast_store
        self.on_differ = on_differ
        self.fast_timeout = fast_timeout

    async def both(self, fast: Reader, authoritative: Reader) -> None:
        final_task = asyncio.ensure_future(_call(authoritative))
        try:
            fast_answered, fast_value = await self._fast(fast)
            preliminary: Optional[View] = None
            if fast_answered and fast_value is not MISS:
                preliminary = self._view(ViewKind.PRELIMINARY, fast_value)
                self.c._push(preliminary, False)
            final = await self._authoritative(final_task)
            if preliminary is not None and preliminary.same_outcome(self._view(ViewKind.FINAL, final)):
                self.c._push(self._view(ViewKind.CONFIRMED, final), True)
                return
            if fast_answered:
                await self._differ(fast_value, final)
            self.c._push(self._view(ViewKind.FINAL, final), True)
        finally:
            final_task.cancel()

    async def weak(self, fast: Reader, authoritative: Reader) -> None:
        answered, value = await self._fast(fast)
        if answered and value is not MISS:
            self.c._push(self._view(ViewKind.PRELIMINARY, value), True)
            return
        final = await self._authoritative(asyncio.ensure_future(_call(authoritative)))
        if answered:
            await self._differ(MISS, final)
        self.c._push(self._view(ViewKind.PRELIMINARY, final), True)

    async def strong(self, authoritative: Reader) -> None:
        final = await self._authoritative(asyncio.ensure_future(_call(authoritative)))
        self.c._push(self._view(ViewKind.FINAL, final), True)

    # ------------------------------------------------------------ helpers

    async def _fast(self, fast: Reader) -> Tuple[bool, Any]:
        """(whether the fast reader answered in time, its value or MISS)."""
        try:
            return True, await asyncio.wait_for(_call(fast), self.fast_timeout)
        except asyncio.TimeoutError:
            why = f"no answer within {self.fast_timeout} s"
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
        log.warning("%s: the fast read failed, no preliminary view: %s", self.fast_store, why)
        return False, None

    async def _authoritative(self, task: asyncio.Future) -> Any:
        """The authoritative reader's result; its error, typed, if it
        failed."""
        try:
            result = await task
        except (CreekError, asyncio.CancelledError):
            raise
        except Exception as e:
            raise store_error(self.store, e) from e
        if result is MISS:
            raise AssertionError(f"{self.store}: the authoritative reader returned MISS")
        return result

    async def _differ(self, fast_value: Any, final: Any) -> None:
        if self.on_differ is None:
            return
        try:
            await self.on_differ(fast_value, final)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("%s: after a differing read, on_differ failed: %s", self.fast_store, e)

    def _view(self, kind: ViewKind, result: Any) -> View:
        """A view of `result`: a plain value, or a `View` whose outcome is
        kept (a Creek read's, with its abort)."""
        value, abort = (result.value, result.abort) if isinstance(result, View) else (result, None)
        return View(kind, _level(kind), value, abort, time.monotonic() - self.c._start)


async def _call(reader: Reader) -> Any:
    """`await reader()`, so that a reader raising before it awaits fails
    its read like any other error."""
    return await reader()


def _level(kind: ViewKind) -> Level:
    return Level.WEAK if kind is ViewKind.PRELIMINARY else Level.STRONG
