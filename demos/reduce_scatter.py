"""reduce_scatter: block j of every rank's list is summed, and rank j gets that sum.

Each rank brings one block per rank; afterwards each rank owns the total of one block
only: like all_reduce, but every rank keeps just its own slice of the answer.
"""

import torch
import torch.distributed as dist


def value(sender, block, iteration):
    return float(sender * 100 + block * 10 + iteration)


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    block = ctx.block_numel(torch.float32)  # elements in each of the world blocks

    for iteration in ctx.iterations():
        blocks = [torch.full((block,), value(rank, j, iteration), device=ctx.device)
                  for j in range(world)]
        mine = torch.empty(block, device=ctx.device)

        # mine becomes the sum of blocks[rank] over all the ranks
        dist.reduce_scatter(mine, blocks, op=dist.ReduceOp.SUM)

        expected = sum(value(sender, rank, iteration) for sender in range(world))
        ctx.check(torch.all(mine == expected),
                  f"sum of block {rank}, iteration {iteration}")
