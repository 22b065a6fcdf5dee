"""The topology view: the animation queue on a frozen clock, the pure renderer, the widget.

Nothing reads real time: the Animator takes a FakeClock, and the widget test advances that
clock and asks for a frame (``tick``) rather than waiting for the widget's timer.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
import subprocess
import sys

import pytest
from fakes import FakeClock, FakeSession, fake_nvml, scripted_all_reduce, topology
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region

from commviz.knowledge import schedules
from commviz.knowledge.schedules import Transfer
from commviz.text import i18n
from commviz.tui.animation import GATHER_S, SPEEDS, Animator, AnimFrame, frame_label, plan
from commviz.tui.topology import (
    ALERT,
    MARKER,
    NVLINK_CELLS,
    NVLINK_STYLE,
    PATH,
    PCIE_CELLS,
    PCIE_STYLE,
    Topology,
    label_span,
    layout,
    line_cells,
    path_of,
    rank_states,
    render_topology,
    replay_roles,
)
from commviz.viewer.model import Instance, Model

W, H = 60, 16


def coll(op: str = "all_reduce", n: int = 4, size: int = 4096, seq: int = 1,
         group: tuple[int, ...] | None = None, root: int | None = None) -> Instance:
    group = tuple(range(n)) if group is None else group
    return Instance(op, group, seq, size, 0, 10_000, 1_010_000, "float32", None, root)


def p2p(src: int = 0, dst: int = 1, op: str = "send", size: int = 8192) -> Instance:
    return Instance(op, (src, dst), 1, size, 0, 0, 250_000, "float32", None, None)


def sched(inst: Instance, backend: str = "gloo") -> schedules.Schedule:
    s = plan(inst, backend)
    assert s is not None
    return s


def animator(step_s: float = 0.6, max_waiting: int = 8) -> tuple[FakeClock, Animator]:
    clock = FakeClock(monotonic=0.0)
    return clock, Animator(clock, step_s=step_s, max_waiting=max_waiting)


def frame_at(a: Animator, clock: FakeClock, t: float) -> AnimFrame:
    clock.t = t
    f = a.frame()
    assert f is not None
    return f


# ---- the animation queue -------------------------------------------------------------------
def test_nothing_to_draw_before_the_first_instance() -> None:
    clock, a = animator()
    assert a.frame() is None and not a.busy and a.lag_s == 0 and a.waiting == 0


def test_steps_advance_with_elapsed_time_not_with_calls() -> None:
    clock, a = animator()
    inst = coll()
    a.enqueue(inst, sched(inst))
    f = frame_at(a, clock, 0.0)
    assert (f.step, f.steps, f.progress, f.step_label) == (0, 6, 0.0, "RS0")
    for _ in range(50):  # many frames at one instant change nothing
        f = frame_at(a, clock, 0.3)
    assert (f.step, f.progress) == (0, pytest.approx(0.5))
    f = frame_at(a, clock, 0.9)
    assert (f.step, f.step_label, f.progress) == (1, "RS1", pytest.approx(0.5))
    assert f.label == "all_reduce · step RS1 (2 of 6) · schematic: gloo ring"
    f = frame_at(a, clock, 2.1)
    assert f.step_label == "AG0" and not any(t.reduce for t in f.transfers)
    f = frame_at(a, clock, 3.6)  # all 6 steps played: the last one is held, complete
    assert (f.step, f.progress, f.done) == (5, 1.0, True) and not a.busy
    assert frame_at(a, clock, 100.0) == f


def test_a_slow_caller_skips_frames_not_time() -> None:
    clock, a = animator()
    first, second = coll(seq=1), coll("broadcast", seq=2)
    a.enqueue(first, sched(first))
    a.enqueue(second, sched(second))
    f = frame_at(a, clock, 6 * 0.6 + 0.3)  # one late frame: the first op is over
    assert f.instance is second and f.step == 0 and f.progress == pytest.approx(0.5)


def test_frames_carry_the_backends_direction_and_chunks() -> None:
    clock, a = animator()
    inst = coll()
    a.enqueue(inst, sched(inst))
    rs0 = frame_at(a, clock, 0.0).transfers
    # gloo: every rank sends to rank-1; RS0 rank r sends chunk r+1 (collectives.md's table)
    assert sorted((t.src, t.dst, t.chunk) for t in rs0) == \
        [(0, 3, 1), (1, 0, 2), (2, 1, 3), (3, 2, 0)]
    assert all(t.reduce for t in rs0)
    nccl = coll("all_gather", seq=2)
    a.enqueue(nccl, sched(nccl, "nccl"))
    f = frame_at(a, clock, 3.6)
    assert f.instance is nccl and {(t.src, t.dst) for t in f.transfers} == \
        {(0, 1), (1, 2), (2, 3), (3, 0)}  # NCCL ring all_gather: rank+1


def test_transfers_use_the_groups_global_ranks() -> None:
    clock, a = animator()
    inst = coll("broadcast", group=(4, 5, 6, 7), root=6)
    a.enqueue(inst, sched(inst))
    f = frame_at(a, clock, 0.0)
    assert f.step_label == "tree 0" and [(t.src, t.dst) for t in f.transfers] == [(6, 7)]
    assert frame_label(f, "pt") == \
        "broadcast · passo árvore 0 (1 de 2) · esquemático: árvore binomial do gloo"
    f = frame_at(a, clock, 0.6)  # the binomial tree doubles the holders
    assert sorted((t.src, t.dst) for t in f.transfers) == [(6, 4), (7, 5)]


def test_a_p2p_transfer_is_one_hop_between_its_real_ranks() -> None:
    clock, a = animator()
    a.enqueue(p2p(2, 3, "isend"), None)
    assert a.frame() is None and a.busy  # the rest of its round may still be arriving
    f = frame_at(a, clock, GATHER_S + 0.15)
    assert f.label == "isend 2 -> 3, 8.0 KiB" and "schematic" not in f.label
    assert f.steps == 1 and f.p2p and f.progress == pytest.approx(0.25)
    assert f.transfers == (Transfer(2, 3, 0, 8192, False),)
    assert frame_at(a, clock, GATHER_S + 0.6).done


def test_an_op_without_a_known_backend_is_labelled_not_drawn() -> None:
    clock, a = animator()
    a.enqueue(coll(), None)
    f = frame_at(a, clock, 0.0)
    assert f.transfers == () and "backend is not known" in f.label


def test_speed_doubles_and_halves_within_bounds_keeping_the_position() -> None:
    clock, a = animator()
    inst = coll()
    a.enqueue(inst, sched(inst))
    clock.t = 0.3  # half of step 0
    assert a.faster() == 0.3
    f = frame_at(a, clock, 0.45)  # 0.15 s more at 0.3 s/step: half a step
    assert (f.step, f.progress) == (1, pytest.approx(0.0))
    assert a.slower() == 0.6 and a.slower() == 1.2
    f = frame_at(a, clock, 1.05)
    assert (f.step, f.progress) == (1, pytest.approx(0.5))
    for _ in range(10):
        a.slower()
    assert a.step_s == SPEEDS[-1] == 2.4
    for _ in range(10):
        a.faster()
    assert a.step_s == SPEEDS[0] == 0.15


def test_pause_holds_the_frame() -> None:
    clock, a = animator()
    inst = coll()
    a.enqueue(inst, sched(inst))
    held = frame_at(a, clock, 0.3)
    a.paused = True
    assert frame_at(a, clock, 50.0) == held and "replay held" in a.summary()
    a.paused = False
    f = frame_at(a, clock, 50.3)
    assert (f.step, f.progress) == (1, pytest.approx(0.0))


def test_a_new_instance_after_an_idle_spell_starts_at_its_beginning() -> None:
    clock, a = animator()
    a.enqueue(p2p(), None)
    assert frame_at(a, clock, 10.0).done
    second = coll(seq=2)
    a.enqueue(second, sched(second))
    f = frame_at(a, clock, 10.0)
    assert f.instance is second and (f.step, f.progress, f.done) == (0, 0.0, False)


def counts_add_up(a: Animator) -> bool:
    return a.enqueued == a.shown + a.skipped + a.waiting


def test_runs_of_identical_instances_collapse_when_the_queue_is_full() -> None:
    clock, a = animator(max_waiting=3)
    first = coll(seq=0)
    a.enqueue(first, sched(first))
    for k in range(1, 11):  # 10 identical all_reduces queue behind the first
        inst = coll(seq=k)
        a.enqueue(inst, sched(inst))
        assert counts_add_up(a)
    assert a.skipped == 0 and a.waiting == 10
    f = frame_at(a, clock, 3.6)  # the first is over: the next is all ten at once
    assert f.count == 10 and f.label.startswith("all_reduce ×10 · step ")
    assert a.waiting == 0 and a.shown == 11 and counts_add_up(a)


def test_when_collapsing_is_not_enough_the_oldest_are_skipped_and_counted() -> None:
    clock, a = animator(max_waiting=3)
    ops = ["all_reduce", "broadcast", "all_gather"]
    for k in range(12):  # no two neighbours alike: nothing collapses
        inst = coll(ops[k % 3], seq=k)
        a.enqueue(inst, sched(inst))
        assert counts_add_up(a)
    assert (a.shown, a.waiting, a.skipped) == (1, 3, 8)
    assert "8 skipped" in a.summary()
    seen = [frame_at(a, clock, t).instance.seq for t in (3.7, 7.3, 8.5)]
    assert seen == [9, 10, 11]  # the newest three were kept, in order


def _hop(src: int, dst: int, start: int, end: int, op: str = "isend") -> Instance:
    return Instance(op, (src, dst), 1, 4096, start, start, end, "float32", None, None)


def test_transfers_in_flight_together_are_replayed_together() -> None:
    """A hand-written ring's step: every rank sends to the next at once. One frame draws the
    whole step (the trial saw one hop at a time, and most of them skipped)."""
    clock, a = animator()
    for step in range(3):  # each step overlaps the next a little, as ranks run ahead
        t = step * 400_000
        for r in range(3):  # three isends, overlapping in time
            a.enqueue(_hop(r, (r + 1) % 3, t + r * 1000, t + 500_000), None)
    f = frame_at(a, clock, GATHER_S + 0.1)
    assert f.label == "3 isends in one round (each pair's #1): 0 -> 1, 1 -> 2, 2 -> 0, 4.0 KiB each"
    assert frame_label(f, "pt") == \
        "3 isend numa rodada (o nº 1 de cada par): 0 -> 1, 1 -> 2, 2 -> 0, 4,0 KiB cada"
    assert sorted((t.src, t.dst) for t in f.transfers) == [(0, 1), (1, 2), (2, 0)]
    assert a.waiting == 6 and a.shown == 3 and a.skipped == 0
    f = frame_at(a, clock, GATHER_S + 0.7)
    assert len(f.transfers) == 3 and a.waiting == 3


def test_transfers_one_after_the_other_stay_apart() -> None:
    clock, a = animator()
    a.enqueue(_hop(0, 1, 0, 1000), None)
    a.enqueue(_hop(1, 2, 2000, 3000), None)  # starts after the first ended
    a.enqueue(_hop(2, 0, 2500, 3500, op="send"), None)  # another op: not drawn with it
    assert [len(frame_at(a, clock, GATHER_S + t).transfers) for t in (0.1, 0.7, 1.3)] == \
        [1, 1, 1]


def test_a_chain_of_dependent_sends_is_replayed_one_after_another() -> None:
    """A pipeline: every stage posts its receive at once, but stage k sends only after its
    receive from stage k-1 ended, so the data moves hop after hop (the trial saw all three
    drawn as "3 sends at once")."""
    clock, a = animator()
    for k in range(3):  # k -> k+1: the receive posted at 0, the send once k has received
        a.enqueue(Instance("send", (k, k + 1), 1, 4096, 0, k * 1100, k * 1100 + 1000,
                           "float32", None, None), None)
    shown = [frame_at(a, clock, GATHER_S + t) for t in (0.1, 0.7, 1.3)]
    assert [[(t.src, t.dst) for t in f.transfers] for f in shown] == [[(0, 1)], [(1, 2)],
                                                                     [(2, 3)]]
    assert not any("at once" in f.label or "round" in f.label for f in shown)


def test_a_sender_returning_late_does_not_make_the_next_hop_simultaneous() -> None:
    """Seen on a loaded machine: stage 0's send returned after stage 1 had received and was
    already sending on; the data of 0 -> 1 had arrived, so the hops stay apart."""
    clock, a = animator()
    a.enqueue(Instance("send", (0, 1), 1, 4096, 0, 0, 3000, "float32", None, None,
                       t_recv_end=1000), None)
    a.enqueue(Instance("send", (1, 2), 1, 4096, 0, 1100, 2000, "float32", None, None,
                       t_recv_end=2000), None)
    assert [len(frame_at(a, clock, GATHER_S + t).transfers) for t in (0.1, 0.7)] == [1, 1]


def test_a_rings_steps_are_replayed_as_rounds_whatever_order_they_arrive_in() -> None:
    """A hand-written ring on a loaded machine: the ranks' records reach the viewer one rank's
    batch after another, so the transfers complete pair by pair (0 -> 1 for every step, then
    1 -> 2 ...), and a step's transfers need not overlap in time. The trial saw half steps
    and runs of one pair's sends; each frame is now one step, the k-th transfer on every
    pair."""
    clock, a = animator(max_waiting=16)
    pairs = [(0, 1), (1, 2), (2, 3), (3, 0)]
    for src, dst in pairs:
        for k in range(1, 7):
            t = k * 1_000_000 + src * 300_000  # rank r's send of step k, after rank r-1's
            a.enqueue(Instance("isend", (src, dst), k, 256, t, t, t + 100_000, "float32",
                               None, None), None)
            assert counts_add_up(a)
    shown = [frame_at(a, clock, GATHER_S + 0.1 + 0.6 * k) for k in range(6)]
    assert [sorted((t.src, t.dst) for t in f.transfers) for f in shown] == [sorted(pairs)] * 6
    assert [f.instance.seq for f in shown] == [1, 2, 3, 4, 5, 6]
    assert shown[2].label == \
        "4 isends in one round (each pair's #3): 0 -> 1, 1 -> 2, 2 -> 3, 3 -> 0, 256 B each"
    assert a.skipped == 0 and counts_add_up(a)


def test_a_batch_to_both_neighbours_is_one_round_and_sends_in_turn_keep_their_order() -> None:
    """batch_isend_irecv to the left and the right was drawn as two rounds of four, split
    differently each step; rank 0's sends to 1, 2, 3 in turn were replayed out of order, as
    their records arrived (user trial)."""
    clock, a = animator(max_waiting=16)
    for src, dst in [(0, 1), (1, 2), (2, 3), (3, 0), (0, 3), (1, 0), (2, 1), (3, 2)]:
        a.enqueue(Instance("isend", (src, dst), 7, 4096, 0, 0, 1000, "float32", None, None),
                  None)
    f = frame_at(a, clock, GATHER_S + 0.1)
    assert len(f.transfers) == 8 and f.label.startswith("8 isends in one round (each pair's #7)")
    clock, a = animator()
    for dst, start in [(2, 2000), (3, 4000), (1, 0)]:  # arrived 0 -> 2, 0 -> 3, 0 -> 1
        a.enqueue(Instance("send", (0, dst), 4, 64, start, start, start + 1000, "float32",
                           None, None), None)
    shown = [frame_at(a, clock, GATHER_S + t).transfers for t in (0.1, 0.7, 1.3)]
    assert [(t[0].src, t[0].dst) for t in shown] == [(0, 1), (0, 2), (0, 3)]


def test_a_ring_on_pairs_used_before_is_replayed_as_rounds() -> None:
    """The tour (`commviz demo all`): rank 0's sends to 1, 2, 3 number 0 -> 1 #1 to #3, so
    its ring's isends on 0 -> 1 are #4 to #6 while the other pairs' are #1 to #3; the trial
    saw the ring's steps replayed hop by hop. A round takes each pair's next transfer."""
    clock, a = animator(max_waiting=16)
    for dst in (1, 2, 3):  # the last step of the sends: each in turn, one frame each
        t = 3_000_000 + dst * 1000
        a.enqueue(Instance("send", (0, dst), 3, 4096, t, t, t + 500, "float32", None, None),
                  None)
    for k in range(1, 4):
        for src in (2, 3, 0, 1):  # arriving one rank's batch after another
            t = 10_000_000 + k * 1_000_000 + src * 1000
            seq = k + 3 if src == 0 else k
            a.enqueue(Instance("isend", (src, (src + 1) % 4), seq, 4096, t, t, t + 500,
                               "float32", None, None), None)
    shown = [frame_at(a, clock, GATHER_S + 0.1 + 0.6 * k) for k in range(6)]
    assert [f.instance.op for f in shown] == ["send"] * 3 + ["isend"] * 3
    ring = shown[3:]
    assert [sorted((t.src, t.dst) for t in f.transfers) for f in ring] == \
        [[(0, 1), (1, 2), (2, 3), (3, 0)]] * 3
    assert [sorted(i.seq for i in f.members) for f in ring] == [[k, k, k, k + 3]
                                                                 for k in (1, 2, 3)]
    assert ring[1].label == "4 isends in one round (each pair's next, #2-#5): " \
        "0 -> 1, 1 -> 2, 2 -> 3, 3 -> 0, 4.0 KiB each"
    assert frame_label(ring[1], "pt") == "4 isend numa rodada (o próximo de cada par, " \
        "nº 2-5): 0 -> 1, 1 -> 2, 2 -> 3, 3 -> 0, 4,0 KiB cada"
    assert counts_add_up(a) and a.skipped == 0


def test_a_round_still_arriving_is_not_drawn_until_its_transfers_had_time_to_come() -> None:
    clock, a = animator()
    a.enqueue(_hop(0, 1, 0, 1000), None)
    clock.t = GATHER_S / 2
    a.enqueue(_hop(1, 0, 0, 1000), None)  # a pairwise exchange: 0 -> 1 and 1 -> 0
    assert a.frame() is None
    f = frame_at(a, clock, GATHER_S + 0.1)
    assert sorted((t.src, t.dst) for t in f.transfers) == [(0, 1), (1, 0)]


def test_lag_is_the_time_to_drain_the_queue() -> None:
    clock, a = animator()
    inst = coll()
    a.enqueue(inst, sched(inst))          # 6 steps
    a.enqueue(p2p(), None)                # 1 step
    bcast = coll("broadcast", seq=3)
    a.enqueue(bcast, sched(bcast))        # 2 steps at 4 ranks
    assert a.waiting == 2 and a.lag_s == pytest.approx((6 + 1 + 2) * 0.6)
    clock.t = 1.5
    a.frame()
    assert a.lag_s == pytest.approx((6 + 1 + 2) * 0.6 - 1.5)
    a.faster()
    assert a.lag_s == pytest.approx(((6 + 1 + 2) * 0.6 - 1.5) / 2)
    assert "2 waiting" in a.summary() and "s to go" in a.summary()


@pytest.mark.integration
def test_the_animation_module_imports_neither_textual_nor_rich() -> None:
    code = "import sys, commviz.tui.animation; print(' '.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True).stdout.split()
    assert "textual" not in loaded and "rich" not in loaded


# ---- layout and rendering ------------------------------------------------------------------
def spans(where: dict[int, tuple[int, int]]) -> list[tuple[int, int, int]]:
    return [(y, *label_span(r, x)) for r, (x, y) in where.items()]


@pytest.mark.parametrize("n", range(2, 17))
def test_a_ring_keeps_every_label_inside_and_apart(n: int) -> None:
    where = layout(n, W, H - 3)
    assert sorted(where) == list(range(n))
    boxes = spans(where)
    assert all(0 <= y < H - 3 and 0 <= a and b < W for y, a, b in boxes)
    for i, (y, a, b) in enumerate(boxes):
        for y2, a2, b2 in boxes[i + 1:]:
            assert y != y2 or b < a2 or b2 < a, f"labels overlap at n={n}"
    assert where[0][1] == min(y for _, y in where.values())  # rank 0 on top
    if n >= 4:  # rank+1 is clockwise: to the right of rank 0
        assert where[1][0] > where[0][0]


def test_beyond_sixteen_ranks_where_a_rectangle_does_not_fit_a_snake_grid() -> None:
    where = layout(32, 30, 8)
    assert sorted(where) == list(range(32)) and len(set(where.values())) == 32
    rows = sorted({y for _, y in where.values()})
    assert len(rows) == 6
    assert [where[r][1] for r in range(6)] == [rows[0]] * 6
    assert where[5][0] == where[6][0] and where[6][1] == rows[1]  # ring neighbours stay close
    boxes = spans(where)
    assert all(0 <= a and b < 30 for _, a, b in boxes)


@pytest.mark.parametrize("n, width, height", [(17, W, H - 3), (18, 92, 9), (24, 92, 11),
                                              (32, 66, 12), (32, W, H - 3)])
def test_beyond_sixteen_ranks_the_ring_goes_round_a_rectangle(n: int, width: int,
                                                              height: int) -> None:
    """In the grid's snake, the link from the last rank back to rank 0 (a step of every ring)
    crossed every row, over other ranks' links (teacher's trial, all_reduce --ranks 18): round
    a rectangle, every rank's link to rank+1 passes no other rank."""
    where = layout(n, width, height)
    assert sorted(where) == list(range(n))
    boxes = spans(where)
    assert all(0 <= y < height and 0 <= a and b < width for y, a, b in boxes)
    for i, (y, a, b) in enumerate(boxes):
        assert all(y != y2 or b < a2 or b2 < a for y2, a2, b2 in boxes[i + 1:])
    assert where[0] == min(where.values(), key=lambda xy: (xy[1], xy[0]))  # top left
    for r in range(n):
        path = path_of(Transfer(r, (r + 1) % n, 0, 0, False), where)
        assert path is not None
        others = [box for s, box in zip(where, boxes) if s not in (r, (r + 1) % n)]
        assert not any(y == by and a <= x <= b for x, y in path.cells
                       for by, a, b in others), f"{r} -> {(r + 1) % n} crosses a rank"


