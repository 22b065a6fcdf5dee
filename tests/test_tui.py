"""The TUI driven by a scripted session: Pilot tests of what each panel says, and snapshots.

Nothing here reads real time: the model, the app's monotonic clock and its wall clock all
come from one FakeClock, and telemetry is fixed, so the snapshots are repeatable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import io
import json
import math
import re
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from fakes import (
    STEP_NS,
    T0_NS,
    FakeClock,
    FakeDiagnosis,
    FakeRanks,
    FakeSession,
    bye,
    fake_nvml,
    gpu_heartbeat,
    heartbeat,
    heartbeats,
    inflight,
    op_batch,
    scripted_all_gather,
    scripted_all_reduce,
    scripted_broadcast,
    scripted_collective,
    scripted_send_recv,
    topology,
)
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import Static

from commviz.text import i18n
from commviz.tui import app as app_module
from commviz.tui import commands, layout
from commviz.tui.animation import GATHER_S
from commviz.tui.app import FRAME_S, CommvizApp
from commviz.tui.help import HelpScreen
from commviz.tui.oplog import OpLog, line_text
from commviz.tui.panels import status
from commviz.tui.panels.explanation import explanation
from commviz.tui.panels.findings import findings
from commviz.tui.panels.inside import GRID_MAX_W, inside, text_rows
from commviz.tui.panels.ranks import LINKS_AT, RANK_COLUMNS, _load, link_rates, ranks_table
from commviz.tui.panels.source import SOURCE_CONTEXT, source
from commviz.tui.panels.status import gpu_links_line
from commviz.tui.panels.words import finding_name
from commviz.tui.timeline import Timeline
from commviz.tui.topology import Topology
from commviz.viewer import gc_policy, recording
from commviz.viewer import plain_text as text_mod
from commviz.viewer.diagnose import Diagnosis, Finding
from commviz.viewer.diagnose.facts import Words
from commviz.viewer.playback import Playback, PlaybackControl
from commviz.wire import protocol
from commviz.wire.control import Controller, ControlState

SIZE = (160, 48)
OTHERS = [lang for lang in i18n.LANGS if lang != "en"]  # longer than English, all of them


def switch_to(app: CommvizApp, lang: str) -> None:
    """`l`'s action until the app speaks ``lang``: it goes through LANGS in their order."""
    for _ in i18n.LANGS:
        if app.lang != lang:
            app.action_switch_lang()
    assert app.lang == lang


def make_app(session: FakeSession, ranks: FakeRanks | None = None,
             title: str = "test", lang: str = "en") -> CommvizApp:
    return CommvizApp(session, ranks, title, clock=session.clock, wall_ns=session.clock.wall_ns,
                      lang=lang)


def panel(app: CommvizApp, selector: str) -> str:
    """The text a panel shows on screen now, border and title included."""
    widget = app.query_one(selector)
    width, height = widget.outer_size
    return "\n".join(strip.text for strip in widget.render_lines(Region(0, 0, width, height)))


def rank_row(app: CommvizApp, rank: int) -> str:
    """The ranks panel's row of ``rank`` (rows read '│ <rank>  node0 ...')."""
    for line in panel(app, "#ranks").splitlines():
        cells = line.strip("│ ").split()
        if cells and cells[0] == str(rank) and "node0" in cells:
            return line
    raise AssertionError(f"no row for rank {rank} in\n{panel(app, '#ranks')}")


def log_lines(app: CommvizApp) -> list[str]:
    return [line_text(line) for line in app.query_one("#log", OpLog).lines]


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async Pilot test in its own event loop (no pytest-asyncio needed); it runs an
    app, so it is an integration test."""
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))
    return pytest.mark.integration(run)


async def frame(pilot: Pilot) -> None:
    """Draw one frame now rather than waiting for the frame timer."""
    pilot.app.refresh_view()
    await pilot.pause()


def test_scripted_batches_are_valid_protocol_messages() -> None:
    """The fakes must be what a rank could send: encode each batch and decode it back."""
    for script in (scripted_all_gather, scripted_all_reduce, scripted_broadcast,
                   scripted_send_recv):
        for msg in script():
            if not isinstance(msg, protocol.OpBatch):
                continue
            data = protocol.encode_ops(
                msg.rank, {k: v.tobytes() for k, v in msg.cols.items()},
                [[g, name, list(ranks)] for g, (name, ranks) in msg.groups.items()],
                [[i, f, line] for i, (f, line) in msg.sites.items()])
            back = protocol.decode(data)
            assert isinstance(back, protocol.OpBatch) and back.rank == msg.rank
            for name, col in msg.cols.items():
                assert back.cols[name].tolist() == col.tolist()


# ---- Pilot tests --------------------------------------------------------------------------
@sync
async def test_each_frame_tells_the_collector_when_it_begins_and_when_it_is_painted() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(10 * FRAME_S)
        await pilot.pause()
        begun, ended = session.frames_begun, session.frames_ended
    assert begun >= 3  # the frame timer ran
    assert begun - 1 <= ended <= begun  # every frame but perhaps the last was painted


@sync
async def test_full_collections_are_rare_while_the_app_runs_and_as_before_after() -> None:
    before = gc.get_threshold()
    app = make_app(FakeSession())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert gc.get_threshold() == (*before[:2], gc_policy.FULL_COLLECTION_EVERY) != before
    assert gc.get_threshold() == before


@sync
async def test_replay_repaints_every_line_that_changed() -> None:
    """The replay repaints only its lines that changed from one frame to the next: none of
    the lines that did change may be left out (the screen would keep them stale)."""
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        topo = app.query_one(Topology)
        calls: list[tuple[Region, ...]] = []
        real_refresh = topo.refresh

        def spy(*regions: Region, **kwargs: Any) -> Any:
            calls.append(regions)
            return real_refresh(*regions, **kwargs)

        topo.refresh = spy  # type: ignore[method-assign]
        await frame(pilot)
        width, height = topo.size
        before = [topo.render_line(y).text for y in range(height)]
        partial = 0
        for i in range(90):
            session.clock.advance(0.037)
            calls.clear()
            app.refresh_view(i % 3)
            await pilot.pause()
            after = [topo.render_line(y).text for y in range(height)]
            changed = {y for y, (a, b) in enumerate(zip(before, after)) if a != b}
            if calls and all(calls):  # partial repaints only (an empty call repaints all)
                partial += 1
                assert changed <= {r.y for regions in calls for r in regions}, i
            elif not calls:
                assert not changed, i
            before = after
        assert partial >= 20  # the replay moved, frame after frame


@sync
async def test_the_header_says_when_the_ranks_are_a_simulators() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "SIMULATED" not in app.sub_title
        session.feed([dataclasses.replace(heartbeat(2, 4), simulated=True)])
        await pilot.pause(3 * FRAME_S)
        assert app.sub_title.startswith("SIMULATED ranks, not a real job · ")


@sync
async def test_ranks_panel_lists_every_rank_with_its_state() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        for rank in range(4):
            row = rank_row(app, rank)
            assert "cpu" in row and "done all_reduce" in row
            assert f"CPU  {10 + 20 * rank:.0f}%" in row
        assert "rank" in panel(app, "#ranks").splitlines()[1]


@sync
async def test_the_replayed_collective_is_drawn_step_by_step_with_its_buffers() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        text = panel(app, "#inside")
        assert "all_reduce · gloo ring · 4 ranks" in text and "Schematic" in text
        # gloo's ring sends to rank - 1: the first reduce-scatter step of the doc's table, and
        # what each rank holds after it (a digit: how many ranks are summed into each chunk)
        assert "RS0 0→3 c1  1→0 c2  2→1 c3  3→2 c0  1121 1112 2111 1211" in text
        assert "AG2 0→3 c2  1→0 c3  2→1 c0  3→2 c1  4444 4444 4444 4444" in text
        assert "each rank sends up to 1.5 MiB in 6 steps" in text  # 2(n-1)/n x S
        assert "time 250 µs · skew 30 µs" in text  # measured: the instance replayed


@sync
async def test_the_source_panel_highlights_the_line_that_made_the_call(tmp_path) -> None:
    program = tmp_path / "train.py"
    program.write_text("".join(f"line_{i} = {i}\n" for i in range(1, 31)))
    session = FakeSession()
    session.feed([dataclasses.replace(m, sites={0: (str(program), 12)})
                  if isinstance(m, protocol.OpBatch) else m for m in scripted_all_reduce(world=4)])
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        text = panel(app, "#source")
        assert "train.py:12  all_reduce" in text
        assert "  12 line_12 = 12" in text and "   8 line_8 = 8" in text
        assert "line_7 " not in text and "line_17" not in text


def _stats_rows(app: CommvizApp) -> list[list[str]]:
    """The statistics panel's head and rows, as cells."""
    return [line.strip("│ ").split() for line in panel(app, "#stats").splitlines()[1:-1]]


@pytest.mark.parametrize("lang", i18n.LANGS)
@pytest.mark.parametrize("width", [160, 120])
@sync
async def test_statistics_give_the_op_name_room_before_the_lesser_numbers(
        lang: str, width: int) -> None:
    """At 120 columns the rows read 'b…  2   8 B' (objects demo) or lost the op column
    ('n  tamanho  chamadas', reduce_scatter in Portuguese), at 160 'reduce…scatte' (user
    trial): the name keeps 14 columns at least (reduce_scatter whole, a longer name
    shortened in its middle, its end telling _tensor from _single); algbw, then the group
    size and the calls give way first; every number whole, busbw always there."""
    session = FakeSession()
    session.feed(scripted_collective("reduce_scatter_single", world=4, steps=2, nbytes=1 << 20)
                 + scripted_collective("reduce_scatter_tensor", world=4, steps=2, nbytes=4096,
                                       first=2)
                 + scripted_collective("reduce_scatter", world=4, steps=2, nbytes=4096, first=4)
                 + scripted_collective("broadcast_object_list", world=4, steps=2, nbytes=26,
                                       first=6))
    app = make_app(session, lang=lang)
    async with app.run_test(size=(width, 40)) as pilot:
        await frame(pilot)
        head, *rows = _stats_rows(app)
        names = sorted(row[0] for row in rows)
        assert "reduce_scatter" in names and all(len(name) >= 14 for name in names), names
        if (width, lang) == (160, "en"):  # room for every name whole
            assert names == ["broadcast_object_list", "reduce_scatter", "reduce_scatter_single",
                             "reduce_scatter_tensor"]
        assert {n[-6:] for n in names if n.startswith("reduce_")} == {"single", "tensor",
                                                                      "catter"}
        assert head[0] == "op" and head[-1] == "busbw"
        assert ("algbw" in head) == (width == 160), head
        number = r"(\d+([.,]\d)? (B|KiB|MiB)|n/a|<?\d+([.,]\d+)?)"
        for row in rows:
            cells = " ".join(row[1:])
            assert re.fullmatch(rf"({number} ?)+", cells), row
            assert row[-1] == "n/a" or float(row[-1].replace(",", ".")) > 0


@sync
async def test_the_timeline_stops_at_the_runs_end_once_every_rank_has_left() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4) + [bye(r) for r in range(4)])
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        session.clock.advance(60)  # a minute later, the run's last seconds are still drawn
        await frame(pilot)
        lines = panel(app, "#timeline").splitlines()
        lanes = [line for line in lines if line.lstrip("│ ").startswith("r")]
        assert len(lanes) == 4 and all("█" in lane or "░" in lane for lane in lanes), lines
        assert lines[-2].rstrip("│ ").endswith(" end") and "now" not in lines[-2], lines
        switch_to(app, "pt")
        await frame(pilot)
        assert panel(app, "#timeline").splitlines()[-2].rstrip("│ ").endswith(" fim")


@sync
async def test_z_zooms_the_timeline_onto_the_latest_step_and_shift_z_back_out() -> None:
    """A DDP step takes milliseconds in a window of seconds: zoomed, the timeline holds the
    latest activity in view, where backward and its bucket all-reduces can be told apart."""
    session = FakeSession()
    session.feed(heartbeats(4) + scripted_all_reduce(world=4))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        session.clock.advance(60.0)  # the ops are a minute old: gone from an unzoomed view
        await frame(pilot)
        assert not _lanes_drawn(app)
        assert app.query_one("#timeline").border_subtitle == "zoom: auto · z/Z"
        for _ in range(7):  # from 2 s: 1 s, 500 ms ... down to 10 ms
            await pilot.press("z")
        await frame(pilot)
        lines = panel(app, "#timeline").splitlines()
        assert app.query_one(Timeline).zoom_s == 0.01
        assert "zoom: 10 ms · z/Z" in lines[-1] and lines[-2].rstrip("│ ").endswith(" latest")
        assert _lanes_drawn(app) and "-4ms" in lines[-2], lines
        for _ in range(8):
            await pilot.press("Z")
        await frame(pilot)
        assert app.query_one(Timeline).zoom_s is None and not _lanes_drawn(app)
        assert panel(app, "#timeline").splitlines()[-2].rstrip("│ ").endswith(" now")


@sync
async def test_a_paused_demo_before_its_first_op_keeps_the_timeline_at_now() -> None:
    app = CommvizApp(FakeSession(), None, "t", lang="en", controller=FakeController())
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        axis = panel(app, "#timeline").splitlines()[-2]
        assert axis.rstrip("│ ").endswith(" now"), axis  # nothing happened yet: no "latest"


@sync
async def test_while_a_demo_is_paused_the_timeline_holds_its_latest_step() -> None:
    """--paused, then n: within seconds the one operation scrolled out of the window and the
    student looked at empty lanes while the demo waited for the next n (user trial)."""
    session = FakeSession()
    session.feed(heartbeats(4) + scripted_all_reduce(world=4))
    controller = FakeController()  # paused
    app = CommvizApp(session, None, "t", lang="en", controller=controller,
                     clock=session.clock, wall_ns=session.clock.wall_ns)
    async with app.run_test(size=SIZE) as pilot:
        session.clock.advance(60.0)
        await frame(pilot)
        assert _lanes_drawn(app)
        assert panel(app, "#timeline").splitlines()[-2].rstrip("│ ").endswith(" latest")
        await pilot.press("space")  # playing: the window follows now again
        await frame(pilot)
        assert not _lanes_drawn(app)


def _lanes_drawn(app: CommvizApp) -> bool:
    lanes = [line for line in panel(app, "#timeline").splitlines()
             if line.lstrip("│ ").startswith("r")]
    return any("█" in lane or "░" in lane for lane in lanes)


@sync
async def test_ranks_stopped_inside_an_op_stop_waiting_there_and_the_timeline_ends() -> None:
    """The crash demo: rank 2 died unheard, the others were stopped inside the next
    all_reduce; their waiting bars grew to the right edge for ever (user trial)."""
    session = FakeSession()
    session.feed(heartbeats(4) + scripted_all_reduce(world=4))
    session.feed([inflight(r, "all_reduce", 4, T0_NS + 4 * STEP_NS) for r in (0, 1, 3)])
    session.feed([bye(r, T0_NS + 5 * STEP_NS) for r in (0, 1, 3)])
    from commviz.viewer.diagnose import LOST_CONFIRM_S, Diagnosis

    session.diagnosis = diagnosis = Diagnosis(session.model, wall_ns=session.clock.wall_ns)
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        session.clock.advance(60)
        diagnosis.update()
        session.clock.advance(2 * LOST_CONFIRM_S)  # lost, once confirmed
        diagnosis.update()
        assert [f.ranks for f in diagnosis.findings() if f.type == "lost_rank"] == [(2,)]
        await frame(pilot)
        lines = panel(app, "#timeline").splitlines()
        assert lines[-2].rstrip("│ ").endswith(" end"), lines
        r0 = next(line for line in lines if line.lstrip("│ ").startswith("r0"))
        assert r0.rstrip("│")[-1] == " " and "░" in r0, lines  # the wait stops at the exit


@sync
async def test_the_explanation_follows_the_op_and_the_language() -> None:
    session = FakeSession()
    session.feed(scripted_all_gather(world=4))
    app = make_app(session, lang="pt")
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "Explicação" in panel(app, "#explain-box")  # the scrolling box's title
        text = panel(app, "#explain")
        assert "all_gather:" in text
        assert "Como os dados se movem (gloo)" in text and "(nccl)" not in text


@sync
async def test_a_long_explanation_scrolls_in_its_box_and_starts_at_its_top() -> None:
    """gloo's reduce_scatter at 4 ranks: its 24 steps took the room and the explanation was
    its title alone, with no way to read on (user trial)."""
    session = FakeSession()
    session.feed(heartbeats(4) + scripted_collective("reduce_scatter", world=4, steps=2,
                                                     nbytes=1 << 20))
    app = make_app(session, lang="pt")
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        box = app.query_one("#explain-box")
        assert box.size.height >= 6 and box.max_scroll_y > 0 and box.can_focus
        box.focus()
        await pilot.press("pagedown")
        await pilot.pause()
        assert box.scroll_y > 0


@sync
async def test_waiting_for_ranks_before_any_message() -> None:
    app = make_app(FakeSession())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "waiting for ranks to connect" in panel(app, "#status")
        assert log_lines(app) == []


@pytest.mark.parametrize("lang", ["en", "pt"])
@sync
async def test_a_job_that_died_before_any_rank_connected_is_not_waited_for(lang: str) -> None:
    """`commviz run -- python bad.py` (a syntax error): 'waiting for ranks to connect…' stood
    above 'the job failed (exit 1)' (user trial). Once the job has ended the viewer says no
    rank ever connected."""
    from commviz.launch.job import OutputBuffer

    ui = functools.partial(i18n.ui, lang=lang)
    ranks = FakeRanks(world=1)
    app = CommvizApp(FakeSession(), ranks, "run", output=OutputBuffer(), lang=lang)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert ui("waiting ranks") in panel(app, "#status")
        ranks.end("job", 1, "SyntaxError: invalid syntax")
        await frame(pilot)
        await frame(pilot)
        status = panel(app, "#status")
        assert "SyntaxError" in status and ui("no rank connected") in status
        assert ui("waiting ranks") not in status


