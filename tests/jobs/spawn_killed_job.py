"""A job that starts its own ranks with ``torch.multiprocessing.spawn`` (no commviz import),
whose rank 1 SIGKILLs itself right after its K-th all_reduce; spawn then stops the others.

    python spawn_killed_job.py K PORT
"""

import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 3


def rank_main(rank: int, k: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    t = torch.ones(4)
    for i in range(1, 1_000_000):
        dist.all_reduce(t)
        if rank == 1 and i == k:
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    mp.spawn(rank_main, args=(int(sys.argv[1]), int(sys.argv[2])), nprocs=WORLD)
