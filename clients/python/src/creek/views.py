"""Views: what a `Correctable` learns about an op, one at a time, and the
consistency levels a request asks for (DESIGN §7)."""

from __future__ import annotations

import enum
import time as _time
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Tuple, Union

from ._pb import creek_pb2 as pb
from .errors import ProcedureAborted, ProtocolError
from .values import canonical
from .values import from_wire as value_from_wire


class Level(enum.Enum):
    """A consistency level."""

    #: From the replica's tentative execution: fast, may still change.
    WEAK = "weak"
    #: For read-only calls: the committed state at one commit time the
    #: replica applied, never a tentative op, never older than what this
    #: client saw (docs/snapshot-reads.md).
    SNAPSHOT = "snapshot"
    #: From the op's committed position: stable.
    STRONG = "strong"


WEAK = Level.WEAK
SNAPSHOT = Level.SNAPSHOT
STRONG = Level.STRONG
#: The default of `invoke`: a strong op with preliminary view(s) first.
BOTH: Tuple[Level, ...] = (Level.WEAK, Level.STRONG)
#: All three views of a read-only call: preliminary, snapshot, final.
ALL: Tuple[Level, ...] = (Level.WEAK, Level.SNAPSHOT, Level.STRONG)

#: What `levels=` accepts: a `Level` or its name ("weak", "strong", any
#: case), or a list/tuple (or set) of them.
LevelsArg = Union[Level, str, Iterable[Union[Level, str]]]

_ACCEPTED = (
    'a creek.Level (WEAK, SNAPSHOT or STRONG), "weak", "snapshot" or "strong" (any case), '
    'or a list/tuple of them (e.g. ["weak", "strong"])'
)


def _one_level(level: Any) -> Level:
    if isinstance(level, Level):
        return level
    if isinstance(level, str):
        try:
            return Level(level.strip().lower())
        except ValueError:
            raise ValueError(f"unknown level {level!r}: levels must be {_ACCEPTED}") from None
    raise TypeError(f"bad level {level!r} ({type(level).__name__}): levels must be {_ACCEPTED}")


def parse_levels(levels: LevelsArg) -> frozenset:
    """The set of levels a request asks for. `levels` is one level (a
    `Level`, or "weak"/"strong" in any case) or a list, tuple or set of them.
    `ValueError` if it is empty or names an unknown level, `TypeError` if it
    is of another type."""
    if isinstance(levels, (Level, str)):
        return frozenset([_one_level(levels)])
    if not isinstance(levels, (list, tuple, set, frozenset)):
        raise TypeError(f"bad levels {levels!r} ({type(levels).__name__}): levels must be {_ACCEPTED}")
    got = frozenset(_one_level(level) for level in levels)
    if not got:
        raise ValueError(f"levels is empty: levels must be {_ACCEPTED}")
    return got


def levels_to_wire(levels: frozenset) -> list:
    order = (Level.WEAK, Level.SNAPSHOT, Level.STRONG)
    return [pb.Level.Value(level.name) for level in order if level in levels]


class ViewKind(enum.Enum):
    """What kind of view this is."""

    #: A tentative result (weak level).
    PRELIMINARY = "preliminary"
    #: The stable result, differing from the last preliminary view (or with
    #: no preliminary view before it).
    FINAL = "final"
    #: The stable result, equal to the last view before it (preliminary or
    #: snapshot): a confirmation.
    CONFIRMED = "confirmed"
    #: The result on the committed state at commit time `View.time`.
    SNAPSHOT = "snapshot"


