"""What instrumentation costs a rank: the same op loop with and without ``instrument()``.

Raw and instrumented blocks alternate inside one run (``uninstrument()`` puts torch back
exactly, so both use the same process, group and tensors), and each instrumented block is
compared with its neighbouring raw block: the paired difference of their times per op
cancels the drift of a noisy shared machine. Three settings: one rank (the hook's own cost,
communication being nearly free), and two ranks with the viewer listening and with no
viewer at all. Each instrumented block runs with the process' shared-memory ring
(``commviz/wire/ring.py``, the default) or, taking turns with it, without (the hooks' path
before the ring): "ring added" is the paired difference of the two. Then a
DDP training step, with DDP's own C++ reduction against commviz's comm hook that reproduces it
and records every bucket, and against torch's own Python ``allreduce_hook`` without commviz:
the floor of any design that sees the buckets from Python.

    python bench/overhead.py [--ops 300] [--rounds 60] [--size 4] [--ddp-rounds 40]
    python bench/overhead.py --ddp-rounds 0 --rounds 200   # the ring's cost, side by side
    python bench/overhead.py --ddp-only --ddp-device cuda --hidden 4096 --batch 1024

Wall-clock latency on a shared 2-core machine is noisy; CPU time per op is the steadier
measure of what the hooks add.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import multiprocessing as mp
import os
import queue
import random
import statistics
import threading
import time
from typing import Any

from commviz.launch.launcher import free_port
from commviz.viewer.transport import Receiver


def _add_block(block: dict[str, list[float]], wall_ns: float, thread_ns: int, process_ns: int,
               n: int) -> None:
    """One block of ``n`` ops (or steps), in us per op: ``wall_ns`` is already per op, the
    CPU times are the block's."""
    block["wall"].append(wall_ns / 1e3)
    block["thread_cpu"].append(thread_ns / n / 1e3)
    block["process_cpu"].append(process_ns / n / 1e3)


