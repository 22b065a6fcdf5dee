"""A tiny unmodified torch.distributed job (no commviz import): gloo, initialized from the
environment that torchrun sets; per step each rank all-reduces, broadcasts, and rank 0
sends to rank 1.

``python allreduce_job.py STEPS [--sleep S] [--crash-rank R]``: S seconds between steps;
rank R dies (exit code 3) in the middle of step 1.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def say(line: str) -> None:
    """One write per line, so that the ranks' lines never interleave on a shared pipe."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("steps", type=int)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--crash-rank", type=int, default=None)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(args.steps):
        if step and args.sleep:
            time.sleep(args.sleep)
        t = torch.full((256,), float(rank + step))
        dist.all_reduce(t)
        expected = sum(r + step for r in range(world))
        assert t[0].item() == expected, (t[0].item(), expected)
        if step == 1 and rank == args.crash_rank:
            say(f"rank {rank}: crashing on purpose")
            os._exit(3)
        dist.broadcast(t, src=0)
        if rank == 0:
            dist.send(t, dst=1)
        elif rank == 1:
            dist.recv(t, src=0)
    say(f"rank {rank}: {args.steps} steps ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
