"""The screen at 1,024 simulated ranks (bench/fleet.py, built in process): the statistics named
by group layout (tp-dp, pipeline), and the pipeline's node-by-node traffic heatmap with its
busiest pairs, at 160x48; snapshots of both, which a person looks at as PNGs."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import FakeClock, FakeSession
from fleet_model import fleet_view
from test_tui import frame, make_app, panel, sync

from commviz.tui.topology import Topology

pytestmark = pytest.mark.integration  # the app runs


@pytest.fixture(scope="module", params=["tp-dp", "pipeline"])
def fleet(request):
    # the fleet's telemetry draws from numpy's global generator: seeded, the GPUs' readings
    # on screen are the same every run (the snapshots compare them)
    np.random.seed(0)
    return request.param, fleet_view(ranks=1024, seconds=2.0, shape=request.param)


def session_of(view) -> FakeSession:
    """A session showing the fleet's model, on a clock frozen at its last moment."""
    clock = FakeClock(view.clock.seconds(), view.clock.wall_ns())
    session = FakeSession(clock)
    session.model, session.diagnosis = view.model, view.diagnosis
    view.model.clock = clock
    return session


@sync
async def test_the_statistics_name_the_groups_and_the_nodes_traffic_is_drawn(fleet):
    shape, view = fleet
    app = make_app(session_of(view), title=f"fleet {shape}")
    async with app.run_test(size=(160, 48)) as pilot:
        await frame(pilot)
        stats = panel(app, "#stats")
        topology = panel(app, "#topology")
        pairs = app.query_one(Topology).traffic.busiest(5)
    if shape == "tp-dp":
        assert "128 groups of 8 consecutive ranks" in stats and "tensor parallel?" in stats
        assert "8 groups of 128 ranks, stride 8" in stats and "data parallel?" in stats
        assert "busiest node pairs" not in topology  # all_reduce only: today's heatmap
    else:
        assert "768 rank pairs 256 apart" in stats and "pipeline stages?" in stats
        assert "bytes between nodes" in topology and "busiest node pairs:" in topology
        # a stage is 32 nodes: the busiest pairs are a node and its peer a stage away
        assert pairs and all(abs(int(p.src[4:]) - int(p.dst[4:])) == 32 for p in pairs)
        assert f"{pairs[0].src} → {pairs[0].dst}:" in topology


def test_snapshot_at_1024_ranks(fleet, snap_compare):
    shape, view = fleet
    assert snap_compare(make_app(session_of(view), title=f"fleet {shape} · 1,024 ranks"),
                        terminal_size=(160, 48))
