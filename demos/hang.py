"""hang: one rank skips an all_reduce to wait for rank 0, which waits inside it: a deadlock.

The bug is a branch taken on one rank only (here an "empty batch" on the last rank at
iteration 3): it skips all_reduce #3 and waits to receive its next batch from rank 0
instead, while rank 0 (and the others) wait inside that all_reduce for it. Each side waits
for the other: the diagnosis names the collective, the ranks inside, the missing rank and
what it does instead, and the cycle. The process group's timeout (PG_TIMEOUT_S) ends the
job: every rank fails with a timeout error, as a real job would.
"""

import torch
import torch.distributed as dist

MIN_RANKS = 2
PG_TIMEOUT_S = 6  # seconds a rank waits inside an operation before it gives up
SKIP_AT = 3


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        grads = torch.ones(numel, device=ctx.device)
        if rank == world - 1 and iteration == SKIP_AT:  # the bug: an "empty batch" here
            dist.recv(grads, src=0)  # rank 0 never sends: it waits in the all_reduce
            continue

        dist.all_reduce(grads)  # at SKIP_AT the others wait here for the last rank

        ctx.check(torch.all(grads == world), f"sum of iteration {iteration}")
