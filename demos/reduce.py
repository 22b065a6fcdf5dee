"""reduce: every rank's tensor is summed element-wise, and only the destination gets the sum.

Like all_reduce with a single recipient: a vote count where only the chair learns the
total. The destination changes every iteration (dst = iteration % world).
"""

import torch
import torch.distributed as dist


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        dst = iteration % world
        tensor = torch.full((numel,), float(rank * 100 + iteration), device=ctx.device)

        dist.reduce(tensor, dst=dst, op=dist.ReduceOp.SUM)  # dst's tensor: the sum

        if rank == dst:  # on the other ranks the tensor's contents are now undefined
            expected = sum(r * 100 + iteration for r in range(world))
            ctx.check(torch.all(tensor == expected),
                      f"sum at rank {dst}, iteration {iteration}")