@sync
async def test_new_instances_appear_in_the_log_after_a_frame() -> None:
    session = FakeSession()
    session.feed(scripted_all_gather(world=4, steps=1))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert len(log_lines(app)) == 1
        assert "all_gather" in log_lines(app)[0] and "#0 " in log_lines(app)[0]

        # two more instances arrive between frames; the frame timer picks them up
        session.feed(scripted_all_gather(world=4, steps=2, first=1))
        for _ in range(20):
            if len(log_lines(app)) == 3:
                break
            await pilot.pause(FRAME_S)
        lines = log_lines(app)
        assert [line.split("#")[1].split()[0] for line in lines] == ["0", "1", "2"]
        assert "16.0 KiB" in lines[2] and "time   350 µs" in lines[2]
        assert lines[1].startswith("   0.001s  ")

        # a frame with nothing new writes nothing
        await frame(pilot)
        assert len(log_lines(app)) == 3
        assert "3 collectives" in panel(app, "#status")


@sync
async def test_a_transfer_is_logged_as_src_to_dst() -> None:
    session = FakeSession()
    session.feed(scripted_send_recv(world=4, steps=1))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        lines = log_lines(app)
        assert len(lines) == 2
        assert "0 -> 1" in lines[0] and "2 -> 3" in lines[1]
        assert "2 transfers" in panel(app, "#status")


@sync
async def test_an_op_in_flight_shows_on_its_rank_and_how_long_it_has_waited() -> None:
    clock = FakeClock()
    session = FakeSession(clock)
    session.feed(scripted_all_reduce(world=4, steps=2))
    started = T0_NS + 2 * STEP_NS
    clock.set_wall_ns(started + 42_000_000)
    session.feed([inflight(2, "all_reduce", seq=2, t_start=started, op_id=2)])
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "in all_reduce #2 42 ms" in rank_row(app, 2)
        for rank in (0, 1, 3):
            assert "done all_reduce" in rank_row(app, rank)

        clock.advance(0.008)
        await frame(pilot)
        assert "in all_reduce #2 50 ms" in rank_row(app, 2)

        # its completed record (same id) clears the in-flight state
        session.feed([op_batch(2, [{"id": 2, "op": "all_reduce", "seq": 2, "bytes_in": 4096,
                                    "t_start": started, "t_end": started + 60_000_000}])])
        await frame(pilot)
        assert "done all_reduce" in rank_row(app, 2)
        assert "in all_reduce" not in panel(app, "#ranks")


@pytest.mark.parametrize("lang, op, waited_s, shown", [
    ("en", "all_reduce", 0.005, "in all_reduce #12 5 ms"),
    ("en", "all_reduce", 6.0123, "in all_reduce 6.01 s"),
    ("en", "recv", 5.67, "in recv #12 5.67 s"),
    ("en", "reduce_scatter_tensor", 0.1234, "in reduce_scat… 123 ms"),
    ("pt", "all_gather_into_tensor", 61.0, "em all_gat…tensor 61 s"),
    ("es", "all_gather_into_tensor", 61.0, "en all_gat…tensor 61 s")])
def test_a_waiting_ranks_state_keeps_its_time_whole_with_its_unit(
        lang: str, op: str, waited_s: float, shown: str) -> None:
    """The hang demo: "in all_reduce #12 601…" cut the time waited mid-unit (user trial)."""
    clock = FakeClock()
    session = FakeSession(clock)
    session.feed(heartbeats(4))
    clock.set_wall_ns(T0_NS + int(waited_s * 1e9))
    session.feed([inflight(2, op, seq=12, t_start=T0_NS)])
    table = ranks_table(session.model, clock(), clock.wall_ns(), lang=lang, width=94)
    row = table.plain.splitlines()[3]
    width = RANK_COLUMNS[3][1]
    at = LINKS_AT - width - 1  # where the state column starts
    assert row[at:at + width].rstrip() == shown
    hang = Finding("hang", (2,), (2,), None, Words("deadlock", "deadlock"), ("hang", 2), 0.0, 0)
    table = ranks_table(session.model, clock(), clock.wall_ns(), {2: hang}, lang, 94)
    flagged = table.plain.splitlines()[3][at:at + width]
    state = flagged.rstrip()  # after the finding's name: its op, its time whole or none
    assert state.startswith(f"⚠ {finding_name('hang', lang)}: {shown[:6]}"), state
    assert re.fullmatch(r"\D*( \d+([.,]\d+)? (s|ms|µs))?", state), state



@pytest.mark.parametrize("lang, op, shown", [
    ("en", "recv", "⚠ straggler: done recv"), ("en", "all_reduce", "⚠ straggler"),
    ("pt", "all_reduce", "⚠ atrasado"), ("es", "all_reduce", "⚠ rezagado")])
def test_a_flagged_ranks_state_is_whole_or_left_out(lang: str, op: str, shown: str) -> None:
    """'⚠ rank atrasado:…' in Portuguese at 120 columns (user trial): a done state that does
    not fit after the finding's name is left out, not cut."""
    clock = FakeClock()
    session = FakeSession(clock)
    session.feed(heartbeats(4))
    session.feed([op_batch(3, [{"id": 1, "op": op, "seq": 1, "peer": 0 if op == "recv" else -1,
                                "bytes_in": 4096, "t_start": T0_NS}])])
    late = Finding("straggler", (3,), (0, 1, 2, 3), 1, Words("late", "atrasado"), ("straggler", 3),
                   0.0, 0)
    table = ranks_table(session.model, clock(), clock.wall_ns(), {3: late}, lang, 94)
    width = RANK_COLUMNS[3][1]
    at = LINKS_AT - width - 1  # where the state column starts
    assert table.plain.splitlines()[4][at:at + width].rstrip() == shown


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_ranks_a_short_panel_leaves_out_are_named_on_its_last_row(lang: str) -> None:
    """8 ranks at 80x24 showed ranks 0-3 and nothing of the others (user trial)."""
    clock = FakeClock()
    session = FakeSession(clock)
    session.feed(heartbeats(8))
    whole = ranks_table(session.model, clock(), clock.wall_ns(), lang=lang, width=78)
    assert len(whole.plain.splitlines()) == 9
    cut = ranks_table(session.model, clock(), clock.wall_ns(), lang=lang, width=78,
                             rows=5).plain.splitlines()
    assert cut[:4] == whole.plain.splitlines()[:4]
    assert cut[4] == i18n.ui("lanes left out", lang).format("ranks 3-7")
    assert ranks_table(session.model, clock(), clock.wall_ns(), lang=lang, width=78,
                              rows=9).plain == whole.plain


@sync
async def test_at_80x24_the_ranks_panel_names_the_ranks_it_has_no_rows_for() -> None:
    session = FakeSession()
    session.feed(heartbeats(8))
    app = make_app(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await frame(pilot)
        await frame(pilot)
        shown = panel(app, "#ranks")
        assert re.search(r"… ranks \d-7: not shown", shown), shown


@pytest.mark.parametrize("lang, line", [
    ("en", "late arrivals (the others waited): rank 2: 2×, 300 ms in all, longest 200 ms "
           "(all_reduce #1)"),
    ("pt", "atrasos (os outros esperaram): rank 2: 2×, 300 ms ao todo, o maior "
           "200 ms (all_reduce #1)")])
@sync
async def test_the_ranks_panel_says_whom_the_others_waited_for(lang: str, line: str) -> None:
    """Under the ranks, once one arrived late (user trial: a rank stalling every 50 DDP
    steps was no straggler, and nothing on screen said the others waited for it)."""
    clock = FakeClock()
    session = FakeSession(clock)
    session.diagnosis = Diagnosis(session.model, wall_ns=clock.wall_ns)
    session.feed(heartbeats(4))
    app = make_app(session, lang=lang)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "late" not in panel(app, "#ranks") and "atrasad" not in panel(app, "#ranks")
        for seq, late_ms in ((1, 200), (2, 0), (3, 100)):
            starts = {r: T0_NS + seq * 10**9 + (late_ms * 10**6 if r == 2 else r) for r in range(4)}
            end = max(starts.values()) + 10**6
            session.feed([op_batch(r, [{"id": seq, "op": "all_reduce", "seq": seq,
                                        "bytes_in": 4096, "t_start": starts[r], "t_end": end}])
                          for r in range(4)])
        await frame(pilot)
        rows = [row.strip("│") for row in panel(app, "#ranks").splitlines()]
        assert rows[-2] == line.ljust(len(rows[-2])), rows  # under the last rank's row
        assert rows[-3].split()[:2] == ["3", "node0"]


def test_the_late_arrivals_line_is_cut_after_a_whole_word() -> None:
    """At 120 columns it read "o maior 2…", a number cut into another (user trial)."""
    clock = FakeClock()
    session = FakeSession(clock)
    session.diagnosis = Diagnosis(session.model, wall_ns=clock.wall_ns)
    session.feed(heartbeats(4))
    for seq, late_ms in ((1, 200), (2, 0), (3, 100)):
        starts = {r: T0_NS + seq * 10**9 + (late_ms * 10**6 if r == 2 else r) for r in range(4)}
        session.feed([op_batch(r, [{"id": seq, "op": "all_reduce", "seq": seq, "bytes_in": 4096,
                                    "t_start": starts[r], "t_end": max(starts.values()) + 10**6}])
                      for r in range(4)])
    for width, lang in ((70, "pt"), (70, "es"), (64, "en")):
        last = ranks_table(session.model, clock(), clock.wall_ns(), lang=lang, width=width,
                           late=session.diagnosis.late_arrivals()).plain.splitlines()[-1]
        assert len(last) <= width and last.endswith("…") and not last[-2].isdigit(), last


@sync
async def test_a_rank_without_recent_messages_is_silent() -> None:
    clock = FakeClock()
    session = FakeSession(clock)
    session.feed(heartbeats(4))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "silent" not in panel(app, "#ranks")

        clock.advance(5.0)
        session.feed([hb for hb in heartbeats(4) if hb.rank != 3])
        await frame(pilot)
        assert "silent 5s" in rank_row(app, 3)
        for rank in range(3):
            assert "silent" not in rank_row(app, rank)


@sync
async def test_a_rank_that_said_bye_is_exited() -> None:
    clock = FakeClock()
    session = FakeSession(clock)
    session.feed(scripted_broadcast(world=4, steps=2))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        session.feed([bye(1, dropped=3)])
        clock.advance(10.0)  # an exited rank is not reported silent
        session.feed([hb for hb in heartbeats(4) if hb.rank != 1])
        await frame(pilot)
        assert "exited" in rank_row(app, 1)
        assert "silent" not in panel(app, "#ranks")
        assert "3 records dropped by ranks" in panel(app, "#status")


@sync
async def test_rejected_messages_are_counted_in_the_viewer_panel() -> None:
    session = FakeSession()
    session.feed(heartbeats(2))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "0 malformed messages rejected" in panel(app, "#status")
        session.rejected = 7
        await frame(pilot)
        status = panel(app, "#status")
        assert "7 malformed messages rejected" in status
        assert "listening on tcp://127.0.0.1:5555" in status


@sync
async def test_a_failed_rank_is_reported_and_the_others_stopped() -> None:
    session = FakeSession()
    session.feed(heartbeats(4))
    ranks = FakeRanks(4)
    app = make_app(session, ranks)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        ranks.end(0, 0)
        ranks.end(2, 1, "RuntimeError: boom")
        await frame(pilot)
        status = panel(app, "#status")
        assert "rank 0 finished" in status
        assert "rank 2 failed (exit 1): RuntimeError: boom" in status
        assert "stopping the other ranks" in status
        assert ranks.stopped


@sync
async def test_the_viewer_panel_counts_failed_ops_and_at_the_end_incomplete_ones() -> None:
    """The trial's size mismatch: rank 1 failed in all_reduce #2, rank 0 died inside it and
    sent no record; the counts line left that op out. Failed counts at once; an instance
    half recorded without a failure is incomplete only once the job has ended (before, its
    records may still come)."""
    session = FakeSession()
    g2 = {0: ("0", (0, 1))}

    def rec(seq: int, flags: int = 0) -> dict[str, Any]:
        return {"id": seq, "op": "all_reduce", "seq": seq, "bytes_in": 64, "bytes_out": 64,
                "t_start": T0_NS + seq, "t_end": T0_NS + seq + 1, "flags": flags}

    session.feed(heartbeats(2) + [op_batch(r, [rec(1)], g2) for r in (0, 1)]
                 + [op_batch(1, [rec(2, protocol.FLAG_FAILED)], g2), op_batch(0, [rec(3)], g2)])
    ranks = FakeRanks(world=2)
    app = make_app(session, ranks)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        status = panel(app, "#status")
        assert "│ 1 failed operation  " in status, status
        assert "incomplete" not in status
        ranks.end(0, -6)
        ranks.end(1, 1)
        await frame(pilot)
        assert "│ 1 failed operation · 1 left incomplete  " in panel(app, "#status")
        app.lang = "pt"
        await frame(pilot)
        assert "│ 1 operação com falha · 1 ficou incompleta  " in panel(app, "#status")


@sync
async def test_question_mark_lists_every_key_and_escape_closes_it() -> None:
    app = make_app(FakeSession(), lang="pt")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = "\n".join(strip.text for strip in app.screen.query_one(Static).render_lines(
            Region(0, 0, 70, 14)))
        assert "Sair" in text and "Ajuda" in text and "ctrl+p" in text and "Mais rápido" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen) and app.is_running


@pytest.mark.parametrize("lang", i18n.LANGS)
@sync
async def test_e_reads_the_explanation_whole_on_a_screen_of_its_own(lang: str) -> None:
    """At 120x40 the explanation box showed its title and a few lines, for a class to read
    (user trial): `e`, as its subtitle says, shows the whole of it; esc goes back."""
    from commviz.tui.reading import ReadingScreen

    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session, lang=lang)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(3):
            await frame(pilot)
        box = panel(app, "#explain-box")
        assert i18n.ui("explain subtitle", lang) in box.splitlines()[-1]
        whole = app._explanation.plain
        assert whole.startswith("all_reduce: ") and whole.strip().splitlines()[-1] not in box
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, ReadingScreen)
        shown = screen_text(app)
        assert i18n.ui("explanation", lang) in shown and "esc" in shown
        for line in whole.strip().splitlines():  # every paragraph begins on screen
            assert " ".join(line.split()[:3]) in " ".join(shown.split()), line
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ReadingScreen) and app.is_running
        await pilot.press("question_mark")
        await pilot.pause()
        assert "e " in screen_text(app) and i18n.ui("key read", lang) in screen_text(app)
        assert i18n.ui("close", lang) in screen_text(app)  # how the help closes


def _help_text(app: CommvizApp) -> str:
    return "\n".join(strip.text for strip in app.screen.query_one(Static).render_lines(
        Region(0, 0, 70, 15)))


@sync
async def test_help_lists_only_the_keys_that_work_in_this_session() -> None:
    """Watching a job (commviz run/watch): no step gate, nothing to restart; a demo has both."""
    watching = make_app(FakeSession())
    async with watching.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        text = _help_text(watching)
        assert "Quit" in text and "Hold replay" in text and "Faster / Slower" in text
        assert "Pause" not in text and "Next iteration" not in text and "Restart" not in text
        assert "space" not in text and not any(line.split()[:1] == ["n"]
                                               for line in text.splitlines())
    demo = CommvizApp(FakeSession(), FakeRanks(), "t", lang="en", controller=FakeController(),
                      restart=FakeRanks)
    async with demo.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        text = _help_text(demo)
        assert "Pause" in text and "Next iteration" in text and "Restart" in text


@pytest.mark.parametrize("lang", ["en", "pt"])
@sync
async def test_help_palette_and_footer_name_each_key_in_the_same_words(lang: str) -> None:
    """In Portuguese the help said "space", "Velocidade" and "Segurar o replay" where the
    footer said "espaço", "Mais rápido" and "Segurar replay" (user trial)."""
    app = CommvizApp(FakeSession(), FakeRanks(), "t", lang=lang, controller=FakeController(),
                     restart=FakeRanks)
    async with app.run_test(size=SIZE) as pilot:
        footer = {b.id: (b.key_display or b.key, b.description)
                  for b in (binding for _, binding, enabled, _ in
                            app.screen.active_bindings.values() if enabled)
                  if b.show and b.id}
        await pilot.press("question_mark")
        await pilot.pause()
        rows = [line.split(maxsplit=1) for line in _help_text(app).splitlines()
                if line.strip(" │") and not line.startswith(("╭", "╰"))]
        help_words = " ".join(words for _, words in rows)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for key, words in footer.values():
            assert words in help_words and words in titles, (words, help_words, titles)
            assert key in _help_text(app), key
        space = i18n.ui("space", lang)
        assert footer["pause"][0] == space and space in _help_text(app)
        left = {"pt": ("space", "Velocidade", "Segurar o replay", "Pausar "),
                "en": ("Speed", "Hold the replay")}[lang]
        assert not any(word in _help_text(app) for word in left), _help_text(app)


@sync
async def test_l_switches_the_language() -> None:
    app = make_app(FakeSession(), lang="pt")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await frame(pilot)
        assert app.lang == "en" and "Quit" in screen_text(app)
        await pilot.press("l")
        await frame(pilot)
        assert app.lang == "es" and "Salir" in screen_text(app)
        await pilot.press("l")
        await frame(pilot)
        assert app.lang == "pt" and "Sair" in screen_text(app)


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_the_help_and_the_palette_say_where_l_goes(lang: str) -> None:
    """The help names every language in the order `l` goes through them; the palette
    names the next one."""
    rows = dict(commands.help_rows(lang, False, lambda action: True))
    assert rows["l"] == f"{i18n.ui('key lang', lang)} ({i18n.language_cycle()})"
    switch = next(c for c in commands.palette(lang, False, lambda action: True)
                  if c[2] == "switch_lang")
    name = i18n.ui("language name", i18n.next_lang(lang))
    assert switch[0].endswith(f": {name}") and switch[1].endswith(name), switch


