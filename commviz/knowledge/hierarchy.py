"""A collective of a large group, drawn as nodes: the phases its backend runs inside nodes and
across them, each drawn step standing for a counted run of real steps.

``schedules`` lists every transfer of every step: right for the 4-16 ranks of a class, but a
1,024-rank ring is 2,046 steps of 1,024 transfers (2 M objects, seconds to build) and no
screen shows it. What a person can follow at that scale is what NCCL does
(``knowledge/collectives.md``, ``network.md``):

* its **ring** is one flat ring through every node: at each of its 2(n-1) steps every GPU
  sends to the next, so inside each node P-1 hops cross NVLink and one hop per node crosses
  the network to the next node, all at once;
* its **tree** (all_reduce only) is a chain inside each node and a binary tree over the nodes:
  reduce up the chain and the tree, broadcast back down (2(P-1) + 2 log2 N steps);
* its **chain** (broadcast, reduce) runs along the ring order, pipelined;
* gloo knows no nodes: its ring runs over the ranks (towards rank-1), crossing from one host
  to the next over TCP where the ranks change host.

A ``Scaled`` schedule holds only that: each drawn step's phase, the run of real steps it stands
for, the hops inside a node (local GPU indices, the same in every node) and the hops between
nodes (node indices): O(nodes + ranks per node) a step, at most ``most`` steps. The group is
taken as N nodes of P ranks in rank order (``node_sizes``: an uneven group is drawn with its
largest node's P); the ring order, the tree's shape and the algorithm NCCL picks are assumed,
so every drawing is schematic, as are the small ones.

Pure and stdlib-only, like ``schedules``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from commviz.knowledge.schedules import (
    NCCL_BARRIER_BYTES,
    PIPELINE_CHUNKS,
    _check_backend,
    canonical_op,
)

#: Drawn steps an op is compressed into at most: at the replay's default 0.3 s a step, 30
#: steps replay in 9 s.
DRAWN_STEPS_MAX = 30

Pairs = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class ScaledStep:
    """One drawn step: real steps ``first``..``first + count - 1`` (0-based) of its phase's
    ``total``; ``within``, the hops inside every node (local indices 0..P-1), ``between``,
    the hops between nodes (node indices 0..N-1); ``reduce``: the receiver adds what
    arrives."""

    phase: str
    first: int
    count: int
    total: int
    within: Pairs
    between: Pairs
    reduce: bool

    @property
    def label(self) -> str:
        """The phase and the real steps it stands for, 1-based ("RS 69-136")."""
        last = self.first + self.count
        return f"{self.phase} {self.first + 1}" if self.count == 1 else \
            f"{self.phase} {self.first + 1}-{last}"


@dataclass(frozen=True)
class Scaled:
    """The drawing of one op over ``nodes`` nodes of ``per_node`` ranks (``n`` in all):
    ``real_steps`` real steps drawn as ``steps``. ``nodes`` is 1 where the group's hosts are
    not known or are one: then only the phases are drawn. ``uneven``: its nodes hold
    different numbers of the group's ranks."""

    op: str
    backend: str
    algorithm: str
    n: int
    nodes: int
    per_node: int
    size: int
    root: int | None
    real_steps: int
    steps: tuple[ScaledStep, ...]
    uneven: bool = False
    schematic: bool = True

    @property
    def phases(self) -> list[tuple[str, int]]:
        """Each phase and its real steps, in order."""
        return [(s.phase, s.total) for s in self.steps if s.first == 0]


@dataclass(frozen=True)
class _Phase:
    """Real steps of one kind: ``hops(first, count)`` gives the hops within and between
    nodes used in that run of them."""

    name: str
    count: int
    reduce: bool
    hops: Callable[[int, int], tuple[Pairs, Pairs]]


