"""reduce_scatter: block j of every rank's list is summed, and rank j gets that sum.

Each rank brings one block per rank; afterwards each rank owns the total of one block
only: like all_reduce, but every rank keeps just its own slice of the answer.
"""

import torch
import torch.distributed as dist


def value(sender, block, step):
    return float(sender * 100 + block * 10 + step)


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    block = max(1, ctx.numel(torch.float32) // world)  # elements in each of the world blocks

    for step in ctx.steps():
        blocks = [torch.full((block,), value(rank, j, step), device=ctx.device)
                  for j in range(world)]
        mine = torch.empty(block, device=ctx.device)

        dist.reduce_scatter(mine, blocks, op=dist.ReduceOp.SUM)  # mine = sum of every blocks[rank]

        expected = sum(value(sender, rank, step) for sender in range(world))
        ctx.check(torch.all(mine == expected), f"sum of block {rank}, step {step}")
