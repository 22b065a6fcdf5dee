"""isend_irecv: non-blocking point-to-point in a ring: send to rank+1, receive from rank-1.

isend and irecv return at once with a request; the rank computes something useful while
the data travels, and request.wait() is where it finally waits for the transfer.
"""

import torch
import torch.distributed as dist

MIN_RANKS = 2


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world, (rank - 1) % world
    numel = ctx.numel(torch.float32)
    ones = torch.ones(256, 256, device=ctx.device)

    for iteration in ctx.iterations():
        outgoing = torch.full((numel,), float(rank * 100 + iteration), device=ctx.device)
        incoming = torch.empty_like(outgoing)

        # Even ranks post the send first, odd ranks the receive. On NCCL a pair's first
        # transfer waits until both ranks post it (it connects them): if every rank sent
        # first, each would wait for a neighbour busy connecting to its other side.
        if rank % 2 == 0:
            requests = [dist.isend(outgoing, dst=right), dist.irecv(incoming, src=left)]
        else:
            requests = [dist.irecv(incoming, src=left), dist.isend(outgoing, dst=right)]

        product = ones @ ones  # local compute, overlapping with the transfers in flight

        for request in requests:
            request.wait()  # only now block until this transfer is done (wait once only)
        ctx.check(torch.all(product == 256), f"local compute of iteration {iteration}")
        ctx.check(torch.all(incoming == left * 100 + iteration),
                  f"data from rank {left}, iteration {iteration}")
