"""The timeline: per-rank swimlanes of the last seconds, so a late rank is obvious.

Each op is a bar split in two: waiting (the rank arrived, its peers had not) in a light
shade, then transferring in a solid block coloured by op family. The rank everyone waits
for is the one whose bars are nearly all solid while the others' start pale.

Where a lane per rank does not fit the panel and the ranks are on several nodes (a thousand
ranks), the lanes are by node (``node_runs``): each collective from the first to the last
arrival of the node's ranks, its last rank marked and named, the worst nodes first, the rest
in one summary lane. By group (`g`: ``group_runs``), the same with a lane per process group of
the job, each of its collectives from its first to its last arrival, named by its ranks and
its layout (``shape_words.group_label``).

``render_lanes`` is a pure function of copied model data (testable without an app); the
``Timeline`` widget only copies that data under the session lock and draws it with the line
API when Textual asks. It never animates by itself: it changes when the app feeds it a frame.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from rich.segment import Segment as RichSegment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.strip import Strip

from commviz.knowledge import group_shapes
from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.tui.line_style import LineStyled
from commviz.viewer import arrivals, shape_words
from commviz.viewer.diagnose import Finding
from commviz.viewer.model import InFlight, Instance, Model, Segment
from commviz.viewer.plain_text import (
    MICROSECONDS,
    TIME_UNITS,
    duration,
    ranks_label,
)
from commviz.wire import protocol
from commviz.wire.protocol import PhaseSpan

WAIT, SOLID, UNKNOWN = "░", "█", "╌"
ARRIVE, MARK = "▒", "┃"  # lanes by node: its ranks still arriving; its last rank's arrival


def title(lang: str = "en", room: int | None = None, by_node: bool = False,
          by_group: bool = False) -> str:
    """The panel's title: its name, then what the lanes' characters mean, in ``lang``, in
    shorter words where the whole does not fit ``room`` cells. No separator glyph in it: a
    "·" between name and legend reads as a status, not a key. ``by_node``: the lanes are
    nodes' (``node_runs``): their own glyphs, and no dropped history to speak of; shorter,
    the plain name, then no mark's entry (the lanes name their last ranks). ``by_group``:
    the same, the lanes groups' (``group_runs``)."""
    ui = functools.partial(i18n.ui, lang=lang)
    spans = by_node or by_group

    def legend(waiting: str, name: str = N_("timeline"), mark: bool = True) -> str:
        if spans:
            return (f"{ui(name)}  {ARRIVE} {ui('legend arriving')}  "
                    + (f"{MARK} {ui('legend last rank')}  " if mark else "")
                    + f"{WAIT} {ui(waiting)}  {SOLID} {ui('legend transferring')}")
        return (f"{ui(name)}  {WAIT} {ui(waiting)}  "
                f"{SOLID} {ui('legend transferring')}  "
                f"{UNKNOWN} {ui('legend dropped')}")

    short = N_("legend waiting short")
    forms = [legend(N_("legend waiting")), legend(short)]
    if spans:
        named = N_("timeline by group") if by_group else N_("timeline by node")
        forms = [legend(N_("legend waiting"), named), legend(short, named), legend(short),
                 legend(short, mark=False)]
    return next((form for form in forms if room is None or len(form) <= room), forms[-1])


INFLIGHT_STYLE = "bold yellow"
MARK_STYLE = "bold red"

_FAMILIES: dict[str, tuple[str, ...]] = {
    "green": ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor",
              "reduce_scatter_single"),
    "cyan": ("all_gather", "all_gather_into_tensor", "all_gather_single", "gather",
             "all_gather_object", "gather_object"),
    "blue": ("broadcast", "scatter", "broadcast_object_list", "scatter_object_list"),
    "dark_orange": ("all_to_all", "all_to_all_single"),
    "magenta": ("send", "recv", "isend", "irecv", "send_object_list", "recv_object_list",
                "batch_isend_irecv"),
}
COLOUR = {op: colour for colour, ops in _FAMILIES.items() for op in ops}  # others: white


def colour_of(op: str) -> str:
    return COLOUR.get(op, "default")


Lane = Sequence[Segment] | np.ndarray  # Segments, or the model's (n, 4) rows (Model.lanes)


def render_lanes(segments_by_rank: Mapping[int, Lane], inflight: Iterable[InFlight],
                 t0_ns: int, t1_ns: int, width: int,
                 horizon: Mapping[int, int] | None = None,
                 exits: Mapping[int, int] | None = None) -> list[Text]:
    """One line per rank ("r0 " then its lane over [t0_ns, t1_ns]), then a time axis.

    A column shows whatever was going on during its slice of time: blank when idle, solid
    when transferring outweighs waiting, shaded otherwise. In-flight ops are waiting bars up
    to t1_ns (now; a rank's exit in ``exits`` if it left inside them), in bold yellow.
    Columns before a rank's ``horizon`` whose ops were dropped from the model's history show
    dots rather than a misleading idle.
    """
    return [Text.assemble(*runs)
            for runs in lane_runs(segments_by_rank, inflight, t0_ns, t1_ns, width, horizon,
                                  exits=exits)]


