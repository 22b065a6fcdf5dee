"""pipeline: stage-to-stage activations: each rank is one layer of a model.

Rank 0 makes the input, every rank applies its layer and passes the activation to the
next rank, and the last rank holds the model's output, as in pipeline parallelism.
"""

import torch
import torch.distributed as dist

MIN_RANKS = 2


def layer(x):
    return x * 2 + 1  # a tiny stand-in for a real layer; same on every stage


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        expected = float(iteration)  # the input, then what `rank` layers make of it
        for _ in range(rank):
            expected = layer(expected)

        if rank == 0:
            x = torch.full((numel,), float(iteration), device=ctx.device)  # the input
        else:
            x = torch.empty(numel, device=ctx.device)
            dist.recv(x, src=rank - 1)  # wait for the previous stage's activation
        ctx.check(torch.all(x == expected),
                  f"input of stage {rank}, iteration {iteration}")

        x = layer(x)
        if rank < world - 1:
            dist.send(x, dst=rank + 1)  # hand the activation on to the next stage
        else:
            ctx.check(torch.all(x == layer(expected)),
                      f"model output of iteration {iteration}")