def test_ranks_that_do_not_fit_are_said_to_be_missing() -> None:
    lines = render_topology(32, None, 40, 5)  # a grid: from 33 ranks on, a heatmap
    assert "do not fit" in lines[0].plain
    assert len(lines) == 5


def test_line_cells_joins_both_ends() -> None:
    cells = line_cells(0, 0, 6, 3)
    assert cells[0] == (0, 0) and cells[-1] == (6, 3) and len(cells) == 7


def gloo_all_reduce_frame(progress: float, done: bool = False, step: int = 0) -> AnimFrame:
    clock, a = animator()
    inst = coll()
    a.enqueue(inst, sched(inst))
    f = frame_at(a, clock, (step + progress) * 0.6)
    return f if not done else AnimFrame(**{**f.__dict__, "done": True})


def canvas_rows(lines: list[Text]) -> list[str]:
    """The drawing only: no title lines (two at 16 rows), no legend."""
    return [line.plain for line in lines[2:-1]]


def test_gloo_all_reduce_rs0_moves_from_rank_0_towards_rank_3() -> None:
    f = gloo_all_reduce_frame(0.5)
    lines = render_topology(4, f, W, H)
    assert len(lines) == H and all(line.cell_len == W for line in lines)
    assert lines[0].plain.startswith("all_reduce · step RS0 (1 of 6) · schematic: gloo ring")
    rows = canvas_rows(lines)
    where = layout(4, W, H - 3)
    (x0, y0), (x3, y3) = where[0], where[3]
    assert x3 < x0 and y3 > y0  # rank 3 is left of and below rank 0 (rank-1 is anticlockwise)
    path = path_of(Transfer(0, 3, 1, 1024, True), where)
    assert path is not None
    mx, my = path.at(0.5)
    assert rows[my][mx] == MARKER
    assert math.hypot(mx - (x0 + x3) / 2, my - (y0 + y3) / 2) <= 1.5  # half way
    assert rows[my][mx + 1:mx + 3] == "c1"  # the chunk rank 0 sends at RS0
    hx, hy = path.cells[-1]
    assert rows[hy][hx] in "←↙↓" and abs(hx - x3) <= 3 and abs(hy - y3) <= 1
    # earlier in the step the marker is nearer rank 0, later nearer rank 3
    early = canvas_rows(render_topology(4, gloo_all_reduce_frame(0.1), W, H))
    late = canvas_rows(render_topology(4, gloo_all_reduce_frame(0.9), W, H))
    ex, ey = path.at(0.1)
    lx, ly = path.at(0.9)
    assert early[ey][ex] == MARKER and late[ly][lx] == MARKER
    assert math.hypot(ex - x0, 2 * (ey - y0)) < math.hypot(lx - x0, 2 * (ly - y0))


