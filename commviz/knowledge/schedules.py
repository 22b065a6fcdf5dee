"""Which rank sends which chunk to whom at each step of a collective, per backend.

The ranks report only when each operation starts and ends on each rank; the backends do not
report their inner steps. To teach what happens inside, the view animates the algorithm the
backend really runs (gloo as PyTorch's CPU default uses it, NCCL's ring/chain kernels), as
described in ``knowledge/collectives.md``. These schedules are therefore *schematic*: true to
the algorithm's directions, chunking and step order, while the measured start/end times stay
the ground truth. Each schedule's ``note`` says in one line what is simplified.

Everything here is pure (stdlib only) so the model and the tests use it without a UI.

Conventions:

* ranks are group-local, ``0..n-1``; ``size`` is nccl-tests' S for the op (see
  ``bandwidth.size_of``), so the bytes the schedule moves match the bus-bandwidth factors;
* a buffer that is cut into ``chunks`` parts is cut as evenly as possible, the first
  ``size % chunks`` parts one byte larger;
* transfers within one step happen at the same time: what a rank sends at step k is what it
  held after step k-1;
* ``reduce=True`` means the receiver combines what arrives with what it holds. Barriers use
  it too: what they combine is the knowledge of which ranks have arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

BACKENDS = ("gloo", "nccl")

#: Chunks that NCCL's pipelined chain (broadcast, reduce) is drawn with. NCCL pipelines in
#: many slices; four are enough to show the pipeline filling and draining.
PIPELINE_CHUNKS = 4

#: Bytes of the tensor PyTorch all-reduces to implement an NCCL barrier (one float32).
NCCL_BARRIER_BYTES = 4

#: Bytes of the token each rank exchanges with rank 0 in gloo's monitored_barrier (one int64).
MONITORED_BARRIER_BYTES = 8

_FIXED_SIZE = {("barrier", "gloo"): 0, ("barrier", "nccl"): NCCL_BARRIER_BYTES,
               ("monitored_barrier", "gloo"): MONITORED_BARRIER_BYTES}

# Every op name of the wire protocol (``protocol.OPS``), mapped to the family of algorithm
# that moves its data. Kept here rather than imported so this module stays stdlib-only; a test
# checks that it covers ``protocol.OPS``.
_FAMILY: dict[str, str] = {
    "send": "send", "isend": "send", "send_object_list": "send",
    "recv": "recv", "irecv": "recv", "recv_object_list": "recv",
    "broadcast": "broadcast", "broadcast_object_list": "broadcast",
    "all_reduce": "all_reduce",
    "reduce": "reduce",
    "all_gather": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_single": "all_gather", "all_gather_object": "all_gather",
    "gather": "gather", "gather_object": "gather",
    "scatter": "scatter", "scatter_object_list": "scatter",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "all_to_all": "all_to_all", "all_to_all_single": "all_to_all",
    "barrier": "barrier",
    "monitored_barrier": "monitored_barrier",
    "batch_isend_irecv": "batch_isend_irecv",
}

#: Families whose ``root`` argument matters.
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
#: Families whose transfers combine data (``Transfer.reduce``); barriers combine arrivals.
REDUCING = frozenset({"all_reduce", "reduce_scatter", "reduce", "barrier", "monitored_barrier"})
#: Point-to-point families: drawn as the pair 0 -> 1.
P2P = frozenset({"send", "recv"})

_OBJECT_NOTE = {
    "send": "send_object_list also sends the pickled sizes first; only the payload is drawn",
    "recv": "recv_object_list also receives the pickled sizes first; only the payload is drawn",
    "broadcast": "broadcast_object_list first broadcasts the pickled sizes; "
                 "only the payload broadcast is drawn",
    "all_gather": "all_gather_object first all-gathers the pickled sizes, then padded "
                  "payloads; only the payload all_gather is drawn",
    "gather": "gather_object first all-gathers the pickled sizes; only the payload gather "
              "is drawn",
    "scatter": "scatter_object_list also broadcasts the largest size and scatters the sizes; "
               "only the payload scatter is drawn",
}


@dataclass(frozen=True)
class Transfer:
    """One message: ``src`` sends chunk ``chunk`` (``nbytes`` bytes) to ``dst``."""

    src: int
    dst: int
    chunk: int
    nbytes: int
    reduce: bool


@dataclass(frozen=True)
class Step:
    """Transfers that happen together; ``label`` is what the screen shows for the step."""

    label: str
    transfers: tuple[Transfer, ...]


@dataclass(frozen=True)
class Schedule:
    """The whole plan of one op: algorithm, chunking and steps, plus what is simplified."""

    op: str
    backend: str
    algorithm: str
    n: int
    size: int
    root: int | None
    chunks: int
    steps: tuple[Step, ...]
    schematic: bool
    note: str


def canonical_op(op: str) -> str:
    """The algorithm family of a protocol op name, e.g. ``isend`` -> ``send``.

    Object collectives map to the tensor collective that carries their payload.
    """
    try:
        return _FAMILY[op]
    except KeyError:
        raise ValueError(f"unknown op {op!r}; known ops: {', '.join(sorted(_FAMILY))}") from None


def schedule(op: str, backend: str, n: int, size: int, root: int | None = None) -> Schedule:
    """The steps ``backend`` runs for ``op`` over ``n`` ranks moving ``size`` bytes (S).

    ``root`` is used by broadcast, reduce, gather and scatter (default 0). Point-to-point ops
    ignore it: they are drawn as the pair 0 (sender) -> 1 (receiver), whatever the group size.
    """
    family = canonical_op(op)
    backend = _check_backend(backend)
    if type(n) is not int or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    if type(size) is not int or size < 0:
        raise ValueError(f"size must be an int >= 0, got {size!r}")
    if root is not None and (type(root) is not int or not 0 <= root < n):
        raise ValueError(f"root must be a rank in 0..{n - 1}, got {root!r}")
    if family == "batch_isend_irecv":
        raise ValueError("batch_isend_irecv has no schedule of its own: "
                         "its isend/irecv are reported, and scheduled, one by one")
    if family == "monitored_barrier" and backend != "gloo":
        raise ValueError("monitored_barrier exists only on gloo")
    if family in ROOTED:
        root = 0 if root is None else root
    else:
        root = None
    # Barriers move fixed tokens whatever S the caller measured.
    size = _FIXED_SIZE.get((family, backend), size)
    build = _OP_BUILDERS.get((op, backend)) or _BUILDERS[(family, backend)]
    algorithm, chunks, steps, note = build(n, size, root)
    if n == 1:
        steps = []
        note = f"{note}; one rank: nothing moves"
    if "object" in op:
        note = f"{note}; {_OBJECT_NOTE[family]}"
    schematic = not (family in P2P and "object" not in op)
    return Schedule(op, backend, algorithm, n, size, root, chunks, tuple(steps), schematic, note)


def holdings(s: Schedule) -> list[list[dict[int, frozenset[int]]]]:
    """What each rank holds before the first step and after each step.

    ``result[k][r][c]`` is the set of ranks whose contribution rank ``r``'s copy of chunk
    ``c`` carries after step k (k = 0: the initial state). It is what the view colours chunks
    by, and what the tests check each op's definition against. Raises ValueError when a
    schedule makes a rank send a chunk it does not hold.
    """
    state = _initial(s)
    states = [state]
    for step in s.steps:
        new = [dict(rank) for rank in state]
        for t in step.transfers:
            if t.chunk not in state[t.src]:
                raise ValueError(f"{s.op} {step.label!r}: rank {t.src} sends chunk {t.chunk} "
                                 "it does not hold")
            sent = state[t.src][t.chunk]
            if t.reduce:
                new[t.dst][t.chunk] = new[t.dst].get(t.chunk, frozenset()) | sent
            else:
                new[t.dst][t.chunk] = sent
        state = new
        states.append(state)
    return states


# ----------------------------------------------------------------------------- helpers

_Built = tuple[str, int, list[Step], str]


def _check_backend(backend: str) -> str:
    name = backend.lower() if isinstance(backend, str) else backend
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: schedules exist for "
                         f"{' and '.join(BACKENDS)} only")
    return name


def split(size: int, parts: int) -> list[int]:
    """Bytes of each of ``parts`` near-equal chunks of ``size`` (first ones larger)."""
    base, extra = divmod(size, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _initial(s: Schedule) -> list[dict[int, frozenset[int]]]:
    """Who holds what before anything moves, per the op's definition."""
    n, family = s.n, canonical_op(s.op)
    every = range(s.chunks)
    if family in REDUCING:  # each rank holds its own contribution to every chunk
        return [{c: frozenset({r}) for c in every} for r in range(n)]
    if family in ("all_gather", "gather"):  # rank r holds block r
        return [{r: frozenset({r})} for r in range(n)]
    if family in ("broadcast", "scatter"):  # only the root holds data
        return [{c: frozenset({r}) for c in every} if r == s.root else {} for r in range(n)]
    if family == "all_to_all":  # chunk s*n+d: the block s sends to d
        return [{r * n + d: frozenset({r}) for d in range(n)} for r in range(n)]
    # point-to-point: the sender (0) holds the buffer
    return [{c: frozenset({0}) for c in every} if r == 0 else {} for r in range(n)]


