"""straggler: one rank sleeps before each all_reduce, and the others wait for it inside.

Every all_reduce ends when its last rank arrives, so one slow rank (more data to load, a busier
machine) makes every other rank idle: watch the others' "waiting for peers" grow, and the
diagnosis name the late rank, how late it is and how long the others waited for it.
"""

import time

import torch
import torch.distributed as dist

LATE_S = 0.3  # how long the slow rank "works" before each all_reduce


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)
    slow = world - 1

    for iteration in ctx.iterations():
        grads = torch.full((numel,), float(rank + iteration), device=ctx.device)
        if rank == slow:
            time.sleep(LATE_S)  # e.g. a bigger batch to load than the others

        dist.all_reduce(grads)  # the others are already in here, waiting for it

        expected = sum(r + iteration for r in range(world))
        ctx.check(torch.all(grads == expected), f"sum of iteration {iteration}")
