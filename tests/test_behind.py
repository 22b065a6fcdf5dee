"""A viewer behind its ranks: how far (from the newest heartbeat it applied), said in the
header, and never taken for the ranks' silence (pure, and one Pilot test)."""

from __future__ import annotations

import asyncio

import pytest
from fakes import T0_NS, FakeClock, FakeSession, heartbeat, heartbeats, scripted_all_reduce
from textual.geometry import Region

from commviz.tui.app import CommvizApp
from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.model import Model
from commviz.viewer.rank_state import State, rank_state
from commviz.viewer.session import behind
from commviz.wire import protocol

S = 1_000_000_000


def test_behind_is_the_newest_heartbeats_age_less_their_period():
    assert behind(0, T0_NS) == 0.0  # none applied yet
    assert behind(T0_NS, T0_NS + S // 4) == 0.0  # within a heartbeat's period: caught up
    assert behind(T0_NS, T0_NS + 3 * S) == pytest.approx(2.5)


def test_a_drain_is_applied_as_arrived_when_taken_off_the_socket():
    clock = FakeClock()
    model = Model(clock, local_host="node0")
    model.apply([heartbeat(0, 2, t_ns=T0_NS)], arrived=clock.t - 4.0)
    assert model.ranks[0].last_seen == clock.t - 4.0
    model.apply([heartbeat(1, 2, t_ns=T0_NS + S)])
    assert model.ranks[1].last_seen == clock.t
    assert model.newest_sent_ns == T0_NS + S  # the viewer's own host: its clock


def test_the_newest_record_applied_is_kept_for_a_backlog():
    """With messages left on the socket, the latest heartbeats are kept and the rest shed, so
    they are fresh while the records are not: the session then measures from the records."""
    model = Model(FakeClock(), local_host="node0")
    model.apply([*heartbeats(2), *scripted_all_reduce()])
    ends = [int(b.cols["t_end"].max()) for b in scripted_all_reduce()
            if isinstance(b, protocol.OpBatch)]
    assert model.newest_record_ns == max(ends) > 0


def test_a_host_of_unknown_clock_offset_says_nothing_of_the_lag():
    model = Model(FakeClock(), local_host="elsewhere")
    model.apply([heartbeat(0, 1, t_ns=T0_NS)])
    assert model.newest_sent_ns == 0


def test_a_backlog_is_no_silence_in_the_panels_nor_a_lost_rank():
    clock = FakeClock()
    model = Model(clock, local_host="node0")
    model.apply([heartbeat(r, 2, t_ns=T0_NS) for r in range(2)])
    diagnosis = Diagnosis(model)
    clock.advance(3.0)  # 3 s without a message from either, the viewer 4 s behind them
    model.behind_s = 4.0
    assert rank_state(model.ranks[0], clock.t, False, model.behind_s) is State.IDLE
    assert diagnosis.silent() == []
    clock.advance(0.5)
    diagnosis.update()
    assert not [f for f in diagnosis.findings() if f.type == "lost_rank"]
    model.behind_s = 0.0  # caught up, and still nothing: silent now
    assert rank_state(model.ranks[0], clock.t, False, model.behind_s) is State.SILENT
    assert diagnosis.silent() == [0, 1]


@pytest.mark.integration  # runs the app
def test_the_header_says_how_far_behind_the_viewer_is():
    clock = FakeClock()
    session = FakeSession(clock)
    session.model.apply([heartbeat(r, 2, t_ns=clock.wall_ns()) for r in range(2)])

    async def run() -> None:
        app = CommvizApp(session, None, "job", clock=clock, wall_ns=clock.wall_ns, lang="pt")
        async with app.run_test(size=(160, 48)) as pilot:
            header = app.query_one("#header")

            def shown() -> str:
                app.refresh_view()
                w, h = header.outer_size
                return "".join(s.text for s in header.render_lines(Region(0, 0, w, h)))

            await pilot.pause()
            assert "atrás dos ranks" not in shown()
            session.model.behind_s = 2.4
            await pilot.pause()
            assert "visualizador 2,4 s atrás dos ranks" in shown()
    asyncio.run(run())
