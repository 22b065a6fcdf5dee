"""all_to_all: every rank sends a different block to every rank (block j goes to rank j).

Like a mail sorting round: everyone has one letter for each person, and after the round
everyone holds one letter from each person: a transpose of who-has-what.
"""

import torch
import torch.distributed as dist


def value(sender, receiver, iteration):
    return float(sender * 100 + receiver * 10 + iteration)


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    block = ctx.block_numel(torch.float32)  # elements per letter; world letters per rank

    for iteration in ctx.iterations():
        outbox = [torch.full((block,), value(rank, j, iteration), device=ctx.device)
                  for j in range(world)]
        inbox = [torch.empty(block, device=ctx.device) for _ in range(world)]

        dist.all_to_all(inbox, outbox)  # outbox[j] goes to rank j; inbox[i] from rank i

        for i, letter in enumerate(inbox):
            ctx.check(torch.all(letter == value(i, rank, iteration)),
                      f"from rank {i}, iteration {iteration}")
