"""The ranks panel by node, for jobs with more ranks than the screen has rows: a row per node
that needs looking at (``node_facts``), the worst first, the healthy folded into one line, and
the ranks of the nodes opened under their row (as the panel by rank draws them)."""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from rich.text import Text

from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.tui.node_facts import BROKEN, FLAGGED, HEALTHY, LATE, NodeRow, Spread, Worst
from commviz.tui.panels.ranks import (
    _column_widths,
    _cut,
    _whole_words,
    link_rates,
    node_line,
    rank_row,
)
from commviz.tui.panels.words import finding_name
from commviz.tui.rank_facts import ops_in
from commviz.viewer import plain_text as text
from commviz.viewer.diagnose import Finding
from commviz.viewer.model import HostClock, Model
from commviz.viewer.rank_state import State

# (title's UI string key, width) of a node's columns, most important first: a narrow panel
# crops from the right
NODE_COLUMNS = ((N_("col node"), 9), (N_("col ranks"), 9), (N_("col state"), 28),
                (N_("col worst"), 16), (N_("col gpus"), 27), (N_("col clock"), 10))
# a state's words for a count of a node's ranks in it ("3 done")
STATE_WORDS = {State.FAILED: N_("node failed"), State.EXITED: N_("node exited"),
               State.ENDED: N_("node ended"), State.STOPPED: N_("node stopped"),
               State.SILENT: N_("node silent"),
               State.DONE: N_("node done"), State.IDLE: N_("node idle")}
OPEN, CLOSED = "▾", "▸"
CHOSEN = "on grey27"  # the line ↑↓ chose


@dataclass(frozen=True)
class Entry:
    """One selectable line of the panel: a node's row, the fold of the healthy, or a rank
    of an opened node."""

    kind: str  # "node", "fold" or "rank"
    host: str = ""
    rank: int = -1


def entries(rows: list[NodeRow], opened: Collection[str], fold_open: bool) -> list[Entry]:
    """The panel's lines in order: the nodes that need looking at, the fold line, the
    healthy ones if it is open, each opened node followed by its ranks."""
    out: list[Entry] = []

    def node(row: NodeRow) -> None:
        out.append(Entry("node", row.host))
        if row.host in opened:
            out.extend(Entry("rank", row.host, r) for r in row.ranks)

    for row in rows:
        if not row.healthy:
            node(row)
    healthy = [row for row in rows if row.healthy]
    if healthy:
        out.append(Entry("fold"))
        if fold_open:
            for row in healthy:
                node(row)
    return out


def nodes_table(rows: list[NodeRow], every: list[Entry], model: Model, now: float,
                now_ns: int, flagged: Mapping[int, Finding], lang: str, width: int | None,
                lines: int | None, opened: Collection[str], fold_open: bool, cursor: int,
                highlight: bool = True) -> tuple[Text, list[Entry | None]]:
    """The panel in ``lines`` rows at most (None: all): the lines of ``every`` (``entries``)
    from one that keeps ``cursor`` (an index of it) in view, that one highlighted if
    ``highlight``; returns it and the entry of each line under the header (None: not one to
    choose, as a GPU's links under its rank). Only the lines shown are built."""
    ui = functools.partial(i18n.ui, lang=lang)
    by_host = {row.host: row for row in rows}
    widths = _column_widths(width, [w for _, w in NODE_COLUMNS])
    out = Text(no_wrap=True, overflow="crop")
    _cells(out, widths, [Text(ui(title), style="bold") for title, _ in NODE_COLUMNS])
    room = None if lines is None else max(1, lines - 1)
    first = 0 if room is None else _first(every, cursor, room, model, by_host, opened)
    shown: list[Entry | None] = []
    ops = ops_in(model) if opened else {}
    rank_widths = _column_widths(width)
    for i in range(first, len(every)):
        if room is not None and len(shown) >= room:
            break
        entry = every[i]
        mark = CHOSEN if highlight and i == cursor else ""
        if entry.kind == "rank":
            row = Text(no_wrap=True, overflow="crop")
            taken = rank_row(row, model, entry.rank, now, now_ns, ops, dict(flagged), lang,
                             rank_widths, width)
            if room is not None and len(shown) + taken > room:
                break
            if mark:
                row.stylize(mark, 0, len(row.plain.split("\n")[0]))
            out.append_text(row)
            shown.extend([entry] + [None] * (taken - 1))
        elif entry.kind == "fold":
            healthy = [r for r in rows if r.healthy]
            words = ui("nodes healthy").format(
                n=len(healthy), ranks=sum(len(r.ranks) for r in healthy))
            marker = OPEN if fold_open else CLOSED
            out.append(_cut(f"{marker} {words}", width) + "\n", style=f"green {mark}".strip())
            shown.append(entry)
        else:
            row = by_host[entry.host]
            _cells(out, widths, _node_cells(row, entry.host in opened, lang, widths),
                   mark)
            shown.append(entry)
            if entry.host in opened and _clock_line(row, room):  # its clock, said whole
                out.append(_cut("  " + node_line(row.clock, list(row.ranks), lang), width)
                           + "\n", style="cyan")
                shown.append(None)
    out.rstrip()
    return out, shown


def _clock_line(row: NodeRow, room: int | None) -> bool:
    """Whether an opened node's clock gets a line under its row: not in a panel of fewer
    than CLOCK_LINE_ROOM lines, where its ranks need them (its column has it, if wide)."""
    return row.clock is not None and (room is None or room >= CLOCK_LINE_ROOM)


CLOCK_LINE_ROOM = 8


