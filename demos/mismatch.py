"""mismatch: one rank calls a different collective than the others at the same iteration.

At iteration 3 the last rank runs broadcast where the others run all_reduce (think of two
versions of the code, or a branch on the rank): the ranks enter the same collective slot
(same group, same sequence number, #3) with different operations. gloo cannot tell and
waits; the diagnosis names both sides while the job hangs, until the process group's
timeout (PG_TIMEOUT_S) fails every rank.
"""

import torch
import torch.distributed as dist

MIN_RANKS = 2
PG_TIMEOUT_S = 6  # seconds a rank waits inside an operation before it gives up
ODD_AT = 3


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        grads = torch.ones(numel, device=ctx.device)
        if rank == world - 1 and iteration == ODD_AT:
            dist.broadcast(grads, src=0)  # the bug: the others call all_reduce here
        else:
            dist.all_reduce(grads)
        ctx.check(torch.all(grads == world), f"sum of iteration {iteration}")
