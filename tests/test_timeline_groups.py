"""The timeline by group (`g`): each process group's collectives from their first to their last
arrival (viewer/arrivals.group_spans), the groups named by their layout (shape_words), the
lanes drawn from them; then the app at 1,024 simulated ranks of tensor- and data-parallel
groups (bench/fleet.py's tp-dp, rank 5 30 ms late), pressing `g`, and at 4 ranks, where it
says that the lanes are per rank."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import T0_NS, FakeClock, FakeSession, heartbeat, op_batch, scripted_all_reduce
from fleet_model import fleet_view
from test_tui import frame, make_app, panel, sync
from textual.geometry import Region
from textual.widgets import Static

from commviz.knowledge import group_shapes as gs
from commviz.text import i18n
from commviz.tui import app as app_module
from commviz.tui import layout
from commviz.tui.timeline import (
    ARRIVE,
    GROUP,
    MARK,
    NODE,
    RANK,
    SOLID,
    ZOOMS_S,
    Timeline,
    group_lanes,
    lane_runs,
    lanes_by,
    title,
)
from commviz.viewer import arrivals, shape_words
from commviz.viewer.model import Model
from commviz.wire import protocol

MS, S = 1_000_000, 1_000_000_000
AR, SEND = protocol.OP_CODE["all_reduce"], protocol.OP_CODE["send"]
# two groups of 4 consecutive ranks (gkeys 0 and 1), and one of ranks 0 and 4 (gkey 2)
GROUPS = [("tp0", (0, 1, 2, 3)), ("tp1", (4, 5, 6, 7)), ("dp0", (0, 4))]


def _all_reduce(starts: dict[int, int], gkey: int, t: int = 0,
                end: int = 20 * MS) -> dict[int, np.ndarray]:
    """Lane rows with their group (``Model.lanes(groups=True)``) of one all_reduce of group
    ``gkey``: each rank arrives at ``t + starts[rank]``, its t_ready the last arrival."""
    ready = T0_NS + t + max(starts.values())
    return {r: np.array([[AR, T0_NS + t + s, ready, T0_NS + t + end, gkey]], np.int64)
            for r, s in starts.items()}


def _join(*lanes: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    return {r: np.concatenate([lane[r] for lane in lanes if r in lane])
            for r in sorted(set().union(*lanes))}


def _text(lines) -> list[str]:
    return ["".join(chars for chars, _ in runs) for runs in lines]


# ---- the aggregation --------------------------------------------------------------------------
def test_each_row_is_in_its_groups_lane_and_late_is_the_groups_own_spread() -> None:
    """Rank 0 is in two groups: its rows land in the lane of the group each was made in.
    Group 1 began 10 ms after group 0, yet its 2 ms spread is its own, not 12 ms."""
    tp0 = _all_reduce({0: 0, 1: 0, 2: 3 * MS, 3: 0}, gkey=0)
    tp1 = _all_reduce({4: 0, 5: 2 * MS, 6: 0, 7: 0}, gkey=1, t=10 * MS)
    dp0 = _all_reduce({0: 5 * MS, 4: 0}, gkey=2, t=40 * MS)
    s = arrivals.group_spans(_join(tp0, tp1, dp0), np.arange(3), 3)
    assert sorted(zip(s.lane.tolist(), s.last_rank.tolist(), s.late.tolist())) == [
        (0, 2, 3 * MS), (1, 5, 2 * MS), (2, 0, 5 * MS)]
    worst = arrivals.worst_first(s, 3)
    assert [(w.lane, w.last_rank, w.late_ns) for w in worst] == [
        (2, 0, 5 * MS), (0, 2, 3 * MS), (1, 5, 2 * MS)]


def test_two_groups_collectives_with_the_same_last_arrival_stay_apart() -> None:
    """A simulator's groups arrive at the same nanosecond: by (op, t_ready) alone they would
    be one instance, and group 1 would be 4 ms late against group 0's first arrival."""
    tp0 = _all_reduce({0: 0, 1: 0, 2: 0, 3: 4 * MS}, gkey=0)
    tp1 = _all_reduce({4: 4 * MS, 5: 4 * MS, 6: 4 * MS, 7: 4 * MS}, gkey=1)
    s = arrivals.group_spans(_join(tp0, tp1), np.arange(2), 2)
    assert sorted(zip(s.lane.tolist(), s.late.tolist())) == [(0, 4 * MS), (1, 0)]
    assert len(set(s.instance.tolist())) == 2