def _rank(rank: int, world: int, port: int, addr: str, ops: int, rounds: int, size: int,
          out: mp.Queue) -> None:
    import torch
    import torch.distributed as dist

    import commviz
    from commviz.rank import hooks, records

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    t = torch.zeros(max(1, size // 4))
    commviz.instrument(addr)  # starts the emitter once; toggled below
    commviz.uninstrument()
    for _ in range(50):
        dist.all_reduce(t)
    clock = time.perf_counter_ns
    modes = ("raw", "inst", "no_ring")
    blocks: dict[str, dict[str, list[float]]] = {
        mode: {"wall": [], "thread_cpu": [], "process_cpu": []} for mode in modes}
    for r in range(rounds):
        for mode in modes[r % 3:] + modes[:r % 3]:
            if mode != "raw":
                commviz.instrument(addr)
                records.use_ring(hooks._EMITTER.ring if mode == "inst" else None)
            dist.barrier()
            t0, cpu0, proc0 = clock(), time.thread_time_ns(), time.process_time_ns()
            for _ in range(ops):
                dist.all_reduce(t)
            t1, cpu1, proc1 = clock(), time.thread_time_ns(), time.process_time_ns()
            commviz.uninstrument()
            # the emitter sends a block's last records (up to one tick's worth) during the
            # next block: blocks are long so that this spill stays small
            _add_block(blocks[mode], (t1 - t0) / ops, cpu1 - cpu0, proc1 - proc0, ops)
    dist.destroy_process_group()
    if rank == 0:
        out.put(blocks)
    hooks.flush_and_close()


def _ddp_model(hidden: int) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def _ddp_rank(rank: int, world: int, port: int, addr: str, steps: int, rounds: int,
              hidden: int, batch: int, device: str, out: mp.Queue) -> None:
    """DDP training steps: a model built without commviz (DDP's C++ reduction), the same
    model built instrumented (commviz's comm hook), and the same with torch's ``allreduce_hook``
    and no commviz, in blocks taking turns. On ``device="cuda"`` each rank trains on its own
    GPU over NCCL, and a step ends when the GPU is done with it (as ``loss.item()`` would)."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    import commviz
    from commviz.rank import hooks

    torch.set_num_threads(1)  # as torchrun does with several ranks on one machine
    gpu = device == "cuda"
    if gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if gpu else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    dev = torch.device(f"cuda:{rank}" if gpu else "cpu")
    commviz.instrument(addr)
    commviz.uninstrument()

    def ddp() -> Any:
        return DDP(_ddp_model(hidden).to(dev), device_ids=[rank] if gpu else None)

    models = {"raw": ddp(), "torch_hook": ddp()}
    models["torch_hook"].register_comm_hook(None, allreduce_hook)
    commviz.instrument(addr)
    models["inst"] = ddp()  # its comm hook is installed at its first forward
    x, y = torch.randn(batch, hidden, device=dev), torch.randn(batch, 1, device=dev)
    opts = {mode: torch.optim.SGD(m.parameters(), lr=1e-3) for mode, m in models.items()}

    def step(mode: str) -> None:
        loss = nn.functional.mse_loss(models[mode](x), y)
        loss.backward()
        opts[mode].step()
        opts[mode].zero_grad()
        if gpu:
            torch.cuda.synchronize()

    for _ in range(5):  # warm both (and rebuild their buckets) while instrumented
        step("inst")
    commviz.uninstrument()
    for _ in range(5):
        step("raw")
        step("torch_hook")
    clock = time.perf_counter_ns
    modes = ("raw", "inst", "torch_hook")
    blocks: dict[str, dict[str, list[float]]] = {
        mode: {"wall": [], "thread_cpu": [], "process_cpu": []} for mode in modes}
    for r in range(rounds):
        for mode in modes[r % 3:] + modes[:r % 3]:
            if mode == "inst":
                commviz.instrument(addr)
            dist.barrier()
            times = []
            cpu0, proc0 = time.thread_time_ns(), time.process_time_ns()
            for _ in range(steps):
                t0 = clock()
                step(mode)
                times.append(clock() - t0)
            cpu1, proc1 = time.thread_time_ns(), time.process_time_ns()
            commviz.uninstrument()
            time.sleep(0.02)
            _add_block(blocks[mode], statistics.median(times), cpu1 - cpu0, proc1 - proc0,
                       steps)
    dist.destroy_process_group()
    if rank == 0:
        out.put(blocks)
    hooks.flush_and_close()


def hook_alone(calls: int = 200_000) -> tuple[float, float, float]:
    """ns per call of the all_reduce hook around an op that does nothing (warm caches):
    the op alone, hooked without a ring, hooked with one.

    Runs in a forked 1-rank group with the emitter stopped, so it is the hot path alone:
    the wrapper's own work, the record, the queue append, and the ring's two slot writes.
    """
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    port = free_port()

    def child() -> None:
        import timeit

        import torch
        import torch.distributed as dist

        import commviz
        from commviz.rank import hooks, records
        from commviz.wire import ring

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                world_size=1)
        commviz.instrument(f"tcp://127.0.0.1:{free_port()}")
        hooks._EMITTER.close()  # nothing drains the queue: measure the hot path only
        # Records die young, as when the emitter drains them every tick: an ever-growing queue
        # would make the garbage collector's passes, not the hook, the bulk of what is timed.
        records.push = collections.deque(maxlen=1024).append

        def noop(tensor, op=None, group=None, async_op=False):
            return None

        wrapped = hooks._api_hook("all_reduce", noop, depth=1)
        writer = ring.RingWriter("bench", 1)  # the emitter's went with it
        t = torch.zeros(1)
        best: dict[str, float] = {}
        for _ in range(15):  # the three take turns: drift hits them alike
            for name, fn, use in (("raw", noop, None), ("hooked", wrapped, None),
                                  ("ring", wrapped, writer)):
                records.use_ring(use)
                took = timeit.timeit(lambda fn=fn: fn(t), number=calls // 10,
                                     timer=time.thread_time)  # CPU: preemption-proof
                best[name] = min(best.get(name, took), took)
        records.use_ring(None)
        writer.remove()
        out.put(tuple(best[name] / (calls // 10) * 1e9 for name in ("raw", "hooked", "ring")))
        out.close()
        out.join_thread()
        os._exit(0)

    proc = ctx.Process(target=child)
    proc.start()
    result = _collect(out, [proc], 300)
    proc.join(10)
    return result


def _collect(out: Any, procs: list, limit_s: float) -> Any:
    """The one result the ranks put on ``out``; exits, ending them all, if one fails first."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            return out.get(timeout=1)
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                raise SystemExit(f"a rank failed (exit codes {failed})" if failed
                                 else f"no result within {limit_s:.0f} s") from None


def measure(world: int, listening: bool, *args: Any, target: Any = _rank,
            start: str = "fork") -> dict:
    receiver = Receiver("tcp://127.0.0.1:*")
    addr = receiver.addr
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            receiver.drain(20)

    drainer = threading.Thread(target=drain)
    if listening:
        drainer.start()
    else:
        receiver.close()  # nobody listens at addr: every batch is dropped by the ranks
    ctx = mp.get_context(start)
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=target, args=(r, world, port, addr, *args, out))
             for r in range(world)]
    for p in procs:
        p.start()
    blocks = _collect(out, procs, 900)
    for p in procs:
        p.join(30)
    if listening:
        stop.set()
        drainer.join()
        receiver.close()
    result: dict[str, Any] = {mode: _compare(blocks["raw"], blocks[mode])
                              for mode in blocks if mode != "raw"}
    if "no_ring" in blocks:  # the ring's own cost: its blocks against their neighbours without
        result["ring_added"] = {
            metric: statistics.median(i - n for i, n in zip(blocks["inst"][metric],
                                                            blocks["no_ring"][metric]))
            for metric in ("wall", "thread_cpu", "process_cpu")}
    return result


