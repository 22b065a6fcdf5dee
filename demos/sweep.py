"""sweep: nccl-tests on these ranks: one collective at doubling sizes, timed, checked.

For each size, from --min to --max bytes: --warmup calls, one call whose result is
checked (#wrong counts the elements that differ from what the collective must give),
then --iters calls back to back, timed as one loop. Small messages are bound by
latency (a fixed cost per step, whatever the size), large ones by bandwidth; the
curve bends where the two costs meet (commviz.knowledge.sweep reads the table).
"""

import torch
import torch.distributed as dist

import commviz
from commviz.knowledge import sweep

MIN_RANKS = 2


def _checked_call(op, rank, world, count, device):
    """Tensors for one checked call of ``op``: (output, the call, what it must hold)."""
    block = count // world
    ranks = torch.arange(world, device=device, dtype=torch.float32)
    total = world * (world + 1) / 2  # the sum of every rank's value, rank + 1
    if op == "all_reduce":
        tensor = torch.full((count,), rank + 1.0, device=device)
        return tensor, lambda: dist.all_reduce(tensor), total
    if op == "all_gather":
        out = torch.empty(count, device=device)
        mine = torch.full((block,), rank + 1.0, device=device)
        call = lambda: dist.all_gather_into_tensor(out, mine)  # noqa: E731
        return out, call, (ranks + 1).repeat_interleave(block)
    if op == "reduce_scatter":
        out = torch.empty(block, device=device)
        mine = torch.full((count,), rank + 1.0, device=device)
        return out, lambda: dist.reduce_scatter_tensor(out, mine), total
    if op == "broadcast":
        tensor = torch.full((count,), 7.0 if rank == 0 else 0.0, device=device)
        return tensor, lambda: dist.broadcast(tensor, src=0), 7.0
    # all_to_all: block j of rank r goes to rank j, block s comes from rank s
    mine = (rank * world + ranks).repeat_interleave(block)
    out = torch.empty(count, device=device)
    call = lambda: dist.all_to_all_single(out, mine)  # noqa: E731
    return out, call, (ranks * world + rank).repeat_interleave(block)


def _timed_call(op, world, count, device):
    """A call of ``op`` on buffers of zeros, for the warm-up and the timed loop
    (zeros summed stay zeros: a thousand calls never overflow)."""
    full = torch.zeros(count, device=device)
    part = torch.zeros(count // world, device=device)
    other = torch.zeros_like(full)
    return {"all_reduce": lambda: dist.all_reduce(full),
            "all_gather": lambda: dist.all_gather_into_tensor(full, part),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, full),
            "broadcast": lambda: dist.broadcast(full, src=0),
            "all_to_all": lambda: dist.all_to_all_single(full, other)}[op]


def _wrong(out, expected):
    """Elements of ``out`` that differ from what the call must give (#wrong)."""
    return int((out != torch.as_tensor(expected, device=out.device)).sum())


def _done(device):
    """Wait for the calls queued on the GPU (NCCL's are asynchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = sweep.Sweep.from_env()
    sizes = spec.sizes()

    # one size an iteration: paced, and gated by the viewer's pause and `n`
    for size, _ in zip(sizes, ctx.part(len(sizes)).iterations()):
        count = sweep.count_of(spec.op, world, size)
        call = _timed_call(spec.op, world, count, ctx.device)
        for _ in range(spec.warmup):
            call()
        out, checked, expected = _checked_call(
            spec.op, rank, world, count, ctx.device)
        checked()
        _done(ctx.device)
        wrong = _wrong(out, expected)

        nbytes = count * sweep.ITEMSIZE
        name = sweep.phase_name(spec.op, nbytes, spec.iters, wrong)
        with commviz.phase(name):  # the loop nccl-tests times
            for _ in range(spec.iters):
                call()
            _done(ctx.device)
