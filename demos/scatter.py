"""scatter: the source (rank 0) holds one block per rank and deals block i to rank i.

The opposite of gather: like a dealer handing each player their own card; every rank
ends up with a different block.
"""

import torch
import torch.distributed as dist


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        deck = None  # only the source has blocks to hand out
        if rank == 0:
            deck = [torch.full((numel,), float(i * 100 + iteration), device=ctx.device)
                    for i in range(world)]
        mine = torch.empty(numel, device=ctx.device)

        dist.scatter(mine, scatter_list=deck, src=0)  # rank i receives deck[i]

        ctx.check(torch.all(mine == rank * 100 + iteration),
                  f"my block of iteration {iteration}")
