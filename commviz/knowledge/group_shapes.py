"""How a job's process groups are laid out, inferred from their members and the ranks' hosts.

Nothing on the wire says what a group is for: a program names its tensor-, data- and
pipeline-parallel groups in its own code. Their layout says much of it, though, because the
frameworks build them the same way (Megatron-LM's ``initialize_model_parallel``, torch's
``DeviceMesh``): the innermost dimension takes consecutive ranks, which share a node (tensor
parallel, over NVLink); an outer one takes every k-th rank, one per node (data parallel,
over the network); pipeline stages talk in pairs. So a layout is a fact and what it is for
is a guess, which the views word as one ("tensor parallel?").

A group's ``Shape`` is its own (``shape_of``: consecutive, strided, irregular), so that
statistics can be kept per shape as groups arrive; a ``Family`` is every group of one shape
in the job, with where they lie on the nodes, which depends on the other groups and on the
hosts (``families``). A point-to-point transfer's shape is its pair's distance
(``pair_shape``). Costs: O(the groups' members) for ``families``, once per change of
membership (the model caches it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

BLOCK, STRIDED, IRREGULAR, P2P = "block", "strided", "irregular", "p2p"
WITHIN, ACROSS, SPANNING, UNKNOWN = "within", "across", "spanning", "unknown"
TENSOR, DATA, PIPELINE, STAGE = "tensor", "data", "pipeline", "stage"


@dataclass(frozen=True, order=True)
class Shape:
    """A group's layout by its members alone: ``kind`` BLOCK (consecutive ranks, stride 1),
    STRIDED (every ``stride``-th rank), IRREGULAR (neither; stride 0), or P2P (transfers
    between two ranks ``stride`` apart)."""

    kind: str
    size: int
    stride: int


@dataclass(frozen=True)
class Family:
    """Every group of one shape: ``count`` groups (pairs, for P2P); ``placement`` WITHIN
    (each on one node), ACROSS (each of its ranks on another node), SPANNING (several nodes,
    several ranks on some) or UNKNOWN (a host not known yet); ``nodes``: the most nodes one
    spans; ``world``: the one group of every rank; ``guess``: what it is likely for (TENSOR,
    DATA, PIPELINE, STAGE; "" for no guess)."""

    shape: Shape
    count: int
    placement: str
    nodes: int
    world: bool
    guess: str


def shape_of(members: Sequence[int]) -> Shape:
    """The layout of a group of these global ranks (in any order)."""
    ranks = sorted(set(members))
    if len(ranks) < 2:
        return Shape(BLOCK, len(ranks), 1)
    stride = ranks[1] - ranks[0]
    if all(b - a == stride for a, b in zip(ranks, ranks[1:])):
        return Shape(BLOCK if stride == 1 else STRIDED, len(ranks), stride)
    return Shape(IRREGULAR, len(ranks), 0)


def pair_shape(src: int, dst: int) -> Shape:
    """The shape of transfers between ``src`` and ``dst``, in either direction."""
    return Shape(P2P, 2, abs(dst - src))


def families(groups: Iterable[Sequence[int]], host_of: Callable[[int], str | None],
             world: int) -> list[Family]:
    """The families of these groups (each counted once, however many times listed), whole
    world first, then by size (the innermost dimension first) and shape. ``host_of``: a
    rank's host, None where unknown; ``world``: the job's ranks."""
    members: dict[Shape, list[tuple[int, ...]]] = {}
    for group in {tuple(sorted(set(g))) for g in groups}:
        members.setdefault(shape_of(group), []).append(group)
    return _sorted([_family(shape, gs, host_of, world) for shape, gs in members.items()])


def pair_families(pairs: Iterable[tuple[int, int]],
                  host_of: Callable[[int], str | None]) -> list[Family]:
    """The families of the rank pairs that transfers went between (either direction counts
    once), by distance."""
    members: dict[Shape, list[tuple[int, ...]]] = {}
    for a, b in {(min(p), max(p)) for p in pairs if p[0] != p[1]}:
        members.setdefault(pair_shape(a, b), []).append((a, b))
    return _sorted([_family(shape, gs, host_of, 0) for shape, gs in members.items()])


def _sorted(found: list[Family]) -> list[Family]:
    return sorted(found, key=lambda f: (not f.world, f.shape.size, f.shape))


def _family(shape: Shape, groups: list[tuple[int, ...]], host_of: Callable[[int], str | None],
            world: int) -> Family:
    placements, most = set(), 0
    for group in groups:
        hosts = [host_of(r) for r in group]
        if any(h is None for h in hosts):
            placements.add(UNKNOWN)
            continue
        nodes = len(set(hosts))
        most = max(most, nodes)
        placements.add(WITHIN if nodes == 1 else ACROSS if nodes == len(group) else SPANNING)
    known = placements - {UNKNOWN}
    placement = UNKNOWN if not known else known.pop() if len(known) == 1 else SPANNING
    whole = len(groups) == 1 and shape.kind == BLOCK and shape.size == world > 1 \
        and groups[0][0] == 0
    return Family(shape, len(groups), placement, most, whole,
                  "" if whole else guess(shape, placement))


def guess(shape: Shape, placement: str) -> str:
    """What groups of this layout are likely for (see the module's doc); "" for no guess."""
    if shape.kind == P2P or (shape.size == 2 and placement != WITHIN):
        return PIPELINE
    if shape.kind == BLOCK and shape.size > 1:
        return TENSOR if placement == WITHIN else STAGE if placement != UNKNOWN else ""
    if shape.kind == STRIDED:
        return DATA
    return ""
