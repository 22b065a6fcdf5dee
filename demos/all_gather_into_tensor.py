"""all_gather_into_tensor: all_gather into one big output tensor, rank i's block at slot i.

Same result as all_gather, but the blocks land side by side in a single tensor, which
saves a copy (newer torch names it all_gather_single; the old name still works).
"""

import torch
import torch.distributed as dist


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        mine = torch.full((numel,), float(rank * 100 + iteration), device=ctx.device)
        everything = torch.empty(world * numel, device=ctx.device)

        dist.all_gather_into_tensor(everything, mine)  # slot i holds rank i's block

        for i, block in enumerate(everything.view(world, numel)):
            ctx.check(torch.all(block == i * 100 + iteration),
                      f"block {i}, iteration {iteration}")