class FakeController:
    """What the app uses of control.Controller: its state, toggle() and step()."""

    def __init__(self) -> None:
        self.state = ControlState("step", -1, 0, -1)
        self.calls: list[str] = []

    def toggle(self) -> None:
        self.calls.append("toggle")
        mode = "play" if self.state.mode == "step" else "step"
        self.state = ControlState(mode, self.state.allow, self.state.epoch + 1, self.state.reached)

    def step(self) -> None:
        self.calls.append("step")
        self.state = ControlState("step", self.state.allow + 1, self.state.epoch + 1,
                                  self.state.reached)

    @property
    def paused(self) -> bool:
        return self.state.mode == "step"

    def hold(self, on: bool) -> None:
        self.state = dataclasses.replace(self.state, held=on)

    def restart(self) -> None:
        self.calls.append("restart")


@sync
async def test_once_the_demo_has_ended_the_screen_says_so_and_offers_restart() -> None:
    """It still read 'Playing · space: Pause' with every rank gone (user trial)."""
    controller = FakeController()
    controller.toggle()  # playing
    ranks = FakeRanks(world=2)
    app = CommvizApp(FakeSession(), ranks, "t", lang="en", controller=controller,
                     restart=FakeRanks)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "▶ Playing" in panel(app, "#status")
        ranks.end(0)
        ranks.end(1)
        await frame(pilot)
        assert "■ The demo has ended · r: Restart · q: Quit" in panel(app, "#status")
        await pilot.press("space")
        await pilot.press("n")
        assert controller.calls == ["toggle"]  # nothing left to pause or step
        await pilot.press("r")
        await frame(pilot)
        assert "▶ Playing" in panel(app, "#status")
        await pilot.press("space")
        assert controller.calls == ["toggle", "restart", "toggle"]


@sync
async def test_a_playing_demo_waits_for_its_replay_to_catch_up() -> None:
    """Slow motion slows the demo: while the replay is still showing what they did, the ranks
    are held after their step (user trial: a 24-step reduce_scatter fell 20 s behind)."""
    session = FakeSession()
    session.feed(heartbeats(4) + scripted_all_reduce(world=4, steps=3))
    controller = Controller()
    try:
        app = CommvizApp(session, None, "t", lang="en", controller=controller,
                         clock=session.clock, wall_ns=session.clock.wall_ns)
        async with app.run_test(size=SIZE) as pilot:
            await frame(pilot)
            assert controller.state.held and not controller.paused
            assert controller.state.told == "step"
            status = panel(app, "#status")
            assert "▶ Playing · space: Pause · the ranks wait for the replay" in status
            session.clock.advance(60.0)  # the replay has shown all three
            await frame(pilot)
            assert not controller.state.held and controller.state.told == "play"
            assert "wait for the replay" not in panel(app, "#status")
            session.feed(scripted_all_reduce(world=4, steps=3, first=3))
            await frame(pilot)
            assert controller.state.held
            await pilot.press("p")  # a held replay: the ranks go on, the display waits
            await frame(pilot)
            assert not controller.state.held and "replay held (p)" in panel(app, "#status")
    finally:
        controller.close()


@sync
async def test_space_and_n_drive_the_demo_step_gate() -> None:
    controller = FakeController()
    app = CommvizApp(FakeSession(), None, "t", lang="en", controller=controller)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "Paused · n: Next iteration (1)" in panel(app, "#status")
        assert "⏸ Paused" in panel(app, "#header")
        await pilot.press("n")
        await pilot.press("n")
        await pilot.press("space")
        await frame(pilot)
        assert controller.calls == ["step", "step", "toggle"]
        assert "Playing" in panel(app, "#status") and "replay held" not in panel(app, "#status")
        assert "Paused" not in panel(app, "#header")
        await pilot.press("p")  # the replay alone: the ranks play on, and the line says both
        await frame(pilot)
        assert "▶ Playing · space: Pause · replay held (p)" in panel(app, "#status")
        # the header said "paused" here, while the ranks ran on (user trial)
        header = panel(app, "#header")
        assert "replay held" in header and "aused" not in header, header


@pytest.mark.parametrize("lang, live", [("en", " · ⏸ Paused · 0.3 s/step"),
                                         ("pt", " · ⏸ Pausado · 0,3 s/passo"),
                                         ("es", " · ⏸ En pausa · 0,3 s/paso")])
@sync
async def test_a_long_title_is_cut_before_the_live_state_at_the_headers_end(
        lang: str, live: str) -> None:
    """At 80 columns the run's title cut "⏸ Pausado" off the header (user trial)."""
    title = "all_gather · 4 ranks · gloo on CPU tensors: 0 GPU(s) here for 4 ranks"
    for size in ((80, 24), SIZE):
        app = CommvizApp(FakeSession(), None, title, lang=lang, controller=FakeController())
        async with app.run_test(size=size) as pilot:
            await frame(pilot)
            header = panel(app, "#header").rstrip()
        if size == SIZE:  # whole where it fits
            assert header.strip() == f"commviz — {title}{live}", header
            continue
        # the title cut, then the live state: paused whole (the speed may be cut after it)
        assert f"…{live[:live.index('·', 3) - 1]}" in header, header
        assert header.startswith(f"[{i18n.ui('view numbers', lang)} · v] commviz — all_gather")


@sync
async def test_at_80x24_a_demo_of_four_ranks_shows_every_rank() -> None:
    """With the demo's status lines (playing, no GPU), rank 3 was cut from the ranks panel
    at 80x24 (user trial); the log gives up its lines first."""
    session = FakeSession()
    session.feed(heartbeats(4) + scripted_all_reduce(world=4))
    controller = FakeController()
    controller.toggle()  # playing
    app = CommvizApp(session, None, "t", lang="en", controller=controller,
                     clock=session.clock, wall_ns=session.clock.wall_ns)
    async with app.run_test(size=(80, 24)) as pilot:
        await frame(pilot)
        ranks = panel(app, "#ranks")
        assert all(f"│   {r} node0" in ranks for r in range(4)), ranks


@sync
async def test_at_80x24_the_viewer_panel_keeps_its_newest_lines_and_the_ranks_their_rows() -> None:
    """The hang demo at 80x24: three ranks failed with long timeout errors, the viewer panel
    grew until the ranks panel had no row left (user trial)."""
    session = FakeSession()
    session.feed(heartbeats(3) + scripted_all_reduce(world=3))
    ranks = FakeRanks(world=3)
    app = CommvizApp(session, ranks, "t", lang="en", controller=FakeController(),
                     clock=session.clock, wall_ns=session.clock.wall_ns)
    async with app.run_test(size=(80, 24)) as pilot:
        for r in range(3):
            ranks.end(r, 1, f"RuntimeError: rank {r} timed out waiting 6000ms for a send "
                            "operation to complete after the others had left")
        await frame(pilot)
        assert all(rank_row(app, r) for r in range(3))
        status = panel(app, "#status")
        assert "rank 2 failed (exit 1)" in status and "left" in status, status
        assert len(status.splitlines()) == layout.NARROW_STATUS_ROWS + 2


@sync
async def test_a_finding_that_ended_with_its_job_is_no_all_clear() -> None:
    """The mismatch demo, once its ranks are gone: the finding ended with the job, unresolved.
    It showed with a tick, and the verdict said 'no ... mismatch' (user trial)."""
    from commviz.viewer.diagnose import Finding

    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    session.diagnosis = Diagnosis(session.model, wall_ns=session.clock.wall_ns)
    session.diagnosis.history.append(Finding(
        "resolved", (2,), (0, 1, 2, 3), 3,
        Words("ended with job 1, unresolved after 6.0 s: mismatch",
              "terminou com o job 1, sem solução após 6.0 s: divergência"), ("resolved",), 0.0, 0,
        about="mismatch", duration_s=6.0, unresolved=True))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "✗ ended with job 1, unresolved after 6.0 s: mismatch" in \
            findings(session.diagnosis.findings(), "en", session.diagnosis.history).plain
        status = panel(app, "#status")
        assert "1 finding ended with its job, unresolved" in status
        assert "no straggler, hang, lost rank or mismatch" not in status


@sync
async def test_without_a_demo_there_is_nothing_to_pause() -> None:
    app = make_app(FakeSession())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        await pilot.press("n")
        await frame(pilot)
        assert "Paused" not in panel(app, "#status") and app.is_running


@sync
async def test_q_quits() -> None:
    app = make_app(FakeSession())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.return_code is None
        await pilot.press("q")
        await pilot.pause()
        assert app.return_code == 0
    assert not app.is_running


@pytest.mark.parametrize(("size", "narrow"), [((80, 24), True), ((119, 30), True),
                                              ((120, 30), False), ((160, 48), False)])
@sync
async def test_narrow_terminals_stack_the_panels(size: tuple[int, int], narrow: bool) -> None:
    session = FakeSession()
    for _ in range(16):  # a full sparkline: the widest load column there is
        session.feed(heartbeats(4))
    session.feed(scripted_all_gather())
    app = make_app(session)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        left, right = app.query_one("#left").region, app.query_one("#right").region
        assert app.screen.has_class("-narrow") is narrow
        if narrow:
            assert right.y >= left.bottom and right.width == size[0]
            # the load column gives way first: every rank's number and state stay whole
            for rank in range(4):
                row = rank_row(app, rank)
                assert "done all_gather" in row and "CPU" in row
        else:
            assert right.x >= left.right and right.y == left.y


# ---- snapshots --------------------------------------------------------------------------
def _all_gather() -> tuple[FakeSession, str]:
    session = FakeSession()
    session.feed(scripted_all_gather(world=4, steps=3))
    return session, "demo all_gather · 4 ranks"


def _all_reduce() -> tuple[FakeSession, str]:
    """Three completed all_reduce, then ranks 1 and 2 waiting in the fourth."""
    clock = FakeClock()
    session = FakeSession(clock)
    session.feed(scripted_all_reduce(world=4, steps=3))
    started = T0_NS + 3 * STEP_NS
    session.feed([inflight(1, "all_reduce", 3, started, op_id=3, nbytes=1 << 20),
                  inflight(2, "all_reduce", 3, started + 2_000_000, op_id=3, nbytes=1 << 20)])
    clock.set_wall_ns(started + 125_000_000)
    return session, "demo all_reduce · 4 ranks"


def _send_recv() -> tuple[FakeSession, str]:
    """Transfers 0 -> 1 and 2 -> 3; rank 3 has exited, and two bad messages were rejected."""
    session = FakeSession()
    session.feed(scripted_send_recv(world=4, steps=3))
    session.feed([bye(3)])
    session.rejected = 2
    return session, "demo send_recv · 4 ranks"


def _broadcast() -> tuple[FakeSession, str]:
    """Three broadcasts from root 0, the replay half-way through its first tree step."""
    session = FakeSession()
    session.feed(scripted_broadcast(world=4, steps=3))
    return session, "demo broadcast · 4 ranks"


SCENARIOS = {"all_gather": _all_gather, "all_reduce": _all_reduce, "broadcast": _broadcast,
             "send_recv": _send_recv}


@pytest.mark.integration  # a snapshot runs the app
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_snapshot(snap_compare, scenario: str, size: tuple[int, int]) -> None:
    session, title = SCENARIOS[scenario]()

    async def gathered(pilot: Pilot) -> None:
        """Transfers are drawn once the rest of their round had time to arrive."""
        await frame(pilot)
        session.clock.t += GATHER_S
        await frame(pilot)

    assert snap_compare(make_app(session, title=title), terminal_size=size,
                        run_before=gathered if scenario == "send_recv" else None)


def _gpus() -> tuple[FakeSession, str]:
    """Four NCCL ranks on the four GPUs of one host (NVLinked in pairs 0-1 and 2-3, PCIe
    otherwise, from the fake NVML), three all_reduce done, each GPU's link traffic as NVML
    gave it: rank 1's NVLink rate not yet known (one reading), rank 3's none at all."""
    nv = fake_nvml(gpus=4, nvlinks=4, levels={(0, 1): 40, (2, 3): 40, (0, 2): 50, (0, 3): 10,
                                              (1, 2): 50, (1, 3): 50})
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4, steps=3))
    session.feed([topology(r, "node0", nv, r) for r in range(4)])
    session.feed([gpu_heartbeat(0, 4, nvlink_tx_bps=12.3e9, nvlink_rx_bps=11.9e9,
                                pcie_tx_bps=0.2e9, pcie_rx_bps=0.1e9),
                  gpu_heartbeat(1, 4, pcie_tx_bps=256_000.0, pcie_rx_bps=512_000.0),
                  gpu_heartbeat(2, 4, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0, pcie_tx_bps=3.2e9,
                                pcie_rx_bps=2.5e8),
                  gpu_heartbeat(3, 4)])
    return session, "run · 4 ranks on 4 GPUs"


@pytest.mark.integration
def test_snapshot_with_gpu_links(snap_compare) -> None:
    session, title = _gpus()
    assert snap_compare(make_app(session, title=title), terminal_size=(160, 48))


@sync
async def test_gpu_links_are_drawn_in_the_replay_and_their_traffic_under_each_rank() -> None:
    session, title = _gpus()
    app = make_app(session, title=title)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        ranks = panel(app, "#ranks").splitlines()
        below = {r: ranks[ranks.index(rank_row(app, r)) + 1] for r in range(4)}
        assert "NVL ↑12.3 ↓11.9 GB/s  PCIe ↑0.2 ↓0.1 GB/s" in below[0]
        assert "PCIe ↑0.3 ↓0.5 MB/s" in below[1] and "NVL" not in below[1]  # None: left out
        assert "NVL ↑0.0 ↓0.0 kB/s  PCIe ↑3.2 ↓0.2 GB/s" in below[2]  # a real 0 is shown
        assert "NVL" not in below[3] and "PCIe" not in below[3]
        replay = panel(app, "#topology")
        assert replay.count("NV4") == 2 and "PIX" in replay and replay.count("SYS") == 3
        assert "━━ NVLink" in replay and "┄┄ PCIe" in replay
        assert "GPU links: NV4 0↔1 2↔3 · SYS 0↔2 1↔2 1↔3 · PIX 0↔3" in panel(app, "#status")


def test_the_viewer_panel_counts_what_relays_dropped_and_what_it_shed() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    line = lambda **kw: status.counts(session.model, "tcp://h:1", 0, 0, 0, False, False,  # noqa: E731
                                      "en", **kw).splitlines()[2]
    assert line() == "0 malformed messages rejected · 0 records dropped by ranks"
    assert line(shed=3, relays=40) == (
        "0 malformed messages rejected · 0 records dropped by ranks · 40 records dropped by "
        "relays · 3 telemetry samples, phase marks or topology messages shed while the "
        "viewer was behind (never an op record)")


def test_without_a_gpu_the_viewer_says_why_and_draws_no_link() -> None:

    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    assert gpu_links_line(session.model) == ""  # no rank has said yet
    session.feed([protocol.GpuTopology(r, "node0", -1, (), (), "no GPU: CPU tensors")
                  for r in range(4)])
    assert gpu_links_line(session.model) == \
        "no GPU on ranks 0-3: CPU tensors"
    assert "NVL" not in ranks_table(session.model, session.clock.monotonic()).plain
    session.feed([protocol.GpuTopology(2, "node0", -1, (), (), "no GPU: NVML unavailable")])
    assert gpu_links_line(session.model) == \
        "no GPU on ranks 0, 1, 3: CPU tensors (and 1 other reason)"
    assert gpu_links_line(session.model, "pt") == \
        "nenhuma GPU nos ranks 0, 1, 3: tensores na CPU (e mais 1 motivo)"
    session.feed([protocol.GpuTopology(r, "node0", -1, (), (), "no GPU: NVML unavailable (X)")
                  for r in range(4)])
    assert gpu_links_line(session.model, "pt") == \
        "nenhuma GPU nos ranks 0-3: NVML indisponível (X)"


def test_link_rates_pick_a_unit_per_link_and_leave_out_what_nvml_did_not_give() -> None:

    assert link_rates({"nvlink_tx_bps": 4.5e11, "nvlink_rx_bps": 9e7}) == \
        "NVL ↑450.0 ↓0.1 GB/s"
    assert link_rates({"pcie_tx_bps": None, "pcie_rx_bps": 2048.0}) == "PCIe ↓2.0 kB/s"
    assert link_rates({"cpu_pct": 50.0}) == "" and link_rates({}) == ""


@pytest.mark.integration
def test_snapshot_on_a_light_terminal_in_portuguese(snap_compare) -> None:
    """Every panel redrawn in the light theme after a first dark frame."""
    session, title = _all_reduce()

    async def go_light(pilot: Pilot) -> None:
        await frame(pilot)
        pilot.app.theme = "textual-light"
        await frame(pilot)

    app = make_app(session, title=title, lang="pt")
    assert snap_compare(app, terminal_size=(160, 48), run_before=go_light)