def _compare(raw_blocks: dict[str, list[float]], blocks: dict[str, list[float]]) -> dict:
    """Per metric: raw and other medians, their ratio with its 95% interval, the median of
    paired differences."""
    result = {}
    for metric in ("wall", "thread_cpu", "process_cpu"):
        raw, inst = raw_blocks[metric], blocks[metric]
        result[metric] = (statistics.median(raw), statistics.median(inst),
                          statistics.median(inst) / statistics.median(raw),
                          _ratio_interval(raw, inst),
                          statistics.median(i - r for i, r in zip(inst, raw)))
    return result


def _ratio_interval(raw: list[float], inst: list[float], resamples: int = 2000) -> str:
    """The 95% bootstrap interval of median(inst) / median(raw), resampling block pairs:
    how far this run's ratio can be trusted on a noisy machine."""
    pairs = list(zip(raw, inst))
    rng = random.Random(0)
    ratios = sorted(statistics.median(i for _, i in sample)
                    / statistics.median(r for r, _ in sample)
                    for sample in (rng.choices(pairs, k=len(pairs)) for _ in range(resamples)))
    return f"{ratios[int(0.025 * resamples)]:.3f}-{ratios[int(0.975 * resamples) - 1]:.3f}"


def _print_row(label: str, metric: str, row: tuple) -> None:
    raw, inst, ratio, interval, added = row
    print(f"{label:<34} {metric:<12} {raw:>9.2f} {inst:>9.2f} {ratio:>7.3f} {interval:>13} "
          f"{added:>9.2f}", flush=True)


