"""The ranks panel by node, at 1,024 SIMULATED ranks (128 nodes of 8, tests/fleet_model.py):
the rows node_facts makes (pure), the panel's text, `/`'s parsing, and the app driven as a
person would (Pilot, snapshots)."""

from __future__ import annotations

import asyncio

import pytest
from fakes import FakeClock, FakeSession
from fleet_model import FleetView, fleet_view
from textual.geometry import Region

from commviz.tui.app import CommvizApp
from commviz.tui.node_facts import FLAGGED, HEALTHY, node_rows
from commviz.tui.panels.nodes import Entry, entries, nodes_table
from commviz.tui.ranks_panel import RanksPanel, find

STRAGGLER = 139  # on node017


@pytest.fixture(scope="module")
def fleet() -> FleetView:
    """4 s of 1,024 DDP ranks, rank 139 30 ms late at every all_reduce from second 1."""
    return fleet_view(1024, 4.0, faults=(f"straggler:{STRAGGLER}:30",), fault_at=1.0)


def _rows(view: FleetView):
    d, m = view.diagnosis, view.model
    flagged = {r: f for f in d.findings() for r in f.ranks}
    return node_rows(m, m.clock(), view.clock.t_ns, flagged, d.late_arrivals()), flagged


def test_the_straggler_node_comes_first_and_the_rest_fold_as_healthy(fleet):
    rows, _ = _rows(fleet)
    assert len(rows) == 128 and sum(len(r.ranks) for r in rows) == 1024
    first = rows[0]
    assert (first.host, first.severity, first.worst.rank) == ("node017", FLAGGED, STRAGGLER)
    assert first.worst.finding.type == "straggler" and first.late == 1
    assert all(r.severity == HEALTHY for r in rows[1:])
    assert entries(rows, (), False) == [Entry("node", "node017"), Entry("fold")]
    # the healthy, once unfolded, in their nodes' order
    assert [e.host for e in entries(rows, (), True)[2:5]] == ["node000", "node001", "node002"]


def test_a_node_row_counts_its_ranks_and_gives_its_gpus_as_min_median_max(fleet):
    rows, _ = _rows(fleet)
    row = rows[0]
    assert sum(row.states.values()) == 8
    util = row.load["gpu_util_pct"]
    tel = [fleet.model.ranks[r].telemetry[-1][1]["gpu_util_pct"] for r in row.ranks]
    assert (util.low, util.high) == (min(tel), max(tel)) and util.low <= util.mid <= util.high


def test_the_panel_fits_its_width_and_says_how_many_are_healthy(fleet):
    rows, flagged = _rows(fleet)
    m = fleet.model
    every = entries(rows, (), False)
    text, shown = nodes_table(rows, every, m, m.clock(), fleet.clock.t_ns, flagged, "en", 94,
                              20, (), False, 0)
    lines = text.plain.split("\n")
    assert all(len(line) <= 94 for line in lines)
    assert lines[1].startswith("▸ node017 136-143") and "⚠ r139 straggler" in lines[1]
    assert "1 late" in lines[1]
    assert lines[2].startswith("▸ 127 nodes healthy · 1016 ranks")
    assert shown == every


def test_an_opened_node_shows_its_clock_and_each_rank_under_it(fleet):
    rows, flagged = _rows(fleet)
    m = fleet.model
    every = entries(rows, ("node017",), False)
    assert [e.rank for e in every[1:9]] == list(range(136, 144))
    text, shown = nodes_table(rows, every, m, m.clock(), fleet.clock.t_ns, flagged, "pt", 94,
                              None, ("node017",), False, 0)
    lines = text.plain.split("\n")
    assert lines[1].startswith("▾ node017") and "ranks 136-143" in lines[2]
    assert [e.rank for e in shown if e is not None and e.kind == "rank"] == list(range(136, 144))
    assert "r139" in lines[1] and "atrasado" in lines[1]  # in Portuguese


