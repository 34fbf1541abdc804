"""User procedures and keyspaces (docs/procedures.md): typed helpers over the
definition built-ins `proc.register`, `proc.show`, `proc.drop`,
`keyspace.create` and `keyspace.list`, and the `Procedures` listing.

The changes (register, drop, create) are strong ops: each helper waits for
the op's final view, so when it returns the change is committed and every
later call, at any replica, sees it. A change the cluster refuses raises
`NotRegistered` or `Refused` and changed nothing; both are
`ProcedureAborted` (the outcome is known), not `CreekError`. User
procedures are called by name like any other (`invoke`, `call`); one that
may write a strong keyspace must be invoked at a strong level, or the call
fails with `InvalidArgument`.

    await c.create_keyspace("notes", creek.KeyspaceLabel.WEAK)
    for r in await c.register_procedures(open("notes.creek").read()):
        print(f"registered {r.name} version {r.version}")
    await c.call("note", "k", "v")                # strong by default

This module is not the compiler: a source file is compiled by the replicas,
against the keyspaces that exist at its place in the order.
"""

from __future__ import annotations

import enum
from typing import Any, Awaitable, Callable, List, NamedTuple, Optional, Union

import grpc

from ._pb import creek_pb2 as pb
from ._pb import creek_pb2_grpc as pb_grpc
from .correctable import Correctable
from .errors import ProcedureAborted, ProtocolError
from .views import STRONG, WEAK, LevelsArg

#: How long (seconds) a definition helper waits for its op's closing view
#: unless given another `timeout`.
DEFINITION_TIMEOUT_S = 30.0


class KeyspaceLabel(enum.Enum):
    """A keyspace's consistency label (docs/procedures.md, "Consistency
    labels and information flow")."""

    #: Changed only by strong ops, in one agreed order.
    STRONG = "strong"
    #: Changed by weak ops too: fast, eventually consistent.
    WEAK = "weak"

    @classmethod
    def parse(cls, label: Union["KeyspaceLabel", str]) -> "KeyspaceLabel":
        """`label` itself, or the label named by "strong" / "weak" (any
        case); `ValueError` for another name, `TypeError` for another type."""
        if isinstance(label, cls):
            return label
        if not isinstance(label, str):
            raise TypeError(f"a keyspace label must be a KeyspaceLabel or str, not {type(label).__name__}")
        try:
            return cls(label.lower())
        except ValueError:
            raise ValueError(f"keyspace label {label!r} is not 'strong' or 'weak'") from None

    def __str__(self) -> str:
        return self.value


class Keyspace(NamedTuple):
    """A keyspace and its label."""

    name: str
    label: KeyspaceLabel


class Registered(NamedTuple):
    """A procedure `register_procedures` registered: its name and version (1
    for its first registration, one more for each later one)."""

    name: str
    version: int


class ProcedureSource(NamedTuple):
    """A registered user procedure's version and the whole source file it
    was registered from (`show_procedure`)."""

    name: str
    version: int
    source: str


class NotRegistered(ProcedureAborted):
    """`register_procedures` registered nothing: the source file did not
    compile, and `message` holds the compiler's errors one per line as
    `line L:C: message` (an information flow from weak to strong data among
    them), or the cluster's other reason."""


class Refused(ProcedureAborted):
    """A change of definitions was refused and changed nothing: a keyspace
    that exists with the other label or a bad name (`create_keyspace`), a
    user procedure to drop that does not exist (`drop_procedure`)."""


def _name(what: str, value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")


def _text(procedure: str, value: Any) -> str:
    if not isinstance(value, bytes):
        raise ProtocolError(f"{procedure} answered {value!r}, not a name")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"{procedure} answered a name that is not UTF-8") from None


def _pairs(procedure: str, value: Any) -> List[list]:
    if not isinstance(value, list) or not all(isinstance(v, list) and len(v) == 2 for v in value):
        raise ProtocolError(f"{procedure} answered {value!r}, which is not its result")
    return value


