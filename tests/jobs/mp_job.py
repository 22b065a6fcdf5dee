"""A job that starts its own ranks with torch.multiprocessing (no commviz import).

``python mp_job.py spawn|fork PORT [--dataloader]``: two gloo ranks, each does two
all-reduces; with --dataloader, each then all-reduces the batches of a DataLoader whose two
workers are forked from the rank.
"""

import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def say(line: str) -> None:
    """One write per line, so that the ranks' lines never interleave on a shared pipe."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def rank_main(rank: int, port: int, dataloader: bool) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    for _ in range(2):
        t = torch.ones(64)
        dist.all_reduce(t)
        assert t[0].item() == 2
    if dataloader:
        from torch.utils.data import DataLoader, TensorDataset

        loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4, num_workers=2,
                            multiprocessing_context="fork")
        for (batch,) in loader:
            dist.all_reduce(batch)
    say(f"rank {rank} ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.start_processes(rank_main, args=(int(sys.argv[2]), "--dataloader" in sys.argv),
                       nprocs=2, start_method=sys.argv[1])