def _first(every: list[Entry], cursor: int, room: int, model: Model,
           by_host: Mapping[str, NodeRow], opened: Collection[str]) -> int:
    """The first entry to draw so that ``cursor``'s line is in ``room`` lines, with the row
    of its node above it if that fits too (a rank found by `/` shows under its node)."""
    def height(entry: Entry) -> int:
        if entry.kind == "rank":
            s = model.ranks[entry.rank]
            return 2 if s.telemetry and link_rates(s.telemetry[-1][1]) else 1
        if entry.kind == "node" and entry.host in opened and _clock_line(by_host[entry.host],
                                                                          room):
            return 2
        return 1

    if not every:
        return 0
    cursor = min(cursor, len(every) - 1)
    heights = [height(e) for e in every[:cursor + 1]]
    if sum(heights) <= room:
        return 0
    if every[cursor].kind == "rank":  # its node's row on top, if both fit
        anchor = next(i for i in range(cursor, -1, -1) if every[i].kind != "rank" or i == 0)
        if sum(heights[anchor:]) <= room:
            return anchor
    first, used = cursor, heights[cursor]
    while first > 0 and used + heights[first - 1] <= room:
        first -= 1
        used += heights[first]
    return first


def _cells(out: Text, widths: list[int], cells: list[Text], style: str = "") -> None:
    start = len(out)
    for i, (width, cell) in enumerate(zip(widths, cells)):
        cell.truncate(width, overflow="ellipsis")
        out.append_text(cell + Text(" " * (width - cell.cell_len)))
        out.append(" " if i < len(widths) - 1 else "")
    if style:
        out.stylize(style, start, len(out))
    out.append("\n")


def _node_cells(row: NodeRow, opened: bool, lang: str, widths: list[int]) -> list[Text]:
    """A node's row: its name (▸ closed, ▾ opened), ranks, states, worst rank, GPUs, clock;
    coloured by how bad it is (node_facts' severities, the worst first)."""
    state_w = widths[2] if len(widths) > 2 else NODE_COLUMNS[2][1]
    style = {FLAGGED: "bold red", BROKEN: "bold red", LATE: "yellow", HEALTHY: "green"}[
        row.severity]
    marker = OPEN if opened else CLOSED
    return [Text(f"{marker} {row.host}", style="bold cyan"),
            Text(i18n.rank_list(row.ranks)),
            Text(state_words(row, lang, state_w), style=style),
            Text(worst_words(row.worst, lang) if row.worst else "", style=style),
            Text(load_words(row.load), style="cyan"),
            Text(clock_words(row.clock, lang))]


def state_words(row: NodeRow, lang: str, width: int | None = None) -> str:
    """``1 late · 7 in all_reduce #812 · 1 done``, ``8 done``: its ranks counted by state."""
    ui = functools.partial(i18n.ui, lang=lang)
    # the late first: a narrow column keeps them
    parts = [ui("node late").format(n=row.late)] if row.late else []
    parts += [ui("node in op").format(n=n, op=op, seq=seq) for op, seq, n in row.in_ops]
    parts += [ui(STATE_WORDS[state]).format(n=n)
              for state, n in sorted(row.states.items(), key=lambda kv: -kv[1])
              if state in STATE_WORDS]
    return _whole_parts(parts, width)


def _whole_parts(parts: list[str], width: int | None) -> str:
    """``parts`` joined by `` · `` in ``width``: whole parts only, then ``…`` if any is left
    out (the first, cut by whole words, if even it does not fit)."""
    line = " · ".join(parts)
    if width is None or len(line) <= width:
        return line
    kept = ""
    for part in parts:
        longer = f"{kept} · {part}" if kept else part
        if len(longer) + len(" …") > width:
            break
        kept = longer
    return f"{kept} …" if kept else _whole_words(parts[0], width)


def worst_words(worst: Worst, lang: str) -> str:
    """The worst rank and by how much: ``⚠ r139 straggler``, ``r139 silent 8 s``, ``r139
    +30.2 ms``."""
    if worst.finding is not None:
        return f"⚠ r{worst.rank} {finding_name(worst.finding.type, lang)}"
    if worst.state is State.FAILED:
        return i18n.ui("worst failed", lang).format(rank=worst.rank)
    if worst.state is State.SILENT:
        return i18n.ui("worst silent", lang).format(rank=worst.rank, s=f"{worst.silent_s:.0f}")
    return f"r{worst.rank} +{i18n.number(text.duration(worst.late_ns), lang)}"


def load_words(load: Mapping[str, Spread]) -> str:
    """The node's GPUs' utilization, memory and power as min·median·max (one number where
    they agree): ``88·93·97% 118G 640·660·690W``; what NVML did not give is left out."""
    parts = []
    if (util := load.get("gpu_util_pct")) is not None:
        parts.append(f"{_three(util, 1)}%")
    if (mem := load.get("gpu_mem_used")) is not None:
        parts.append(f"{_three(mem, 1 << 30)}G")  # GiB, as the rank rows
    if (power := load.get("gpu_power_w")) is not None:
        parts.append(f"{_three(power, 1)}W")
    return " ".join(parts)


def _three(spread: Spread, unit: float) -> str:
    values = [round(v / unit) for v in (spread.low, spread.mid, spread.high)]
    return str(values[0]) if values[0] == values[2] else "·".join(map(str, values))


def clock_words(clock: HostClock | None, lang: str) -> str:
    if clock is None or clock.offset_ns is None:
        return "?"
    if clock.local:
        return i18n.ui("clock here", lang)
    return i18n.number(f"{clock.offset_ns / 1e6:+.3f} ms", lang)