def test_every_transfer_of_the_step_has_one_marker() -> None:
    rows = canvas_rows(render_topology(4, gloo_all_reduce_frame(0.5), W, H))
    assert sum(row.count(MARKER) for row in rows) == 4
    assert all(f"c{c}" in "".join(rows) for c in range(4))


def test_static_rendering_draws_whole_arrows_and_no_marker() -> None:
    f = gloo_all_reduce_frame(0.3)
    for lines in (render_topology(4, f, W, H, static=True),
                  render_topology(4, gloo_all_reduce_frame(0.3, done=True), W, H)):
        rows = canvas_rows(lines)
        assert not any(MARKER in row for row in rows)
        where = layout(4, W, H - 3)
        for t in f.transfers:
            path = path_of(t, where)
            assert path is not None
            drawn = [rows[y][x] for x, y in path.cells]
            assert drawn[-1] == path.head  # the whole arrow, head included
            assert drawn.count(PATH) >= len(drawn) // 2  # the rest: path, and the chunk tag


def test_reductions_and_copies_have_their_own_colours() -> None:
    rs = render_topology(4, gloo_all_reduce_frame(0.5), W, H, static=True)
    ag = render_topology(4, gloo_all_reduce_frame(0.5, step=3), W, H, static=True)
    assert "step AG0" in ag[0].plain

    def styles(lines: list[Text]) -> str:
        return " ".join(str(span.style) for line in lines[2:-1] for span in line.spans)

    assert "green" in styles(rs) and "cyan" not in styles(rs)
    assert "cyan" in styles(ag) and "green" not in styles(ag)


