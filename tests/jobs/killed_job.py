"""A gloo job that knows nothing of commviz, whose rank 1 ends it after its K-th all_reduce:
``self`` SIGKILLs rank 1 alone, right after that op (its launcher then stops the others);
``exit`` leaves by ``os._exit(17)`` there (no atexit, no flush); ``all`` waits until the others
are inside the next all_reduce, then SIGKILLs them and itself, one by one, as the OOM killer or
a scheduler would; ``viewer`` SIGKILLs the process whose pid PIDDIR/viewer.pid holds (a
viewer elsewhere, gone with the job), then itself.

    python killed_job.py MODE K PIDDIR
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

mode, k, piddir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
with open(os.path.join(piddir, f"{rank}.pid"), "w") as f:
    f.write(str(os.getpid()))
t = torch.ones(4)
for i in range(1, 1_000_000):
    dist.all_reduce(t)
    if rank == 1 and i == k:
        if mode == "all":
            time.sleep(0.3)  # the others are inside all_reduce #k+1 by now
            for r in range(world):  # one by one, 50 ms apart: their order is known
                if r != rank:
                    os.kill(int(open(os.path.join(piddir, f"{r}.pid")).read()), signal.SIGKILL)
                    time.sleep(0.05)
        if mode == "exit":
            os._exit(17)
        if mode == "viewer":
            os.kill(int(open(os.path.join(piddir, "viewer.pid")).read()), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
