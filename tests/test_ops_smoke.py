import pytest
import torch
import torch.distributed as dist
from ranks import run_ranks

pytestmark = pytest.mark.integration  # real ranks, sockets or apps


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


def _destroy_and_remake_a_subgroup(rank, world):
    import gc
    import time
    import weakref

    t = torch.ones(4)
    sub = dist.new_group([0, 1])
    dist.all_reduce(t, group=sub)
    dist.all_reduce(t, group=sub)
    gone = weakref.ref(sub)
    dist.destroy_process_group(sub)
    del sub
    deadline = time.monotonic() + 5
    while gone() is not None and time.monotonic() < deadline:  # the emitter lets go each tick
        time.sleep(0.02)
        gc.collect()
    assert gone() is None, "a destroyed process group is still alive"
    again = dist.new_group([0, 1])
    dist.all_reduce(t, group=again)


def test_a_destroyed_group_is_let_go_and_its_successor_counts_afresh():
    run = run_ranks(_destroy_and_remake_a_subgroup, 2)
    for rank in range(2):
        first, second, third = run.ops(rank)
        assert [r["seq"] for r in (first, second, third)] == [1, 2, 1]
        assert first["pg"] == second["pg"] != third["pg"]
