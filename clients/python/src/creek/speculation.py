"""Speculation (Correctables §4.2): start dependent work on a preliminary
view, and redo it only if the final view turns out different.

`Correctable.speculate` is the public face; this module is the task behind
it, which follows the source Correctable's views in the home loop and
feeds the derived one.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Optional, Set, Tuple

from .correctable import Correctable
from .errors import CreekError
from .views import View, ViewKind

# Running speculations. The event loop keeps only weak references to tasks;
# these must run to the end even if nobody holds the derived Correctable.
_RUNNING: Set[asyncio.Task] = set()


def start_speculation(source: Correctable, derived: Correctable, fn, abort) -> None:
    """Start the task that runs `fn` on `source`'s views into `derived`."""
    loop = source._loop

    def spawn() -> None:
        task = loop.create_task(_speculate(source, derived, fn, abort))
        _RUNNING.add(task)
        task.add_done_callback(_RUNNING.discard)

    if threading.get_ident() == source._loop_thread:
        spawn()
    else:
        try:
            loop.call_soon_threadsafe(spawn)
        except RuntimeError:
            # The home loop is closed: nothing will ever run there.
            derived._fail(CreekError("the client is closed"))


async def _speculate(source: Correctable, derived: Correctable, fn, abort) -> None:
    # The view `fn` last ran on and what it returned.
    ran_on: Optional[Tuple[View, object]] = None
    try:
        events = source._events()
        while True:
            try:
                event = await events.__anext__()
            except StopAsyncIteration:
                return
            except Exception as source_error:
                # The source failed: the last speculative result is wrong too.
                if ran_on is not None:
                    await _run(derived, abort, ran_on[1])
                derived._fail(source_error)
                return
            view, closes = event
            if ran_on is not None and ran_on[0].same_outcome(view):
                # The speculation holds. A repeated preliminary outcome tells
                # the derived Correctable nothing new.
                if closes:
                    kind = ViewKind.CONFIRMED if view.is_stable else view.kind
                    derived._push(_derive(derived, view, kind, ran_on[1]), True)
                continue
            if ran_on is not None:
                await _run(derived, abort, ran_on[1])
                ran_on = None
            result = await _run(derived, fn, view)
            ran_on = (view, result)
            # A view `fn` did not run on cannot confirm anything (it cannot be
            # CONFIRMED here: that equals the last preliminary, which `fn` ran
            # on).
            kind = ViewKind.FINAL if view.kind is ViewKind.CONFIRMED else view.kind
            derived._push(_derive(derived, view, kind, result), closes)
    except asyncio.CancelledError:
        derived._fail(CreekError("the speculation was cancelled (client closed?)"))
        raise
    except Exception as e:
        # `fn` or `abort` raised.
        derived._fail(e)


async def _run(derived: Correctable, fn, arg):
    """`fn(arg)`, awaited if it is a coroutine; in a worker thread if the
    Correctable asks for it and `fn` is a plain function."""
    if fn is None:
        return None
    if derived._fns_in_thread and not inspect.iscoroutinefunction(fn):
        result = await asyncio.to_thread(fn, arg)
    else:
        result = fn(arg)
    if inspect.isawaitable(result):
        result = await result
    return result


def _derive(derived: Correctable, source: View, kind: ViewKind, result) -> View:
    return View(
        kind=kind,
        level=source.level,
        value=result,
        abort=None,
        latency=time.monotonic() - derived._start,
        across_shards=source.across_shards and kind is ViewKind.PRELIMINARY,
    )
