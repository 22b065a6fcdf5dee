import torch
import torch.distributed as dist
from ranks import run_ranks


def _allreduce(rank, world):
    t = torch.ones(4)
    dist.all_reduce(t)
    assert t[0] == world


def test_all_reduce_two_ranks():
    run = run_ranks(_allreduce, 2)
    for rank in range(2):
        (rec,) = run.ops(rank)
        assert rec["op"] == "all_reduce" and rec["seq"] == 1 and rec["group"] == [0, 1]
        assert rec["bytes_in"] == rec["bytes_out"] == 16
        assert rec["t_start_ns"] <= rec["t_end_ns"]
