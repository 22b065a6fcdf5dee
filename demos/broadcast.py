"""broadcast: one root rank's tensor is copied to every other rank.

Like a teacher reading the answer key aloud: afterwards everyone holds the same values.
The root changes every iteration (root = iteration % world) so each rank gets a turn.
"""

import torch
import torch.distributed as dist


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        root = iteration % world
        if rank == root:
            tensor = torch.full((numel,), float(root * 100 + iteration),
                                device=ctx.device)
        else:
            tensor = torch.empty(numel, device=ctx.device)  # a place to receive into

        dist.broadcast(tensor, src=root)  # every rank's tensor now equals the root's

        ctx.check(torch.all(tensor == root * 100 + iteration),
                  f"root {root}'s data, iteration {iteration}")
