"""Groups named by their layout (knowledge/group_shapes, viewer/shape_words): the classifier on
hand-made memberships and on the simulated fleet's shapes, the statistics kept per shape, and
their words in the statistics panel and ``commviz stats``."""

from __future__ import annotations

import pytest
from fleet_model import fleet_view
from rich.console import Console

from commviz.knowledge import group_shapes as gs
from commviz.tui.panels.stats import STATS_ROWS, stats_table
from commviz.viewer import shape_words


def node_of_8(rank: int) -> str:
    return f"node{rank // 8:03d}"


def test_a_groups_shape_is_its_members_alone_in_any_order():
    assert gs.shape_of((3, 1, 2, 0)) == gs.Shape(gs.BLOCK, 4, 1)
    assert gs.shape_of(range(5, 1024, 8)) == gs.Shape(gs.STRIDED, 128, 8)
    assert gs.shape_of((0, 1, 5)) == gs.Shape(gs.IRREGULAR, 3, 0)
    assert gs.shape_of((7,)) == gs.Shape(gs.BLOCK, 1, 1)
    assert gs.shape_of((2, 2, 4)) == gs.Shape(gs.STRIDED, 2, 2)  # a repeated member once
    assert gs.pair_shape(300, 44) == gs.pair_shape(44, 300) == gs.Shape(gs.P2P, 2, 256)


def test_tensor_and_data_parallel_groups_of_a_thousand_ranks_are_two_families():
    tp = [tuple(range(i, i + 8)) for i in range(0, 1024, 8)]
    dp = [tuple(range(j, 1024, 8)) for j in range(8)]
    found = gs.families(tp + dp + tp[:3], node_of_8, 1024)  # a group listed again counts once
    assert found == [gs.Family(gs.Shape(gs.BLOCK, 8, 1), 128, gs.WITHIN, 1, False, gs.TENSOR),
                     gs.Family(gs.Shape(gs.STRIDED, 128, 8), 8, gs.ACROSS, 128, False,
                               gs.DATA)]
    words = [shape_words.family_label(f) for f in found]
    assert words == ["128 groups of 8 consecutive ranks (within a node: tensor parallel?)",
                     "8 groups of 128 ranks, stride 8 (across nodes: data parallel?)"]


def test_odd_memberships_get_no_guess_or_a_careful_one():
    world = tuple(range(64))
    found = gs.families([world, (0, 1, 5, 9), (3,), (4,), tuple(range(16, 48))],
                        node_of_8, 64)
    by = {f.shape: f for f in found}
    assert found[0].world and found[0].placement == gs.SPANNING and found[0].nodes == 8
    assert shape_words.family_label(found[0]) == "1 group of all 64 ranks (over 8 nodes)"
    irregular = by[gs.Shape(gs.IRREGULAR, 4, 0)]
    assert (irregular.guess, irregular.placement, irregular.nodes) == ("", gs.SPANNING, 2)
    assert shape_words.family_label(by[gs.Shape(gs.BLOCK, 1, 1)]) == \
        "2 groups of one rank (within a node)"
    # consecutive over several whole nodes: a stage of a pipeline, perhaps, never "tensor"
    assert by[gs.Shape(gs.BLOCK, 32, 1)].guess == gs.STAGE
    # the world of a job is not the world of a bigger one: a block like any other
    assert not gs.families([world], node_of_8, 128)[0].world


def test_a_host_not_known_yet_leaves_the_placement_unknown_and_no_tensor_guess():
    found = gs.families([(0, 1, 2, 3)], lambda r: None if r == 2 else "a", 8)
    assert (found[0].placement, found[0].guess) == (gs.UNKNOWN, "")
    assert shape_words.family_label(found[0]) == "1 group of 4 consecutive ranks"


def test_groups_of_one_shape_on_and_off_a_node_span_nodes():
    mixed = gs.families([(0, 2), (6, 8)], node_of_8, 16)  # within node000, across 0 and 1
    assert (mixed[0].placement, mixed[0].guess) == (gs.SPANNING, gs.PIPELINE)


def test_pairs_count_once_in_either_direction_by_their_distance():
    pairs = [(r, r + 256) for r in range(256)] + [(r + 256, r) for r in range(256)] \
        + [(1, 2), (2, 1), (5, 5)]
    found = gs.pair_families(pairs, node_of_8)
    assert [(f.shape.stride, f.count, f.placement, f.guess) for f in found] == \
        [(1, 1, gs.WITHIN, gs.PIPELINE), (256, 256, gs.ACROSS, gs.PIPELINE)]


