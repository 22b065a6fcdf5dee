"""The ranks panel: a row per rank (host, device, state, load, bytes), the nodes' clocks,
the ranks the others waited for."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

from rich.text import Text

from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.tui.panels.words import bytes_text, finding_name
from commviz.tui.rank_facts import ops_in
from commviz.viewer import plain_text as text
from commviz.viewer.diagnose import Finding, Lateness
from commviz.viewer.model import HostClock, InFlight, Model
from commviz.viewer.rank_state import State, rank_state

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], top: float) -> str:
    if not values or top <= 0:
        return ""
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1)))] for v in values)


# (title's UI string key, width, right-aligned) of the ranks panel's columns, most important
# first: a narrow panel crops from the right
RANK_COLUMNS = ((N_("col rank"), 4, True), (N_("col host"), 8, False),
                (N_("col device"), 6, False), (N_("col state"), 22, False),
                (N_("col load"), 36, False), (N_("col bytes"), 13, True))


def ranks_table(model: Model, now: float, now_ns: int | None = None,
                flagged: dict[int, Finding] | None = None, lang: str = "en",
                width: int | None = None, rows: int | None = None,
                late: Sequence[tuple[int, Lateness]] = ()) -> Text:
    """One line per rank in fixed-width columns: plain text lines are cheap to draw every
    frame, where a table would measure every cell again. A panel narrower than the columns
    (``width``) leaves out the byte counts first, then cuts the load with an ellipsis, never
    a rank's state. ``flagged``: ranks a finding names, with that finding. Under the ranks,
    those the others waited for at collectives (``late``, as ``Diagnosis.late_arrivals``
    gives them), if any. In fewer ``rows`` than that (None: any), the last row names the
    ranks left out."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    ui = functools.partial(i18n.ui, lang=lang)
    ops = ops_in(model)
    out = Text(no_wrap=True, overflow="crop")
    widths = _column_widths(width)
    _row(out, widths, [Text(ui(title), style="bold") for title, _, _ in RANK_COLUMNS])
    nodes = model.nodes()
    clocks = model.clock_offsets() if len(nodes) > 1 else {}
    order = [r for ranks in nodes.values() for r in ranks]
    row_at: dict[int, int] = {}  # the line of each rank's row
    line = 1  # the lines so far (the header's): counting them in ``out`` is O(ranks) a row
    unseen: list[int] = []  # ranks past the rows drawn: not even built (a thousand of them)
    for i, rank in enumerate(order):
        if rows is not None and line > rows:
            unseen = order[i:]
            break
        s = model.ranks[rank]
        if clocks and rank == nodes[s.host][0]:  # several nodes: a line heads each
            out.append(_cut(node_line(clocks[s.host], nodes[s.host], lang), width) + "\n",
                       style="bold cyan")
            line += 1
        row_at[rank] = line
        line += rank_row(out, model, rank, now, now_ns, ops, flagged, lang, widths, width)
    waited = text.late_line(late, lang)
    if waited:  # under the ranks: whom the others waited for, the longest waited for first
        out.append((waited if width is None else _whole_words(waited, width)) + "\n",
                   style="yellow")
    out.rstrip()
    lines = out.split("\n")
    if rows is None or (len(lines) <= rows and not unseen) or rows < 3:
        return out
    left = [r for r in order if r in row_at and row_at[r] >= rows - 1] + unseen
    if not left:  # only lines under the ranks are left out
        return Text("\n").join(lines[:rows])
    note = i18n.ui("lanes left out", lang).format(text.ranks_phrase(left))
    return Text("\n").join([*lines[:rows - 1], Text(_cut(note, width), style="dim")])


def rank_row(out: Text, model: Model, rank: int, now: float, now_ns: int,
             ops: dict[int, InFlight], flagged: dict[int, Finding] | None, lang: str,
             widths: list[int], width: int | None, indent: str = "") -> int:
    """Append ``rank``'s row (and its GPU links' line, if it has one) to ``out``; returns
    how many lines. ``indent``: before the row, in its first column (a node's ranks opened
    under it)."""
    ui = functools.partial(i18n.ui, lang=lang)
    state_w = widths[3] if len(widths) > 3 else RANK_COLUMNS[3][1]
    s = model.ranks[rank]
    kind = rank_state(s, now, rank in ops, model.behind_s)
    idle = kind in (State.DONE, State.IDLE)
    # what a finding puts before the state of a rank it names ("⚠ hang: ")
    flag = _flagged(flagged[rank], "", False, lang, state_w) \
        if flagged and rank in flagged and kind is not State.FAILED else ""
    if kind is State.FAILED:
        state = Text(f"⚠ {text.process_end(s.exit_code, lang)}", style="bold red")
    elif kind is State.EXITED:
        state = Text(ui("state exited"), style="dim")
    elif kind in (State.ENDED, State.STOPPED):
        state = Text(text.process_end(s.exit_code, lang), style="dim")
    elif kind is State.SILENT:
        state = Text(ui("state silent for").format(f"{now - s.last_seen:.0f}"),
                     style="bold red")
    elif kind is State.IN_OP:
        op = ops[rank]
        state = Text(_waiting_in(op.op, op.seq, max(0, now_ns - op.t_start),
                                 state_w - len(flag), lang), style="bold yellow")
    elif kind is State.DONE:
        state = Text(_done_with(s.last_op, state_w - len(flag), lang), style="green")
    else:
        state = Text(ui("state idle"), style="dim")
    if flag:
        state = Text(_flagged(flagged[rank], state.plain, idle, lang, state_w),
                     style="bold red")
    state = Text(_whole_words(state.plain, state_w), style=state.style)
    _row(out, widths, [Text(f"{indent}{rank}"), Text(s.host), Text(s.device), state,
                       _load(s, lang),
                       Text(f"{_short(s.bytes_in, lang)}/{_short(s.bytes_out, lang)}")])
    rates = link_rates(s.telemetry[-1][1]) if s.telemetry else ""
    if rates:  # under the load, across the byte counts: a GPU's links get a line
        out.append(_cut(" " * LINKS_AT + rates, width) + "\n", style="cyan")
        return 2
    return 1


