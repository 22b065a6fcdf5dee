"""Rich renderables drawn from the model: testable without running an app."""

from __future__ import annotations

import dataclasses
import functools
import io
import linecache
import math
import os
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from commviz.knowledge import costmodel, schedule_notes, schedules
from commviz.knowledge.bandwidth import gbps_text
from commviz.text import explain
from commviz.tui.animation import AnimFrame
from commviz.viewer import findings_text
from commviz.viewer import plain_text as text
from commviz.viewer.diagnose import Finding, by_cause
from commviz.viewer.model import HostClock, Instance, Model
from commviz.wire import protocol

SPARK = "▁▂▃▄▅▆▇█"
SILENT_AFTER_S = 1.5  # three missed heartbeats


def sparkline(values: list[float], top: float) -> str:
    if not values or top <= 0:
        return ""
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1)))] for v in values)


# (title's UI string key, width, right-aligned) of the ranks panel's columns, most important
# first: a narrow panel crops from the right
RANK_COLUMNS = (("col rank", 4, True), ("col host", 8, False), ("col device", 6, False),
                ("col state", 22, False), ("col load", 36, False),
                ("col bytes", 13, True))


# a finding's type in Portuguese where a rank's state or a ring label shows it: within
# topology.STATE_W with its "⚠ " ("rank atrasado" was cut to "rank atrasa…")
_SHORT_PT = {"straggler": "atrasado", "failed": "falha"}


def finding_name(kind: str, lang: str) -> str:
    """A finding's type as the screen names it: its own name in English (``hang``, ``lost
    rank``), its title in Portuguese (``travamento``), shortened where it is long."""
    if lang == "en":
        return kind.replace("_", " ")
    return _SHORT_PT.get(kind) or findings_text.TITLES[kind][lang].lower()


