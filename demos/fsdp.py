"""fsdp: a small model trained with FSDP2 (fully_shard): each rank stores a slice of each layer.

Before a layer runs, FSDP all-gathers its full weights from the slices on every rank, and
frees them again after use (backward gathers them once more). After backward it
reduce-scatters the gradients: each rank receives the sum for its own slice only, and
updates just that slice. Memory per rank shrinks with the number of ranks.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import commviz


def main(ctx):
    torch.manual_seed(0)  # the same starting model everywhere, before it is cut in slices
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 1)).to(ctx.device)
    mesh = init_device_mesh(ctx.device.type, (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)  # one all-gather / reduce-scatter unit per layer
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(ctx.rank)  # each rank draws its own batches

    for iteration in ctx.iterations():
        x = torch.randn(32, 16, generator=data).to(ctx.device)
        y = x[:, :4].sum(dim=1, keepdim=True)  # what the model should learn

        with commviz.phase("forward"):
            loss = nn.functional.mse_loss(model(x), y)  # all-gathers each layer's weights
        with commviz.phase("backward"):
            loss.backward()  # gathers again, then reduce-scatters the gradients
        with commviz.phase("optimizer"):
            optimizer.step()  # updates this rank's slices only
            optimizer.zero_grad()
        if ctx.rank == 0:
            print(f"iteration {iteration}: loss {loss.item():.4f}", flush=True)

    # The slices must still add up to one model: every rank's full copy equals rank 0's.
    mine = model[0].weight.full_tensor()  # all-gathers the slices of one weight
    rank0 = mine.clone()
    dist.broadcast(rank0, src=0)
    ctx.check(torch.equal(mine, rank0), "the slices make the same model on every rank")
