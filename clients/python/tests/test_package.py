"""The package without a server: stubs built from the repository's proto,
value conversion, levels, and the Correctable's reading and speculation
rules on views fed by hand (deterministic, Correctables §3–4.2)."""

from __future__ import annotations

import asyncio
import importlib.resources
import pickle
import threading

import grpc
import pytest

import creek
from creek import values
from creek._pb import creek_pb2 as pb
from creek.correctable import Correctable
from creek.errors import from_rpc_error
from creek.views import Level, View, ViewKind, parse_levels
from cluster import REPO
from conftest import run


def test_stubs_are_built_from_the_repository_proto():
    packaged = importlib.resources.files("creek._pb").joinpath("creek.proto").read_text()
    assert packaged == (REPO / "proto" / "creek.proto").read_text(), (
        "the installed stubs come from another creek.proto: reinstall the package"
    )
    assert pb.DESCRIPTOR.services_by_name["Creek"].methods_by_name["Invoke"].server_streaming


def test_values_round_trip_and_keep_their_types():
    cases = [None, True, False, 0, -(2**63), 2**63 - 1, b"", b"\x00\xff", [b"a", [1, None]], []]
    for v in cases:
        assert values.from_wire(values.to_wire(v)) == v
    assert values.from_wire(values.to_wire("héllo")) == "héllo".encode()
    assert values.from_wire(values.to_wire((1, 2))) == [1, 2]
    assert values.to_wire(True).WhichOneof("kind") == "bool"
    assert values.canonical(True) != values.canonical(1)
    with pytest.raises(ValueError, match="64 signed bits"):
        values.to_wire(2**63)
    with pytest.raises(TypeError, match="float"):
        values.to_wire(1.5)
    with pytest.raises(ValueError, match="no kind"):
        values.from_wire(pb.Value())


def test_levels_are_checked():
    assert parse_levels(creek.WEAK) == {Level.WEAK}
    assert parse_levels(creek.BOTH) == {Level.WEAK, Level.STRONG}
    # By name, in any case, alone or in a list/tuple, mixed with Levels.
    assert parse_levels("weak") == {Level.WEAK}
    assert parse_levels("STRONG") == {Level.STRONG}
    assert parse_levels(["weak", "strong"]) == {Level.WEAK, Level.STRONG}
    assert parse_levels(("Weak", creek.STRONG)) == {Level.WEAK, Level.STRONG}
    assert parse_levels({creek.STRONG}) == {Level.STRONG}
    for bad in ([], (), "both", "", ["weak", "eventual"]):
        with pytest.raises(ValueError, match='"weak", "snapshot" or "strong"'):
            parse_levels(bad)
    for bad in (3, None, b"weak", {"weak": 1}, ["weak", 3], iter([creek.WEAK])):
        with pytest.raises(TypeError, match='"weak", "snapshot" or "strong"'):
            parse_levels(bad)


