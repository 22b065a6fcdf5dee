"""Plain-text renderings shared by the headless viewer and ``commviz stats``."""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from typing import Any

from commviz.knowledge import sweep
from commviz.knowledge.bandwidth import gbps_text
from commviz.knowledge.nccl_log import Fabric
from commviz.launch.launcher import signal_name
from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.viewer.diagnose import Finding, Lateness
from commviz.viewer.model import HostClock, Instance
from commviz.viewer.rank_state import STOPPED_CODES
from commviz.wire.protocol import OPS


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def ranks_phrase(ranks: list[int]) -> str:
    """``rank 3``, ``ranks 0-3`` (consecutive), ``ranks 0,2,5``, ``ranks 0-23,32-63``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + i18n.rank_list(ranks)


def rank_labels(ranks: list[int]) -> str:
    """Ranks as the panels label them: ``r5``, ``r5-r7`` (three or more in a row),
    ``r5,r6``."""
    if len(ranks) >= 3 and ranks == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"r{ranks[0]}-r{ranks[-1]}"
    return ",".join(f"r{r}" for r in ranks)


def ranks_label(ranks: list[int]) -> str:
    """Ranks as the lanes name them: ``r5,r6``, ``r5-r7`` (``rank_labels``), and a long list
    compressed as ``i18n.rank_list`` does (``r0-r23,r32-r1023``), never one that runs off the
    line."""
    if len(ranks) <= i18n.LISTED_RANKS:
        return rank_labels(ranks)
    return ",".join("-".join(f"r{r}" for r in run.split("-"))
                    for run in i18n.rank_list(ranks).split(","))


ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|.)")
UNSURE_WIDTH = "�"  # stands for a character terminals draw at widths of their own


def cell_safe(line: str) -> str:
    """Text from a job (an error, its output) made safe to draw in a panel: every character
    left takes the cells Rich counts for it in every terminal. Escape sequences, control and
    format characters (tabs become a space) and variation selectors go; an emoji drawn at a
    width of its own (🏖, whose width a variation selector changes, and the terminal may
    not) becomes ``UNSURE_WIDTH``; wide characters (CJK, 🚀) and accents stay."""
    out = []
    for ch in unicodedata.normalize("NFC", ANSI_ESCAPE.sub("", line)):
        kind = unicodedata.category(ch)
        if ch == "\t":
            out.append(" ")
        elif kind in ("Cc", "Cf") or _variation_selector(ch):
            continue
        elif kind == "So" and ord(ch) >= 0x1F000 and \
                unicodedata.east_asian_width(ch) not in ("W", "F"):
            out.append(UNSURE_WIDTH)
        else:
            out.append(ch)
    return "".join(out)


def _variation_selector(ch: str) -> bool:
    return "\ufe00" <= ch <= "\ufe0f" or "\U000e0100" <= ch <= "\U000e01ef"


# widths of the op, ranks and sequence-number columns: headless, wide enough for every op
# (all_gather_into_tensor, reduce_scatter_single), "9999 -> 9998", "0,1,2,3,4,5" and 7 digits;
# the TUI's log keeps compact ones: a longer name is shortened in its middle (reduce_…single)
COLUMNS = (max(map(len, OPS)), 12, 7)
LOG_COLUMNS = (14, 9, 5)


def instance_header(lang: str = "en") -> str:
    """The headless columns of ``instance_line``, printed once above the first."""
    op_w, who_w, seq_w = COLUMNS
    ui = functools.partial(i18n.ui, lang=lang)
    return (f"{ui('head end'):>9}  {'op':<{op_w}} {'ranks':<{who_w}} {'seq':<{seq_w + 1}} "
            f"{ui('head size'):>9}  {ui('head times')}")


def shorten_middle(name: str, room: int) -> str:
    """``name`` in at most ``room`` columns: its head, an ellipsis, its last word
    ("reduce_…single"); where that word takes more than half the room, its head and the
    ellipsis ("reduce_sca…")."""
    if len(name) <= room:
        return name
    tail = name[name.rfind("_") + 1:] if "_" in name else ""
    if len(tail) > (room - 1) // 2:
        tail = ""
    return name[:max(1, room - 1 - len(tail))] + "…" + tail


def instance_line(inst: Instance, t0_ns: int,
                  columns: tuple[int, int, int] = LOG_COLUMNS, lang: str = "en",
                  width: int | None = None) -> str:
    """One line per completed collective instance or p2p transfer, in ``lang`` (the TUI's
    log; Portuguese words and decimal commas).

    Its time is the op's end in seconds since ``t0_ns`` (the headless viewer's: when its
    first message arrived), on the viewer's clock (other hosts' times corrected); an op that
    ended before then (a job already running when the viewer started) shows 0.000.
    A line wider than ``width`` (a narrow terminal's log) is made shorter rather than lose
    the skew past the edge.
    """
    ui, num = functools.partial(i18n.ui, lang=lang), functools.partial(i18n.number, lang=lang)
    op_w, who_w, seq_w = columns
    when = max(0, inst.t_end - t0_ns) / 1e9
    p2p = len(inst.group) == 2 and inst.op in ("send", "isend", "send_object_list")
    if p2p:
        who = f"{inst.group[0]} -> {inst.group[1]}"
    else:
        who = ",".join(map(str, inst.group))
        if len(who) > who_w:
            who = ui("n ranks").format(n=len(inst.group))
    op = shorten_middle(inst.op, op_w)  # the columns after it stay in line
    head = f"{num(f'{when:8.3f}')}s  {op:<{op_w}} "
    size = f"{num(human_bytes(inst.size)):>9}"
    took, skew = num(duration(inst.time_ns)), num(duration(inst.skew_ns))
    line = (f"{head}{who:<{who_w}} #{inst.seq:<{seq_w}} {size}  {ui('time')} {took:>8}  "
            f"{ui('log skew')} {skew:>8}")
    # that DDP ran it (its gradient buckets) goes before the columns left out below, in
    # its short form at least
    ddp = len(DDP_SHORT) + 2 if inst.ddp else 0
    if width is None or len(line) + ddp <= width:
        return line + _notes(inst, lang, None if width is None else width - len(line))
    # one space between columns; then columns left out, a collective's ranks (the ranks
    # panel lists them) before a transfer's size; then a narrower op column (a transfer's
    # line in Portuguese at 120 columns lost its skew). The notes come last, in what is
    # left: an inner op's columns stay in line with the others'
    times = f"{ui('time')} {took:>7} {ui('log skew')} {skew:>7}"
    for ow in (op_w, min(op_w, NARROW_OP_W)):
        head = f"{num(f'{when:.3f}'):>8}s {shorten_middle(inst.op, ow):<{ow}} "
        for keep_who, keep_size in ((True, True), (p2p, not p2p), (p2p, False)):
            line = (head + (f"{who:<{who_w}} " if keep_who else "") + f"#{inst.seq:<{seq_w}} "
                    + (f"{size} " if keep_size else "") + times)
            if len(line) + ddp <= width:
                return line + _notes(inst, lang, width - len(line))
    return line + _notes(inst, lang, width - len(line))


NARROW_OP_W = 10  # the op column of a log line that does not fit otherwise ("all_reduce")


MIN_PARENT_SHOWN = 4  # characters of a shortened parent op's name, at least ("bat…")
DDP_SHORT = "DDP"  # "(by DDP)" where a narrow line has no room for it


def _notes(inst: Instance, lang: str, room: int | None) -> str:
    """What a log line says after its columns: the op it ran inside, that DDP ran it. In
    ``room`` (None: any) the parent's name is shortened, its parenthesis closed ("(in
    scatter_…list)"), or left out: the panel's edge cut it anywhere ("(in batch…")."""
    ddp = "  " + i18n.ui("by ddp", lang) if inst.ddp else ""
    if room is not None and len(ddp) > room:
        ddp = f"  {DDP_SHORT}" if inst.ddp and len(DDP_SHORT) + 2 <= room else ""
    if not inst.parent:
        return ddp
    inside = "  " + i18n.ui("in parent", lang)
    whole = inside.format(inst.parent) + ddp
    if room is None or len(whole) <= room:
        return whole
    name_room = room - len(inside.format("")) - len(ddp)
    if name_room < MIN_PARENT_SHOWN:
        return ddp
    return inside.format(shorten_middle(inst.parent, name_room)) + ddp


MICROSECONDS = "µs"  # on screen; the stats table keeps nccl-tests' "(us)" for programs
TIME_UNITS = (("s", 1e9), ("ms", 1e6), (MICROSECONDS, 1e3))


def process_end(code: int, lang: str = "en") -> str:
    """A rank process's end as its launcher told it: "killed (SIGKILL)", "ended, exit 1",
    "stopped (SIGTERM)" (``rank_state.STOPPED_CODES``: SIGTERM, or the exit a handler of it
    makes)."""
    if code in STOPPED_CODES:
        return i18n.ui("state stopped", lang).format("SIGTERM")
    if code < 0:
        return i18n.ui("state killed", lang).format(signal_name(-code))
    return i18n.ui("state ended code", lang).format(code)


def event_line(key: str, fields: dict[str, Any], lang: str = "en") -> str:
    """What a launcher told of the ranks' processes ("rank failed"...: Session.note_event),
    in ``lang`` (a rank's ``who`` reads "rank N", a job's "the job")."""
    if fields.get("who") == "the job":
        fields = {**fields, "who": i18n.ui("the job", lang)}
    if isinstance(fields.get("line"), str):
        fields = {**fields, "line": i18n.in_language(fields["line"], lang)}
    if key == "rank ended":  # as torchrun's summary gave it: killed (SIGTERM), exit 1
        fields = {**fields, "end": process_end(fields["code"], lang)}
    return i18n.ui(key, lang).format(**fields)


# a NIC's link layer as NCCL prints it -> its common name
_LINK_LAYERS = {"IB": "InfiniBand", "RoCE": "RoCE", "Socket": "TCP"}


def fabric_line(fabric: Fabric | None, lang: str = "en") -> str:
    """The job's wires as NCCL named them, in one line: ``inter-node: RoCE (mlx5_0, mlx5_1)
    · GPUDirect RDMA · NET/IB · intra-node: P2P/CUMEM``; without a log, how to get one."""
    ui = functools.partial(i18n.ui, lang=lang)
    if fabric is None:
        return ui("fabric unknown")
    parts = []
    if fabric.inter:
        nics = [f"{_LINK_LAYERS.get(layer, layer)} ({', '.join(names)})"
                for layer, names in fabric.layers().items()]
        parts.append(ui("fabric inter").format(", ".join(nics or fabric.inter)))
        if fabric.gdr:
            parts.append(ui("fabric gdr"))
        if fabric.pxn:
            parts.append(ui("fabric pxn"))
        if nics:
            parts.append(", ".join(fabric.inter))
    else:
        parts.append(ui("fabric one node"))
    if fabric.intra:
        parts.append(ui("fabric intra").format(", ".join(fabric.intra)))
    return " · ".join(parts)


def sweep_fit_line(points: list[sweep.Point], backend: str, lang: str = "en") -> str:
    """The alpha-beta line fitted to a sweep's rows, named as a model, with where its
    latency-bound sizes end; or that the rows cannot tell the two costs apart."""
    fit = sweep.fitted(points, backend)
    if fit is None:
        return i18n.ui("sweep no fit", lang)
    beta = "∞" if not math.isfinite(fit.beta_bps) else f"{gbps_text(fit.beta_bps / 1e9)} GB/s"
    line = i18n.ui("sweep fit", lang).format(alpha=duration(fit.alpha_s * 1e9), beta=beta)
    knee = sweep.knee(fit, points[0].op, points[0].world, backend)
    if knee is not None:
        line += i18n.ui("sweep knee", lang).format(size=human_bytes(knee))
    return i18n.number(line, lang)


def duration(ns: float) -> str:
    """Three significant digits in the unit that suits: 850 µs, 7.14 ms, 1.2 s (999.7 µs
    reads 1 ms, not 1e+03 µs); beyond 999 s in minutes (61.7 min), then hours (2.5 h), whole
    hours from 1000 h."""
    if ns >= 999.5e9:
        unit, scale = ("min", 60e9) if ns < 999.5 * 60e9 else ("h", 3600e9)
    else:
        unit, scale = next((u, f) for u, f in TIME_UNITS
                           if ns >= f * 0.9995 or u == MICROSECONDS)
    value = ns / scale
    return f"{value:.0f} {unit}" if value >= 999.5 else f"{value:.3g} {unit}"


def counts_line(records: int, instances: int, transfers: int, failed: int, unmatched: int,
                lang: str = "en") -> str:
    """What was seen, summed up; ``failed``: collectives and transfers that failed or whose
    ranks disagreed, which the statistics leave out; ``unmatched``: those left incomplete,
    none of their records failed (``Model.incomplete``)."""
    line = i18n.ui("counts", lang).format(
        records=i18n.ui_n("op records", records, lang),
        instances=i18n.ui_n("collective instances", instances, lang),
        transfers=i18n.ui_n("transfers", transfers, lang))
    for key, n in ((N_("counts failed"), failed), (N_("counts unmatched"), unmatched)):
        if n:
            line += i18n.ui_n(key, n, lang)
    return line


def stats_table(rows: list[dict], lang: str = "en") -> str:
    """nccl-tests-like columns: size, count, time, skew, algbw, busbw (GB/s = 1e9 B/s, each
    head with its unit); rows by op, ranks and size, as nccl-tests lists its sizes. Numbers
    keep their decimal point in every language: the table is also read by programs."""
    ui = functools.partial(i18n.ui, lang=lang)
    size_w, count_w, skew_w = (max(w, len(ui(k))) for w, k in ((12, "stats size"),
                                                                 (7, "col count"),
                                                                 (10, "stats skew")))
    head = (f"{'op':<22} {'ranks':>5} {ui('stats size'):>{size_w}} {ui('col count'):>{count_w}} "
            f"{'p50 (us)':>10} {'p99 (us)':>10} {ui('stats skew'):>{skew_w}} "
            f"{'algbw (GB/s)':>12} {'busbw (GB/s)':>12}")
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: (r["op"], r["ranks"], r["size"])):
        lines.append(f"{r['op']:<22} {r['ranks']:>5} {r['size']:>{size_w}} "
                     f"{r['count']:>{count_w}} {r['time_p50_us']:>10.1f} "
                     f"{r['time_p99_us']:>10.1f} {r['skew_p50_us']:>{skew_w}.1f} "
                     f"{gbps_text(r['algbw_gbps']):>12} {gbps_text(r['busbw_gbps']):>12}")
    if not rows:
        lines.append(ui("stats none"))
    return "\n".join(lines)