def _waiting_in(op: str, seq: int, waited_ns: int, width: int, lang: str) -> str:
    """A rank's state inside an op ("in all_reduce #7 12.3 ms") in ``width``: the time
    waited stays whole, with its unit; the op's number goes first, then its name is
    shortened (its number is in the log and the findings), down to MIN_OP_SHOWN, under
    which the time goes rather than the name."""
    waited = i18n.number(text.duration(waited_ns), lang)
    state = i18n.ui("state in", lang).format(f"{op} #{seq} {waited}")
    if len(state) > width:
        state = i18n.ui("state in", lang).format(f"{op} {waited}")
    if len(state) > width:
        room = len(op) - (len(state) - width)
        if room >= MIN_OP_SHOWN:
            return i18n.ui("state in", lang).format(f"{text.shorten_middle(op, room)} {waited}")
        state = i18n.ui("state in", lang).format(op)
        room = len(op) - (len(state) - width)
        state = i18n.ui("state in", lang).format(text.shorten_middle(op, max(1, room)))
    return state


MIN_OP_SHOWN = 8  # characters of an op's name in a waiting rank's state, at least


def _done_with(op: str, width: int, lang: str) -> str:
    """An idle rank's state ("done all_reduce") in ``width``: a long op's name shortened in
    its middle ("done reduce_sca…tensor"), not cut to "done…"."""
    state = i18n.ui("state done", lang).format(op)
    room = len(op) - (len(state) - width)
    if len(state) <= width or room < MIN_OP_SHOWN:
        return state
    return i18n.ui("state done", lang).format(text.shorten_middle(op, room))


def _whole_words(line: str, width: int) -> str:
    """``line`` in ``width``, cut after a whole word with an ellipsis (a time cut mid-unit
    reads as another time)."""
    if len(line) <= width:
        return line
    cut = line[:width - 1]
    return (cut[:cut.rfind(" ")] if " " in cut else cut).rstrip() + "…"


def _flagged(f: Finding, state: str, idle: bool, lang: str, width: int) -> str:
    """A flagged rank's state: the finding's name before it. A rank missing from the op of
    a hang or a failed op reads what the finding says of it if idle ("not in all_reduce
    #7": "hang: done all_reduce" reads as a contradiction), else its own state (in another
    op, silent): the findings panel names the finding, the name left no room for either.
    A state that does not fit after the name is left out ("⚠ straggler", not
    "⚠ straggler: d…")."""
    if not (f.type in ("hang", "failed") and f.op and f.seq is not None):
        full = f"⚠ {finding_name(f.type, lang)}: {state}"  # the state cut: the name alone
        return full if not state or len(full) <= width else f"⚠ {finding_name(f.type, lang)}"
    if not idle:
        return f"⚠ {state}"
    not_in = i18n.ui("state not in", lang)
    full = f"⚠ {not_in.format(f'{f.op} #{f.seq}')}"
    return full if len(full) <= width else f"⚠ {not_in.format(f'#{f.seq}')}"


def node_line(clock: HostClock, ranks: list[int], lang: str = "en") -> str:
    """``text.node_line`` (the headless viewer's, in English) in ``lang``."""
    if lang == "en":
        return text.node_line(clock, ranks)
    ui = functools.partial(i18n.ui, lang=lang)
    if clock.local:
        when = ui("viewer's clock")
    elif clock.offset_ns is None:
        when = ui("clock unknown")
    else:
        when = ui("clock offset").format(
            offset=i18n.number(f"{clock.offset_ns / 1e6:+.3f}", lang),
            error=i18n.number(f"{clock.uncertainty_ns / 1e6:.3f}", lang))
    who = ("ranks " if len(ranks) > 1 else "rank ") + text.node_ranks(ranks)
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


MIN_CUT_COLUMN = 8  # a column cut narrower than this is left out rather than shown in part


def _column_widths(width: int | None,
                   columns: Sequence[int] = tuple(w for _, w, _ in RANK_COLUMNS)) -> list[int]:
    """The columns (their widths: the ranks panel's by default) that fit ``width`` (None:
    all), the last perhaps cut."""
    widths, left = [], width
    for column in columns:
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
    return bytes_text(n, lang).replace(" ", "").replace("iB", "")


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
