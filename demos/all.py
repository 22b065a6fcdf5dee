"""all: a guided tour: a few iterations of every operation in turn, on the same ranks.

Point-to-point first, then the rooted collectives, then those where everyone ends with
something, then the barrier: each stop runs the demo of that name. Iterations are numbered
across the whole tour, as the viewer counts them.
"""

import importlib

import torch.distributed as dist

from commviz.launch.launcher import gloo_has_all_to_all

TOUR = ["send_recv", "isend_irecv", "broadcast", "scatter", "gather", "reduce", "all_reduce",
        "all_gather", "reduce_scatter", "all_to_all", "barrier", "objects"]
ITERATIONS_PER_STOP = 3
MIN_RANKS = 2


def main(ctx):
    for name in TOUR:
        if name == "all_to_all" and dist.get_backend() == "gloo" and not gloo_has_all_to_all():
            name = "all_to_all_single"  # gloo before torch 2.12: the same exchange, one tensor
        demo = importlib.import_module(f"commviz.demos.{name}")
        if dist.get_world_size() >= getattr(demo, "MIN_RANKS", 1):
            demo.main(ctx.part(ITERATIONS_PER_STOP))
