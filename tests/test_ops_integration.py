"""Every instrumented torch.distributed op on real gloo ranks: the exact records each rank emits.

Each target runs on forked, instrumented ranks (``ranks.run_ranks``); the test then compares
every rank's complete record list with what the spec says that program must produce. Call
sites carry a ``#@tag`` comment so the expected ``line`` of each record can be looked up.
"""

from __future__ import annotations

import collections
import re
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ranks import run_ranks
from torch.distributed import c10d_logger
from torch.distributed import distributed_c10d as c10d

import commviz
from commviz.launch.launcher import gloo_has_all_to_all
from commviz.rank import hooks
from commviz.wire import protocol

pytestmark = pytest.mark.integration  # real ranks, sockets or apps

THIS_FILE = __file__
_SOURCE = Path(__file__).read_text().splitlines()
KEYS = ("op", "parent", "peer", "group", "seq", "bytes_in", "bytes_out", "dtype", "async")
F32, F64, I32, I64, U8 = 4, 8, 4, 8, 1  # element sizes


ALL_REDUCE = dist.all_reduce  # as torch defines it, before any instrument()
# Calls an older torch cannot make, which the ranks skip there: torch 2.13's new names of
# all_gather_into_tensor and reduce_scatter_tensor, and gloo's all_to_all before 2026.
HAS_NEW_NAMES = hasattr(dist, "all_gather_single")
GLOO_ALL_TO_ALL = gloo_has_all_to_all()
ABSENT = (set() if HAS_NEW_NAMES else {"all_gather_single", "reduce_scatter_single"}) | (
    set() if GLOO_ALL_TO_ALL else {"all_to_all"})


def for_this_torch(expected: list[dict]) -> list[dict]:
    """``expected`` without the records of calls this torch cannot make (ABSENT): the
    collectives after one in the same group come one sequence number earlier."""
    kept, skipped = [], collections.Counter()
    for e in expected:
        group = tuple(e["group"])
        if e["op"] in ABSENT:
            skipped[group] += 1
        elif e["op"] in protocol.P2P:
            kept.append(e)
        else:
            kept.append({**e, "seq": e["seq"] - skipped[group]})
    return kept


@pytest.fixture(autouse=True, params=["in_place", "wrappers"])
def hook_layout(request, monkeypatch):
    """Every test runs with both hook layouts: inside torch's own wrappers (torch 2.13), and
    module-level wrappers plus the whole ProcessGroup layer (kept for other layouts). The
    forked ranks inherit the setting."""
    monkeypatch.setattr(hooks, "HOOK_IN_PLACE", request.param == "in_place")
    return request.param


def line_of(tag: str) -> int:
    """The line carrying ``#@tag`` at its end (exactly one)."""
    hits = [i for i, text in enumerate(_SOURCE, start=1)
            if re.search(rf"#@{re.escape(tag)}\s*$", text)]
    assert len(hits) == 1, f"tag {tag!r} on lines {hits}"
    return hits[0]


def R(op, seq, group, peer=None, b_in=0, b_out=0, dtype="float32", is_async=False,
      parent=None, tag=None):
    """One expected record; ``tag`` names the call site line (checked when given)."""
    return {"op": op, "parent": parent, "peer": peer, "group": list(group), "seq": seq,
            "bytes_in": b_in, "bytes_out": b_out, "dtype": dtype, "async": is_async,
            "_tag": tag}


def check(run, rank: int, expected: list[dict]) -> list[dict]:
    """``rank`` emitted exactly ``expected`` (in order), completed, timed, with call sites."""
    got = run.ops(rank)
    expected = for_this_torch(expected)
    want = [{k: v for k, v in e.items() if k != "_tag"} for e in expected]
    assert [{k: r[k] for k in KEYS} for r in got] == want, f"records of rank {rank}"
    ids = [r["id"] for r in got]
    assert len(set(ids)) == len(ids), f"rank {rank}: duplicate ids {ids}"
    for r, e in zip(got, expected, strict=True):
        assert r["rank"] == rank
        assert 0 < r["t_start_ns"] <= r["t_end_ns"], r
        assert r["flags"] == (protocol.FLAG_ASYNC if e["async"] else 0), r
        if e["_tag"] is not None:
            assert (r["file"], r["line"]) == (THIS_FILE, line_of(e["_tag"])), \
                f"rank {rank} {r['op']} site"
    done = set(ids)
    stale = [i["id"] for i in run.inflight if i["rank"] == rank and i["id"] not in done]
    assert not stale, f"rank {rank}: in-flight records never completed: {stale}"
    return got


def same_pg(run, ranks, which=None) -> str:
    """All records of ``ranks`` (optionally filtered by group) name one process group."""
    names = {r["pg"] for rank in ranks for r in run.ops(rank)
             if which is None or r["group"] == list(which)}
    assert len(names) == 1, names
    return names.pop()


def psize(obj) -> int:
    """Bytes of ``obj`` as torch serializes it for object collectives."""
    return c10d._object_to_tensor(obj, torch.device("cpu"), None)[0].numel()


