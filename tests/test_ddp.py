"""DistributedDataParallel on real gloo ranks: every gradient bucket is seen, results unchanged.

Each rank first trains without commviz (DDP's own C++ reduction), then the same model on the
same data instrumented, and checks the two runs agree bit for bit. The sizes of the buckets
the reducer really used come from the reducer itself and are compared with the records.
"""

import json

import pytest
import torch
import torch.distributed as dist
from ranks import run_ranks
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import commviz
from commviz.rank import hooks
from commviz.wire import protocol, ring

STEPS = 3
CAP_MB = 0.01  # about 10 KB: the model below makes two buckets


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 1))


def _train(rank, ddp_kwargs, hook, set_to_none, late=False):
    ddp = DDP(_model(), bucket_cap_mb=CAP_MB, **ddp_kwargs)
    if hook is not None and not late:
        ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses, buckets = [], []
    for step in range(STEPS):
        gen = torch.Generator().manual_seed(1000 * rank + step)
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 1, generator=gen)
        opt.zero_grad(set_to_none=set_to_none)
        loss = nn.functional.mse_loss(ddp(x), y)
        if hook is not None and late and step == 0:  # after the first forward, as torch allows
            ddp.register_comm_hook(None, hook)
        # the buckets this step's backward will reduce, as the reducer holds them
        buckets.append([b.buffer().nbytes for b in ddp.reducer._get_zeros_like_grad_buckets()])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return [p.detach().clone() for p in ddp.parameters()], losses, buckets


def _compare(rank, world, out, ddp_kwargs, hook, set_to_none, late=False):
    addr = hooks._EMITTER.addr
    commviz.uninstrument()
    params0, losses0, _ = _train(rank, ddp_kwargs, hook, set_to_none, late)
    commviz.instrument(addr)
    params, losses, buckets = _train(rank, ddp_kwargs, hook, set_to_none, late)
    assert losses == losses0, (losses, losses0)
    assert all(torch.equal(a, b) for a, b in zip(params, params0)), "parameters differ"
    slots = ring.read(hooks._EMITTER.ring.path).records  # what a harvester would recover
    in_ring = int(((slots["flags"] & protocol.FLAG_DDP) != 0).sum())
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"buckets": buckets, "param_bytes": sum(p.nbytes for p in params),
                   "ddp_in_ring": in_ring}, f)


CASES = {
    "default": ({}, None, True),
    "static_graph": ({"static_graph": True}, None, True),
    "grad_as_bucket_view_kept": ({"gradient_as_bucket_view": True}, None, False),
    "user_hook": ({}, allreduce_hook, True),
    "user_hook_after_first_forward": ({}, allreduce_hook, True, True),
}


@pytest.mark.integration
@pytest.mark.parametrize(("case", "world"), [("default", 3), ("default", 2),
                                             ("static_graph", 3),
                                             ("grad_as_bucket_view_kept", 2),
                                             ("user_hook", 2),
                                             ("user_hook_after_first_forward", 2)])
def test_one_flagged_all_reduce_per_bucket_and_unchanged_results(tmp_path, case, world):
    out = tmp_path / "ranks"
    run = run_ranks(_compare, world, str(out), *CASES[case], timeout=120)
    seen = {}
    for rank in range(world):
        info = json.loads((tmp_path / f"ranks.{rank}").read_text())
        ddp = [r for r in run.ops(rank) if r["flags"] & protocol.FLAG_DDP]
        assert info["ddp_in_ring"] == len(ddp)  # the ring's slots are flagged as the records
        # the construction-time sync of parameters: one broadcast from rank 0
        assert ddp[0]["op"] == "broadcast" and ddp[0]["peer"] == 0, ddp[0]
        assert ddp[0]["bytes_in" if rank == 0 else "bytes_out"] == info["param_bytes"]
        reduces = ddp[1:]
        assert [r["op"] for r in reduces] == ["all_reduce"] * len(reduces)
        expected = [size for step in info["buckets"] for size in step]
        assert [r["bytes_in"] for r in reduces] == expected
        assert len(info["buckets"][-1]) == 2 and all(r["async"] for r in reduces)
        assert all(r["t_end_ns"] >= r["t_start_ns"] for r in reduces)
        seen[rank] = [(r["seq"], r["op"], r["bytes_in"] + r["bytes_out"]) for r in ddp[1:]]
        if not case.startswith("user_hook"):  # the line that ran backward
            assert {r["file"] for r in reduces} == {__file__}, reduces[0]
    assert all(seen[r] == seen[0] for r in seen), seen  # the same instances on every rank


def _uneven(rank, world):
    """A non-power-of-two world with gradients living in the buckets: DDP is left alone."""
    ddp = DDP(_model(), bucket_cap_mb=CAP_MB, gradient_as_bucket_view=True)
    ddp(torch.ones(2, 16)).sum().backward()


@pytest.mark.integration
def test_gradient_views_on_three_ranks_keep_ddps_own_reduction(capfd):
    run = run_ranks(_uneven, 3, timeout=60)
    for rank in range(3):
        assert [r["op"] for r in run.ops(rank)] == ["broadcast"]  # the bucket is not seen
    # and the program is told so, once (by the first rank), rather than left to wonder
    notes = [line for line in capfd.readouterr().err.splitlines()
             if "gradient all-reduces are not seen" in line]
    assert notes == ["commviz: this DDP model's gradient all-reduces are not seen: "
                     "gradient_as_bucket_view=True on 3 ranks, not a power of two "
                     "(docs/coverage.md says how to see them)"], notes


def _builtin_hook(rank, world):
    ddp = DDP(_model(), bucket_cap_mb=CAP_MB)
    ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    ddp(torch.ones(2, 16)).sum().backward()


@pytest.mark.integration
def test_a_builtin_comm_hook_is_left_to_ddp_and_said_so(capfd):
    run = run_ranks(_builtin_hook, 2, timeout=60)
    assert [r["op"] for r in run.ops(0)] == ["broadcast"]
    err = capfd.readouterr().err
    assert err.count("gradient all-reduces are not seen: DDP runs the built-in comm hook") == 1, \
        err


def _uninstrumented(rank, world):
    from torch.distributed import utils

    commviz.uninstrument()
    assert DDP.__init__.__module__ == "torch.nn.parallel.distributed"
    assert dist._broadcast_coalesced.__module__ == "torch._C._distributed_c10d"
    assert utils.dist._broadcast_coalesced is dist._broadcast_coalesced
    ddp = DDP(_model())
    ddp(torch.ones(2, 16)).sum().backward()


@pytest.mark.integration
def test_uninstrument_restores_ddp():
    run = run_ranks(_uninstrumented, 2, timeout=60)
    assert run.ops(0) == run.ops(1) == []


def test_a_demo_installed_inside_commviz_is_the_programs_line():
    """Installed with `pip install .`, the demos lie in commviz/demos/: their frames were
    skipped as commviz's own, and the ddp demo's buckets read '<frozen runpy>:88' (user
    trial); commviz's other frames are still skipped."""
    import os

    from commviz.rank import ddp

    def frame_in(path: str):
        scope: dict = {}
        exec(compile("import sys\nframe = sys._getframe()", path, "exec"), scope)
        return scope["frame"]

    demo = frame_in(os.path.join(ddp._DEMOS_DIR, "ddp.py"))
    assert ddp._program_frame(demo) is demo
    runner = frame_in(os.path.join(os.path.dirname(ddp.__file__), "runner.py"))
    assert ddp._program_frame(runner) is not runner
