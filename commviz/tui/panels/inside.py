"""The inside panel: what happens inside the operation the replay shows (its measured time,
its cost model, the steps its backend runs with the chunks each rank holds)."""

from __future__ import annotations

import dataclasses
import functools
import io
import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from commviz.knowledge import costmodel, schedules
from commviz.knowledge.hierarchy import Scaled
from commviz.text import i18n, schedule_notes
from commviz.text.i18n import N_
from commviz.tui import scaled_replay
from commviz.tui.animation import (
    REPLAY_RANKS_MAX,
    AnimFrame,
    host_of,
    plan,
    scaled_algorithm,
    scaled_step,
)
from commviz.tui.panels.words import bytes_text, op_described
from commviz.tui.rank_facts import backend_of
from commviz.viewer import plain_text as text
from commviz.viewer import whatif_report
from commviz.viewer.model import Instance, Model
from commviz.wire import protocol

MAX_STEPS_SHOWN = 8  # around the current one: the explanation below keeps its rows
MAX_GRID_RANKS = 8     # ranks up to which the steps are drawn as the buffers grid
MIN_GRID_RANKS = 2     # rank columns a grid shows at least, else the steps are listed
GRID_MAX_W = 60        # the panel's inner width at 160 columns, when no width is given
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def inside(model: Model, lang: str = "en", frame: AnimFrame | None = None,
           fit: costmodel.Fit | None = None, nccl: Any = None, width: int | None = None,
           rows: int | None = None, demo: str | None = None,
           whatif_fabric: str | None = None) -> Text:
    """Inside one operation: its measured time, its cost model, and the steps its backend
    runs with the chunks each rank holds after each step, drawn from its schedule.

    It follows the replay (``frame``: the instance played and the step shown, highlighted),
    else the latest operation. Collective inner steps are not reported by the backends: they
    are labelled schematic, while the time and skew are measured. ``nccl`` (the session's
    ``nccl_log`` reader) says which algorithm NCCL chose, when its log said so. The steps
    fit ``width`` (the panel's inner width; None: GRID_MAX_W), saying what they leave out.
    In fewer ``rows`` than it takes (None: any), a collective leaves out its cost model and
    schematic note (the replay's title has the note), then shows fewer steps. A round of
    the ``ring_allreduce`` demo says which step of its ring it is. ``whatif_fabric``: a
    `what if` line, the same op on that fabric at 16 nodes, a model's (the `w` key).
    """
    if frame is None and not model.recent:
        return Text(i18n.ui("no operation yet", lang), style="dim")
    inst = frame.instance if frame is not None else model.recent[-1]
    out = Text()
    if frame is not None and frame.round:
        out = _p2p_members(frame, lang)
        return ring_demo_round(frame.members, lang) + out if demo == "ring_allreduce" else out
    if inst.op in protocol.P2P:
        src, dst = inst.group
        out.append(f"{inst.op}: rank {src} → rank {dst}, {bytes_text(inst.size, lang)}\n",
                   style="bold")
        out.append(f"{i18n.ui('measured', lang)}  "
                   f"{i18n.number(text.duration(inst.time_ns), lang)}\n")
        # NCCL connects a pair on its first transfer (lazily); gloo connected every pair
        # when the process group was created, so there its first transfer set nothing up
        if backend_of(model, inst.group) != "nccl":
            out.rstrip()  # the panel's height is its text's: no blank line at the end
            return out
        first = model.first_transfer_ns.get((src, dst))
        if inst.seq == 1:
            out.append(i18n.ui("first transfer", lang), style="italic")
        elif first is not None:
            out.append(i18n.ui("first transfer took", lang).format(
                src=src, dst=dst, ms=i18n.number(f"{first / 1e6:.1f}", lang)), style="italic")
        return out
    backend = backend_of(model, inst.group)
    if backend is None:
        return Text(i18n.ui("backend not known", lang).format(op=inst.op), style="dim")
    n = len(inst.group)
    fabric = text.fabric_line(nccl.fabric(), lang) if backend == "nccl" and nccl is not None \
        else None
    whatif = _whatif_text(inst, whatif_fabric, lang)
    if n > REPLAY_RANKS_MAX:  # its full schedule: seconds to build, thousands of steps to list
        drawing = frame.schedule if frame is not None and frame.instance is inst else \
            plan(inst, backend, functools.partial(host_of, model))
        if not isinstance(drawing, Scaled):
            return Text(f"{inst.op}: {i18n.ui('backend unknown', lang)}", style="dim")
        current = frame.step if frame is not None else len(drawing.steps) - 1
        return _at_scale(drawing, inst, current, lang, rows, fabric, whatif)
    try:
        sched = schedules.schedule(inst.op, backend, n, inst.size, _root_of(inst))
    except ValueError as exc:
        return Text(f"{inst.op}: {exc}", style="dim")
    current = frame.step if frame is not None else len(sched.steps) - 1
    nccl_text = _nccl_text(nccl, inst.op, inst.size, n, lang) \
        if backend == "nccl" and nccl is not None else None
    draw = functools.partial(_collective, sched, inst, backend, fit, nccl_text, fabric, whatif,
                             current, lang, width or GRID_MAX_W)
    out = draw(False, MAX_STEPS_SHOWN)
    if rows is not None and text_rows(out, width or GRID_MAX_W) > rows:
        for steps in range(MAX_STEPS_SHOWN, 0, -1):
            out = draw(True, steps)
            if text_rows(out, width or GRID_MAX_W) <= rows:
                break
    return out


