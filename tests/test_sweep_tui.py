"""The sweep demo in the TUI: its curves in the replay's place (tui/sweep_plot.py), drawn from
the ranks' timed-loop phases, with the fitted alpha-beta line named; and its explanation.

Four gloo ranks' phases are scripted from the alpha-beta model itself (alpha 50 us a step,
beta 1 GB/s), so the fit the panel names is known.
"""

from __future__ import annotations

import pytest
from fakes import T0_NS, FakeSession, heartbeat
from test_tui import frame, panel, sync

from commviz.knowledge import sweep
from commviz.knowledge.costmodel import cost_of
from commviz.tui.app import CommvizApp
from commviz.wire import protocol

ALPHA_S, BETA_BPS, ITERS = 50e-6, 1e9, 10
SIZES = [8 << (2 * i) for i in range(8)]  # 8 B to 128 KiB, every other doubling


def _phases(world: int = 4, sizes=SIZES) -> list[protocol.Message]:
    """Every rank's timed loop of each size, as the demo reports it, at the model's times."""
    spans: dict[int, list[protocol.PhaseSpan]] = {r: [] for r in range(world)}
    t = T0_NS
    for size in sizes:
        c = cost_of("all_reduce", "gloo", world, size)
        took = round((c.steps * ALPHA_S + c.sent / BETA_BPS) * ITERS * 1e9)
        for r in range(world):
            spans[r].append(protocol.PhaseSpan(sweep.phase_name("all_reduce", size, ITERS, 0),
                                               0, t, t + took))
        t += took + 1_000_000
    return [heartbeat(r, world) for r in range(world)] + [
        protocol.Phases(r, tuple(s)) for r, s in spans.items()]


def _app(session: FakeSession, lang: str = "en") -> CommvizApp:
    return CommvizApp(session, None, "sweep · 4 ranks", clock=session.clock,
                      wall_ns=session.clock.wall_ns, lang=lang, demo="sweep")


@sync
async def test_the_curves_take_the_replays_place_with_the_fitted_line_named() -> None:
    session = FakeSession()
    app = _app(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await frame(pilot)
        assert "waiting for the first size" in panel(app, "#sweep")
        session.feed(_phases())
        await frame(pilot)
        await frame(pilot)
        shown = panel(app, "#sweep")
        assert "Sweep: busbw and time against size" in shown.splitlines()[0]
        assert "busbw (GB/s)" in shown and "time per call (µs)" in shown
        assert "measured" in shown and "alpha-beta model" in shown
        assert all(tick in shown for tick in ("8", "128", "2K", "32K"))  # log sizes named
        assert "model: alpha 50 µs per step, beta 1 GB/s" in shown.splitlines()[-1]
        assert not app.query_one("#topology").display  # the replay gives way
        assert "Reading the sweep" not in panel(app, "#explain")  # (no op completed yet)


@sync
async def test_a_size_not_every_rank_has_timed_is_not_drawn_yet() -> None:
    session = FakeSession()
    app = _app(session)
    async with app.run_test(size=(160, 48)) as pilot:
        messages = _phases()
        session.feed(messages[:-1])  # rank 3's phases not in yet
        await frame(pilot)
        assert "waiting for the first size" in panel(app, "#sweep")
        session.feed(messages[-1:])
        await frame(pilot)
        assert app.query_one("#sweep").points[-1].size == SIZES[-1]


@pytest.mark.parametrize("lang", ["pt", "es"])
@sync
async def test_the_curves_speak_the_language(lang) -> None:
    session = FakeSession()
    session.feed(_phases())
    app = _app(session, lang)
    async with app.run_test(size=(160, 48)) as pilot:
        await frame(pilot)
        shown = panel(app, "#sweep")
        assert {"pt": "tempo por chamada", "es": "tiempo por llamada"}[lang] in shown
        assert {"pt": "alfa 50 µs por passo", "es": "alfa 50 µs por paso"}[lang] in shown


@pytest.mark.integration  # runs the app
def test_snapshot_of_the_sweep(snap_compare) -> None:
    session = FakeSession()
    session.feed(_phases())
    assert snap_compare(_app(session), terminal_size=(160, 48), run_before=frame)