def node_sizes(group: Sequence[int], host_of: Callable[[int], str | None]) -> tuple[int, ...]:
    """How many of the group's ranks each of its hosts holds, hosts in the order of the
    group's ranks: what ``scaled`` draws nodes from. A rank whose host is not known (None)
    leaves the nodes unknown: one, of them all."""
    counts: dict[str, int] = {}
    for rank in group:
        host = host_of(rank)
        if host is None:
            return (len(group),)
        counts[host] = counts.get(host, 0) + 1
    return tuple(counts.values())


def scaled(op: str, backend: str, nodes: Sequence[int], size: int, root: int | None = None,
           algorithm: str = "ring", most: int = DRAWN_STEPS_MAX) -> Scaled:
    """The drawing of ``op`` on ``backend`` over a group whose nodes hold ``nodes`` ranks each,
    moving ``size`` bytes, in at most ``most`` drawn steps. ``algorithm`` "tree" draws NCCL's
    tree all_reduce (what NCCL's log may say it chose); else the ring, chain or tree the
    backend runs by default. ``root``: a group-local rank."""
    family = canonical_op(op)
    backend = _check_backend(backend)
    if not nodes or any(type(k) is not int or k < 1 for k in nodes):
        raise ValueError(f"nodes must be counts of ranks >= 1, got {nodes!r}")
    if most < 1:
        raise ValueError(f"most must be >= 1, got {most!r}")
    n, count, per = sum(nodes), len(nodes), max(nodes)
    if root is not None and not 0 <= root < n:
        raise ValueError(f"root must be a rank in 0..{n - 1}, got {root!r}")
    grid = _Grid(count, per)
    root = (root or 0) if family in ("broadcast", "reduce", "gather", "scatter") else None
    if family == "barrier" and backend == "nccl":
        family, size = "all_reduce", NCCL_BARRIER_BYTES
    name, phases = _phases(family, backend, algorithm, grid, root)
    steps = tuple(_compress(phases, most))
    return Scaled(op, backend, name, n, count, per, size, root,
                  sum(p.count for p in phases), steps, len(set(nodes)) > 1)


# ----------------------------------------------------------------------------- the node grid