def ranks_table(model: Model, now: float, now_ns: int | None = None,
                flagged: dict[int, Finding] | None = None, lang: str = "en",
                width: int | None = None, rows: int | None = None) -> Text:
    """One line per rank in fixed-width columns: plain text lines are cheap to draw every
    frame, where a table would measure every cell again. A panel narrower than the columns
    (``width``) leaves out the byte counts first, then cuts the load with an ellipsis, never
    a rank's state. ``flagged``: ranks a finding names, with that finding. Under the ranks,
    those the others waited for at collectives, if any. In fewer ``rows`` than that (None:
    any), the last row names the ranks left out (8 ranks at 80x24 showed 4, silently)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    ui = functools.partial(explain.ui, lang=lang)
    inflight: dict[int, list] = {}
    for op in model.inflight.values():
        inflight.setdefault(op.rank, []).append(op)
    out = Text(no_wrap=True, overflow="crop")
    widths = _column_widths(width)
    state_w = widths[3] if len(widths) > 3 else RANK_COLUMNS[3][1]
    _row(out, widths, [Text(ui(title), style="bold") for title, _, _ in RANK_COLUMNS])
    nodes = model.nodes()
    clocks = model.clock_offsets() if len(nodes) > 1 else {}
    order = [r for ranks in nodes.values() for r in ranks]
    row_at: dict[int, int] = {}  # the line of each rank's row
    for rank in order:
        s = model.ranks[rank]
        if clocks and rank == nodes[s.host][0]:  # several nodes: a line heads each
            out.append(_cut(node_line(clocks[s.host], nodes[s.host], lang), width) + "\n",
                       style="bold cyan")
        idle = False
        # what a finding puts before the state of a rank it names ("⚠ hang: ")
        flag = _flagged(flagged[rank], "", idle, lang, state_w) \
            if flagged and rank in flagged else ""
        if s.exit_code:  # its process failed, as its launcher says: plainer than a finding
            state, flag = Text(f"⚠ {text.process_end(s.exit_code, lang)}", style="bold red"), ""
        elif s.exited:
            state = Text(ui("state exited"), style="dim")
        elif s.exit_code is not None:  # gone without a goodbye, with exit code 0
            state = Text(text.process_end(s.exit_code, lang), style="dim")
        elif now - s.last_seen > SILENT_AFTER_S:
            state = Text(ui("state silent for").format(f"{now - s.last_seen:.0f}"),
                         style="bold red")
        elif rank in inflight:
            op = min(inflight[rank], key=lambda o: o.t_start)
            state = Text(_waiting_in(op.op, op.seq, max(0, now_ns - op.t_start),
                                     state_w - len(flag), lang), style="bold yellow")
        elif s.last_op:
            state = Text(_done_with(s.last_op, state_w - len(flag), lang), style="green")
            idle = True
        else:
            state, idle = Text(ui("state idle"), style="dim"), True
        if flag:
            state = Text(_flagged(flagged[rank], state.plain, idle, lang, state_w),
                         style="bold red")
        state = Text(_whole_words(state.plain, state_w), style=state.style)
        row_at[rank] = out.plain.count("\n")
        _row(out, widths, [Text(str(rank)), Text(s.host), Text(s.device), state, _load(s, lang),
                   Text(f"{_short(s.bytes_in, lang)}/{_short(s.bytes_out, lang)}")])
        rates = link_rates(s.telemetry[-1][1]) if s.telemetry else ""
        if rates:  # under the load, across the byte counts: a GPU's links get a line
            out.append(_cut(" " * LINKS_AT + rates, width) + "\n", style="cyan")
    late = text.late_line(model.late_arrivals(), lang)
    if late:  # under the ranks: whom the others waited for, the longest waited for first
        out.append((late if width is None else _whole_words(late, width)) + "\n",
                   style="yellow")
    out.rstrip()
    lines = out.split("\n")
    if rows is None or len(lines) <= rows or rows < 3:
        return out
    left = [r for r in order if row_at[r] >= rows - 1]
    if not left:  # only lines under the ranks are left out
        return Text("\n").join(lines[:rows])
    note = explain.ui("lanes left out", lang).format(text.ranks_phrase(left))
    return Text("\n").join([*lines[:rows - 1], Text(_cut(note, width), style="dim")])


def _waiting_in(op: str, seq: int, waited_ns: int, width: int, lang: str) -> str:
    """A rank's state inside an op ("in all_reduce #7 12.3 ms") in ``width``: the time
    waited stays whole, with its unit; the op's number goes first, then its name is
    shortened (its number is in the log and the findings), down to MIN_OP_SHOWN, under
    which the time goes rather than the name."""
    waited = explain.number(text.duration(waited_ns), lang)
    state = explain.ui("state in", lang).format(f"{op} #{seq} {waited}")
    if len(state) > width:
        state = explain.ui("state in", lang).format(f"{op} {waited}")
    if len(state) > width:
        room = len(op) - (len(state) - width)
        if room >= MIN_OP_SHOWN:
            return explain.ui("state in", lang).format(f"{text.shorten_middle(op, room)} {waited}")
        state = explain.ui("state in", lang).format(op)
        room = len(op) - (len(state) - width)
        state = explain.ui("state in", lang).format(text.shorten_middle(op, max(1, room)))
    return state


MIN_OP_SHOWN = 8  # characters of an op's name in a waiting rank's state, at least


def _done_with(op: str, width: int, lang: str) -> str:
    """An idle rank's state ("done all_reduce") in ``width``: a long op's name shortened in
    its middle ("done reduce_sca…tensor"), not cut to "done…"."""
    state = explain.ui("state done", lang).format(op)
    room = len(op) - (len(state) - width)
    if len(state) <= width or room < MIN_OP_SHOWN:
        return state
    return explain.ui("state done", lang).format(text.shorten_middle(op, room))


def _whole_words(line: str, width: int) -> str:
    """``line`` in ``width``, cut after a whole word with an ellipsis (a time cut mid-unit
    read as another time)."""
    if len(line) <= width:
        return line
    cut = line[:width - 1]
    return (cut[:cut.rfind(" ")] if " " in cut else cut).rstrip() + "…"


def _flagged(f: Finding, state: str, idle: bool, lang: str, width: int) -> str:
    """A flagged rank's state: the finding's name before it. A rank missing from the op of
    a hang or a failed op reads what the finding says of it if idle ("not in all_reduce
    #7": "hang: done all_reduce" read as a contradiction), else its own state (in another
    op, silent): the findings panel names the finding, the name left no room for either.
    A state that does not fit after the name is left out ("⚠ straggler", not
    "⚠ straggler: d…")."""
    if not (f.type in ("hang", "failed") and f.op and f.seq is not None):
        full = f"⚠ {finding_name(f.type, lang)}: {state}"  # the state cut: the name alone
        return full if not state or len(full) <= width else f"⚠ {finding_name(f.type, lang)}"
    if not idle:
        return f"⚠ {state}"
    not_in = explain.ui("state not in", lang)
    full = f"⚠ {not_in.format(f'{f.op} #{f.seq}')}"
    return full if len(full) <= width else f"⚠ {not_in.format(f'#{f.seq}')}"


def node_line(clock: HostClock, ranks: list[int], lang: str = "en") -> str:
    """``text.node_line`` (the headless viewer's, in English) in ``lang``."""
    if lang == "en":
        return text.node_line(clock, ranks)
    ui = functools.partial(explain.ui, lang=lang)
    if clock.local:
        when = ui("viewer's clock")
    elif clock.offset_ns is None:
        when = ui("clock unknown")
    else:
        when = ui("clock offset").format(
            offset=explain.number(f"{clock.offset_ns / 1e6:+.3f}", lang),
            error=explain.number(f"{clock.uncertainty_ns / 1e6:.3f}", lang))
    who = ("ranks " if len(ranks) > 1 else "rank ") + ", ".join(map(str, ranks))
    return ui("node").format(host=clock.host, ranks=who, when=when)


LINKS_AT = sum(width + 1 for _, width, _ in RANK_COLUMNS[:4])  # where the load column starts


def link_rates(tel: dict[str, float | None]) -> str:
    """A GPU's NVLink and PCIe throughput from one telemetry sample, e.g. ``NVL ↑12.3 ↓11.9
    GB/s  PCIe ↑0.2 ↓0.1 GB/s``; what NVML did not give is left out, never shown as 0."""
    parts = []
    for name, tx, rx in (("NVL", "nvlink_tx_bps", "nvlink_rx_bps"),
                         ("PCIe", "pcie_tx_bps", "pcie_rx_bps")):
        rates = [(arrow, v) for arrow, v in (("↑", tel.get(tx)), ("↓", tel.get(rx)))
                 if v is not None]
        if rates:
            top = max(v for _, v in rates)
            unit, scale = next((u, f) for u, f in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3))
                               if top >= f / 10 or u == "kB/s")
            parts.append(f"{name} " + " ".join(f"{a}{v / scale:.1f}" for a, v in rates)
                         + f" {unit}")
    return "  ".join(parts)


