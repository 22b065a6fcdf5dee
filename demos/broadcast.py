"""broadcast: one root rank's tensor is copied to every other rank.

Like a teacher reading the answer key aloud: afterwards everyone holds the same values.
The root changes every step (root = step % world) so each rank gets a turn.
"""

import torch
import torch.distributed as dist


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for step in ctx.steps():
        root = step % world
        if rank == root:
            tensor = torch.full((numel,), float(root * 100 + step), device=ctx.device)
        else:
            tensor = torch.empty(numel, device=ctx.device)  # only a place to receive into

        dist.broadcast(tensor, src=root)  # every rank's tensor now equals the root's

        ctx.check(torch.all(tensor == root * 100 + step), f"root {root}'s data, step {step}")
