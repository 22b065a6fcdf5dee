"""send_recv: blocking point-to-point: rank 0 sends a tensor to every other rank in turn.

Like a teacher handing back exams one desk at a time: each student waits at their desk
(recv blocks) until their own copy arrives, and the teacher moves on after each hand-over.
"""

import torch
import torch.distributed as dist

MIN_RANKS = 2


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)

    for iteration in ctx.iterations():
        if rank == 0:
            for dst in range(1, world):
                parcel = torch.full((numel,), float(dst * 100 + iteration),
                                    device=ctx.device)
                dist.send(parcel, dst=dst)  # gloo: returns once sent; NCCL: once queued
        else:
            parcel = torch.empty(numel, device=ctx.device)
            # Compare iteration 1 with the later ones: NCCL connects two ranks on
            # their first send/recv, so that one is slower; gloo connected every pair
            # in init_process_group, so there a slow first one is only warm-up.
            dist.recv(parcel, src=0)  # blocks until rank 0's tensor has arrived
            ctx.check(torch.all(parcel == rank * 100 + iteration),
                      f"parcel of iteration {iteration}")
