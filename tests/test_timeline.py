"""The timeline: per-rank segments in the model, the swimlanes drawn from them, the widget."""

from __future__ import annotations

import asyncio
import math
import random

import numpy as np
import pytest
from fakes import T0_NS, FakeClock, FakeSession, heartbeat, inflight, op_batch
from rich.console import Console
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region

from commviz.text import i18n
from commviz.tui.timeline import (
    INFLIGHT_STYLE,
    MAX_WINDOW_S,
    SOLID,
    UNKNOWN,
    WAIT,
    Timeline,
    lane_runs,
    paced_window_s,
    render_lanes,
    title,
)
from commviz.viewer import model as model_mod
from commviz.viewer.model import InFlight, Model, Segment

G4 = {0: ("0", (0, 1, 2, 3))}
G2 = {0: ("0", (0, 1))}
MS, S = 1_000_000, 1_000_000_000


def _coll(rank: int, seq: int, start: int, end: int, op: str = "all_reduce") -> dict:
    return {"id": seq, "op": op, "seq": seq, "bytes_in": 64, "bytes_out": 64,
            "t_start": T0_NS + start, "t_end": T0_NS + end}


def _p2p(op: str, seq: int, peer: int, start: int, end: int) -> dict:
    return {"id": seq, "op": op, "seq": seq, "peer": peer, "bytes_in": 32, "bytes_out": 32,
            "t_start": T0_NS + start, "t_end": T0_NS + end}


def late_rank_model(late: int = 3) -> Model:
    """One all_reduce: every rank arrives at 0 but ``late``, at 1 ms; all finish at 2 ms."""
    m = Model(FakeClock())
    m.apply([op_batch(r, [_coll(r, 1, MS if r == late else 0, 2 * MS)], G4) for r in range(4)])
    return m


# ---- model ---------------------------------------------------------------------------------
def test_collective_ready_is_the_last_arrival_on_every_rank() -> None:
    m = Model(FakeClock())
    starts = [0, 30, 10, 20]
    m.apply([op_batch(r, [_coll(r, 1, starts[r], 500 + r)], G4) for r in range(4)])
    lanes = m.timeline(T0_NS)
    assert sorted(lanes) == [0, 1, 2, 3]
    for r, (seg,) in lanes.items():
        assert seg == Segment("all_reduce", T0_NS + starts[r], T0_NS + 30, T0_NS + 500 + r)
    assert lanes[1][0].t_ready == lanes[1][0].t_start  # the last one waited for nobody


def test_p2p_ready_is_the_later_start_of_send_and_recv() -> None:
    m = Model(FakeClock())
    m.apply([op_batch(0, [_p2p("send", 1, 1, 0, 300), _p2p("send", 2, 1, 1000, 1200)], G2),
             op_batch(1, [_p2p("recv", 1, 0, 50, 310), _p2p("irecv", 2, 0, 900, 1250)], G2)])
    lanes = m.timeline(T0_NS)
    assert [(s.op, s.t_ready - T0_NS) for s in lanes[0]] == [("send", 50), ("send", 1000)]
    assert [(s.op, s.t_ready - T0_NS) for s in lanes[1]] == [("recv", 50), ("irecv", 1000)]


def test_ready_is_clamped_into_the_op_when_clocks_disagree() -> None:
    m = Model(FakeClock())
    # rank 0's clock runs behind: it "finished" before rank 1 "arrived"
    m.apply([op_batch(0, [_coll(0, 1, 0, 100)], G2), op_batch(1, [_coll(1, 1, 200, 300)], G2)])
    (seg,) = m.timeline(T0_NS)[0]
    assert seg.t_ready == seg.t_end == T0_NS + 100


def test_ops_not_matched_yet_are_not_segments() -> None:
    m = Model(FakeClock())
    m.apply([op_batch(r, [_coll(r, 1, 0, 100)], G4) for r in range(3)])
    assert m.timeline(T0_NS) == {0: [], 1: [], 2: []}
    m.apply([op_batch(3, [_coll(3, 1, 0, 100)], G4)])
    assert all(len(segs) == 1 for segs in m.timeline(T0_NS).values())


