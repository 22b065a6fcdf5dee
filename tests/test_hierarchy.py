"""A large group's collective drawn as nodes (knowledge/hierarchy): the phases, the real steps
each drawn step stands for, the hops inside and between nodes, and what building it costs."""

from __future__ import annotations

import pytest

from commviz.knowledge import hierarchy, schedules
from commviz.knowledge.hierarchy import DRAWN_STEPS_MAX, Scaled, node_sizes, scaled

FLEET = (8,) * 128  # 1,024 ranks, 128 nodes of 8


def runs_cover_each_phase(s: Scaled) -> bool:
    """Each phase's drawn steps stand for its real steps, each once, in order."""
    seen: dict[str, int] = {}
    for step in s.steps:
        if step.first != seen.get(step.phase, 0) or step.count < 1:
            return False
        seen[step.phase] = step.first + step.count
    return seen == dict(s.phases) and sum(seen.values()) == s.real_steps


def test_nccls_ring_at_1024_ranks_is_its_2046_steps_in_30_drawn_each_through_every_node():
    s = scaled("all_reduce", "nccl", FLEET, 25 << 20)
    assert (s.algorithm, s.n, s.nodes, s.per_node, s.real_steps) == ("ring", 1024, 128, 8, 2046)
    assert len(s.steps) == DRAWN_STEPS_MAX and s.schematic and not s.uneven
    assert s.phases == [("RS", 1023), ("AG", 1023)] and runs_cover_each_phase(s)
    assert {step.count for step in s.steps} == {68, 69}  # 1,023 real steps in 15
    assert [step.label for step in s.steps[:2]] == ["RS 1-68", "RS 69-136"]
    for step in s.steps:  # every GPU sends to the next: 7 NVLink hops a node, 1 network hop
        assert step.within == tuple((g, g + 1) for g in range(7))
        assert step.between == tuple((i, (i + 1) % 128) for i in range(128))
        assert step.reduce == (step.phase == "RS")


def test_glooss_ring_sends_to_rank_minus_one_through_the_hosts():
    s = scaled("all_reduce", "gloo", FLEET, 1 << 20)
    assert s.real_steps == 2046 and runs_cover_each_phase(s)
    assert s.steps[0].within == tuple((g, g - 1) for g in range(1, 8))
    assert s.steps[0].between[:2] == ((0, 127), (1, 0))


def test_a_short_op_is_drawn_step_by_step_and_its_tree_climbs_the_nodes_level_by_level():
    s = scaled("all_reduce", "nccl", FLEET, 4096, algorithm="tree")
    assert s.algorithm == "tree" and s.real_steps == 2 * (7 + 7) == len(s.steps)
    assert [p for p, _ in s.phases] == ["up node", "up tree", "down tree", "down node"]
    assert all(step.count == 1 for step in s.steps) and runs_cover_each_phase(s)
    assert [step.within for step in s.steps[:7]] == [((g, g - 1),) for g in range(7, 0, -1)]
    up = [step.between for step in s.steps if step.phase == "up tree"]
    children = [child for level in up for child, _ in level]
    assert sorted(children) == list(range(1, 128))  # every node but the root sends up once
    assert all(parent == (child - 1) // 2 for level in up for child, parent in level)
    down = [step.between for step in s.steps if step.phase == "down tree"]
    assert [pair[::-1] for level in down[::-1] for pair in level] == \
        [pair for level in up for pair in level]


def test_ncclss_chain_crosses_each_node_boundary_once_from_the_root_round_the_ring():
    s = scaled("broadcast", "nccl", (8,) * 4, 1000, root=3, most=100)
    assert s.real_steps == schedules.PIPELINE_CHUNKS + 32 - 2 == len(s.steps)
    crossings = {pair for step in s.steps for pair in step.between}
    # root 3 on node 0: the chain runs 3 .. 31 in ring order, then back into node 0 for 0 .. 2
    assert crossings == {(0, 1), (1, 2), (2, 3), (3, 0)}
    assert s.steps[0].within == ((3, 4),) and s.steps[0].between == ()


@pytest.mark.parametrize("op", sorted(set(schedules._FAMILY) - {
    "send", "isend", "recv", "irecv", "send_object_list", "recv_object_list",
    "batch_isend_irecv"}))
@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_every_collective_at_1024_ranks_fits_the_replay_and_is_cheap_to_build(op, backend):
    if op == "monitored_barrier" and backend == "nccl":
        with pytest.raises(ValueError, match="only on gloo"):
            scaled(op, backend, FLEET, 8)
        return
    s = scaled(op, backend, FLEET, 25 << 20, root=5)
    assert 1 <= len(s.steps) <= DRAWN_STEPS_MAX and runs_cover_each_phase(s)
    # cheap to build, by its size (no wall time in a test: the machine's load is not ours):
    # no transfer per rank per real step
    hops = sum(len(step.within) + len(step.between) for step in s.steps)
    assert hops <= len(s.steps) * (8 * 8 + 128 * 128)  # nodes' and GPUs' pairs, not ranks'
    assert all(0 <= a < 128 and 0 <= b < 128 for step in s.steps for a, b in step.between)
    assert all(0 <= a < 8 and 0 <= b < 8 for step in s.steps for a, b in step.within)


def test_nodes_are_the_hosts_of_the_groups_ranks_in_order():
    hosts = {r: f"node{r // 8}" for r in range(32)}
    assert node_sizes(range(4, 30), hosts.__getitem__) == (4, 8, 8, 6)
    s = scaled("all_gather", "nccl", (4, 8, 8, 6), 1 << 20)
    assert (s.nodes, s.per_node, s.n, s.uneven) == (4, 8, 26, True)
    assert node_sizes(range(16), lambda r: None if r == 9 else hosts[r]) == (16,)  # not known


def test_hosts_not_known_are_one_node_whose_phases_are_still_compressed():
    s = scaled("all_reduce", "nccl", (1024,), 1 << 20)
    assert s.nodes == 1 and len(s.steps) == DRAWN_STEPS_MAX
    assert all(step.between == () for step in s.steps)


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="nodes must be"):
        scaled("all_reduce", "nccl", (), 8)
    with pytest.raises(ValueError, match="root must be"):
        scaled("broadcast", "nccl", FLEET, 8, root=1024)
    with pytest.raises(ValueError, match="unknown backend"):
        scaled("all_reduce", "mpi", FLEET, 8)
    with pytest.raises(ValueError, match="no schedule of its own"):
        scaled("send", "nccl", FLEET, 8)
    assert hierarchy.scaled("all_reduce", "nccl", FLEET, 8, most=4).steps[-1].label == \
        "AG 512-1023"