# ---- point to point ---------------------------------------------------------------------
def _p2p(rank, world):
    a = torch.arange(4, dtype=torch.float32)
    b = torch.arange(3, dtype=torch.float64)
    c = torch.arange(5, dtype=torch.int32)
    d = torch.arange(2, dtype=torch.int64)
    if rank == 0:
        dist.send(a, dst=1)  #@p2p_send_a
        w = dist.isend(b, dst=1)  #@p2p_isend_b
        w.wait()
        got = torch.zeros_like(c)
        src = dist.recv(got, src=2)  #@p2p_recv_c
        assert src == 2 and torch.equal(got, c)
    elif rank == 1:
        got_a, got_b = torch.zeros_like(a), torch.zeros_like(b)
        dist.recv(got_a, src=0)  #@p2p_recv_a
        w = dist.irecv(got_b, src=0)  #@p2p_irecv_b
        w.wait()
        assert torch.equal(got_a, a) and torch.equal(got_b, b)
        dist.send(d, 2)  #@p2p_send_d
    else:
        dist.send(c, dst=0)  #@p2p_send_c
        got = torch.zeros_like(d)
        dist.recv(got, 1)  #@p2p_recv_d
        assert torch.equal(got, d)


def test_send_recv_isend_irecv():
    run = run_ranks(_p2p, 3)
    g = [0, 1, 2]
    check(run, 0, [R("send", 1, g, 1, 4 * F32, 0, tag="p2p_send_a"),
                   R("isend", 2, g, 1, 3 * F64, 0, "float64", True, tag="p2p_isend_b"),
                   R("recv", 1, g, 2, 0, 5 * I32, "int32", tag="p2p_recv_c")])
    check(run, 1, [R("recv", 1, g, 0, 0, 4 * F32, tag="p2p_recv_a"),
                   R("irecv", 2, g, 0, 0, 3 * F64, "float64", True, tag="p2p_irecv_b"),
                   R("send", 1, g, 2, 2 * I64, 0, "int64", tag="p2p_send_d")])
    check(run, 2, [R("send", 1, g, 0, 5 * I32, 0, "int32", tag="p2p_send_c"),
                   R("recv", 1, g, 1, 0, 2 * I64, "int64", tag="p2p_recv_d")])
    same_pg(run, range(3))


def _batch(rank, world):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    s1, r1 = torch.full((3,), float(rank)), torch.zeros(3)
    ops = [dist.P2POp(dist.isend, s1, nxt), dist.P2POp(dist.irecv, r1, prv)]
    reqs = dist.batch_isend_irecv(ops)  #@batch1
    for q in reqs:
        q.wait()
    assert torch.equal(r1, torch.full((3,), float(prv)))
    s2, r2 = torch.full((2,), rank, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)
    ops = [dist.P2POp(dist.irecv, r2, prv), dist.P2POp(dist.isend, s2, nxt)]
    reqs = dist.batch_isend_irecv(ops)  #@batch2
    for q in reqs:
        q.wait()
    assert torch.equal(r2, torch.full((2,), prv, dtype=torch.int64))
    # plain isend/irecv after the batches share the same per-peer counters
    r3 = torch.zeros(1, dtype=torch.float64)
    w_recv = dist.irecv(r3, src=prv)  #@batch_irecv3
    w_send = dist.isend(torch.ones(1, dtype=torch.float64), dst=nxt)  #@batch_isend3
    w_send.wait()
    w_recv.wait()


def test_batch_isend_irecv():
    world = 3
    run = run_ranks(_batch, world)
    g = list(range(world))
    for rank in range(world):
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        b = "batch_isend_irecv"
        check(run, rank, [
            R("isend", 1, g, nxt, 3 * F32, 0, "float32", True, b, tag="batch1"),
            R("irecv", 1, g, prv, 0, 3 * F32, "float32", True, b, tag="batch1"),
            R("irecv", 2, g, prv, 0, 2 * I64, "int64", True, b, tag="batch2"),
            R("isend", 2, g, nxt, 2 * I64, 0, "int64", True, b, tag="batch2"),
            R("irecv", 3, g, prv, 0, F64, "float64", True, tag="batch_irecv3"),
            R("isend", 3, g, nxt, F64, 0, "float64", True, tag="batch_isend3"),
        ])


def _recv_any(rank, world):
    tok = torch.zeros(1)
    if rank == 0:
        a, b, c = torch.zeros(2), torch.zeros(3, dtype=torch.float64), torch.zeros(4)
        s0 = dist.recv(a)  #@any_recv_a
        s1 = dist.recv(b)  #@any_recv_b
        assert (s0, s1) == (1, 2), (s0, s1)
        dist.send(tok, dst=1)  #@any_tok0
        w = dist.irecv(c)  #@any_irecv_c
        w.wait()
        assert torch.equal(c, torch.full((4,), 7.0))
    elif rank == 1:
        dist.send(torch.ones(2), dst=0)  #@any_send_a
        dist.send(tok, dst=2)  #@any_tok1
        dist.recv(tok, src=0)  #@any_tok0_recv
        dist.send(torch.full((4,), 7.0), dst=0)  #@any_send_c
    else:
        dist.recv(tok, src=1)  #@any_tok1_recv
        dist.send(torch.ones(3, dtype=torch.float64), dst=0)  #@any_send_b


