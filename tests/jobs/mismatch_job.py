"""4 gloo ranks that know nothing of commviz; at step 6 rank 1 all_reduces 64 floats while the
others send 16: gloo aborts (its size check), before any rank can say what it called."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, 11):
    t = torch.ones(64 if rank == 1 and step == 6 else 16)
    dist.all_reduce(t)
