"""The replay of a large group's collective, drawn as nodes: what one node's GPUs do, what the
nodes do over the network, and how far each phase has gone (``knowledge/hierarchy``).

A pure function of one ``AnimFrame`` whose schedule is a ``Scaled`` drawing, as
``topology.render_topology`` is of the others (which calls it and adds the titles and the
legend). Colours keep the replay's meaning: green adds into, cyan copies.
"""

from __future__ import annotations

import functools
import math

from rich.text import Text

from commviz.knowledge.hierarchy import Scaled, ScaledStep
from commviz.text import i18n, schedule_notes
from commviz.text.i18n import N_
from commviz.tui.animation import AnimFrame

REDUCE_STYLE, COPY_STYLE = "green", "cyan"
SENDS, RECEIVES, IDLE = "●", "○", "·"
BAR_W = 40  # cells of a phase's progress bar at most


def note(sched: Scaled, lang: str = "en") -> str:
    """What the drawing shows and assumes, in ``lang``: the real steps a drawn step stands
    for, and how the algorithm moves data through the nodes."""
    ui = functools.partial(i18n.ui, lang=lang)
    runs = sorted({s.count for s in sched.steps})
    stands = ui("one real step each") if runs == [1] else \
        ui("stands for").format(n=runs[0]) if len(runs) == 1 else \
        ui("stands for range").format(low=runs[0], high=runs[-1])
    ring = N_("scaled ring nccl") if sched.backend == "nccl" else N_("scaled ring gloo")
    key = {"ring": ring, "all_reduce + slice": ring, "tree": N_("scaled tree"),
           "chain": N_("scaled chain")}.get(sched.algorithm, N_("scaled other"))
    return f"{stands} · {ui(key).format(per=sched.per_node, nodes=sched.nodes)}"


def body(frame: AnimFrame, width: int, height: int, still: bool, lang: str = "en") -> list[Text]:
    """``height`` lines of ``width``: inside one node, across the nodes, then each phase's
    progress; what does not fit the height is left out from the bottom of each part."""
    sched = frame.schedule
    assert isinstance(sched, Scaled)
    step = sched.steps[frame.step] if sched.steps else None
    done = _done(sched, frame.step, 1.0 if still else frame.progress)
    name_w = max(len(schedule_notes.step_label(p, lang)) for p, _ in sched.phases) \
        if sched.phases else 0
    bars = [_bar(phase, total, done.get(i, 0), lang, i == _phase_index(sched, frame.step),
                 name_w) for i, (phase, total) in enumerate(sched.phases)]
    parts: list[Text] = []
    if step is not None:
        parts += _inside(sched, step, width, lang)
        if sched.nodes > 1:
            parts += _across(sched, step, width, max(1, height - len(parts) - len(bars) - 1),
                             lang)
    out = parts[:max(0, height - len(bars))] + bars
    for line in out:
        line.truncate(width, overflow="ellipsis")
    return out[:height] + [Text() for _ in range(height - len(out))]


def _colour(step: ScaledStep) -> str:
    return REDUCE_STYLE if step.reduce else COPY_STYLE


def _inside(sched: Scaled, step: ScaledStep, width: int, lang: str) -> list[Text]:
    """One node's GPUs in a row, the hops between neighbours as arrows where this step
    uses them; longer hops counted."""
    ui = functools.partial(i18n.ui, lang=lang)
    where = N_("inside node nccl") if sched.backend == "nccl" else N_("inside node gloo")
    if sched.nodes <= 1:
        return [Text(ui("no nodes").format(n=sched.n), style="dim")]
    head = Text(ui(where).format(per=sched.per_node), style="bold")
    hops = set(step.within)
    row = Text("  ")
    colour = _colour(step)
    for g in range(sched.per_node):
        row.append(f"g{g}", style="bold" if any(g in pair for pair in hops) else "dim")
        if g + 1 < sched.per_node:
            right, left = (g, g + 1) in hops, (g + 1, g) in hops
            arrow = "⇄" if right and left else "→" if right else "←" if left else IDLE
            row.append(f" {arrow} ", style=f"bold {colour}" if right or left else "dim")
    longer = [pair for pair in hops if abs(pair[0] - pair[1]) > 1]
    if step.between and sched.algorithm in ("ring", "all_reduce + slice", "chain"):
        row.append(" ⇢ " + ui("to next node"), style=colour)  # the hop out, to the next node
    if longer:
        row.append("  " + ui("longer hops").format(n=len(longer)), style="dim")
    if row.cell_len > width:  # too many GPUs for a row: how many hops only
        row = Text("  " + ui("hops inside").format(n=len(hops)), style=colour)
    return [head, row]


