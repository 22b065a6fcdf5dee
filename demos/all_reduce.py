"""all_reduce: every rank's tensor is summed element-wise and every rank gets the sum.

The workhorse of data-parallel training: each rank brings its own gradients, and all
of them leave with the same total, as if one machine had seen all the data.
"""

import torch
import torch.distributed as dist


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        tensor = torch.full((numel,), float(rank * 100 + iteration), device=ctx.device)

        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)  # in place: tensor becomes the sum

        expected = sum(r * 100 + iteration for r in range(world))
        ctx.check(torch.all(tensor == expected), f"sum of iteration {iteration}")
