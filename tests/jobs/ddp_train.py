"""A small, unmodified DDP training script (no commviz import): gloo on CPU, initialized from
the environment torchrun sets, a fixed seed, a few SGD steps of a small MLP classifier.

``python ddp_train.py [--steps N] [--bucket-cap-mb MB]``

Each rank prints one JSON line per step, so that a test can check what commviz recorded
against what DDP really did, without commviz's help:
``{"rank", "step", "loss", "buckets", "t0", "t1"}``: the loss (``repr`` precision), the
bytes of each gradient bucket the reducer holds for this step's backward (in the order it
reduces them), and the step's wall-clock window (``time.time_ns``). Then one line
``{"rank", "final_loss", "param_bytes", "params_sha256"}``.
"""

import argparse
import hashlib
import json
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def say(obj: dict) -> None:
    """One write per line, so that the ranks' lines never interleave on a shared pipe."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--bucket-cap-mb", type=float, default=0.025)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial model everywhere (DDP broadcasts rank 0's anyway)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                          nn.Linear(128, 10))
    ddp = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1234 + rank)  # each rank its own shard of data
    loss = torch.zeros(())
    for step in range(args.steps):
        x, y = torch.randn(16, 32, generator=gen), torch.randint(0, 10, (16,), generator=gen)
        t0 = time.time_ns()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x), y)
        buckets = [b.buffer().nbytes for b in ddp.reducer._get_zeros_like_grad_buckets()]
        loss.backward()
        opt.step()
        t1 = time.time_ns()
        say({"rank": rank, "step": step, "loss": loss.item(), "buckets": buckets,
             "t0": t0, "t1": t1})
    params = b"".join(p.detach().numpy().tobytes() for p in ddp.parameters())
    say({"rank": rank, "final_loss": loss.item(), "param_bytes": len(params),
         "params_sha256": hashlib.sha256(params).hexdigest()})
    # Both ranks done before either tears gloo down: without it, about 1 run in 10 of the DDP
    # script (no commviz involved) aborted at exit ("terminate called without an active
    # exception").
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
