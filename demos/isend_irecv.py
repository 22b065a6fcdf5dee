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

    for step in ctx.steps():
        outgoing = torch.full((numel,), float(rank * 100 + step), device=ctx.device)
        incoming = torch.empty_like(outgoing)

        # Both calls return at once with a request. Even ranks post the send first, odd ranks
        # the receive: NCCL runs one pair's operations in order, so every send meets its recv.
        if rank % 2 == 0:
            requests = [dist.isend(outgoing, dst=right), dist.irecv(incoming, src=left)]
        else:
            requests = [dist.irecv(incoming, src=left), dist.isend(outgoing, dst=right)]

        product = ones @ ones  # local compute, overlapping with the transfers in flight

        for request in requests:
            request.wait()  # only now block until this transfer is done (wait once only)
        ctx.check(torch.all(product == 256), f"local compute of step {step}")
        ctx.check(torch.all(incoming == left * 100 + step), f"data from rank {left}, step {step}")