def _ring_steps(n: int, sizes: list[int], label: str, first: int, count: int,
                towards: int, chunk_of: Callable[[int, int], int], reduce: bool) -> list[Step]:
    """``count`` ring steps where rank r sends ``chunk_of(r, k)`` to ``r + towards``."""
    steps = []
    for k in range(count):
        transfers = []
        for r in range(n):
            c = chunk_of(r, k) % n
            transfers.append(Transfer(r, (r + towards) % n, c, sizes[c], reduce))
        steps.append(Step(f"{label}{first + k}", tuple(transfers)))
    return steps


# ----------------------------------------------------------------------------- all_reduce

def _gloo_all_reduce_steps(n: int, sizes: list[int]) -> list[Step]:
    """gloo's ring: every rank sends to r-1, so rank r ends the reduce-scatter owning chunk r.

    RS k: rank r sends chunk r+1+k (its running partial sum) to r-1, which adds its own.
    AG k: rank r sends chunk r+k (complete) to r-1, which stores it.
    """
    rs = _ring_steps(n, sizes, "RS", 0, n - 1, -1, lambda r, k: r + 1 + k, True)
    ag = _ring_steps(n, sizes, "AG", 0, n - 1, -1, lambda r, k: r + k, False)
    return rs + ag


def _nccl_all_reduce_steps(n: int, sizes: list[int]) -> list[Step]:
    """NCCL's fused ring pass, r -> r+1: n-1 reduce-scatter steps then n-1 all-gather steps.

    RS k: rank r sends its partial of chunk r-1-k; after RS(n-2) rank r has chunk r complete.
    AG k: rank r sends chunk r-k: first its own complete chunk, then the ones it received.
    """
    rs = _ring_steps(n, sizes, "RS", 0, n - 1, 1, lambda r, k: r - 1 - k, True)
    ag = _ring_steps(n, sizes, "AG", 0, n - 1, 1, lambda r, k: r - k, False)
    return rs + ag