def gpu_links_line(model: Model, lang: str = "en") -> str:
    """One line on how the ranks' GPUs are joined (NVML, ``nvidia-smi topo -m``'s labels),
    by kind: the pairs, or how many; without a GPU, why (the ranks' own note); "" before any
    rank has said."""
    links = model.gpu_links()
    if links:
        by_kind: dict[str, list[str]] = {}
        for (a, b), kind in sorted(links.items()):
            by_kind.setdefault(kind, []).append(f"{a}↔{b}")
        return explain.ui("gpu links", lang) + " · ".join(
            f"{kind} {' '.join(pairs)}" if len(pairs) <= 3 else
            f"{kind} {explain.ui('pairs', lang).format(n=len(pairs))}"
            for kind, pairs in by_kind.items())
    notes: dict[str, list[int]] = {}
    for rank in sorted(model.gpu_topology):
        note = model.gpu_note(rank)
        if note:
            notes.setdefault(note, []).append(rank)
    if not notes:
        return ""
    note, ranks = max(notes.items(), key=lambda kv: len(kv[1]))
    if len(ranks) > 2 and ranks[-1] - ranks[0] == len(ranks) - 1:
        who = explain.ui("on ranks", lang).format(f"{ranks[0]}-{ranks[-1]}")
    else:
        who = explain.ui("on ranks" if len(ranks) > 1 else "on rank", lang).format(
            ", ".join(map(str, ranks)))
    more = explain.ui_n("other reasons", len(notes) - 1, lang) if len(notes) > 1 else ""
    why = explain.gpu_note(note.removeprefix("no GPU: "), lang)
    return explain.ui("no gpu on", lang).format(who=who, note=why, more=more)


MIN_CUT_COLUMN = 8  # a column cut narrower than this is left out rather than shown in part


def _column_widths(width: int | None) -> list[int]:
    """The ranks panel's columns that fit ``width`` (None: all), the last perhaps cut."""
    widths, left = [], width
    for _, column, _ in RANK_COLUMNS:
        if left is not None and left < min(column, MIN_CUT_COLUMN):
            break
        shown = column if left is None else min(column, left)
        widths.append(shown)
        left = None if left is None else left - shown - 1
    return widths


def _cut(line: str, width: int | None) -> str:
    return line if width is None or len(line) <= width else line[:width - 1] + "…"


def _row(out: Text, widths: list[int], cells: list[Text]) -> None:
    for i, ((_, _, right), width, cell) in enumerate(zip(RANK_COLUMNS, widths, cells)):
        cell.truncate(width, overflow="ellipsis")
        pad = Text(" " * (width - cell.cell_len))
        out.append_text(pad + cell if right else cell + pad)
        out.append(" " if i < len(widths) - 1 else "\n")


def _short(n: float, lang: str = "en") -> str:
    """Bytes in at most 6 characters: 512B, 12.0K, 3.5M, 1.2G."""
    return _bytes(n, lang).replace(" ", "").replace("iB", "")


def _load(s, lang: str = "en") -> Text:
    """The rank's last 3 s of telemetry (2 Hz): its GPU's utilization, memory and power from
    NVML, or, on CPU, its process's CPU% and resident memory, labelled so."""
    samples = [tel for _, tel in list(s.telemetry)[-6:]]
    if not samples:
        return Text("")
    last = samples[-1]

    def series(key: str) -> list[float]:
        return [t.get(key) or 0.0 for t in samples]

    if last.get("gpu_util_pct") is not None:
        util, mem, power = series("gpu_util_pct"), series("gpu_mem_used"), series("gpu_power_w")
        total = last.get("gpu_mem_total") or max(mem) or 1.0
        out = Text(f"GPU {util[-1]:3.0f}% {sparkline(util, 100)} "
                   f"mem {sparkline(mem[-4:], total)} {_short(mem[-1], lang)}", style="cyan")
        if last.get("gpu_power_w") is not None:
            out.append(f" {power[-1]:.0f}W {sparkline(power[-4:], max(power) or 1.0)}")
        return out
    cpu, rss = series("cpu_pct"), series("rss_bytes")
    return Text(f"CPU {cpu[-1]:3.0f}% {sparkline(cpu, 100)} "
                f"rss {sparkline(rss[-4:], max(rss) or 1.0)} {_short(rss[-1], lang)}", style="cyan")


STATS_ROWS = 6  # the shapes that completed most recently: the teaching panels need the room