def lane_runs(segments_by_rank: Mapping[int, Lane], inflight: Iterable[InFlight],
              t0_ns: int, t1_ns: int, width: int,
              horizon: Mapping[int, int] | None = None,
              phases: Mapping[int, Sequence[PhaseSpan]] | None = None,
              lang: str = "en", right: str = "now",
              exits: Mapping[int, int] | None = None,
              height: int | None = None,
              nodes: Mapping[str, Sequence[int]] | None = None,
              groups: GroupLanes | None = None) -> list[list[tuple[str, str]]]:
    """``render_lanes`` as runs of (characters, style name), each line at most ``width``:
    what the widget turns into segments without building rich Text. A rank with compute
    phases (``commviz.phase``) gets a line of them under its lane, on the same time axis.
    ``right``: what t1_ns is, for the axis' right end (a UI string: "now", "timeline end",
    "latest"). ``exits``: when ranks that left said goodbye; an op they left inside is drawn
    up to then, not up to now. In fewer lines than that (``height``), the lanes are by node
    where the ranks are on two ``nodes`` or more (``node_runs``), or by group where
    ``groups`` are given (``group_runs``: the person chose them, `g`); otherwise the last
    ranks' lanes give way to a line that names them, above the axis."""
    running: dict[int, list[InFlight]] = {}
    for op in inflight:
        running.setdefault(op.rank, []).append(op)
    ranks = sorted(set(segments_by_rank) | set(running))
    by = lanes_by(segments_by_rank, running, phases, nodes, groups, height)
    if by == GROUP and groups is not None and height is not None:
        return group_runs(segments_by_rank, running, groups, t0_ns, t1_ns, width, height,
                          lang, right, exits)
    if by == NODE and nodes is not None and height is not None:
        return node_runs(segments_by_rank, running, nodes, t0_ns, t1_ns, width, height, lang,
                         right, exits)
    label_w = max((len(f"r{r}") for r in ranks), default=0) + 1
    lane_w = max(0, width - label_w)
    t1_ns = max(t1_ns, t0_ns + 1)
    cutoffs = horizon or {}
    lanes = _lanes([_rows(segments_by_rank.get(rank, ())) for rank in ranks],
                   [running.get(rank, ()) for rank in ranks], t0_ns, t1_ns, lane_w,
                   [cutoffs.get(rank) for rank in ranks], exits or {}) \
        if lane_w else [[] for _ in ranks]
    by_rank = []  # each rank's lines: its lane, and its phases under it
    for rank, lane in zip(ranks, lanes):
        own = [_cut([(f"r{rank}".rjust(label_w - 1) + " ", "bold"), *lane], width)]
        if phases and phases.get(rank) and lane_w:
            own.append(_cut([(" " * label_w, ""),
                             *_phase_runs(phases[rank], t0_ns, t1_ns, lane_w)], width))
        by_rank.append((rank, own))
    tail = [_cut([(" " * label_w + _axis(t1_ns - t0_ns, lane_w, lang, right), "dim")], width)]
    shown = [phases[rank] for rank in ranks if phases and phases.get(rank)] if lane_w else []
    if shown:
        tail.append(_cut(_phase_legend(shown, label_w, lang), width))
    lines = [line for _, own in by_rank for line in own]
    if height is not None and len(lines) + len(tail) > height:
        room, lines = height - len(tail) - 1, []  # a line names the ranks left out
        while by_rank and len(lines) + len(by_rank[0][1]) <= room:
            lines.extend(by_rank.pop(0)[1])
        left_out = ranks_label([rank for rank, _ in by_rank])
        lines.append(_cut([(" " * label_w + i18n.ui("lanes left out", lang).format(left_out),
                            "dim")], width))
    return lines + tail


def rank_rows(segments_by_rank: Mapping[int, object], running: Mapping[int, object],
              phases: Mapping[int, Sequence[PhaseSpan]] | None) -> int:
    """The lines a lane per rank takes: a lane per rank, a line of phases under those that
    have some, the axis, and the phases' legend if any."""
    ranks = segments_by_rank.keys() | running.keys()
    with_phases = sum(1 for r in ranks if phases and phases.get(r))
    return len(ranks) + with_phases + 1 + (with_phases > 0)


RANK, NODE, GROUP = "rank", "node", "group"  # what the lanes are of (``lanes_by``)