def _gloo_all_reduce(n: int, size: int, root: int | None) -> _Built:
    return ("ring", n, _gloo_all_reduce_steps(n, split(size, n)),
            "gloo ring all_reduce (sends to rank-1): each chunk is also pipelined in "
            "2 segments, drawn as one")


def _nccl_all_reduce(n: int, size: int, root: int | None) -> _Built:
    return ("ring", n, _nccl_all_reduce_steps(n, split(size, n)),
            "NCCL ring all_reduce, one channel, ring 0->1->..->n-1 assumed (the real order is "
            "in NCCL's INIT log; NCCL may pick TREE/NVLS instead); slices drawn as one chunk")


# ----------------------------------------------------------------------------- all_gather

def _all_gather_steps(n: int, sizes: list[int]) -> list[Step]:
    """Ring r -> r+1: step k, rank r forwards block r-k (its own at step 0)."""
    return _ring_steps(n, sizes, "AG", 0, n - 1, 1, lambda r, k: r - k, False)


def _gloo_all_gather(n: int, size: int, root: int | None) -> _Built:
    return ("ring", n, _all_gather_steps(n, split(size, n)),
            "gloo ring all_gather (sends to rank+1): each block moves in 2 halves, drawn as one")


def _nccl_all_gather(n: int, size: int, root: int | None) -> _Built:
    return ("ring", n, _all_gather_steps(n, split(size, n)),
            "NCCL ring all_gather, one channel, ring 0->1->..->n-1 assumed; "
            "slices drawn as one block")