def screen_text(app: CommvizApp) -> str:
    """Every line on screen now: header, panels, their titles and the footer."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


# What a user trial found in English on a Portuguese screen: the screens below show each of
# them in English and none of them in Portuguese
ENGLISH = ("gloo on CPU tensors", "GPU(s) here for", "load (last 3 s)", "read/written",
           "state", "device", "done all_reduce", "in all_reduce", "idle", "exited", "silent",
           "⚠ hang", "schematic:", "(1 of 6)", "a real transfer", "adds into (reduce)",
           "copies", "waiting for the first operation", "waiting for peers", "transferring",
           "history dropped", "now", "time ", "skew", "(in gather_object)", "(by DDP)",
           "statistics (nccl-tests columns", "viewer", "listening on", "op records",
           "collectives", "transfers", "malformed messages rejected",
           "records dropped by ranks", "rank 0 finished", "failed (exit 1)",
           "stopping the other ranks", "diagnosis:", "finding,", "s/step", "to go",
           "the job has ended", "Quit", "Pause/resume", "Next iteration",
           "Faster", "Slower", "Hold replay", "Restart", "Help", "palette", "Paused",
           "no GPU on", "CPU tensors")


async def _a_demo_screen(lang: str) -> str:
    """A demo's screen through a run: before any operation, all_reduce with two ranks in
    the next, an all_gather of gather_object by DDP, transfers, a rank gone, one silent,
    bad messages, two ranks ending (one failed)."""
    from commviz.launch import launcher

    session = FakeSession()
    ranks = FakeRanks(4)
    app = CommvizApp(session, ranks, lambda lang: f"all_reduce · 4 ranks · "
                     f"{launcher.choose_backend('auto', 4, lang)[1]}", clock=session.clock,
                     wall_ns=session.clock.wall_ns, lang=lang, controller=FakeController(),
                     restart=lambda: ranks)
    seen = []
    async with app.run_test(size=SIZE) as pilot:
        session.feed(heartbeats(4))
        session.feed([protocol.GpuTopology(r, "node0", -1, (), (), "no GPU: CPU tensors")
                      for r in range(4)])
        await frame(pilot)
        seen.append(screen_text(app))
        session.feed(scripted_all_reduce(world=4, steps=3))
        started = T0_NS + 3 * STEP_NS
        session.feed([inflight(r, "all_reduce", 3, started, op_id=3) for r in (1, 2)])
        await frame(pilot)
        seen.append(screen_text(app))
        session.feed([op_batch(r, [{"id": 3, "op": "all_gather", "seq": 1, "bytes_in": 64,
                                    "bytes_out": 128, "t_start": started, "gid": 1,
                                    "parent": "gather_object", "flags": protocol.FLAG_DDP}],
                               groups={1: ("1", (0, 3))}) for r in (0, 3)])
        await frame(pilot)
        seen += [screen_text(app), *log_lines(app)]  # the log's lines go past its panel
        session.clock.advance(60.0)
        session.feed(scripted_send_recv(world=4, steps=1, t0_ns=T0_NS + 10 * STEP_NS))
        await frame(pilot)
        seen.append(screen_text(app))
        session.clock.advance(60.0)
        await frame(pilot)
        seen.append(screen_text(app))
        session.feed([bye(3, dropped=3)])
        session.clock.advance(5.0)
        session.feed([heartbeat(r, 4) for r in (0, 1)])
        session.rejected = 2
        ranks.end(0, 0)
        ranks.end(1, 1, "RuntimeError: boom")
        await frame(pilot)
        seen.append(screen_text(app))
    return "\n".join(seen)


async def _a_jobs_screen(lang: str) -> str:
    """A job's screen: a hang, then the job ends."""
    from commviz.launch.job import OutputBuffer
    from commviz.viewer.diagnose import Diagnosis

    session = FakeSession()
    session.diagnosis = diag = Diagnosis(session.model, wall_ns=session.clock.wall_ns)
    ranks = FakeRanks(world=1)
    app = CommvizApp(session, ranks, "run · python train.py", clock=session.clock,
                     wall_ns=session.clock.wall_ns, lang=lang, output=OutputBuffer())
    seen = []
    async with app.run_test(size=SIZE) as pilot:
        session.feed([heartbeat(r, 4) for r in range(4)])
        _rank_3_never_comes(session, diag, seq=1)
        await frame(pilot)
        seen.append(screen_text(app))
        ranks.end("job", 0)
        ranks.stopped = True
        await frame(pilot)
        seen.append(screen_text(app))
    return "\n".join(seen)


@pytest.mark.parametrize("lang", ["en", "pt"])
@sync
async def test_a_portuguese_screen_has_no_english_left(lang: str, monkeypatch) -> None:
    """Every text the TUI writes itself: each of ENGLISH shows on the English screens, and
    none on the same screens in Portuguese, whose numbers have decimal commas."""
    from commviz.launch import launcher
    from commviz.tui.topology import render_topology

    monkeypatch.setattr(launcher, "gpu_count", lambda: 0)
    screens = await _a_demo_screen(lang) + await _a_jobs_screen(lang)
    small = render_topology(30, None, 30, 6, lang=lang)[0].plain  # a grid that does not fit
    if lang == "en":
        missing = [s for s in ENGLISH if s not in screens]
        assert not missing, missing
        assert "do not fit" in small and "0.3 s/step" in screens
    else:
        left = [s for s in ENGLISH if s in screens]
        assert not left, left
        assert "não cabem" in small and "0,3 s/passo" in screens
        assert "concluiu all_reduce" in screens and "(em gather_object)" in screens


@pytest.mark.parametrize("op, world", [("all_to_all", 3), ("all_to_all", 4), ("reduce", 4),
                                       ("all_reduce", 6), ("all_gather", 8)])
def test_the_buffers_grid_fits_the_panel_and_its_rows_line_up(op: str, world: int) -> None:
    """A grid wider than the panel wrapped mid-row (all_to_all at 4 ranks: n x n chunks), and
    the reduce's `to root` row stood one column off (user trial)."""
    lines = _phases_lines(op, world, "en", None)
    grid = lines[lines.index(next(ln for ln in lines if ln.startswith("Buffers"))) + 1:]
    rows = [line for line in grid if not line.startswith("not shown")]
    assert all(len(line) <= GRID_MAX_W for line in rows), rows
    first = rows[0].index("r0")  # every row's buffers start in the header's first rank column
    assert all(row[first - 1] == " " and row[first] in "0123456789·" for row in rows[1:])


def _phases_lines(op: str, world: int, lang: str, width: int | None,
                  root: int = -1) -> list[str]:
    from fakes import scripted_collective

    session = FakeSession()
    session.feed(scripted_collective(op, world=world, peer=root))
    return inside(session.model, lang, width=width).plain.splitlines()


@pytest.mark.parametrize("op, world, width, lang, left_out", [
    ("all_gather", 8, 60, "en", "not shown (widen the terminal): r5-r7, transfers"),
    ("all_gather", 8, 44, "pt", "fora da tela (alargue o terminal): r4-r7, transferências"),
    ("all_gather", 8, 44, "es", "fuera de pantalla (ensanche la terminal): r4-r7, "
                                "transferencias"),
    ("all_reduce", 4, 44, "en", "not shown (widen the terminal): transfers"),
    ("broadcast", 5, 60, "en", None), ("all_reduce", 4, 60, "pt", None)])
def test_the_buffers_grid_fits_its_width_and_says_what_it_leaves_out(
        op: str, world: int, width: int, lang: str, left_out: str | None) -> None:
    """At 120x40 the grid's rows wrapped; at 8 ranks columns went missing unsaid, and a
    broadcast of 5 ranks lost its transfers column though it had the room (user trial)."""
    lines = _phases_lines(op, world, lang, width)
    grid = lines[next(i for i, ln in enumerate(lines) if ln.startswith("Buffers")) + 1:]
    rows = grid[:-1] if left_out else grid
    assert all(len(row) <= width for row in rows), rows
    shown = rows[0].split()
    assert grid[-1] == left_out if left_out else "→" in rows[2] and len(shown) == world
    if left_out and "r7" in left_out:  # the ranks named left out are those not shown
        first_hidden = int(re.search(r"r(\d+)-r7", left_out).group(1))
        assert shown == [f"r{r}" for r in range(first_hidden)]


@pytest.mark.parametrize("width", [60, 44])
def test_many_ranks_list_their_steps_one_row_each_with_how_many_transfers_are_left_out(
        width: int) -> None:
    lines = _phases_lines("all_gather", 9, "en", width)
    steps = [line for line in lines if line.lstrip().startswith("AG")]
    assert steps and all(len(line) <= width for line in steps), steps
    assert all(re.search(r"c\d+  \+\d+ more$", line) for line in steps), steps


@pytest.mark.parametrize("rows", [14, 9])
def test_in_fewer_rows_the_phases_panel_leaves_out_its_prose_then_steps(rows: int) -> None:
    """At 120x40 a finding's panel and the grid left the viewer panel no row (user trial):
    the phases panel fits the rows it is given, the replayed step always in them."""
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    whole = inside(session.model, "en", width=44)
    shown = inside(session.model, "en", width=44, rows=rows)
    assert text_rows(whole, 44) > 14 >= text_rows(shown, 44) <= rows
    assert "Cost" in whole.plain and "Cost" not in shown.plain
    assert "AG2" in shown.plain and shown.plain.startswith("all_reduce · gloo ring")
    assert ("RS0" in shown.plain) == (rows >= 14)  # the earliest steps go first
    # what is not shown is said in one row, the cost model with the rest (user trial)
    assert "not shown (widen the terminal): transfers" in whole.plain
    assert shown.plain.endswith("\nnot shown (larger screen): transfers, cost")
    pt = inside(session.model, "pt", width=44, rows=rows).plain
    assert pt.endswith("\nocultos (tela maior): transferências, custo")


@pytest.mark.parametrize("op, root, lang, said", [
    ("broadcast", 2, "en", "broadcast from rank 2"),
    ("scatter", 1, "pt", "scatter a partir do rank 1"),
    ("reduce", 3, "en", "reduce to rank 3"), ("gather", 0, "pt", "gather para o rank 0")])
def test_a_rooted_op_names_its_root_where_it_is_described(op: str, root: int, lang: str,
                                                          said: str) -> None:
    from fakes import scripted_collective

    session = FakeSession()
    session.feed(scripted_collective(op, world=4, peer=root))
    inst = session.model.recent[-1]
    assert inside(session.model, lang).plain.startswith(said + " · ")
    assert said in explanation(session.model, inst, lang).plain.splitlines()[1]
    session = FakeSession()
    session.feed(scripted_collective("all_reduce", world=4))
    assert inside(session.model, lang).plain.startswith("all_reduce · ")


def test_the_phases_panel_sets_the_cost_model_against_the_measured_time() -> None:
    from commviz.knowledge.costmodel import Fit

    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    inst = session.model.recent[-1]
    text = inside(session.model, "en", None, Fit(50e-6, 1e9, 3)).plain
    # 6 steps x 50 us + 1.5 MiB / 1 GB/s = 300 + 1572.864 us
    assert "predicted 1873 µs vs 350 µs" in text and f"{inst.time_ns / 1e3:.0f}" == "350"
    assert "α 50 µs/step, β 1 GB/s, fitted on this run's 3 kinds of operation" in text
    # a term the fit left out is said to be unmeasurable, not shown as ∞ or 0 (user trial)
    latency = inside(session.model, "en", None, Fit(50e-6, math.inf, 3)).plain
    assert "α 50 µs/step; bandwidth not measurable, the sizes are too small (latency-bound)" \
        in latency
    assert "∞" not in latency
    bandwidth = inside(session.model, "pt", None, Fit(0.0, 1e9, 3)).plain
    assert "β 1 GB/s; tempo por passo não mensurável, os tamanhos são grandes demais " \
        "(limitado pela banda)" in bandwidth
    assert "α 0" not in bandwidth
    assert "AG2" in inside(session.model, "pt").plain
    assert "cada rank envia até 1,5 MiB em 6 passos" in inside(session.model, "pt").plain


@sync
async def test_r_restarts_the_demo_on_an_empty_screen() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    old, started = FakeRanks(), []

    def restart() -> FakeRanks:
        started.append(FakeRanks())
        return started[-1]

    app = CommvizApp(session, old, "test", clock=session.clock,
                     wall_ns=session.clock.wall_ns, restart=restart)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "done all_reduce" in panel(app, "#ranks")
        await pilot.press("r")
        await frame(pilot)
        assert old.stopped and len(started) == 1 and app.ranks is started[0]
        assert "all_reduce" not in panel(app, "#ranks") + panel(app, "#log")
        assert "restarted" in panel(app, "#status")
        session.feed(scripted_broadcast(world=4))  # the new ranks' first operations
        await frame(pilot)
        assert "done broadcast" in panel(app, "#ranks") and "broadcast" in panel(app, "#log")


@pytest.mark.parametrize("recording", [False, True])
@sync
async def test_r_is_offered_at_the_end_exactly_where_it_restarts(recording: bool) -> None:
    """A recorded demo's end did not offer `r` while its footer did, and `r` then refused: a
    recording holds one run (user trial). Wherever `r` is offered, it restarts."""
    session = FakeSession()
    session.recorder = object() if recording else None
    started: list[FakeRanks] = []

    def restart() -> FakeRanks:
        started.append(FakeRanks(world=1))
        return started[-1]

    ranks = FakeRanks(world=1)
    app = CommvizApp(session, ranks, "test", clock=session.clock, controller=FakeController(),
                     wall_ns=session.clock.wall_ns, restart=restart)
    async with app.run_test(size=SIZE) as pilot:
        ranks.end(0, 1, "RuntimeError: boom")
        await frame(pilot)
        status = panel(app, "#status")
        footer = screen_text(app).splitlines()[-1]
        assert "The demo has ended" in status
        offered = [" r: Restart " in status, " r Restart " in footer,
                   "Restart" in [c.title for c in app.get_system_commands(app.screen)]]
        assert offered == [not recording] * 3, (status, footer)
        await pilot.press("r")
        await pilot.pause()
        assert bool(started) == (not recording) and ranks.stopped == (not recording)
    watching = make_app(FakeSession())
    async with watching.run_test(size=SIZE):
        assert watching.check_action("restart", ()) is False


@sync
async def test_the_command_palette_offers_this_sessions_actions_and_switches_language() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {"Faster", "Slower", "Language: Español", "Help"} <= set(titles)
        assert "Pause" not in titles and "Restart" not in titles  # watching: no demo to drive
        switch = next(c for c in app.get_system_commands(app.screen)
                      if c.title.startswith("Language"))
        assert switch.help == "key: l · every panel in Español"  # not its title
        switch.callback()
        await frame(pilot)
        next(c for c in app.get_system_commands(app.screen)  # from Spanish
             if c.title == "Idioma: Português").callback()
        await frame(pilot)
        assert "Por dentro da operação no replay" in panel(app, "#inside")
        assert "cada rank envia até" in panel(app, "#inside")
        # the operations already in the log are written again, in Portuguese
        logged = panel(app, "#log")
        assert " tempo " in logged and " time " not in logged, logged
        # the viewer panel's longer Portuguese lines wrap: it grows rather than lose its last
        assert "perdido ou" in panel(app, "#status") and "divergente" in panel(app, "#status")
        assert "all_reduce em anel do gloo" in panel(app, "#inside") + panel(app, "#topology")
        # the footer's keys, Textual's own commands and the palette's search box too
        screen = screen_text(app)
        assert "Sair" in screen and "Mais rápido" in screen and "paleta" in screen
        assert "Quit" not in screen and "Faster" not in screen and "palette" not in screen
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {"Tema", "Sair", "Captura de tela", "Idioma: English"} <= set(titles)
        assert "Theme" not in titles and "Quit" not in titles
        await pilot.press("ctrl+p")
        await pilot.pause(0.3)
        assert "Buscar comandos…" in screen_text(app)
        await pilot.press("escape")
        app.action_switch_lang()  # and back: English as it was
        await frame(pilot)
        screen = screen_text(app)
        assert "Quit" in screen and "Faster" in screen and "Sair" not in screen
        assert "Theme" in [c.title for c in app.get_system_commands(app.screen)]


@sync
async def test_ctrl_p_opens_the_palette_and_its_language_entry_works() -> None:
    """As a user reaches it: the footer's ^p opens the palette (a class attribute named
    COMMANDS, Textual's own, once broke it: a crash on ctrl+p)."""
    from textual.command import CommandPalette

    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause(0.3)
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"Language")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert app.lang == "es" and not isinstance(app.screen, CommandPalette)


@pytest.mark.parametrize("lang", i18n.LANGS)
@sync
async def test_at_80x24_the_footer_shows_every_key_of_a_demo(lang: str) -> None:
    """At 80 columns the footer cut off `p`, `z`, `r` and even `?` (user trial): there it
    packs short labels, `+/-` as one, without the palette's key or `z` (the timeline's
    subtitle says z/Z); wide again, the long ones; at 120 columns, the long ones where they
    fit (Portuguese's did not: "p Segurar repla▏^p paleta")."""
    app = CommvizApp(FakeSession(), None, "t", lang=lang, controller=FakeController(),
                     restart=FakeRanks)

    def footer() -> str:
        return screen_text(app).splitlines()[-1]

    async with app.run_test(size=(80, 24)) as pilot:
        await frame(pilot)
        await pilot.press("v")  # the replay and the timeline: z zooms there
        await frame(pilot)
        keys = re.findall(r"(\S+) [^ ]+", footer())
        assert keys == ["q", "v", "?", i18n.ui("space", lang), "n", "+/-", "p", "r"], \
            footer()
        assert footer().rstrip().endswith("r " + i18n.ui("key restart", lang)), footer()
        assert "^p" not in footer()
        assert "z/Z" in panel(app, "#timeline")
        for box in ("#timeline", "#topology"):  # their titles whole, in shorter words
            assert "…" not in panel(app, box).splitlines()[0], panel(app, box)
        await pilot.resize_terminal(120, 40)
        await frame(pilot)
        for box in ("#timeline", "#topology"):
            assert "…" not in panel(app, box).splitlines()[0], panel(app, box)
        whole = "- " + i18n.ui("key slower", lang) in footer()
        assert whole == (lang == "en"), footer()
        assert footer().rstrip().endswith("^p " + i18n.ui("key palette", lang)), footer()
        await pilot.resize_terminal(160, 48)
        await frame(pilot)
        wide = footer()
        assert "- " + i18n.ui("key slower", lang) in wide and "^p" in wide, wide
        assert " v " not in wide  # everything is on screen: no views to turn
        await pilot.resize_terminal(80, 24)
        await frame(pilot)
        assert re.findall(r"(\S+) [^ ]+", footer())[:2] == ["q", "v"], footer()