def all_reduce_cases(args: argparse.Namespace) -> None:
    raw_ns, hooked_ns, ring_ns = hook_alone()
    for label, ns in (("hook alone, no-op op, no ring", hooked_ns),
                      ("hook alone, no-op op, ring", ring_ns)):
        print(f"{label:<34} {'thread_cpu':<12} {raw_ns / 1e3:>9.2f} {ns / 1e3:>9.2f} "
              f"{'':>21} {(ns - raw_ns) / 1e3:>9.2f}", flush=True)
    for label, world, listening in (("1 rank, viewer listening", 1, True),
                                    ("2 ranks, viewer listening", 2, True),
                                    ("2 ranks, no viewer", 2, False)):
        result = measure(world, listening, args.ops, args.rounds, args.size)
        for mode, suffix in (("inst", "ring"), ("no_ring", "no ring")):
            shown = f"{label}, {suffix}"
            for metric, row in result[mode].items():
                _print_row(shown, metric, row)
                shown = ""
        for metric, row in result["ring_added"].items():
            print(f"{'  ring added (paired)':<34} {metric:<12} {'':>9} {'':>9} {'':>7} "
                  f"{'':>13} {row:>9.2f}", flush=True)


def ddp_case(args: argparse.Namespace) -> None:
    params = 3 * args.hidden * (args.hidden + 1) + args.hidden + 1
    if args.ddp_device == "cuda":
        import torch

        world = min(2, torch.cuda.device_count())
        if world == 0:
            print("\nDDP on cuda: no GPU here; skipped")
            return
        where = f"{world} rank(s) on their own GPUs over NCCL, each step synchronized"
    else:
        world, where = 2, "2 ranks on gloo/CPU, one intra-op thread per rank"
    print(f"\nDDP training step, {where}, 4 Linear layers of width {args.hidden} ({params:,} "
          f"parameters, {params * 4 / 2**20:.1f} MiB of gradients, DDP's default buckets), "
          f"batch {args.batch}, {args.ddp_rounds} rounds of three {args.ddp_steps}-step "
          "blocks. Per step, us:")
    results = measure(world, True, args.ddp_steps, args.ddp_rounds, args.hidden, args.batch,
                      args.ddp_device, target=_ddp_rank,
                      start="spawn" if args.ddp_device == "cuda" else "fork")
    for label, mode in (("DDP step, viewer listening", "inst"),
                        ("torch's allreduce_hook, no cv", "torch_hook")):
        for metric, row in results[mode].items():
            _print_row(label, metric, row)
            label = ""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=300, help="ops per block")
    p.add_argument("--rounds", type=int, default=60,
                   help="rounds of raw, instrumented and instrumented-without-ring blocks")
    p.add_argument("--size", type=int, default=4, help="bytes per all_reduce")
    p.add_argument("--ddp-rounds", type=int, default=40, help="rounds of 3 DDP blocks (0: none)")
    p.add_argument("--ddp-steps", type=int, default=10, help="DDP training steps per block")
    p.add_argument("--hidden", type=int, default=512, help="DDP model width (4 Linear layers)")
    p.add_argument("--batch", type=int, default=64, help="DDP batch size")
    p.add_argument("--ddp-device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: NCCL, one rank per GPU (at most 2)")
    p.add_argument("--ddp-only", action="store_true", help="run the DDP case alone")
    args = p.parse_args()
    print(f"all_reduce of {args.size} B on gloo/CPU, {args.rounds} rounds of three "
          f"{args.ops}-op blocks (raw, ring, no ring), {os.cpu_count()} cores. Per op: wall = "
          "the block's time / ops (the emitter's share of the CPU included); thread cpu = "
          "CPU of the calling thread (the hot path); process cpu = all threads (emitter too). "
          "95% = bootstrap interval of the ratio over block pairs; "
          "added = median of paired block differences.")
    print(f"{'setting':<34} {'metric':<12} {'raw us':>9} {'instr us':>9} {'ratio':>7} "
          f"{'95%':>13} {'added us':>9}")
    if not args.ddp_only:
        all_reduce_cases(args)
    if args.ddp_rounds:
        ddp_case(args)


if __name__ == "__main__":
    main()
