"""Two real gloo jobs, one after the other, into one viewing Session (what `commviz watch`
runs): each job's instances are matched within it, live and in the recording's replay."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest
import torch
import torch.distributed as dist
from ranks import _child, reap

from commviz.launch.launcher import free_port
from commviz.viewer import recording
from commviz.viewer.model import Model
from commviz.viewer.session import Session

pytestmark = pytest.mark.integration  # real ranks, sockets or apps

WORLD = 2
STEPS = 3


def _hand(rank: int, world: int) -> None:
    """The trial's hand.py: per step an all_reduce, a broadcast and a send 0 -> 1."""
    for _ in range(STEPS):
        t = torch.full((1000,), float(rank))
        dist.all_reduce(t)
        dist.broadcast(torch.zeros(2000, dtype=torch.float64), src=0)
        if rank == 0:
            dist.send(torch.ones(500), dst=1)
        else:
            dist.recv(torch.zeros(500), src=0)


def _job(session: Session, timeout: float = 60.0) -> list[int | None]:
    """Run one job of WORLD forked ranks to its end (goodbyes in) while the session drains."""
    ctx = mp.get_context("fork")
    port = free_port()
    procs = [ctx.Process(target=_child, args=(_hand, r, WORLD, port, session.addr, ()),
                         daemon=True) for r in range(WORLD)]
    try:
        for p in procs:
            p.start()
        pids = {p.pid for p in procs}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            session.poll(50)
            with session.lock:
                gone = [s for s in session.model.ranks.values() if s.pid in pids and s.exited]
            if len(gone) == WORLD and not any(p.is_alive() for p in procs):
                break
    finally:
        reap(procs)
    return [p.exitcode for p in procs]


def test_two_jobs_in_a_row_into_one_session(tmp_path):
    path = tmp_path / "two.jsonl"
    session = Session("tcp://127.0.0.1:*", path, collect_instances=True)
    try:
        assert _job(session) == [0] * WORLD
        time.sleep(1.0)  # seq numbers of the next job start over, a second later
        assert _job(session) == [0] * WORLD
        with session.lock:
            model = session.model
            instances = list(model.new_instances or [])
            assert (model.instances, model.transfers) == (2 * 2 * STEPS, 2 * STEPS)
            assert [sorted(j) for j in model.jobs] == [[0, 1], [0, 1]]
            assert {s.job for s in model.ranks.values()} == {2}
            assert sorted(model.stats) == [("all_reduce", 2, 4000), ("broadcast", 2, 16000),
                                           ("send", 2, 2000)]
            assert [row.count for _, row in sorted(model.stats.items())] == [6, 6, 6]
            assert len(model.pending()[0]["rank"]) == len(model.pending()[1]["rank"]) == 0
    finally:
        session.close()
    assert all(i.skew_ns < 1_000_000_000 for i in instances)  # none paired across the pause
    assert sorted(i.seq for i in instances if i.op == "broadcast") == [2, 2, 4, 4, 6, 6]
    replay = Model()
    replay.apply(list(recording.read(path)))
    assert (replay.instances, replay.transfers, len(replay.jobs)) == (12, 6, 2)
    assert [row.count for _, row in sorted(replay.stats.items())] == [6, 6, 6]
