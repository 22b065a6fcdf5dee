"""The timeline by node: who arrived last in each node (viewer/arrivals), the lanes drawn from
it, and the app at 1,024 simulated ranks (bench/fleet.py, one straggler: rank 5, 30 ms late)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from fakes import T0_NS, FakeClock, FakeSession
from fleet_model import fleet_view
from textual.geometry import Region

from commviz.text import i18n
from commviz.tui import layout
from commviz.tui.app import CommvizApp
from commviz.tui.timeline import ARRIVE, MARK, SOLID, WAIT, Timeline, lane_runs, ranks_label, title
from commviz.viewer import arrivals
from commviz.viewer.plain_text import rank_labels
from commviz.wire import protocol

MS, S = 1_000_000, 1_000_000_000
AR = protocol.OP_CODE["all_reduce"]
TWO_NODES = {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}


def _one_all_reduce(starts: dict[int, int], t: int = 0,
                    end: int = 20 * MS) -> dict[int, np.ndarray]:
    """Lane rows of one all_reduce: each rank arrives at ``t + starts[rank]``; every rank's
    t_ready is the last arrival, as the model writes it."""
    ready = T0_NS + t + max(starts.values())
    return {r: np.array([[AR, T0_NS + t + s, ready, T0_NS + t + end]], np.int64)
            for r, s in starts.items()}


def _join(*lanes: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    return {r: np.concatenate([lane[r] for lane in lanes if r in lane]) for r in
            sorted(set().union(*lanes))}


# ---- the aggregation --------------------------------------------------------------------------
def test_a_node_with_one_late_rank_is_the_worst_and_names_that_rank() -> None:
    starts = {r: 0 for r in range(8)} | {6: 3 * MS, 1: MS // 2}
    s = arrivals.spans(_one_all_reduce(starts), list(TWO_NODES.values()))
    assert s.lane.tolist() == [0, 1]
    assert (s.first - T0_NS).tolist() == [0, 0]
    assert (s.last - T0_NS).tolist() == [MS // 2, 3 * MS]
    assert s.last_rank.tolist() == [1, 6]
    assert ((s.ready - T0_NS) == 3 * MS).all()
    worst = arrivals.worst_first(s, 2)
    assert [(w.lane, w.last_rank, w.late_ns) for w in worst] == [(1, 6, 3 * MS), (0, 1, MS // 2)]


def test_a_whole_late_node_is_worst_though_its_own_ranks_arrive_together() -> None:
    """Its spread inside is nothing: it is late against the first arrival anywhere."""
    starts = {r: (5 * MS if r >= 4 else 0) + r * 1000 for r in range(8)}
    s = arrivals.spans(_one_all_reduce(starts), list(TWO_NODES.values()))
    worst = arrivals.worst_first(s, 2)
    assert (worst[0].lane, worst[0].last_rank, worst[0].late_ns) == (1, 7, 5 * MS + 7000)


def test_a_nodes_worst_instance_is_the_one_it_is_ranked_and_marked_by() -> None:
    """Two all_reduces: node a late by 1 ms in the first, node b by 4 ms in the second."""
    first = _one_all_reduce({r: MS if r == 2 else 0 for r in range(8)})
    second = _one_all_reduce({r: 4 * MS if r == 5 else 0 for r in range(8)}, t=50 * MS)
    s = arrivals.spans(_join(first, second), list(TWO_NODES.values()))
    worst = arrivals.worst_first(s, 2)
    assert [(w.lane, w.last_rank, w.late_ns, w.at_ns - T0_NS) for w in worst] == [
        (1, 5, 4 * MS, 54 * MS), (0, 2, MS, MS)]


def test_ranks_in_no_lane_count_for_no_instance_and_idle_lanes_come_last() -> None:
    starts = {r: 0 for r in range(8)} | {7: 9 * MS}  # rank 7 is in no lane
    s = arrivals.spans(_one_all_reduce(starts), [[0, 1], [4, 5], [8, 9]])
    assert s.last_rank.tolist() == [1, 5] and (s.late == 0).all()  # a tie: the higher rank
    assert [w.lane for w in arrivals.worst_first(s, 3)] == [0, 1, 2]
    assert arrivals.worst_first(s, 3)[2].late_ns == -1


def test_lanes_with_no_segment_in_view_make_no_instance() -> None:
    """A live 1,024-rank fleet's first frames: lanes known, nothing in view yet (this once
    raised from numpy's reduceat)."""
    empty = np.zeros((0, 4), np.int64)
    s = arrivals.spans({r: empty for r in range(16)}, [range(8), range(8, 16)])
    assert len(s.lane) == 0
    assert [w.late_ns for w in arrivals.worst_first(s, 2)] == [-1, -1]


