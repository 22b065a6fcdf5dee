"""A training-like loop whose rank 2 is slow before each step's first collective (no commviz
import).

``python step_straggler_job.py PORT STEPS``: three gloo ranks started with
torch.multiprocessing; each step is an all_reduce, an all_gather, a send/recv and a barrier,
and rank 2 sleeps 0.2 s before the all_reduce. Everyone leaves the all_reduce together, so
only each step's first collective shows who was late (user trial).
"""

import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 3


def rank_main(rank: int, port: int, steps: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    t = torch.ones(1024)
    for _ in range(steps):
        if rank == 2:
            time.sleep(0.2)
        dist.all_reduce(t)
        out = [torch.empty(256) for _ in range(WORLD)]
        dist.all_gather(out, torch.ones(256))
        if rank == 0:
            dist.send(torch.ones(16), 1)
        elif rank == 1:
            dist.recv(torch.empty(16), 0)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.start_processes(rank_main, args=(int(sys.argv[1]), int(sys.argv[2])), nprocs=WORLD,
                       start_method="spawn")