def test_recv_from_any_source():
    """The sender of a receive without src is the record's peer; seq is numbered from it."""
    run = run_ranks(_recv_any, 3)
    g = [0, 1, 2]
    check(run, 0, [R("recv", 1, g, 1, 0, 2 * F32, tag="any_recv_a"),
                   R("recv", 1, g, 2, 0, 3 * F64, "float64", tag="any_recv_b"),
                   R("send", 1, g, 1, F32, 0, tag="any_tok0"),
                   R("irecv", 2, g, 1, 0, 4 * F32, "float32", True, tag="any_irecv_c")])
    check(run, 1, [R("send", 1, g, 0, 2 * F32, 0, tag="any_send_a"),
                   R("send", 1, g, 2, F32, 0, tag="any_tok1"),
                   R("recv", 1, g, 0, 0, F32, tag="any_tok0_recv"),
                   R("send", 2, g, 0, 4 * F32, 0, tag="any_send_c")])
    check(run, 2, [R("recv", 1, g, 1, 0, F32, tag="any_tok1_recv"),
                   R("send", 1, g, 0, 3 * F64, 0, "float64", tag="any_send_b")])


# ---- collectives --------------------------------------------------------------------------
BCAST_SRC, SCATTER_SRC, GATHER_DST = 1, 1, 0


def _collectives(rank, world):
    w = world
    reduce_dst = world - 1
    t = torch.full((5,), float(rank), dtype=torch.float64)
    dist.broadcast(t, src=BCAST_SRC)  #@c_broadcast
    assert torch.equal(t, torch.full((5,), float(BCAST_SRC), dtype=torch.float64))
    t = torch.ones(4)
    dist.all_reduce(t)  #@c_all_reduce
    assert torch.equal(t, torch.full((4,), float(w)))
    t = torch.ones(3, dtype=torch.int64)
    dist.reduce(t, dst=reduce_dst)  #@c_reduce
    if rank == reduce_dst:
        assert torch.equal(t, torch.full((3,), w, dtype=torch.int64))
    outs = [torch.zeros(2, dtype=torch.int32) for _ in range(w)]
    dist.all_gather(outs, torch.full((2,), rank, dtype=torch.int32))  #@c_all_gather
    assert [int(o[0]) for o in outs] == list(range(w))
    out = torch.zeros(2 * w)
    dist.all_gather_into_tensor(out, torch.full((2,), float(rank)))  #@c_all_gather_into_tensor
    assert out.tolist() == [float(r) for r in range(w) for _ in range(2)]
    out = torch.zeros(4 * w, dtype=torch.float64)
    if HAS_NEW_NAMES:
        dist.all_gather_single(out, torch.ones(4, dtype=torch.float64))  #@c_all_gather_single
    gl = [torch.zeros(2) for _ in range(w)] if rank == GATHER_DST else None
    dist.gather(torch.full((2,), float(rank)), gl, dst=GATHER_DST)  #@c_gather
    if gl is not None:
        assert [float(x[0]) for x in gl] == [float(r) for r in range(w)]
    out = torch.zeros(3, dtype=torch.int64)
    sl = [torch.full((3,), r, dtype=torch.int64) for r in range(w)] if rank == SCATTER_SRC else None
    dist.scatter(out, sl, src=SCATTER_SRC)  #@c_scatter
    assert torch.equal(out, torch.full((3,), rank, dtype=torch.int64))
    out = torch.zeros(2)
    dist.reduce_scatter(out, [torch.ones(2) for _ in range(w)])  #@c_reduce_scatter
    assert torch.equal(out, torch.full((2,), float(w)))
    out = torch.zeros(4)
    dist.reduce_scatter_tensor(out, torch.ones(4 * w))  #@c_reduce_scatter_tensor
    assert torch.equal(out, torch.full((4,), float(w)))
    out = torch.zeros(2, dtype=torch.float64)
    inp = torch.ones(2 * w, dtype=torch.float64)
    if HAS_NEW_NAMES:
        dist.reduce_scatter_single(out, inp)  #@c_reduce_scatter_single
    outs = [torch.zeros(2) for _ in range(w)]
    if GLOO_ALL_TO_ALL:
        dist.all_to_all(outs, [torch.full((2,), float(rank)) for _ in range(w)])  #@c_all_to_all
        assert [float(o[0]) for o in outs] == [float(r) for r in range(w)]
    out = torch.zeros(3 * w, dtype=torch.int32)
    inp = torch.full((3 * w,), rank, dtype=torch.int32)
    dist.all_to_all_single(out, inp)  #@c_all_to_all_single
    assert out.tolist() == [r for r in range(w) for _ in range(3)]
    dist.barrier()  #@c_barrier
    dist.monitored_barrier()  #@c_monitored_barrier