def test_regrouping_merges_lanes_into_one_with_their_first_and_last() -> None:
    starts = {0: 0, 1: MS, 4: 2 * MS, 5: 3 * MS, 8: 4 * MS}
    s = arrivals.spans(_one_all_reduce(starts), [[0, 1], [4, 5], [8]])
    merged = s.regroup(np.array([0, 1, 1]), 2)  # the last two lanes as one
    assert merged.lane.tolist() == [0, 1]
    assert (merged.first - T0_NS).tolist() == [0, 2 * MS]
    assert (merged.last - T0_NS).tolist() == [MS, 4 * MS]
    assert merged.last_rank.tolist() == [1, 8] and merged.late.tolist() == [MS, 4 * MS]


def _spans_the_plain_way(lanes: dict[int, np.ndarray], members: list[list[int]]) -> dict:
    """arrivals.spans, one row at a time: per (instance, lane), by instance (numbered by
    ready, then op) then lane; the last arrival's rank the last row of ties."""
    lane_of = {r: i for i, ranks in enumerate(members) for r in ranks}
    rows = [(r, *map(int, row)) for r, lane in lanes.items() if r in lane_of for row in lane]
    number = {key: i for i, key in enumerate(sorted({(ready, op) for _, op, _, ready, _
                                                     in rows}))}
    first: dict[int, int] = {}
    for _, op, start, ready, _ in rows:
        i = number[(ready, op)]
        first[i] = min(first.get(i, start), start)
    out: dict[tuple[int, int], dict] = {}
    for r, op, start, ready, end in rows:
        i = number[(ready, op)]
        got = out.setdefault((i, lane_of[r]), {"op": op, "first": start, "last": start,
                                               "ready": ready, "end": end, "last_rank": r})
        got["first"], got["end"] = min(got["first"], start), max(got["end"], end)
        if start >= got["last"]:
            got["last"], got["last_rank"] = start, r
    return {key: {**v, "late": v["last"] - first[key[0]]} for key, v in sorted(out.items())}