def _across(sched: Scaled, step: ScaledStep, width: int, rows: int, lang: str) -> list[Text]:
    """The nodes as cells, ● those that send over the network at this step, ○ those that
    only receive; a tree by its levels, other algorithms in node order."""
    ui = functools.partial(i18n.ui, lang=lang)
    senders = {a for a, _ in step.between}
    receivers = {b for _, b in step.between} - senders
    colour = _colour(step)

    def cell(node: int) -> tuple[str, str]:
        if node in senders:
            return SENDS, f"bold {colour}"
        if node in receivers:
            return RECEIVES, f"bold {colour}"
        return IDLE, "dim"

    where = N_("across nodes nccl") if sched.backend == "nccl" else N_("across nodes gloo")
    out = [Text(ui(where).format(n=len(step.between), nodes=sched.nodes), style="bold")]
    lines: list[Text] = []
    if sched.algorithm == "tree":
        depth = math.floor(math.log2(sched.nodes))
        label_w = max(len(f"{ui('level')} {depth}") + 1, 8)
        room = max(1, width - label_w)
        for d in range(depth + 1):  # each level spread over the width: the tree's shape
            members = range(2 ** d - 1, min(sched.nodes, 2 ** (d + 1) - 1))
            cells = [" "] * room
            styles = [""] * room
            for i, node in enumerate(members):
                x = min(room - 1, int((i + 0.5) * room / 2 ** d))
                cells[x], styles[x] = cell(node)
            line = Text(f"{ui('level')} {d}".ljust(label_w), style="dim")
            for char, style in zip(cells, styles):
                line.append(char, style=style or None)
            lines.append(line)
    else:
        label_w = len(f"n{sched.nodes - 1}") + 1
        per_row = max(1, (width - label_w - 2) // 2)
        per_row = max(per_row, math.ceil(sched.nodes / max(1, rows)))  # one cell each, tighter
        cell_w = 2 if per_row * 2 <= width - label_w - 2 else 1
        for first in range(0, sched.nodes, per_row):
            line = Text(f"  n{first}".ljust(label_w + 2), style="dim")
            for node in range(first, min(sched.nodes, first + per_row)):
                char, style = cell(node)
                line.append(char.ljust(cell_w), style=style)
            lines.append(line)
    if len(lines) > rows - 1:  # the rows left: what they hold, the rest counted
        kept = max(0, rows - 2)
        lines = lines[:kept] + [Text("  " + ui("more rows").format(n=len(lines) - kept),
                                     style="dim")]
    return out + lines


def _phase_index(sched: Scaled, step: int) -> int:
    return sum(1 for s in sched.steps[:step + 1] if s.first == 0) - 1


def _done(sched: Scaled, step: int, progress: float) -> dict[int, float]:
    """Real steps each phase has played by ``progress`` through drawn step ``step``."""
    out: dict[int, float] = {}
    phase = -1
    for k, s in enumerate(sched.steps[:step + 1]):
        phase += s.first == 0
        out[phase] = s.first + s.count * (progress if k == step else 1.0)
    return out


def _bar(phase: str, total: int, done: float, lang: str, current: bool, name_w: int) -> Text:
    """One phase's progress: its name, a bar, real steps done of its total."""
    name = schedule_notes.step_label(phase, lang)
    cells = min(BAR_W, max(total, 1))
    filled = round(cells * done / max(total, 1))
    line = Text(f"  {name:<{name_w}} ", style="bold" if current else "dim")
    line.append("█" * filled, style="bold" if current else "")
    line.append("░" * (cells - filled), style="dim")
    line.append("  " + i18n.ui("real steps done", lang).format(done=math.floor(done + 1e-9),
                                                               total=total), style="dim")
    return line
