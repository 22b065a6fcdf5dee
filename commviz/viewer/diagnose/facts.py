"""What a finding says, as facts: one small frozen record per sentence shape, no words.

``wording`` makes the words from them when they are shown, in the language asked for; a
recording keeps them (``to_json``) so that a later reader words them in its own language.
Every field is a number, a string, None, a bool, a tuple of those or another facts record:
what JSON holds, read back equal (``from_json``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

Ranks = tuple[int, ...]


@dataclass(frozen=True)
class Call:
    """An op a rank made: ``all_reduce #3``, ``recv from 0 #2``; ``peer`` counts for a send
    or a receive only."""

    shape: ClassVar[str] = "call"
    op: str
    peer: int | None
    seq: int


@dataclass(frozen=True)
class Doing:
    """What a rank does instead of being in the op the others wait in. ``state``:
    ``never_reported``, ``exited``, ``ended`` (its harvester saw its process end), ``lost``,
    ``silent``, ``in_op``, ``no_op`` or ``idle``; ``secs``: for how long (silent, in_op) or
    since when (idle), None where the words are kept once the wait is over; ``call``: the op
    it is in (in_op); ``last_op``: its last op's name (idle); ``last``: its last record
    (ended, lost, silent); ``code``: how it ended where known (ended: exit code, negative the
    signal)."""

    shape: ClassVar[str] = "doing"
    state: str
    secs: float | None = None
    call: Call | None = None
    last_op: str | None = None
    last: Call | None = None
    code: int | None = None


@dataclass(frozen=True)
class Signature:
    """How a rank called an op: ``all_reduce (4096 B float32)``."""

    shape: ClassVar[str] = "signature"
    op: str
    size: int
    dtype: str | None


@dataclass(frozen=True)
class Straggler:
    shape: ClassVar[str] = "straggler"
    rank: int
    op: str
    group: Ranks
    times: int        # late instances in a row
    avg_ms: float     # how late on average
    each_s: float     # what each other rank waited for it in all
    waited_s: float   # their waits summed: rank time


@dataclass(frozen=True)
class Hang:
    """A collective some ranks wait in and others never joined; ``why``: what each missing
    rank does; ``ended``: its ranks are gone, the wait lasted ``age_s``."""

    shape: ClassVar[str] = "hang"
    op: str
    seq: int
    where: str | None  # the program's line the ranks inside called it from: train.py:32
    group: Ranks
    age_s: float
    ended: bool
    inside: Ranks
    missing: Ranks
    why: tuple[tuple[int, Doing], ...]
    nodes: tuple[str, ...] = ()  # the missing ranks' nodes, when the job spans several
    later: int = 0  # later instances of the group hung with the same ranks missing


@dataclass(frozen=True)
class Failed:
    """A collective some ranks failed in while others sent no record of it; ``hung``: it was
    found hung first (a timeout ended it), ``why`` is then what the missing ranks did while
    it hung, ``cause`` the ranks of the deadlock it was in (empty if none)."""

    shape: ClassVar[str] = "failed"
    op: str
    seq: int
    where: str | None
    group: Ranks
    took_s: float
    failed: Ranks
    missing: Ranks
    why: tuple[tuple[int, Doing], ...]
    hung: bool
    cause: Ranks


@dataclass(frozen=True)
class P2PWait:
    """A send or receive that waits, or failed waiting, for a counterpart with no record.
    ``state``: ``waits``, ``waited`` (until its ranks exited), ``failed`` or ``timeout``
    (found hung first); ``secs``: how long it waited, or was in it before failing."""

    shape: ClassVar[str] = "p2p"
    sending: bool
    src: int
    dst: int
    seq: int
    state: str
    secs: float
    peer: int
    doing: Doing
    cause: Ranks


@dataclass(frozen=True)
class Behind:
    """Ranks outside a deadlock's cycle that wait, in one op, on ranks of it (``on``)."""

    shape: ClassVar[str] = "behind"
    ranks: Ranks
    call: Call
    on: Ranks


@dataclass(frozen=True)
class Deadlock:
    """A cycle of waits: each rank of ``cycle`` waits in ``calls`` (aligned) on the next.
    ``state``: ``waits``, ``waited`` (until its ranks exited) or ``timeout`` (every wait
    failed, the longest after ``took_s``)."""

    shape: ClassVar[str] = "deadlock"
    cycle: Ranks
    calls: tuple[Call, ...]
    behind: tuple[Behind, ...]
    state: str
    took_s: float | None = None


@dataclass(frozen=True)
class EndedUnheard:
    """A rank that ended before it reported anything; ``code``: how its launcher says its
    process ended (exit status, minus the signal), None if it did not."""

    shape: ClassVar[str] = "ended_unheard"
    rank: int
    code: int | None


@dataclass(frozen=True)
class EndedNoGoodbye:
    """A rank that ended, as its job did, without a goodbye."""

    shape: ClassVar[str] = "ended_no_goodbye"
    rank: int
    code: int | None
    last: Call | None


