"""Two real gloo jobs of 2 ranks each, running at the same time with the same rank numbers,
into one viewing Session (what `commviz watch` runs): each job's collectives and transfers
are matched within it, live, in the recording and in `commviz stats`."""

from __future__ import annotations

import json
import multiprocessing as mp
import time

import pytest
import torch
import torch.distributed as dist
from ranks import _child, reap

from commviz import cli
from commviz.launch.launcher import free_port
from commviz.viewer import recording
from commviz.viewer.model import Model
from commviz.viewer.session import Session

pytestmark = pytest.mark.integration  # real ranks, sockets or apps

WORLD = 2
STEPS = 10
FLOATS = (1000, 2000)  # per job: its statistics rows tell which job an instance came from


def _hand(rank: int, world: int, floats: int, start: mp.synchronize.Barrier) -> None:
    """Per step an all_reduce and a send 0 -> 1; both jobs start their steps together."""
    start.wait(30)
    for _ in range(STEPS):
        dist.all_reduce(torch.full((floats,), float(rank)))
        if rank == 0:
            dist.send(torch.ones(floats), dst=1)
        else:
            dist.recv(torch.zeros(floats), src=0)
        time.sleep(0.01)


def _expected(n: int) -> dict[tuple[str, int], int]:
    return {(op, 4 * floats): n for floats in FLOATS for op in ("all_reduce", "send")}


def test_two_jobs_at_once_into_one_session(tmp_path, capsys):
    path = tmp_path / "both.jsonl"
    session = Session("tcp://127.0.0.1:*", path, collect_instances=True)
    ctx = mp.get_context("fork")
    start = ctx.Barrier(2 * WORLD)
    jobs = [[ctx.Process(target=_child, args=(_hand, r, WORLD, port, session.addr,
                                               (floats, start)), daemon=True)
             for r in range(WORLD)] for floats, port in zip(FLOATS, (free_port(), free_port()))]
    procs = [p for job in jobs for p in job]
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            session.poll(50)
            with session.lock:
                gone = sum(s.exited for j in session.model.jobs for s in j.values())
            if gone == len(procs) and not any(p.is_alive() for p in procs):
                break
        for _ in range(5):  # whatever is still on its way
            session.poll(20)
        with session.lock:
            model = session.model
            instances = list(model.new_instances or [])
            pids = [{r: s.pid for r, s in j.items()} for j in model.jobs]
            keys = [{s.job_key for s in j.values()} for j in model.jobs]
            counts = {(r.op, r.size): r.count for r in model.stats.values()}
            assert (model.instances, model.transfers, model.failed) == (2 * STEPS, 2 * STEPS, 0)
            assert not model.replaced and len(model.pending()[0]["rank"]) == 0
    finally:
        reap(procs)
        session.close()
    assert [p.exitcode for p in procs] == [0] * len(procs)
    assert sorted(pids, key=lambda j: j[0]) == sorted(
        ({r: p.pid for r, p in enumerate(job)} for job in jobs), key=lambda j: j[0])
    assert counts == _expected(STEPS)
    # each job's ranks name one rendezvous, the other job's another
    assert [len(k) for k in keys] == [1, 1] and keys[0] != keys[1] and "" not in keys[0] | keys[1]
    assert all(i.skew_ns < 500_000_000 for i in instances)  # none made up across the jobs
    assert not [f for f in session.new_findings or [] if f.type == "lost_rank"]
    replay = Model()
    replay.apply(list(recording.read(path)))
    assert (replay.instances, replay.transfers, len(replay.jobs)) == (2 * STEPS, 2 * STEPS, 2)
    assert cli.main(["stats", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {(r["op"], r["size"]): r["count"] for r in rows} == _expected(STEPS)
