"""Every demo runs on real gloo ranks, checks its own results, and is seen by the viewer."""

import importlib

import pytest
import torch
from ranks import REDUCE_SCATTER_TENSOR, run_ranks

from commviz.knowledge import sweep
from commviz.launch import launcher
from commviz.launch.runner import DemoContext

DEMOS = launcher.demos()
# the op each demo is about: its records must reach the viewer
OP = {"send_recv": "send", "isend_irecv": "isend", "batch_isend_irecv": "isend",
      "objects": "all_gather_object", "ring_allreduce": "isend", "pipeline": "send",
      "all": "all_reduce", "ddp": "all_reduce", "fsdp": REDUCE_SCATTER_TENSOR,
      "straggler": "all_reduce", "sweep": "all_reduce"}
# fault demos that end in a failure on purpose: run end to end in test_fault_demos.py
FAILING = {"hang", "crash", "mismatch"}


def _skip_without_all_to_all(name: str) -> None:
    if name == "all_to_all" and not launcher.gloo_has_all_to_all():
        pytest.skip("gloo has all_to_all since torch 2.12 (the tour takes all_to_all_single)")


def _run_demo(rank, world, name, size):
    module = importlib.import_module(f"commviz.demos.{name}")
    module.main(DemoContext(rank, world, torch.device("cpu"), size, iters=2, interval=0.0))


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(set(DEMOS) - FAILING))
def test_demo_runs_and_reports_its_op(name, monkeypatch):
    _skip_without_all_to_all(name)
    # the sweep's ranks read it from their environment: a short one (its own tests: test_sweep)
    monkeypatch.setenv(*sweep.Sweep(max_bytes=1024, iters=2, warmup=1).env().popitem())
    world = max(3, DEMOS[name].min_ranks)
    run = run_ranks(_run_demo, world, name, 4096, timeout=90)
    ops = {rec["op"] for rank in range(world) for rec in run.ops(rank)}
    assert OP.get(name, name) in ops, ops


# the op whose records carry the demo's tensor, and how many of the blocks it carries
CARRIER = {"all_gather": ("all_gather", 3), "reduce_scatter": ("reduce_scatter", 3),
           "all_to_all": ("all_to_all", 3), "ring_allreduce": ("isend", 1)}


@pytest.mark.integration
@pytest.mark.parametrize("name", ["all_gather", "reduce_scatter", "all_to_all", "ring_allreduce"])
def test_demos_that_split_buffers_take_sizes_that_do_not_divide(name):
    """--size 10 on 3 ranks: the bytes the demo moves are those its size note announces."""
    _skip_without_all_to_all(name)
    run = run_ranks(_run_demo, 3, name, 10, timeout=60)
    op, blocks = CARRIER[name]
    moved = {rec["bytes_in"] for rec in run.ops(0) if rec["op"] == op}
    note = launcher.size_note(name, 10, 3, asked=True)
    if name == "all_gather":  # whole float32 elements: 2 of them
        assert moved == {8} and note == "--size 10: 8 B used (2 float32)"
    else:  # three blocks of one element each (ring_allreduce sends one block at a time)
        assert moved == {4 * blocks}
        assert note == "--size 10: 12 B used (3 blocks of 1 float32)"


def test_iterations_count_from_one_and_a_tour_goes_on_counting():
    """As the viewer's "Next iteration (k)" does: the gate's k-th iteration is number k."""
    ctx = DemoContext(0, 1, torch.device("cpu"), 8, iters=None, interval=0.0)
    parts = [list(ctx.part(2).iterations()), list(ctx.part(3).iterations())]
    assert parts == [[1, 2], [3, 4, 5]] and ctx.started == [5]


@pytest.mark.parametrize(("size", "world", "numel", "block"),
                         [(4096, 4, 1024, 256), (1001, 4, 250, 62), (10, 3, 2, 1), (1, 2, 1, 1)])
def test_sizes_round_down_to_whole_elements_and_blocks_of_at_least_one(size, world, numel, block):
    ctx = DemoContext(0, world, torch.device("cpu"), size, iters=1, interval=0.0)
    assert (ctx.numel(torch.float32), ctx.block_numel(torch.float32)) == (numel, block)
    assert ctx.numel(torch.float64) == max(1, size // 8)