def lanes_by(segments_by_rank: Mapping[int, object], running: Mapping[int, object],
             phases: Mapping[int, Sequence[PhaseSpan]] | None,
             nodes: Mapping[str, Sequence[int]] | None, groups: GroupLanes | None,
             height: int | None) -> str:
    """What the lanes are of: ranks (RANK) where theirs fit ``height``; else groups (GROUP)
    where ``groups`` are given and some are known, nodes (NODE) where the ranks are on two or
    more (on one, a lane per node would say nothing), ranks again otherwise, with a line for
    the rest."""
    if height is None or rank_rows(segments_by_rank, running, phases) <= height:
        return RANK
    if groups is not None and len(groups.members):
        return GROUP
    return NODE if nodes is not None and len(nodes) > 1 else RANK


NODE_LABEL_MAX = 12  # cells of a node's name in its lane's label; longer names are cut
LEAST_NOTE_LANE = 16  # cells of lane at least, or a node lane's note (its last rank) goes


def node_runs(segments_by_rank: Mapping[int, Lane], running: Mapping[int, Sequence[InFlight]],
              nodes: Mapping[str, Sequence[int]], t0_ns: int, t1_ns: int, width: int,
              height: int, lang: str = "en", right: str = "now",
              exits: Mapping[int, int] | None = None) -> list[list[tuple[str, str]]]:
    """A lane per node, worst first, in ``height`` lines with the axis: each instance the span
    from the first to the last arrival of its ranks (ARRIVE), then waiting for the other
    nodes, then transferring; the last rank of its worst instance marked (MARK) and named on
    the right with how late it came after the instance's first arrival (``arrivals``). The
    nodes that do not fit share one summary lane: how many, and the latest of them."""
    names, members = list(nodes), list(nodes.values())
    rows = _row_lanes(segments_by_rank)
    node_of = {rank: i for i, ranks in enumerate(members) for rank in ranks}
    return _span_runs(arrivals.spans(rows, members), len(members),
                      lambda i: _node_label(names[i]), N_("timeline other nodes"),
                      lambda op: node_of.get(op.rank, -1), running, t0_ns, t1_ns, width,
                      height, lang, right, exits)


@dataclass(frozen=True)
class GroupLanes:
    """The process groups a timeline by group may draw a lane each: ``lane_of`` each gkey's
    lane (-1: none), ``members`` each lane's ranks, ``guessed`` what each shape's groups are
    likely for (``shape_words.guesses``), for their labels."""

    lane_of: np.ndarray
    members: Sequence[Sequence[int]]
    guessed: Mapping[group_shapes.Shape, str]


def group_lanes(groups: Sequence[tuple[str, Sequence[int]]], shown: Sequence[int],
                guessed: Mapping[group_shapes.Shape, str]) -> GroupLanes:
    """``GroupLanes`` of the model's ``groups`` (by gkey), a lane for each of ``shown``, the
    smaller groups first, then by their lowest rank: the order the lanes with nothing in view
    keep, the same every frame (the groups came in any order)."""
    shown = sorted(shown, key=lambda k: (len(groups[k][1]), min(groups[k][1])))
    lane_of = np.full(len(groups), -1, np.int64)
    lane_of[np.asarray(shown, np.int64)] = np.arange(len(shown))
    return GroupLanes(lane_of, [groups[k][1] for k in shown], guessed)


def group_runs(segments_by_rank: Mapping[int, Lane], running: Mapping[int, Sequence[InFlight]],
               groups: GroupLanes, t0_ns: int, t1_ns: int, width: int, height: int,
               lang: str = "en", right: str = "now",
               exits: Mapping[int, int] | None = None) -> list[list[tuple[str, str]]]:
    """``node_runs`` with a lane per process group (``arrivals.group_spans``): each of its
    collectives from its first to its last arrival, its last rank marked and named, the worst
    groups first, each named by its ranks and layout (``shape_words.group_label``), the rest
    in one summary lane. Transfers are in no group's lane."""
    lane_of = groups.lane_of

    def lane_of_op(op: InFlight) -> int:
        return int(lane_of[op.gkey]) if 0 <= op.gkey < len(lane_of) \
            and op.op not in protocol.P2P else -1

    rows = _row_lanes(segments_by_rank)
    return _span_runs(arrivals.group_spans(rows, lane_of, len(groups.members)),
                      len(groups.members),
                      lambda i: shape_words.group_label(groups.members[i], groups.guessed, lang),
                      N_("timeline other groups"), lane_of_op, running, t0_ns, t1_ns, width,
                      height, lang, right, exits)


