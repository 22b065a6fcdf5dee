"""Acceptance: 10,000 malformed messages hit the viewer while real ranks run; it keeps going
and its state for the good traffic is exact."""

import multiprocessing as mp
import time

import msgpack
import numpy as np
import pytest
import torch
import torch.distributed as dist
import zmq
from ranks import _child, reap

from commviz.launch.launcher import free_port
from commviz.viewer.session import Session
from commviz.wire import protocol

pytestmark = pytest.mark.integration  # real ranks, sockets or apps

STEPS = 40
MALFORMED = 10_000


def _job(rank, world):
    t = torch.ones(8)
    for _ in range(STEPS):
        dist.all_reduce(t)
        if rank == 0:
            dist.send(t, 1)
        elif rank == 1:
            dist.recv(t, 0)


def _garbage(i: int, rng: np.random.Generator) -> bytes:
    kind = i % 6
    if kind == 0:
        return rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8).tobytes()
    if kind == 1:
        return msgpack.packb({"v": 99, "k": "ops", "rank": 0})
    if kind == 2:
        return msgpack.packb({"v": 1, "k": "ops", "rank": "zero", "cols": {}})
    if kind == 3:  # a well-formed batch naming a group it does not define
        cols = {name: np.zeros(1, dtype=dt).tobytes() for name, dt in protocol.COLUMNS.items()}
        return protocol.encode_ops(0, cols, [[5, "0", [0, 1]]], [[0, "x.py", 1]])
    if kind == 4:
        return msgpack.packb({"v": 1, "k": "hb", "rank": 0, "world": 2, "tel": "hot"})
    if i % 600 == 5:
        return b"\x00" * (protocol.MAX_MESSAGE_BYTES + 10)  # oversized
    return msgpack.packb([1, "k", None])


def test_malformed_messages_change_nothing():
    session = Session("tcp://127.0.0.1:*")
    session.start()
    ctx = mp.get_context("fork")
    port = free_port()
    procs = [ctx.Process(target=_child, args=(_job, r, 2, port, session.addr, ()), daemon=True)
             for r in range(2)]
    zctx = zmq.Context()
    bad = zctx.socket(zmq.PUSH)
    bad.connect(session.addr)
    try:
        for p in procs:
            p.start()
        rng = np.random.default_rng(1)
        for i in range(MALFORMED):
            bad.send(_garbage(i, rng))  # blocking: every one of them reaches the viewer
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with session.lock:
                done = (session.rejected >= MALFORMED
                        and sum(s.exited for s in session.model.ranks.values()) == 2)
            if done:
                break
            time.sleep(0.05)
    finally:
        bad.close(linger=0)
        zctx.term()
        reap(procs)
        session.close()
    model = session.model
    assert session.rejected == MALFORMED
    assert model.records == 2 * STEPS + 2 * STEPS  # all_reduce on both ranks, send + recv
    assert model.instances == STEPS and model.transfers == STEPS
    rows = {(r["op"], r["ranks"]): r["count"] for r in model.stats_table()}
    assert rows == {("all_reduce", 2): STEPS, ("send", 2): STEPS}
    assert sorted(model.ranks) == [0, 1] and not model.inflight