def test_a_label_fits_its_room_keeping_the_layout_before_the_guess():
    tp = gs.Family(gs.Shape(gs.BLOCK, 8, 1), 128, gs.WITHIN, 1, False, gs.TENSOR)
    assert shape_words.family_label(tp, room=52) == \
        "128 groups of 8 consecutive ranks (tensor parallel?)"
    short = shape_words.family_label(tp, room=40)
    assert len(short) == 40 and short.endswith("… (tensor parallel?)")
    assert shape_words.family_label(tp, "pt") == \
        "128 grupos de 8 ranks consecutivos (dentro de um nó: paralelismo de tensor?)"
    assert shape_words.family_label(tp, "es") == \
        "128 grupos de 8 ranks consecutivos (dentro de un nodo: ¿paralelismo de tensores?)"


# ---- the simulated fleet's shapes -----------------------------------------------------------
@pytest.fixture(scope="module", params=["ddp", "fsdp", "tp-dp", "pipeline"])
def fleet(request):
    return request.param, fleet_view(ranks=64, seconds=1.5, shape=request.param)


def test_the_fleets_layouts_are_named_as_it_builds_them(fleet):
    shape, view = fleet
    groups, pairs = view.model.group_families()
    named = {(f.shape, f.count, f.placement, f.guess) for f in groups + pairs if not f.world}
    expected = {
        "ddp": set(), "fsdp": set(),
        "tp-dp": {(gs.Shape(gs.BLOCK, 8, 1), 8, gs.WITHIN, gs.TENSOR),
                  (gs.Shape(gs.STRIDED, 8, 8), 8, gs.ACROSS, gs.DATA)},
        # 4 stages of 16 ranks (two nodes): each rank talks to its peer in the next stage
        "pipeline": {(gs.Shape(gs.P2P, 2, 16), 48, gs.ACROSS, gs.PIPELINE)}}[shape]
    assert named == expected
    assert any(f.world for f in groups) == (shape != "tp-dp")  # tp-dp's calls use no world


def test_statistics_per_shape_add_up_to_the_statistics_by_op(fleet):
    shape, view = fleet
    model = view.model
    by_op: dict[tuple, int] = {}
    for row in model.shape_stats_table():
        key = (row["op"], row["ranks"], row["size"])
        by_op[key] = by_op.get(key, 0) + row["count"]
        assert model.shapes[row["shape"]].size == row["ranks"]
    assert by_op == {(r["op"], r["ranks"], r["size"]): r["count"]
                     for r in model.stats_table()}
    assert sum(by_op.values()) == model.instances + model.transfers
    found = shape_words.sections(model)
    # only the world's group: the table by op says it all; else each shape under its name
    assert bool(found) == (shape in ("tp-dp", "pipeline"))
    assert sum(len(rows) for _, rows in found) == (len(model.shape_stats) if found else 0)


def test_the_panel_and_commviz_stats_name_the_shapes(fleet):
    shape, view = fleet
    table = stats_table(view.model)
    console = Console(width=60, color_system=None, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    assert len(lines) == table.row_count + 1 <= STATS_ROWS + 1
    printed = shape_words.sections_text(shape_words.sections(view.model))
    if shape == "tp-dp":
        assert lines[1] == "8 groups of 8 consecutive ranks (tensor parallel?)"
        assert lines[3] == "8 groups of 8 ranks, stride 8 (across nodes: data parallel?)"
        assert "8 groups of 8 consecutive ranks (within a node: tensor parallel?)" in printed
    elif shape == "pipeline":
        assert lines[1] == "48 rank pairs 16 apart, point to point (pipeline stages?)"
        assert lines[2].split()[:2] == ["isend", "2"]
    else:
        assert not table.labels and lines[0].split()[0] == "op"


def test_a_job_below_the_threshold_keeps_todays_table(monkeypatch):
    view = fleet_view(ranks=8, seconds=1.0, shape="pipeline", stages=2)
    assert shape_words.sections(view.model)  # 8 ranks: named
    monkeypatch.setattr(shape_words, "SHAPES_MIN_RANKS", 9)
    assert view.model.shape_stats and shape_words.sections(view.model) == []
    assert not stats_table(view.model).labels
