"""`Txn`: a builder for `kv.txn`, the built-in conditional transaction over
plain keys (docs/api.md, "Transactions") — etcd's `Txn`: compares, then the
ops to run if they all hold, else the others, atomically.

    txn = (creek.Txn()
           .when("user/1", "=", "alice")
           .when_absent("lock")
           .then(creek.TxnOp.put("user/1", "bob"))
           .then(creek.TxnOp.put("lock", "held"))
           .otherwise(creek.TxnOp.get("user/1")))
    view = await client.kv_txn(txn, levels=creek.STRONG).final()
    answer = creek.TxnAnswer.of(view)   # .succeeded, .results

A compare of the value of an absent key is false, whatever its op;
`when_absent` and `when_present` test existence; `when_field` compares a
key's version, create or mod revision or lease (0 when absent). Ops of a branch run in order, a later one
seeing an earlier one's writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Union

Bytes = Union[str, bytes]

_OPS = ("=", "!=", "<", ">")
_FIELDS = ("version", "create", "mod", "lease")


def _key(what: str, value) -> Union[str, bytes]:
    if not isinstance(value, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")
    return value


class Txn:
    """A `kv.txn` call being built: compares, success ops, failure ops."""

    def __init__(self) -> None:
        self.compares: List[list] = []
        self.success: List[list] = []
        self.failure: List[list] = []

    # ------------------------------------------------------------ compares

    def when(self, key: Bytes, op: str, value: Bytes) -> "Txn":
        """Compare `key`'s value with `value` (`=`, `!=`, `<`, `>`, byte order)."""
        if op not in _OPS:
            raise ValueError(f"compare op must be one of {', '.join(_OPS)}, not {op!r}")
        self.compares.append([_key("key", key), "value", op, _key("value", value)])
        return self

    def when_field(self, key: Bytes, field: str, op: str, n: int) -> "Txn":
        """Compare `key`'s `field` — "version" (writes since its creation),
        "create" or "mod" (the revisions of its creation and last write) or
        "lease" — with the int `n`; each is 0 when the key is absent."""
        if field not in _FIELDS:
            raise ValueError(f"compare field must be one of {', '.join(_FIELDS)}, not {field!r}")
        if op not in _OPS:
            raise ValueError(f"compare op must be one of {', '.join(_OPS)}, not {op!r}")
        if not isinstance(n, int) or isinstance(n, bool):
            raise TypeError(f"a {field} compare takes an int, not {type(n).__name__}")
        self.compares.append([_key("key", key), field, op, n])
        return self

    def when_absent(self, key: Bytes) -> "Txn":
        """Holds when `key` is absent."""
        self.compares.append([_key("key", key), "value", "=", None])
        return self

    def when_present(self, key: Bytes) -> "Txn":
        """Holds when `key` is present."""
        self.compares.append([_key("key", key), "value", "!=", None])
        return self

    # ----------------------------------------------------------------- ops

    def then(self, op: list) -> "Txn":
        """Run `op` (a `TxnOp`) if every compare holds, in the order added."""
        self.success.append(op)
        return self

    def otherwise(self, op: list) -> "Txn":
        """Run `op` (a `TxnOp`) if a compare does not hold, in the order added."""
        self.failure.append(op)
        return self

    def args(self) -> list:
        """`kv.txn`'s three arguments."""
        return [self.compares, self.success, self.failure]


class TxnOp:
    """The ops of a branch, each answered as the `kv.*` call of its name."""

    @staticmethod
    def get(key: Bytes) -> list:
        """The value, or None."""
        return ["get", _key("key", key)]

    @staticmethod
    def put(key: Bytes, value: Bytes, lease: Optional[int] = None) -> list:
        """None. With `lease`, the key is attached to that lease (the
        transaction aborts if the lease is not live)."""
        if lease is None:
            return ["put", _key("key", key), _key("value", value)]
        return ["put", _key("key", key), _key("value", value), int(lease)]

    @staticmethod
    def delete(key: Bytes) -> list:
        """Whether the key existed."""
        return ["delete", _key("key", key)]

    @staticmethod
    def scan(start: Bytes, end: Optional[Bytes] = None, limit: int = 1000) -> list:
        """`[[[key, value], ...], next]`, one page."""
        return ["scan", _key("start", start), end, limit]

    @staticmethod
    def scan_reverse(start: Bytes, end: Optional[Bytes] = None, limit: int = 1000) -> list:
        """`[[[key, value], ...], next]`, the last keys of the range, descending."""
        return ["scan_reverse", _key("start", start), end, limit]

    @staticmethod
    def delete_range(start: Bytes, end: Optional[Bytes] = None, limit: int = 1000) -> list:
        """`[deleted, next]`, one page deleted at once."""
        return ["delete_range", _key("start", start), end, limit]


@dataclass(frozen=True)
class TxnAnswer:
    """What a `kv.txn` answered: whether the success ops ran, and each op's
    result in order."""

    succeeded: bool
    results: List[Any]

    @staticmethod
    def of(view) -> "TxnAnswer":
        """Read a view of a `kv.txn`; `ValueError` for an abort (nothing was
        applied) or an answer of another shape."""
        if view.abort is not None:
            raise ValueError(f"kv.txn aborted: {view.abort}")
        value = view.value
        if (
            isinstance(value, list)
            and len(value) == 2
            and isinstance(value[0], bool)
            and isinstance(value[1], list)
        ):
            return TxnAnswer(value[0], value[1])
        raise ValueError(f"kv.txn answered {value!r}, not [succeeded, results]")


def txn_keys(args) -> Optional[list]:
    """The keys a `kv.txn` call names in its compares and get, put and
    delete ops, each once, in order; None when it cannot be routed to
    shards by them (a range op, a put with a lease, or not `kv.txn`'s
    shape). Mirrors the replicas' routing (creek_shard::txn_keys)."""
    if len(args) != 3 or not all(isinstance(a, (list, tuple)) for a in args):
        return None
    keys: list = []

    def add(k) -> bool:
        if isinstance(k, str):
            k = k.encode()
        if not isinstance(k, (bytes, bytearray)):
            return False
        if bytes(k) not in keys:
            keys.append(bytes(k))
        return True

    compares, success, failure = args
    for c in compares:
        if not isinstance(c, (list, tuple)) or not c or not add(c[0]):
            return None
    for op in list(success) + list(failure):
        if not isinstance(op, (list, tuple)) or not op:
            return None
        name = op[0].decode() if isinstance(op[0], bytes) else op[0]
        if name == "put" and len(op) == 4:
            return None
        if name in ("get", "put", "delete") and len(op) >= 2 and add(op[1]):
            continue
        return None
    return keys
