"""hang: one rank skips an all_reduce; the others wait inside it until the timeout.

The bug is a branch taken on one rank only (here an "empty batch" on the last rank at step
2): it skips the all_reduce and waits for its next batch from rank 0 instead, while rank 0
waits inside the all_reduce for it. Nobody moves: the diagnosis names the collective, the
ranks inside, the missing rank and what it does instead. The process group's timeout
(PG_TIMEOUT_S) ends the job: every rank fails with a timeout error, as a real job would.
"""

import torch
import torch.distributed as dist

MIN_RANKS = 2
PG_TIMEOUT_S = 6  # seconds a rank waits inside an operation before it gives up
SKIP_AT = 2


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for step in ctx.steps():
        grads = torch.ones(numel, device=ctx.device)
        if rank == world - 1 and step == SKIP_AT:  # the bug: an "empty batch" on this rank
            dist.recv(grads, src=0)  # waits for a batch rank 0 never sends: it waits for us
            continue

        dist.all_reduce(grads)  # the others hang here at step 2

        ctx.check(torch.all(grads == world), f"sum of step {step}")