@pytest.mark.parametrize("world", [2, 3])
def test_collectives(world):
    run = run_ranks(_collectives, world)
    g = list(range(world))
    w = world
    for rank in range(world):
        root = rank == BCAST_SRC
        check(run, rank, [
            R("broadcast", 1, g, BCAST_SRC, 5 * F64 if root else 0, 0 if root else 5 * F64,
              "float64", tag="c_broadcast"),
            R("all_reduce", 2, g, None, 4 * F32, 4 * F32, tag="c_all_reduce"),
            R("reduce", 3, g, w - 1, 3 * I64, 3 * I64 if rank == w - 1 else 0, "int64",
              tag="c_reduce"),
            R("all_gather", 4, g, None, 2 * I32, 2 * I32 * w, "int32", tag="c_all_gather"),
            R("all_gather_into_tensor", 5, g, None, 2 * F32, 2 * F32 * w,
              tag="c_all_gather_into_tensor"),
            R("all_gather_single", 6, g, None, 4 * F64, 4 * F64 * w, "float64",
              tag="c_all_gather_single"),
            R("gather", 7, g, GATHER_DST, 2 * F32, 2 * F32 * w if rank == GATHER_DST else 0,
              tag="c_gather"),
            R("scatter", 8, g, SCATTER_SRC, 3 * I64 * w if rank == SCATTER_SRC else 0, 3 * I64,
              "int64", tag="c_scatter"),
            R("reduce_scatter", 9, g, None, 2 * F32 * w, 2 * F32, tag="c_reduce_scatter"),
            R("reduce_scatter_tensor", 10, g, None, 4 * F32 * w, 4 * F32,
              tag="c_reduce_scatter_tensor"),
            R("reduce_scatter_single", 11, g, None, 2 * F64 * w, 2 * F64, "float64",
              tag="c_reduce_scatter_single"),
            R("all_to_all", 12, g, None, 2 * F32 * w, 2 * F32 * w, tag="c_all_to_all"),
            R("all_to_all_single", 13, g, None, 3 * I32 * w, 3 * I32 * w, "int32",
              tag="c_all_to_all_single"),
            R("barrier", 14, g, None, 0, 0, None, tag="c_barrier"),
            R("monitored_barrier", 15, g, None, 0, 0, None, tag="c_monitored_barrier"),
        ])
    same_pg(run, range(world))


def _async(rank, world):
    t = torch.ones(4)
    work = dist.all_reduce(t, async_op=True)  #@a_all_reduce
    work.wait()
    assert torch.equal(t, torch.full((4,), float(world)))
    out = torch.zeros(2)
    work = dist.reduce_scatter_tensor(out, torch.ones(2 * world), async_op=True)  #@a_rs_tensor
    work.wait()
    assert torch.equal(out, torch.full((2,), float(world)))
    t = torch.full((3,), float(rank), dtype=torch.float64)
    work = dist.broadcast(t, src=2, async_op=True)  #@a_broadcast
    work.wait()
    assert torch.equal(t, torch.full((3,), 2.0, dtype=torch.float64))
    out = torch.zeros(2 * world, dtype=torch.int64)
    inp = torch.ones(2, dtype=torch.int64)
    if HAS_NEW_NAMES:
        work = dist.all_gather_single(out, inp, async_op=True)  #@a_ag_single
        work.wait()
    work = dist.barrier(async_op=True)  #@a_barrier
    work.wait()
    dist.all_reduce(torch.ones(1))  #@a_sync


def test_async_op_variants():
    world = 3
    run = run_ranks(_async, world)
    g = list(range(world))
    for rank in range(world):
        check(run, rank, [
            R("all_reduce", 1, g, None, 4 * F32, 4 * F32, is_async=True, tag="a_all_reduce"),
            R("reduce_scatter_tensor", 2, g, None, 2 * F32 * world, 2 * F32, is_async=True,
              tag="a_rs_tensor"),
            R("broadcast", 3, g, 2, 3 * F64 if rank == 2 else 0, 0 if rank == 2 else 3 * F64,
              "float64", True, tag="a_broadcast"),
            R("all_gather_single", 4, g, None, 2 * I64, 2 * I64 * world, "int64", True,
              tag="a_ag_single"),
            R("barrier", 5, g, None, 0, 0, None, True, tag="a_barrier"),
            R("all_reduce", 6, g, None, F32, F32, tag="a_sync"),
        ])


# ---- object collectives -----------------------------------------------------------------
def _obj(rank):
    return {"rank": rank, "pad": "x" * (10 * rank)}


BCAST_OBJS = [[1, 2, 3], "hello"]
P2P_OBJS = [{"k": "v"}, (4, 5)]
BATCH_OBJS = ["batched"]


