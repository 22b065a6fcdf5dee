"""The replay at 1,024 simulated ranks (tests/fleet_model.py), in the app at 160x48: a world
all_reduce drawn as its 128 nodes of 8, saying the real steps each drawn step stands for."""

from __future__ import annotations

import pytest
from fakes import FakeClock, FakeSession
from textual.pilot import Pilot

from commviz.tui.app import CommvizApp
from commviz.tui.topology import Topology

pytestmark = pytest.mark.integration  # runs the app


@pytest.fixture(scope="module")
def fleet():
    from fleet_model import fleet_view
    return fleet_view(ranks=1024, seconds=1.0)


def fleet_app(view) -> tuple[CommvizApp, FakeClock]:
    clock = FakeClock(monotonic=view.clock.seconds(), wall_ns=view.clock.t_ns)
    session = FakeSession(clock)
    session.model, session.diagnosis = view.model, view.diagnosis
    return CommvizApp(session, None, "watch · 1024 ranks (simulated)", clock=clock,
                      wall_ns=clock.wall_ns, lang="en"), clock


async def two_steps_on(pilot: Pilot, clock: FakeClock) -> None:
    await pilot.pause()
    clock.advance(0.3 * 2 + 0.15)  # the default speed: drawn step 3, half-way
    await pilot.pause(0.1)
    await pilot.pause()


def test_a_1024_rank_all_reduce_is_replayed_as_nodes(fleet) -> None:
    import asyncio

    async def run() -> None:
        app, clock = fleet_app(fleet)
        async with app.run_test(size=(160, 48)) as pilot:
            await two_steps_on(pilot, clock)
            lines = [s.text for s in app.query_one(Topology).render_lines(
                app.query_one(Topology).region.reset_offset)]
            shown = "\n".join(lines)
            assert "RS 137-204 of 1023 (drawn step 3 of 30)" in shown
            assert "nccl ring over 128 nodes of 8" in str(app.query_one("#inside").render())
            assert "each drawn step stands for 68-69 real steps" in shown
            assert "g0 → g1 → g2 → g3 → g4 → g5 → g6 → g7 ⇢ next node" in shown
            assert "across the 128 nodes, over the network: 128 hops" in shown
            print(shown)

    asyncio.run(run())


def test_snapshot_of_the_replay_at_1024_ranks(snap_compare, fleet) -> None:
    app, clock = fleet_app(fleet)

    async def before(pilot: Pilot) -> None:
        await two_steps_on(pilot, clock)

    assert snap_compare(app, terminal_size=(160, 48), run_before=before)