def late_line(late: list[tuple[int, Lateness]], lang: str = "en") -> str:
    """The ranks the others waited for at collectives (``Diagnosis.late_arrivals``), the
    longest waited for first; "" when none was late."""
    if not late:
        return ""
    items = []
    for rank, t in late:
        where = i18n.ui("in group", lang).format(",".join(map(str, t.group))) \
            if t.group else ""
        fields = {"rank": rank, "n": t.count, "op": t.op, "seq": f"{t.seq}{where}",
                  "waited": i18n.number(duration(t.waited_ns), lang),
                  "longest": i18n.number(duration(t.longest_ns), lang)}
        key = N_("late once") if t.count == 1 else N_("late many")
        items.append(i18n.ui(key, lang).format(**fields))
    return i18n.ui("late arrivals", lang) + " · ".join(items)


def finding_line(f: Finding, lang: str = "en") -> str:
    """One line per finding of the live diagnosis, and per condition that ended, in ``lang``;
    the type stays the recording's, for whoever greps for it."""
    return f"!! {f.type}: {f.text(lang)}"


def node_line(clock: HostClock, ranks: list[int]) -> str:
    """A node, its ranks, and its clock's offset to the viewer's with the uncertainty."""
    if clock.local:
        when = "the viewer's host and clock"
    elif clock.offset_ns is None:
        when = "clock offset unknown (no round trip on the clock channel yet)"
    else:
        when = (f"clock {clock.offset_ns / 1e6:+.3f} ms ± {clock.uncertainty_ns / 1e6:.3f} ms "
                "from the viewer's (corrected)")
    return f"node {clock.host}: rank{'s' if len(ranks) > 1 else ''} {node_ranks(ranks)}; {when}"


def node_ranks(ranks: list[int]) -> str:
    """A node's ranks: ``0, 1``; ``136-143`` (more than NODE_RANKS_LISTED, in runs)."""
    if len(ranks) > NODE_RANKS_LISTED:
        return i18n.rank_list(ranks)
    return ", ".join(map(str, ranks))


NODE_RANKS_LISTED = 4
