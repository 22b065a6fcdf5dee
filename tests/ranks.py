"""Test harness: run a function on real gloo ranks (forked), instrumented, with a real viewer
socket on loopback; return what the viewer received. Bounded in time; leaves no process."""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from commviz.launch.launcher import free_port
from commviz.viewer import recording
from commviz.viewer.transport import Receiver
from commviz.wire import protocol

# The names torch gives the tensor forms of all_gather and reduce_scatter that FSDP calls
# (torch 2.13 renamed them)
ALL_GATHER_TENSOR = ("all_gather_single" if hasattr(dist, "all_gather_single")
                     else "all_gather_into_tensor")
REDUCE_SCATTER_TENSOR = ("reduce_scatter_single" if hasattr(dist, "reduce_scatter_single")
                         else "reduce_scatter_tensor")


@dataclass
class RankRun:
    """What the viewer saw of one run."""

    records: dict[int, list[dict]] = field(default_factory=dict)  # completed op records per rank
    inflight: list[dict] = field(default_factory=list)
    messages: list[protocol.Message] = field(default_factory=list)
    exitcodes: list[int | None] = field(default_factory=list)

    def ops(self, rank: int, parent: bool | None = None) -> list[dict]:
        """Records of ``rank`` in id order; parent=False: top-level only, True: children only."""
        recs = sorted(self.records.get(rank, []), key=lambda r: r["id"])
        if parent is None:
            return recs
        return [r for r in recs if (r["parent"] is not None) == parent]


def reap(procs: list) -> None:
    """Kill the rank processes still alive and wait for every one (none is left behind)."""
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(5)


def _child(target: Callable, rank: int, world: int, port: int, addr: str, args: tuple,
           env: dict[str, str] | None = None) -> None:
    """One forked rank: ``env`` (e.g. a simulated host) set first, then instrument(), the
    process group, ``target(rank, world, *args)``; exits 0, or 1 with the traceback."""
    code = 0
    try:
        os.environ.update(env or {})
        import torch.distributed as dist

        import commviz
        from commviz.rank import hooks

        commviz.instrument(addr)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=30))
        target(rank, world, *args)
        dist.destroy_process_group()
        hooks.flush_and_close()
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_ranks(target: Callable, world: int, *args: Any, timeout: float = 60.0) -> RankRun:
    """Run ``target(rank, world, *args)`` on ``world`` gloo ranks; every rank must exit 0."""
    receiver = Receiver("tcp://127.0.0.1:*")
    run = RankRun()
    ctx = mp.get_context("fork")
    port = free_port()
    procs = [ctx.Process(target=_child, args=(target, r, world, port, receiver.addr, args),
                         daemon=True) for r in range(world)]
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            run.messages += receiver.drain(50)
        byes = time.monotonic() + 3
        while sum(isinstance(m, protocol.Bye) for m in run.messages) < world \
                and time.monotonic() < byes:
            run.messages += receiver.drain(50)
    finally:
        reap(procs)
        receiver.close()
    run.exitcodes = [p.exitcode for p in procs]
    assert run.exitcodes == [0] * world, f"rank exit codes {run.exitcodes}"
    assert receiver.rejected == 0
    for msg in run.messages:
        if isinstance(msg, protocol.OpBatch):
            run.records.setdefault(msg.rank, []).extend(recording.op_dicts(msg))
            done = msg.cols["t_end"] >= 0
            run.inflight += [{"rank": msg.rank, "id": int(i)} for i in msg.cols["id"][~done]]
    return run