# ----------------------------------------------------------------------------- reduce_scatter

def _gloo_reduce_scatter(n: int, size: int, root: int | None) -> _Built:
    """gloo has no reduce-scatter kernel: for the one-tensor forms (reduce_scatter_single and
    reduce_scatter_tensor) PyTorch all-reduces the whole input once and keeps a slice."""
    return ("all_reduce + slice", n, _gloo_all_reduce_steps(n, split(size, n)),
            "gloo reduce_scatter runs the full ring all_reduce (2(n-1) steps) and each rank "
            "keeps chunk[rank]; segments drawn as one")


PER_BLOCK = "all_reduce per block"  # the algorithm of gloo's list-form reduce_scatter


def _gloo_reduce_scatter_list(n: int, size: int, root: int | None) -> _Built:
    """The list form on gloo: ProcessGroupGloo::reduce_scatter all-reduces each of the n
    input blocks on its own (Flight Recorder shows n all_reduces of one block), then rank r
    keeps block r. Chunk b*n + c is part c of block b."""
    steps = []
    for b, block in enumerate(split(size, n)):
        for step in _gloo_all_reduce_steps(n, split(block, n)):
            moved = tuple(replace(t, chunk=b * n + t.chunk) for t in step.transfers)
            steps.append(Step(f"b{b} {step.label}", moved))
    return (PER_BLOCK, n * n, steps,
            "gloo reduce_scatter (list form) runs n ring all_reduces, one per block "
            "(2(n-1) steps each), drawn one after another, and each rank r keeps block r; "
            "chunk b*n+c is part c of block b; segments drawn as one")


def _nccl_reduce_scatter(n: int, size: int, root: int | None) -> _Built:
    """The reduce-scatter half of NCCL's ring: rank r sends partial chunk r-1-k to r+1."""
    steps = _ring_steps(n, split(size, n), "RS", 0, n - 1, 1, lambda r, k: r - 1 - k, True)
    return ("ring", n, steps,
            "NCCL ring reduce_scatter, one channel, ring 0->1->..->n-1 assumed; "
            "slices drawn as one block")


# ----------------------------------------------------------------------------- broadcast

def _gloo_broadcast(n: int, size: int, root: int | None) -> _Built:
    """Binomial tree over vrank = (rank - root) mod n: the set of holders doubles each step."""
    assert root is not None
    steps = []
    d, k = 1, 0
    while d < n:
        transfers = tuple(Transfer((v + root) % n, (v + d + root) % n, 0, size, False)
                          for v in range(min(d, n - d)))
        steps.append(Step(f"tree {k}", transfers))
        d, k = d * 2, k + 1
    return ("binomial tree", 1, steps,
            "gloo binomial-tree broadcast over vrank=(rank-root) mod n; "
            "the whole buffer moves at each hop")


def _chain(n: int, size: int, start: int, reduce: bool) -> tuple[int, list[Step]]:
    """A pipelined chain start -> start+1 -> ... over n-1 hops with m chunks.

    At pipeline step t, hop h carries chunk t-h, so m + n - 2 steps in all.
    """
    m = max(1, min(PIPELINE_CHUNKS, size))
    sizes = split(size, m)
    hops = n - 1
    steps = []
    for t in range(m + hops - 1 if hops else 0):
        transfers = tuple(Transfer((start + h) % n, (start + h + 1) % n, t - h, sizes[t - h],
                                   reduce) for h in range(hops) if 0 <= t - h < m)
        steps.append(Step(f"pipe {t}", transfers))
    return m, steps


