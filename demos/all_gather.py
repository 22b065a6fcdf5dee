"""all_gather: every rank contributes one block, and every rank ends up with all of them.

Think of a class where each student writes one line on a sheet: after all_gather, every
student holds a copy of the whole sheet, in rank order.
"""

import torch
import torch.distributed as dist


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        mine = torch.full((numel,), float(rank * 100 + iteration), device=ctx.device)
        blocks = [torch.empty_like(mine) for _ in range(world)]

        dist.all_gather(blocks, mine)  # block i now holds rank i's contribution

        for i, block in enumerate(blocks):
            ctx.check(torch.all(block == i * 100 + iteration),
                      f"block {i}, iteration {iteration}")
