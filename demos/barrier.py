"""barrier: every rank waits until all ranks have arrived, then all go on together.

Like a tour guide at the door: whoever arrives early waits, and nobody leaves before the
slowest one (here the highest rank, which dawdles longest) has arrived.
"""

import time

import torch
import torch.distributed as dist


def main(ctx):
    rank = dist.get_rank()

    for iteration in ctx.iterations():
        time.sleep(0.05 * rank)  # ranks arrive one after another, rank 0 first
        arrived = time.time()

        dist.barrier()  # nobody gets past this line before every rank has reached it

        left = time.time()
        latest = torch.tensor([arrived], dtype=torch.float64, device=ctx.device)
        dist.all_reduce(latest, op=dist.ReduceOp.MAX)  # when the slowest rank arrived
        ctx.check(left >= latest.item(),
                  f"left the barrier of iteration {iteration} too early")