@sync
async def test_v_turns_a_narrow_screen_through_every_panel_group() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await frame(pilot)

        def shown() -> set[str]:
            return {w.id for w in app.query("#main Static, #main Timeline, #main Topology, "
                                            "#main OpLog") if w.display and w.region.height}

        assert {"ranks", "log", "stats", "status"} <= shown() and "inside" not in shown()
        assert panel(app, "#header").strip().startswith("[Ranks, log and numbers · v] commviz")
        await pilot.press("v")
        await frame(pilot)
        assert {"topology", "timeline"} <= shown() and "ranks" not in shown()
        assert panel(app, "#header").strip().startswith("[Replay and timeline · v]")  # which, said
        assert not app._notifications  # there only: a toast covered the ring's bottom row
        await pilot.press("v")
        await frame(pilot)
        assert shown() == {"inside"} and "RS0" in panel(app, "#inside")
        await pilot.press("v")
        await frame(pilot)
        # the explanation under the program's line that made the operation
        assert shown() == {"source", "explain"} and "all_reduce" in panel(app, "#explain")
        assert app.query_one("#source").region.y < app.query_one("#explain-box").region.y
        assert panel(app, "#header").strip().startswith("[Explanation and source · v]")
        await pilot.press("v")
        await frame(pilot)
        assert "ranks" in shown()
    wide = make_app(FakeSession())
    async with wide.run_test(size=SIZE):
        assert wide.check_action("next_view", ()) is False  # everything is on screen already


def test_the_load_column_draws_gpu_utilization_memory_and_power_or_the_cpu_labelled_so():
    from commviz.viewer.model import RankState

    gpu = RankState(0)
    for i in range(6):
        gpu.telemetry.append((i, {"gpu_util_pct": 20.0 * i, "gpu_mem_used": 2e9 * (i + 1),
                                  "gpu_mem_total": 16e9, "gpu_power_w": 100.0 + 50 * i}))
    line = _load(gpu).plain
    assert line.startswith("GPU 100% ▁▂▃▅▆█ mem ") and "11.2G" in line and "350W ▅▆▇█" in line
    cpu = RankState(1)
    cpu.telemetry.append((0, {"cpu_pct": 55.0, "rss_bytes": 3e8, "gpu_util_pct": None}))
    assert _load(cpu).plain == "CPU  55% ▄ rss █ 286.1M"


def test_a_transfer_is_set_against_its_pairs_first_one_which_also_connected() -> None:
    """NCCL connects a pair lazily, on its first transfer (knowledge/collectives.md)."""
    from commviz.wire import protocol

    session = FakeSession()
    session.feed([gpu_heartbeat(r, 4) for r in range(4)]
                 + [m for m in scripted_send_recv(world=4, steps=3)
                    if not isinstance(m, protocol.Heartbeat)])
    model = session.model
    assert model.ranks[0].backend == "nccl"
    pair = model.recent[-1].group
    assert model.recent[-1].seq == 3 and pair in model.first_transfer_ns
    first = next(i for i in model.recent if i.group == pair and i.seq == 1)
    assert model.first_transfer_ns[pair] == first.time_ns
    text = inside(model, "en").plain
    assert f"The first transfer {pair[0]} → {pair[1]} took {first.time_ns / 1e6:.1f} ms" in text
    frame_of_first = type("F", (), {"instance": first, "step": 0, "round": False})()
    assert "its time includes setting up" in inside(model, "en", frame_of_first).plain
    assert "criou a conexão" in inside(model, "pt").plain


def test_on_gloo_a_first_transfer_is_not_said_to_connect() -> None:
    """gloo connects every pair when the process group is created, not on first use."""

    session = FakeSession()
    session.feed(scripted_send_recv(world=4, steps=3))
    model = session.model
    first = next(i for i in model.recent if i.seq == 1)
    frame_of_first = type("F", (), {"instance": first, "step": 0, "round": False})()
    for lang in ("en", "pt"):
        for frame in (None, frame_of_first):
            text = inside(model, lang, frame).plain
            assert "send: rank" in text and "lazy" not in text and "conex" not in text
            assert "connection" not in text


@sync
async def test_a_jobs_output_has_a_panel_and_its_end_is_said_once() -> None:
    from commviz.launch.job import OutputBuffer

    session = FakeSession()
    session.feed(scripted_all_reduce(world=2))
    output = OutputBuffer()
    ranks = FakeRanks(world=1)
    app = CommvizApp(session, ranks, "run", clock=session.clock,
                     wall_ns=session.clock.wall_ns, output=output)
    async with app.run_test(size=SIZE) as pilot:
        output.append("stdout", "step 0 loss 2.31")
        output.append("stderr", "a warning")
        await frame(pilot)
        assert app.query_one("#output").display
        assert "step 0 loss 2.31" in panel(app, "#output") and "a warning" in panel(app, "#output")
        output.append("stdout", "step 1 loss 1.97")
        await frame(pilot)
        assert list(app.query_one("#output", OpLog).lines)[-1] == "step 1 loss 1.97"
        assert len(app.query_one("#output", OpLog).lines) == 3
        ranks.end("job", 0)
        ranks.stopped = True  # running() == 0: the job has ended
        await frame(pilot)
        await frame(pilot)
        status = panel(app, "#status")
        # once: "the job finished" above it said the same (user trial)
        assert "the job finished" not in status and status.count("the job has ended") == 1
    demo = make_app(FakeSession())
    async with demo.run_test(size=SIZE):
        assert not demo.query_one("#output").display


def _rank_3_never_comes(session: FakeSession, diag: Any, seq: int) -> None:
    """Ranks 0-2 enter all_reduce #seq, rank 3 never does: 1.5 s later, a hang is named."""
    session.feed([inflight(r, "all_reduce", seq, T0_NS) for r in range(3)])
    for _ in range(3):
        session.clock.advance(0.5)
        session.feed([heartbeat(r, 4) for r in range(4)])
        with session.lock:
            diag.update()


@sync
async def test_findings_are_named_in_their_panel_and_on_the_ranks_they_blame() -> None:
    from commviz.viewer.diagnose import Diagnosis

    session = FakeSession()
    clock, model = session.clock, session.model
    session.diagnosis = diag = Diagnosis(model, wall_ns=clock.wall_ns)
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        session.feed([heartbeat(r, 4) for r in range(4)])
        await frame(pilot)
        assert not app.query_one("#findings").display
        assert "diagnosis: no straggler, hang" in panel(app, "#status")
        _rank_3_never_comes(session, diag, seq=1)
        await frame(pilot)
        text = panel(app, "#findings-text")
        assert "⚠ hang" in text and "all_reduce #1" in text and "rank 3 missing" in text
        assert "Check:" in text and "diagnosis: 1 finding," in panel(app, "#status")
        assert "⚠ not in all_reduce #1" in rank_row(app, 3) and "⚠" not in rank_row(app, 0)
        topology = app.query_one("#topology")
        assert topology.flagged == {3} and set(topology.alerts) == {(0, 3), (1, 3), (2, 3)}
        assert "⚠ hang" in panel(app, "#topology") and "╌" in panel(app, "#topology")
        session.feed([op_batch(r, [{"id": 100 if r < 3 else 7, "op": "all_reduce", "seq": 1,
                                    "bytes_in": 4096, "bytes_out": 4096, "t_start": T0_NS,
                                    "t_end": T0_NS + 1000}]) for r in range(4)])
        with session.lock:
            diag.update()
        await frame(pilot)
        # what ended stays in view a while, then the panel goes
        assert app.query_one("#findings").display
        text = panel(app, "#findings-text")
        assert "✓ resolved after" in text and "⚠" not in text
        clock.advance(app_module.FINDINGS_LINGER_S - 0.5)
        await frame(pilot)
        assert app.query_one("#findings").display
        clock.advance(1)
        await frame(pilot)
        assert not app.query_one("#findings").display


@sync
async def test_on_a_narrow_terminal_a_finding_keeps_the_ranks_it_blames_in_view() -> None:
    from commviz.viewer.diagnose import Diagnosis

    session = FakeSession()
    session.diagnosis = diag = Diagnosis(session.model, wall_ns=session.clock.wall_ns)
    app = make_app(session)
    async with app.run_test(size=(80, 24)) as pilot:
        session.feed(scripted_all_reduce(world=4))
        await frame(pilot)
        assert app.query_one("#stats").display and app.query_one("#log").display
        _rank_3_never_comes(session, diag, seq=10)
        await frame(pilot)
        await pilot.pause()
        assert app.query_one("#findings").display
        assert not app.query_one("#stats").display and not app.query_one("#log").display
        assert "⚠ hang" in panel(app, "#findings-text")
        assert all(rank_row(app, r) for r in range(3)) and "⚠ not in #10" in rank_row(app, 3)


@pytest.mark.parametrize("size", [SIZE, (80, 24)])
@pytest.mark.parametrize("lang", ["en", "pt"])
@sync
async def test_a_rank_blamed_for_a_hang_reads_what_it_is_not_in(size, lang) -> None:
    """The blamed rank read '⚠ hang: done all_redu…' (cut, and 'hang' beside 'done': user
    trial). Idle, it reads what the finding says of it, whole in its column: the op when it
    fits, else the sequence number."""
    from commviz.viewer.diagnose import Diagnosis

    session = FakeSession()
    session.diagnosis = diag = Diagnosis(session.model, wall_ns=session.clock.wall_ns)
    app = make_app(session, lang=lang)
    async with app.run_test(size=size) as pilot:
        session.feed(scripted_all_reduce(world=4))
        _rank_3_never_comes(session, diag, seq=7)
        await frame(pilot)
        await pilot.pause()
        row = rank_row(app, 3)
        at, width = row.index("⚠"), RANK_COLUMNS[3][1]
        assert row[at + width] == " " and "…" not in row[at:at + width], row
        assert row[at:at + width].rstrip() == {"en": "⚠ not in all_reduce #7",
                                               "pt": "⚠ fora do #7",
                                               "es": "⚠ fuera de #7"}[lang], row
        assert "done" not in row and "concluiu" not in row and "hang" not in row
        # busy elsewhere, the rank keeps its own state beside the finding's name
        session.feed([inflight(3, "broadcast", 1, T0_NS)])
        await frame(pilot)
        # (its time waited whole: the op's number gives way to it, as without a finding)
        assert re.search(r"⚠ (in|em) broadcast 1[.,]5 s ", rank_row(app, 3)), rank_row(app, 3)


@sync
async def test_a_rank_error_is_toasted_only_where_the_viewer_panel_cannot_show_it_whole() -> None:
    """A toast covered the viewer panel's bottom rows for 10 s, the very line it repeated
    among them, and four stacked at 120x40 (user trial, the crash and hang demos): an error
    the panel shows whole, in red, gets no toast; the first failure's longer one, or one
    while the panel is off screen, does, as text not markup."""
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    ranks = FakeRanks()
    app = make_app(session, ranks)
    notified: list[dict] = []
    app.notify = lambda message, **kw: notified.append({"message": message, **kw})
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        ranks.end(1, 1, "RuntimeError: [/gloo/transport/tcp/unbound_buffer.cc:78] Timed out")
        await frame(pilot)
        assert notified == []
        assert "[/gloo/transport/tcp/unbound_buffer.cc:78] Timed out" in panel(app, "#status")
        shown = app._shown_panels["#status"]
        red = "".join(shown.plain[span.start:span.end] for span in shown.spans
                      if str(span.style) == "bold red")
        assert red.startswith("rank 1 failed (exit 1): RuntimeError: [/gloo/"), shown.spans
        ranks.end(2, 1, GLHF)  # after the first: its consequence, mostly; no toast
        await frame(pilot)
        assert notified == []
    long = make_app(session, ranks := FakeRanks())
    long.notify = lambda message, **kw: notified.append({"message": message, **kw})
    async with long.run_test(size=SIZE) as pilot:
        await frame(pilot)
        ranks.end(2, 1, GLHF)
        ranks.end(3, 1, GLHF)
        await frame(pilot)
        (note,) = notified  # the first only; a toast renders markup unless told not to
        assert note["markup"] is False and note["message"].startswith("rank 2 failed")
        assert "[127.0.0.1]:29500" in note["message"]
    notified.clear()
    narrow = make_app(session, ranks := FakeRanks())
    narrow.notify = lambda message, **kw: notified.append({"message": message, **kw})
    async with narrow.run_test(size=(80, 24)) as pilot:
        await pilot.press("v")  # the replay: the viewer panel is not on screen
        await frame(pilot)
        ranks.end(1, 1, "RuntimeError: short")
        await frame(pilot)
        assert [n["message"] for n in notified] == ["rank 1 failed (exit 1): RuntimeError: short"]


GLHF = ("RuntimeError: Connection closed by peer [127.0.0.1]:29500: the remote end hung up "
        "while we waited for its reply, see its own log for the reason. GLHF! 🏖️")


def test_text_from_a_job_takes_the_cells_rich_counts_for_it() -> None:
    from commviz.viewer.plain_text import UNSURE_WIDTH, cell_safe

    assert cell_safe("GLHF! 🏖️") == f"GLHF! {UNSURE_WIDTH}"  # a width of its own: gone
    assert cell_safe("\x1b[31mred\x1b[0m\tok\u200b") == "red ok"  # escapes, tab, format
    assert cell_safe("cafe\u0301 🚀 中 ❤️") == "café 🚀 中 ❤"  # accents, wide characters stay


@pytest.mark.parametrize("size", [(160, 48), (120, 40), (80, 24)])
@sync
async def test_a_failed_ranks_long_error_keeps_the_viewer_panel_whole(
        size: tuple[int, int]) -> None:
    """The crash demo: an error ending in "GLHF! 🏖️" broke the panel's right border, and
    four of them pushed its bottom off the screen at 160x48 (user trial)."""
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    _crashed(session)
    ranks = FakeRanks(world=4)
    app = CommvizApp(session, ranks, "t", lang="en", controller=FakeController(),
                     restart=FakeRanks, clock=session.clock, wall_ns=session.clock.wall_ns)
    app.notify = lambda *args, **kw: None  # toasts cover the panel
    async with app.run_test(size=size) as pilot:
        for r in range(4):
            ranks.end(r, 1, GLHF)
        await frame(pilot)
        await frame(pilot)  # the panel's room, from the layout the first frame made
        status = app.query_one("#status")
        assert status.region.bottom <= app.size.height - 1  # above the footer
        rows = panel(app, "#status").splitlines()
        assert rows[-1].startswith("╰") and all(row[-1] in "│╮╯" for row in rows), rows
        assert "🏖" not in "".join(rows) and "rank 3 failed (exit 1)" in "".join(rows)
        assert any(row.rstrip("│ ").endswith("…") for row in rows), rows  # cut, and says so


@sync
async def test_the_jobs_output_is_drawn_safe_for_its_cells() -> None:
    from commviz.launch.job import OutputBuffer

    output = OutputBuffer()
    app = CommvizApp(FakeSession(), FakeRanks(world=1), "run", output=output)
    async with app.run_test(size=SIZE) as pilot:
        output.append("stdout", "\x1b[1mepoch 1\x1b[0m done 🏖️")
        await frame(pilot)
        assert list(app.query_one("#output", OpLog).lines) == ["epoch 1 done �"]


def test_ranks_on_several_nodes_are_grouped_under_a_line_per_node() -> None:

    session = FakeSession()
    session.model.local_host = "node0"
    session.feed([dataclasses.replace(hb, host="node-b") if hb.rank in (1, 3) else hb
                  for hb in heartbeats(4)])
    lines = ranks_table(session.model, session.clock.monotonic()).plain.splitlines()
    assert lines[1].startswith("node node0: ranks 0, 2; the viewer's host and clock")
    assert [line.split()[0] for line in lines[2:4]] == ["0", "2"]
    assert lines[4].startswith("node node-b: ranks 1, 3; clock offset unknown")
    assert [line.split()[0] for line in lines[5:7]] == ["1", "3"]
    pt = ranks_table(session.model, session.clock.monotonic(), lang="pt").plain
    assert "nó node0: ranks 0, 2; o host e o relógio do visualizador" in pt
    assert "nó node-b: ranks 1, 3; diferença de relógio desconhecida" in pt
    one = FakeSession()
    one.feed(heartbeats(4))  # a single node: no node lines
    assert "node node0:" not in ranks_table(one.model, one.clock.monotonic()).plain


def test_an_nccl_operation_says_which_algorithm_nccls_log_reported_or_why_not() -> None:
    from pathlib import Path

    from commviz.knowledge.nccl_log import UNKNOWN_NO_LOG, NcclLog

    session = FakeSession()
    session.feed([dataclasses.replace(m, backend="nccl", device=f"cuda:{m.rank}")
                  if isinstance(m, protocol.Heartbeat) else m
                  for m in scripted_all_reduce(world=2, nbytes=4096)])
    log = NcclLog()
    assert UNKNOWN_NO_LOG in inside(session.model, "en", nccl=log).plain
    assert "fabric  not in NCCL's log (run with NCCL_DEBUG=INFO" in \
        inside(session.model, "en", nccl=log).plain
    assert "algoritmo desconhecido (rode com NCCL_DEBUG=INFO" in \
        inside(session.model, "pt", nccl=log).plain
    for line in (Path(__file__).parent / "data/nccl/two_gpus.log").read_text().splitlines():
        log.feed(line)
    text = inside(session.model, "en", nccl=log).plain
    assert "nccl ring · 2 ranks" in text and "NCCL  algorithm: Tree/LL128 (from NCCL's log)" in text
    assert "fabric  no connection between nodes · intra-node: P2P/CUMEM" in text
    assert "NCCL  algoritmo: Tree/LL128 (do log do NCCL)" in \
        inside(session.model, "pt", nccl=log).plain
    gloo = FakeSession()
    gloo.feed(scripted_all_reduce(world=2, nbytes=4096))
    assert "NCCL" not in inside(gloo.model, "en", nccl=log).plain  # gloo: not NCCL's


@pytest.mark.parametrize("lang", i18n.LANGS)
@sync
async def test_at_80x24_each_log_line_fits_with_its_skew(lang: str) -> None:
    """At 80x24 the log's lines ran past the panel's right edge, cut there without an
    ellipsis: the skew, what shows a straggler, was lost (user trial). A narrow log's lines
    give their times in their own units and leave out the ranks column."""
    from commviz.text import i18n

    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    app = make_app(session, lang=lang)
    async with app.run_test(size=(80, 24)) as pilot:
        await frame(pilot)
        rows = [row for row in panel(app, "#log").splitlines()[1:-1] if row.strip("│ ")]
        assert len(rows) == 3
        skew = i18n.ui("log skew", lang)
        for row in rows:
            assert len(row) == 80 and row.endswith("│")
            assert re.search(rf"#\d .* {skew} +[\d,.]+ (µs|ms|s) *│$", row), row
        await pilot.resize_terminal(160, 48)  # wide again: the same lines, in full
        await pilot.pause()
        rows = [row for row in panel(app, "#log").splitlines()[1:-1] if row.strip("│ ")]
        assert all("0,1,2,3" in row and re.search(rf"{skew} +[\d,.]+ µs *│$", row)
                   for row in rows), rows