def _nccl_broadcast(n: int, size: int, root: int | None) -> _Built:
    assert root is not None
    m, steps = _chain(n, size, root, False)
    return ("chain", m, steps,
            f"NCCL pipelined chain from the root along ring order, drawn with {m} chunk(s) "
            "(NCCL uses many slices)")


# ----------------------------------------------------------------------------- reduce

def _gloo_reduce(n: int, size: int, root: int | None) -> _Built:
    """gloo: the ring reduce-scatter (towards r-1), then each rank sends its chunk to root."""
    assert root is not None
    sizes = split(size, n)
    steps = _ring_steps(n, sizes, "RS", 0, n - 1, -1, lambda r, k: r + 1 + k, True)
    if n > 1:
        steps.append(Step("to root", tuple(Transfer(r, root, r, sizes[r], False)
                                           for r in range(n) if r != root)))
    return ("ring reduce-scatter + gather", n, steps,
            "gloo reduce: ring reduce-scatter (sends to rank-1), then every rank sends its "
            "reduced chunk to the root; segments drawn as one")


def _nccl_reduce(n: int, size: int, root: int | None) -> _Built:
    """A chain that starts at root+1 and ends at root, each hop adding its own data."""
    assert root is not None
    m, steps = _chain(n, size, root + 1, True)
    return ("chain", m, steps,
            f"NCCL pipelined chain root+1 -> .. -> root along ring order, drawn with {m} "
            "chunk(s) (NCCL uses many slices)")


# ----------------------------------------------------------------------------- gather / scatter

def _flat(n: int, size: int, root: int, to_root: bool, label: str) -> list[Step]:
    """The root posts its n-1 receives (or sends) at once: one step, block r for rank r."""
    sizes = split(size, n)
    transfers = tuple(Transfer(r, root, r, sizes[r], False) if to_root
                      else Transfer(root, r, r, sizes[r], False)
                      for r in range(n) if r != root)
    return [Step(label, transfers)]


def _gather(backend: str) -> Callable[[int, int, int | None], _Built]:
    def build(n: int, size: int, root: int | None) -> _Built:
        assert root is not None
        if backend == "gloo":
            return ("flat", n, _flat(n, size, root, True, "gather"),
                    "gloo gather: the root posts all n-1 receives at once")
        return ("grouped send/recv", n, _flat(n, size, root, True, "gather"),
                "NCCL has no gather kernel: PyTorch groups n-1 send/recv to the root")
    return build


def _scatter(backend: str) -> Callable[[int, int, int | None], _Built]:
    def build(n: int, size: int, root: int | None) -> _Built:
        assert root is not None
        if backend == "gloo":
            return ("flat", n, _flat(n, size, root, False, "scatter"),
                    "gloo scatter: the root posts all n-1 sends at once")
        return ("grouped send/recv", n, _flat(n, size, root, False, "scatter"),
                "NCCL has no scatter kernel: PyTorch groups n-1 send/recv from the root")
    return build


# ----------------------------------------------------------------------------- all_to_all

def _pairwise(n: int, size: int) -> list[Step]:
    """Round i: rank r sends the block meant for r+i (chunk r*n + (r+i)) to r+i."""
    sizes = split(size, n)
    steps = []
    for i in range(1, n):
        transfers = tuple(Transfer(r, (r + i) % n, r * n + (r + i) % n, sizes[(r + i) % n],
                                   False) for r in range(n))
        steps.append(Step(f"pair +{i}", transfers))
    return steps


def _gloo_all_to_all(n: int, size: int, root: int | None) -> _Built:
    return ("pairwise", n * n, _pairwise(n, size),
            "gloo posts all n-1 sends (to r+i) at once; drawn as n-1 rounds; "
            "chunk s*n+d is the block s sends to d")


