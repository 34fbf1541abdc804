"""Python values to and from the wire's `Value` (procedure arguments and
results).

| Python in                           | wire    | Python out |
|-------------------------------------|---------|------------|
| `None`                              | nil     | `None`     |
| `bool`                              | bool    | `bool`     |
| `int` (64-bit signed)               | int     | `int`      |
| `bytes`, `bytearray`, `memoryview`  | bytes   | `bytes`    |
| `str` (encoded as UTF-8)            | bytes   | `bytes`    |
| `list`, `tuple`                     | list    | `list`     |

Strings go in as UTF-8 bytes and come back as `bytes`: the store keeps
bytes and does not remember that they were text.
"""

from __future__ import annotations

from typing import Any, Union

from ._pb import creek_pb2 as pb

#: Nesting limit for lists, so a self-referencing list fails cleanly.
DEPTH_MAX = 64

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1

#: What a procedure can return.
Result = Union[None, bool, int, bytes, list]


def to_wire(value: Any, _depth: int = 0) -> pb.Value:
    """The wire form of `value`; `TypeError` or `ValueError` if it has none."""
    if _depth > DEPTH_MAX:
        raise ValueError(f"value nested deeper than {DEPTH_MAX} lists")
    if value is None:
        return pb.Value(nil=pb.Nil())
    # bool before int: `True` is an `int` too.
    if isinstance(value, bool):
        return pb.Value(bool=value)
    if isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise ValueError(f"int {value} does not fit in 64 signed bits")
        return pb.Value(int=value)
    if isinstance(value, str):
        return pb.Value(bytes=value.encode("utf-8"))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return pb.Value(bytes=bytes(value))
    if isinstance(value, (list, tuple)):
        items = [to_wire(v, _depth + 1) for v in value]
        return pb.Value(list=pb.ValueList(items=items))
    raise TypeError(
        f"cannot send a {type(value).__name__} to Creek: "
        "use None, bool, int, bytes, str or a list of these"
    )


def from_wire(value: pb.Value) -> Result:
    """The Python form of a wire value. `ValueError` if it is empty."""
    kind = value.WhichOneof("kind")
    if kind == "nil":
        return None
    if kind == "bool":
        return value.bool
    if kind == "int":
        return value.int
    if kind == "bytes":
        return value.bytes
    if kind == "list":
        return [from_wire(v) for v in value.list.items]
    raise ValueError("a Value with no kind set")


def canonical(value: Result) -> tuple:
    """A key equal for two results exactly when they are the same wire value
    (Python's `==` says `True == 1`, the wire does not)."""
    if value is None:
        return ("nil",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, bytes):
        return ("bytes", value)
    if isinstance(value, list):
        return ("list", tuple(canonical(v) for v in value))
    # A speculation's results can be anything; compare those by identity of
    # type and `==`.
    return ("py", type(value), value)