def test_the_second_title_line_says_what_was_measured_and_what_is_simplified() -> None:
    lines = render_topology(4, gloo_all_reduce_frame(0.5), W, H)
    assert lines[1].plain.startswith("took 1 ms · gloo ring all_reduce (sends to rank-1)")


def test_states_are_drawn_next_to_their_ranks() -> None:
    """Nothing replayed: each rank's state now."""
    states = {0: Text("in all_reduce", style="yellow"), 1: "idle", 2: "idle", 3: "exited"}
    rows = canvas_rows(render_topology(4, None, W, H, states))
    text = "\n".join(rows)
    assert "in all_reduce" in text and text.count("idle") == 2 and "exited" in text
    assert "in all_reduce" in rows[0]  # rank 0 is at the top: its state above it


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_a_replayed_op_labels_its_ranks_with_their_part_in_it_not_their_state_now(
        lang: str) -> None:
    """The ranks read 'idle' while a transfer between them was animated (user trial): the
    replay is of a past op, so its ranks are labelled with what they do in the step shown
    (sends, receives), the others not at all; a rank that a finding names keeps its ⚠."""
    ui = functools.partial(i18n.ui, lang=lang)
    live = {0: "idle", 1: "idle", 2: Text("⚠ hang", style="bold red"), 3: "idle"}
    clock, a = animator()
    a.enqueue(p2p(0, 3), None)
    text = "\n".join(canvas_rows(render_topology(4, frame_at(a, clock, 0.3), W, H, live,
                                                  flagged={2}, lang=lang)))
    assert ui("state idle") not in text
    assert text.count(ui("role sends")) == 1 and text.count(ui("role receives")) == 1
    assert "⚠ hang" in text