def _objects(rank, world):
    out = [None] * world
    dist.all_gather_object(out, _obj(rank))  #@o_all_gather_object
    assert out == [_obj(r) for r in range(world)]
    objs = list(BCAST_OBJS) if rank == 1 else [None, None]
    dist.broadcast_object_list(objs, src=1)  #@o_broadcast_object_list
    assert objs == BCAST_OBJS
    gl = [None] * world if rank == 2 else None
    dist.gather_object(_obj(rank), gl, dst=2)  #@o_gather_object
    if rank == 2:
        assert gl == [_obj(r) for r in range(world)]
    got = [None]
    inputs = [_obj(r) for r in range(world)] if rank == 0 else None
    dist.scatter_object_list(got, inputs, src=0)  #@o_scatter_object_list
    assert got == [_obj(rank)]
    if rank == 0:
        dist.send_object_list(list(P2P_OBJS), dst=1)  #@o_send_object_list
    elif rank == 1:
        got = [None, None]
        dist.recv_object_list(got, src=0)  #@o_recv_object_list
        assert got == P2P_OBJS
        dist.send_object_list(list(BATCH_OBJS), dst=2, use_batch=True)  #@o_send_batch
    else:
        got = [None]
        dist.recv_object_list(got, src=1, use_batch=True)  #@o_recv_batch
        assert got == BATCH_OBJS


def _logical(op, seq, g, peer, children, tag):
    """The logical record of an object op (bytes = sum of its children) and its children."""
    kids = [dict(k, parent=op, _tag=tag) for k in children]
    return [R(op, seq, g, peer, sum(k["bytes_in"] for k in kids),
              sum(k["bytes_out"] for k in kids), None, tag=tag), *kids]


def test_object_collectives_and_p2p():
    world = 3
    run = run_ranks(_objects, world)
    g = list(range(world))
    m = max(psize(_obj(r)) for r in range(world))  # objects are padded to the largest
    s_bcast = sum(psize(o) for o in BCAST_OBJS)
    s_p2p = sum(psize(o) for o in P2P_OBJS)
    s_batch = sum(psize(o) for o in BATCH_OBJS)
    for rank in range(world):
        bc_root, g_dst, sc_root = rank == 1, rank == 2, rank == 0
        exp = []
        exp += _logical("all_gather_object", 1, g, None, [
            R("all_gather", 2, g, None, I64, I64 * world, "int64"),
            R("all_gather", 3, g, None, m, m * world, "uint8")], "o_all_gather_object")
        exp += _logical("broadcast_object_list", 4, g, 1, [
            R("broadcast", 5, g, 1, 2 * I64 if bc_root else 0, 0 if bc_root else 2 * I64,
              "int64"),
            R("broadcast", 6, g, 1, s_bcast if bc_root else 0, 0 if bc_root else s_bcast,
              "uint8")], "o_broadcast_object_list")
        exp += _logical("gather_object", 7, g, 2, [
            R("all_gather", 8, g, None, I64, I64 * world, "int64"),
            R("gather", 9, g, 2, m, m * world if g_dst else 0, "uint8")], "o_gather_object")
        exp += _logical("scatter_object_list", 10, g, 0, [
            R("broadcast", 11, g, 0, I64 if sc_root else 0, 0 if sc_root else I64, "int64"),
            R("scatter", 12, g, 0, m * world if sc_root else 0, m, "uint8"),
            R("scatter", 13, g, 0, I64 * world if sc_root else 0, I64, "int64")],
            "o_scatter_object_list")
        if rank == 0:
            exp += _logical("send_object_list", 1, g, 1, [
                R("send", 2, g, 1, 2 * I64, 0, "int64"),
                R("send", 3, g, 1, s_p2p, 0, "uint8")], "o_send_object_list")
        elif rank == 1:
            exp += _logical("recv_object_list", 1, g, 0, [
                R("recv", 2, g, 0, 0, 2 * I64, "int64"),
                R("recv", 3, g, 0, 0, s_p2p, "uint8")], "o_recv_object_list")
            exp += _logical("send_object_list", 1, g, 2, [
                R("isend", 2, g, 2, I64, 0, "int64", True),
                R("isend", 3, g, 2, s_batch, 0, "uint8", True)], "o_send_batch")
        else:
            exp += _logical("recv_object_list", 1, g, 1, [
                R("irecv", 2, g, 1, 0, I64, "int64", True),
                R("irecv", 3, g, 1, 0, s_batch, "uint8", True)], "o_recv_batch")
        got = check(run, rank, exp)
        assert len(run.ops(rank, parent=False)) == {0: 5, 1: 6, 2: 5}[rank]
        assert all(r["parent"] for r in run.ops(rank, parent=True)), got


# ---- subgroups ----------------------------------------------------------------------------
SUB = [1, 2, 3]