def _at_scale(drawing: Scaled, inst: Instance, current: int, lang: str,
              rows: int | None, fabric: str | None = None, what_if: str | None = None) -> Text:
    """``inside`` of a large group's op: its measured time, the wires NCCL named
    (``fabric``), its drawing as nodes (what it assumes, each phase and the real steps it
    compresses), the drawn step shown and the hops it uses; the cost model is fitted on
    groups up to REPLAY_RANKS_MAX ranks only."""
    ui = functools.partial(i18n.ui, lang=lang)
    out = Text(f"{op_described(inst, lang)} · {scaled_algorithm(drawing, lang)} · "
               f"S = {bytes_text(inst.size, lang)}\n", style="bold")
    times = f"{ui('time')} {text.duration(inst.time_ns)} · " \
        f"{ui('log skew')} {text.duration(inst.skew_ns)}"
    out.append(f"{ui('measured')}  {i18n.number(times, lang)}\n")
    if fabric is not None:
        out.append(f"{ui('fabric')}  {fabric}\n")
    if what_if is not None:
        out.append(f"{what_if}\n", style="italic")
    out.append(f"{ui('cost')}  {ui('no cost at scale').format(most=REPLAY_RANKS_MAX)}\n",
               style="dim")
    out.append(f"{ui('schematic')}  {scaled_replay.note(drawing, lang)}\n", style="italic dim")
    out.append(ui("inside at scale").format(steps=drawing.real_steps,
                                            drawn=len(drawing.steps)) + "\n", style="bold")
    drawn: dict[str, int] = {}
    for s in drawing.steps:
        drawn[s.phase] = drawn.get(s.phase, 0) + 1
    phase_of = drawing.steps[current].phase if drawing.steps else None
    for phase, total in drawing.phases:
        line = ui("phase line").format(phase=schedule_notes.step_label(phase, lang),
                                       total=total, drawn=drawn[phase])
        out.append(f"  {line}\n", style="bold reverse" if phase == phase_of else "")
    if drawing.steps:
        step = drawing.steps[current]
        out.append(scaled_step(drawing, current, lang), style="bold cyan")
        if drawing.nodes > 1:  # without nodes, hops inside "each" would be the whole ring's
            out.append(": " + ui("step hops").format(within=len(step.within),
                                                      between=len(step.between)))
        out.append("\n")
    out.rstrip()
    if rows is not None:  # fewer rows: the cost and the note go first
        lines = out.split("\n")
        if len(lines) > rows:
            out = Text("\n").join([lines[0], lines[1], *lines[4:]][:max(1, rows)])
    return out


MEMBERS_SHOWN = 8  # p2p transfers listed one per line; the rest counted


