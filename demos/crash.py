"""crash: one rank dies in the middle of the run, without a word, as a killed process does.

At iteration 4 one rank is killed (SIGKILL, like the kernel's out-of-memory killer): no
error message, no goodbye. Its peers fail too inside all_reduce #4 (gloo sees their
connections to it closed; at the latest the process group's timeout, PG_TIMEOUT_S, ends
them); the diagnosis names the rank that vanished. The launcher reports the failed ranks
and the demo ends with an error, as the real job would.
"""

import os
import signal

import torch
import torch.distributed as dist

MIN_RANKS = 2
PG_TIMEOUT_S = 6  # seconds a rank waits inside an operation before it gives up
CRASH_AT = 4
# headless, iterations this far apart unless --interval says otherwise: the victim dies in
# the middle of the run, after its first records have reached the viewer (its last ones die
# with it)
HEADLESS_INTERVAL_S = 0.5


def main(ctx):
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = ctx.numel(torch.float32)
    victim = world // 2

    for iteration in ctx.iterations():
        if rank == victim and iteration == CRASH_AT:
            os.kill(os.getpid(), signal.SIGKILL)  # out of memory: the process vanishes

        grads = torch.ones(numel, device=ctx.device)
        dist.all_reduce(grads)
        ctx.check(torch.all(grads == world), f"sum of iteration {iteration}")