def _subgroups(rank, world):
    sub = dist.new_group(SUB)
    t = torch.ones(4)
    if rank not in SUB:  # not a member: these calls do nothing and must record nothing
        dist.all_reduce(t, group=sub)
        dist.all_gather_object([None] * 3, rank, group=sub)
        dist.barrier(group=sub)
    else:
        assert dist.get_process_group_ranks(sub) == SUB
        dist.all_reduce(t, group=sub)  #@s_all_reduce
        assert torch.equal(t, torch.full((4,), 3.0))
        t = torch.full((2,), float(rank), dtype=torch.float64)
        dist.broadcast(t, src=3, group=sub)  #@s_bcast_src
        assert float(t[0]) == 3.0
        t = torch.full((2,), float(rank), dtype=torch.float64)
        dist.broadcast(t, group=sub, group_src=0)  #@s_bcast_group_src
        assert float(t[0]) == 1.0
        t = torch.ones(3, dtype=torch.int64)
        dist.reduce(t, group=sub, group_dst=2)  #@s_reduce
        out = [None] * 3
        dist.all_gather_object(out, rank, group=sub)  #@s_all_gather_object
        assert out == SUB
        t = torch.ones(5)
        if rank == 1:
            dist.send(t, group=sub, group_dst=2)  #@s_send
            r = torch.zeros(2)
            ops = [dist.P2POp(dist.irecv, r, group=sub, group_peer=1)]
            reqs = dist.batch_isend_irecv(ops)  #@s_batch_recv
            reqs[0].wait()
        elif rank == 3:
            dist.recv(t, group=sub, group_src=0)  #@s_recv
            w = dist.irecv(torch.zeros(1, dtype=torch.int32), group=sub)  #@s_irecv_any
            w.wait()
        else:
            ops = [dist.P2POp(dist.isend, torch.ones(2), group=sub, group_peer=0)]
            reqs = dist.batch_isend_irecv(ops)  #@s_batch_send
            reqs[0].wait()
            dist.send(torch.ones(1, dtype=torch.int32), dst=3, group=sub)  #@s_send_any
    t = torch.ones(1)
    dist.all_reduce(t)  #@s_world_all_reduce
    assert float(t[0]) == world
    if rank == 1:
        dist.send(t, dst=3)  #@s_world_send
    elif rank == 3:
        dist.recv(t, src=1)  #@s_world_recv


def test_subgroups_report_global_ranks():
    world = 4
    run = run_ranks(_subgroups, world)
    w, s = list(range(world)), SUB
    world_ar = R("all_reduce", 1, w, None, F32, F32, tag="s_world_all_reduce")
    check(run, 0, [world_ar])
    common = [
        R("all_reduce", 1, s, None, 4 * F32, 4 * F32, tag="s_all_reduce"),
        None,  # broadcast src=3: bytes depend on the rank
        None,  # broadcast group_src=0 (global 1)
        None,  # reduce group_dst=2 (global 3)
        *_logical("all_gather_object", 5, s, None, [
            R("all_gather", 6, s, None, I64, 3 * I64, "int64"),
            R("all_gather", 7, s, None, psize(1), 3 * psize(1), "uint8")],
            "s_all_gather_object"),
    ]
    for rank in SUB:
        exp = list(common)
        exp[1] = R("broadcast", 2, s, 3, 2 * F64 * (rank == 3), 2 * F64 * (rank != 3), "float64",
                   tag="s_bcast_src")
        exp[2] = R("broadcast", 3, s, 1, 2 * F64 * (rank == 1), 2 * F64 * (rank != 1), "float64",
                   tag="s_bcast_group_src")
        exp[3] = R("reduce", 4, s, 3, 3 * I64, 3 * I64 * (rank == 3), "int64", tag="s_reduce")
        if rank == 1:
            exp += [R("send", 1, s, 3, 5 * F32, 0, tag="s_send"),
                    R("irecv", 1, s, 2, 0, 2 * F32, "float32", True, "batch_isend_irecv",
                      tag="s_batch_recv"),
                    world_ar,
                    R("send", 2, w, 3, F32, 0, tag="s_world_send")]
        elif rank == 3:
            exp += [R("recv", 1, s, 1, 0, 5 * F32, tag="s_recv"),
                    R("irecv", 1, s, 2, 0, I32, "int32", True, tag="s_irecv_any"),
                    world_ar,
                    R("recv", 2, w, 1, 0, F32, tag="s_world_recv")]
        else:
            exp += [R("isend", 1, s, 1, 2 * F32, 0, "float32", True, "batch_isend_irecv",
                      tag="s_batch_send"),
                    R("send", 1, s, 3, I32, 0, "int32", tag="s_send_any"),
                    world_ar]
        check(run, rank, exp)
    world_pg = same_pg(run, range(world), w)
    sub_pg = same_pg(run, SUB, s)
    assert world_pg != sub_pg


# ---- functions bound before instrument() --------------------------------------------------
def _bound_before_instrument(*names):
    """The functions ``names`` of torch.distributed as a program that imported them before
    instrument() holds them."""
    from commviz.rank import hooks

    addr = hooks._EMITTER.addr
    commviz.uninstrument()
    bound = [getattr(dist, n) for n in names]
    commviz.instrument(addr)
    return bound