@pytest.mark.parametrize("lang", OTHERS)
@pytest.mark.parametrize("width", [70, 74, 78])
def test_a_narrow_log_line_leaves_out_columns_rather_than_the_skew(width: int,
                                                                   lang: str) -> None:
    """The pipeline demo in Portuguese at 120 columns (a log 70 wide): 'defasagem 1,8…'
    (user trial); a transfer's line takes a narrower op column too."""
    from commviz.viewer import plain_text as text

    session = FakeSession()
    session.feed(scripted_all_reduce(world=4) + scripted_send_recv(world=4, steps=1))

    for inst in session.model.recent:
        full = text.instance_line(inst, T0_NS, lang=lang)
        line = text.instance_line(inst, T0_NS, lang=lang, width=width)
        skew = i18n.ui("log skew", lang)
        assert len(full) > 78 and len(line) <= width, line
        assert line.split()[:2] == full.split()[:2] and skew in line
        assert re.search(rf"{skew} +[\d,]+ (µs|ms|s)$", line), line
        if inst.op == "send":  # a transfer keeps its pair
            assert f"{inst.group[0]} -> {inst.group[1]}" in line


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_a_ddp_buckets_log_line_says_so_before_keeping_its_columns(lang: str) -> None:
    """'(pelo DDP)' showed at 220 columns only (user trial): at 120 the columns took it."""
    from commviz.viewer import plain_text as text

    session = FakeSession()
    session.feed(scripted_all_reduce(world=2, steps=1))
    (inst,) = session.model.recent
    bucket = dataclasses.replace(inst, ddp=True)
    for width in (70, 74, 78):
        line = text.instance_line(bucket, T0_NS, lang=lang, width=width)
        assert len(line) <= width and line.endswith(("DDP)", "  DDP")), line
        assert re.search(rf"{i18n.ui('log skew', lang)} +[\d,.]+ µs  ", line), line


@pytest.mark.parametrize("width", [92, 74])
@pytest.mark.parametrize("lang", i18n.LANGS)
def test_an_inner_ops_log_line_keeps_the_columns_of_the_others(width: int, lang: str) -> None:
    """The objects demo: the lines of the ops inside scatter_object_list lost their ranks
    column to their "(in scatter_object_list)" and every column after it shifted (user
    trial)."""
    from commviz.viewer import plain_text as text

    session = FakeSession()
    session.feed(scripted_collective("scatter_object_list", world=4, peer=0, steps=1)
                 + scripted_collective("scatter", world=4, peer=0, steps=1, first=1))
    outer, inner = session.model.recent
    inner = dataclasses.replace(inner, parent="scatter_object_list")
    lines = [text.instance_line(inst, T0_NS, lang=lang, width=width) for inst in (outer, inner)]
    # the note in the room left, its parenthesis closed, or left out (the panel's edge cut
    # it anywhere: "(in batch…", user trial)
    note = lines[1][len(lines[0]):]
    opening = "  " + i18n.ui("in parent", lang).format("")[:-1]  # "  (in "
    assert len(lines[1]) <= width, lines[1]
    assert note == "" or (note.startswith(opening + "sca") and note.endswith(")")), note
    wide = text.instance_line(inner, T0_NS, lang=lang, width=200)
    assert wide.endswith(i18n.ui("in parent", lang).format("scatter_object_list"))
    for column in ("#", i18n.ui("time", lang), i18n.ui("log skew", lang)):
        assert lines[0].index(column) == lines[1].index(column), lines
    assert ("0,1,2,3" in lines[0]) == ("0,1,2,3" in lines[1])  # the same columns


@pytest.mark.parametrize("lang", i18n.LANGS)
@sync
async def test_at_80x24_a_gpus_load_is_cut_with_an_ellipsis_not_at_the_panels_edge(
        lang: str) -> None:
    """At 80x24 a GPU's load ran past the ranks panel's edge, its power left as '412'
    without its unit (user trial): the panel's last column is cut to fit, with an ellipsis,
    and the byte counts, which do not fit at all, are left out."""
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    for _ in range(6):
        session.feed([gpu_heartbeat(r, 4) for r in range(4)])
    app = make_app(session, lang=lang)
    async with app.run_test(size=(80, 24)) as pilot:
        await frame(pilot)
        await frame(pilot)
        for rank in range(4):
            row = rank_row(app, rank)
            assert len(row) == 80 and row.rstrip("│ ").endswith("…") and "GPU  87%" in row, row
        await pilot.resize_terminal(160, 48)
        await frame(pilot)
        bytes_ = "3.0M/3.0M" if lang == "en" else "3,0M/3,0M"
        assert all(bytes_ in rank_row(app, rank) for rank in range(4))


STRAGGLER_TEXT = ("rank 3 arrived last at all_reduce in group 0-3 5 times in a row, on average "
                  "198 ms after the others, who waited 2.98 s for it")


def _straggler(session: FakeSession) -> None:
    """The straggler demo's finding, as long as it was there (user trial), on ranks 0-3."""
    from commviz.viewer.diagnose import Finding

    finding = Finding("straggler", (3,), (0, 1, 2, 3), 5, Words(STRAGGLER_TEXT, STRAGGLER_TEXT),
                      ("straggler", 0), 0.0, 0)
    session.diagnosis = FakeDiagnosis([finding])


@pytest.mark.parametrize("lang", i18n.LANGS)
@sync
async def test_a_finding_leaves_the_buffers_grid_whole_at_160x48(lang: str) -> None:
    """With the straggler demo's finding on screen, the buffers grid of the replayed
    all_reduce was squeezed to its 'start' row (user trial): the findings panel keeps a
    bounded height, scrolls, and every step of the grid stays in view."""
    session = FakeSession()
    session.feed(heartbeats(4) + scripted_all_reduce(world=4))
    _straggler(session)
    app = make_app(session, lang=lang)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        await pilot.pause()
        findings = app.query_one("#findings")
        assert findings.display and "⚠" in panel(app, "#findings-text")
        grid = panel(app, "#inside")
        for step in ("RS0", "RS1", "RS2", "AG0", "AG1", "AG2"):
            assert re.search(rf"{step} .* (\d{{4}} ){{3}}\d{{4}}", grid), (step, grid)
        assert findings.max_scroll_y > 0  # the rest of the advice: a scroll away
        explanation = panel(app, "#explain").splitlines()
        assert len(explanation) >= 4 and explanation[1].strip("│ ")  # still says something


def _crashed(session: FakeSession) -> None:
    """The crash demo's findings (user trial): two failed operations and a deadlock."""
    from commviz.viewer.diagnose import Finding

    said = [("hang", "deadlock: rank 0 waits on 1 waits on 0",
             "deadlock: o rank 0 espera o 1, que espera o 0"),
            ("failed", "rank 0 failed in all_reduce #3 in group 0,1 after 6.0 s: rank 1 never "
             "came (1: exited)", "o rank 0 falhou em all_reduce #3 no grupo 0,1 após 6.0 s: o "
             "rank 1 nunca veio (1: saiu)"),
            ("failed", "recv at 1 from 0 #1 failed after 6.0 s waiting for its send: rank 0 "
             "never posted it (exited)", "recv em 1 de 0 #1 falhou após 6.0 s esperando o "
             "send: o rank 0 nunca o postou (saiu)")]
    live = [Finding(kind, (0, 1), (0, 1), 1, Words(en, pt),
                    ("deadlock", (0, 1)) if i == 0 else (kind, i), 0.0, 0)
            for i, (kind, en, pt) in enumerate(said)]
    session.diagnosis = FakeDiagnosis(live)


def _words(panel_text: str) -> str:
    """A panel's text, its wrapped lines joined."""
    return " ".join(panel_text.split())


def _on_screen(app: CommvizApp, selector: str) -> str:
    """What a scrolling panel shows of its text now, inside its border."""
    region = app.query_one(selector).scrollable_content_region  # no scrollbar
    lines = screen_text(app).splitlines()[region.y:region.bottom]
    return "\n".join(line[region.x:region.right] for line in lines)


@pytest.mark.parametrize("lang", i18n.LANGS)
@pytest.mark.parametrize("size", [SIZE, (80, 24)])
@sync
async def test_the_findings_panel_shows_what_to_check_whole_and_scrolls_to_the_rest(
        lang: str, size: tuple[int, int]) -> None:
    """The crash demo at 160x48: 'Check:' stopped at '…a timeout at one that went another
    way (a collective inside an', and no key scrolled the panel (user trial). The newest
    finding and what to check for it show whole, the panel grown to them; the rest (the
    other findings, what it means) is below: ↓ scrolls to it once the panel has the focus
    (tab), as its subtitle says."""
    from commviz.viewer.findings_text import advice

    session = FakeSession()
    session.feed(heartbeats(4) + scripted_all_reduce(world=4))
    _crashed(session)
    title, means, check = advice("hang", lang)  # the deadlock leads: it explains the others
    app = make_app(session, lang=lang)
    async with app.run_test(size=size) as pilot:
        await frame(pilot)
        await pilot.pause()
        await frame(pilot)
        await pilot.pause()
        shown = _on_screen(app, "#findings")
        assert f"{i18n.ui('check', lang)}: {check}" in _words(shown), shown
        assert means.split()[-1] not in _words(shown)
        findings = app.query_one("#findings")
        for _ in range(2):  # the focus goes round the panels that scroll
            more = "findings more here" if findings.has_focus else "findings more"
            assert findings.border_subtitle == i18n.ui(more, lang)
            if findings.has_focus:
                break
            await pilot.press("tab")
            await frame(pilot)
        await pilot.press("down", "end")
        await pilot.wait_for_scheduled_animations()
        assert means.split()[-1] in _words(_on_screen(app, "#findings"))
        if size == SIZE:  # the buffers grid keeps every step beside it
            grid = panel(app, "#inside")
            assert all(step in grid for step in ("RS0", "RS2", "AG0", "AG2")), grid
        else:  # the ranks it blames keep their rows
            assert all(rank_row(app, r) for r in range(4))


