"""Collective schedules: bytes, final holdings, directions and step counts per backend.

Expected values are computed here from the algorithms' definitions in
``knowledge/collectives.md``, never by calling back into the module under test.
"""

import math

import pytest

from commviz.knowledge import schedules
from commviz.knowledge.schedules import (
    REDUCING,
    Schedule,
    Transfer,
    canonical_op,
    holdings,
    schedule,
)
from commviz.wire import protocol

NS = range(1, 17)
BACKENDS = ("gloo", "nccl")
FAMILIES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather",
            "scatter", "all_to_all", "barrier", "send", "recv")
ROOTED = ("broadcast", "reduce", "gather", "scatter")


def S(n: int, k: int = 3) -> int:
    return n * 1024 * k


def roots(n: int) -> list[int]:
    return sorted({0, n - 1, n // 2})


def cases():
    """Every (family, backend, n, root) combination the tests sweep."""
    for family in FAMILIES:
        for backend in BACKENDS:
            for n in NS:
                for root in (roots(n) if family in ROOTED else [None]):
                    yield family, backend, n, root


def sent(s: Schedule) -> list[int]:
    out = [0] * s.n
    for step in s.steps:
        for t in step.transfers:
            out[t.src] += t.nbytes
    return out


def received(s: Schedule) -> list[int]:
    out = [0] * s.n
    for step in s.steps:
        for t in step.transfers:
            out[t.dst] += t.nbytes
    return out


def table(s: Schedule) -> list[list[tuple[int, int, int]]]:
    return [[(t.src, t.dst, t.chunk) for t in step.transfers] for step in s.steps]


def log2_ceil(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


# --------------------------------------------------------------------------- 1. bytes


@pytest.mark.parametrize("backend", BACKENDS)
def test_ring_bytes_per_rank(backend):
    for n in NS:
        size = n * S(n)  # gloo's list-form reduce_scatter cuts S in n x n parts
        assert sent(schedule("all_reduce", backend, n, size)) == [2 * (n - 1) * size // n] * n
        assert sent(schedule("all_gather", backend, n, size)) == [(n - 1) * size // n] * n
        assert received(schedule("all_gather", backend, n, size)) == [(n - 1) * size // n] * n
        factor = 2 if backend == "gloo" else 1  # gloo: all_reduce(s) + slice
        for op in ("reduce_scatter", "reduce_scatter_single"):
            assert sent(schedule(op, backend, n, size)) == [factor * (n - 1) * size // n] * n


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_to_all_bytes(backend):
    for n in NS:
        size = S(n)
        s = schedule("all_to_all", backend, n, size)
        assert sent(s) == received(s) == [(n - 1) * size // n] * n


@pytest.mark.parametrize("backend", BACKENDS)
def test_rooted_bytes(backend):
    for n in NS:
        size = S(n)
        for root in roots(n):
            others = [r for r in range(n) if r != root]
            g = schedule("gather", backend, n, size, root)
            assert received(g)[root] == (n - 1) * size // n
            assert all(sent(g)[r] == size // n for r in others)
            sc = schedule("scatter", backend, n, size, root)
            assert sent(sc)[root] == (n - 1) * size // n
            assert all(received(sc)[r] == size // n for r in others)

            b = schedule("broadcast", backend, n, size, root)
            assert received(b)[root] == 0
            assert all(received(b)[r] == size for r in others)  # each non-root gets it once
            assert sum(sent(b)) == (n - 1) * size
            if backend == "gloo":  # binomial tree: the root sends in every round
                assert sent(b)[root] == log2_ceil(n) * size
            else:  # chain: everyone but the last rank of the chain forwards the whole buffer
                last = (root - 1) % n
                assert sent(b) == [0 if r == last or n == 1 else size for r in range(n)]

            red = schedule("reduce", backend, n, size, root)
            if backend == "gloo":  # ring reduce-scatter, then each chunk to the root
                assert sent(red)[root] == (n - 1) * size // n
                assert all(sent(red)[r] == size for r in others)
            else:  # chain root+1 -> .. -> root
                assert sent(red)[root] == 0 and all(sent(red)[r] == size for r in others)
                assert received(red)[root] == (size if n > 1 else 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_uneven_sizes_are_conserved(backend):
    for n in NS:
        for size in (0, 1, 7, 1000, 4097):
            assert sum(sent(schedule("all_reduce", backend, n, size))) == 2 * (n - 1) * size
            assert sum(sent(schedule("all_gather", backend, n, size))) == (n - 1) * size
            ag = schedule("all_gather", backend, n, size)
            assert sum(received(ag)) == (n - 1) * size
            b = schedule("broadcast", backend, n, size, 0)
            assert all(received(b)[r] == size for r in range(1, n))


@pytest.mark.parametrize("backend", BACKENDS)
def test_p2p_moves_size_from_0_to_1(backend):
    for op in ("send", "recv", "isend", "irecv"):
        s = schedule(op, backend, 2, 4096)
        assert table(s) == [[(0, 1, 0)]]
        assert s.steps[0].transfers[0].nbytes == 4096 and not s.schematic
        assert schedule(op, backend, 1, 4096).steps == ()
    assert schedule("send_object_list", "gloo", 2, 10).schematic


def test_barrier_bytes():
    for n in NS:
        g = schedule("barrier", "gloo", n, 123)
        assert sent(g) == [0] * n and all(len(st.transfers) == n for st in g.steps)
        assert sum(received(schedule("barrier", "nccl", n, 0))) == 2 * (n - 1) * 4  # 1 float32


# --------------------------------------------------------------------------- 2. final holdings


def check_final(family: str, n: int, root, final, backend: str) -> None:
    everyone = frozenset(range(n))
    if family == "all_reduce":
        assert all(final[r] == {c: everyone for c in range(n)} for r in range(n))
    elif family == "all_gather":
        assert all(final[r] == {c: frozenset({c}) for c in range(n)} for r in range(n))
    elif family == "reduce_scatter":  # gloo's list form: chunk b*n + c is part c of block b
        parts = n if (family, backend) == ("reduce_scatter", "gloo") else 1
        assert all(final[r][r * parts + c] == everyone for r in range(n) for c in range(parts))
    elif family == "broadcast":
        assert all(final[r] and set(final[r].values()) == {frozenset({root})} for r in range(n))
        assert all(final[r].keys() == final[root].keys() for r in range(n))
    elif family == "reduce":
        assert final[root] and all(v == everyone for v in final[root].values())
    elif family == "gather":
        assert final[root] == {c: frozenset({c}) for c in range(n)}
    elif family == "scatter":
        assert all(final[r].get(r) == frozenset({root}) for r in range(n))
    elif family == "all_to_all":
        for r in range(n):
            assert all(final[r].get(s * n + r) == frozenset({s}) for s in range(n))
    elif family == "barrier":  # every rank has heard, transitively, from every rank
        assert all(frozenset().union(*final[r].values()) == everyone for r in range(n))
    elif family in ("send", "recv"):
        if n > 1:
            assert final[1] == {0: frozenset({0})}
    else:
        raise AssertionError(family)


def test_final_holdings_match_definitions():
    for family, backend, n, root in cases():
        s = schedule(family, backend, n, S(n), root)
        check_final(family, n, root, holdings(s)[-1], backend)


def test_monitored_barrier_final_holdings():
    for n in NS:
        final = holdings(schedule("monitored_barrier", "gloo", n, 0))[-1]
        assert all(final[r][0] == frozenset(range(n)) for r in range(n))


def test_holdings_has_initial_state_plus_one_per_step():
    s = schedule("all_reduce", "gloo", 4, 4096)
    h = holdings(s)
    assert len(h) == len(s.steps) + 1
    assert h[0] == [{c: frozenset({r}) for c in range(4)} for r in range(4)]


def test_gloo_reduce_scatter_keeps_chunk_after_full_allreduce():
    for n in NS:
        for op in ("reduce_scatter_tensor", "reduce_scatter_single"):
            s = schedule(op, "gloo", n, S(n))
            assert s.algorithm == "all_reduce + slice" and len(s.steps) == 2 * (n - 1)
            assert all(holdings(s)[-1][r][r] == frozenset(range(n)) for r in range(n))


def test_gloo_reduce_scatter_list_form_is_one_all_reduce_per_block():
    """Flight Recorder on 4 gloo ranks shows four all_reduces of one block each."""
    for n in NS:
        s = schedule("reduce_scatter", "gloo", n, S(n))
        assert s.algorithm == "all_reduce per block" and s.chunks == n * n
        assert len(s.steps) == n * 2 * (n - 1)
        ring = schedule("all_reduce", "gloo", n, S(n) // n)
        for b in range(n):  # block b's ring is gloo's all_reduce of one block, parts b*n + c
            mine = s.steps[b * len(ring.steps):(b + 1) * len(ring.steps)]
            assert [[(t.src, t.dst, t.chunk - b * n, t.nbytes) for t in st.transfers]
                    for st in mine] == [[(t.src, t.dst, t.chunk, t.nbytes) for t in st.transfers]
                                        for st in ring.steps]
            assert all(st.label.startswith(f"b{b} ") for st in mine)
    assert [st.label for st in schedule("reduce_scatter", "gloo", 4, 4096).steps][5:7] == [
        "b0 AG2", "b1 RS0"]


# --------------------------------------------------------------------------- 3. doc tables, n=4


def test_gloo_all_reduce_table_n4():
    s = schedule("all_reduce", "gloo", 4, 4096)
    # R0->R3, R1->R0, R2->R1, R3->R2; chunk per step as in the doc
    chunks = [[1, 2, 3, 0], [2, 3, 0, 1], [3, 0, 1, 2], [0, 1, 2, 3], [1, 2, 3, 0], [2, 3, 0, 1]]
    expected = [[(r, (r - 1) % 4, c) for r, c in enumerate(row)] for row in chunks]
    assert table(s) == expected
    assert [st.label for st in s.steps] == ["RS0", "RS1", "RS2", "AG0", "AG1", "AG2"]
    assert [t.reduce for st in s.steps for t in st.transfers] == [True] * 12 + [False] * 12
    after_rs = holdings(s)[3]
    assert all(after_rs[r][r] == frozenset(range(4)) for r in range(4))  # rank r owns chunk r


def test_nccl_all_gather_table_n4():
    s = schedule("all_gather", "nccl", 4, 4096)
    blocks = [[0, 1, 2, 3], [3, 0, 1, 2], [2, 3, 0, 1]]
    assert table(s) == [[(r, (r + 1) % 4, b) for r, b in enumerate(row)] for row in blocks]
    assert table(schedule("all_gather", "gloo", 4, 4096)) == table(s)  # same direction


def test_nccl_reduce_scatter_table_n4():
    s = schedule("reduce_scatter", "nccl", 4, 4096)
    blocks = [[3, 0, 1, 2], [2, 3, 0, 1], [1, 2, 3, 0]]
    assert table(s) == [[(r, (r + 1) % 4, b) for r, b in enumerate(row)] for row in blocks]
    h = holdings(s)
    for k in range(3):  # each step's partial sum carries k+1 contributions
        for t in s.steps[k].transfers:
            assert len(h[k][t.src][t.chunk]) == k + 1 and t.reduce


def test_nccl_all_reduce_table_n4():
    s = schedule("all_reduce", "nccl", 4, 4096)
    blocks = [[3, 0, 1, 2], [2, 3, 0, 1], [1, 2, 3, 0],  # reduce-scatter
              [0, 1, 2, 3], [3, 0, 1, 2], [2, 3, 0, 1]]  # all-gather
    assert table(s) == [[(r, (r + 1) % 4, b) for r, b in enumerate(row)] for row in blocks]


def test_gloo_broadcast_tree_n4_and_rotated_root():
    assert table(schedule("broadcast", "gloo", 4, 64, 0)) == [[(0, 1, 0)], [(0, 2, 0), (1, 3, 0)]]
    # root 2: vrank v is rank (v + 2) % 4
    assert table(schedule("broadcast", "gloo", 4, 64, 2)) == [[(2, 3, 0)], [(2, 0, 0), (3, 1, 0)]]
    assert table(schedule("broadcast", "gloo", 5, 64, 0))[-1] == [(0, 4, 0)]


def test_nccl_broadcast_chain_pipeline():
    s = schedule("broadcast", "nccl", 4, 4096, 0)
    m = s.chunks
    assert len(s.steps) == m + 4 - 2
    for t, step in enumerate(s.steps):  # at step t hop h carries chunk t-h
        hops = [h for h in range(3) if 0 <= t - h < m]
        assert [(x.src, x.dst, x.chunk) for x in step.transfers] == [
            (h, h + 1, t - h) for h in hops]


def test_nccl_reduce_chain_starts_after_root_and_ends_at_root():
    s = schedule("reduce", "nccl", 4, 4096, 0)
    hops = {(t.src, t.dst) for st in s.steps for t in st.transfers}
    assert hops == {(1, 2), (2, 3), (3, 0)}
    s = schedule("reduce", "nccl", 4, 4096, 2)
    assert {(t.src, t.dst) for st in s.steps for t in st.transfers} == {(3, 0), (0, 1), (1, 2)}


def test_gloo_reduce_n4():
    s = schedule("reduce", "gloo", 4, 4096, 1)
    assert table(s)[:3] == table(schedule("all_reduce", "gloo", 4, 4096))[:3]
    assert table(s)[3] == [(0, 1, 0), (2, 1, 2), (3, 1, 3)]


def test_gather_scatter_all_to_all_barrier_n4():
    assert table(schedule("gather", "gloo", 4, 4096, 2)) == [[(0, 2, 0), (1, 2, 1), (3, 2, 3)]]
    assert table(schedule("scatter", "nccl", 4, 4096, 0)) == [[(0, 1, 1), (0, 2, 2), (0, 3, 3)]]
    a2a = schedule("all_to_all", "gloo", 4, 4096)
    assert table(a2a)[0] == [(0, 1, 1), (1, 2, 6), (2, 3, 11), (3, 0, 12)]
    bar = schedule("barrier", "gloo", 4, 0)
    assert table(bar) == [[(r, (r + d) % 4, 0) for r in range(4)] for d in (1, 2)]


# --------------------------------------------------------------------------- 4. step counts


def test_step_counts():
    for n in NS:
        m = n - 1
        for backend in BACKENDS:
            assert len(schedule("all_reduce", backend, n, S(n)).steps) == 2 * m
            assert len(schedule("all_gather", backend, n, S(n)).steps) == m
            assert len(schedule("all_to_all", backend, n, S(n)).steps) == m
        assert len(schedule("reduce_scatter", "nccl", n, S(n)).steps) == m
        assert len(schedule("reduce_scatter", "gloo", n, S(n)).steps) == n * 2 * m
        assert len(schedule("reduce_scatter_single", "gloo", n, S(n)).steps) == 2 * m
        assert len(schedule("broadcast", "gloo", n, S(n), n - 1).steps) == log2_ceil(n)
        assert len(schedule("barrier", "gloo", n, 0).steps) == log2_ceil(n)
        assert len(schedule("barrier", "nccl", n, 0).steps) == 2 * m  # an all_reduce
        bc = schedule("broadcast", "nccl", n, S(n), 0)
        assert len(bc.steps) == (bc.chunks + n - 2 if n > 1 else 0)


# --------------------------------------------------------------------------- 5. consistency


def test_every_transfer_is_well_formed_and_consistent():
    for family, backend, n, root in cases():
        s = schedule(family, backend, n, S(n), root)
        states = holdings(s)  # raises if a rank sends a chunk it does not hold
        for k, step in enumerate(s.steps):
            assert step.label and step.transfers
            for t in step.transfers:
                assert isinstance(t, Transfer)
                assert t.src != t.dst and 0 <= t.src < n and 0 <= t.dst < n
                assert 0 <= t.chunk < s.chunks and t.nbytes >= 0
                assert t.chunk in states[k][t.src]
                if t.reduce:
                    assert canonical_op(family) in REDUCING
                    if family != "barrier":  # data is never counted twice
                        assert not states[k][t.src][t.chunk] & states[k][t.dst][t.chunk]
        if n == 1:
            assert s.steps == ()
        assert s.schematic == (family not in ("send", "recv"))
        assert s.note and "\n" not in s.note
        assert s.root == (root if family in ROOTED else None)


def test_holdings_rejects_sending_what_is_not_held():
    good = schedule("all_gather", "nccl", 3, 300)
    bad = Schedule(good.op, good.backend, good.algorithm, 3, 300, None, 3,
                   (good.steps[1],), True, "broken")
    with pytest.raises(ValueError, match="does not hold"):
        holdings(bad)


def test_root_defaults_to_zero_and_is_dropped_where_meaningless():
    assert schedule("broadcast", "gloo", 4, 64).root == 0
    assert schedule("all_reduce", "gloo", 4, 64, root=3).root is None


# --------------------------------------------------------------------------- names


def test_every_protocol_op_has_a_family():
    for op in protocol.OPS:
        assert canonical_op(op)


@pytest.mark.parametrize("op,family", [
    ("all_gather_into_tensor", "all_gather"), ("all_gather_single", "all_gather"),
    ("reduce_scatter_tensor", "reduce_scatter"), ("reduce_scatter_single", "reduce_scatter"),
    ("all_to_all_single", "all_to_all"), ("isend", "send"), ("irecv", "recv"),
    ("all_gather_object", "all_gather"), ("broadcast_object_list", "broadcast"),
    ("gather_object", "gather"), ("scatter_object_list", "scatter"),
    ("send_object_list", "send"), ("recv_object_list", "recv"), ("all_reduce", "all_reduce"),
])
def test_canonical_op(op, family):
    assert canonical_op(op) == family


def test_aliases_share_their_family_schedule():
    for op in protocol.OPS:
        family = canonical_op(op)
        if family in ("batch_isend_irecv", "monitored_barrier"):
            continue
        for backend in BACKENDS:
            if (family, backend) in schedules._OP_BUILDERS:  # drawn apart: tested on its own
                continue
            assert table(schedule(op, backend, 5, 5000, 1)) == table(
                schedule(family, backend, 5, 5000, 1))
    assert "pickled sizes" in schedule("all_gather_object", "gloo", 3, 30).note


# --------------------------------------------------------------------------- 6. errors


@pytest.mark.parametrize("call,match", [
    (lambda: schedule("all_scream", "gloo", 4, 64), "unknown op"),
    (lambda: canonical_op("all_scream"), "unknown op"),
    (lambda: schedule("all_reduce", "mpi", 4, 64), "unknown backend"),
    (lambda: schedule("all_reduce", "gloo", 0, 64), "n must be"),
    (lambda: schedule("all_reduce", "gloo", -2, 64), "n must be"),
    (lambda: schedule("all_reduce", "gloo", 4, -1), "size must be"),
    (lambda: schedule("broadcast", "gloo", 4, 64, root=4), "root must be"),
    (lambda: schedule("reduce", "nccl", 4, 64, root=-1), "root must be"),
    (lambda: schedule("batch_isend_irecv", "gloo", 4, 64), "one by one"),
    (lambda: schedule("monitored_barrier", "nccl", 4, 0), "only on gloo"),
])
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