@dataclass(frozen=True)
class LeftSilent:
    """A rank silent for ``silent_s`` while ranks of its job (``left``) said goodbye."""

    shape: ClassVar[str] = "left_silent"
    rank: int
    silent_s: float
    left: Ranks
    last: Call | None


@dataclass(frozen=True)
class Lost:
    """A rank silent for ``silent_s`` while others kept reporting; ``stuck``: the op each
    rank still in one is in."""

    shape: ClassVar[str] = "lost"
    rank: int
    silent_s: float
    last: Call | None
    stuck: tuple[tuple[int, Call], ...]


@dataclass(frozen=True)
class LostNode:
    """Every rank of a node (``host``) silent together while the other nodes kept reporting:
    the node, its network or its relay died. One finding for its ranks; ``stuck`` as Lost's,
    the ranks of other nodes only."""

    shape: ClassVar[str] = "lost_node"
    host: str
    ranks: tuple[int, ...]
    silent_s: float
    last: Call | None
    stuck: tuple[tuple[int, Call], ...]


@dataclass(frozen=True)
class Inside:
    """Ranks that were inside one op (``call``, made at ``where``) when their processes
    ended; ``stopped``: their launcher stopped them (SIGTERM), they did not fail of their own."""

    shape: ClassVar[str] = "inside"
    ranks: Ranks
    call: Call
    where: str | None
    stopped: bool


@dataclass(frozen=True)
class FirstEnd:
    """The first rank whose process ended, as its node's harvester saw it: how (``code``:
    its exit code, negative the signal, None unknown), ``after_ms`` after the end of its last
    op ``last`` (made at ``where``), or, ``during``, inside ``last``; then what the other ranks
    were inside when they ended."""

    shape: ClassVar[str] = "first_end"
    rank: int
    code: int | None
    after_ms: float | None
    last: Call | None
    where: str | None
    inside: tuple[Inside, ...]
    during: bool = False


@dataclass(frozen=True)
class Replaced:
    """A rank's process replaced by another (a new job) with no goodbye."""

    shape: ClassVar[str] = "replaced"
    rank: int
    job: int
    pid: int


@dataclass(frozen=True)
class Odd:
    """A rank whose call differs from the others'."""

    shape: ClassVar[str] = "odd"
    rank: int
    call: Signature
    where: str | None


@dataclass(frozen=True)
class Mismatch:
    """Ranks that called different ops at one instance: ``odd`` those that differ,
    ``same`` those that called ``call`` (at ``where``), ``out`` those not in it yet."""

    shape: ClassVar[str] = "mismatch"
    seq: int
    group: Ranks
    odd: tuple[Odd, ...]
    same: Ranks
    call: Signature
    where: str | None
    out: Ranks


@dataclass(frozen=True)
class SlowPair:
    shape: ClassVar[str] = "slow_pair"
    op: str
    src: int
    dst: int
    size: int
    median_ms: float
    ratio: float      # its median over the others'
    others_ms: float  # the other pairs' median


@dataclass(frozen=True)
class SlowGroup:
    shape: ClassVar[str] = "slow_group"
    op: str
    size: int
    group: Ranks
    median_ms: float
    ratio: float
    others_ms: float  # the median of the other groups of its size


@dataclass(frozen=True)
class Resolved:
    """A finding that ended after ``took_s``; ``job``: it ended with that job, unresolved;
    ``ended``: the facts of the finding as it was last."""

    shape: ClassVar[str] = "resolved"
    took_s: float
    job: int | None
    ended: Facts


@dataclass(frozen=True)
class Words:
    """A finding known by its words only, in English and (if it has them) Portuguese: a
    recording's ``diag`` line of version 1, made before findings were recorded as facts."""

    shape: ClassVar[str] = "words"
    en: str
    pt: str | None = None


Facts = (Straggler | Hang | Failed | P2PWait | Deadlock | EndedUnheard | EndedNoGoodbye
         | LeftSilent | Lost | LostNode | Replaced | Mismatch | SlowPair | SlowGroup | Resolved
         | Words | FirstEnd)

_SHAPES = {cls.shape: cls for cls in (
    Call, Doing, Signature, Straggler, Hang, Failed, P2PWait, Behind, Deadlock, EndedUnheard,
    EndedNoGoodbye, LeftSilent, Lost, LostNode, Replaced, Odd, Mismatch, SlowPair, SlowGroup,
    Resolved, Words, Inside, FirstEnd)}


def to_json(value: Any) -> Any:
    """Facts as JSON values: a record as an object with its ``shape``, a tuple as a list."""
    if dataclasses.is_dataclass(value):
        return {"shape": value.shape, **{f.name: to_json(getattr(value, f.name))
                                         for f in dataclasses.fields(value)}}
    if isinstance(value, tuple):
        return [to_json(v) for v in value]
    return value


def from_json(value: Any) -> Any:
    """``to_json``'s output read back as the facts it was made from."""
    if isinstance(value, dict):
        fields = {k: from_json(v) for k, v in value.items() if k != "shape"}
        return _SHAPES[value["shape"]](**fields)
    if isinstance(value, list):
        return tuple(from_json(v) for v in value)
    return value
