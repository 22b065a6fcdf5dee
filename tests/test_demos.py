"""Every demo runs on real gloo ranks, checks its own results, and is seen by the viewer."""

import importlib

import pytest
import torch
from ranks import REDUCE_SCATTER_TENSOR, run_ranks

from commviz import launcher
from commviz.rank.runner import DemoContext

DEMOS = launcher.demos()
# the op each demo is about: its records must reach the viewer
OP = {"send_recv": "send", "isend_irecv": "isend", "batch_isend_irecv": "isend",
      "objects": "all_gather_object", "ring_allreduce": "isend", "pipeline": "send",
      "all": "all_reduce", "ddp": "all_reduce", "fsdp": REDUCE_SCATTER_TENSOR,
      "straggler": "all_reduce"}
# fault demos that end in a failure on purpose: run end to end in test_fault_demos.py
FAILING = {"hang", "crash", "mismatch"}


def _skip_without_all_to_all(name: str) -> None:
    if name == "all_to_all" and not launcher.gloo_has_all_to_all():
        pytest.skip("gloo has all_to_all since torch 2.12 (the tour takes all_to_all_single)")


def _run_demo(rank, world, name, size):
    module = importlib.import_module(f"commviz.demos.{name}")
    module.main(DemoContext(rank, world, torch.device("cpu"), size, iters=2, interval=0.0))


@pytest.mark.parametrize("name", sorted(set(DEMOS) - FAILING))
def test_demo_runs_and_reports_its_op(name):
    _skip_without_all_to_all(name)
    world = max(3, DEMOS[name].min_ranks)
    run = run_ranks(_run_demo, world, name, 4096, timeout=90)
    ops = {rec["op"] for rank in range(world) for rec in run.ops(rank)}
    assert OP.get(name, name) in ops, ops


@pytest.mark.parametrize("name", ["all_gather", "reduce_scatter", "all_to_all", "ring_allreduce"])
def test_demos_that_split_buffers_take_sizes_that_do_not_divide(name):
    _skip_without_all_to_all(name)
    run_ranks(_run_demo, 3, name, 10, timeout=60)


def test_the_tour_counts_steps_across_its_stops():
    ctx = DemoContext(0, 1, torch.device("cpu"), 8, iters=None, interval=0.0)
    parts = [list(ctx.part(2).steps()), list(ctx.part(3).steps())]
    assert parts == [[0, 1], [0, 1, 2]] and ctx.started == [5]