def test_parts_are_named_only_where_the_ranks_parts_differ() -> None:
    """A ring step of all_reduce labelled every rank "sends/receives": the labels crowded
    its paths and said what the arrows say (user trial). A step whose ranks all take the same
    part names none (a finding's ⚠ stays); one whose parts differ names each."""
    live = {0: "idle", 1: "idle", 2: Text("⚠ hang", style="bold red"), 3: "idle"}
    ring = gloo_all_reduce_frame(0.5)
    assert replay_roles(ring, live, flagged={2}) == {2: live[2]}
    text = "\n".join(canvas_rows(render_topology(4, ring, W, H, live, flagged={2})))
    assert "sends" not in text and "receives" not in text and "⚠ hang" in text
    clock, a = animator()  # a chain in flight together: 0 sends, 1 both, 2 receives
    a.enqueue(_hop(0, 1, 0, 1000), None)
    a.enqueue(_hop(1, 2, 500, 1500), None)
    chain = frame_at(a, clock, GATHER_S + 0.1)
    assert len(chain.transfers) == 2
    assert {r: t.plain for r, t in replay_roles(chain, live, flagged=()).items()} == \
        {0: "sends", 1: "sends/receives", 2: "receives"}


def test_parts_are_placed_off_the_transfers_paths_where_there_is_room() -> None:
    """NCCL's broadcast chain at 4 ranks, its third step (0 -> 1 -> 2 -> 3): rank 3's
    "receives" was written across the path leaving it, while the row above it was free."""
    inst = coll("broadcast", root=0)
    clock, a = animator()
    a.enqueue(inst, sched(inst, "nccl"))
    f = frame_at(a, clock, 2.5 * 0.6)
    assert f.step_label == "pipe 2"
    rows = canvas_rows(render_topology(4, f, W, H, {r: "idle" for r in range(4)},
                                       static=True))
    where = layout(4, W, H - 3)
    on_paths = {c for t in f.transfers for c in path_of(t, where).cells}  # type: ignore
    (x, y), = [(m.start(), y) for y, row in enumerate(rows)
               for m in re.finditer("(?<!/)receives", row)]
    assert not on_paths & {(c, y) for c in range(x, x + len("receives"))}, "\n".join(rows)
    assert y == where[3][1] - 1  # above rank 3


@pytest.mark.parametrize("size", [(94, 10), (80, 9), (60, 16)])
def test_no_arrow_or_marker_is_drawn_over_a_state(size: tuple[int, int]) -> None:
    """Two ranks one above the other, with little room: the states go beside the labels,
    and at every moment of the step both read whole (the trial saw `id↑e`, `exi●ed`)."""
    for progress in (0.05, 0.25, 0.5, 0.75, 0.95):
        clock, a = animator()
        inst = coll("broadcast", n=2, root=0)
        a.enqueue(inst, sched(inst))
        lines = render_topology(2, frame_at(a, clock, progress * 0.6), *size,
                                {0: "idle", 1: "⚠ lost rank"}, flagged={1})
        text = "\n".join(line.plain for line in lines)
        assert "sends" in text and "⚠ lost rank" in text, text


def test_a_p2p_frame_draws_the_size_on_the_hop() -> None:
    clock, a = animator()
    a.enqueue(p2p(2, 3), None)
    lines = render_topology(4, frame_at(a, clock, 0.3), W, H)
    assert lines[0].plain.startswith("send 2 -> 3, 8.0 KiB")
    assert "8.0 KiB" in "".join(canvas_rows(lines))
    assert sum(row.count(MARKER) for row in canvas_rows(lines)) == 1


@pytest.mark.parametrize("size", [(0, 0), (1, 1), (10, 3), (20, 5), (60, 16), (120, 40)])
def test_every_size_gives_lines_of_that_size(size: tuple[int, int]) -> None:
    width, height = size
    for frame in (None, gloo_all_reduce_frame(0.5)):
        lines = render_topology(8, frame, width, height, {0: "idle"}, status="0.6 s/step")
        assert len(lines) == height and all(line.cell_len == width for line in lines)


def test_rank_states_from_the_model() -> None:
    session = FakeSession()
    session.feed(scripted_all_reduce(world=3, steps=1))
    states = rank_states(session.model)
    assert {r: t.plain for r, t in states.items()} == {0: "idle", 1: "idle", 2: "idle"}
    session.clock.advance(10)
    assert rank_states(session.model)[0].plain == "silent"


