"""The alpha-beta cost model: exact costs from the schedules, and fits that recover the
parameters they were made from."""

import math

import pytest

from commviz.knowledge import costmodel, schedules
from commviz.knowledge.costmodel import Cost, Fit


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_all_reduce_sends_two_n_minus_one_over_n_of_s_in_two_n_minus_one_steps(n):
    size = 1200 * n
    c = costmodel.cost(schedules.schedule("all_reduce", "nccl", n, size))
    assert c == Cost(2 * (n - 1), 2 * (n - 1) * size // n)


def test_all_gather_sends_n_minus_one_blocks_and_broadcast_tree_root_sends_most():
    assert costmodel.cost_of("all_gather", "gloo", 4, 4096) == Cost(3, 3 * 1024)
    tree = costmodel.cost_of("broadcast", "gloo", 8, 1000)
    assert tree == Cost(3, 3000)  # binomial tree: the root sends S in each of log2(8) steps
    assert costmodel.cost_of("batch_isend_irecv", "gloo", 2, 8) is None


def _samples(alpha, beta, shapes):
    return [(c, c.steps * alpha + c.sent / beta) for c in shapes]


def test_a_fit_recovers_the_latency_and_bandwidth_it_was_made_from():
    shapes = [Cost(6, 3 * 2**20), Cost(3, 3 * 2**10), Cost(1, 4), Cost(2, 2**22)]
    got = costmodel.fit(_samples(50e-6, 2e9, shapes))
    assert got is not None and got.shapes == 4
    assert got.alpha_s == pytest.approx(50e-6, rel=1e-6)
    assert got.beta_bps == pytest.approx(2e9, rel=1e-6)
    assert got.predict(Cost(10, 10**6)) == pytest.approx(10 * 50e-6 + 10**6 / 2e9)


def test_one_shape_or_proportional_shapes_cannot_be_fitted():
    assert costmodel.fit([(Cost(3, 3072), 1e-3)] * 5) is None
    assert costmodel.fit([(Cost(3, 3072), 1e-3), (Cost(6, 6144), 2e-3)]) is None


def test_latency_bound_measurements_fit_with_no_bandwidth_term():
    # the same time whatever the bytes: beta cannot be finite and positive
    got = costmodel.fit([(Cost(2, 10), 2e-4), (Cost(2, 10**6), 2e-4), (Cost(4, 10), 4e-4)])
    assert got is not None and math.isinf(got.beta_bps)
    assert got.alpha_s == pytest.approx(1e-4)


def test_fit_stats_reads_model_rows_and_skips_object_collectives():
    rows = [{"op": "all_reduce", "ranks": 4, "size": 4096, "time_p50_us": 100.0},
            {"op": "all_gather_object", "ranks": 4, "size": 99, "time_p50_us": 9e9},
            {"op": "send", "ranks": 2, "size": 2**20, "time_p50_us": 600.0}]
    got = costmodel.fit_stats(rows, "gloo")
    assert isinstance(got, Fit) and got.shapes == 2
    assert got.predict(costmodel.cost_of("all_reduce", "gloo", 4, 4096)) == \
        pytest.approx(100e-6, rel=1e-6)


def test_a_fit_leaves_out_groups_beyond_the_ranks_it_counts():
    row = {"op": "all_reduce", "ranks": 1024, "size": 25 << 20, "time_p50_us": 15_000.0}
    small = [{"op": "all_reduce", "ranks": 4, "size": s, "time_p50_us": 10.0 + s / 1e3}
             for s in (1024, 1 << 20)]
    assert costmodel.fit_stats([row], "nccl") is None  # no schedule of 1,024 ranks built
    assert costmodel.fit_stats(small + [row], "nccl") == costmodel.fit_stats(small, "nccl")
