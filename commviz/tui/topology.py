"""The topology view: the ranks on a ring (a rectangle beyond 16), and each transfer moving along
its link, step by step, as the backend's algorithm moves it; beyond 32 ranks, a heatmap of
who sends how much to whom; an op of a group beyond 64 ranks, as its nodes
(``scaled_replay``); beyond what a heatmap fits rank by rank, for point-to-point transfers
and all_to_all, a node-by-node heatmap of the bytes they moved since the viewer started, with
the busiest pairs of nodes named (``node_heatmap``, fed by ``viewer/node_traffic``).

``render_topology`` is a pure function of one ``AnimFrame`` (testable without an app); the
``Topology`` widget owns an ``Animator`` (``animation.py``), which replays the completed
instances the app feeds it at human speed, and redraws at ``FPS`` only while something
moves. Keys belong to the app: it binds them to ``faster``, ``slower`` and ``toggle_pause``.

Colours say what the receiver does with a collective's chunk: green adds it into its own (a
reduction), cyan stores it (a copy); a point-to-point transfer is yellow, as what the program
does with it is not known. The live diagnosis's links (who waits on whom) are red dashes over
the transfers' paths. With ``app.animation_level == "none"`` every step is drawn whole
and still: complete arrows, no moving marker. Under the transfers, ranks of one host whose
GPUs NVML links are joined by a wire labelled as ``nvidia-smi topo -m`` labels it: heavy
magenta for NVLink (``NV#``), dim and dashed for a PCIe path (PIX, PXB, PHB, NODE, SYS).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.timer import Timer

from commviz.knowledge.hierarchy import Scaled
from commviz.knowledge.schedules import Schedule, Transfer
from commviz.text import i18n, schedule_notes
from commviz.text.i18n import N_
from commviz.tui import scaled_replay
from commviz.tui.animation import Animator, AnimFrame, frame_label, host_of, plan
from commviz.tui.line_style import LineStyled
from commviz.tui.panels.words import finding_name
from commviz.tui.rank_facts import backend_of, ops_in
from commviz.viewer.diagnose import Finding
from commviz.viewer.model import Instance, Model
from commviz.viewer.node_traffic import ALL_TO_ALL, NodePair, NodeTraffic
from commviz.viewer.plain_text import duration, human_bytes, process_end
from commviz.viewer.rank_state import State, rank_state

RING_MAX = 16  # beyond this many ranks, a rectangle (a grid where that does not fit)
HEATMAP_MIN = 33  # from this many ranks, a rank-by-rank traffic heatmap instead of links
BUSIEST = 5  # node pairs named beside (or under) the node heatmap, at most
LIST_W = 30  # the columns the busiest pairs need to go beside the node heatmap
SHADES = " ░▒▓█"
FPS = 20.0
PATH, MARKER = "·", "●"
ALERT, ALERT_STYLE = "╌", "red"
REDUCE_STYLE, COPY_STYLE, TRANSFER_STYLE = "green", "cyan", "yellow"
STATE_W = 14  # a rank's state is cut to this many cells
# 8 arrowheads by direction, counter-clockwise from east (screen y grows downwards)
ARROWS = "→↗↑↖←↙↓↘"
# A GPU link's cells by the direction the line takes there: horizontal, vertical, \ and /
NVLINK_CELLS, PCIE_CELLS = "━┃╲╱", "┄┆╲╱"
NVLINK_STYLE, PCIE_STYLE = "bold magenta", "dim"

LINK_LABEL_AT = (0.3, 0.7, 0.5)  # where along a GPU link its kind goes, first that fits
LABEL_ALL_MAX = 6  # GPU links up to which each is labelled; beyond, each kind once (NVSwitch)

# Drawing layers: a cell takes a new character only from the same layer or one above. GPU
# links lie under everything; the diagnosis's links over the transfers' paths; links' labels,
# placed beside states, stay above the paths and keep chunk tags off them.
_LINK, _PATH, _ALERT, _STATE, _KIND, _HEAD, _CHUNK, _MARK, _RANK = range(1, 10)


# ----------------------------------------------------------------------------- layout

def layout(n: int, width: int, height: int) -> dict[int, tuple[int, int]]:
    """Cell (x, y) of each rank's label centre in a ``width`` x ``height`` area.

    A ring (an ellipse filling the area, rank 0 at the top, rank+1 clockwise; an odd number
    of ranks, whose lowest sit above the ellipse's bottom, stretched down to it) for up to
    RING_MAX ranks, beyond which the ring goes round a rectangle (``_loop``), or where that
    does not fit, a grid, its rows alternating direction so that ring neighbours stay side by
    side. Ranks that do not fit a small area are left out (the title says so).
    """
    if n <= 0 or width <= 0 or height <= 0:
        return {}
    half = len(_label(n - 1)) / 2
    if n <= RING_MAX:
        cx, cy = (width - 1) / 2, (height - 1) / 2
        # a free row above and below leaves the top and bottom ranks room for their state
        rx, ry = max(0.0, cx - half), cy - 1 if height >= 9 else cy
        angles = [-math.pi / 2 + 2 * math.pi * r / n for r in range(n)]
        lowest = max(math.sin(a) for a in angles)  # 1, but 0.5 for 3 ranks
        stretch = 2 / (1 + lowest) if n > 1 else 1.0
        return {r: (round(cx + rx * math.cos(a)),
                    round(cy - ry + ry * (1 + math.sin(a)) * stretch))
                for r, a in enumerate(angles)}
    loop = _loop(n, width, height)
    if loop:
        return loop
    w = len(_label(n - 1)) + 1
    max_cols = max(1, width // w)
    cols = min(max_cols, max(math.ceil(math.sqrt(2 * n)), math.ceil(n / height)))
    rows = min(height, math.ceil(n / cols))
    out = {}
    for r in range(min(n, rows * cols)):
        row, col = divmod(r, cols)
        if row % 2:  # a snake: ring neighbours r, r+1 stay next to each other
            col = cols - 1 - col
        out[r] = (int((col + 0.5) * width / cols), int((row + 0.5) * height / rows))
    return out


def _loop(n: int, width: int, height: int) -> dict[int, tuple[int, int]]:
    """The ring round a rectangle, clockwise from rank 0 at the top left: a row along the top,
    a column down the right, a row back along the bottom, a column up the left, the sides as
    short as the width allows. Every rank beside its ring neighbours: in a grid's snake the
    link from the last rank back to rank 0 crosses every row. {} where it does not fit."""
    w = len(_label(n - 1)) + 1
    top, bottom = (1, height - 2) if height >= 9 else (0, height - 1)
    # a free row between ranks one above the other leaves their link a cell to be drawn in
    side = next((k for k in range((bottom - top) // 2) if math.ceil((n - 2 * k) / 2) * w <= width),
                None)
    if side is None:
        return {}
    across = math.ceil((n - 2 * side) / 2)
    below = n - 2 * side - across
    xs = [int((i + 0.5) * width / across) for i in range(across)]
    step = (bottom - top) / (side + 1)
    out = {i: (x, top) for i, x in enumerate(xs)}
    out.update({across + j: (xs[-1], round(top + (j + 1) * step)) for j in range(side)})
    out.update({across + side + i: (int((below - i - 0.5) * width / below), bottom)
                for i in range(below)})
    out.update({n - side + j: (xs[0], round(bottom - (j + 1) * step)) for j in range(side)})
    return out


def _label(rank: int) -> str:
    return f"[{rank}]"


def label_span(rank: int, x: int) -> tuple[int, int]:
    """First and last cell of a rank's label centred on x."""
    w = len(_label(rank))
    return x - w // 2, x - w // 2 + w - 1


def line_cells(x0: int, y0: int, x1: int, y1: int) -> list[tuple[int, int]]:
    """Bresenham's line from (x0, y0) to (x1, y1), both ends included."""
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    err, cells = dx + dy, []
    while True:
        cells.append((x0, y0))
        if x0 == x1 and y0 == y1:
            return cells
        e2 = 2 * err
        if e2 >= dy:
            err, x0 = err + dy, x0 + sx
        if e2 <= dx:
            err, y0 = err + dx, y0 + sy


def arrow(dx: int, dy: int) -> str:
    """The arrowhead for a move of (dx, dy) cells (cells are about twice as tall as wide)."""
    angle = math.atan2(-2 * dy, dx)
    return ARROWS[round(angle / (math.pi / 4)) % 8]


@dataclass(frozen=True)
class Path:
    """The cells a transfer travels, outside its two ranks' labels."""

    transfer: Transfer
    cells: list[tuple[int, int]]
    head: str

    def at(self, progress: float) -> tuple[int, int]:
        """The cell the marker is on after ``progress`` (0..1) of the step."""
        return self.cells[round(min(1.0, max(0.0, progress)) * (len(self.cells) - 1))]


def path_of(t: Transfer, where: Mapping[int, tuple[int, int]]) -> Path | None:
    """The path of one transfer between laid-out ranks; None when an end is not shown."""
    if t.src not in where or t.dst not in where or t.src == t.dst:
        return None
    (x0, y0), (x1, y1) = where[t.src], where[t.dst]
    ends = [(y, label_span(r, x)) for r, (x, y) in ((t.src, (x0, y0)), (t.dst, (x1, y1)))]
    cells = [(x, y) for x, y in line_cells(x0, y0, x1, y1)
             if not any(y == ly and a <= x <= b for ly, (a, b) in ends)]
    return Path(t, cells, arrow(x1 - x0, y1 - y0)) if cells else None


# ----------------------------------------------------------------------------- drawing

class _Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.chars = [[" "] * width for _ in range(height)]
        self.styles = [[""] * width for _ in range(height)]
        self.layer = [[0] * width for _ in range(height)]

    def put(self, x: int, y: int, text: str, style: str, layer: int) -> None:
        for i, ch in enumerate(text):
            if 0 <= x + i < self.width and 0 <= y < self.height \
                    and layer >= self.layer[y][x + i]:
                self.chars[y][x + i], self.styles[y][x + i] = ch, style
                self.layer[y][x + i] = layer

    def free(self, x: int, y: int, length: int, below: int) -> bool:
        """Whether the span is inside and holds nothing of layer ``below`` or above."""
        return 0 <= y < self.height and 0 <= x and x + length <= self.width and \
            all(layer < below for layer in self.layer[y][x:x + length])

    def lines(self) -> list[Text]:
        out = []
        for chars, styles in zip(self.chars, self.styles):
            line = Text()
            start = 0
            for i in range(1, self.width + 1):
                if i == self.width or styles[i] != styles[start]:
                    line.append("".join(chars[start:i]), styles[start] or None)
                    start = i
            out.append(line)
        return out


def render_topology(n_ranks: int, frame: AnimFrame | None, width: int, height: int,
                    states: Mapping[int, Text | str] | None = None, *, static: bool = False,
                    status: str = "", lang: str = "en",
                    alerts: Iterable[tuple[int, int]] = (),
                    flagged: Collection[int] = (),
                    gpu_links: Mapping[tuple[int, int], str] | None = None,
                    nodes: NodeMap | None = None) -> list[Text]:
    """``height`` lines of ``width`` cells: the frame's label (and, from 10 lines, what the
    schedule simplifies), the ranks with the current step's transfers, and a legend with
    ``status`` (e.g. ``Animator.summary()``).

    ``static`` draws every transfer of the step complete, with no moving marker (as does a
    ``done`` frame, held once the queue is empty). ``flagged`` ranks (a finding of the live
    diagnosis names them) are drawn in red, and ``alerts`` (rank pairs: who waits on whom, a
    slow link) as red dashed links under the replay. ``gpu_links`` (``Model.gpu_links()``:
    rank pair -> ``NV#`` or a PCIe level) are the wires under everything, labelled.
    ``nodes``: the bytes between nodes, drawn instead of the rank-by-rank heatmap where that
    would bin ranks and no collective but all_to_all is replayed (``shows_nodes``).
    """
    if width <= 0 or height <= 0:
        return [Text() for _ in range(max(0, height))]
    transfers = frame.transfers if frame is not None else ()
    n = max([n_ranks, *(max(t.src, t.dst) + 1 for t in transfers)])
    head = _titles(frame, 2 if height >= 10 else 1, lang)
    legend = height >= 5
    area_h = max(0, height - len(head) - legend)
    still = static or (frame is not None and frame.done)
    scaled = frame is not None and isinstance(frame.schedule, Scaled)
    if scaled or n >= HEATMAP_MIN:  # a large group's op as nodes; or too many ranks for links
        by_node = not scaled and nodes is not None and shows_nodes(n, frame, nodes, width,
                                                                   area_h)
        if scaled:
            body = scaled_replay.body(frame, width, area_h, still, lang)
        elif by_node and nodes is not None:
            body = node_heatmap(nodes, frame, width, area_h, still, lang)
        else:
            body = heatmap(n, frame, width, area_h, still, lang)
        lines = [*head, *body]
        if legend:
            lines.append(_legend(status, width, lang=lang,
                                 p2p=by_node or (frame is not None and frame.p2p)))
        for line in lines:
            line.truncate(width, overflow="ellipsis", pad=True)
        return lines[:height]
    gpu_links = gpu_links or {}
    where = layout(n, width, area_h)
    if len(where) < n:
        head[0] = Text(i18n.ui("do not fit", lang).format(first=len(where), last=n - 1),
                       style="dim") + head[0]
    canvas = _Canvas(width, area_h)
    # ranks first, then states: paths go round them; chunk tags never cover either
    group = set(frame.instance.group) if frame is not None else set()
    sending = {t.src for t in transfers}
    for r, (x, y) in where.items():
        style = "bold red reverse" if r in flagged else \
            "bold reverse" if r in sending and not still else \
            "bold" if r in group or not group else "dim"
        canvas.put(label_span(r, x)[0], y, _label(r), style, _RANK)
    wires = _draw_gpu_links(canvas, where, gpu_links)
    paths = [path for path in (path_of(t, where) for t in transfers) if path is not None]
    dashed = _draw_alerts(canvas, where, alerts, paths)
    if states is not None and frame is not None:  # a past op: what each rank did in it
        states = replay_roles(frame, states, flagged, lang)
    # a ring's states need about two free rows per rank on each side
    if states and (n > RING_MAX or n <= area_h - 4):
        _draw_states(canvas, where, states, {c for p in paths for c in p.cells} | dashed)
    _label_gpu_links(canvas, list(wires.values()))
    for path in paths:
        assert frame is not None
        wire = wires.get((min(path.transfer.src, path.transfer.dst),
                          max(path.transfer.src, path.transfer.dst)))
        if wire is not None:  # its line from the other end may step differently: not beside
            for x, y in set(wire[0].cells) - set(path.cells):
                canvas.put(x, y, " ", "", _PATH)
        _draw_path(canvas, path, 1.0 if still else frame.progress, still, frame.schedule is None,
                   lang)
    lines = [*head, *canvas.lines()]
    if legend:
        lines.append(_legend(status, width, {_is_nvlink(k) for k in gpu_links.values()}, lang,
                             frame is not None and frame.p2p))
    for line in lines:
        line.truncate(width, overflow="ellipsis", pad=True)
    return lines[:height]


def ranks_per_cell(n: int, width: int, height: int) -> int:
    """How many ranks a cell of the rank-by-rank heatmap stands for in this area."""
    label_w = len(str(n - 1)) + 2
    return max(1, math.ceil(n / max(1, height - 2)), math.ceil(n / max(1, width - label_w)))


@dataclass(frozen=True)
class NodeMap:
    """What the node heatmap draws: hosts in ``Model.nodes()``'s order, each rank's index
    there, the bytes between them (row: from) and the busiest pairs of distinct nodes."""

    hosts: list[str]
    node_of: Mapping[int, int]
    bytes: Any
    busiest: list[NodePair]


def shows_nodes(n: int, frame: AnimFrame | None, nodes: NodeMap, width: int,
                height: int) -> bool:
    """Whether the node heatmap takes the place of the ranks' one: more ranks than its cells,
    several nodes that moved bytes, and nothing replayed but a transfer or an all_to_all
    (whose schedule the ranks' heatmap draws as it is)."""
    replayed = frame is None or frame.p2p or frame.instance.op in ALL_TO_ALL
    return replayed and len(nodes.hosts) > 1 and bool(nodes.busiest) \
        and ranks_per_cell(n, width, height) > 1


def node_heatmap(nodes: NodeMap, frame: AnimFrame | None, width: int, height: int,
                 still: bool, lang: str = "en") -> list[Text]:
    """The bytes each node (row) sent each node (column) by transfers and all_to_all, shaded
    against the busiest cell, nodes binned where they do not fit, the replayed step's pairs
    coloured; the busiest pairs of nodes named beside it, or under it where it is narrow."""
    if height < 3 or width < 12:
        return [Text() for _ in range(max(0, height))]
    k = len(nodes.hosts)
    label_w = len(str(k - 1)) + 2
    listed = min(BUSIEST, len(nodes.busiest))
    rows = height - 2
    per = max(1, math.ceil(k / rows), math.ceil(k / (width - label_w)))
    side = width - label_w - math.ceil(k / per) * 2 >= LIST_W + 2
    if not side:
        listed = min(listed, max(1, (height - 2) // 4))
        rows = height - 3 - listed
        per = max(1, math.ceil(k / max(1, rows)), math.ceil(k / (width - label_w)))
    cells = math.ceil(k / per)
    cell_w = 2 if cells * 2 <= width - label_w - (LIST_W + 2 if side else 0) else 1
    sent = np.zeros((cells, cells))
    binned = np.arange(k) // per
    np.add.at(sent, (binned[:, None], binned[None, :]), nodes.bytes)
    now: dict[tuple[int, int], bool] = {}
    if frame is not None:
        for t in frame.transfers:
            a, b = nodes.node_of.get(t.src), nodes.node_of.get(t.dst)
            if a is not None and b is not None:
                now[(a // per, b // per)] = t.reduce
    top = float(sent.max()) or 1.0
    cell = i18n.ui("node heatmap cell", lang).format(n=per) if per > 1 else ""
    out = _heat_head(cell + i18n.ui("node heatmap", lang), label_w, cells, cell_w, per)
    levels = np.where(sent > 0, 1 + np.minimum(3, (sent / top * 3.999).astype(int)), 0)
    lit = f"bold {TRANSFER_STYLE}" + ("" if still else " reverse")
    for r, row in enumerate(levels.tolist()):
        line = Text(f"{r * per:>{label_w - 1}} ", style="dim")
        line.append("".join(SHADES[level] * cell_w for level in row))  # one span a row
        for c in (c for (a, c) in now if a == r):
            line.stylize(lit, label_w + c * cell_w, label_w + (c + 1) * cell_w)
        out.append(line)
    named = [Text(i18n.ui("busiest pairs", lang), style="bold")] + [
        Text(i18n.ui("busiest pair", lang).format(
            src=p.src, dst=p.dst, bytes=i18n.number(human_bytes(p.nbytes), lang)))
        for p in nodes.busiest[:listed]]
    if side:
        at = label_w + cells * cell_w + 2
        for i, said in enumerate(named):
            if i + 2 < len(out):
                out[i + 2].append(" " * (at - out[i + 2].cell_len))
                out[i + 2].append_text(said)
    else:
        out += named
    for line in out:
        line.truncate(width, overflow="ellipsis")
    return out[:height] + [Text() for _ in range(height - len(out))]



def _heat_head(title: str, label_w: int, cells: int, cell_w: int, per: int) -> list[Text]:
    """A heatmap's first lines: its title, then the column axis (every 8th column's first
    rank or node, ``per`` a cell)."""
    axis = Text(" " * label_w)
    for c in range(0, cells, max(1, 8 // cell_w)):
        axis.append(f"{c * per:<8}", style="dim")
    return [Text(title, style="dim"), axis]

def heatmap(n: int, frame: AnimFrame | None, width: int, height: int,
            still: bool, lang: str = "en") -> list[Text]:
    """Too many ranks for links: a matrix of the bytes each rank (row) sends each rank
    (column) over the whole operation being replayed, shaded from the schedule; the current
    step's pairs are coloured. Ranks are binned when the matrix does not fit, and each cell
    is two columns wide where there is room, so that it looks square.
    """
    if height < 3 or width < 12:
        return [Text() for _ in range(max(0, height))]
    label_w = len(str(n - 1)) + 2
    per = ranks_per_cell(n, width, height)  # a title row and the column axis
    cells = math.ceil(n / per)
    cell_w = 2 if cells * 2 <= width - label_w else 1
    sent = [[0] * cells for _ in range(cells)]
    now: dict[tuple[int, int], bool] = {}
    if frame is not None and frame.schedule is not None:
        group = frame.instance.group if len(frame.instance.group) == frame.schedule.n \
            else tuple(range(frame.schedule.n))
        for step in frame.schedule.steps:
            for t in step.transfers:
                sent[group[t.src] // per][group[t.dst] // per] += t.nbytes
        for t in frame.transfers:
            now[(t.src // per, t.dst // per)] = t.reduce
    top = max((max(row) for row in sent), default=0) or 1
    binned = i18n.ui("heatmap cell", lang).format(n=per) if per > 1 else ""
    out = _heat_head(binned + i18n.ui("heatmap", lang), label_w, cells, cell_w, per)
    for r in range(cells):
        line = Text(f"{r * per:>{label_w - 1}} ", style="dim")
        for c in range(cells):
            level = 0 if not sent[r][c] else 1 + min(3, int(sent[r][c] / top * 3.999))
            style = "" if (r, c) not in now else \
                f"bold {REDUCE_STYLE if now[(r, c)] else COPY_STYLE}"
            if (r, c) in now and not still:
                style += " reverse"
            line.append(SHADES[level] * cell_w, style=style)
        out.append(line)
    for line in out:
        line.truncate(width, overflow="ellipsis")
    return out[:height] + [Text() for _ in range(height - len(out))]


def _titles(frame: AnimFrame | None, rows: int, lang: str) -> list[Text]:
    """The label, then (given two rows) the measured time and what the drawing simplifies."""
    if frame is None:
        return [Text(i18n.ui("waiting first", lang), style="dim")] + \
            [Text()] * (rows - 1)
    out = [Text(frame_label(frame, lang), style="bold")]
    if rows > 1:
        took = i18n.ui("took", lang).format(
            i18n.number(duration(frame.instance.time_ns), lang))
        if frame.count > 1:
            took += i18n.ui("the first", lang)
        note = scaled_replay.note(frame.schedule, lang) \
            if isinstance(frame.schedule, Scaled) else \
            schedule_notes.note(frame.schedule, lang) if frame.schedule is not None else \
            i18n.ui("real transfer", lang)
        out.append(Text(f"{took} · {note}", style="dim italic"))
    return out


def _draw_path(canvas: _Canvas, path: Path, progress: float, still: bool, p2p: bool,
               lang: str = "en") -> None:
    t = path.transfer
    colour = TRANSFER_STYLE if p2p else REDUCE_STYLE if t.reduce else COPY_STYLE
    mx, my = path.at(0.5 if still else progress)
    reached = path.cells.index((mx, my))
    for i, (x, y) in enumerate(path.cells):
        canvas.put(x, y, PATH, colour if still or i <= reached else f"dim {colour}", _PATH)
    # the head and the marker never cover a word (a rank's state, a link's kind)
    clear = [(x, y) for x, y in path.cells if canvas.layer[y][x] not in (_STATE, _KIND)]
    if clear:
        hx, hy = clear[-1]
        canvas.put(hx, hy, path.head, f"bold {colour}", _HEAD)
    if not still and (mx, my) in clear:
        canvas.put(mx, my, MARKER, f"bold bright_{colour}", _MARK)
    tag = i18n.number(human_bytes(t.nbytes), lang) if p2p else f"c{t.chunk}"
    for x, y in ((mx + 1, my), (mx - len(tag), my), (mx, my - 1), (mx, my + 1)):
        if canvas.free(x, y, len(tag), _STATE):
            canvas.put(x, y, tag, f"bold {colour}", _CHUNK)
            return


def _draw_alerts(canvas: _Canvas, where: Mapping[int, tuple[int, int]],
                 alerts: Iterable[tuple[int, int]], paths: Iterable[Path]
                 ) -> set[tuple[int, int]]:
    """Each link the diagnosis points at, dashed over the transfers' paths (their dots would
    hide it): along a transfer drawn between the same ranks, whose line from the other end may
    step differently, else its own line. Returns the cells dashed."""
    drawn = {frozenset((p.transfer.src, p.transfer.dst)): p.cells for p in paths}
    out: set[tuple[int, int]] = set()
    for a, b in alerts:
        own = path_of(Transfer(a, b, 0, 0, False), where)
        cells = drawn.get(frozenset((a, b)), own.cells if own is not None else [])
        for x, y in cells:
            canvas.put(x, y, ALERT, ALERT_STYLE, _ALERT)
        out.update(cells)
    return out


def _is_nvlink(kind: str) -> bool:
    return kind.startswith("NV")


def _draw_gpu_links(canvas: _Canvas, where: Mapping[int, tuple[int, int]],
                    links: Mapping[tuple[int, int], str]
                    ) -> dict[tuple[int, int], tuple[Path, str]]:
    """Each GPU link as a line between its ranks' labels, each cell drawn with the line's
    direction there; returns the paths drawn and their kinds, by rank pair."""
    out = {}
    for (a, b), kind in sorted(links.items()):
        path = path_of(Transfer(a, b, 0, 0, False), where)
        if path is None:
            continue
        chars, style = (NVLINK_CELLS, NVLINK_STYLE) if _is_nvlink(kind) else \
            (PCIE_CELLS, PCIE_STYLE)
        line = line_cells(*where[a], *where[b])
        step = dict(zip(line, line[1:]))  # each cell's next on the line (b's centre: none)
        for x, y in path.cells:
            dx, dy = step[(x, y)][0] - x, step[(x, y)][1] - y
            char = chars[0] if dy == 0 else chars[1] if dx == 0 else \
                chars[2] if (dx > 0) == (dy > 0) else chars[3]
            canvas.put(x, y, char, style, _LINK)
        out[(a, b)] = (path, kind)
    return out


def _label_gpu_links(canvas: _Canvas, wires: list[tuple[Path, str]]) -> None:
    """Each link's kind on it, or just above or below, where nothing but wires lies: off its
    middle first, where a still replay puts a transfer's marker (a label that fits nowhere is
    left out: the legend and the viewer panel still say it). Many links (every pair of an
    NVSwitch host) get each kind once, or the labels would hide the lines."""
    labelled: set[str] = set()
    for path, kind in wires:
        if len(wires) > LABEL_ALL_MAX and kind in labelled:
            continue
        style = NVLINK_STYLE if _is_nvlink(kind) else "bold"
        spots = [(x - len(kind) // 2, y + dy) for x, y in
                 (path.cells[int(at * (len(path.cells) - 1))] for at in LINK_LABEL_AT)
                 for dy in (0, -1, 1)]
        spot = next(((x, y) for x, y in spots if canvas.free(x, y, len(kind), _STATE)), None)
        if spot is not None:
            canvas.put(*spot, kind, style, _KIND)
            labelled.add(kind)


def replay_roles(frame: AnimFrame, live: Mapping[int, Text | str], flagged: Collection[int],
                 lang: str = "en") -> dict[int, Text | str]:
    """The ranks' labels while an op is replayed: each one's part in the step shown (sends,
    receives, both; from its schedule, schematic as the transfers drawn), not its state now,
    which is not the replayed op's ("idle" beside its own transfer); the other ranks have
    none, nor do any when every rank's part is the same (a ring's step: each sends and
    receives, as the arrows say). A rank that a live finding names keeps its ⚠: an alert,
    not a state."""
    sends, receives = {t.src for t in frame.transfers}, {t.dst for t in frame.transfers}
    roles = {r: N_("role both") if r in sends and r in receives else
             N_("role sends") if r in sends else N_("role receives") for r in sends | receives}
    out: dict[int, Text | str] = {}
    if len(set(roles.values())) > 1:
        out = {r: Text(i18n.ui(role, lang), style="italic") for r, role in roles.items()}
    out.update({r: live[r] for r in flagged if r in live})
    return out


def _draw_states(canvas: _Canvas, where: Mapping[int, tuple[int, int]],
                 states: Mapping[int, Text | str],
                 paths: Collection[tuple[int, int]]) -> None:
    """Each rank's state where it first fits with a blank cell either side: above or below
    its label away from the centre, then beside it (right, left), then towards the centre
    (where the transfers' paths run); off the ``paths``' cells where it can be, else over
    them."""
    for r, (x, y) in where.items():
        state = states.get(r)
        if state is None:
            continue
        text = state.copy() if isinstance(state, Text) else Text(state, style="dim")
        text.truncate(STATE_W, overflow="ellipsis")
        w = text.cell_len
        x0 = min(max(0, x - w // 2), canvas.width - w)
        first, last = label_span(r, x)
        away, toward = (y - 1, y + 1) if y < (canvas.height - 1) / 2 else (y + 1, y - 1)
        spots = [(sx, row) for sx, row in
                 ((x0, away), (last + 2, y), (first - 1 - w, y), (x0, toward))
                 if _fits(canvas, sx, row, w)]
        off = [(sx, row) for sx, row in spots
               if not any((c, row) in paths for c in range(sx - 1, sx + w + 1))]
        if off or spots:
            canvas.put(*(off or spots)[0], text.plain, str(text.style), _STATE)


def _fits(canvas: _Canvas, x: int, y: int, width: int) -> bool:
    """Whether ``width`` cells from (x, y) are free of words, with a blank cell either side
    (or the area's edge)."""
    lo, hi = max(0, x - 1), min(canvas.width, x + width + 1)
    return 0 <= x <= canvas.width - width and canvas.free(lo, y, hi - lo, _STATE)


def _legend(status: str, width: int, wires: Collection[bool] = (), lang: str = "en",
            p2p: bool = False) -> Text:
    """The colour key, shortened when the status needs the room (the status comes first);
    ``wires``: which kinds of GPU link are drawn (True: NVLink, False: PCIe); ``p2p``: a
    point-to-point transfer is shown, whose colour says only that."""
    ui = functools.partial(i18n.ui, lang=lang)
    keys = ([(TRANSFER_STYLE, N_("transfer"))], [(TRANSFER_STYLE, N_("transfer short"))]) \
        if p2p else ([(REDUCE_STYLE, N_("adds into")), (COPY_STYLE, N_("copies"))],
                     [(REDUCE_STYLE, N_("adds short")), (COPY_STYLE, N_("copies short"))])
    for colours, gap in zip((*keys, []), ("  ", " ", "")):
        line = Text()
        for colour, key in colours:
            line.append(MARKER, style=f"bold {colour}")
            line.append(ui(key), style="dim")
        if colours:
            for nvlink, chars, style, name in ((True, NVLINK_CELLS, NVLINK_STYLE, "NVLink"),
                                               (False, PCIE_CELLS, PCIE_STYLE, "PCIe")):
                if nvlink in wires:
                    line.append(gap)
                    line.append(chars[0] * 2, style=style)
                    line.append(f" {name}", style="dim")
        if not status or line.cell_len + 2 + len(status) <= width:
            break
    if status:
        gap = max(2, width - line.cell_len - len(status)) if line.cell_len else 0
        line.append(" " * gap + status, style="dim")
    return line


# ----------------------------------------------------------------------------- model

def rank_states(model: Model, now: float | None = None, lang: str = "en",
                findings: Iterable[Finding] = ()) -> dict[int, Text]:
    """A short state per rank ("in all_reduce", "idle", "silent", "exited"), by the ranks
    panel's rule (``viewer.rank_state``), the name over it of a finding that holds now
    (``findings``) on that rank; ``now`` is the model clock's time (default: read it)."""
    ui = functools.partial(i18n.ui, lang=lang)
    now = model.clock() if now is None else now
    ops = ops_in(model)
    out = {}
    flagged = {r: f.type for f in findings for r in f.ranks}
    for rank, s in model.shown_ranks().items():
        kind = rank_state(s, now, rank in ops, model.behind_s)
        if kind is State.FAILED:
            out[rank] = Text(f"⚠ {process_end(s.exit_code, lang)}", style="bold red")
        elif rank in flagged:
            out[rank] = Text(f"⚠ {finding_name(flagged[rank], lang)}", style="bold red")
        elif kind is State.EXITED:
            out[rank] = Text(ui("state exited"), style="dim")
        elif kind in (State.ENDED, State.STOPPED):
            out[rank] = Text(process_end(s.exit_code, lang), style="dim")
        elif kind is State.SILENT:
            out[rank] = Text(ui("state silent"), style="bold red")
        elif kind is State.IN_OP:
            out[rank] = Text(ui("state in").format(ops[rank].op), style="yellow")
        else:
            out[rank] = Text(ui("state idle"), style="dim")
    return out


# ----------------------------------------------------------------------------- widget

class Topology(LineStyled):
    """The ranks and the animated transfers of the instances fed to it.

    Feed it under the session lock with ``update_from(model, new_instances)`` (or ``feed``
    with schedules already planned); it redraws by itself at ``FPS`` while an animation
    runs and stops its timer when the queue is empty or paused. ``timer=False``: no timer of
    its own, whoever feeds it calls ``tick`` at its frame rate (two timers out of phase would
    paint the screen twice a frame).
    """

    DEFAULT_CSS = """
    Topology {
        height: 1fr;
        min-height: 8;
    }
    """

    def __init__(self, animator: Animator | None = None, *,
                 clock: Callable[[], float] = time.monotonic, timer: bool = True,
                 name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._own_timer = timer
        self.animator = animator if animator is not None else Animator(clock)
        self.lang = "en"  # of the schematic notes; the app sets it
        self.alerts: tuple[tuple[int, int], ...] = ()  # links the live diagnosis points at
        self.flagged: frozenset[int] = frozenset()     # ranks it names
        self.gpu_links: dict[tuple[int, int], str] = {}  # Model.gpu_links(): NVML's wires
        self.traffic = NodeTraffic()  # what transfers and all_to_all moved between nodes
        self._placed: tuple[int, int] | None = None  # the ranks and hosts it was placed by
        self._order: list[str] = []  # Model.nodes()'s order of the hosts
        self._node_of: dict[int, int] = {}  # each rank's index in it
        self.n_ranks = 0
        self.states: dict[int, Text] = {}
        # what the states look like, for the frame's key: made when they change, not at
        # every frame of a replay (a thousand ranks' markup a frame)
        self._states_key: tuple = ()
        self._timer: Timer | None = None
        self.animating = False  # whether the frame timer runs
        self._frame: AnimFrame | None = None
        self._key: object = None
        self._version = 0
        self._cached: tuple[tuple, list[Strip]] | None = None
        self._lines: dict[tuple, Strip] = {}  # the drawn lines by content, to reuse

    def on_mount(self) -> None:
        if self._own_timer:
            self._timer = self.set_interval(1 / FPS, self.tick, pause=True)
        self.tick()

    # ---- feeding (the app, under its session lock) -----------------------------------
    def update_from(self, model: Model, new: Iterable[Instance],
                    findings: Collection[Finding] = ()) -> None:
        """Queue the new completed instances, planned with their ranks' backend, and take
        the ranks' count and states, and what the findings that hold now (``findings``)
        flag."""
        new = list(new)
        placed = (len(model.ranks), model.hosts_version)
        if placed != self._placed:  # a rank or a host is new: read the nodes again
            self._placed = placed
            nodes = model.nodes()
            self.traffic.place(nodes)
            self._order = list(nodes)
            self._node_of = {r: i for i, ranks in enumerate(nodes.values()) for r in ranks}
        self.traffic.add(new)
        items = [(inst, plan(inst, backend_of(model, inst.group),
                             functools.partial(host_of, model))) for inst in new]
        self.alerts = tuple(sorted({link for f in findings for link in f.links}))
        self.flagged = frozenset(r for f in findings for r in f.ranks)
        self.gpu_links = model.gpu_links()
        # a state beside each rank is drawn below HEATMAP_MIN ranks only: not built beyond
        world = model.world_size()
        self.feed(items, world, rank_states(model, lang=self.lang, findings=findings)
                  if world < HEATMAP_MIN else {})

    def feed(self, items: Iterable[tuple[Instance, Schedule | Scaled | None]],
             n_ranks: int | None = None,
             states: Mapping[int, Text | str] | None = None) -> None:
        """Queue (instance, schedule) pairs; a None schedule animates one hop src -> dst."""
        for inst, sched in items:
            self.animator.enqueue(inst, sched)
        if n_ranks is not None:
            self.n_ranks = n_ranks
        if states is not None:
            self.states = {r: s if isinstance(s, Text) else Text(s, style="dim")
                           for r, s in states.items()}
            self._states_key = tuple(sorted((r, t.markup) for r, t in self.states.items()))
        self.tick()

    # ---- controls (the app binds the keys) ---------------------------------------------
    def restart(self) -> None:
        """Forget every rank and queued replay, keeping the replay's speed."""
        a = self.animator
        self.animator = Animator(a.clock, step_s=a.step_s, max_waiting=a.max_waiting)
        self.n_ranks, self.states, self._frame, self._key = 0, {}, None, None
        self._states_key = ()
        self.traffic, self._placed = NodeTraffic(), None
        self.alerts, self.flagged, self.gpu_links = (), frozenset(), {}
        self.tick()

    def faster(self) -> float:
        step_s = self.animator.faster()
        self.tick()
        return step_s

    def slower(self) -> float:
        step_s = self.animator.slower()
        self.tick()
        return step_s

    def toggle_pause(self) -> bool:
        """Pause or resume the replay; returns whether it is paused now."""
        self.animator.paused = not self.animator.paused
        self.tick()
        return self.animator.paused

    # ---- frames ---------------------------------------------------------------------------
    @property
    def static(self) -> bool:
        return self.is_attached and self.app.animation_level == "none"

    def tick(self) -> None:
        """Take the animator's frame; redraw if it changed; run the timer only while busy."""
        frame = self.animator.frame()
        self._frame = frame
        shown = replace(frame, progress=0.0) if frame is not None and self.static else frame
        key = (shown, self.n_ranks, self._states_key,
               self.animator.summary(self.lang), self.lang, self.alerts, self.flagged,
               self.gpu_links, self.traffic.total, len(self.traffic.hosts))
        if key != self._key:
            self._key = key
            self._version += 1
            self._repaint()
        self.animating = self.animator.busy and not self.animator.paused
        if self._timer is not None:
            if self.animating:
                self._timer.resume()
            else:
                self._timer.pause()

    def _repaint(self) -> None:
        """Draw the new frame now and repaint only the lines that changed: most of a replay
        stays put from one frame to the next (all of it, before the first layout or after a
        resize)."""
        width, height = self.size
        old = self._cached
        if old is None or not width or old[0][1:] != (width, height, self.static,
                                                      self.rich_style):
            self.refresh()
            return
        new = self._strips(width, height)
        if len(new) != len(old[1]):
            self.refresh()
            return
        changed = [Region(0, y, width, 1) for y, (a, b) in enumerate(zip(old[1], new))
                   if a is not b]
        if changed:
            self.refresh(*changed)

    def _node_map(self) -> NodeMap | None:
        """The node heatmap's data, where some bytes moved between nodes (else None)."""
        if not self.traffic.total:
            return None
        return NodeMap(self._order, self._node_of, self.traffic.matrix(self._order),
                       self.traffic.busiest(BUSIEST))

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        strips = self._strips(width, height)
        return strips[y] if y < len(strips) else Strip.blank(width, self.line_style)

    def _strips(self, width: int, height: int) -> list[Strip]:
        static = self.static
        key = (self._version, width, height, static, self.line_style)  # new theme: redraw
        if self._cached is None or self._cached[0] != key:
            texts = render_topology(self.n_ranks, self._frame, width, height, self.states,
                                    static=static, status=self.animator.summary(self.lang),
                                    lang=self.lang, alerts=self.alerts, flagged=self.flagged,
                                    gpu_links=self.gpu_links, nodes=self._node_map())
            console, style = self.app.console, self.line_style
            # a line drawn the frame before, at this size and style: the same strip
            reuse = self._lines if self._cached is not None and \
                self._cached[0][1:] == key[1:] else {}
            self._lines, strips = {}, []
            for text in texts:
                line = (text.plain, text.style, tuple(text.spans))
                strip = reuse.get(line)
                if strip is None:
                    strip = Strip(text.render(console), text.cell_len) \
                        .crop_extend(0, width, style).apply_style(style)
                self._lines[line] = strip
                strips.append(strip)
            self._cached = (key, strips)
        return self._cached[1]
