"""ring_allreduce: all_reduce written by hand with isend/irecv around a ring.

The tensor is cut into world chunks. Phase 1 (reduce-scatter): for world-1 steps each rank
adds the chunk from its left neighbour; then each rank owns one finished chunk. Phase 2
(all-gather): for world-1 more steps the finished chunks travel around the ring.
"""

import torch
import torch.distributed as dist

MIN_RANKS = 2


def exchange(rank, send_buf, right, recv_buf, left):
    """Send to the right neighbour while receiving from the left one."""
    if rank % 2 == 0:  # even ranks send first, odd receive first: see isend_irecv (NCCL)
        requests = [dist.isend(send_buf, dst=right), dist.irecv(recv_buf, src=left)]
    else:
        requests = [dist.irecv(recv_buf, src=left), dist.isend(send_buf, dst=right)]
    for request in requests:
        request.wait()


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world, (rank - 1) % world
    chunk = ctx.block_numel(torch.float32)  # elements in each of the world chunks

    for iteration in ctx.iterations():
        data = torch.full((world * chunk,), float(rank * 100 + iteration), device=ctx.device)
        chunks = data.view(world, chunk)  # chunks[c] is a view into data
        incoming = torch.empty_like(chunks[0])

        for i in range(world - 1):  # reduce-scatter: pass partial sums to the right
            exchange(rank, chunks[(rank - i) % world], right, incoming, left)
            chunks[(rank - i - 1) % world] += incoming  # one more contribution added
        for i in range(world - 1):  # all-gather: pass finished chunks to the right
            exchange(rank, chunks[(rank + 1 - i) % world], right, incoming, left)
            chunks[(rank - i) % world].copy_(incoming)  # a finished chunk arrives

        expected = sum(r * 100 + iteration for r in range(world))  # what all_reduce SUM gives
        ctx.check(torch.all(data == expected), f"hand-made all-reduce of iteration {iteration}")
