"""all_to_all_single: all_to_all on one flat tensor: slice j of the input goes to rank j.

Input and output are single tensors cut into world equal slices; output slice i is
what rank i put in its slice for us (the layout shuffle behind expert parallelism).
"""

import torch
import torch.distributed as dist


def value(sender, receiver, iteration):
    return float(sender * 100 + receiver * 10 + iteration)


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    block = ctx.block_numel(torch.float32)  # elements in each of the world slices

    for iteration in ctx.iterations():
        outgoing = torch.empty(world * block, device=ctx.device)
        for j, part in enumerate(outgoing.view(world, block)):
            part.fill_(value(rank, j, iteration))
        incoming = torch.empty_like(outgoing)

        dist.all_to_all_single(incoming, outgoing)  # slice j to rank j, slice i from i

        for i, part in enumerate(incoming.view(world, block)):
            ctx.check(torch.all(part == value(i, rank, iteration)),
                      f"from rank {i}, iteration {iteration}")