def test_transfers_and_groups_without_a_lane_are_left_out() -> None:
    tp0 = _all_reduce({0: 0, 1: MS, 2: 0, 3: 0}, gkey=0)
    tp1 = _all_reduce({4: 0, 5: 0, 6: 0, 7: 9 * MS}, gkey=1)  # gkey 1: no lane
    pair = {0: np.array([[SEND, T0_NS, T0_NS + 8 * MS, T0_NS + 9 * MS, 0]], np.int64)}
    s = arrivals.group_spans(_join(tp0, tp1, pair), np.array([0, -1]), 1)
    assert s.lane.tolist() == [0] and s.late.tolist() == [MS] and s.last_rank.tolist() == [1]
    assert (s.first - T0_NS).tolist() == [0]  # the send's earlier start is no arrival
    no_group = _all_reduce({0: 0, 1: 3 * MS}, gkey=-1)  # a row of no known group
    assert len(arrivals.group_spans(no_group, np.arange(2), 2).lane) == 0


def test_a_group_is_named_by_its_ranks_compressed_and_its_shape_guess() -> None:
    tensor = {gs.Shape(gs.BLOCK, 8, 1): gs.TENSOR, gs.Shape(gs.STRIDED, 128, 8): gs.DATA}
    assert shape_words.group_label(range(8, 16)) == "r8-r15"
    assert shape_words.group_label(range(8, 16), tensor) == "TP? r8-r15"
    assert shape_words.group_label(range(5, 1024, 8), tensor) == "DP? r5-r1021 stride 8"
    assert shape_words.group_label(range(5, 1024, 8), tensor, "pt") == "DP? r5-r1021 de 8 em 8"
    assert shape_words.group_label(range(5, 1024, 8), tensor, "es") == "¿DP? r5-r1021 de 8 en 8"
    assert shape_words.group_label([3, 9]) == "r3,r9"  # two ranks: a pair, as the lanes say
    irregular = shape_words.group_label([r for r in range(64) if r % 3])
    assert len(irregular) == shape_words.GROUP_LABEL_MAX and irregular.endswith("…")
    assert irregular.startswith("r1,r2,r4,r5")


def test_the_guesses_are_those_of_the_families_that_have_one() -> None:
    block, world = gs.Shape(gs.BLOCK, 8, 1), gs.Shape(gs.BLOCK, 16, 1)
    families = [gs.Family(world, 1, gs.SPANNING, 2, True, ""),
                gs.Family(block, 2, gs.WITHIN, 1, False, gs.TENSOR)]
    assert shape_words.guesses(families) == {block: gs.TENSOR}


# ---- the lanes ---------------------------------------------------------------------------------
def test_the_lanes_are_by_group_where_a_lane_per_rank_does_not_fit() -> None:
    lanes = _join(_all_reduce({0: 0, 1: 0, 2: 6 * MS, 3: 0}, gkey=0),
                  _all_reduce({4: 0, 5: MS, 6: 0, 7: 0}, gkey=1),
                  _all_reduce({0: 0, 4: 2 * MS}, gkey=2, t=40 * MS))
    groups = group_lanes(GROUPS, [1, 2, 0], {})  # in any order: the smaller first, then by rank
    assert [tuple(m) for m in groups.members] == [(0, 4), (0, 1, 2, 3), (4, 5, 6, 7)]
    assert groups.lane_of.tolist() == [1, 2, 0]
    nodes = {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}
    args = ([], T0_NS, T0_NS + 100 * MS, 60)
    assert lanes_by(lanes, {}, None, nodes, groups, 9) == RANK  # 8 lanes and the axis fit
    assert lanes_by(lanes, {}, None, nodes, None, 4) == NODE
    assert lanes_by(lanes, {}, None, nodes, groups, 4) == GROUP
    assert lanes_by(lanes, {}, None, {"a": list(range(8))}, groups, 4) == GROUP
    none_yet = group_lanes(GROUPS, [], {})  # no group of two ranks known yet: by node
    assert lanes_by(lanes, {}, None, nodes, none_yet, 4) == NODE
    assert _text(lane_runs(lanes, *args, height=4, nodes=nodes, groups=none_yet))[0][0] == "a"
    by_rank = _text(lane_runs(lanes, *args, height=9, nodes=nodes, groups=groups))
    assert [line.split()[0] for line in by_rank[:8]] == [f"r{r}" for r in range(8)]
    text = _text(lane_runs(lanes, *args, height=5, nodes=nodes, groups=groups))
    assert len(text) == 4 and all(len(line) <= 60 for line in text)
    assert text[0].split()[0] == "r0-r3" and text[0].endswith("r2 +6 ms")
    assert text[1].split()[0] == "r0,r4" and text[1].endswith("r4 +2 ms")
    assert text[2].split()[0] == "r4-r7" and text[2].endswith("r5 +1 ms")
    assert text[3].endswith("now")
    lane = text[0][len("r0-r3 "):-len(" r2 +6 ms")]
    assert ARRIVE in lane and MARK in lane and SOLID in lane
    rest = _text(lane_runs(lanes, *args, height=3, nodes=nodes, groups=groups, lang="pt"))
    assert rest[1].split()[:2] == ["2", "grupos"] and rest[1].endswith("≤ +2 ms")


