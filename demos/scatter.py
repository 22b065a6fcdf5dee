"""scatter: the source (rank 0) holds one block per rank and deals block i to rank i.

The opposite of gather: like a dealer handing each player their own card; every rank
ends up with a different block.
"""

import torch
import torch.distributed as dist


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for step in ctx.steps():
        deck = None  # only the source has blocks to hand out
        if rank == 0:
            deck = [torch.full((numel,), float(i * 100 + step), device=ctx.device)
                    for i in range(world)]
        mine = torch.empty(numel, device=ctx.device)

        dist.scatter(mine, scatter_list=deck, src=0)  # rank i receives deck[i]

        # scatter does not free the source blocks: drop them once sent, or they keep
        # holding memory on the source rank until the next assignment
        del deck
        ctx.check(torch.all(mine == rank * 100 + step), f"my block of step {step}")
