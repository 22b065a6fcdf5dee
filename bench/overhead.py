"""What instrumentation costs a rank: the same op loop with and without ``instrument()``.

Raw and instrumented blocks alternate inside one run (so machine noise hits both alike),
in three settings: a 1-rank group (the hook's own cost, the communication being nearly
free), and 2 ranks with the viewer listening and with no viewer at all. Prints the median
time per op of each, their ratio and the added microseconds.

    python bench/overhead.py [--ops 200] [--rounds 30] [--size 4]
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import statistics
import threading
import time

from commviz.launcher import free_port
from commviz.viewer.transport import Receiver


def _rank(rank: int, world: int, port: int, addr: str, ops: int, rounds: int, size: int,
          out: mp.Queue) -> None:
    import torch
    import torch.distributed as dist

    import commviz

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    t = torch.zeros(max(1, size // 4))
    commviz.instrument(addr)  # starts the emitter once; toggled below
    commviz.uninstrument()
    for _ in range(50):
        dist.all_reduce(t)
    per_op: dict[str, list[float]] = {"raw": [], "instrumented": []}
    for r in range(rounds):
        order = ("raw", "instrumented") if r % 2 == 0 else ("instrumented", "raw")
        for mode in order:
            if mode == "instrumented":
                commviz.instrument(addr)
            dist.barrier()
            t0 = time.perf_counter_ns()
            for _ in range(ops):
                dist.all_reduce(t)
            per_op[mode].append((time.perf_counter_ns() - t0) / ops / 1e3)
            commviz.uninstrument()
    dist.destroy_process_group()
    if rank == 0:
        out.put(per_op)
    from commviz.rank import hooks

    hooks.flush_and_close()


def measure(world: int, listening: bool, ops: int, rounds: int, size: int) -> dict:
    receiver = Receiver("tcp://127.0.0.1:*")
    addr = receiver.addr
    stop = threading.Event()
    if listening:
        def drain() -> None:
            while not stop.is_set():
                receiver.drain(20)

        drainer = threading.Thread(target=drain)
        drainer.start()
    else:
        receiver.close()  # nobody listens at addr: every batch is dropped by the ranks
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, addr, ops, rounds, size, out))
             for r in range(world)]
    for p in procs:
        p.start()
    per_op = out.get(timeout=600)
    for p in procs:
        p.join(30)
    if listening:
        stop.set()
        drainer.join()
        receiver.close()
    raw = statistics.median(per_op["raw"])
    inst = statistics.median(per_op["instrumented"])
    return {"raw_us": raw, "instrumented_us": inst, "ratio": inst / raw, "added_us": inst - raw}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=200, help="ops per block")
    p.add_argument("--rounds", type=int, default=30, help="raw/instrumented block pairs")
    p.add_argument("--size", type=int, default=4, help="bytes per all_reduce")
    args = p.parse_args()
    print(f"all_reduce of {args.size} B on gloo/CPU, {args.rounds} x {args.ops} ops per mode, "
          f"{os.cpu_count()} cores; median of per-block means")
    print(f"{'setting':<32} {'raw us/op':>10} {'instr us/op':>12} {'ratio':>7} {'added us':>9}")
    for label, world, listening in (("1 rank (hook cost), viewer on", 1, True),
                                    ("2 ranks, viewer listening", 2, True),
                                    ("2 ranks, no viewer", 2, False)):
        r = measure(world, listening, args.ops, args.rounds, args.size)
        print(f"{label:<32} {r['raw_us']:>10.2f} {r['instrumented_us']:>12.2f} "
              f"{r['ratio']:>7.3f} {r['added_us']:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