def test_timeline_returns_segments_overlapping_the_window_and_every_known_rank() -> None:
    m = Model(FakeClock())
    m.apply([heartbeat(2, 3)])
    m.apply([op_batch(r, [_coll(r, k, k * MS, k * MS + 500_000) for k in range(5)], G2)
             for r in range(2)])
    lanes = m.timeline(T0_NS + 2 * MS + 600_000, T0_NS + 3 * MS + 100)
    assert sorted(lanes) == [0, 1, 2] and lanes[2] == []
    assert [s.t_start - T0_NS for s in lanes[0]] == [3 * MS]
    assert [s.t_start - T0_NS for s in m.timeline(T0_NS + 2 * MS + 400_000)[1]] == \
        [2 * MS, 3 * MS, 4 * MS]


def test_history_is_bounded_and_keeps_the_newest_per_rank(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_mod, "SEGMENTS_MAX", 5)
    m = Model(FakeClock())
    # a burst longer than the bound in one round (in any order: matching sorts it by seq)
    m.apply([op_batch(r, [_coll(r, k, k * 10, k * 10 + 5) for k in reversed(range(8))], G2)
             for r in range(2)])
    assert [s.t_start - T0_NS for s in m.timeline(T0_NS)[0]] == [30, 40, 50, 60, 70]
    assert m.lane_horizon == {0: T0_NS + 25, 1: T0_NS + 25}
    for k in range(8, 40):  # then one op a round: between 5 and 10 kept, the newest always
        m.apply([op_batch(r, [_coll(r, k, k * 10, k * 10 + 5)], G2) for r in range(2)])
        starts = [(s.t_start - T0_NS) // 10 for s in m.timeline(T0_NS)[1]]
        assert 5 <= len(starts) <= 10 and starts == list(range(k + 1 - len(starts), k + 1))
        assert m.lane_horizon[1] == T0_NS + (starts[0] - 1) * 10 + 5
    assert m._lanes[0][0].shape == (10, model_mod.LANE_COLUMNS)


def _lanes_read_whole(m: Model, since: int, until: int | None, groups: bool) -> dict:
    """What Model.lanes gives, read the plain way: every lane's rows filtered and sorted."""
    retired = m.ranks.keys() - m.shown_ranks().keys()
    out = {}
    for rank in sorted((m.ranks.keys() | m._lanes.keys()) - retired):
        lane, n = m._lanes.get(rank, (np.zeros((0, 5), np.int64), 0))
        lane = lane[:n, :5 if groups else 4]
        lane = lane[(lane[:, 3] >= since) & (until is None or lane[:, 1] <= until)]
        out[rank] = lane[np.argsort(lane[:, 1], kind="stable")]
    return out


def test_lanes_read_from_where_the_last_window_began_give_every_row_in_view(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows that move on (and now and then back, as a zoom out or a seek does) over lanes
    that fill up and drop their oldest rows, with ops long and short, overlapping (later
    ones ending first): the rows in view are those of every lane read whole."""
    monkeypatch.setattr(model_mod, "SEGMENTS_MAX", 6)
    rng = random.Random(7)
    m = Model(FakeClock())
    m.apply([heartbeat(2, 3)])  # a rank without rows has an empty lane
    t, seq = 0, 0
    for _ in range(60):
        batches = {r: [] for r in range(2)}
        for _ in range(rng.randint(0, 4)):
            seq += 1
            t += rng.randint(1, 40)
            for r in range(2):
                start = t + rng.randint(0, 5)
                batches[r].append(_coll(r, seq, start, start + rng.choice((3, 10, 200))))
        m.apply([op_batch(r, batch, G2) for r, batch in batches.items() if batch])
        for _ in range(2):
            since = T0_NS + max(0, t - rng.choice((30, 60, 300)))
            until = rng.choice((None, since + 50))
            groups = rng.random() < 0.5
            got, want = m.lanes(since, until, groups), _lanes_read_whole(m, since, until, groups)
            assert got.keys() == want.keys() == {0, 1, 2}
            assert all(np.array_equal(got[r], want[r]) for r in want), (since, until)


def test_a_lane_grows_with_use() -> None:
    m = Model(FakeClock())
    m.apply([op_batch(r, [_coll(r, 1, 0, 5)], G2) for r in range(2)])
    assert len(m._lanes[0][0]) == 64


def test_inflight_ops_are_exposed_until_they_complete() -> None:
    m = Model(FakeClock())
    m.apply([inflight(2, "all_reduce", seq=1, t_start=T0_NS, op_id=1)])
    (op,) = m.inflight.values()
    assert (op.rank, op.op, op.t_start) == (2, "all_reduce", T0_NS)
    assert m.timeline(T0_NS) == {2: []}
    m.apply([op_batch(r, [_coll(r, 1, 0, 100)], G4) for r in range(4)])
    assert not m.inflight and m.timeline(T0_NS)[2][0].t_end == T0_NS + 100


# ---- rendering -----------------------------------------------------------------------------
def lane(line: Text, label_w: int = 3) -> str:
    return line.plain[label_w:]


def style_at(line: Text, col: int) -> str:
    return str(line.get_style_at_offset(Console(), col))


def test_the_late_rank_waits_least_and_the_others_wait_for_it() -> None:
    m = late_rank_model(late=3)
    lines = render_lanes(m.timeline(T0_NS), [], T0_NS, T0_NS + 4 * MS, 3 + 40)
    waits = [lane(line).count(WAIT) for line in lines[:4]]
    solids = [lane(line).count(SOLID) for line in lines[:4]]
    assert waits == [10, 10, 10, 0]  # 1 ms of 4 ms over 40 columns
    assert solids == [10, 10, 10, 10]
    assert [line.plain[:3] for line in lines[:4]] == ["r0 ", "r1 ", "r2 ", "r3 "]


def test_bars_land_on_the_columns_of_their_times() -> None:
    seg = Segment("all_reduce", T0_NS + 1 * S, T0_NS + 3 * S // 2, T0_NS + 2 * S)
    (line, axis) = render_lanes({0: [seg]}, [], T0_NS, T0_NS + 4 * S, 43)
    assert lane(line) == " " * 10 + WAIT * 5 + SOLID * 5 + " " * 20
    assert "green" in style_at(line, 3 + 15) and "dim" in style_at(line, 3 + 10)
    assert axis.plain.startswith("   -4s") and axis.plain.endswith("now")


def test_op_families_have_their_own_colours() -> None:
    segs = {0: [Segment("send", T0_NS, T0_NS, T0_NS + S)],
            1: [Segment("all_gather", T0_NS, T0_NS, T0_NS + S)]}
    send, gather, _ = render_lanes(segs, [], T0_NS, T0_NS + 2 * S, 23)
    assert "magenta" in style_at(send, 3) and "cyan" in style_at(gather, 3)


def test_a_short_op_still_shows_and_transferring_wins_a_shared_column() -> None:
    # 10 us of waiting then 40 us of transfer inside one 100 ms column
    seg = Segment("all_reduce", T0_NS, T0_NS + 10_000, T0_NS + 50_000)
    (line, _) = render_lanes({0: [seg]}, [], T0_NS, T0_NS + 2 * S, 23)
    assert lane(line) == SOLID + " " * 19


def test_an_inflight_op_is_a_waiting_bar_growing_to_now() -> None:
    op = InFlight(1, "all_reduce", (0, 1), 3, -1, T0_NS + 3 * S)
    r0, r1, _ = render_lanes({0: [], 1: []}, [op], T0_NS, T0_NS + 4 * S, 23)
    assert lane(r0) == " " * 20
    assert lane(r1) == " " * 15 + WAIT * 5
    assert INFLIGHT_STYLE in style_at(r1, 3 + 19)


def test_an_op_a_rank_left_inside_ends_where_the_rank_said_goodbye() -> None:
    op = InFlight(1, "all_reduce", (0, 1), 3, -1, T0_NS + 1 * S)
    r0, r1, _ = render_lanes({0: [], 1: []}, [op], T0_NS, T0_NS + 4 * S, 23,
                             exits={1: T0_NS + 2 * S})
    assert lane(r1) == " " * 5 + WAIT * 5 + " " * 10


def test_an_empty_window_draws_blank_lanes_and_the_axis() -> None:
    lines = render_lanes({0: [], 1: []}, [], T0_NS, T0_NS + 2 * S, 40)
    assert [line.plain for line in lines[:2]] == ["r0" + " " * 38, "r1" + " " * 38]
    assert lines[2].plain.split() == ["-2s", "-1.5s", "-1s", "-0.5s", "now"]
    (axis,) = render_lanes({}, [], T0_NS, T0_NS + 2 * S, 40)
    assert axis.plain.endswith("now")


@pytest.mark.parametrize(("lang", "name"), [("en", "Timeline"), ("pt", "Linha do tempo")])
def test_the_title_reads_as_a_legend_of_the_lanes_glyphs(lang: str, name: str) -> None:
    """Each glyph the lanes draw, once, before its meaning; none is the "·" separator that
    made "Timeline · ░ waiting ... · history dropped" read as a status."""
    text = title(lang)
    assert text.startswith(f"{name}  {WAIT} ") and "·" not in text
    assert len({WAIT, SOLID, UNKNOWN}) == 3
    assert all(text.count(glyph) == 1 for glyph in (WAIT, SOLID, UNKNOWN))
    dropped = "history dropped" if lang == "en" else "histórico perdido"
    assert text.endswith(f"  {UNKNOWN} {dropped}")
    # where the whole does not fit: shorter words, every glyph still explained
    short = title(lang, len(text) - 1)
    assert len(short) < len(text) and all(short.count(g) == 1 for g in (WAIT, SOLID, UNKNOWN))


def test_columns_before_the_history_horizon_are_marked_unknown() -> None:
    seg = Segment("all_reduce", T0_NS + 2 * S, T0_NS + 2 * S, T0_NS + 3 * S)
    (line, _) = render_lanes({0: [seg]}, [], T0_NS, T0_NS + 4 * S, 23, {0: T0_NS + 2 * S})
    assert lane(line) == UNKNOWN * 10 + SOLID * 5 + " " * 5


@pytest.mark.parametrize("width", [0, 1, 3, 4, 10, 23, 43, 83, 200])
def test_every_width_gives_lines_of_that_width(width: int) -> None:
    m = late_rank_model()
    lines = render_lanes(m.timeline(T0_NS), [], T0_NS, T0_NS + 4 * MS, width)
    assert len(lines) == 5 and all(line.cell_len == width for line in lines)
    if width > 3:  # the late rank's bar starts a quarter of the way along its lane
        assert lane(lines[3]).index(SOLID) == (width - 3) // 4


def test_wide_rank_numbers_keep_the_lanes_aligned() -> None:
    segs = {r: [Segment("barrier", T0_NS, T0_NS, T0_NS + S)] for r in (0, 9, 10)}
    lines = render_lanes(segs, [], T0_NS, T0_NS + 2 * S, 24)
    assert [line.plain[:4] for line in lines[:3]] == [" r0 ", " r9 ", "r10 "]
    assert all(line.plain[4:14] == SOLID * 10 for line in lines[:3])


def test_the_models_arrays_draw_like_its_segments() -> None:
    m = late_rank_model()
    segments, arrays = m.timeline(T0_NS), m.lanes(T0_NS)
    assert {r: len(a) for r, a in arrays.items()} == {r: len(s) for r, s in segments.items()}
    for width in (20, 43):
        drawn = [render_lanes(lanes, [], T0_NS, T0_NS + 4 * MS, width)
                 for lanes in (segments, arrays)]
        assert [line.markup for line in drawn[0]] == [line.markup for line in drawn[1]]


# ---- widget --------------------------------------------------------------------------------
class TimelineApp(App):
    def __init__(self, session: FakeSession) -> None:
        super().__init__()
        self.session = session

    def compose(self) -> ComposeResult:
        yield Timeline(id="timeline")

    def feed_frame(self) -> None:
        with self.session.lock:
            self.query_one(Timeline).update_from(self.session.model, self.session.clock.wall_ns())


def shown(widget: Timeline) -> list[str]:
    width, height = widget.outer_size
    return [strip.text for strip in widget.render_lines(Region(0, 0, width, height))]


@pytest.mark.integration
def test_widget_draws_the_sessions_lanes() -> None:
    async def run() -> None:
        session = FakeSession()
        session.feed([op_batch(r, [_coll(r, 1, 200 * MS if r == 3 else 0, 400 * MS)], G4)
                      for r in range(4)])
        session.clock.set_wall_ns(T0_NS + 1 * S)  # the op was a second ago, -2s..now shown
        app = TimelineApp(session)
        async with app.run_test(size=(43, 10)) as pilot:
            timeline = app.query_one(Timeline)
            assert shown(timeline) == [" " * 43]  # nothing until the app feeds a frame
            app.feed_frame()
            await pilot.pause()
            lines = shown(timeline)
            assert timeline.outer_size.height == 5
            assert [line[:3] for line in lines[:4]] == ["r0 ", "r1 ", "r2 ", "r3 "]
            assert lines[0][3:] == " " * 20 + WAIT * 4 + SOLID * 4 + " " * 12
            assert lines[3][3:] == " " * 24 + SOLID * 4 + " " * 12
            assert lines[4].endswith("now")

            timeline.window_s = 4.0
            session.feed([inflight(1, "all_reduce", seq=2, t_start=T0_NS + S, op_id=2)])
            session.clock.advance(1.0)
            app.feed_frame()
            await pilot.pause()
            lines = shown(timeline)
            assert lines[4].split()[0] == "-4s"
            assert lines[1][3:].rstrip().endswith(WAIT * 10)  # in flight for 1 s of 4

            await pilot.resize_terminal(83, 10)
            await pilot.pause()
            assert all(len(line) == 83 for line in shown(timeline))

    asyncio.run(run())


def _ops_every(gap_ns: int, count: int) -> Model:
    m = Model(FakeClock())
    for seq in range(1, count + 1):
        start = (seq - 1) * gap_ns
        m.apply([op_batch(r, [_coll(r, seq, start, start + 5 * MS)], G4) for r in range(4)])
    return m


def test_the_window_stretches_to_keep_a_few_slow_operations_in_view():
    """A demo steps every 2 s: a 2 s window would show one op at most, and lose it while the
    class looks at the replay. Fast loops keep the window they ask for."""
    assert paced_window_s(_ops_every(2 * S, 5).recent, 2.0) == pytest.approx(6.0)
    assert paced_window_s(_ops_every(10 * MS, 50).recent, 2.0) == 2.0
    assert paced_window_s(_ops_every(60 * S, 3).recent, 2.0) == MAX_WINDOW_S
    assert paced_window_s(_ops_every(S, 1).recent, 2.0) == 2.0  # one op: no pace yet
    bursts = Model(FakeClock())  # a ring's steps: 12 transfers within 12 ms, every 2 s
    for step in range(3):
        bursts.apply([op_batch(r, [_coll(r, 12 * step + k + 1, step * 2 * S + k * MS,
                                         step * 2 * S + k * MS + MS) for k in range(12)], G4)
                       for r in range(4)])
    assert paced_window_s(bursts.recent, 2.0) == pytest.approx(6.0, rel=0.02)
    m = _ops_every(2 * S, 3)
    now = T0_NS + 4 * S + 10 * MS
    since = now - int(paced_window_s(m.recent, 2.0) * S)
    (lane, *_), = [render_lanes(m.lanes(since, now), [], since, now, 63)]
    runs = [run for run in lane.plain[3:].split(" ") if run]
    assert len(runs) == 3 and all(set(run) <= {SOLID, WAIT} for run in runs)  # all three ops


def test_compute_phases_get_a_line_under_their_ranks_lane_on_the_same_axis():
    from commviz.tui.timeline import lane_runs, phase_colour
    from commviz.wire.protocol import PhaseSpan

    seg = Segment("all_reduce", T0_NS + 3 * S // 4, T0_NS + 3 * S // 4, T0_NS + S)
    phases = {0: [PhaseSpan("step", 0, T0_NS, T0_NS + 2 * S),
                  PhaseSpan("forward", 1, T0_NS, T0_NS + S // 4),
                  PhaseSpan("backward", 1, T0_NS + S // 4, T0_NS + S)]}
    lines = lane_runs({0: [seg], 1: [seg]}, [], T0_NS, T0_NS + 2 * S, 43, phases=phases)
    text = ["".join(chars for chars, _ in runs) for runs in lines]
    assert len(text) == 5  # r0, its phases, r1 (no phases), the axis, the phases' legend
    assert text[0].startswith("r0") and text[2].startswith("r1")
    # 40 columns for 2 s: forward 0-5, backward 5-20 (the all_reduce, columns 15-20, overlaps
    # its end), then the rest of the outer step; inner phases are drawn over outer ones, and
    # a name that does not fit its columns is its initial ("forwabackward" was unreadable)
    assert text[1] == "   f────backward" + "─" * 27
    styles = {style for chars, style in lines[1] if chars.strip()}
    assert phase_colour("forward") in styles and phase_colour("backward") in styles
    # the ddp demo's "f─b──o" had no legend (user trial): each initial, its name, its colour
    assert text[4] == "   phases  s step  f forward  b backward"
    assert [style for _, style in lines[4][1:]] == [phase_colour(name) for name in
                                                    ("step", "forward", "backward")]


@pytest.mark.parametrize("lang, note", [
    ("en", "… r3-r5: not shown (a taller terminal shows them)"),
    ("pt", "… r3-r5: fora da tela (um terminal mais alto os mostra)")])
def test_in_fewer_lines_the_last_ranks_lanes_give_way_to_a_line_naming_them(lang, note):
    """18 ranks at 160x48: the timeline's panel cut its lanes and its axis with them."""
    from commviz.tui.timeline import lane_runs

    seg = Segment("all_reduce", T0_NS, T0_NS, T0_NS + S)
    lanes = {r: [seg] for r in range(6)}
    text = ["".join(chars for chars, _ in runs).strip() for runs in
            lane_runs(lanes, [], T0_NS, T0_NS + 2 * S, 60, lang=lang, height=5)]
    assert [line.split()[0] for line in text[:3]] == ["r0", "r1", "r2"]
    assert text[3] == note and text[4].endswith("now" if lang == "en" else "agora")  # the axis
    assert len(lane_runs(lanes, [], T0_NS, T0_NS + 2 * S, 60, height=7)) == 7  # all fit
    two = lane_runs({r: [seg] for r in range(3)}, [], T0_NS, T0_NS + 2 * S, 60, height=3)
    assert "".join(chars for chars, _ in two[1]).strip().startswith("… r1,r2: ")


def test_the_phases_legend_is_in_the_language_and_absent_without_phases():
    from commviz.tui.timeline import lane_runs
    from commviz.wire.protocol import PhaseSpan

    seg = Segment("all_reduce", T0_NS, T0_NS, T0_NS + S)
    phases = {0: [PhaseSpan("forward", 0, T0_NS, T0_NS + S)]}
    lines = lane_runs({0: [seg]}, [], T0_NS, T0_NS + 2 * S, 43, phases=phases, lang="pt")
    assert "".join(chars for chars, _ in lines[-1]) == "   fases  f forward"
    lines = lane_runs({0: [seg]}, [], T0_NS, T0_NS + 2 * S, 43)
    assert len(lines) == 2  # the lane and the axis



@pytest.mark.parametrize("lang", i18n.LANGS)
@pytest.mark.parametrize("window_ns", [int(6.14 * S), int(6.68 * S), int(2.5 * S), 30 * S,
                                       int(13.7 * MS), int(0.3 * S)])
@pytest.mark.parametrize("width", [40, 78, 94, 150])
def test_a_stretched_window_keeps_its_ticks_at_round_times(window_ns: int, width: int,
                                                            lang: str) -> None:
    """A demo's paced window (6.14 s) gave labels such as -6.14s -4.61s (user trial): the
    ticks are 1, 2 or 5 x 10^k of the unit apart, each label centred on its time's column,
    a decimal comma in Portuguese."""
    (runs,) = lane_runs({}, [], T0_NS, T0_NS + window_ns, width, lang=lang)
    axis = "".join(chars for chars, _ in runs)[1:]  # no lanes: a column before the axis
    assert len(axis) == width - 1
    *labels, now = axis.split()
    assert now == i18n.ui("now", lang) and len(labels) >= 2
    unit = "s" if window_ns >= S else "ms"
    values = []
    other_mark = "," if i18n.ui("decimal separator", lang) == "." else "."
    for label in labels:
        number = label.removeprefix("-").removesuffix(unit)
        assert label == f"-{number}{unit}" and other_mark not in number
        values.append(float(number.replace(",", ".")))
        centre = axis.index(label) + len(label) // 2
        column = (1 - values[-1] * (S if unit == "s" else MS) / window_ns) * (width - 1)
        assert abs(centre - column) <= 1 or axis.index(label) == 0, (label, axis)
    step = values[-1]
    assert [round(a - b, 9) for a, b in zip(values, values[1:])] == [step] * (len(values) - 1)
    assert round(step / 10 ** math.floor(math.log10(step)), 9) in (1, 2, 5), axis