def _prebound(rank, world):
    all_reduce, agit, rs_tensor, send, recv, barrier, monitored_barrier = \
        _bound_before_instrument("all_reduce", "all_gather_into_tensor",
                                 "reduce_scatter_tensor", "send", "recv", "barrier",
                                 "monitored_barrier")
    t = torch.ones(4)
    all_reduce(t)  #@pb_all_reduce
    assert torch.equal(t, torch.full((4,), 2.0))
    out = torch.zeros(6)
    agit(out, torch.ones(3))  #@pb_agit
    out = torch.zeros(2, dtype=torch.float64)
    rs_tensor(out, torch.ones(4, dtype=torch.float64))  #@pb_rs_tensor
    if rank == 0:
        send(torch.ones(3, dtype=torch.int64), 1)  #@pb_send
    else:
        got = torch.zeros(3, dtype=torch.int64)
        assert recv(got, 0) == 0  #@pb_recv
        assert torch.equal(got, torch.ones(3, dtype=torch.int64))
    barrier()  #@pb_barrier
    monitored_barrier()  #@pb_monitored_barrier


def _prebound_expected(rank):
    g = [0, 1]
    p2p = (R("send", 1, g, 1, 3 * I64, 0, "int64", tag="pb_send") if rank == 0 else
           R("recv", 1, g, 0, 0, 3 * I64, "int64", tag="pb_recv"))
    return [
        R("all_reduce", 1, g, None, 4 * F32, 4 * F32, tag="pb_all_reduce"),
        R("all_gather_into_tensor", 2, g, None, 3 * F32, 6 * F32,
          tag="pb_agit"),
        R("reduce_scatter_tensor", 3, g, None, 4 * F64, 2 * F64, "float64",
          tag="pb_rs_tensor"),
        p2p,
        R("barrier", 4, g, None, 0, 0, None, tag="pb_barrier"),
        R("monitored_barrier", 5, g, None, 0, 0, None, tag="pb_monitored_barrier"),
    ]


def test_prebound_originals_record_once():
    """Originals of the wrappers (as bound before instrument()): one record each, own name,
    and the program's own line as the call site (also through torch's @deprecated wrapper)."""
    run = run_ranks(_prebound, 2)
    for rank in range(2):
        check(run, rank, _prebound_expected(rank))


def _layout(rank, world, in_place):
    pg_hooked = {n for n in hooks.PG_METHODS
                 if isinstance(dist.ProcessGroup.__dict__.get(n), types.FunctionType)}
    if in_place:  # the API functions stay what they are; their insides are hooked
        assert dist.all_reduce is ALL_REDUCE and c10d.all_reduce is ALL_REDUCE
        assert dist.all_reduce.__closure__[0].cell_contents.__code__ is hooks._HOOK_CODE
        assert pg_hooked == set(hooks.PG_METHODS_UNDECORATED)
    else:
        assert dist.all_reduce is not ALL_REDUCE and c10d.all_reduce is dist.all_reduce
        assert dist.all_reduce.__commviz_original__ is ALL_REDUCE
        assert pg_hooked == {n for n in hooks.PG_METHODS if n in dist.ProcessGroup.__dict__}
    commviz.uninstrument()
    assert dist.all_reduce is ALL_REDUCE
    assert dist.all_reduce.__closure__[0].cell_contents is ALL_REDUCE.__wrapped__
    assert not any(isinstance(dist.ProcessGroup.__dict__.get(n), types.FunctionType)
                   for n in hooks.PG_METHODS)


def test_hook_layout_installed_and_removed(hook_layout):
    """With torch 2.13 every decorated API function is hooked in place (only isend/irecv and
    monitored_barrier need the ProcessGroup layer); uninstrument() undoes either layout."""
    run_ranks(_layout, 1, hook_layout == "in_place")


def _deprecation_warnings(rank, world):
    import warnings

    out = torch.zeros(2 * world)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.all_gather_into_tensor(out, torch.ones(2))  #@warn_agit
        dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(2 * world))  #@warn_rst
        dist.all_reduce(out)
        commviz.uninstrument()
        dist.all_gather_into_tensor(out, torch.ones(2))  # torch's own warning again
    places = [(w.category, w.filename, w.lineno) for w in caught]
    assert places[:2] == [(FutureWarning, THIS_FILE, line_of("warn_agit")),
                          (FutureWarning, THIS_FILE, line_of("warn_rst"))], places
    assert places[2][:2] == (FutureWarning, c10d_logger.__file__) and len(places) == 3, places


def test_torchs_deprecation_warnings_name_the_programs_line(hook_layout):
    """torch's @deprecated warns one frame above itself; in place, the hook is that frame:
    moved up past it, a FutureWarning names the program's call, not commviz's hooks.py (the
    hook's own code is unchanged: no cost on the calls). uninstrument() puts torch's back."""
    if hook_layout != "in_place":
        pytest.skip("module wrappers leave torch's functions alone: a function bound before "
                    "instrument() would warn too far up, so its stacklevel is not moved")
    run_ranks(_deprecation_warnings, 1)