def _p2p_members(frame: AnimFrame, lang: str) -> Text:
    """``inside`` of a round of p2p transfers the replay draws as one: each one's pair,
    number, size and measured time."""
    members = frame.members
    out = Text(i18n.ui("inside round", lang).format(n=len(members), op=frame.instance.op)
               + "\n", style="bold")
    for i in members[:MEMBERS_SHOWN]:
        took = i18n.number(text.duration(i.time_ns), lang)
        out.append(f"  rank {i.group[0]} → rank {i.group[1]}  #{i.seq}  "
                   f"{bytes_text(i.size, lang)}  {took}\n")
    if len(members) > MEMBERS_SHOWN:
        out.append(i18n.ui("and more", lang).format(n=len(members) - MEMBERS_SHOWN).strip())
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
    line = i18n.ui("ring demo reduce" if k < n else "ring demo gather", lang).format(
        k=k, total=total, j=k if k < n else k - n + 1, m=n - 1)
    return Text(line + "\n", style="bold cyan")


def _collective(sched: schedules.Schedule, inst: Instance, backend: str,
                fit: costmodel.Fit | None, nccl_text: str | None, fabric: str | None,
                what_if: str | None, current: int, lang: str, width: int, brief: bool,
                steps: int) -> Text:
    """``inside`` of a collective: ``brief``, without its cost model, the wires NCCL named
    (``fabric``) and its schematic note; ``steps``, at most that many around the ``current``
    one."""
    out, n = Text(), len(inst.group)
    algorithm = i18n.ui("algorithm", lang).format(
        backend=backend, algorithm=schedule_notes.algorithm(sched, lang))
    out.append(f"{op_described(inst, lang)} · {algorithm} · {n} ranks · "
               f"S = {bytes_text(inst.size, lang)}\n", style="bold")
    times = f"{i18n.ui('time', lang)} {text.duration(inst.time_ns)} · " \
        f"{i18n.ui('log skew', lang)} {text.duration(inst.skew_ns)}"
    out.append(f"{i18n.ui('measured', lang)}  {i18n.number(times, lang)}\n")
    if not brief:
        _cost_line(out, sched, inst, fit, lang)
    if what_if is not None and not brief:
        out.append(f"{what_if}\n", style="italic")
    if nccl_text is not None:
        out.append(f"NCCL  {nccl_text}\n", style="bold")
    if fabric is not None and not brief:
        out.append(f"{i18n.ui('fabric', lang)}  {fabric}\n")
    if not brief:
        out.append(f"{i18n.ui('schematic', lang)}  {schedule_notes.note(sched, lang)}\n",
                   style="italic dim")
    shown = _window(len(sched.steps), current, steps)
    layout = grid_layout(sched, inst.group, lang, width)
    if n <= MAX_GRID_RANKS and layout.ranks >= min(n, MIN_GRID_RANKS):
        left_out = _left_out(layout, inst.group, lang)
        _grid(out, sched, inst.group, current, lang, layout, shown)
    else:  # too many ranks, or chunks: the steps without the buffers
        left_out = ""
        _steps(out, sched, inst.group, current, lang, width, shown)
    if left_out and brief:  # the cost model too, in the same row
        out.append(i18n.ui("not shown larger", lang).format(
            f"{left_out}, {i18n.ui('cost', lang).lower()}") + "\n", style="dim italic")
    elif left_out:
        out.append(i18n.ui("not shown", lang).format(left_out) + "\n", style="dim italic")
    out.rstrip()  # the panel's height is its text's: no blank line under the grid
    return out


def text_rows(shown: Text, width: int) -> int:
    """The rows ``shown`` takes wrapped at ``width``, as a panel wraps it."""
    return len(shown.wrap(_measuring_console(), width))


@functools.cache
def _measuring_console() -> Console:
    return Console(file=io.StringIO(), width=GRID_MAX_W, color_system=None)


def _whatif_text(inst: Instance, fabric: str | None, lang: str) -> str | None:
    return None if fabric is None else whatif_report.inside_line(inst.op, inst.size, fabric,
                                                                 lang)


def _nccl_text(nccl: Any, op: str, size: int, n: int, lang: str) -> str:
    """The algorithm NCCL's log gave for an op, or why it is unknown, in ``lang``."""
    said = nccl.algorithm_text(op, size, n)
    if lang == "en":
        return said
    choice = nccl.choice(op, size, n)
    if choice is not None:
        return i18n.ui("nccl algorithm", lang).format(choice.label())
    return i18n.nccl_text(said, lang)