def test_an_op_in_flight_is_drawn_in_its_groups_lane() -> None:
    from commviz.viewer.model import InFlight

    lanes = _join(_all_reduce({0: 0, 1: 0, 2: 0, 3: 0}, gkey=0),
                  _all_reduce({4: 0, 5: 0, 6: 0, 7: 0}, gkey=1))
    stuck = [InFlight(r, "all_reduce", (4, 5, 6, 7), 2, -1, T0_NS + 50 * MS, gkey=1)
             for r in (4, 5)]
    groups = group_lanes(GROUPS, [0, 1], {})
    text = _text(lane_runs(lanes, stuck, T0_NS, T0_NS + 100 * MS, 60, height=4, groups=groups))
    by_label = {line.split()[0]: line for line in text[:2]}
    assert "░" in by_label["r4-r7"][40:] and "░" not in by_label["r0-r3"][40:]


@pytest.mark.parametrize("lang", i18n.LANGS)
@pytest.mark.parametrize("width, narrow", [(80, True), (120, False), (160, False)])
def test_the_title_by_group_fits_its_room(lang: str, width: int, narrow: bool) -> None:
    room = layout.title_room(width, narrow)
    shown = title(lang, room, by_group=True)
    assert len(shown) <= room and ARRIVE in shown and SOLID in shown
    assert title(lang, None, by_group=True).startswith(i18n.ui("timeline by group", lang))


# ---- the model ---------------------------------------------------------------------------------
def test_the_model_keeps_each_rows_group_and_names_the_groups_that_make_lanes() -> None:
    m = Model(FakeClock())
    groups = {0: ("world", (0, 1, 2, 3)), 1: ("pair", (0, 1)), 2: ("self", (2,))}
    coll = [{"id": 1, "op": "all_reduce", "seq": 1, "gid": 0, "t_start": T0_NS},
            {"id": 2, "op": "all_reduce", "seq": 1, "gid": 1, "t_start": T0_NS + 100}]
    m.apply([heartbeat(r, 4) for r in range(4)])
    m.apply([op_batch(r, coll[:1] + (coll[1:] if r < 2 else []), groups) for r in range(4)])
    gkey = {name: k for k, (name, _) in enumerate(m.groups)}
    with_groups, plain = m.lanes(T0_NS, groups=True), m.lanes(T0_NS)
    assert with_groups[0][:, 4].tolist() == [gkey["world"], gkey["pair"]]
    assert with_groups[3][:, 4].tolist() == [gkey["world"]]
    assert all((with_groups[r][:, :4] == plain[r]).all() and plain[r].shape[1] == 4
               for r in range(4))
    assert [m.groups[k][0] for k in m.shown_groups()] == [
        name for name, _ in m.groups if name != "self"]


# ---- at 1,024 ranks ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fleet():
    np.random.seed(0)  # the GPUs' telemetry on screen, the same every run (the snapshot)
    return fleet_view(1024, 3.0, shape="tp-dp", faults=("straggler:5:30",), fault_at=1.0)


INSIDE_MAX_ROWS = 26  # the inside panel's max-height (app.tcss)
STRAGGLERS = {"TP? r0-r7", "DP? r5-r1021 stride 8"}  # rank 5's groups: its node's, its stride's


def _named(lines: list[str]) -> set[str | None]:
    """The groups of STRAGGLERS these lanes are of (None: another)."""
    return {next((name for name in STRAGGLERS if line.strip().startswith(name + " ")), None)
            for line in lines}


def _groups_of(model: Model):
    return group_lanes(model.groups, model.shown_groups(),
                       shape_words.guesses(model.group_families()[0]))


def test_at_1024_ranks_the_stragglers_groups_come_first_and_name_it(fleet) -> None:
    model, now = fleet.model, fleet.clock.t_ns
    groups = _groups_of(model)
    assert len(groups.members) == 136  # 128 tensor-parallel groups, 8 data-parallel
    lanes = model.lanes(now - 2 * S, now, groups=True)
    for width, height in ((94, 8), (78, 6)):  # 160x48, and 80x24's replay view
        text = _text(lane_runs(lanes, list(model.inflight.values()), now - 2 * S, now, width,
                               height=height, nodes=model.nodes(), groups=groups))
        assert len(text) == height and all(len(line) <= width for line in text)
        assert _named(text[:2]) == STRAGGLERS and all(" r5 +" in line for line in text[:2])
        assert text[-2].split()[:2] == [str(136 - (height - 2)), "groups"]
        assert text[-1].rstrip().endswith("now")


def _app(fleet):
    clock = FakeClock(monotonic=fleet.clock.seconds(), wall_ns=fleet.clock.t_ns)
    session = FakeSession(clock)
    session.model, session.diagnosis = fleet.model, fleet.diagnosis
    fleet.model.clock = clock
    return make_app(session, title="fleet tp-dp · 1,024 ranks")