# ---- GPU links -------------------------------------------------------------------------------
def four_gpu_links() -> dict[tuple[int, int], str]:
    """Ranks 0-3 on GPUs 0-3 of one host, NVLinked in pairs 0-1 and 2-3 (4 links each), the
    other pairs across NUMA nodes (SYS) but 0-3 on one PCIe switch (PIX): read through the
    fake NVML into the model, as the viewer gets them."""
    nv = fake_nvml(gpus=4, nvlinks=4, levels={(0, 1): 40, (2, 3): 40, (0, 2): 50, (0, 3): 10,
                                              (1, 2): 50, (1, 3): 50})
    model = Model(clock=lambda: 0.0)
    model.apply([topology(r, "node0", nv, r) for r in range(4)])
    return model.gpu_links()


def cells_of(lines: list[Text]) -> list[list[tuple[str, str]]]:
    """The canvas rows (no titles, no legend) as (character, style) per cell."""
    out = []
    for line in lines[2:-1]:
        row = [("", "")] * line.cell_len
        for i, ch in enumerate(line.plain):
            row[i] = (ch, "")
        for span in line.spans:
            for i in range(span.start, span.end):
                row[i] = (row[i][0], str(span.style))
        out.append(row)
    return out


def test_gpu_links_are_wires_between_ranks_labelled_as_nvidia_smi_does() -> None:
    links = four_gpu_links()
    assert links == {(0, 1): "NV4", (2, 3): "NV4", (0, 2): "SYS", (0, 3): "PIX",
                     (1, 2): "SYS", (1, 3): "SYS"}
    lines = render_topology(4, None, W, H, gpu_links=links)
    assert len(lines) == H and all(line.cell_len == W for line in lines)
    rows, text = cells_of(lines), "\n".join(canvas_rows(lines))
    assert text.count("NV4") == 2 and text.count("SYS") == 3 and text.count("PIX") == 1
    where = layout(4, W, H - 3)
    for (a, b), kind in links.items():
        path = path_of(Transfer(a, b, 0, 0, False), where)
        assert path is not None
        chars, style = (NVLINK_CELLS, NVLINK_STYLE) if kind == "NV4" else \
            (PCIE_CELLS, PCIE_STYLE)
        # most of its cells are its wire (others: crossings, labels)
        mine = [rows[y][x] for x, y in path.cells if rows[y][x][0] in chars]
        assert len(mine) >= len(path.cells) * 0.6, (a, b)
        assert all(st == style for _, st in mine if _ not in "╲╱"), (a, b)
    legend = lines[-1].plain
    assert "━━ NVLink" in legend and "┄┄ PCIe" in legend and legend.startswith("● adds into")


def test_without_gpu_links_the_drawing_is_unchanged() -> None:
    f = gloo_all_reduce_frame(0.5)
    plain = render_topology(4, f, W, H, {0: "idle"}, status="s")
    assert render_topology(4, f, W, H, {0: "idle"}, status="s", gpu_links={}) == plain
    assert not any(c in line.plain for line in plain for c in NVLINK_CELLS + PCIE_CELLS)
    assert "NVLink" not in plain[-1].plain and "PCIe" not in plain[-1].plain


def test_transfers_stay_on_top_of_the_wires_and_their_labels_stay_readable() -> None:
    links = four_gpu_links()
    for progress in (0.1, 0.5, 0.9):
        lines = render_topology(4, gloo_all_reduce_frame(progress), W, H, gpu_links=links)
        rows = canvas_rows(lines)
        assert sum(row.count(MARKER) for row in rows) == 4  # every transfer's marker
        assert all(f"c{c}" in "".join(rows) for c in range(4))  # and its chunk
        text = "\n".join(rows)
        assert text.count("NV4") == 2 and text.count("PIX") == 1
        where = layout(4, W, H - 3)
        for t in gloo_all_reduce_frame(progress).transfers:  # a path hides its wire
            path = path_of(t, where)
            wire = path_of(Transfer(min(t.src, t.dst), max(t.src, t.dst), 0, 0, False), where)
            assert path is not None and wire is not None
            assert rows[path.cells[-1][1]][path.cells[-1][0]] == path.head
            drawn = [rows[y][x] for x, y in path.cells + wire.cells]
            assert not any(c in NVLINK_CELLS + PCIE_CELLS for c in drawn)
    still = canvas_rows(render_topology(4, gloo_all_reduce_frame(0.5), W, H, static=True,
                                        gpu_links=links))
    assert "\n".join(still).count("NV4") == 2  # off the middle, where a still marker sits


def test_the_legend_names_only_the_kinds_drawn_and_gives_way_to_the_status() -> None:
    pcie = render_topology(4, None, W, H, gpu_links={(0, 1): "PXB"})[-1].plain
    assert "PCIe" in pcie and "NVLink" not in pcie
    narrow = render_topology(4, None, 40, H, gpu_links={(0, 1): "NV2"}, status="0.3 s/step")
    assert narrow[-1].plain.rstrip().endswith("0.3 s/step")


def test_an_nvswitch_host_labels_its_kind_once_not_on_every_pair() -> None:
    links = {(a, b): "NV18" for a in range(8) for b in range(a + 1, 8)}
    lines = render_topology(8, None, 90, 30, gpu_links=links)
    text = "\n".join(canvas_rows(lines))
    assert text.count("NV18") == 1 and "━" in text
    assert all(f"[{r}]" in text for r in range(8))  # the ranks stay on top of the wires


@pytest.mark.parametrize("size", [(0, 0), (10, 3), (20, 5), (60, 16), (120, 40)])
def test_every_size_gives_lines_of_that_size_with_gpu_links(size: tuple[int, int]) -> None:
    width, height = size
    links = {(a, b): "NV18" if a % 2 else "SYS" for a in range(8) for b in range(a + 1, 8)}
    for frame in (None, gloo_all_reduce_frame(0.5)):
        lines = render_topology(8, frame, width, height, {0: "idle"}, status="0.6 s/step",
                                gpu_links=links)
        assert len(lines) == height and all(line.cell_len == width for line in lines)


# ---- widget ----------------------------------------------------------------------------------
class TopologyApp(App):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def compose(self) -> ComposeResult:
        yield Topology(Animator(self.clock), id="topology")


def shown(widget: Topology) -> list[str]:
    width, height = widget.outer_size
    return [strip.text for strip in widget.render_lines(Region(0, 0, width, height))]