@dataclass(frozen=True)
class View:
    """One view of an op's outcome: its result (`value`), or the message the
    procedure aborted with (`abort`, else None).

    A CONFIRMED view carries the result too: the server does not repeat it,
    the client fills it in from the last preliminary view.
    """

    kind: ViewKind
    level: Level
    value: Any
    abort: Optional[str]
    #: Seconds from the invocation to this view's arrival.
    latency: float
    #: A preliminary view of an operation across shards (a strong call whose
    #: keys span shards): computed on the origin shard's tentative state, where
    #: the other shards' keys read as absent. The final view has their values.
    across_shards: bool = False
    #: A snapshot view's commit time, or a final view's (the op's commit
    #: time), in microseconds; 0 on a preliminary view.
    time: int = 0

    @property
    def staleness(self) -> Optional[float]:
        """How old a snapshot view's state is, in seconds: now less its
        commit time (`time`, wall-clock µs); 0 if the replica's clock is
        ahead of this machine's. None for any other view, or one without a
        time."""
        if self.kind is not ViewKind.SNAPSHOT or not self.time:
            return None
        return max(0.0, _time.time() - self.time / 1e6)

    @property
    def is_preliminary(self) -> bool:
        return self.kind is ViewKind.PRELIMINARY

    @property
    def is_snapshot(self) -> bool:
        return self.kind is ViewKind.SNAPSHOT

    @property
    def is_stable(self) -> bool:
        """Whether this is the op's stable result (FINAL or CONFIRMED)."""
        return self.kind in (ViewKind.FINAL, ViewKind.CONFIRMED)

    @property
    def is_confirmation(self) -> bool:
        """Whether this stable view confirms the last preliminary view."""
        return self.kind is ViewKind.CONFIRMED

    @property
    def aborted(self) -> bool:
        return self.abort is not None

    def result(self) -> Any:
        """The value; `ProcedureAborted` if the procedure aborted."""
        if self.abort is not None:
            raise ProcedureAborted(self.abort)
        return self.value

    def same_outcome(self, other: "View") -> bool:
        """Whether both views hold the same result or abort (exactly, as
        wire values: `True` is not `1`)."""
        return self._outcome_key() == other._outcome_key()

    def _outcome_key(self) -> tuple:
        if self.abort is not None:
            return ("abort", self.abort)
        return ("value", canonical(self.value))

    def __repr__(self) -> str:
        what = f"abort={self.abort!r}" if self.abort is not None else f"value={self.value!r}"
        return f"View({self.kind.name}, {what}, {self.latency * 1000:.1f} ms)"


def view_from_wire(
    wire: pb.View,
    last_preliminary: Optional[View],
    latency: float,
    shown: Optional[View] = None,
) -> View:
    """A view from the wire. `last_preliminary` is the last view before it
    of this Correctable (preliminary or snapshot) as the server sent it: it
    supplies a CONFIRMED view's outcome, and decides whether a stable view
    confirms it (after a failover the new replica's kinds refer to its own
    stream, so the client recomputes them) — unless `shown`, the last view
    as the caller saw it (the client cache laid over a snapshot view), is
    given: a stable view confirms that one."""
    if wire.kind == pb.View.PRELIMINARY:
        kind = ViewKind.PRELIMINARY
    elif wire.kind == pb.View.SNAPSHOT:
        kind = ViewKind.SNAPSHOT
    elif wire.kind in (pb.View.FINAL, pb.View.CONFIRMED):
        kind = ViewKind.FINAL
    else:
        raise ProtocolError(f"a view of unknown kind {wire.kind}")
    outcome = wire.WhichOneof("outcome")
    if outcome == "value":
        try:
            value, abort = value_from_wire(wire.value), None
        except ValueError as e:
            raise ProtocolError(f"a view with a bad value: {e}") from None
    elif outcome == "abort":
        value, abort = None, wire.abort
    elif wire.kind == pb.View.CONFIRMED:
        if last_preliminary is None:
            raise ProtocolError("a confirmed view with no preliminary view before it")
        value, abort = last_preliminary.value, last_preliminary.abort
    else:
        raise ProtocolError(f"a {kind.name} view with no outcome")
    level = {
        ViewKind.PRELIMINARY: Level.WEAK,
        ViewKind.SNAPSHOT: Level.SNAPSHOT,
    }.get(kind, Level.STRONG)
    across = bool(wire.across_shards) and kind is ViewKind.PRELIMINARY
    view = View(kind, level, value, abort, latency, across, int(wire.time))
    before = shown if shown is not None else last_preliminary
    if kind is ViewKind.FINAL and before is not None and view.same_outcome(before):
        view = View(ViewKind.CONFIRMED, level, value, abort, latency, time=int(wire.time))
    return view