async def _settle(pilot) -> None:
    for _ in range(2):  # the first frame lays the panel out, the next fills its title
        await frame(pilot)


@pytest.mark.parametrize("size, keys", [((160, 48), ()), ((80, 24), ("v",))],
                         ids=["160x48", "80x24"])
@sync
async def test_g_shows_the_timeline_by_group_at_1024_ranks_and_back(fleet, size, keys) -> None:
    """On a wide screen, and on a narrow one in its replay view (``v``)."""
    app = _app(fleet)
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        for key in keys:
            await pilot.press(key)
        await _settle(pilot)
        assert app.query_one(Timeline).by_node
        await pilot.press("g")
        await _settle(pilot)
        timeline = app.query_one(Timeline)
        assert timeline.by_group and not timeline.by_node
        lines = panel(app, "#timeline").splitlines()
        assert lines[0].startswith("╭─ Timeline by group  ▒ arriving  ┃ last rank")
        body = [line.strip("│") for line in lines[1:-1]]
        assert len({len(line) for line in lines}) == 1  # every lane within the panel
        assert _named(body[:2]) == STRAGGLERS and all(" r5 +" in line for line in body[:2])
        assert all("-r" in line.split()[1] for line in body[2:-2])  # ranges, never lists
        assert body[-2].split()[:2] == [str(136 - (len(body) - 2)), "groups"]
        assert body[-1].rstrip().endswith("now")
        for _ in range(len(ZOOMS_S)):  # zoomed in as far as it goes: the 5 ms floor
            await pilot.press("z")
        await _settle(pilot)
        lines = panel(app, "#timeline").splitlines()
        assert "zoom: 5 ms" in lines[-1] and app.query_one(Timeline).by_group
        body = [line.strip("│") for line in lines[1:-1]]
        assert all(line.split()[0] in ("TP?", "DP?") for line in body[:-2])  # still groups
        assert body[-2].split()[1] == "groups" and "-2ms" in body[-1]  # in 5 ms
        assert body[-1].rstrip().endswith(("now", "latest"))
        await pilot.press("g")
        await _settle(pilot)
        assert app.query_one(Timeline).by_node
        assert panel(app, "#timeline").split()[1] == "Timeline"
        assert panel(app, "#timeline").splitlines()[1].strip("│ ").startswith("node")


@sync
async def test_g_says_the_lanes_are_per_rank_where_they_fit() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session)
    notified: list[str] = []
    app.notify = lambda message, **kw: notified.append(message)  # type: ignore[method-assign]
    async with app.run_test(size=(160, 48)) as pilot:
        await frame(pilot)
        before = panel(app, "#timeline")
        await pilot.press("g")
        await frame(pilot)
        assert notified == [i18n.ui("lanes per rank", "en")]
        assert panel(app, "#timeline") == before and not app.query_one(Timeline).group_lanes


@sync
async def test_help_and_the_palette_list_g() -> None:
    app = make_app(FakeSession(), lang="pt")
    async with app.run_test(size=(160, 48)) as pilot:
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert i18n.ui("key group_lanes", "pt") in titles
        await pilot.press("question_mark")
        await pilot.pause()
        shown = "\n".join(strip.text for strip in app.screen.query_one(Static).render_lines(
            Region(0, 0, 150, 40)))
        assert i18n.ui("key group_lanes", "pt") in shown


@pytest.mark.integration  # runs the app
def test_snapshot_by_group_at_1024_ranks(fleet, snap_compare, monkeypatch) -> None:
    # the frames the test draws only: none of the frame timer's between the last and the shot
    monkeypatch.setattr(app_module, "FRAME_S", 3600.0)
    shown: list[str] = []  # the panels' text as the keys left them: said if it fails

    async def by_group(pilot) -> None:
        await _settle(pilot)
        for _ in range(100):  # laid out: `g` is read against the panel's rows (ranks_fit)
            if pilot.app.query_one(Timeline).size.height:
                break
            await pilot.pause(0.02)
        await pilot.press("g")
        await _settle(pilot)
        inside = pilot.app.query_one("#inside", Static)
        for _ in range(50):  # a loaded machine: the last layout may be of earlier content
            rows = len(inside.content.plain.splitlines()) + inside.styles.gutter.height
            if inside.outer_size.height == min(rows, INSIDE_MAX_ROWS):
                break
            await frame(pilot)
        shown.extend(panel(pilot.app, f"#{name}") for name in (
            "ranks", "timeline", "topology", "findings", "inside", "status"))
        shown.append(f"inside: {inside.outer_size.height} rows for {rows}")

    assert snap_compare(_app(fleet), terminal_size=(160, 48), run_before=by_group), \
        "\n".join(shown)