def _failed_install(rank, world):
    import contextlib
    import io

    addr = hooks._EMITTER.addr
    commviz.uninstrument()
    hooks.PATCHED_FUNCTIONS += ("no_such_op",)  # fails after every real function is hooked
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        commviz.instrument(addr)
    assert "cannot instrument torch" in err.getvalue()
    assert "no_such_op" in err.getvalue() and "runs without commviz" in err.getvalue()
    assert hooks._ACTIVE is None
    assert dist.all_reduce is ALL_REDUCE
    assert dist.all_reduce.__closure__[0].cell_contents is ALL_REDUCE.__wrapped__
    assert not any(isinstance(dist.ProcessGroup.__dict__.get(n), types.FunctionType)
                   for n in hooks.PG_METHODS)
    t = torch.ones(2)
    dist.all_reduce(t)  # not recorded, and right
    assert t.tolist() == [world, world]


def test_instrument_on_a_torch_it_cannot_patch():
    """If a hook cannot be put in place, instrument() puts back what it had patched, says so
    in one line on stderr and the program runs on, unrecorded."""
    run = run_ranks(_failed_install, 2)
    assert not any(r["op"] == "all_reduce" for recs in run.records.values() for r in recs)


# ---- uninstrument / instrument again ------------------------------------------------------
def _reinstrument(rank, world):
    from commviz.rank import hooks

    addr = hooks._EMITTER.addr
    t = torch.ones(2)
    dist.all_reduce(t)  #@u_before
    if rank == 0:
        dist.send(t, dst=1)  #@u_send_before
    elif rank == 1:
        dist.recv(t, src=0)  #@u_recv_before
    commviz.uninstrument()
    assert hooks._ACTIVE is None
    assert dist.all_reduce is c10d.all_reduce
    assert not hasattr(dist.all_reduce, "__commviz_original__")
    assert not isinstance(dist.ProcessGroup.__dict__["allreduce"], types.FunctionType)
    # none of these may be recorded
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    out = [None] * world
    dist.all_gather_object(out, rank)
    if rank == 0:
        dist.send(t, dst=1)
        dist.isend(t, dst=1).wait()
    elif rank == 1:
        dist.recv(t, src=0)
        dist.irecv(t).wait()
    dist.barrier()
    commviz.instrument(addr)
    assert hooks._ACTIVE is not None
    dist.all_reduce(t)  #@u_after
    if rank == 0:
        dist.send(t, dst=1)  #@u_send_after
    elif rank == 1:
        dist.recv(t, src=0)  #@u_recv_after
    dist.barrier()  #@u_barrier_after


def test_uninstrument_then_instrument_again():
    world = 3
    run = run_ranks(_reinstrument, world)
    g = list(range(world))
    for rank in range(world):
        exp = [R("all_reduce", 1, g, None, 2 * F32, 2 * F32, tag="u_before")]
        if rank == 0:
            exp.append(R("send", 1, g, 1, 2 * F32, 0, tag="u_send_before"))
        elif rank == 1:
            exp.append(R("recv", 1, g, 0, 0, 2 * F32, tag="u_recv_before"))
        exp.append(R("all_reduce", 2, g, None, 2 * F32, 2 * F32, tag="u_after"))
        if rank == 0:
            exp.append(R("send", 2, g, 1, 2 * F32, 0, tag="u_send_after"))
        elif rank == 1:
            exp.append(R("recv", 2, g, 0, 0, 2 * F32, tag="u_recv_after"))
        exp.append(R("barrier", 3, g, None, 0, 0, None, tag="u_barrier_after"))
        check(run, rank, exp)


# ---- complex tensors ----------------------------------------------------------------------
def _complex(rank, world):
    z = torch.zeros(2, dtype=torch.complex64)
    if rank == 0:
        dist.send(z, dst=1)
        dist.isend(z, dst=1).wait()
    else:
        dist.recv(z, src=0)
        dist.irecv(z, src=0).wait()
    dist.all_reduce(z)
    _bound_before_instrument("all_reduce")[0](z)


def test_complex_tensors_report_their_dtype():
    run = run_ranks(_complex, 2)
    g, z = [0, 1], 2 * 8  # two complex64 elements
    check(run, 0, [R("send", 1, g, 1, z, 0, "complex64"),
                   R("isend", 2, g, 1, z, 0, "complex64", True),
                   R("all_reduce", 1, g, None, z, z, "complex64"),
                   R("all_reduce", 2, g, None, z, z, "complex64")])
    check(run, 1, [R("recv", 1, g, 0, 0, z, "complex64"),
                   R("irecv", 2, g, 0, 0, z, "complex64", True),
                   R("all_reduce", 1, g, None, z, z, "complex64"),
                   R("all_reduce", 2, g, None, z, z, "complex64")])
