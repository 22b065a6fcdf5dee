"""reduce_scatter_tensor: reduce_scatter on one flat tensor: rank j gets the sum of slice j.

Each rank's input is one tensor cut into world equal slices; afterwards rank j holds the
sum over all ranks of slice j (newer torch names it reduce_scatter_single).
"""

import torch
import torch.distributed as dist


def value(sender, block, iteration):
    return float(sender * 100 + block * 10 + iteration)


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    block = ctx.block_numel(torch.float32)  # elements in each of the world slices

    for iteration in ctx.iterations():
        flat = torch.empty(world * block, device=ctx.device)
        for j, part in enumerate(flat.view(world, block)):
            part.fill_(value(rank, j, iteration))
        mine = torch.empty(block, device=ctx.device)

        dist.reduce_scatter_tensor(mine, flat, op=dist.ReduceOp.SUM)  # sum of slice rank

        expected = sum(value(sender, rank, iteration) for sender in range(world))
        ctx.check(torch.all(mine == expected),
                  f"sum of slice {rank}, iteration {iteration}")