def test_errors_carry_the_status_code_name_and_the_message():
    e = creek.CreekError("the server said so", grpc.StatusCode.FAILED_PRECONDITION)
    assert (e.code, e.message, e.status_code) == (
        "FAILED_PRECONDITION",
        "the server said so",
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert str(e) == "FAILED_PRECONDITION: the server said so"
    # Each subclass has its code; a name works as well as a grpc.StatusCode.
    assert creek.Unavailable("gone").code == "UNAVAILABLE"
    assert str(creek.InvalidArgument("bad")) == "INVALID_ARGUMENT: bad"
    assert creek.CreekError("x", "resource_exhausted").status_code is grpc.StatusCode.RESOURCE_EXHAUSTED
    # Errors the client finds itself have no code.
    assert creek.ProtocolError("short stream").code is None
    assert str(creek.CreekError("the client is closed")) == "the client is closed"
    with pytest.raises(ValueError):
        creek.CreekError("x", "NO_SUCH_CODE")
    again = pickle.loads(pickle.dumps(e))
    assert (type(again), again.code, again.message) == (creek.CreekError, e.code, e.message)

    class Failed(grpc.RpcError):
        def __init__(self, code, details):
            self._code, self._details = code, details

        def code(self):
            return self._code

        def details(self):
            return self._details

    for code, cls in [
        (grpc.StatusCode.INVALID_ARGUMENT, creek.InvalidArgument),
        (grpc.StatusCode.UNAVAILABLE, creek.Unavailable),
        (grpc.StatusCode.UNAUTHENTICATED, creek.Unauthenticated),
        (grpc.StatusCode.PERMISSION_DENIED, creek.PermissionDenied),
        (grpc.StatusCode.FAILED_PRECONDITION, creek.CreekError),
    ]:
        got = from_rpc_error(Failed(code, "why"))
        assert type(got) is cls and (got.code, got.message) == (code.name, "why")
        assert str(got) == f"{code.name}: why"
    # No message from the server: the code's words.
    assert from_rpc_error(Failed(grpc.StatusCode.INTERNAL, "")).message == "internal"

    # A compacted watch position: the oldest one from the trailing metadata.
    class Compacted(Failed):
        def trailing_metadata(self):
            return (("creek-compacted", "57"),)

    got = from_rpc_error(Compacted(grpc.StatusCode.OUT_OF_RANGE, "position 3 is compacted"))
    assert type(got) is creek.Compacted and isinstance(got, creek.CreekError)
    assert (got.code, got.oldest, got.message) == ("OUT_OF_RANGE", 57, "position 3 is compacted")
    again = pickle.loads(pickle.dumps(got))
    assert (type(again), again.oldest) == (creek.Compacted, 57)
    # OUT_OF_RANGE without it (a revision not kept, a read time ahead).
    assert type(from_rpc_error(Failed(grpc.StatusCode.OUT_OF_RANGE, "x"))) is creek.OutOfRange
    assert isinstance(got, creek.OutOfRange)


def test_the_async_client_refuses_to_run_without_an_event_loop():
    c = creek.Client("127.0.0.1:1")
    with pytest.raises(RuntimeError, match="BlockingClient"):
        c.kv_get("k")


def view(kind: ViewKind, value, abort=None) -> View:
    level = Level.WEAK if kind is ViewKind.PRELIMINARY else Level.STRONG
    return View(kind, level, value, abort, 0.0)


def fed() -> Correctable:
    return Correctable(asyncio.get_running_loop(), threading.get_ident())


def test_every_reader_sees_the_views_in_order_and_callbacks_follow_the_paper():
    async def body():
        c = fed()
        events = []
        c.set_callbacks(
            on_update=lambda v: events.append(("update", v.value)),
            on_final=lambda v: events.append(("final", v.value)),
        )
        reader = asyncio.ensure_future(_collect(c))
        await asyncio.sleep(0)
        assert c.state is creek.State.UPDATING
        c._push(view(ViewKind.PRELIMINARY, 1), False)
        assert (await c.preliminary()).value == 1
        c._push(view(ViewKind.PRELIMINARY, 2), False)
        c._push(view(ViewKind.FINAL, 3), True)
        assert [v.value for v in await reader] == [1, 2, 3]
        assert c.state is creek.State.FINAL
        assert (await c).value == 3
        # Registered late: the history is replayed, in order.
        late = []
        c.set_callbacks(on_update=lambda v: late.append(v.value), on_final=lambda v: late.append(("f", v.value)))
        assert events == [("update", 1), ("update", 2), ("final", 3)]
        assert late == [1, 2, ("f", 3)]
        # Waiting in the thread of the loop that feeds it would deadlock,
        # but a closed Correctable answers at once.
        assert c.final_blocking().value == 3

    run(body())


def test_an_error_closes_the_correctable_for_every_reader():
    async def body():
        c = fed()
        errors = []
        c._push(view(ViewKind.PRELIMINARY, 1), False)
        c._fail(creek.Unavailable("gone"))
        c.set_callbacks(on_error=errors.append)
        assert c.state is creek.State.ERROR
        assert (await c.preliminary()).value == 1
        with pytest.raises(creek.Unavailable, match="gone"):
            await c.final()
        with pytest.raises(creek.Unavailable):
            await _collect(c)
        assert [str(e) for e in errors] == ["UNAVAILABLE: gone"]

    run(body())


def test_a_blocking_wait_on_the_delivering_loop_is_refused_not_hung():
    async def body():
        c = fed()
        with pytest.raises(RuntimeError, match="use await"):
            c.final_blocking(timeout=1)
        with pytest.raises(TimeoutError):
            await c.final(timeout=0.05)

    run(body())


def test_speculation_held_runs_once_and_confirms():
    async def body():
        c = fed()
        ran, undone = [], []
        s = c.speculate(lambda v: ran.append(v.value) or f"page({v.value!r})", abort=undone.append)
        c._push(view(ViewKind.PRELIMINARY, b"x"), False)
        c._push(view(ViewKind.CONFIRMED, b"x"), True)
        views = await _collect(s)
        assert [(v.kind, v.value) for v in views] == [
            (ViewKind.PRELIMINARY, "page(b'x')"),
            (ViewKind.CONFIRMED, "page(b'x')"),
        ]
        assert ran == [b"x"] and undone == []

    run(body())


def test_misspeculation_aborts_the_wrong_result_and_reruns_on_the_final_view():
    async def body():
        c = fed()
        ran, undone = [], []

        async def f(v):  # an async speculation function
            await asyncio.sleep(0)
            ran.append(v.value)
            return v.value * 10

        s = c.speculate(f, abort=undone.append)
        c._push(view(ViewKind.PRELIMINARY, 1), False)
        c._push(view(ViewKind.PRELIMINARY, 1), False)  # same outcome: no rerun
        c._push(view(ViewKind.FINAL, 2), True)
        views = await _collect(s)
        assert [(v.kind, v.value) for v in views] == [(ViewKind.PRELIMINARY, 10), (ViewKind.FINAL, 20)]
        assert ran == [1, 2] and undone == [10]
        assert not views[-1].is_confirmation

    run(body())


def test_a_failed_source_aborts_the_speculation_and_fails_it_too():
    async def body():
        c = fed()
        undone = []
        s = c.speculate(lambda v: "spec", abort=undone.append)
        c._push(view(ViewKind.PRELIMINARY, 1), False)
        await s.preliminary()
        c._fail(creek.DeadlineExceeded("late"))
        with pytest.raises(creek.DeadlineExceeded):
            await s.final()
        assert undone == ["spec"]
        # A speculation function that raises fails its Correctable.
        d = fed()
        t = d.speculate(lambda v: 1 / 0)
        d._push(view(ViewKind.FINAL, 1), True)
        with pytest.raises(ZeroDivisionError):
            await t

    run(body())


async def _collect(c: Correctable):
    return [v async for v in c]