class Procedures:
    """Mixed into `Client`: needs `invoke` and `_unary_with_failover`."""

    def invoke(self, procedure: str, *args, levels: LevelsArg = ..., **options) -> Correctable:
        raise NotImplementedError

    async def _unary_with_failover(self, one: Callable[[grpc.aio.Channel], Awaitable[Any]]) -> Any:
        raise NotImplementedError

    def _bind_loop(self) -> Any:
        raise NotImplementedError

    async def procedures(self, timeout: Optional[float] = 5.0) -> List[pb.ProcedureInfo]:
        """The procedures the cluster runs, with their signatures (`params`,
        `returns`, `summary`, `read_only`): the built-ins, and the user
        procedures as the answering replica's latest state holds them, with
        `user` set, their `version`, `writes_strong` (invoke it strong) and
        the `keyspaces` they use with their labels."""
        self._bind_loop()

        def one(channel: grpc.aio.Channel) -> Awaitable[pb.ProceduresReply]:
            return pb_grpc.CreekStub(channel).Procedures(pb.ProceduresRequest(), timeout=timeout)

        return list((await self._unary_with_failover(one)).procedures)

    async def register_procedures(
        self, source: Union[str, bytes], *, timeout: Optional[float] = DEFINITION_TIMEOUT_S
    ) -> List[Registered]:
        """Compile `source` (a whole file of `keyspace` declarations and
        `proc`s) and register its procedures, creating the keyspaces it
        declares that do not exist yet: a strong op. Returns each
        procedure's name and version, once committed. A file that does not
        compile registers nothing and raises `NotRegistered` with the
        compiler's `line L:C: message` lines."""
        result = await self._definition("proc.register", _name("source", source), levels=STRONG, timeout=timeout)
        registered = []
        for item in _pairs("proc.register", result):
            name, version = item
            if isinstance(version, bool) or not isinstance(version, int):
                raise ProtocolError(f"proc.register answered version {version!r}")
            registered.append(Registered(_text("proc.register", name), version))
        return registered

    async def drop_procedure(
        self, name: Union[str, bytes], *, timeout: Optional[float] = DEFINITION_TIMEOUT_S
    ) -> None:
        """Remove the user procedure `name` (a strong op; its keyspaces and
        their data stay): later calls of it fail with `InvalidArgument`
        (unknown procedure). Raises `Refused`, changing nothing, if there is
        no such user procedure."""
        raw = _name("name", name)
        existed = await self._definition("proc.drop", raw, levels=STRONG, timeout=timeout)
        if existed is False:
            shown = raw.decode("utf-8", "replace")
            raise Refused(f'no user procedure "{shown}" to drop')
        if existed is not True:
            raise ProtocolError(f"proc.drop answered {existed!r}, not a bool")

    async def show_procedure(
        self, name: Union[str, bytes], *, timeout: Optional[float] = DEFINITION_TIMEOUT_S
    ) -> Optional[ProcedureSource]:
        """The user procedure `name`'s version and source file, from the
        connected replica's latest state (a weak read); None if there is no
        such user procedure. Signatures and labels are in `procedures()`."""
        shown = await self._definition("proc.show", _name("name", name), levels=WEAK, timeout=timeout)
        if shown is None:
            return None
        if not isinstance(shown, list) or len(shown) != 3 or not isinstance(shown[1], int):
            raise ProtocolError(f"proc.show answered {shown!r}, which is not its result")
        return ProcedureSource(_text("proc.show", shown[0]), shown[1], _text("proc.show", shown[2]))

    async def create_keyspace(
        self,
        name: Union[str, bytes],
        label: Union[KeyspaceLabel, str],
        *,
        timeout: Optional[float] = DEFINITION_TIMEOUT_S,
    ) -> None:
        """Create keyspace `name` labelled `label` (`KeyspaceLabel`, or
        "strong" / "weak"): a strong op. Nothing changes if it exists with
        that label; `Refused` if it exists with the other label or `name` is
        not a name (ASCII letters, digits and `_`, not starting with a
        digit, not a keyword)."""
        label = KeyspaceLabel.parse(label)
        await self._definition(
            "keyspace.create", _name("name", name), label.value, levels=STRONG, timeout=timeout
        )

    async def list_keyspaces(self, *, timeout: Optional[float] = DEFINITION_TIMEOUT_S) -> List[Keyspace]:
        """Every keyspace with its label, by name, from the connected
        replica's latest state (a weak read)."""
        result = await self._definition("keyspace.list", levels=WEAK, timeout=timeout)
        keyspaces = []
        for name, label in _pairs("keyspace.list", result):
            try:
                parsed = KeyspaceLabel(_text("keyspace.list", label))
            except ValueError:
                raise ProtocolError(f"keyspace.list answered label {label!r}") from None
            keyspaces.append(Keyspace(_text("keyspace.list", name), parsed))
        return keyspaces

    async def _definition(self, procedure: str, *args, levels: LevelsArg, timeout: Optional[float]) -> Any:
        """Invoke a definition built-in and return its closing view's value;
        its abort as `NotRegistered` (for `proc.register`) or `Refused`."""
        view = await self.invoke(procedure, *args, levels=levels, timeout=timeout).final()
        if view.abort is not None:
            if procedure == "proc.register":
                raise NotRegistered(view.abort)
            raise Refused(view.abort)
        return view.value