def test_a_window_of_lines_keeps_the_chosen_one_in_view(fleet):
    rows, flagged = _rows(fleet)
    m = fleet.model
    every = entries(rows, (), True)
    last = len(every) - 1
    text, shown = nodes_table(rows, every, m, m.clock(), fleet.clock.t_ns, flagged, "en", 94,
                              10, (), True, last)
    assert len(text.plain.split("\n")) == 10 and shown[-1] == every[last]


def test_find_takes_a_rank_or_a_node_and_says_why_not():
    nodes = {f"node{n:03d}": list(range(8 * n, 8 * n + 8)) for n in range(128)}
    assert find("728", nodes) == Entry("rank", "node091", 728)
    assert find(" r728 ", nodes) == find("rank 728", nodes) == Entry("rank", "node091", 728)
    assert find("node017", nodes) == find("NODE017", nodes) == Entry("node", "node017")
    assert find("e127", nodes) == Entry("node", "node127")  # a part that names one node
    assert find("node1", nodes) == "find many nodes"
    assert find("gpu", nodes) == "find no node" and find("5000", nodes) == "find no rank"
    assert find("  ", nodes) == "find empty"


# ---- the app, as a person drives it -------------------------------------------------------
def _app(view: FleetView, lang: str = "en") -> CommvizApp:
    clock = FakeClock(monotonic=view.clock.seconds(), wall_ns=view.clock.t_ns)
    session = FakeSession(clock)
    session.model, session.diagnosis = view.model, view.diagnosis
    return CommvizApp(session, None, "fleet", clock=clock, wall_ns=clock.wall_ns, lang=lang)


def _panel(app: CommvizApp) -> str:
    widget = app.query_one("#ranks")
    width, height = widget.outer_size
    return "\n".join(s.text for s in widget.render_lines(Region(0, 0, width, height)))


async def _frame(pilot) -> None:
    pilot.app.refresh_view()
    await pilot.pause()


@pytest.mark.integration  # runs the app
@pytest.mark.parametrize("size", [(160, 48), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_drill_down_and_find_at_1024_ranks(fleet, size):
    async def run() -> None:
        app = _app(fleet)
        async with app.run_test(size=size) as pilot:
            await _frame(pilot)
            shown = _panel(app)
            assert "node017" in shown and "127 nodes healthy" in shown
            assert "…" not in shown.split("127 nodes healthy")[0].split("ranks")[0]
            assert isinstance(app.focused, RanksPanel)  # ↑↓ and enter work at once
            await pilot.press("enter")
            await _frame(pilot)
            assert "▾ node017" in _panel(app) and " 136 node017" in _panel(app)
            for _ in range(4):  # down to rank 139, which the window follows
                await pilot.press("down")
            await _frame(pilot)
            assert " 139 node017" in _panel(app)
            await pilot.press("escape")
            await _frame(pilot)
            assert "▸ node017" in _panel(app) and " 139 node017" not in _panel(app)
            await pilot.press("slash")
            for key in "728":
                await pilot.press(key)
            await pilot.press("enter")
            await _frame(pilot)
            assert "▾ node091" in _panel(app) and " 728 node091" in _panel(app)
            await pilot.press("slash")
            for key in "gpu":
                await pilot.press(key)
            await pilot.press("enter")
            await pilot.pause()
            assert "no node named gpu" in str(app.screen.query_one("Input").border_subtitle)
            await pilot.press("escape")
            await _frame(pilot)
            assert " 728 node091" in _panel(app)  # nothing changed
    asyncio.run(run())


@pytest.mark.integration
def test_small_jobs_keep_the_panel_by_rank():
    """16 ranks on 2 nodes fit 80x24: a row per rank, nothing to focus, no `/`."""
    view = fleet_view(16, 1.0)

    async def run() -> None:
        app = _app(view)
        async with app.run_test(size=(80, 24)) as pilot:
            await _frame(pilot)
            panel = app.query_one("#ranks", RanksPanel)
            assert not panel.can_focus and not app.check_action("find", ())
            assert "node node000: ranks 0-7" in _panel(app)
    asyncio.run(run())


@pytest.mark.integration
@pytest.mark.parametrize("size", [(160, 48), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_by_node_at_1024_ranks(fleet, snap_compare, size):
    assert snap_compare(_app(fleet), terminal_size=size)