def _span_runs(spans: arrivals.Spans, n_lanes: int, label_of: Callable[[int], str],
               others: str, lane_of_op: Callable[[InFlight], int],
               running: Mapping[int, Sequence[InFlight]], t0_ns: int, t1_ns: int, width: int,
               height: int, lang: str, right: str,
               exits: Mapping[int, int] | None) -> list[list[tuple[str, str]]]:
    """Lanes of ``spans`` (``n_lanes`` of them: nodes, groups), worst first, in ``height``
    lines with the axis; each named by ``label_of`` its index, the rest in one lane that says
    how many (``others``, a UI string of a count) and the latest of them. An op in flight is
    drawn in the lane ``lane_of_op`` says (-1: none)."""
    t1_ns = max(t1_ns, t0_ns + 1)
    ranked = arrivals.worst_first(spans, n_lanes)
    room = max(1, height - 1)
    shown, rest = (ranked, []) if len(ranked) <= room else \
        (ranked[:max(1, room - 1)], ranked[max(1, room - 1):])
    drawn = np.full(n_lanes, len(shown) if rest else -1)  # each lane's line drawn
    drawn[[w.lane for w in shown]] = np.arange(len(shown))
    n_drawn = len(shown) + bool(rest)
    labels = [label_of(w.lane) for w in shown]
    notes = [f"{ranks_label([w.last_rank])} +{_late(w.late_ns, lang)}" if w.late_ns >= 0
             else "" for w in shown]
    if rest:
        labels.append(i18n.ui_n(others, len(rest), lang))
        worst = max(w.late_ns for w in rest)
        notes.append(f"≤ +{_late(worst, lang)}" if worst >= 0 else "")
    label_w = max(map(len, labels)) + 1
    note_w = max(map(len, notes)) + 1
    if width - label_w - note_w < LEAST_NOTE_LANE:
        note_w = 0
    lane_w = max(0, width - label_w - note_w)
    lines = []
    if lane_w:
        s = spans.regroup(drawn, n_drawn)
        order = np.argsort(s.lane, kind="stable")
        cuts = np.searchsorted(s.lane[order], np.arange(1, n_drawn))
        lanes = np.split(np.stack([s.op, s.last, s.ready, s.end], axis=1)[order], cuts)
        arriving = np.split(np.stack([s.op, s.first, s.last], axis=1)[order], cuts)
        marks = [w.at_ns if w.late_ns >= 0 else None for w in shown]

        def drawn_of(op: InFlight) -> int:
            lane = lane_of_op(op)
            return int(drawn[lane]) if lane >= 0 else -1

        flying = _earliest(running, drawn_of, n_drawn)
        cells = _lanes(lanes, flying, t0_ns, t1_ns, lane_w, [None] * n_drawn, exits or {},
                       arriving, marks)
    else:
        cells = [[] for _ in labels]
    for label, lane, note in zip(labels, cells, notes):
        tail = [(" " + note.rjust(note_w - 1), "bold")] if note_w else []
        lines.append(_cut([(label.rjust(label_w - 1) + " ", "bold"), *lane, *tail], width))
    axis = _axis(t1_ns - t0_ns, lane_w, lang, right)
    return lines + [_cut([(" " * label_w + axis, "dim")], width)]


def _node_label(host: str) -> str:
    """A host's name in at most NODE_LABEL_MAX cells: its first label (``node042`` of
    ``node042.cluster``), cut in the middle where that is still longer, so that its head and
    its number stay (``gpu-a1…-042``)."""
    name = host.split(".", 1)[0] or host
    if len(name) <= NODE_LABEL_MAX:
        return name
    tail = NODE_LABEL_MAX // 3
    return name[:NODE_LABEL_MAX - tail - 1] + "…" + name[-tail:]


def _late(ns: int, lang: str) -> str:
    return i18n.number(duration(ns), lang)


def _earliest(running: Mapping[int, Sequence[InFlight]], lane_of: Callable[[InFlight], int],
              n_lanes: int) -> list[list[InFlight]]:
    """Each lane's ops in flight (by ``lane_of``; -1: none), each instance once, at its
    earliest start: a node's lane shows how long its first rank has been inside."""
    first: list[dict[tuple[int, int, str], InFlight]] = [{} for _ in range(n_lanes)]
    for ops in running.values():
        for op in ops:
            lane = lane_of(op)
            if lane < 0:
                continue
            key, seen = (op.gkey, op.seq, op.op), first[lane]
            if key not in seen or op.t_start < seen[key].t_start:
                seen[key] = op
    return [list(ops.values()) for ops in first]


def _phase_legend(spans: Sequence[Sequence[PhaseSpan]], label_w: int,
                  lang: str) -> list[tuple[str, str]]:
    """Under the axis, the phases drawn above, each as its initial (how a short one is
    drawn) then its name, in its colour: "phases  f forward  b backward  o optimizer"."""
    first: dict[str, int] = {}
    for span in sorted((sp for lane in spans for sp in lane), key=lambda sp: sp.t_start):
        first.setdefault(span.name, span.t_start)
    runs = [(" " * label_w + i18n.ui("legend phases", lang), "dim")]
    for name in first:
        runs.append((f"  {name[:1]} {name}", phase_colour(name)))
    return runs