@pytest.mark.integration
def test_widget_animates_the_instances_fed_to_it() -> None:
    async def run() -> None:
        clock = FakeClock(monotonic=0.0)
        app = TopologyApp(clock)
        async with app.run_test(size=(W, H)) as pilot:
            topo = app.query_one(Topology)
            assert "waiting for the first operation" in shown(topo)[0]
            inst = coll()
            topo.feed([(inst, sched(inst)), (p2p(1, 2), None)], n_ranks=4)
            await pilot.pause()
            first = shown(topo)
            assert "step RS0 (1 of 6)" in first[0] and "1 waiting" in first[-1]
            assert topo.animating

            clock.advance(0.3)
            topo.tick()
            await pilot.pause()
            half = shown(topo)
            assert half[0] == first[0] and half != first  # the markers moved

            clock.advance(0.6)
            topo.tick()
            await pilot.pause()
            assert "step RS1 (2 of 6)" in shown(topo)[0]

            assert topo.faster() == 0.3 and topo.slower() == 0.6
            assert topo.toggle_pause() is True
            clock.advance(30)
            topo.tick()
            await pilot.pause()
            assert "step RS1 (2 of 6)" in shown(topo)[0] and "replay held" in shown(topo)[-1]
            assert not topo.animating  # no redraws while paused
            assert topo.toggle_pause() is False

            clock.advance(3.0)
            topo.tick()
            await pilot.pause()
            assert shown(topo)[0].startswith("send 1 -> 2")

            clock.advance(0.6)  # all played: the last frame is held still, the timer stops
            topo.tick()
            await pilot.pause()
            assert not any(MARKER in line for line in shown(topo)[2:-1])
            assert not topo.animating

    asyncio.run(run())


@pytest.mark.integration
def test_widget_draws_still_frames_when_animations_are_off() -> None:
    async def run() -> None:
        clock = FakeClock(monotonic=0.0)
        app = TopologyApp(clock)
        app.animation_level = "none"
        async with app.run_test(size=(W, H)) as pilot:
            topo = app.query_one(Topology)
            inst = coll()
            topo.feed([(inst, sched(inst))], n_ranks=4)
            clock.advance(0.3)
            topo.tick()
            await pilot.pause()
            lines = shown(topo)
            assert "RS0" in lines[0] and not any(MARKER in line for line in lines[2:-1])

    asyncio.run(run())


@pytest.mark.integration
def test_widget_update_from_plans_with_the_ranks_backend() -> None:
    async def run() -> None:
        session = FakeSession(FakeClock(monotonic=0.0))
        session.feed(scripted_all_reduce(world=4, steps=2))
        app = TopologyApp(session.clock)
        async with app.run_test(size=(W, H)) as pilot:
            topo = app.query_one(Topology)
            with session.lock:
                topo.update_from(session.model, list(session.model.recent))
            await pilot.pause()
            lines = shown(topo)
            assert "step RS0 (1 of 6) · schematic: gloo ring" in lines[0]
            assert topo.n_ranks == 4 and {t.plain for t in topo.states.values()} == {"idle"}
            # a past op is replayed: not the states now, nor (a ring's step) the same part
            assert "idle" not in "".join(lines) and "sends" not in "".join(lines[2:])
            assert topo.animator.enqueued == 2 and topo.animator.waiting == 1

    asyncio.run(run())


def test_the_legend_gives_way_to_the_status() -> None:
    status = "0.6 s/step · 12 waiting, 43.2 s to go · 8 skipped"
    wide = render_topology(4, None, 120, H, status=status)[-1].plain
    narrow = render_topology(4, None, W, H, status=status)[-1].plain
    assert "adds into (reduce)" in wide and wide.rstrip().endswith(status)
    assert narrow.rstrip().endswith(status)


def test_above_32_ranks_a_heatmap_shows_who_sends_to_whom_over_the_operation():
    from commviz.tui.topology import SHADES, heatmap

    n = 40
    inst = Instance("all_reduce", tuple(range(n)), 1, 1 << 20, 0, 10, 1000, "float32", None)
    sched = schedules.schedule("all_reduce", "gloo", n, 1 << 20)
    t = [0.0]
    animator = Animator(lambda: t[0], step_s=1.0)
    animator.enqueue(inst, sched)
    t[0] = 0.5
    frame = animator.frame()
    lines = [line.plain for line in heatmap(n, frame, 2 * n + 4, n + 2, still=False)]
    assert "row → column" in lines[0] and "ranks a cell" not in lines[0]  # one rank a cell
    rows = lines[2:]
    assert len(rows) == n
    for r, line in enumerate(rows):
        cells = line[4:]  # "rank " label, then two columns a cell
        filled = [c for c in range(n) if cells[2 * c] != SHADES[0]]
        assert filled == [(r - 1) % n], f"gloo's ring: rank {r} sends only to rank {r} - 1"
    # the first step's pairs are coloured, the others are not
    first = heatmap(n, frame, 2 * n + 4, n + 2, still=False)[2 + 1]
    assert any("reverse" in str(span.style) for span in first.spans)


def test_a_heatmap_bins_ranks_when_the_matrix_does_not_fit():
    from commviz.tui.topology import heatmap

    n = 64
    inst = Instance("all_to_all", tuple(range(n)), 1, 1 << 20, 0, 10, 1000, "float32", None)
    sched = schedules.schedule("all_to_all", "gloo", n, 1 << 20)
    animator = Animator(lambda: 0.0, step_s=1.0)
    animator.enqueue(inst, sched)
    lines = [line.plain for line in heatmap(n, animator.frame(), 60, 20, still=True)]
    assert "4 ranks a cell" in lines[0] and len(lines) == 20
    assert all(len(line) <= 60 for line in lines)


def test_ranks_a_finding_names_are_red_and_its_links_dashed():
    lines = render_topology(4, None, 60, 20, alerts=[(0, 2)], flagged={2})
    cells = [(x, y) for y, line in enumerate(lines) for x, ch in enumerate(line.plain)
             if ch == "╌"]
    assert cells, "the link 0 - 2 is drawn"
    red = [span for line in lines for span in line.spans if "red" in str(span.style)]
    assert any("reverse" in str(span.style) for span in red)  # rank 2's label
    assert not [ch for line in render_topology(4, None, 60, 20) for ch in line.plain if ch == "╌"]