def _cost_line(out: Text, sched: schedules.Schedule, inst: Instance,
               fit: costmodel.Fit | None, lang: str) -> None:
    c = costmodel.cost(sched)
    out.append(f"{i18n.ui('cost', lang)}  ", style="bold")
    out.append(i18n.ui_n("each rank sends", c.steps, lang, bytes=bytes_text(c.sent, lang)))
    if fit is None:
        out.append(f" · {i18n.ui('predicted', lang).lower()}: "
                   f"{i18n.ui('needs shapes', lang)}\n", style="dim")
        return
    predicted_us = fit.predict(c) * 1e6
    versus = i18n.ui("predicted vs", lang).format(predicted=f"{predicted_us:.0f}",
                                                     measured=f"{inst.time_ns / 1e3:.0f}")
    out.append(f" · {i18n.ui('predicted', lang).lower()} {versus}\n")
    alpha = f"{fit.alpha_s * 1e6:.0f}"
    beta = "" if math.isinf(fit.beta_bps) else \
        i18n.number(f"{fit.beta_bps / 1e9:.2g} GB/s", lang)
    # a term the fit set to nothing was not measured: said so, not shown as ∞ or 0
    fitted = i18n.ui("fit line" if beta and alpha != "0" else "fit no beta" if not beta
                     else "fit no alpha", lang)
    out.append("      " + fitted.format(alpha=alpha, beta=beta)
               + f"{i18n.ui('fitted on', lang).format(shapes=fit.shapes)}\n", style="dim")


def _window(steps: int, current: int, most: int = MAX_STEPS_SHOWN) -> range:
    """At most ``most`` steps, keeping the current one in view."""
    first = min(max(0, current - most // 2), max(0, steps - most))
    return range(first, min(steps, first + most))


def _sends(step: schedules.Step, ranks: tuple[int, ...], room: int | None = None,
           lang: str = "en") -> str:
    """A step's transfers ("0→1 c0  1→2 c1"); in ``room``, as many as fit then how many
    more, or only how many."""
    parts = [f"{ranks[t.src]}→{ranks[t.dst]} c{t.chunk}" for t in step.transfers]
    line = "  ".join(parts)
    if room is None or len(line) <= room:
        return line
    for listed in range(len(parts) - 1, 0, -1):
        line = "  ".join(parts[:listed]) + "  " + i18n.ui("n more", lang).format(
            n=len(parts) - listed)
        if len(line) <= room:
            return line
    return i18n.ui_n("transfers", len(parts), lang)


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
    label_w = max([6, len(i18n.ui("start", lang))]
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
    the block the step reduces (the n x n chunks of either leave no room for four ranks at
    160 columns)."""
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
        return N_("digits summed block")
    if reducing:
        return N_("digits summed")
    return N_("digits senders") if schedules.canonical_op(sched.op) == "all_to_all" \
        else N_("digits chunks")


def _left_out(layout: GridLayout, ranks: tuple[int, ...], lang: str) -> str:
    """What the grid leaves out ("r5-r7, transfers"), or ""."""
    hidden = list(ranks[layout.ranks:])
    parts = [text.rank_labels(hidden)] if hidden else []
    if not layout.sends_w:
        parts.append(i18n.ui("transfers column", lang))
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

    out.append(f"{i18n.ui('buffers', lang)}: "
               f"{i18n.ui(_digits_key(sched, reducing), lang)}\n", style="dim")
    out.append(f"{'':>{label_w}} {'':<{send_w}} " if listed else f"{'':>{label_w}} ")
    out.append("".join(f" {'r' + str(r):<{width}}" for r in ranks[:layout.ranks]) + "\n",
               style="bold")
    if shown.start == 0:
        row(i18n.ui("start", lang), "", states[0], "dim")
    for k in shown:
        step = sched.steps[k]
        row(schedule_notes.step_label(step.label, lang), _sends(step, ranks) if listed else "",
            states[k + 1],
            "bold reverse" if k == current else "bold cyan", step)


def _root_of(inst: Instance) -> int | None:
    """The root as a group-local rank, for rooted ops."""
    return inst.group.index(inst.root) if inst.root in inst.group else None