PHASE_COLOURS = ("blue", "magenta", "dark_orange", "cyan", "green", "red")


def phase_colour(name: str) -> str:
    """The same colour for a phase name on every rank and every frame."""
    return PHASE_COLOURS[sum(map(ord, name)) % len(PHASE_COLOURS)]


def _phase_runs(spans: Sequence[PhaseSpan], t0: int, t1: int,
                width: int) -> list[tuple[str, str]]:
    """Each phase as its name then a rule over its columns (its initial where the name does
    not fit: "f─b──o" rather than "fbaco" of cut names); inner phases drawn over outer."""
    cells = [(" ", "")] * width
    scale = width / (t1 - t0)
    for span in sorted(spans, key=lambda sp: sp.depth):
        a = max(0, int((span.t_start - t0) * scale))
        b = min(width, max(a + 1, math.ceil((span.t_end - t0) * scale)))
        if a >= width or b <= 0:
            continue
        name = span.name if len(span.name) < b - a else span.name[:1]
        label = (name + "─" * (b - a))[:b - a] if span.t_start >= t0 else "─" * (b - a)
        style = phase_colour(span.name)
        cells[a:b] = [(ch, style) for ch in label]
    return [("".join(ch for ch, _ in run), style)
            for style, run in ((st, list(g)) for st, g in
                               itertools.groupby(cells, key=lambda c: c[1]))]


def _cut(runs: list[tuple[str, str]], width: int) -> list[tuple[str, str]]:
    out, left = [], width
    for chars, style in runs:
        if left <= 0:
            break
        out.append((chars[:left], style))
        left -= len(chars[:left])
    return out


def _row_lanes(segments_by_rank: Mapping[int, Lane]) -> Mapping[int, np.ndarray]:
    """Every rank's rows, as ``arrivals.spans`` takes them: the model's as they are."""
    if isinstance(segments_by_rank, arrivals.Lanes):
        return segments_by_rank
    return {rank: _rows(lane) for rank, lane in segments_by_rank.items()}


def _rows(segments: Lane) -> np.ndarray:
    if isinstance(segments, np.ndarray):
        return segments
    return np.array([(protocol.OP_CODE[s.op], s.t_start, s.t_ready, s.t_end) for s in segments],
                    dtype=np.int64).reshape(-1, 4)