def test_who_waits_on_whom_is_dashed_over_the_transfers_paths() -> None:
    """hang: the red dashes between ranks 0 and 3 lay under the dots of the all_reduce
    replayed; they were nowhere to be seen (user trial). They go over the transfer's dots,
    along its line; the other transfers keep theirs."""
    f = gloo_all_reduce_frame(0.5, done=True)  # RS0: 0 -> 3, 1 -> 0, 2 -> 1, 3 -> 2
    lines = render_topology(4, f, W, H, alerts=[(3, 0)], flagged={0, 3})
    rows = canvas_rows(lines)
    path = path_of(Transfer(0, 3, 1, 1024, True), layout(4, W, H - 3))
    assert path is not None
    drawn = [rows[y][x] for x, y in path.cells]
    assert drawn.count(ALERT) >= len(drawn) - 3, drawn  # all but the head and the chunk tag
    assert drawn[-1] == path.head
    red = [cell for row in cells_of(lines[2:-1]) for cell in row if cell[0] == ALERT]
    assert red and all("red" in style for _, style in red)
    assert "".join(rows).count(PATH) >= 3 * (len(drawn) - 3)  # the other three: dots


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_a_p2p_transfer_claims_neither_adds_nor_copies(lang: str) -> None:
    """ring_allreduce by hand: its isends were drawn cyan, "copies", though half of them the
    receiver adds. What a program does with a received tensor is not reported: a p2p
    transfer has a colour of its own, and the legend says only that it is a transfer."""
    ui = functools.partial(i18n.ui, lang=lang)
    clock, a = animator()
    a.enqueue(p2p(2, 3), None)
    lines = render_topology(4, frame_at(a, clock, 0.3), 100, H, lang=lang)
    styles = {style for row in cells_of(lines[2:-1]) for ch, style in row if ch.strip()
              and not ch.isdigit() and ch not in "[]"}
    assert any("yellow" in style for style in styles), styles
    assert not any("cyan" in style or "green" in style for style in styles), styles
    legend = lines[-1].plain
    assert ui("transfer").strip() in legend and ui("copies").strip() not in legend
    assert "yellow" in str(lines[-1].spans[0].style)
    narrow = render_topology(4, frame_at(a, clock, 0.3), 40, H, status="0.6 s/step",
                             lang=lang)[-1].plain
    assert narrow.startswith(MARKER + ui("transfer short")) and narrow.endswith("0.6 s/step")
    collective = render_topology(4, gloo_all_reduce_frame(0.5), 100, H, lang=lang)[-1].plain
    assert ui("adds into").strip() in collective and ui("copies").strip() in collective


def test_a_findings_name_on_screen_has_no_underscore() -> None:
    """'⚠ lost_rank: silent 3s' showed the recording's identifier (user trial)."""
    from commviz.tui.panels.words import finding_name

    assert [finding_name("lost_rank", lang) for lang in ("en", "pt")] == \
        ["lost rank", "rank perdido"]


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_every_findings_name_fits_a_ranks_label_whole(lang: str) -> None:
    """'⚠ rank atrasa…' beside rank 3 in Portuguese at 120 columns (user trial)."""
    from commviz.tui.panels.words import finding_name
    from commviz.tui.topology import STATE_W
    from commviz.viewer.diagnose import TYPES

    for kind in TYPES:
        assert len(f"⚠ {finding_name(kind, lang)}") <= STATE_W, kind


@pytest.mark.parametrize("n", [3, 5])
def test_an_odd_ring_reaches_down_to_the_bottom_of_its_area(n: int) -> None:
    """3 ranks sat on a triangle in the top three quarters of the replay, its bottom rows
    left empty (teacher's trial of all_reduce --ranks 3)."""
    even = layout(n + 1, W, H - 3)
    odd = layout(n, W, H - 3)
    assert max(y for _, y in odd.values()) == max(y for _, y in even.values())
    assert odd[0][1] == even[0][1]  # rank 0 stays at the top


def fleet_hosts(rank: int) -> str:
    return f"node{rank // 8:03d}"  # 128 nodes of 8, as bench/fleet.py's


def test_a_1024_rank_op_replays_as_nodes_within_10_s_at_the_default_speed() -> None:
    from commviz.knowledge.hierarchy import Scaled
    from commviz.tui.app import REPLAY_STEP_S

    big = coll(n=1024, size=25 << 20)
    s = plan(big, "nccl", fleet_hosts)  # drawn as nodes: a full ring's schedule took 5 s
    assert isinstance(s, Scaled) and (s.nodes, s.per_node, s.real_steps) == (128, 8, 2046)
    clock, a = animator(step_s=REPLAY_STEP_S)
    a.enqueue(big, s)
    assert a.lag_s <= 10.0
    f = frame_at(a, clock, 2 * REPLAY_STEP_S + 0.01)
    assert f.transfers == () and f.step == 2
    assert frame_label(f) == "all_reduce · RS 137-204 of 1023 (drawn step 3 of 30) · " \
        "schematic: nccl ring over 128 nodes of 8"
    assert frame_at(a, clock, 10.0).done
    assert isinstance(plan(big, "nccl"), Scaled)  # hosts not known: phases only
    assert not isinstance(plan(coll(n=64), "nccl"), Scaled)  # 64 ranks: step by step


def test_the_queue_never_promises_more_than_its_budget_and_keeps_the_newest() -> None:
    from commviz.tui.animation import QUEUE_BUDGET_S

    clock, a = animator(step_s=0.3, max_waiting=16)
    sizes = [1 << k for k in range(10, 40)]  # no two alike: nothing collapses
    for seq, size in enumerate(sizes):
        inst = coll(n=1024, size=size, seq=seq)
        a.enqueue(inst, plan(inst, "nccl", fleet_hosts))
        assert counts_add_up(a)
        assert a.lag_s <= QUEUE_BUDGET_S + 30 * 0.3  # what waits, and the one shown
    assert a.skipped > 0 and f"{a.skipped} skipped" in a.summary()
    shown = frame_at(a, clock, 9.0 + 0.01).instance.seq  # the first, then the oldest kept
    assert shown == len(sizes) - a.waiting - 1 and a.waiting * 9.0 <= QUEUE_BUDGET_S
    a.slower(), a.slower(), a.slower()  # 2.4 s a step: what waits would take longer
    assert a.lag_s <= QUEUE_BUDGET_S + 30 * 2.4 and counts_add_up(a)
    assert frame_at(a, clock, 1e6).instance.seq == len(sizes) - 1  # the newest is kept


def test_a_small_demos_step_at_the_slowest_speed_is_within_the_budget() -> None:
    """The objects demo queues about 40 steps at once; at 2.4 s a step none is skipped."""
    clock, a = animator(step_s=2.4, max_waiting=16)
    ops = ["all_reduce", "broadcast", "all_gather", "gather", "scatter"]
    for k in range(15):
        inst = coll(ops[k % 5], seq=k, root=0 if ops[k % 5] in ("broadcast", "gather",
                                                                 "scatter") else None)
        a.enqueue(inst, sched(inst))
    assert a.skipped == 0 and counts_add_up(a)