@dataclass(frozen=True)
class _Grid:
    """N nodes of P ranks, rank r on node r // P at local index r % P (the schematic's
    layout: ranks in order, node by node)."""

    nodes: int
    per: int

    @property
    def n(self) -> int:
        return self.nodes * self.per

    def ring(self, towards: int) -> tuple[Pairs, Pairs]:
        """Every rank sends to rank + ``towards`` (±1): P-1 hops inside each node, one hop from
        each node to the next."""
        p, k = self.per, self.nodes
        within = tuple((g, g + towards) for g in range(p) if 0 <= g + towards < p)
        between = tuple((i, (i + towards) % k) for i in range(k)) if k > 1 else ()
        return within, between

    def project(self, pairs: Iterable[tuple[int, int]]) -> tuple[Pairs, Pairs]:
        """Rank pairs as hops inside nodes (local indices, merged over nodes) and hops between
        them (node indices)."""
        within: set[tuple[int, int]] = set()
        between: set[tuple[int, int]] = set()
        p = self.per
        for src, dst in pairs:
            if src // p == dst // p:
                within.add((src % p, dst % p))
            else:
                between.add((src // p, dst // p))
        return tuple(sorted(within)), tuple(sorted(between))


def _per_step(grid: _Grid, pairs_at: Callable[[int], Iterable[tuple[int, int]]]
              ) -> Callable[[int, int], tuple[Pairs, Pairs]]:
    """Hops of a phase of few real steps (log2 n, or one), from its rank pairs at each."""
    def hops(first: int, count: int) -> tuple[Pairs, Pairs]:
        return grid.project(pair for t in range(first, first + count) for pair in pairs_at(t))
    return hops


# ----------------------------------------------------------------------------- the phases

def _phases(family: str, backend: str, algorithm: str, grid: _Grid,
            root: int | None) -> tuple[str, list[_Phase]]:
    n = grid.n
    ring_up, ring_down = (lambda f, c: grid.ring(1)), (lambda f, c: grid.ring(-1))
    if family == "all_reduce" and backend == "nccl" and algorithm == "tree" and grid.nodes > 1:
        return "tree", _tree(grid)
    if family in ("all_reduce", "reduce_scatter") and backend == "gloo":
        ring = "all_reduce + slice" if family == "reduce_scatter" else "ring"
        return ring, [_Phase("RS", n - 1, True, ring_down), _Phase("AG", n - 1, False, ring_down)]
    if family == "all_reduce":
        return "ring", [_Phase("RS", n - 1, True, ring_up), _Phase("AG", n - 1, False, ring_up)]
    if family == "reduce_scatter":
        return "ring", [_Phase("RS", n - 1, True, ring_up)]
    if family == "all_gather":
        return "ring", [_Phase("AG", n - 1, False, ring_up)]
    if family == "broadcast" and backend == "nccl":
        assert root is not None
        return "chain", [_Phase("pipe", PIPELINE_CHUNKS + n - 2, False, _chain(grid, root))]
    if family == "reduce" and backend == "nccl":
        assert root is not None
        return "chain", [_Phase("pipe", PIPELINE_CHUNKS + n - 2, True,
                                _chain(grid, (root + 1) % n))]
    if family == "broadcast":  # gloo's binomial tree over vrank = (rank - root) mod n
        assert root is not None
        rounds = math.ceil(math.log2(n)) if n > 1 else 0
        return "binomial tree", [_Phase("tree", rounds, False, _per_step(grid, lambda k: (
            ((v + root) % n, (v + (1 << k) + root) % n)
            for v in range(min(1 << k, n - (1 << k))))))]
    if family == "reduce":  # gloo: the ring reduce-scatter, then each chunk to the root
        assert root is not None
        return "ring reduce-scatter + gather", [
            _Phase("RS", n - 1, True, ring_down),
            _Phase("to root", 1, False, _per_step(grid, lambda k: (
                (r, root) for r in range(n) if r != root)))]
    if family in ("gather", "scatter"):
        assert root is not None
        inward = family == "gather"
        return "flat" if backend == "gloo" else "grouped send/recv", [
            _Phase(family, 1, False, _per_step(grid, lambda k: (
                (r, root) if inward else (root, r) for r in range(n) if r != root)))]
    if family == "all_to_all":
        return "pairwise" if backend == "gloo" else "grouped send/recv", \
            [_Phase("pair", n - 1, False, _pairwise(grid))]
    if family == "barrier":  # gloo's dissemination: round k, rank r notifies r + 2^k
        rounds = math.ceil(math.log2(n)) if n > 1 else 0
        return "dissemination", [_Phase("round", rounds, True, _per_step(grid, lambda k: (
            (r, (r + (1 << k)) % n) for r in range(n))))]
    if family == "monitored_barrier":
        if backend != "gloo":
            raise ValueError("monitored_barrier exists only on gloo")
        return "flat (rank 0 coordinates)", [
            _Phase("check in", 1, True, _per_step(grid, lambda k: ((r, 0) for r in range(1, n)))),
            _Phase("release", 1, False, _per_step(grid, lambda k: ((0, r) for r in range(1, n))))]
    raise ValueError(f"{family} has no schedule of its own at scale")


def _tree(grid: _Grid) -> list[_Phase]:
    """NCCL's tree all_reduce: the chain inside each node to its first GPU, a binary tree over
    the nodes (node i's parent is (i-1)//2; NCCL builds two mirrored trees and splits the data
    between them: one is drawn), then the same back down."""
    p, k = grid.per, grid.nodes
    depth = max(1, math.ceil(math.log2(k + 1)) - 1)  # levels below the tree's root node

    def level(d: int) -> Pairs:  # node pairs (child, parent) of the children at depth d
        return tuple((i, (i - 1) // 2) for i in range(2 ** d - 1, min(k, 2 ** (d + 1) - 1)))

    def chain_up(first: int, count: int) -> tuple[Pairs, Pairs]:
        return tuple((g, g - 1) for g in range(p - 1 - first, p - 1 - first - count, -1)), ()

    def tree_up(first: int, count: int) -> tuple[Pairs, Pairs]:
        return (), tuple(pair for d in range(depth - first, depth - first - count, -1)
                         for pair in level(d))

    def tree_down(first: int, count: int) -> tuple[Pairs, Pairs]:
        return (), tuple((b, a) for d in range(first + 1, first + count + 1)
                         for a, b in level(d))

    def chain_down(first: int, count: int) -> tuple[Pairs, Pairs]:
        return tuple((g, g + 1) for g in range(first, first + count)), ()

    phases = [_Phase("up node", p - 1, True, chain_up), _Phase("up tree", depth, True, tree_up),
              _Phase("down tree", depth, False, tree_down),
              _Phase("down node", p - 1, False, chain_down)]
    return [phase for phase in phases if phase.count]


def _chain(grid: _Grid, start: int) -> Callable[[int, int], tuple[Pairs, Pairs]]:
    """NCCL's pipelined chain start -> start+1 -> ... (n-1 hops, PIPELINE_CHUNKS chunks): at
    pipeline step t, hop h carries chunk t-h, so real steps first..last use hops
    first-m+1..last; of those, each that crosses into a node is a hop between nodes."""
    n, p, m = grid.n, grid.per, PIPELINE_CHUNKS

    def hops(first: int, count: int) -> tuple[Pairs, Pairs]:
        lo, hi = max(0, first - m + 1), min(n - 2, first + count - 1)
        if hi < lo:
            return (), ()
        within = {((start + h) % p, (start + h + 1) % p)
                  for h in range(lo, min(hi, lo + p) + 1) if (start + h + 1) % p}
        # hop h crosses into a node where rank start+h+1 is a node's first
        first_cross = lo + (-(start + lo + 1)) % p
        between = tuple((((start + h) % n) // p, ((start + h + 1) % n) // p)
                        for h in range(first_cross, hi + 1, p))
        return tuple(sorted(within)), between
    return hops


def _pairwise(grid: _Grid) -> Callable[[int, int], tuple[Pairs, Pairs]]:
    """all_to_all's rounds: in round i (1..n-1) rank r sends to r+i, that is from node a to
    nodes a + (g+i) // P over its local indices g."""
    p, k = grid.per, grid.nodes

    def hops(first: int, count: int) -> tuple[Pairs, Pairs]:
        lo, hi = first + 1, first + count
        within = tuple((g, g + i) for i in range(lo, min(hi, p - 1) + 1) for g in range(p - i))
        offsets = sorted({q % k for q in range(lo // p, (hi + p - 1) // p + 1)} - {0})
        return within, tuple((a, (a + q) % k) for q in offsets for a in range(k))
    return hops


# ----------------------------------------------------------------------------- compression

def _compress(phases: list[_Phase], most: int) -> Iterable[ScaledStep]:
    """Each phase's real steps cut into runs, at least one drawn step a phase and at most one
    a real step, sharing ``most`` by the phases' lengths."""
    phases = [p for p in phases if p.count]
    total = sum(p.count for p in phases)
    if total <= most:
        shares = [p.count for p in phases]
    else:
        shares = [max(1, min(p.count, math.floor(most * p.count / total))) for p in phases]
        while sum(shares) < most:  # the rest to the phases drawn with the longest runs
            i = max(range(len(phases)), key=lambda j: phases[j].count / shares[j])
            shares[i] += 1
    for phase, drawn in zip(phases, shares):
        bounds = [phase.count * j // drawn for j in range(drawn + 1)]
        for first, end in zip(bounds, bounds[1:]):
            within, between = phase.hops(first, end - first)
            yield ScaledStep(phase.name, first, end - first, phase.count, within, between,
                             phase.reduce)