def _lanes(lanes: list[np.ndarray], running: list[Sequence[InFlight]], t0: int, t1: int,
           width: int, cutoffs: list[int | None], exits: Mapping[int, int],
           arriving: list[np.ndarray] | None = None,
           marks: Sequence[int | None] = ()) -> list[list[tuple[str, str]]]:
    """Every rank's lane as runs of (characters, style), all ranks at once: a few array
    operations a frame rather than a few per rank and op.

    A column's op (and colour) is the one covering most of it; ties go to the lowest op code.
    A lane of several ranks (a node's) has ``arriving`` rows too (op code, first arrival, last
    arrival: some of its ranks are in, others not yet), drawn ARRIVE where they cover more than
    waiting does, and a ``marks`` column each (a time, None: none) for its last rank.
    """
    n = len(lanes)
    rows = np.concatenate([np.zeros((0, 4), np.int64), *(lane[:, :4] for lane in lanes)])
    of_rank = np.repeat(np.arange(n), [len(lane) for lane in lanes])
    arrive = np.concatenate([np.zeros((0, 3), np.int64), *(arriving or ())])
    # op codes are small: a lookup table numbers those present, in code order
    codes = np.flatnonzero(np.bincount(np.r_[rows[:, 0], arrive[:, 0]], minlength=1))
    n_codes = max(1, len(codes))
    number = np.zeros(int(codes[-1]) + 1 if len(codes) else 1, np.int64)
    number[codes] = np.arange(len(codes))
    # coverage per rank, op and column: waiting and transferring
    lane_of = of_rank * n_codes + number[rows[:, 0]]
    scale = width / (t1 - t0)
    x = np.clip((rows[:, 1:4] - t0) * scale, 0, width)  # start, ready, end as columns
    wait = _coverage(x[:, 0], x[:, 1], width, lane_of, n * n_codes)
    xfer = _coverage(x[:, 1], x[:, 2], width, lane_of, n * n_codes)
    wait, xfer = wait.reshape(n, n_codes, width), xfer.reshape(n, n_codes, width)
    flying = np.array([(op.t_start, min(t1, exits.get(op.rank, t1)))
                       for ops in running for op in ops], np.int64)
    x = np.clip((flying.reshape(-1, 2) - t0) * scale, 0, width)  # from its start to now
    inflight = _coverage(x[:, 0], x[:, 1], width,
                         np.repeat(np.arange(n), [len(ops) for ops in running]), n)
    waited, moved = wait.sum(axis=1), xfer.sum(axis=1)
    solid = (moved > 0) & (moved >= waited + inflight)
    in_flight = (inflight > 0) & (inflight >= waited)
    cut = np.array([-np.inf if c is None else (c - t0) * width / (t1 - t0) for c in cutoffs])
    unknown = np.arange(1, width + 1) <= cut[:, None]
    # a cell: 0 idle, 1 history dropped, 2 in flight, 3 a last rank's mark, then waiting,
    # transferring and arriving by colour
    names = [colour_of(protocol.OPS[code]) for code in codes.tolist()] or ["default"]
    palette = sorted(set(names))
    colour = np.array([palette.index(name) for name in names])
    conditions = [solid, in_flight, waited > 0, unknown]
    choices = [4 + len(palette) + colour[xfer.argmax(axis=1)], 2,
               4 + colour[wait.argmax(axis=1)], 1]
    if arriving is not None:
        x = np.clip((arrive[:, 1:] - t0) * scale, 0, width)
        of_lane = np.repeat(np.arange(n), [len(lane) for lane in arriving])
        came = _coverage(x[:, 0], x[:, 1], width, of_lane * n_codes + number[arrive[:, 0]],
                         n * n_codes).reshape(n, n_codes, width)
        conditions.insert(2, came.sum(axis=1) >= np.maximum(waited, 1e-9))
        choices.insert(2, 4 + 2 * len(palette) + colour[came.argmax(axis=1)])
    cells = np.select(conditions, choices, 0)
    for line, mark in zip(cells, marks):
        if mark is not None and t0 <= mark < t1:
            line[min(width - 1, int((mark - t0) * scale))] = 3
    looks = [(" ", ""), (UNKNOWN, "dim"), (WAIT, INFLIGHT_STYLE), (MARK, MARK_STYLE),
             *((WAIT, "dim " + name) for name in palette), *((SOLID, name) for name in palette),
             *((ARRIVE, name) for name in palette)]
    out = []
    for line in cells:
        edges = np.flatnonzero(line[1:] != line[:-1]) + 1
        bounds = np.r_[0, edges, width].tolist()
        out.append([(looks[cell][0] * (b - a), looks[cell][1])
                    for cell, a, b in zip(line[bounds[:-1]].tolist(), bounds, bounds[1:])])
    return out


def _coverage(xa: np.ndarray, xb: np.ndarray, width: int, lane: np.ndarray,
              lanes: int) -> np.ndarray:
    """How much of each column of its lane the intervals [xa, xb) cover, given in columns
    (1.0: all of it; overlaps add up), as a (lanes, width) array."""
    keep = xb > xa
    xa, xb, base = xa[keep], xb[keep], lane[keep] * (width + 1)
    ca = np.minimum(xa.astype(np.int64), width - 1)
    cb = np.minimum(xb.astype(np.int64), width - 1)
    one = ca == cb
    many = ~one
    size = lanes * (width + 1)
    cov = np.zeros(size)
    cov += np.bincount(base[one] + ca[one], xb[one] - xa[one], minlength=size)
    first, last = base[many] + ca[many], base[many] + cb[many]
    cov += np.bincount(first, ca[many] + 1 - xa[many], minlength=size)  # first, partial
    cov += np.bincount(last, xb[many] - cb[many], minlength=size)       # last, partial
    steps = np.bincount(first + 1, minlength=size) - np.bincount(last, minlength=size)
    steps = np.cumsum(steps.reshape(lanes, width + 1), axis=1)          # full ones between
    return (cov.reshape(lanes, width + 1) + steps)[:, :width]


# The window stretches for operations that come slowly (a demo's steps, 2 s apart by default,
# each a burst of operations for a hand-written ring): it holds about PACE_WINDOWS of the
# largest gaps between the latest PACE_OPS operations
PACE_OPS = 64
PACE_WINDOWS = 3
MAX_WINDOW_S = 30.0


def paced_window_s(recent: Sequence[Instance], minimum_s: float) -> float:
    """Seconds of history to show: ``minimum_s``, or more when the latest operations came
    slowly, so that a few of them stay in view together (at most MAX_WINDOW_S)."""
    starts = sorted(inst.t_first_start for inst in itertools.islice(reversed(recent), PACE_OPS))
    gap = max((b - a for a, b in zip(starts, starts[1:])), default=0) / 1e9
    return min(MAX_WINDOW_S, max(minimum_s, PACE_WINDOWS * gap))