def test_spans_are_those_read_one_row_at_a_time() -> None:
    """Random lanes, with ties in every column (arrivals, readies, ends): what the array
    passes give is what a loop over the rows gives, and each lane's worst is its latest."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        ranks = int(rng.integers(1, 12))
        members = [list(range(a, min(a + 3, ranks))) for a in range(0, ranks, 3)]
        if rng.random() < 0.3:
            members = members[1:]  # ranks in no lane
        lanes = {}
        for r in range(ranks):
            k = int(rng.integers(0, 6))
            ready = rng.integers(0, 4, k) * 10
            lanes[r] = np.stack([rng.choice([AR, protocol.OP_CODE["broadcast"]], k),
                                 ready - rng.integers(0, 3, k), ready,
                                 ready + rng.integers(0, 3, k)], axis=1).astype(np.int64)
        s = arrivals.spans(lanes, members)
        want = _spans_the_plain_way(lanes, members)
        assert list(zip(s.instance.tolist(), s.lane.tolist())) == list(want)
        for name in ("op", "first", "last", "ready", "end", "last_rank", "late"):
            assert getattr(s, name).tolist() == [v[name] for v in want.values()], name
        worst = {w.lane: w for w in arrivals.worst_first(s, len(members))}
        for lane in range(len(members)):
            mine = [(v["late"], i) for i, ((_, ln), v) in enumerate(want.items()) if ln == lane]
            if not mine:
                assert worst[lane].late_ns == -1 and worst[lane].last_rank == -1
                continue
            late, i = max(mine)  # the last of ties
            v = list(want.values())[i]
            assert (worst[lane].late_ns, worst[lane].last_rank, worst[lane].at_ns) == \
                (late, v["last_rank"], v["last"])


def test_long_rank_lists_are_compressed_and_short_ones_kept() -> None:
    assert ranks_label(list(range(17, 1024))) == "r17-r1023"
    assert ranks_label([*range(24), *range(32, 1024)]) == "r0-r23,r32-r1023"
    assert ranks_label([*range(0, 20, 2)]) == "r0,r2,r4,r6,r8,r10,r12,r14,r16,r18"
    for short in ([3], [1, 2], [4, 5, 6], [0, 2, 5]):
        assert ranks_label(short) == rank_labels(short)


# ---- the lanes ---------------------------------------------------------------------------------
def _text(lines) -> list[str]:
    return ["".join(chars for chars, _ in runs) for runs in lines]


def test_the_lanes_are_by_node_only_where_a_lane_per_rank_does_not_fit() -> None:
    lanes = _one_all_reduce({r: 6 * MS if r == 6 else 0 for r in range(8)})
    args = ([], T0_NS, T0_NS + 100 * MS, 60)
    by_rank = _text(lane_runs(lanes, *args, height=9, nodes=TWO_NODES))
    assert [line.split()[0] for line in by_rank[:8]] == [f"r{r}" for r in range(8)]
    one_node = _text(lane_runs(lanes, *args, height=4, nodes={"a": list(range(8))}))
    assert one_node[2].strip().startswith("… r2-r7: ")  # as before: no nodes to speak of
    by_node = _text(lane_runs(lanes, *args, height=4, nodes=TWO_NODES))
    assert len(by_node) == 3 and all(len(line) <= 60 for line in by_node)
    assert by_node[0].split()[0] == "b" and by_node[0].endswith("r6 +6 ms")
    assert by_node[1].split()[0] == "a" and by_node[1].endswith("r3 +0 µs")
    assert by_node[2].endswith("now")
    lane_b = by_node[0][2:-len(" r6 +6 ms")]
    assert ARRIVE in lane_b and MARK in lane_b and SOLID in lane_b and WAIT not in lane_b
    assert WAIT in by_node[1] and ARRIVE not in by_node[1]  # node a waited for b


def test_the_nodes_that_do_not_fit_share_a_summary_lane() -> None:
    nodes = {f"n{i}": [2 * i, 2 * i + 1] for i in range(6)}
    starts = {r: r * 100_000 for r in range(12)} | {3: 8 * MS}
    text = _text(lane_runs(_one_all_reduce(starts), [], T0_NS, T0_NS + 100 * MS, 70, height=4,
                           nodes=nodes))
    assert [line.split()[0] for line in text[:2]] == ["n1", "n5"]
    assert text[0].endswith("r3 +8 ms") and text[1].endswith("r11 +1.1 ms")
    assert text[2].split()[:2] == ["4", "nodes"] and text[2].endswith("≤ +900 µs")
    pt = _text(lane_runs(_one_all_reduce(starts), [], T0_NS, T0_NS + 100 * MS, 70, lang="pt",
                         height=4, nodes=nodes))
    assert pt[2].split()[:2] == ["4", "nós"] and pt[1].endswith("r11 +1,1 ms")


@pytest.mark.parametrize("lang", i18n.LANGS)
@pytest.mark.parametrize("width, narrow", [(80, True), (120, False), (160, False)])
def test_the_title_by_node_fits_its_room(lang: str, width: int, narrow: bool) -> None:
    room = layout.title_room(width, narrow)
    shown = title(lang, room, by_node=True)
    assert len(shown) <= room and ARRIVE in shown and SOLID in shown
    assert title(lang, None) == title(lang, None, by_node=False)  # the lanes per rank: as before


# ---- at 1,024 ranks ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fleet():
    return fleet_view(1024, 3.0, faults=("straggler:5:30",), fault_at=1.0)


def test_at_1024_ranks_the_stragglers_node_comes_first_and_names_it(fleet) -> None:
    model, now = fleet.model, fleet.clock.t_ns
    lanes, nodes = model.lanes(now - 2 * S, now), model.nodes()
    assert len(nodes) == 128
    worst = arrivals.worst_first(arrivals.spans(lanes, list(nodes.values())), len(nodes))
    assert (list(nodes)[worst[0].lane], worst[0].last_rank) == ("node000", 5)
    assert worst[0].late_ns >= 30 * MS > worst[1].late_ns  # the others: the clocks' skew
    for height, width in ((4, 94), (10, 94), (6, 78)):
        text = _text(lane_runs(lanes, list(model.inflight.values()), now - 2 * S, now, width,
                               height=height, nodes=nodes))
        assert len(text) == height and all(len(line) <= width for line in text)
        assert text[0].split()[0] == "node000" and " r5 +" in text[0]
        assert text[-2].split()[:2] == [str(128 - (height - 2)), "nodes"]
        assert text[-1].rstrip().endswith("now")


def _app(fleet) -> CommvizApp:
    clock = FakeClock(monotonic=fleet.clock.seconds(), wall_ns=fleet.clock.t_ns)
    session = FakeSession(clock)
    session.model, session.diagnosis = fleet.model, fleet.diagnosis
    return CommvizApp(session, None, "fleet", clock=clock, wall_ns=clock.wall_ns)


def _panel(app: CommvizApp) -> list[str]:
    widget = app.query_one(Timeline)
    width, height = widget.outer_size
    return [strip.text for strip in widget.render_lines(Region(0, 0, width, height))]


@pytest.mark.integration  # runs the app
@pytest.mark.parametrize("size, keys", [((160, 48), ()), ((80, 24), ("v",))],
                         ids=["160x48", "80x24"])
def test_the_app_at_1024_ranks_shows_the_timeline_by_node(fleet, size, keys) -> None:
    """On a wide screen, and on a narrow one in its replay view (``v``)."""
    async def run() -> None:
        app = _app(fleet)
        async with app.run_test(size=size) as pilot:
            for _ in range(2):  # the first frame lays the panel out, the next fills its title
                app.refresh_view()
                await pilot.pause()
            for key in keys:
                await pilot.press(key)
            app.refresh_view()
            await pilot.pause()
            lines = _panel(app)
            assert app.query_one(Timeline).by_node
            assert lines[0].startswith("╭─ Timeline by node  ▒ arriving  ┃ last rank")
            body = [line.strip("│") for line in lines[1:-1]]
            assert len(body) >= 3 and len({len(line) for line in lines}) == 1
            assert body[0].split()[0] == "node000" and body[0].rstrip().endswith(" ms")
            assert " r5 +" in body[0]
            assert body[-2].split()[:2] == [str(128 - (len(body) - 2)), "nodes"]
            assert body[-1].rstrip().endswith("now")

    asyncio.run(run())