def _nccl_all_to_all(n: int, size: int, root: int | None) -> _Built:
    return ("grouped send/recv", n * n, _pairwise(n, size),
            "NCCL has no all_to_all kernel: PyTorch groups n-1 send/recv per rank, drawn as "
            "n-1 rounds; chunk s*n+d is the block s sends to d")


# ----------------------------------------------------------------------------- barriers

def _gloo_barrier(n: int, size: int, root: int | None) -> _Built:
    """Dissemination: in round k rank r notifies r+2^k; after ceil(log2 n) rounds all know."""
    steps = []
    d, k = 1, 0
    while d < n:
        steps.append(Step(f"round {k}", tuple(Transfer(r, (r + d) % n, 0, 0, True)
                                              for r in range(n))))
        d, k = d * 2, k + 1
    return ("dissemination", 1, steps,
            "gloo dissemination barrier: 0-byte notifications; holdings track who has arrived")


def _nccl_barrier(n: int, size: int, root: int | None) -> _Built:
    """PyTorch implements an NCCL barrier as an all_reduce of one float32."""
    return ("ring all_reduce", n, _nccl_all_reduce_steps(n, split(NCCL_BARRIER_BYTES, n)),
            f"NCCL barrier = all_reduce of a {NCCL_BARRIER_BYTES}-byte tensor, drawn as the "
            "ring all_reduce (NCCL likely picks TREE/LL for so few bytes)")


def _gloo_monitored_barrier(n: int, size: int, root: int | None) -> _Built:
    """Rank 0 receives a token from every rank, then sends one back to each."""
    b = MONITORED_BARRIER_BYTES
    steps = []
    if n > 1:
        steps = [Step("check in", tuple(Transfer(r, 0, 0, b, True) for r in range(1, n))),
                 Step("release", tuple(Transfer(0, r, 0, b, False) for r in range(1, n)))]
    return ("flat (rank 0 coordinates)", 1, steps,
            f"gloo monitored_barrier: {b}-byte send/recv to and from rank 0; "
            "holdings track who has arrived")


# ----------------------------------------------------------------------------- point-to-point

def _p2p(n: int, size: int, root: int | None) -> _Built:
    steps = [Step("send", (Transfer(0, 1, 0, size, False),))] if n > 1 else []
    return ("direct", 1, steps,
            "point-to-point drawn as the pair 0 (sender) -> 1 (receiver); map to real ranks")


_BUILDERS: dict[tuple[str, str], Callable[[int, int, int | None], _Built]] = {
    ("all_reduce", "gloo"): _gloo_all_reduce, ("all_reduce", "nccl"): _nccl_all_reduce,
    ("all_gather", "gloo"): _gloo_all_gather, ("all_gather", "nccl"): _nccl_all_gather,
    ("reduce_scatter", "gloo"): _gloo_reduce_scatter,
    ("reduce_scatter", "nccl"): _nccl_reduce_scatter,
    ("broadcast", "gloo"): _gloo_broadcast, ("broadcast", "nccl"): _nccl_broadcast,
    ("reduce", "gloo"): _gloo_reduce, ("reduce", "nccl"): _nccl_reduce,
    ("gather", "gloo"): _gather("gloo"), ("gather", "nccl"): _gather("nccl"),
    ("scatter", "gloo"): _scatter("gloo"), ("scatter", "nccl"): _scatter("nccl"),
    ("all_to_all", "gloo"): _gloo_all_to_all, ("all_to_all", "nccl"): _nccl_all_to_all,
    ("barrier", "gloo"): _gloo_barrier, ("barrier", "nccl"): _nccl_barrier,
    ("monitored_barrier", "gloo"): _gloo_monitored_barrier,
    ("send", "gloo"): _p2p, ("send", "nccl"): _p2p,
    ("recv", "gloo"): _p2p, ("recv", "nccl"): _p2p,
}

#: Ops whose algorithm differs from their family's on a backend, looked up first.
_OP_BUILDERS: dict[tuple[str, str], Callable[[int, int, int | None], _Built]] = {
    ("reduce_scatter", "gloo"): _gloo_reduce_scatter_list,
}
