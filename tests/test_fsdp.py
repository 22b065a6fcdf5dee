"""FSDP2 (fully_shard) on real gloo ranks: its per-step all-gathers and reduce-scatters are seen
with their real sizes, and training gives the same results as without commviz."""

import json

import pytest
import torch
import torch.distributed as dist
from ranks import ALL_GATHER_TENSOR, REDUCE_SCATTER_TENSOR, run_ranks
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

import commviz
from commviz.rank import hooks
from commviz.wire import protocol

pytestmark = pytest.mark.integration  # real ranks, sockets or apps

STEPS = 3
WORLD = 2


def _train(rank):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 4))  # every dim 0 divides by WORLD: no padding
    units = [layer for layer in model if isinstance(layer, nn.Linear)]
    for layer in units:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        gen = torch.Generator().manual_seed(1000 * rank + step)
        loss = nn.functional.mse_loss(model(torch.randn(8, 16, generator=gen)),
                                      torch.randn(8, 4, generator=gen))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    shards = [sum(p.to_local().nbytes for p in unit.parameters()) for unit in units]
    return [p.to_local().clone() for p in model.parameters()], losses, shards


def _compare(rank, world, out):
    addr = hooks._EMITTER.addr
    commviz.uninstrument()
    params0, losses0, _ = _train(rank)
    commviz.instrument(addr)
    params, losses, shards = _train(rank)
    assert losses == losses0 and all(torch.equal(a, b) for a, b in zip(params, params0))
    with open(f"{out}.{rank}", "w") as f:
        json.dump(shards, f)


def test_every_all_gather_and_reduce_scatter_is_seen_with_its_size(tmp_path):
    run = run_ranks(_compare, WORLD, str(tmp_path / "shards"), timeout=120)
    seen = {}
    for rank in range(WORLD):
        shards = json.loads((tmp_path / f"shards.{rank}").read_text())
        recs = run.ops(rank)
        assert {r["op"] for r in recs} == {ALL_GATHER_TENSOR, REDUCE_SCATTER_TENSOR}, recs
        gathers = [r for r in recs if r["op"] == ALL_GATHER_TENSOR]
        scatters = [r for r in recs if r["op"] == REDUCE_SCATTER_TENSOR]
        # all-gather: this rank's shard of one unit in, the whole unit out
        assert all(r["bytes_in"] in shards and r["bytes_out"] == WORLD * r["bytes_in"]
                   for r in gathers), gathers
        # forward gathers every unit each step, backward again (resharded after forward)
        assert sorted(r["bytes_in"] for r in gathers) == sorted(shards * 2 * STEPS)
        # reduce-scatter: each unit's gradients, once per step
        assert sorted((r["bytes_in"], r["bytes_out"]) for r in scatters) == sorted(
            (WORLD * shard, shard) for shard in shards for _ in range(STEPS))
        seen[rank] = [(r["seq"], r["op"], r["bytes_in"]) for r in recs]
    assert seen[0] == seen[1]


def _fsdp1(rank, world):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    # what FSDP1's sync_module_states does on GPUs (it refuses CPU parameters)
    dist._broadcast_coalesced(dist.group.WORLD, [p.detach() for p in module.parameters()],
                              1 << 20, 0)
    model = FullyShardedDataParallel(module, device_id=torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(STEPS):
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
        opt.zero_grad()


def test_fsdp1_on_cpu_is_seen_too():
    run = run_ranks(_fsdp1, WORLD, timeout=120)
    shard = (16 * 64 + 64 + 64 * 4 + 4) // WORLD * 4  # one flat parameter, split in two
    for rank in range(WORLD):
        recs = run.ops(rank)
        sync = recs[0]  # a broadcast of the whole module, not DDP's
        assert sync["op"] == "broadcast" and not sync["flags"] & protocol.FLAG_DDP
        assert sync["bytes_in" if rank == 0 else "bytes_out"] == WORLD * shard
        steps = [(r["op"], r["bytes_in"], r["bytes_out"]) for r in recs[1:]]
        # on CPU FSDP1 gathers into a list; the root keeps its parameters for backward
        gather = ("all_gather", shard, WORLD * shard)
        scatter = (REDUCE_SCATTER_TENSOR, WORLD * shard, shard)
        assert steps == [gather, scatter] * STEPS, steps


def _one_step(rank, world):
    torch.manual_seed(0)
    model = fully_shard(nn.Linear(16, 4))
    loss = model(torch.randn(8, 16)).sum()  # FORWARD
    loss.backward()  # BACKWARD


def test_fsdp_calls_are_put_at_the_program_lines_that_led_to_them():
    run = run_ranks(_one_step, WORLD, timeout=60)
    lines = {tag: n for n, text in enumerate(open(__file__), 1)
             for tag in ("# FORWARD", "# BACKWARD") if text.rstrip().endswith(tag)}
    for rank in range(WORLD):
        sites = [(r["op"], r["file"], r["line"]) for r in run.ops(rank)]
        # the root module stays gathered after forward: no second all_gather in backward
        assert sites == [(ALL_GATHER_TENSOR, __file__, lines["# FORWARD"]),
                         (REDUCE_SCATTER_TENSOR, __file__, lines["# BACKWARD"])], sites