@sync
async def test_at_80x24_the_inside_view_gives_the_grid_the_screen_even_with_a_finding() -> None:
    """The findings panel stayed on the narrow 'inside' view, which hides it, and cut the
    grid at its third step (user trial, the straggler demo): the view shows the grid whole."""
    session = FakeSession()
    session.feed(heartbeats(4) + scripted_all_reduce(world=4))
    _straggler(session)
    app = make_app(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await frame(pilot)
        await pilot.pause()
        assert app.query_one("#findings").display
        await pilot.press("v", "v")  # numbers -> replay -> inside
        await frame(pilot)
        await pilot.pause()
        assert not app.query_one("#findings").display
        grid = panel(app, "#inside")
        for step in ("RS0", "RS1", "RS2", "AG0", "AG1", "AG2"):
            assert re.search(rf"{step} .* (\d{{4}} ){{3}}\d{{4}}", grid), (step, grid)
        await pilot.press("v", "v")  # explain -> numbers: the finding is back
        await pilot.pause()
        assert app.query_one("#findings").display


@pytest.mark.parametrize("lang", ["en", "pt"])
@sync
async def test_before_the_first_step_the_explanation_says_what_comes_and_which_key_runs_it(
        lang: str) -> None:
    """`commviz demo all_gather --paused`: the explanation panel was blank until the first
    operation was done (user trial). It says which key steps or plays, and what the demo's
    operation is about to do; then the operation's own explanation takes over."""
    from commviz.text import explain, i18n

    ui = functools.partial(i18n.ui, lang=lang)
    session = FakeSession()
    session.feed(heartbeats(4))
    controller = FakeController()  # paused, as --paused starts
    app = CommvizApp(session, None, "t", lang=lang, controller=controller, demo="all_gather",
                     clock=session.clock, wall_ns=session.clock.wall_ns)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        shown = " ".join(panel(app, "#explain").replace("│", " ").split())
        ex = explain.explain("all_gather", lang)
        assert ui("before paused") in shown and ex.title in shown, shown
        assert ui("next op").format(op="all_gather") in shown
        assert f"{ui('how')} (gloo)" in shown and "(nccl)" not in shown  # the ranks' backend
        await pilot.press("space")  # plays: the line says so
        session.clock.advance(1)
        await frame(pilot)
        shown = " ".join(panel(app, "#explain").replace("│", " ").split())
        assert ui("before playing") in shown and ui("before paused") not in shown
        session.feed(scripted_all_gather(world=4))
        session.clock.advance(1)
        await frame(pilot)
        shown = " ".join(panel(app, "#explain").replace("│", " ").split())
        assert ui("before playing") not in shown and shown.count(ex.title) == 1


@sync
async def test_a_demo_not_named_after_an_operation_says_its_first_one_is_explained_later() -> None:
    session = FakeSession()
    app = CommvizApp(session, None, "t", lang="en", controller=FakeController(),
                     demo="straggler", clock=session.clock, wall_ns=session.clock.wall_ns)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        shown = " ".join(panel(app, "#explain").replace("│", " ").split())
        assert "Paused before iteration 1: n runs one iteration, space plays." in shown
        assert "The straggler demo: its first operation is explained here" in shown


@sync
async def test_watching_a_job_the_explanation_waits_for_its_first_operation() -> None:
    app = make_app(FakeSession())
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "Waiting for peers" in panel(app, "#explain")


@sync
async def test_a_long_source_line_is_cut_with_an_ellipsis_not_wrapped(tmp_path) -> None:
    """At 160x48 the straggler demo's long lines wrapped onto lines without a number, which
    read as lines of their own (user trial): each is cut at the panel's edge instead."""
    program = tmp_path / "train.py"
    program.write_text("".join(f"line_{i} = {i}  # {'x' * 120}\n" for i in range(1, 31)))
    session = FakeSession()
    session.feed([dataclasses.replace(m, sites={0: (str(program), 12)})
                  if isinstance(m, protocol.OpBatch) else m for m in scripted_all_reduce(world=4)])
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        rows = panel(app, "#source").splitlines()[2:-1]
        assert [row.split()[1] for row in rows] == [str(n) for n in range(8, 17)], rows
        assert all(row.rstrip("│ ").endswith("…") for row in rows)


def test_a_panel_whose_lines_wrap_otherwise_is_laid_out_again() -> None:
    """The phases panel takes its text's height: a new operation's text with as many lines
    as the last one's, but longer ones that wrap, kept the old height and lost the grid's
    last rows (seen on the 'all' demo)."""
    from rich.text import Text

    key = app_module._height_key
    assert key(Text("a\nb")) != key(Text("a\n" + "b" * 200))
    assert key(Text("a\nbc")) == key(Text("x\nyz"))  # the same shape: no new layout


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_the_findings_printed_at_exit_lead_with_their_cause(lang: str) -> None:
    """At exit the deadlock was printed after the failures it ended in (oldest first), while
    the findings panel had led with it."""
    from commviz.tui.app import _print_findings
    from commviz.viewer.diagnose import Finding

    failed = Finding("failed", (0,), (0, 1), 3, Words("rank 0 failed in all_reduce #3",
                                                      "o rank 0 falhou em all_reduce #3"),
                     ("failed", 3), 1.0, 0)
    deadlock = Finding("hang", (0, 1), (0, 1), 3, Words("deadlock: rank 0 waits on 1",
                                                        "deadlock: o rank 0 espera o 1"),
                       ("deadlock", (0, 1)), 2.0, 0)
    out = io.StringIO()
    _print_findings([failed, deadlock], out, lang)
    assert out.getvalue().splitlines() == [f"!! hang: {deadlock.text(lang)}",
                                           f"!! failed: {failed.text(lang)}"]


@pytest.mark.parametrize("lang, head", [
    ("en", "4 isends drawn as one round, each measured:"),
    ("pt", "4 isend desenhados como uma rodada, cada um medido:")])
def test_the_inside_panel_lists_every_transfer_of_a_round(lang: str, head: str) -> None:
    """A ring's round was drawn whole in the replay while the inside panel named only its
    first pair (user trial)."""
    from commviz.tui.animation import AnimFrame
    from commviz.viewer.model import Instance

    took_ns = (95_700, 999_000, 2_624_000, 1_200_000_000)
    members = tuple(Instance("isend", (src, (src + 1) % 4), 9, 248, 0, 1000, 1000 + took_ns[src],
                             "float32", None, None) for src in range(4))
    frame = AnimFrame(members[0], None, 1, 0, 1, "", 0.5, "", (), False, True, members)
    lines = inside(FakeSession().model, lang, frame=frame).plain.splitlines()
    # in the unit that suits, as everywhere else on screen (it read "2624.0 µs" beside the
    # replay's "took 2.62 ms")
    took = {"en": ["95.7 µs", "999 µs", "2.62 ms", "1.2 s"],
            "pt": ["95,7 µs", "999 µs", "2,62 ms", "1,2 s"]}[lang]
    assert lines == [head] + [f"  rank {s} → rank {(s + 1) % 4}  #9  248 B  {took[s]}"
                              for s in range(4)]


@pytest.mark.parametrize("n, seq, line", [
    (4, 9, "the demo's ring, round 3 of 6: reduce-scatter 3 of 3, each rank adds the chunk it "
           "receives into its own copy of it"),
    (4, 60, "the demo's ring, round 6 of 6: all-gather 3 of 3, each rank copies the finished "
            "chunk it receives"),
    (4, 10, "the demo's ring, round 4 of 6: all-gather 1 of 3, each rank copies the finished "
            "chunk it receives"),
    (2, 3, "the demo's ring, round 1 of 2: reduce-scatter 1 of 1, each rank adds the chunk it "
           "receives into its own copy of it")])
def test_a_round_of_the_ring_allreduce_demo_says_which_step_of_its_ring(
        n: int, seq: int, line: str) -> None:
    """The demo that writes all_reduce by hand showed '8 isends in one round (#36)': nothing
    of the reduce-scatter and all-gather its docstring teaches (user trial). Each iteration
    is 2(n-1) rounds of one isend per rank to its right."""
    from commviz.tui.animation import AnimFrame
    from commviz.viewer.model import Instance

    members = tuple(Instance("isend", (src, (src + 1) % n), seq, 256, 0, 1000, 2000, "float32",
                             None, None) for src in range(n))
    frame = AnimFrame(members[0], None, 1, 0, 1, "", 0.5, "", (), False, True, members)
    model = FakeSession().model
    lines = inside(model, "en", frame=frame, demo="ring_allreduce").plain.splitlines()
    assert lines[0] == line and lines[1].startswith(f"{n} isends drawn as one round")
    pt = inside(model, "pt", frame=frame, demo="ring_allreduce").plain.splitlines()
    assert pt[0].startswith(f"o anel da demo, rodada {(seq - 1) % (2 * n - 2) + 1} de ")
    # another demo's round, or a round that is not a ring to the right: no such line
    assert inside(model, "en", frame=frame).plain.splitlines()[0] == lines[1]
    back = tuple(Instance("isend", (src, (src - 1) % n), seq, 256, 0, 1000, 2000, "float32",
                          None, None) for src in range(n))
    if n > 2:
        other = AnimFrame(back[0], None, 1, 0, 1, "", 0.5, "", (), False, True, back)
        assert "ring" not in inside(model, "en", frame=other, demo="ring_allreduce").plain
    # and the explanation says what the demo's ring does before what an isend is
    explained = explanation(model, members[0], "pt", "ring_allreduce").plain
    assert explained.startswith("ring_allreduce (esta demo): all_reduce escrito à mão\n")
    assert "reduce-scatter" in explained and "isend: " in explained
    assert "esta demo" not in explanation(model, members[0], "pt").plain


@pytest.mark.parametrize("size, crowded", [((120, 40), True), ((160, 48), False)])
@sync
async def test_beside_a_long_finding_the_grid_gives_way_to_the_viewer_panel(
        size: tuple[int, int], crowded: bool) -> None:
    """The hang demo at 120x40: the finding's panel took half the height, the grid kept
    its least rows, and the viewer panel below ("The demo has ended · r: Restart · q: Quit")
    went off the screen (user trial)."""
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    long = "deadlock, until a timeout ended it after 6.0 s: " + "rank 0 waited on 3; " * 20
    live = [Finding("failed", (0, 3), (0, 1, 2, 3), 3, Words(long, long), ("hang", 0, 3), 0.0, 0)]
    session.diagnosis = FakeDiagnosis(live)
    app = make_app(session)
    async with app.run_test(size=size) as pilot:
        for _ in range(3):  # the findings panel's height, then the grid's room, then its fit
            await frame(pilot)
        status = app.query_one("#status")
        assert status.region.height > 0 and status.region.bottom <= app.size.height - 1
        assert panel(app, "#status").splitlines()[-1].startswith("╰")
        assert app.screen.has_class("-crowded") is crowded
        assert (app.query_one("#inside").region.height == 0) is crowded


@pytest.mark.parametrize("size", [(160, 48), (120, 40)])
@sync
async def test_a_failed_ranks_toast_lies_over_the_source_not_the_viewer_panel(
        size: tuple[int, int]) -> None:
    from textual.widgets._toast import Toast

    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    ranks = FakeRanks()
    app = make_app(session, ranks)
    async with app.run_test(size=size, notifications=True) as pilot:
        await frame(pilot)
        ranks.end(2, 1, GLHF)
        await frame(pilot)
        await pilot.pause(0.2)
        (toast,) = app.screen.query(Toast)
        assert toast.region.width > 0
        assert toast.region.right <= app.query_one("#right").region.x, toast.region


@sync
async def test_the_source_panel_keeps_the_calls_line_on_screen_beside_a_jobs_output(
        tmp_path) -> None:
    """commviz run at 160x48: the job's output panel pushed the source panel's lines, the
    call's among them, below the screen (user trial); it shows fewer lines around the call."""
    from commviz.launch.job import OutputBuffer

    program = tmp_path / "train.py"
    program.write_text("".join(f"line_{i} = {i}\n" for i in range(1, 31)))
    session = FakeSession()
    session.feed([dataclasses.replace(m, sites={0: (str(program), 12)})
                  if isinstance(m, protocol.OpBatch) else m for m in scripted_all_reduce(world=4)])
    app = CommvizApp(session, FakeRanks(world=4), "run", output=OutputBuffer(),
                     clock=session.clock, wall_ns=session.clock.wall_ns)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(2):  # the layout, then the source in what it leaves
            await frame(pilot)
            session.clock.advance(1.0)  # the teaching panels are redrawn on a slow tick
        source = app.query_one("#source")
        assert source.region.bottom <= app.size.height - 1  # above the footer
        rows = panel(app, "#source").splitlines()
        assert rows[-1].startswith("╰") and "train.py:12  all_reduce" in rows[1]
        numbers = [int(row.split()[1]) for row in rows[2:-1]]
        assert 12 in numbers and numbers == list(range(numbers[0], numbers[-1] + 1))
        assert len(numbers) < 2 * SOURCE_CONTEXT + 1  # fewer than a demo's


@pytest.mark.parametrize("lang, measured", [("en", "Measured  1.24 ms"),
                                            ("pt", "Medido  1,24 ms")])
def test_a_transfers_measured_time_reads_in_the_unit_that_suits(lang: str, measured: str) -> None:
    """The inside panel gave a pipeline's send as "1242.2 µs" where the replay above it read
    "took 1.24 ms" (teacher's trial)."""
    session = FakeSession()
    session.feed([m for m in scripted_send_recv(world=2, steps=1)
                  if not isinstance(m, protocol.Heartbeat)])
    inst = session.model.recent[-1]
    inst = dataclasses.replace(inst, t_end=inst.t_last_start + 1_242_200)
    frame = type("F", (), {"instance": inst, "step": 0, "round": False})()
    assert inside(session.model, lang, frame).plain.splitlines()[1] == measured


@pytest.mark.parametrize("lang, op, state", [
    ("en", "reduce_scatter_tensor", "done reduce_sca…tensor"),
    ("pt", "scatter_object_list", "concluiu scatter_…list"),
    ("en", "all_reduce", "done all_reduce")])
def test_an_idle_ranks_long_op_is_shortened_in_its_middle(lang: str, op: str,
                                                           state: str) -> None:
    """A rank done with a long op read "done…", which named no op (teacher's trial of
    reduce_scatter_tensor and objects)."""
    session = FakeSession()
    session.feed(scripted_collective(op, world=2, steps=1))
    row = ranks_table(session.model, session.clock.monotonic(), lang=lang,
                             width=94).plain.splitlines()[1]
    assert f" {state} " in row and "…" not in row.replace(state, "")


@pytest.mark.parametrize("lang, legend", [
    ("en", "Buffers: digit = the rank the block came from, · = not yet"),
    ("pt", "Buffers: dígito = rank que enviou o bloco, · = ainda não")])
def test_an_all_to_all_grid_shows_each_ranks_received_blocks_by_sender(lang: str,
                                                                       legend: str) -> None:
    """Each rank's column held all n x n chunks, mostly dots: at 160 columns rank 3 of 4 was
    left out (teacher's trial). Now a rank's column is its n received blocks, each digit the
    rank it came from."""
    lines = _phases_lines("all_to_all", 4, lang, GRID_MAX_W)
    grid = lines[lines.index(legend) + 1:]
    assert grid[0].split() == ["r0", "r1", "r2", "r3"]
    assert [row.split()[-4:] for row in grid[1:5]] == [
        ["0···", "·1··", "··2·", "···3"],
        ["0··3", "01··", "·12·", "··23"],
        ["0·23", "01·3", "012·", "·123"],
        ["0123", "0123", "0123", "0123"]]
    assert "r3" not in "".join(grid[5:])  # no rank left out


def test_a_list_form_reduce_scatters_grid_shows_on_each_row_the_parts_of_its_block() -> None:
    """gloo's list-form reduce_scatter gave each rank n x n chunks: at 160 columns rank 3
    of 4 was left out (teacher's trial). A row now shows the n parts of the block its step
    reduces, each digit how many ranks are summed into it."""
    lines = _phases_lines("reduce_scatter", 4, "en", GRID_MAX_W)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("Buffers"))
    assert lines[at] == "Buffers: digit = ranks summed into each part of the row's block, " \
        "· = not held"
    grid = lines[at + 1:]
    head = next(i for i, ln in enumerate(grid) if ln.split()[:1] == ["r0"])
    assert grid[head].split() == ["r0", "r1", "r2", "r3"]
    rows = {ln.split()[0] + " " + ln.split()[1]: ln.split()[-4:] for ln in grid[head + 1:]
            if ln.split()[:1] and ln.split()[0].startswith("b")}
    # block 3's ring all_reduce: its first reduce-scatter step; at its end each part is the sum
    assert rows["b3 RS0"] == ["1121", "1112", "2111", "1211"]
    assert rows["b3 AG2"] == ["4444", "4444", "4444", "4444"]
    assert "r3" not in "".join(grid[head + 1:])  # no rank left out


SOURCE_W_AT_160 = 94  # the source panel's inner width at 160 columns (3/5 of it, less borders)


def test_the_lines_a_demos_source_panel_shows_fit_it_at_160_columns() -> None:
    """A teacher at 160x48 read "# outbox[j] goes to rank j; inbox[i] comes from …" and
    "f"input of stage {rank}, iteration {iteratio…": a demo's lines around each
    communication call are shown whole."""
    import commviz.demos

    from commviz.viewer.model import Instance

    too_long = []
    for path in sorted(Path(commviz.demos.__file__).parent.glob("*.py")):
        code = path.read_text().splitlines()
        for number, line in enumerate(code, 1):
            if re.search(r"\bdist\.(?!get_)\w+\(", line):
                site = Instance("all_reduce", (0, 1), 1, 4, 0, 0, 1, "float32", None,
                                site=(str(path), number))
                too_long += [f"{path.name}: {shown}"
                             for shown in source(site, "en").plain.splitlines()
                             if len(shown) > SOURCE_W_AT_160]
    assert not too_long, "\n".join(too_long)


@sync
async def test_the_explanation_turns_with_the_replay_to_an_op_of_one_step() -> None:
    """The objects demo: the replay drew scatter (one step, 0.3 s) while the explanation,
    redrawn at most twice a second, still explained the broadcast before it (teacher's
    trial). The explanation and source turn with the replay."""
    session = FakeSession()
    session.feed(scripted_collective("scatter", world=4, steps=1, peer=0)
                 + scripted_collective("gather", world=4, steps=1, peer=0, first=1))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "scatter:" in panel(app, "#explain") and "scatter" in panel(app, "#inside")
        assert app_module.REPLAY_STEP_S + 0.05 < app_module.SLOW_FRAME_S
        session.clock.advance(app_module.REPLAY_STEP_S + 0.05)
        for _ in range(3):
            await frame(pilot)
        assert "gather to rank 0" in panel(app, "#inside")  # the replay has turned
        explanation = panel(app, "#explain")
        assert "gather:" in explanation and "scatter:" not in explanation


@pytest.mark.parametrize("size, world, tight", [((120, 40), 8, True), ((160, 48), 18, True),
                                                ((160, 48), 4, False)])
@sync
async def test_with_many_ranks_the_log_then_the_timeline_give_way_to_the_replay_and_source(
        size: tuple[int, int], world: int, tight: bool, tmp_path) -> None:
    """8 ranks at 120x40, 18 at 160x48: the left column needed more rows than the screen
    has, the replay kept two rows and the source panel went off the bottom (user trial)."""
    program = tmp_path / "train.py"
    program.write_text("".join(f"line_{i} = {i}\n" for i in range(1, 31)))
    session = FakeSession()
    session.feed([dataclasses.replace(m, sites={0: (str(program), 12)})
                  if isinstance(m, protocol.OpBatch) else m
                  for m in scripted_all_reduce(world=world)])
    app = make_app(session)
    async with app.run_test(size=size) as pilot:
        for _ in range(3):  # the layout, then the panels fitted to it
            await frame(pilot)
            session.clock.advance(1.0)
        assert app.screen.has_class("-tight") is tight
        assert (app.query_one("#log").region.height == 0) is tight  # the log gives way first
        assert app.query_one("#topology").region.height >= 12
        source = panel(app, "#source").splitlines()
        assert source[-1].startswith("╰") and "  12 line_12 = 12" in "\n".join(source)
        assert app.query_one("#source").region.bottom <= app.size.height - 1
        ranks = panel(app, "#ranks")
        assert all(re.search(rf"^│\s+{r} node0", ranks, re.M) for r in range(world)), ranks
        timeline = panel(app, "#timeline").splitlines()
        assert timeline[-2].rstrip("│ ").endswith("now")  # its axis, whatever it leaves out
        shown = [r for r in range(world) if any(row.startswith(f"│r{r} ") or
                                                row.startswith(f"│ r{r} ") for row in timeline)]
        assert shown == list(range(world)) or "not shown (a taller terminal shows them)" in \
            "".join(timeline)


@pytest.mark.parametrize("size, lang, key", [((120, 40), "pt", "replay short"),
                                             ((120, 40), "en", "replay"),
                                             ((160, 48), "pt", "replay"),
                                             ((120, 40), "es", "replay short"),
                                             ((160, 48), "es", "replay")])
@sync
async def test_the_replays_title_takes_its_shorter_form_where_the_whole_would_be_cut(
        size: tuple[int, int], lang: str, key: str) -> None:
    """At 120 columns the Portuguese title read "… (passos internos es…" (user trial)."""
    app = make_app(FakeSession(), lang=lang)
    async with app.run_test(size=size) as pilot:
        await frame(pilot)
        title = app.query_one("#topology").border_title
        assert title == i18n.ui(key, lang)
        assert f"╭─ {title} ─" in panel(app, "#topology")  # whole, not cut


# ---- commviz play: a recording played back --------------------------------------------

def _played(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, about: dict | None = None,
            paused: bool = True) -> tuple[FakeClock, Playback, PlaybackControl, CommvizApp]:
    """Four ranks' three all_gathers recorded, then goodbyes; the app plays the recording
    back, on one FakeClock for the replay and the recording's clock (no collector thread:
    the test takes what is due with ``advance``). The recording is p.jsonl in ``tmp_path``,
    the current directory."""
    monkeypatch.chdir(tmp_path)
    path = Path("p.jsonl")
    rec = recording.Recorder(path, about)
    rec.write([*scripted_all_gather(world=4, steps=3),
               *(bye(r, T0_NS + 5 * STEP_NS) for r in range(4))])
    rec.close({"t_ns": T0_NS + 5 * STEP_NS})  # closed with the last goodbye
    real = FakeClock()
    playback, app = _play_app(path, real, paused)
    return real, playback, app.controller, app


def _play_app(path: str | Path, real: FakeClock, paused: bool = False
              ) -> tuple[Playback, CommvizApp]:
    """The app commviz play makes of the recording at ``path``, on the FakeClock ``real``."""
    playback = Playback(path, real=real)
    control = PlaybackControl(playback, paused=paused, each_op=playback.demo is not None)
    return playback, CommvizApp(playback, None, f"play {path}", clock=real,
                                wall_ns=playback.clock.wall_ns, controller=control,
                                restart=lambda: None, demo=playback.demo)


@pytest.mark.integration  # a live session binds its socket
def test_a_session_a_playback_and_the_fake_offer_what_the_views_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from commviz.viewer.session import Session
    from commviz.viewer.source import Source

    _, playback, _, _ = _played(tmp_path, monkeypatch)
    live = Session("tcp://127.0.0.1:*")
    try:
        assert all(isinstance(s, Source) for s in (live, playback, FakeSession()))
        assert not isinstance(object(), Source)
        assert playback.recorder is None and live.nccl is not None
    finally:
        live.close()


