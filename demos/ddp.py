"""ddp: a small model trained with DistributedDataParallel: gradients all-reduced in buckets.

Every rank holds a full copy of the model and trains it on its own data. During backward,
DDP packs the gradients into buckets and all-reduces each bucket (averaging it over the
ranks) as soon as its gradients are ready, while backward goes on computing the rest: so
every rank takes the same optimizer step and the copies stay identical.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import commviz

BUCKET_MB = 0.01  # tiny buckets (about 10 KB), so that even this small model has two


def main(ctx):
    torch.manual_seed(0)  # the same starting model everywhere (DDP also broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 1)).to(ctx.device)
    gpu = [ctx.device.index] if ctx.device.type == "cuda" else None
    ddp = DDP(model, device_ids=gpu, bucket_cap_mb=BUCKET_MB)  # broadcasts rank 0's weights
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(ctx.rank)  # each rank draws its own batches

    for iteration in ctx.iterations():
        x = torch.randn(32, 16, generator=data).to(ctx.device)
        y = x[:, :4].sum(dim=1, keepdim=True)  # what the model should learn

        with commviz.phase("forward"):
            loss = nn.functional.mse_loss(ddp(x), y)
        with commviz.phase("backward"):
            loss.backward()  # the bucket all-reduces happen inside this call
        with commviz.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        if ctx.rank == 0:
            print(f"iteration {iteration}: loss {loss.item():.4f}", flush=True)

    # Averaged gradients mean identical updates: every copy must still equal rank 0's.
    mine = torch.cat([p.detach().flatten() for p in model.parameters()])
    rank0 = mine.clone()
    dist.broadcast(rank0, src=0)
    ctx.check(torch.equal(mine, rank0), "model copies identical after training")