_NICE = (1, 2, 5)  # ticks every 1, 2 or 5 x 10^k of the axis's unit: labels read -6s, -4s
GAP = 3  # columns at least between two labels
MAX_TICKS = 8  # fewer, when their labels do not fit
END_MARGIN = 20  # an ended run's window closes 1/20 of its width after its last op
ZOOMS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # z and Z


def _axis(window_ns: int, width: int, lang: str = "en", right: str = "now") -> str:
    """'-2s   -1.5s   -1s   -0.5s   now': ticks at round times before now (or before the
    run's end, ``right`` "timeline end"), as many as their labels leave room for, at most
    MAX_TICKS (a stretched window gives -6s -4s -2s, never -6.14s)."""
    now = i18n.ui(right, lang)
    if width < len(now):
        return " " * width
    cells = [" "] * (width - len(now)) + list(now)
    end = width - len(now) - 1  # labels end before this column, a space before "now"
    unit, scale = next(u for u in TIME_UNITS if window_ns >= u[1] or u[0] == MICROSECONDS)
    for exponent in range(-3, 4):  # the smallest round step whose labels do not touch
        for mantissa in _NICE:
            if window_ns / scale > MAX_TICKS * mantissa * 10.0 ** exponent:
                continue
            ticks = _ticks(window_ns / scale, mantissa * 10.0 ** exponent, exponent, width, unit,
                           lang)
            starts = [start for start, _ in ticks]
            ends = [start + len(label) for start, label in ticks]
            if all(e + GAP <= s for e, s in zip(ends, starts[1:])) and all(e < end for e in ends):
                for start, label in ticks:
                    cells[start:start + len(label)] = label
                return "".join(cells)
    return "".join(cells)