def stats_table(model: Model, lang: str = "en") -> StatsTable:
    size, count = explain.ui("col size", lang), explain.ui("col count", lang)
    rows = [(row["op"], str(row["ranks"]), _bytes(row["size"], lang), str(row["count"]),
             f"{row['time_p50_us']:.0f}", explain.number(gbps_text(row["algbw_gbps"]), lang),
             explain.number(gbps_text(row["busbw_gbps"]), lang))
            for row in model.latest_stats(STATS_ROWS)]
    return StatsTable(("op", "n", size, count, "p50 µs", "algbw", "busbw"), rows)


OP_MIN = 14  # "reduce_scatter" whole; a longer name shortened to it still reads: reduce_…tensor
# How the statistics fit a panel, tried in turn: (columns' gap, columns left out, by index).
# Two spaces only where every name fits whole; then one, then algbw (busbw is what
# nccl-tests' users compare), the group size and the calls go before the name is cut
# under OP_MIN. The numbers themselves are never cut.
STATS_LAYOUTS = ((2, ()), (1, ()), (1, (5,)), (1, (5, 1)), (1, (5, 1, 3)))


class StatsTable:
    """The statistics in nccl-tests' columns, laid out for the width they are drawn at: the
    op name comes before the less important numbers (``STATS_LAYOUTS``); one still too
    long is shortened in its middle, so that its end, which tells ``reduce_scatter_tensor``
    from ``reduce_scatter_single``, stays."""

    def __init__(self, heads: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
        self.heads, self.rows = heads, rows

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def layout(self, width: int) -> tuple[int, list[int], list[int]]:
        """The gap, the columns shown after the op's (indices) and every column's width at
        ``width``, the op name's its room."""
        widths = [max([len(head), *(len(row[i]) for row in self.rows)])
                  for i, head in enumerate(self.heads)]
        for gap, dropped in STATS_LAYOUTS:
            shown = [i for i in range(1, len(widths)) if i not in dropped]
            room = width - sum(widths[i] + gap for i in shown)
            if room >= (widths[0] if gap > 1 else min(widths[0], OP_MIN)):
                break
        return gap, shown, [max(len("op"), room), *widths[1:]]

    def __rich_console__(self, console: Any, options: Any) -> Any:
        gap, shown, widths = self.layout(options.max_width)
        room = widths[0]
        out = Text(no_wrap=True, overflow="crop")
        for k, row in enumerate([self.heads, *self.rows]):
            line = f"{text.shorten_middle(row[0], room):<{room}}" + "".join(
                " " * gap + f"{row[i]:>{widths[i]}}" for i in shown)
            out.append(line + ("\n" if k < len(self.rows) else ""),
                       style="bold" if k == 0 else "")
        yield out


def _bytes(n: float, lang: str) -> str:
    return explain.number(text.human_bytes(n), lang)


MAX_STEPS_SHOWN = 8  # around the current one: the explanation below keeps its rows
MAX_GRID_RANKS = 8     # ranks up to which the steps are drawn as the buffers grid
MIN_GRID_RANKS = 2     # rank columns a grid shows at least, else the steps are listed
GRID_MAX_W = 60        # the panel's inner width at 160 columns, when no width is given
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def phases(model: Model, lang: str = "en", frame: AnimFrame | None = None,
           fit: costmodel.Fit | None = None, nccl: Any = None, width: int | None = None,
           rows: int | None = None, demo: str | None = None) -> Text:
    """Inside one operation: its measured time, its cost model, and the steps its backend
    runs with the chunks each rank holds after each step, drawn from its schedule.

    It follows the replay (``frame``: the instance played and the step shown, highlighted),
    else the latest operation. Collective inner steps are not reported by the backends: they
    are labelled schematic, while the time and skew are measured. ``nccl`` (the session's
    ``nccl_log`` reader) says which algorithm NCCL chose, when its log said so. The steps
    fit ``width`` (the panel's inner width; None: GRID_MAX_W), saying what they leave out.
    In fewer ``rows`` than it takes (None: any), a collective leaves out its cost model and
    schematic note (the replay's title has the note), then shows fewer steps. A round of
    the ``ring_allreduce`` demo says which step of its ring it is.
    """
    if frame is None and not model.recent:
        return Text(explain.ui("no operation yet", lang), style="dim")
    inst = frame.instance if frame is not None else model.recent[-1]
    out = Text()
    if frame is not None and frame.round:
        out = _p2p_members(frame, lang)
        return ring_demo_round(frame.members, lang) + out if demo == "ring_allreduce" else out
    if inst.op in protocol.P2P:
        src, dst = inst.group
        out.append(f"{inst.op}: rank {src} → rank {dst}, {_bytes(inst.size, lang)}\n",
                   style="bold")
        out.append(f"{explain.ui('measured', lang)}  "
                   f"{explain.number(text.duration(inst.time_ns), lang)}\n")
        # NCCL connects a pair on its first transfer (lazily); gloo connected every pair
        # when the process group was created, so there its first transfer set nothing up
        if _backend_of(model, inst.group) != "nccl":
            out.rstrip()  # the panel's height is its text's: no blank line at the end
            return out
        first = model.first_transfer_ns.get((src, dst))
        if inst.seq == 1:
            out.append(explain.ui("first transfer", lang), style="italic")
        elif first is not None:
            out.append(explain.ui("first transfer took", lang).format(
                src=src, dst=dst, ms=explain.number(f"{first / 1e6:.1f}", lang)), style="italic")
        return out
    backend = _backend_of(model, inst.group)
    if backend is None:
        return Text(explain.ui("backend not known", lang).format(op=inst.op), style="dim")
    n = len(inst.group)
    try:
        sched = schedules.schedule(inst.op, backend, n, inst.size, _root_of(inst))
    except ValueError as exc:
        return Text(f"{inst.op}: {exc}", style="dim")
    current = frame.step if frame is not None else len(sched.steps) - 1
    nccl_text = _nccl_text(nccl, inst.op, inst.size, n, lang) \
        if backend == "nccl" and nccl is not None else None
    draw = functools.partial(_collective, sched, inst, backend, fit, nccl_text, current, lang,
                             width or GRID_MAX_W)
    out = draw(False, MAX_STEPS_SHOWN)
    if rows is not None and text_rows(out, width or GRID_MAX_W) > rows:
        for steps in range(MAX_STEPS_SHOWN, 0, -1):
            out = draw(True, steps)
            if text_rows(out, width or GRID_MAX_W) <= rows:
                break
    return out


MEMBERS_SHOWN = 8  # p2p transfers listed one per line; the rest counted


def _p2p_members(frame: AnimFrame, lang: str) -> Text:
    """``phases`` of a round of p2p transfers the replay draws as one: each one's pair,
    number, size and measured time (the panel showed only the first of them)."""
    members = frame.members
    out = Text(explain.ui("inside round", lang).format(n=len(members), op=frame.instance.op)
               + "\n", style="bold")
    for i in members[:MEMBERS_SHOWN]:
        took = explain.number(text.duration(i.time_ns), lang)
        out.append(f"  rank {i.group[0]} → rank {i.group[1]}  #{i.seq}  "
                   f"{_bytes(i.size, lang)}  {took}\n")
    if len(members) > MEMBERS_SHOWN:
        out.append(explain.ui("and more", lang).format(n=len(members) - MEMBERS_SHOWN).strip())
    out.rstrip()
    return out


def ring_demo_round(members: Sequence[Instance], lang: str) -> Text:
    """Which step of the ``ring_allreduce`` demo's ring a round of its transfers is: each
    iteration runs 2(n-1) rounds of one isend per rank to its right, so each pair's k-th
    transfer is step (k-1) mod 2(n-1) + 1; the first n-1 reduce-scatter, the others
    all-gather (the demo's loops). Empty when the round is not one of that ring's."""
    senders = {i.group[0] for i in members}
    n, seqs = len(senders), {i.seq for i in members}
    if n < 2 or len(members) != n or len(seqs) != 1 or senders != set(range(n)) or \
            any(i.group[1] != (i.group[0] + 1) % n for i in members):
        return Text()
    total = 2 * (n - 1)
    k = (seqs.pop() - 1) % total + 1
    phase = "ring demo reduce" if k < n else "ring demo gather"
    line = explain.ui(phase, lang).format(k=k, total=total, j=k if k < n else k - n + 1,
                                          m=n - 1)
    return Text(line + "\n", style="bold cyan")


def _collective(sched: schedules.Schedule, inst: Instance, backend: str,
                fit: costmodel.Fit | None, nccl_text: str | None, current: int, lang: str,
                width: int, brief: bool, steps: int) -> Text:
    """``phases`` of a collective: ``brief``, without its cost model and schematic note;
    ``steps``, at most that many around the ``current`` one."""
    out, n = Text(), len(inst.group)
    algorithm = explain.ui("algorithm", lang).format(
        backend=backend, algorithm=schedule_notes.algorithm(sched, lang))
    out.append(f"{op_described(inst, lang)} · {algorithm} · {n} ranks · "
               f"S = {_bytes(inst.size, lang)}\n", style="bold")
    times = f"{explain.ui('time', lang)} {text.duration(inst.time_ns)} · " \
        f"{explain.ui('log skew', lang)} {text.duration(inst.skew_ns)}"
    out.append(f"{explain.ui('measured', lang)}  {explain.number(times, lang)}\n")
    if not brief:
        _cost_line(out, sched, inst, fit, lang)
    if nccl_text is not None:
        out.append(f"NCCL  {nccl_text}\n", style="bold")
    if not brief:
        out.append(f"{explain.ui('schematic', lang)}  {schedule_notes.note(sched, lang)}\n",
                   style="italic dim")
    shown = _window(len(sched.steps), current, steps)
    layout = grid_layout(sched, inst.group, lang, width)
    if n <= MAX_GRID_RANKS and layout.ranks >= min(n, MIN_GRID_RANKS):
        left_out = _left_out(layout, inst.group, lang)
        _grid(out, sched, inst.group, current, lang, layout, shown)
    else:  # too many ranks, or chunks: the steps without the buffers
        left_out = ""
        _steps(out, sched, inst.group, current, lang, width, shown)
    if left_out and brief:  # the cost model too, in the same row (it went unmentioned)
        out.append(explain.ui("not shown larger", lang).format(
            f"{left_out}, {explain.ui('cost', lang).lower()}") + "\n", style="dim italic")
    elif left_out:
        out.append(explain.ui("not shown", lang).format(left_out) + "\n", style="dim italic")
    out.rstrip()  # the panel's height is its text's: no blank line under the grid
    return out


def text_rows(shown: Text, width: int) -> int:
    """The rows ``shown`` takes wrapped at ``width``, as a panel wraps it."""
    return len(shown.wrap(_measuring_console(), width))


@functools.cache
def _measuring_console() -> Console:
    return Console(file=io.StringIO(), width=GRID_MAX_W, color_system=None)


def _nccl_text(nccl: Any, op: str, size: int, n: int, lang: str) -> str:
    """The algorithm NCCL's log gave for an op, or why it is unknown, in ``lang``."""
    said = nccl.algorithm_text(op, size, n)
    if lang == "en":
        return said
    choice = nccl.choice(op, size, n)
    if choice is not None:
        return explain.ui("nccl algorithm", lang).format(choice.label())
    return explain.NCCL_TEXTS_PT.get(said, said)


def _cost_line(out: Text, sched: schedules.Schedule, inst: Instance,
               fit: costmodel.Fit | None, lang: str) -> None:
    c = costmodel.cost(sched)
    out.append(f"{explain.ui('cost', lang)}  ", style="bold")
    out.append(explain.ui_n("each rank sends", c.steps, lang, bytes=_bytes(c.sent, lang)))
    if fit is None:
        out.append(f" · {explain.ui('predicted', lang).lower()}: "
                   f"{explain.ui('needs shapes', lang)}\n", style="dim")
        return
    predicted_us = fit.predict(c) * 1e6
    versus = explain.ui("predicted vs", lang).format(predicted=f"{predicted_us:.0f}",
                                                     measured=f"{inst.time_ns / 1e3:.0f}")
    out.append(f" · {explain.ui('predicted', lang).lower()} {versus}\n")
    alpha = f"{fit.alpha_s * 1e6:.0f}"
    beta = "" if math.isinf(fit.beta_bps) else \
        explain.number(f"{fit.beta_bps / 1e9:.2g} GB/s", lang)
    # a term the fit set to nothing was not measured: said so, not shown as ∞ or 0
    key = "fit line" if beta and alpha != "0" else "fit no beta" if not beta else "fit no alpha"
    out.append("      " + explain.ui(key, lang).format(alpha=alpha, beta=beta)
               + f"{explain.ui('fitted on', lang).format(shapes=fit.shapes)}\n", style="dim")


def _window(steps: int, current: int, most: int = MAX_STEPS_SHOWN) -> range:
    """At most ``most`` steps, keeping the current one in view."""
    first = min(max(0, current - most // 2), max(0, steps - most))
    return range(first, min(steps, first + most))


ROOT_GIVES = frozenset({"broadcast", "scatter", "broadcast_object_list", "scatter_object_list"})


def op_described(inst: Instance, lang: str) -> str:
    """The op's name, and for a rooted one its root: "broadcast from rank 0", "reduce to
    rank 3"."""
    if inst.op not in protocol.ROOTED or inst.root is None:
        return inst.op
    key = "op from root" if inst.op in ROOT_GIVES else "op to root"
    return explain.ui(key, lang).format(op=inst.op, root=inst.root)


def _sends(step: schedules.Step, ranks: tuple[int, ...], room: int | None = None,
           lang: str = "en") -> str:
    """A step's transfers ("0→1 c0  1→2 c1"); in ``room``, as many as fit then how many
    more, or only how many."""
    parts = [f"{ranks[t.src]}→{ranks[t.dst]} c{t.chunk}" for t in step.transfers]
    line = "  ".join(parts)
    if room is None or len(line) <= room:
        return line
    for listed in range(len(parts) - 1, 0, -1):
        line = "  ".join(parts[:listed]) + "  " + explain.ui("n more", lang).format(
            n=len(parts) - listed)
        if len(line) <= room:
            return line
    return explain.ui_n("transfers", len(parts), lang)


def _steps(out: Text, sched: schedules.Schedule, ranks: tuple[int, ...], current: int,
           lang: str, width: int, shown: range) -> None:
    """Many ranks: the steps ``shown`` as a list (the grid would not fit), each on one row
    of ``width``."""
    for k in shown:
        step = sched.steps[k]
        label = schedule_notes.step_label(step.label, lang)
        out.append(f"{label:>6} ", style="bold reverse" if k == current else "bold cyan")
        out.append(_sends(step, ranks, width - max(6, len(label)) - 1, lang) + "\n")


@dataclasses.dataclass(frozen=True)
class GridLayout:
    """How the buffers grid fits a width: its label column's width, each rank column's
    (chunks, or the rank's name), how many ranks' columns fit, and the transfers column's
    width, 0 where it does not fit beside them."""

    label_w: int
    column_w: int
    ranks: int
    sends_w: int


def grid_layout(sched: schedules.Schedule, ranks: tuple[int, ...], lang: str,
                width: int) -> GridLayout:
    """The buffers grid in ``width``: as many rank columns as fit, then each step's
    transfers beside them where those fit too."""
    label_w = max([6, len(explain.ui("start", lang))]
                  + [len(schedule_notes.step_label(s.label, lang)) for s in sched.steps])
    column_w = max(len(_slots(sched, 0)), len(f"r{max(ranks)}"))
    shown = min(len(ranks), max(0, (width - label_w - 1) // (column_w + 1)))
    sends_w = max([len(_sends(s, ranks)) for s in sched.steps] + [0])
    beside = shown == len(ranks) and label_w + 1 + sends_w + 1 + shown * (column_w + 1) <= width
    return GridLayout(label_w, column_w, shown, sends_w if beside else 0)


def _slots(sched: schedules.Schedule, rank: int,
           step: schedules.Step | None = None) -> list[tuple[int, int]]:
    """The chunks a rank's column shows on the row of ``step`` (None: the start), each with
    the number its digit gives: every chunk, numbered; for all_to_all, the rank's n received
    blocks, each numbered by its sender; for gloo's list-form reduce_scatter, the n parts of
    the block the step reduces (the n x n chunks of either left no room for a fourth rank
    at 160 columns)."""
    n = sched.n
    if schedules.canonical_op(sched.op) == "all_to_all":
        return [(s * n + rank, s) for s in range(n)]
    if sched.algorithm == schedules.PER_BLOCK:
        block = step.transfers[0].chunk // n if step is not None and step.transfers else 0
        return [(block * n + c, c) for c in range(n)]
    return [(c, c) for c in range(sched.chunks)]


def _digits_key(sched: schedules.Schedule, reducing: bool) -> str:
    """The UI key of the grid's legend: what its digits say."""
    if sched.algorithm == schedules.PER_BLOCK:
        return "digits summed block"
    if reducing:
        return "digits summed"
    return "digits senders" if schedules.canonical_op(sched.op) == "all_to_all" \
        else "digits chunks"


def _left_out(layout: GridLayout, ranks: tuple[int, ...], lang: str) -> str:
    """What the grid leaves out ("r5-r7, transfers"), or ""."""
    hidden = list(ranks[layout.ranks:])
    parts = [text.rank_labels(hidden)] if hidden else []
    if not layout.sends_w:
        parts.append(explain.ui("transfers column", lang))
    return ", ".join(parts)


def _grid(out: Text, sched: schedules.Schedule, ranks: tuple[int, ...], current: int,
          lang: str, layout: GridLayout, shown: range) -> None:
    """One row per step ``shown``: what moves, then the chunks each rank holds afterwards
    (a digit per chunk: its number, or for a reduction how many ranks are summed into it);
    the caller names under it the ranks and transfers that do not fit ``layout``."""
    states = schedules.holdings(sched)
    reducing = any(t.reduce for step in sched.steps for t in step.transfers)
    width, label_w, send_w, listed = layout.column_w, layout.label_w, layout.sends_w, \
        bool(layout.sends_w)

    def row(label: str, sends: str, state: list[dict], style: str,
            step: schedules.Step | None = None) -> None:
        out.append(f"{label:>{label_w}} ", style=style)
        if listed:
            out.append(f"{sends:<{send_w}} ")
        for rank, held in enumerate(state[:layout.ranks]):
            out.append(" ")
            slots = _slots(sched, rank, step)
            for c, number in slots:
                who = held.get(c)
                if who is None:
                    out.append("·", style="dim")
                elif reducing:  # green once every rank is summed in
                    out.append(_DIGITS[min(len(who), 35)],
                               style="bold green" if len(who) == len(ranks) else "")
                else:
                    out.append(_DIGITS[min(number, 35)], style="green")
            out.append(" " * (width - len(slots)))
        out.append("\n")

    out.append(f"{explain.ui('buffers', lang)}: "
               f"{explain.ui(_digits_key(sched, reducing), lang)}\n", style="dim")
    out.append(f"{'':>{label_w}} {'':<{send_w}} " if listed else f"{'':>{label_w}} ")
    out.append("".join(f" {'r' + str(r):<{width}}" for r in ranks[:layout.ranks]) + "\n",
               style="bold")
    if shown.start == 0:
        row(explain.ui("start", lang), "", states[0], "dim")
    for k in shown:
        step = sched.steps[k]
        row(schedule_notes.step_label(step.label, lang), _sends(step, ranks) if listed else "",
            states[k + 1],
            "bold reverse" if k == current else "bold cyan", step)


def _backend_of(model: Model, group: tuple[int, ...]) -> str | None:
    state = model.ranks.get(group[0])
    return state.backend if state is not None and state.backend in schedules.BACKENDS else None


def _root_of(inst: Instance) -> int | None:
    """The root as a group-local rank, for rooted ops."""
    return inst.group.index(inst.root) if inst.root in inst.group else None


def explanation(model: Model, inst: Instance | None, lang: str,
                demo: str | None = None) -> Text:
    """Plain words on an operation: what it does, how its backend does it, when to use it,
    and the practical points that apply; in the ``ring_allreduce`` demo, the ring its
    transfers make first."""
    if inst is None:
        return Text(explain.ui("waiting for peers", lang), style="dim")
    try:
        ex = explain.explain(inst.op, lang)
    except KeyError:
        return Text(inst.op, style="dim")
    out = Text()
    if demo == "ring_allreduce" and inst.op in protocol.P2P:
        out.append(explain.ui("ring demo title", lang) + "\n", style="bold")
        out.append(explain.ui("ring demo", lang) + "\n")
    described = op_described(inst, lang)
    _explained(out, ex, _backend_of(model, inst.group), lang,
               described if described != inst.op else "")
    return out


def before_first(model: Model, demo: str, paused: bool, lang: str,
                 playback: bool = False) -> Text:
    """The explanation panel before a demo's first operation is done: which key steps or
    plays it (``playback``: its recording), and what its operation is about to do (a demo
    named after one)."""
    out = Text()
    key = "before paused" if paused else "before playing"
    out.append(explain.ui(f"{key} playback" if playback else key, lang) + "\n",
               style="bold yellow")
    if demo not in explain.EXPLAINED:  # straggler, ddp...: which op comes first is theirs
        out.append(explain.ui("demo starts", lang).format(demo=demo) + "\n", style="italic")
        return out
    out.append(explain.ui("next op", lang).format(op=demo) + "\n", style="bold cyan")
    backends = {s.backend for s in model.ranks.values()} & set(schedules.BACKENDS)
    _explained(out, explain.explain(demo, lang), backends.pop() if len(backends) == 1 else None,
               lang)
    return out


def _explained(out: Text, ex: explain.Explanation, backend: str | None, lang: str,
               call: str = "") -> None:
    """An operation's explanation: how ``backend`` does it (None: every backend); ``call``,
    what this call does that the op's name does not say (its root), under the title."""
    out.append(ex.title + "\n", style="bold")
    if call:
        out.append(f"{explain.ui('this call', lang)}: {call}\n", style="bold cyan")
    out.append(ex.what + "\n")
    for name, how in ex.how.items():
        if backend is None or name == backend:
            out.append(f"{explain.ui('how', lang)} ({name}): ", style="bold cyan")
            out.append(how + "\n")
    out.append(f"{explain.ui('when', lang)}: ", style="bold cyan")
    out.append(ex.when + "\n")
    for tip in ex.tips:
        if backend in (None, "nccl") or tip not in ex.nccl_tips:
            out.append("• " + tip + "\n", style="italic")


FINDINGS_HISTORY = 3  # ended findings listed under the live ones


def findings_lead(model: Model, lang: str) -> Text:
    """The finding that explains the others (``diagnose.by_cause``: a deadlock before the
    hangs and failures it makes, a lost rank before what its peers fail in) and what to check
    for it, whole: the panel grows to show this much at least (the most important text on
    screen while a job is in trouble)."""
    live = by_cause(model.findings())
    out = Text()
    if live:
        _finding(out, live[0], lang)
        out.append(f"{explain.ui('check', lang)}: ", style="bold")
        out.append(findings_text.advice(live[0].topic, lang)[2] + "\n", style="italic")
    return out


def findings(model: Model, lang: str) -> Text:
    """The live diagnosis: ``findings_lead``, then the other findings that hold now (in the
    same order), what the lead means, and the last few that ended."""
    live = by_cause(model.findings())
    out = findings_lead(model, lang)
    for f in live[1:]:
        _finding(out, f, lang)
    if live:
        title, means, _ = findings_text.advice(live[0].topic, lang)
        out.append(f"{title}: ", style="bold")
        out.append(means + "\n", style="italic")
    history = getattr(model.diagnosis, "history", ())
    for f in [f for f in history if f.type == "resolved"][-FINDINGS_HISTORY:]:
        if f.unresolved:  # the job ended with it: no tick, it never cleared
            out.append(f"✗ {f.text(lang)}\n", style="red")
        else:
            out.append(f"✓ {f.text(lang)}\n", style="dim")
    out.rstrip()
    return out


def _finding(out: Text, f: Finding, lang: str) -> None:
    out.append(f"⚠ {finding_name(f.type, lang)}  ", style="bold red")
    out.append(f.text(lang) + "\n")


SOURCE_CONTEXT = 4  # lines shown above and below the line that made the call


def source(inst: Instance | None, lang: str, context: int = SOURCE_CONTEXT) -> Text:
    """The program's own source around the line that issued an operation, ``context``
    lines above and below it."""
    if inst is None or inst.site is None:
        return Text(explain.ui("no operation yet", lang), style="dim")
    path, line = inst.site  # type: ignore[misc]
    lines = linecache.getlines(path)
    if not lines or not 0 < line <= len(lines):
        return Text(f"{path}:{line} ({explain.ui('source not here', lang)})", style="dim")
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(f"{os.path.basename(path)}:{line}  {inst.op}\n", style="bold")
    first = max(1, line - context)
    for number in range(first, min(len(lines), line + context) + 1):
        code = lines[number - 1].rstrip("\n")
        style = "bold reverse" if number == line else "dim"
        out.append(f"{number:4d} {code}\n", style=style)
    out.rstrip()  # no blank line under the last one
    return out
