"""sweep: nccl-tests on these ranks: one collective at doubling sizes, timed and checked.

For each size, from --min to --max bytes: --warmup calls, one call whose result is checked
(the #wrong column counts the elements that differ from what the collective must give), then
--iters calls back to back, timed as one loop. Small messages are bound by latency (a fixed
cost per step, whatever the size); large ones by bandwidth. Where the curve bends is where the
network's two costs meet (commviz.knowledge.sweep says how the table is read).
"""

import torch
import torch.distributed as dist

import commviz
from commviz.knowledge import sweep

MIN_RANKS = 2


def _expected_and_call(op, rank, world, count, device):
    """The tensors for one checked call of ``op``, the call, and what its output must hold."""
    block = count // world
    if op == "all_reduce":
        tensor = torch.full((count,), float(rank + 1), device=device)
        return tensor, lambda: dist.all_reduce(tensor), world * (world + 1) / 2
    if op == "all_gather":
        out = torch.empty(count, device=device)
        mine = torch.full((block,), float(rank + 1), device=device)
        want = torch.arange(1, world + 1, device=device, dtype=torch.float32)
        return out, lambda: dist.all_gather_into_tensor(out, mine), want.repeat_interleave(block)
    if op == "reduce_scatter":
        out = torch.empty(block, device=device)
        mine = torch.full((count,), float(rank + 1), device=device)
        return out, lambda: dist.reduce_scatter_tensor(out, mine), world * (world + 1) / 2
    if op == "broadcast":
        tensor = torch.full((count,), 7.0 if rank == 0 else 0.0, device=device)
        return tensor, lambda: dist.broadcast(tensor, src=0), 7.0
    # all_to_all: block j of rank r goes to rank j; block s of rank r comes from rank s
    mine = (rank * world + torch.arange(world, device=device, dtype=torch.float32))
    mine = mine.repeat_interleave(block)
    out = torch.empty(count, device=device)
    want = (torch.arange(world, device=device, dtype=torch.float32) * world + rank)
    return out, lambda: dist.all_to_all_single(out, mine), want.repeat_interleave(block)


def _timed_call(op, world, count, device):
    """A call of ``op`` on buffers of zeros, for the warm-up and the timed loop (zeros summed
    stay zeros: a thousand calls never overflow)."""
    block = count // world
    full, part = torch.zeros(count, device=device), torch.zeros(block, device=device)
    return {"all_reduce": lambda: dist.all_reduce(full),
            "all_gather": lambda: dist.all_gather_into_tensor(full, part),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, full),
            "broadcast": lambda: dist.broadcast(full, src=0),
            "all_to_all": lambda: dist.all_to_all_single(full, torch.zeros_like(full))}[op]


def _wrong(out, expected):
    """Elements of ``out`` that differ from what the collective must give (nccl-tests'
    #wrong)."""
    return int((out != torch.as_tensor(expected, device=out.device)).sum())


def _done(device):
    """Wait for the calls queued on the GPU (NCCL's are asynchronous; gloo's are done)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = sweep.Sweep.from_env()
    sizes = spec.sizes()

    for size, _ in zip(sizes, ctx.part(len(sizes)).iterations()):  # paced, gated per size
        count = sweep.count_of(spec.op, world, size)
        call = _timed_call(spec.op, world, count, ctx.device)
        for _ in range(spec.warmup):
            call()
        out, checked, expected = _expected_and_call(spec.op, rank, world, count, ctx.device)
        checked()
        _done(ctx.device)
        wrong = _wrong(out, expected)

        name = sweep.phase_name(spec.op, count * sweep.ITEMSIZE, spec.iters, wrong)
        with commviz.phase(name):  # the loop nccl-tests times, its span over iters
            for _ in range(spec.iters):
                call()
            _done(ctx.device)
