"""gather: every rank sends one block, and only the destination (rank 0) collects them all.

Like handing in homework: each student gives one sheet, and only the teacher ends up
with the whole pile, in rank order.
"""

import torch
import torch.distributed as dist


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        mine = torch.full((numel,), float(rank * 100 + iteration), device=ctx.device)
        # only the destination needs somewhere to put the blocks
        pile = [torch.empty_like(mine) for _ in range(world)] if rank == 0 else None

        dist.gather(mine, gather_list=pile, dst=0)  # rank 0: pile[i] is rank i's block

        if rank == 0:
            for i, block in enumerate(pile):
                ctx.check(torch.all(block == i * 100 + iteration),
                          f"block {i}, iteration {iteration}")
