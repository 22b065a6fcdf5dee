"""batch_isend_irecv: one call posts sends and receives to both ring neighbours together.

Each rank describes its four transfers as P2POp entries (send and receive, left and
right) and hands them over as one batch, so no send can wait on a receive not yet posted.
"""

import torch
import torch.distributed as dist

MIN_RANKS = 2


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world, (rank - 1) % world
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        mine = torch.full((numel,), float(rank * 100 + iteration), device=ctx.device)
        from_left, from_right = torch.empty_like(mine), torch.empty_like(mine)

        ops = [
            dist.P2POp(dist.isend, mine, right),
            dist.P2POp(dist.irecv, from_left, left),
            dist.P2POp(dist.isend, mine, left),
            dist.P2POp(dist.irecv, from_right, right),
        ]
        requests = dist.batch_isend_irecv(ops)  # posts all four at once
        for request in requests:
            request.wait()

        ctx.check(torch.all(from_left == left * 100 + iteration),
                  f"from rank {left}, iteration {iteration}")
        ctx.check(torch.all(from_right == right * 100 + iteration),
                  f"from rank {right}, iteration {iteration}")