def _ticks(window: float, step: float, exponent: int, width: int, unit: str,
           lang: str) -> list[tuple[int, str]]:
    """(first column, label) of each tick ``step`` apart before now, the oldest first, in
    the axis's unit; a label centred on its column, clamped into the axis."""
    decimals = max(0, -exponent)
    ticks = []
    for k in range(int(window / step + 1e-9), 0, -1):
        ago = k * step
        digits = f"{ago:.{decimals}f}".rstrip("0").rstrip(".") if decimals else f"{ago:.0f}"
        label = i18n.number(f"-{digits}{unit}", lang)
        column = round((1 - ago / window) * width)
        ticks.append((max(0, column - len(label) // 2), label))
    return ticks


@functools.lru_cache(maxsize=256)
def _style(base: Style, name: str) -> Style:
    """Parsed once: a lane has hundreds of runs a frame under load."""
    return base + Style.parse(name) if name else base


@dataclass
class _Frame:
    """What one frame draws, copied from the model under the session lock."""

    segments: dict[int, np.ndarray]
    inflight: list[InFlight]
    horizon: dict[int, int]
    t0_ns: int
    t1_ns: int
    phases: dict[int, list[PhaseSpan]]
    right: str  # what t1_ns is: "now", "timeline end" (every rank is gone), "latest" (zoom)
    exits: dict[int, int]  # when the ranks that said goodbye did
    nodes: dict[str, list[int]]  # hosts -> their ranks, for lanes by node
    groups: GroupLanes | None  # the groups, for lanes by group (`g`); None: by node


class Timeline(LineStyled):
    """Swimlanes of the last ``window_s`` seconds at least (``paced_window_s``), or of the
    window the person zoomed to (``zoom_in``, ``zoom_out``), which ends at the latest activity
    rather than now: a zoomed view holds the last training step still to be read. Fed by
    ``update_from`` once per app frame; a new window shows from the next frame the app feeds.
    """

    DEFAULT_CSS = """
    Timeline {
        height: auto;
    }
    """

    window_s: reactive[float] = reactive(2.0)

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._frame: _Frame | None = None  # nothing is drawn until the app feeds a frame
        self._staged: _Frame | None = None  # copied, not drawn yet (``show_staged``)
        self._version = 0
        self._cached: tuple[tuple, list[Strip]] | None = None
        self.lang = "en"  # of the time axis; the app sets it
        self.zoom_s: float | None = None  # the window zoomed to; None: paced_window_s
        self._paced_s = self.window_s  # the window paced_window_s gave the last frame
        self.by_node = False  # the lanes drawn last were by node (node_runs): for the title
        self.by_group = False  # ... by group (group_runs)
        self.group_lanes = False  # lanes by group where a lane per rank does not fit (`g`)

    def zoom_in(self) -> float | None:
        """A shorter window: the next zoom below the one shown; returns the new zoom."""
        shown = self._shown_s()
        self.zoom_s = max((z for z in ZOOMS_S if z < shown * 0.99), default=ZOOMS_S[0])
        return self.zoom_s

    def zoom_out(self) -> float | None:
        """A longer window, back to the paced one (None) once it would show as much."""
        if self.zoom_s is not None:
            wider = min((z for z in ZOOMS_S if z > self.zoom_s * 1.01), default=None)
            self.zoom_s = None if wider is None or wider >= self._paced_s else wider
        return self.zoom_s

    def _shown_s(self) -> float:
        f = self._frame
        return self.zoom_s or ((f.t1_ns - f.t0_ns) / 1e9 if f is not None else self.window_s)

    def update_from(self, model: Model, now_ns: int, paused: bool = False,
                    findings: Iterable[Finding] = (), staged: bool = False) -> None:
        """Copy what the next frame draws. Call it under the session lock; drawing happens
        later, outside it. ``paused``: the demo's ranks wait for a key, so the window holds
        the latest activity, as a zoomed one does, rather than scroll it away. ``findings``:
        those that hold now (``Diagnosis.findings``), for the ranks found lost. ``staged``:
        kept until ``show_staged``, so that copying and drawing can fall in different app
        frames (at a thousand ranks each takes a good part of one)."""
        self._paced_s = paced_window_s(model.recent, self.window_s)
        window_ns = int((self.zoom_s or self._paced_s) * 1e9)
        inflight = list(model.inflight.values())
        ranks = list(model.ranks.values())
        exits = {s.rank: s.exit_ns for s in ranks if s.exited and s.exit_ns}
        # once every rank is gone (said goodbye, or found lost) the window stops at the run's
        # end: its last seconds stay on screen to be read, rather than scroll away; an op a
        # rank left inside ends there too
        lost = {r for f in findings if f.type == "lost_rank" for r in f.ranks}
        last = max([s.last_end_ns for s in ranks]
                   + [exits[op.rank] for op in inflight if op.rank in exits], default=0)
        ended = bool(ranks) and last > 0 and all(s.rank in exits or s.rank in lost
                                                 for s in ranks) \
            and all(op.rank in exits or op.rank in lost for op in inflight)
        right = N_("now")
        if ended:
            now_ns, right = min(now_ns, last + window_ns // END_MARGIN), N_("timeline end")
        elif self.zoom_s is not None or paused:  # the latest activity stays in view
            latest = max([last, model.last_phase_end_ns()] + [op.t_start for op in inflight])
            if latest > 0 and latest + window_ns // END_MARGIN < now_ns:
                now_ns, right = latest + window_ns // END_MARGIN, N_("latest")
        since = now_ns - window_ns
        groups = None
        if self.group_lanes:  # the groups of the job shown, each shape's guess for its name
            guessed = shape_words.guesses(model.group_families()[0])
            groups = group_lanes(model.groups, model.shown_groups(), guessed)
        self._staged = _Frame(model.lanes(since, now_ns, groups=self.group_lanes), inflight,
                              dict(model.lane_horizon), since, now_ns,
                              model.phases(since, now_ns), right, exits, model.nodes(), groups)
        if not staged:
            self.show_staged()

    def show_staged(self) -> bool:
        """Draw the frame ``update_from`` copied last, if not drawn yet; whether one was."""
        if self._staged is None:
            return False
        rows = self._rows()
        self._frame, self._staged = self._staged, None
        self._version += 1
        self.refresh(layout=self._rows() != rows)
        return True

    @property
    def ranks_fit(self) -> bool:
        """Whether a lane per rank fits the panel now (then `g` has nothing to change): read
        from what the next frame draws, not from the last frame drawn (a key pressed before
        the first paint)."""
        return not self.size.height or self._rows() <= self.size.height

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self._rows()

    def _rows(self) -> int:
        """A lane per rank (``rank_rows``): by node only where the panel has fewer rows."""
        if self._frame is None:
            return 1
        f = self._frame
        return rank_rows(f.segments, {op.rank: op for op in f.inflight}, f.phases)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        strips = self._strips(width)
        return strips[y] if y < len(strips) else Strip.blank(width, self.line_style)

    def _strips(self, width: int) -> list[Strip]:
        if self._frame is None:
            return []
        # a new frame, size, theme or language: redraw
        key = (self._version, width, self.size.height, self.line_style, self.lang)
        if self._cached is None or self._cached[0] != key:
            f, height = self._frame, self.size.height or None
            lines = lane_runs(f.segments, f.inflight, f.t0_ns, f.t1_ns, width, f.horizon,
                              f.phases, self.lang, f.right, f.exits, height, f.nodes, f.groups)
            running = {op.rank: op for op in f.inflight}
            by = lanes_by(f.segments, running, f.phases, f.nodes, f.groups, height)
            self.by_node, self.by_group = by == NODE, by == GROUP
            base = self.line_style
            strips = [Strip([RichSegment(chars, _style(base, name)) for chars, name in runs])
                      .extend_cell_length(width, base) for runs in lines]
            self._cached = (key, strips)
        return self._cached[1]