@sync
async def test_a_recording_played_back_steps_pauses_changes_speed_and_starts_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, playback, control, app = _played(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        status = panel(app, "#status")
        assert "playing back p.jsonl" in status
        assert "⏸ Paused · 0.0 of 0.0 s · n: Next operation" in status, status
        assert "waiting for ranks" not in status  # they come at their time
        assert app._binding("step").description == "Next operation"
        await pilot.press("n")
        await frame(pilot)
        assert playback.model.instances == 1
        assert "#0" in panel(app, "#log") and "#1" not in panel(app, "#log")
        await pilot.press("space")
        real.advance(1.0)
        playback.advance()
        await frame(pilot)
        assert playback.model.instances == 3 and control.ended
        status = panel(app, "#status")
        assert "■ End of the recording · 0.0 of 0.0 s · r: Restart" in status, status
        await pilot.press("r")
        await frame(pilot)
        assert playback.model.instances == 0 and not control.ended
        await pilot.press("left_square_bracket")
        await frame(pilot)
        assert "▶ Playing ×1/2 ·" in _flat(panel(app, "#status"))
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        await frame(pilot)
        assert playback.clock.speed == 4.0
        assert "▶ Playing ×4 · 0.0 of 0.0 s · space: Pause · ]/[: speed" in \
            panel(app, "#status").replace("\n│", "").replace("│", "")


@sync
async def test_a_demos_recording_waits_for_the_replay_of_each_operation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, playback, control, app = _played(tmp_path, monkeypatch, {"demo": "all_gather"},
                                           paused=False)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "Playing the recording: space pauses, then n plays one" in \
            panel(app, "#explain")
        real.advance(1.0)
        playback.advance()
        await frame(pilot)  # the replay takes the first all_gather: the recording waits
        assert playback.model.instances == 1 and control.state.held
        real.advance(0.5)
        playback.advance()
        await frame(pilot)
        assert playback.model.instances == 1
        assert "the playback waits for the replay" in \
            panel(app, "#status").replace("\n│", " ").replace("│", "")
        real.advance(60.0)  # the replay is done with it: the recording's clock goes on
        await frame(pilot)
        assert not control.state.held
        real.advance(0.01)
        playback.advance()
        assert playback.model.instances == 2


@sync
async def test_playback_keys_are_in_the_help_of_a_playback_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    *_, app = _played(tmp_path, monkeypatch)
    live = CommvizApp(FakeSession(), None, "t", lang="en", controller=FakeController())
    for each, expected in ((app, True), (live, False)):
        async with each.run_test(size=SIZE):
            rows = dict(each._help_rows())
            assert ("] / [" in rows) is expected and ("f" in rows) is expected, rows
            if expected:
                assert rows["] / ["].startswith("Faster playback / Slower playback")
                assert rows["n"] == "Next operation"
                assert rows["p"] == "Hold replay (the recording plays on)"
            else:
                assert rows["p"] == "Hold replay (the job keeps running)"


@sync
async def test_a_recording_played_back_lists_how_the_ranks_processes_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, *_ = _played(tmp_path, monkeypatch)
    text = Path("p.jsonl").read_text().splitlines(keepends=True)
    failed = {"kind": "event", "t_ns": T0_NS + 4 * STEP_NS, "key": "rank failed",
              "fields": {"who": "rank 3", "code": -9, "line": "killed by SIGKILL"}}
    Path("p.jsonl").write_text("".join(text[:-1]) + json.dumps(failed) + "\n" + text[-1])
    playback, app = _play_app("p.jsonl", real)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "rank 3 failed" not in panel(app, "#status")
        real.advance(1.0)
        playback.advance()
        await frame(pilot)
        assert "rank 3 failed (exit -9): killed by SIGKILL" in panel(app, "#status")


@pytest.mark.integration
def test_snapshot_of_a_recording_played_back(snap_compare, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    real, playback, control, app = _played(tmp_path, monkeypatch)

    async def two_ops(pilot: Pilot) -> None:
        control.step()
        control.step()
        await frame(pilot)

    assert snap_compare(app, terminal_size=(160, 48), run_before=two_ops)


def test_a_screen_that_failed_is_no_success(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyError in a frame: Textual printed its traceback, and commviz exited 0."""
    monkeypatch.setattr(CommvizApp, "run", lambda self: setattr(self, "_return_code", 1))
    session = FakeSession()
    assert app_module.run_app(session, None, "t", "en", out=io.StringIO()) == 1
    assert session.closed
    monkeypatch.setattr(CommvizApp, "run", lambda self: None)
    assert app_module.run_app(FakeSession(), None, "t", "en", out=io.StringIO()) == 0


@sync
async def test_a_recording_played_back_on_a_narrow_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """80x24 and Portuguese: the footer's short words for n (there was none: KeyError)."""
    real, playback, control, app = _played(tmp_path, monkeypatch)
    app.lang = "pt"
    async with app.run_test(size=(80, 24)) as pilot:
        await frame(pilot)
        assert app._binding("step").description == "Próxima"
        await pilot.press("n")
        await frame(pilot)
        assert playback.model.instances == 1
        app.lang = "en"
        app._titles()
        assert app._binding("step").description == "Next"


@sync
async def test_a_playback_started_further_on_replays_only_the_latest_operation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--from: the operations before it were replayed one by one for seconds; then they
    were left out of the log too, and its times counted from the first one logged."""
    real, playback, control, app = _played(tmp_path, monkeypatch)
    playback.seek(playback.duration_s)
    assert playback.model.instances == 3
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        animator = app.query_one(Topology).animator
        assert animator.enqueued == 1 and not animator.waiting
        times = {next(w for w in line.split() if w.startswith("#")): line.split()[0]
                 for line in log_lines(app)}
        # as a straight play logs them: from the first op's start (ends 250-350 us later)
        assert times == {"#0": "0.000s", "#1": "0.001s", "#2": "0.002s"}, times


@sync
async def test_at_the_end_of_a_recording_pause_and_n_rest_until_it_starts_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Space at the end put '⏸ Paused' in the header beside '■ End of the recording'."""
    real, playback, control, app = _played(tmp_path, monkeypatch, paused=False)
    async with app.run_test(size=SIZE) as pilot:
        real.advance(10.0)
        playback.advance()
        await frame(pilot)
        assert control.ended and not app.check_action("toggle_play", ())
        await pilot.press("space")
        await frame(pilot)
        assert not control.paused and "Paused" not in panel(app, "#header")
        await pilot.press("r")
        await frame(pilot)
        assert app.check_action("toggle_play", ()) and app.check_action("step", ())


@sync
async def test_a_recording_cut_short_says_so_on_the_screen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, *_ = _played(tmp_path, monkeypatch)
    text = Path("p.jsonl").read_text()
    Path("p.jsonl").write_text(text[: text.rindex('{"kind":"bye"') + 20])  # a line cut short
    _, app = _play_app("p.jsonl", real)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "is cut short" in panel(app, "#status").replace("│\n│", " ")
    # cut after a whole line: nothing lost, but no closing line either (its viewer killed)
    Path("p.jsonl").write_text(text[: text.rindex('{"kind":"summary"')])
    _, app = _play_app("p.jsonl", real)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "has no closing line: its viewer did not close it" in \
            _flat(panel(app, "#status"))


@sync
async def test_a_jobs_output_has_a_view_of_its_own_on_a_narrow_terminal() -> None:
    """80x24 beside a job: its output panel had one row, or none, under the ranks and the
    log, and the statistics covered it."""
    from commviz.launch.job import OutputBuffer

    output = OutputBuffer()
    for step in range(12):
        output.append("stdout", f"step {step} loss 2.3")
    session = FakeSession()
    session.feed(scripted_all_reduce(world=2, steps=2))
    app = CommvizApp(session, FakeRanks(world=2), "run", clock=session.clock,
                     wall_ns=session.clock.wall_ns, lang="en", output=output)
    async with app.run_test(size=(80, 24)) as pilot:
        await frame(pilot)
        assert not app.query_one("#output").display  # the numbers' view: ranks, log, numbers
        for _ in range(len(app.NARROW_VIEWS)):
            await pilot.press("v")
        await frame(pilot)
        assert app.query_one("#output").display and not app.query_one("#log").display
        shown = panel(app, "#output")
        assert all(f"step {step} loss 2.3" in shown for step in range(12)), shown
        assert panel(app, "#header").strip().startswith("[Job output · v]")
        await pilot.press("v")  # and round again
        await frame(pilot)
        assert app.query_one("#log").display and not app.query_one("#output").display
    demo = CommvizApp(FakeSession(), FakeRanks(world=2), "t", lang="en")
    assert demo._views == demo.NARROW_VIEWS  # no job, no such view


@sync
async def test_f_sends_a_playback_to_just_before_the_next_finding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, *_ = _played(tmp_path, monkeypatch)
    text = Path("p.jsonl").read_text().splitlines(keepends=True)
    found = {"kind": "diag", "type": "straggler", "ranks": [3], "group": [0, 1, 2, 3],
             "seq": 2, "message": "rank 3 arrived last", "t_ns": T0_NS + 2_002_000_000}
    Path("p.jsonl").write_text("".join(text[:-1]) + json.dumps(found) + "\n" + text[-1])
    playback, app = _play_app("p.jsonl", real, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "f: next finding" in _flat(panel(app, "#status"))
        await pilot.press("f")
        await frame(pilot)
        assert playback.clock.wall_ns() == T0_NS + 2_000_000
        assert playback.model.instances == 2  # taken in at once: only the latest replayed
        assert app.query_one(Topology).animator.enqueued == 1
        await pilot.press("f")  # then to the finding itself
        await frame(pilot)
        assert playback.clock.wall_ns() == T0_NS + 2_002_000_000
        assert "f: next finding" not in _flat(panel(app, "#status"))
        await pilot.press("f")  # none later: said so
        await pilot.pause()
        assert any("no later finding" in str(n.message) for n in app._notifications)


def _flat(text: str) -> str:
    """A panel's words on one line: its borders and line breaks gone."""
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


@sync
async def test_a_playback_started_again_drops_the_findings_panel_of_its_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After `r` an empty Live diagnosis box stayed for ten seconds."""
    monkeypatch.chdir(tmp_path)
    rec = recording.Recorder("lost.jsonl")
    rec.write([*heartbeats(2), bye(0, T0_NS + 1_000_000_000)])
    rec.close({"t_ns": T0_NS + 1_500_000_000, "ended": [0, 1]})  # rank 1: no goodbye
    real = FakeClock()
    playback, app = _play_app("lost.jsonl", real)
    async with app.run_test(size=SIZE) as pilot:
        real.advance(5.0)
        playback.advance()
        await frame(pilot)
        assert app.screen.has_class("-findings")
        assert [f.type for f in playback.diagnosis.findings()] == ["lost_rank"]
        await pilot.press("r")
        await frame(pilot)
        assert not app.screen.has_class("-findings")


@sync
async def test_a_rank_whose_launcher_said_it_was_killed_reads_killed_not_silent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The crash demo: rank 1 read 'silent 14s', still counting after the launcher had said
    it was killed by SIGKILL (live, and played back)."""
    monkeypatch.chdir(tmp_path)
    rec = recording.Recorder("k.jsonl")
    rec.write([*heartbeats(2), bye(0, T0_NS + 3_000_000_000)])
    rec.write_event("rank failed", {"who": "rank 1", "code": -9, "rank": 1,
                                    "line": "killed by SIGKILL, no error written"})
    rec.close({"t_ns": T0_NS + 3_500_000_000, "ended": [0, 1]})
    text = Path("k.jsonl").read_text().splitlines(keepends=True)  # the event, at 1 s
    event = json.loads(text[-2])
    Path("k.jsonl").write_text("".join(text[:-2]) + json.dumps(
        {**event, "t_ns": T0_NS + 1_000_000_000}) + "\n" + text[-1])
    real = FakeClock()
    playback, app = _play_app("k.jsonl", real)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(30):
            real.advance(0.1)
            playback.advance()
        await frame(pilot)
        assert "killed (SIGKILL)" in rank_row(app, 1) and "silent" not in rank_row(app, 1)
    # the replay's ring says so too, under no finding
    from commviz.tui.topology import rank_states

    session = FakeSession()
    session.feed(heartbeats(2))
    session.model.process_ended(1, -9)
    session.model.process_ended(7, 1)  # never heard from: unknown, nothing to say
    assert {r: t.plain for r, t in rank_states(session.model).items()} == \
        {0: "idle", 1: "⚠ killed (SIGKILL)"}
    # before a finding's word: the ring said "⚠ failed" for the rank the others failed without
    session.feed([op_batch(r, [{"id": 1, "op": "all_reduce", "seq": 1, "t_start": T0_NS}],
                           groups={0: ("0", (0, 1))}) for r in (0,)])
    diag = Diagnosis(session.model, wall_ns=session.clock.wall_ns)
    found = diag.finish([1])
    assert rank_states(session.model, findings=diag.findings())[1].plain == "⚠ killed (SIGKILL)"
    # and the ranks panel, where '⚠ lost rank' took its place (user trial)
    flagged = {r: f for f in found for r in f.ranks}
    assert 1 in flagged
    table = ranks_table(session.model, session.clock(), session.clock.wall_ns(),
                               flagged, width=94).plain.splitlines()
    assert "⚠ killed (SIGKILL)" in table[2] and "lost" not in table[2], table
    assert text_mod.process_end(-9, "pt") == "morto (SIGKILL)"
    assert text_mod.process_end(3) == "ended, exit 3"


@sync
async def test_the_control_line_stays_under_the_events_on_a_narrow_terminal() -> None:
    """80x24: three ranks' failures pushed '■ The demo has ended · r: Restart' (what the
    keys do now) out of the viewer panel."""
    ranks = FakeRanks(world=4)
    session = FakeSession()
    session.feed(heartbeats(4))
    app = CommvizApp(session, ranks, "t", clock=session.clock, wall_ns=session.clock.wall_ns,
                     lang="en", controller=FakeController(), restart=FakeRanks)
    async with app.run_test(size=(80, 24)) as pilot:
        for rank in range(4):
            ranks.end(rank, 1, f"RuntimeError: Connection reset by peer, rank {rank} lost")
        await frame(pilot)
        await frame(pilot)
        lines = [line.strip("│ ") for line in panel(app, "#status").splitlines()[1:-1]]
        assert lines[-1].startswith("■ The demo has ended"), lines
        assert any("rank 3 failed" in line for line in lines), lines  # the newest event


@sync
async def test_a_jobs_output_scrolls_back_to_its_traceback() -> None:
    """torchrun's 20-line summary pushed the rank's traceback out of the output panel, and
    no key brought it back."""
    from commviz.launch.job import OutputBuffer

    output = OutputBuffer()
    output.append("stderr", "[rank1]: ValueError: bad batch at step 3 on rank 1")
    for n in range(30):
        output.append("stderr", f"torchrun summary line {n}")
    app = CommvizApp(FakeSession(), FakeRanks(world=2), "run", lang="en", output=output)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        log = app.query_one("#output", OpLog)
        assert "ValueError" not in panel(app, "#output")
        log.focus()
        await pilot.press("home")
        await pilot.pause()
        shown = panel(app, "#output")
        assert "ValueError: bad batch" in shown and "↑ " in shown
        output.append("stdout", "a line after")  # scrolled back: the view stays put
        await frame(pilot)
        assert "ValueError: bad batch" in panel(app, "#output")
        await pilot.press("end")
        await pilot.pause()
        shown = panel(app, "#output")
        assert "a line after" in shown and "ValueError" not in shown and "↑ " not in shown


def test_the_inside_panel_of_a_large_group_shows_its_drawing_as_nodes_at_once() -> None:
    from commviz.viewer.model import Instance

    big = Instance("all_reduce", tuple(range(1024)), 1, 25 << 20, 0, 10, 20, "float32", None,
                   None)
    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))  # gives the ranks a backend (gloo)
    session.model.ranks[0].backend = "nccl"
    drawn = inside(session.model, "en", None).plain  # the latest, a 4-rank one: its steps
    assert "step" in drawn
    session.model.recent.append(big)
    drawn = inside(session.model, "en", None).plain.splitlines()  # as nodes, not 2 M transfers
    # ranks 4.. never reported a host: one node, its phases only
    assert drawn[0].endswith("nccl ring over 1024 ranks · S = 25.0 MiB")
    assert "2046 real steps, drawn as 30" in drawn
    assert drawn[-1] == "AG 955-1023 of 1023 (drawn step 30 of 30)"
    for rank in range(4, 1024):  # every rank on its host: 128 nodes of 8
        session.model.ranks[rank] = dataclasses.replace(session.model.ranks[0], rank=rank)
    for rank, state in session.model.ranks.items():
        state.host = f"node{rank // 8:03d}"
    drawn = inside(session.model, "en", None).plain.splitlines()
    assert drawn[0].endswith("nccl ring over 128 nodes of 8 · S = 25.0 MiB")
    assert drawn[-1] == "AG 955-1023 of 1023 (drawn step 30 of 30): " \
        "7 hops inside each node, 128 between nodes"
    assert inside(session.model, "en", None, rows=5).plain.count("\n") < 5


def test_the_inside_panel_says_what_the_op_would_take_on_another_fabric() -> None:
    """Issue 22: the `what if` line, the replayed op on a fabric at 16 nodes x 8, a model's
    (``knowledge/whatif``, hand-checked in test_whatif.py); none until `w` picks a fabric."""
    from commviz.knowledge import whatif

    session = FakeSession()
    session.feed(scripted_all_reduce(world=4))
    assert "what if" not in inside(session.model, "en").plain
    ndr = whatif.predict("all_reduce", 1 << 20, whatif.Scale(16, 8), whatif.PRESETS["ib-ndr"])
    line = f"what if (a model): on ib-ndr at 16 nodes x 8 GPUs, {ndr.time_s * 1e6:.3g} us " \
        f"({ndr.algorithm}/{ndr.protocol})"
    assert line in inside(session.model, "en", whatif_fabric="ib-ndr").plain
    roce = inside(session.model, "pt", whatif_fabric="roce").plain
    assert re.search(r"e se \(um modelo\): em roce com 16 nós x 8 GPUs, \S+ us \(\S+ us "
                     r"congestionado\)", roce), roce


@sync
async def test_w_goes_through_the_fabrics_of_the_what_if_line_then_hides_it() -> None:
    session = FakeSession()
    session.feed(heartbeats(4) + scripted_all_reduce(world=4))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await frame(pilot)
        assert "what if" not in panel(app, "#inside")
        for fabric in ("ib-ndr", "ib-xdr", "roce"):
            await pilot.press("w")
            await frame(pilot)
            assert f"what if (a model): on {fabric} at 16 nodes" in panel(app, "#inside")
        await pilot.press("w")
        await frame(pilot)
        assert "what if" not in panel(app, "#inside")


@pytest.mark.parametrize("code", [-15, 143])
def test_a_rank_its_launcher_stopped_reads_stopped_not_a_failure_of_its_own(code: int) -> None:
    """Once one rank fails, torchrun (-15) and commviz's demo launcher (143: the ranks' SIGTERM
    handler exits so) stop the others: their rows read "stopped (SIGTERM)", dim, never the
    red warning of a rank that failed, in the ranks panel and beside the replay's ring."""
    from commviz.tui.topology import rank_states

    session = FakeSession()
    session.feed(heartbeats(3))
    session.model.process_ended(1, -9)
    session.model.process_ended(2, code)
    assert {r: t.plain for r, t in rank_states(session.model).items()} == \
        {0: "idle", 1: "⚠ killed (SIGKILL)", 2: "stopped (SIGTERM)"}
    assert rank_states(session.model, lang="pt")[2].plain == "parado (SIGTERM)"
    table = ranks_table(session.model, session.clock(), session.clock.wall_ns()).plain
    assert "stopped (SIGTERM)" in table and "⚠ stopped" not in table
