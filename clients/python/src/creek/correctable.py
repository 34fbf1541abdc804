"""`Correctable`: the views of one op, as they arrive (Correctables §3).

A Correctable starts *updating*; each preliminary view is an updating →
updating transition; it closes with its final view (*final*) or an error
(*error*). Every way of reading it sees the same views in the same order,
and nothing is consumed by reading: `await c.final()` after `async for`
works, as does any number of concurrent readers.

Threads and loops: one event loop, the *home loop* (the loop of the client
that made the Correctable), delivers its views. Callbacks run there, in
order, under a lock that also covers late registration (which replays what
already happened, in the registering thread) — so callbacks must be quick.
Awaiting works from any event loop, blocking (`*_blocking`) from any thread
but the home loop's, where it would stop the very delivery it waits for.

This module is not the network: `client.py` feeds Correctables through
`_push` and `_fail`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
from typing import AsyncIterator, Callable, Iterator, List, Optional, Tuple

from .views import View

log = logging.getLogger("creek")


class State(enum.Enum):
    """Where a Correctable is in its life (the paper's states)."""

    #: No closing view yet: more views may come.
    UPDATING = "updating"
    #: Closed by its final view.
    FINAL = "final"
    #: Closed by an error.
    ERROR = "error"


UpdateCallback = Callable[[View], object]
ErrorCallback = Callable[[BaseException], object]

# What a wait is for: None (not yet), or ("view", v) | ("end", None) | ("error", e).
_Ready = Optional[Tuple[str, object]]


class Correctable:
    """The views of one op: preliminary ones as they arrive, then the final
    (or confirmed) one, or an error.

    Read it any of these ways:

    - `await c.preliminary()` / `await c.final()` (or just `await c`);
    - `async for view in c: ...`;
    - `c.set_callbacks(on_update=..., on_final=..., on_error=...)`;
    - from a thread that is not the home loop's: `c.preliminary_blocking()`,
      `c.final_blocking()`, `for view in c.views_blocking(): ...`;
    - `c.speculate(fn, abort)`: a new Correctable of `fn`'s results.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        loop_thread: int,
        *,
        start: Optional[float] = None,
        fns_in_thread: bool = False,
    ):
        self._loop = loop
        self._loop_thread = loop_thread
        self._start = time.monotonic() if start is None else start
        # Speculation functions that are not coroutines run in a worker
        # thread (the blocking client's choice, so they may block).
        self._fns_in_thread = fns_in_thread
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._views: List[View] = []
        self._state = State.UPDATING
        self._error: Optional[BaseException] = None
        self._callbacks: List[_Callbacks] = []
        self._waiters: List[Tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    # ----------------------------------------------------------- inspection

    @property
    def state(self) -> State:
        with self._lock:
            return self._state

    @property
    def latest(self) -> Optional[View]:
        """The newest view received so far, if any."""
        with self._lock:
            return self._views[-1] if self._views else None

    @property
    def received(self) -> Tuple[View, ...]:
        """The views received so far, in order."""
        with self._lock:
            return tuple(self._views)

    @property
    def error(self) -> Optional[BaseException]:
        """The error the Correctable closed with, if it did."""
        with self._lock:
            return self._error

    def __repr__(self) -> str:
        with self._lock:
            return f"<Correctable {self._state.value} views={self._views!r}>"

    # ---------------------------------------------------------------- async

    async def preliminary(self, timeout: Optional[float] = None) -> View:
        """The first view, of any kind: the preliminary view, or the final
        view if the request asked for no weak level. Raises the op's error
        only if it failed before any view arrived; `TimeoutError` after
        `timeout` seconds."""
        return await self._wait(self._first, timeout)

    async def final(self, timeout: Optional[float] = None) -> View:
        """The closing view: the final (or confirmed) view, or for a weak op
        without a final view its one preliminary view. Raises the op's
        error if it failed; `TimeoutError` after `timeout` seconds."""
        return await self._wait(self._closing, timeout)

    def __await__(self):
        return self.final().__await__()

    async def __aiter__(self) -> AsyncIterator[View]:
        """Every view from the first: those received so far, then new ones
        as they arrive. Ends after the closing view; raises the error the
        Correctable closed with."""
        async for view, _closes in self._events():
            yield view

    async def _events(self) -> AsyncIterator[Tuple[View, bool]]:
        """Like iteration, with whether each view is the closing one."""
        i = 0
        while True:
            got = await self._wait(lambda i=i: self._at(i), None)
            if got is None:
                return
            yield got
            i += 1

    # ------------------------------------------------------------- blocking

    def preliminary_blocking(self, timeout: Optional[float] = None) -> View:
        """`preliminary()`, blocking this thread."""
        return self._wait_blocking(self._first, timeout)

    def final_blocking(self, timeout: Optional[float] = None) -> View:
        """`final()`, blocking this thread."""
        return self._wait_blocking(self._closing, timeout)

    def views_blocking(self, timeout: Optional[float] = None) -> Iterator[View]:
        """Iteration, blocking this thread; `timeout` bounds each wait."""
        i = 0
        while True:
            got = self._wait_blocking(lambda i=i: self._at(i), timeout)
            if got is None:
                return
            yield got[0]
            i += 1

    # ------------------------------------------------------------ callbacks

    def set_callbacks(
        self,
        on_update: Optional[UpdateCallback] = None,
        on_final: Optional[UpdateCallback] = None,
        on_error: Optional[ErrorCallback] = None,
    ) -> "Correctable":
        """Call `on_update(view)` on each preliminary view that does not
        close the Correctable, `on_final(view)` on the closing view, and
        `on_error(exception)` if it closes with an error (the paper's three
        transitions). What already happened is replayed at once, in this
        thread; the rest runs in the home loop. Returns self, to chain."""
        cb = _Callbacks(on_update, on_final, on_error)
        with self._lock:
            last = len(self._views) - 1
            for i, view in enumerate(self._views):
                cb.view(view, self._state is State.FINAL and i == last)
            if self._state is State.UPDATING:
                self._callbacks.append(cb)
            elif self._state is State.ERROR:
                cb.error(self._error)
        return self

    # ----------------------------------------------------------- speculation

    def speculate(self, fn, abort=None) -> "Correctable":
        """Run `fn(view)` on each new view and return a Correctable of its
        results (Correctables §4.2, Listing 3).

        `fn` runs on the first view, and again on any later view whose
        outcome differs from the one it last ran on; each result becomes a
        preliminary view of the returned Correctable. When the final view
        equals the one `fn` last ran on, the returned Correctable closes at
        once with a CONFIRMED view of that result; otherwise `abort(result)`
        is called with the result that turned out wrong, `fn` reruns on the
        final view, and the returned Correctable closes with a FINAL view of
        the new result. If this Correctable fails, `abort` is called on the
        last result and the returned one fails with the same error; if `fn`
        or `abort` raises, the returned one fails with that exception.

        `fn` and `abort` may be coroutine functions (awaited in the home
        loop). Plain functions run in the home loop too, so they must not
        block — except with `BlockingClient`, which runs them in a worker
        thread.
        """
        from .speculation import start_speculation

        derived = Correctable(
            self._loop,
            self._loop_thread,
            start=self._start,
            fns_in_thread=self._fns_in_thread,
        )
        start_speculation(self, derived, fn, abort)
        return derived

    # ------------------------------------------------------- feeding (home)

    def _push(self, view: View, closes: bool) -> None:
        """Append a view; `closes` makes it the final one. Home loop only."""
        with self._lock:
            if self._state is not State.UPDATING:
                # Only a bug feeds a closed Correctable.
                raise AssertionError(f"view {view!r} after the Correctable closed")
            self._views.append(view)
            if closes:
                self._state = State.FINAL
            for cb in list(self._callbacks):
                cb.view(view, closes)
            self._after_change()

    def _fail(self, error: BaseException) -> None:
        """Close with `error`, unless already closed. Home loop only."""
        with self._lock:
            if self._state is not State.UPDATING:
                return
            self._state = State.ERROR
            self._error = error
            for cb in list(self._callbacks):
                cb.error(error)
            self._after_change()

    @property
    def _is_open(self) -> bool:
        with self._lock:
            return self._state is State.UPDATING

    def _after_change(self) -> None:
        if self._state is not State.UPDATING:
            # Nothing more can happen: free what the callbacks hold.
            self._callbacks.clear()
        self._changed.notify_all()
        waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_wake, fut)
            except RuntimeError:
                pass  # that loop is closed; nobody waits there any more

    # ---------------------------------------------------------------- waits

    def _first(self) -> _Ready:
        if self._views:
            return ("view", self._views[0])
        if self._state is State.ERROR:
            return ("error", self._error)
        return None

    def _closing(self) -> _Ready:
        if self._state is State.FINAL:
            return ("view", self._views[-1])
        if self._state is State.ERROR:
            return ("error", self._error)
        return None

    def _at(self, i: int) -> _Ready:
        if i < len(self._views):
            closes = self._state is State.FINAL and i == len(self._views) - 1
            return ("view", (self._views[i], closes))
        if self._state is State.FINAL:
            return ("end", None)
        if self._state is State.ERROR:
            return ("error", self._error)
        return None

    async def _wait(self, ready: Callable[[], _Ready], timeout: Optional[float]):
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                got = ready()
                if got is None:
                    fut = loop.create_future()
                    self._waiters.append((loop, fut))
            if got is not None:
                return _unwrap(got)
            if deadline is None:
                await fut
                continue
            remaining = deadline - time.monotonic()
            try:
                await asyncio.wait_for(fut, max(remaining, 0))
            except asyncio.TimeoutError:
                raise TimeoutError(f"no view within {timeout} s") from None

    def _wait_blocking(self, ready: Callable[[], _Ready], timeout: Optional[float]):
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                got = ready()
                if got is not None:
                    return _unwrap(got)
                if threading.get_ident() == self._loop_thread:
                    raise RuntimeError(
                        "a blocking wait on the thread of the event loop that delivers "
                        "this Correctable's views would never end; use await instead"
                    )
                if deadline is None:
                    self._changed.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no view within {timeout} s")
                self._changed.wait(remaining)


def _unwrap(got: Tuple[str, object]):
    kind, x = got
    if kind == "error":
        raise x  # type: ignore[misc]
    if kind == "end":
        return None
    return x


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class _Callbacks:
    """One `set_callbacks` registration."""

    def __init__(self, on_update, on_final, on_error):
        self.on_update = on_update
        self.on_final = on_final
        self.on_error = on_error

    def view(self, view: View, closes: bool) -> None:
        self._call(self.on_final if closes else self.on_update, view)

    def error(self, error: BaseException) -> None:
        self._call(self.on_error, error)

    @staticmethod
    def _call(cb, arg) -> None:
        if cb is None:
            return
        try:
            cb(arg)
        except Exception:
            # A callback's bug must not stop the views of other readers.
            log.exception("a Correctable callback raised")
