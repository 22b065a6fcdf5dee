"""A recording as a Chrome trace (``commviz export REC -o trace.json``), which Perfetto and
chrome://tracing open: the timeline users of torch.profiler, HTA and NCCL's profiler already
read.

One process per rank (``pid`` = rank), with a thread per lane: its collectives, its
point-to-point ops, its compute phases, its async ops (``async_op=True``, isend/irecv, DDP's
buckets, which overlap each other: up to ``ASYNC_LANES`` lanes). Each op record is a
complete slice (``X``) on its lane (an async one on the first async lane where it nests);
one that would cross another there without nesting becomes an async event pair
(``b``/``e``), so that the slices of every thread nest. An op seen running whose record
never came (a hang) is a slice to the recording's end. GPU utilization, memory and power
are counters (``C``); findings, goodbyes and ended processes instants (``i``). Flow arrows
(``s``/``f``) join each send to its matched receive and, for each collective instance, the
last rank to arrive to each other rank, at the moment the last one arrived (the data could
move from then).

Times are µs from the recording's first time, other hosts' clocks corrected as the viewer's
model does: by ``clocksync.Window`` over each host's latest clock round trips, as each
``tel`` line brings them (the recording header's host is the reference). The file is read
twice (once for the first time and the ranks' names, once to write) and events are written
as they come, keeping only what the flows still wait for, bounded, so a 1,024-rank
recording exports in bounded memory.
"""

from __future__ import annotations

import collections
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from commviz import __version__
from commviz.viewer import recording
from commviz.wire import protocol
from commviz.wire.clocksync import Sample, Window

# lanes (thread ids) of a rank's process
COLLECTIVES, P2P, PHASES, ASYNC = 1, 2, 3, 4
ASYNC_LANES = 4  # async lanes a rank may use before crossing ops become async events
LANE_NAMES = {COLLECTIVES: "collectives", P2P: "p2p", PHASES: "phases"}
RECENT_SLICES = 64  # of a lane, checked for crossing: ops a rank overlaps are close in order
PENDING_MAX = 100_000  # unmatched sends and receives, and members of open collectives, kept
OP_ARGS = ("pg", "seq", "peer", "bytes_in", "bytes_out", "dtype", "parent", "flags")
OP_FIELDS = (*OP_ARGS, "rank", "id", "op", "g", "t_start_ns", "file", "line")  # an op's slice
COUNTERS = (("gpu_util_pct", "GPU utilization", "%", 1.0),
            ("gpu_mem_used", "GPU memory", "GB", 1e-9),
            ("gpu_power_w", "GPU power", "W", 1.0))


@dataclass(frozen=True)
class Cut:
    """What of a recording to export: ``start_s``/``end_s`` seconds from its first time (an
    op is kept if it overlaps them), ``ranks`` (None: all)."""

    start_s: float = 0.0
    end_s: float = math.inf
    ranks: frozenset[int] | None = None


@dataclass
class Written:
    """What an export wrote: the trace's events, op slices (``async_events`` of them as
    ``b``/``e`` pairs), slices of ops that never ended, flows, and sends or receives left
    without their match."""

    events: int = 0
    slices: int = 0
    async_events: int = 0
    never_ended: int = 0
    transfer_flows: int = 0
    collective_flows: int = 0
    unmatched: int = 0
    ranks: list[int] = field(default_factory=list)


def parse_ranks(text: str) -> frozenset[int]:
    """``0-7,12``: the ranks of a range list; ValueError saying what is wrong."""
    ranks: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"--ranks {text}: give ranks and ranges like 0-7,12")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise ValueError(f"--ranks {text}: {part.strip()} runs backwards")
        ranks.update(range(first, last + 1))
    return frozenset(ranks)


def export(src: str | Path, dst: str | Path, cut: Cut = Cut(),
           cut_short: list[int] | None = None) -> Written:
    """Write the recording ``src`` as a Chrome trace at ``dst``: whole or not at all (it is
    written beside it, then moved there). Where ``src`` was cut short (a killed viewer) goes
    to ``cut_short``, as ``recording.lines``' ``cut``."""
    dst = Path(dst)
    part = dst.with_name(f".{dst.name}.{os.getpid()}.part")
    try:
        out = open(part, "x", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise recording.RecordingError(f"cannot write {dst}: {exc.strerror}") from None
    try:
        with out:
            survey = _survey(src)
            written = _Trace(src, out, survey, cut).write(recording.lines(src, cut_short))
        os.replace(part, dst)
    except BaseException:
        Path(part).unlink(missing_ok=True)
        raise
    return written


class _Clocks:
    """Each incarnation's offset to the viewer's clock, as the model keeps it: its host's
    estimate from that host's latest round trips (``clocksync.Window``; 0 on the viewer's
    host, and before a host has one)."""

    def __init__(self, local_host: str | None, hosts: dict[tuple[int, int], str]) -> None:
        self._local = local_host
        self._hosts = dict(hosts)  # by (rank, inc): known before a rank's line comes
        self._windows: dict[str, Window] = {}
        self._offsets: dict[str, int] = {}

    def take(self, line: dict) -> None:
        """What a line tells: a rank's host, or its host's clock round trips."""
        kind = line.get("kind")
        if kind == "rank":
            self._hosts[(line["rank"], line.get("inc", 0))] = line["host"]
            return
        if kind != "tel" or not line.get("clk"):
            return
        host = self._hosts.get((line["rank"], line.get("inc", 0)))
        if host is None or host == self._local:
            return
        window = self._windows.setdefault(host, Window())
        for row in line["clk"]:
            window.add(Sample(*row))
        est = window.estimate()
        if est is not None:
            self._offsets[host] = est.offset_ns

    def offset(self, line: dict) -> int:
        host = self._hosts.get((line["rank"], line.get("inc", 0)))
        return 0 if host is None or host == self._local else self._offsets.get(host, 0)


def _malformed(src: str | Path, at: int, exc: Exception) -> recording.RecordingError:
    """What a line whose fields are not those of its kind is: a RecordingError naming it by
    its number in the recording as JSON Lines (of a compact one, in its ``commviz export
    --format jsonl``)."""
    if isinstance(exc, recording.RecordingError):
        return exc
    return recording.RecordingError(f"{src}:{at}: malformed line ({exc!r})")


@dataclass
class _Survey:
    """What the first reading of a recording learns: its first and last times on the
    viewer's clock, each rank's process name (its last ``rank`` line's host and device; a
    rank with none, ``?``), and each incarnation's host and job key (a rank's first records
    may come before its ``rank`` line, which waits for a clock round trip)."""

    first_ns: int = 0
    last_ns: int = 0
    names: dict[int, str] = field(default_factory=dict)
    hosts: dict[tuple[int, int], str] = field(default_factory=dict)
    jobs: dict[tuple[int, int], str] = field(default_factory=dict)


def _survey(src: str | Path) -> _Survey:
    """What the first reading of ``src`` learns."""
    survey, first, at = _Survey(), None, 1
    lines = recording.lines(src)
    clocks = _Clocks(next(lines).get("host"), {})
    try:
        for at, line in enumerate(lines, start=2):  # noqa: B007 (said where one fails)
            clocks.take(line)
            kind = line.get("kind")
            if kind == "rank":
                survey.names[line["rank"]] = \
                    f"rank {line['rank']} ({line['host']}, {line['device']})"
                who = (line["rank"], line.get("inc", 0))
                survey.hosts[who], survey.jobs[who] = line["host"], line.get("job", "")
            t = _first_time(line, clocks)
            if t is not None and (first is None or t < first):
                first = t
            if kind in ("op", "phase"):
                t = line["t_end_ns"] - clocks.offset(line)
            elif kind == "tel":  # a hung rank's heartbeats go on
                t = line["t_ns"] - clocks.offset(line)
            if t is not None:
                survey.last_ns = max(survey.last_ns, t)
            if kind in ("op", "running", "phase", "tel") and line["rank"] not in survey.names:
                survey.names[line["rank"]] = f"rank {line['rank']} (?, ?)"
    except (KeyError, TypeError, ValueError) as exc:
        raise _malformed(src, at, exc) from None
    survey.first_ns = first or 0
    survey.last_ns = max(survey.last_ns, survey.first_ns)
    return survey


def _first_time(line: dict, clocks: _Clocks) -> int | None:
    """The earliest time a line puts in the trace, on the viewer's clock."""
    kind = line.get("kind")
    if kind in ("op", "running", "phase"):
        return line["t_start_ns"] - clocks.offset(line)
    if kind == "tel" and any(_number(line.get(key)) for key, *_ in COUNTERS):
        return line["t_ns"] - clocks.offset(line)
    if kind in ("bye", "gone"):
        return line["t_ns"] - clocks.offset(line)
    if kind == "diag" and type(line.get("t_ns")) is int:
        return line["t_ns"]
    return None


def _number(value: Any) -> bool:
    return type(value) in (int, float) and value >= 0


_encode = json.JSONEncoder(separators=(",", ":")).encode


class _Lane:
    """A lane's latest slices, to tell whether one more would cross them."""

    def __init__(self) -> None:
        self.recent: collections.deque[tuple[int, int]] = collections.deque(maxlen=RECENT_SLICES)
        self.latest_end = -1  # of every slice placed: one begun after it crosses none

    def add(self, start: int, end: int) -> None:
        self.recent.append((start, end))
        self.latest_end = max(self.latest_end, end)

    def fits(self, start: int, end: int) -> bool:
        """Whether [start, end] nests with (inside, around or apart from) each slice here."""
        return start >= self.latest_end or all(end <= s or e <= start or (s <= start and end <= e)
                   or (start <= s and e <= end) for s, e in self.recent)


class _Trace:
    """The trace's events, written as the recording's lines come."""

    def __init__(self, src: str | Path, out: IO[str], survey: _Survey, cut: Cut) -> None:
        self._src = src
        self._out = out
        self._survey = survey
        first_ns = self._first = survey.first_ns
        self._lo = first_ns + round(cut.start_s * 1e9)
        self._hi = math.inf if cut.end_s == math.inf else first_ns + round(cut.end_s * 1e9)
        self._ranks = cut.ranks
        self._lanes: dict[tuple[int, int], _Lane] = {}
        self._groups: dict[int, int] = {}  # group size, by g
        self._sends: dict[tuple, tuple] = {}  # unmatched ends, by (job, src, dst, seq)
        self._recvs: dict[tuple, tuple] = {}
        self._open: dict[tuple, list[tuple]] = {}  # collective members, by (job, g, seq)
        self._held = 0  # members in ``_open``
        self._running: dict[tuple, tuple[dict, int]] = {}  # ops seen running, by (rank, inc, id)
        self._ids = 0
        self.written = Written()

    # ---- writing ---------------------------------------------------------------------
    def write(self, lines: Iterator[dict]) -> Written:
        header = next(lines)
        self._out.write('{"displayTimeUnit":"ms","otherData":{"producer":"commviz '
                        f'{__version__}"}},"traceEvents":[\n')
        self._sep = ""
        names = self._survey.names
        shown = sorted(r for r in names if self._shows(r))
        self.written.ranks = shown
        for rank in shown:
            self._event({"ph": "M", "name": "process_name", "pid": rank,
                         "args": {"name": names[rank]}})
            self._event({"ph": "M", "name": "process_sort_index", "pid": rank,
                         "args": {"sort_index": rank}})
        clocks, at = _Clocks(header.get("host"), self._survey.hosts), 1
        try:
            for at, line in enumerate(lines, start=2):  # noqa: B007 (said where one fails)
                clocks.take(line)
                self._line(line, clocks)
        except (KeyError, TypeError, ValueError) as exc:
            raise _malformed(self._src, at, exc) from None
        for line, offset in self._running.values():  # what a hang leaves: they never ended
            self._op({**line, "t_end_ns": self._survey.last_ns + offset}, offset, ended=False)
        self.written.unmatched = len(self._sends) + len(self._recvs)
        self._out.write("\n]}\n")
        return self.written

    def _event(self, event: dict) -> None:
        self._out.write(self._sep + _encode(event))
        self._sep = ",\n"
        self.written.events += 1

    def _us(self, t_ns: int) -> float:
        return round((t_ns - self._first) / 1e3, 3)

    def _shows(self, rank: Any) -> bool:
        return self._ranks is None or rank in self._ranks

    def _within(self, start: int, end: int) -> bool:
        return end >= self._lo and start <= self._hi

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    # ---- lines -----------------------------------------------------------------------
    def _line(self, line: dict, clocks: _Clocks) -> None:
        kind = line.get("kind")
        if kind == "group":
            self._groups[line["g"]] = len(line["ranks"])
        elif kind == "op":
            self._running.pop((line["rank"], line.get("inc", 0), line["id"]), None)
            self._op(line, clocks.offset(line))
        elif kind == "running":
            kept = {k: line[k] for k in OP_FIELDS}  # what the end reads (malformed: said now)
            kept["inc"] = line.get("inc", 0)
            self._running[(line["rank"], kept["inc"], line["id"])] = (kept, clocks.offset(line))
            if len(self._running) > PENDING_MAX:
                del self._running[next(iter(self._running))]
        elif kind == "phase":
            self._phase(line, clocks.offset(line))
        elif kind == "tel" and type(line.get("t_ns")) is int:
            self._counters(line, clocks.offset(line))
        elif kind == "diag" and type(line.get("t_ns")) is int:
            self._finding(line)
        elif kind in ("bye", "gone"):
            self._ended(line, clocks.offset(line))

    def _op(self, line: dict, offset: int, ended: bool = True) -> None:
        """An op record's slice and its flows; not ``ended``: an op seen running whose record
        never came, a slice to the recording's end, with no flow."""
        rank, start, end = line["rank"], line["t_start_ns"] - offset, line["t_end_ns"] - offset
        end = max(end, start)
        p2p = line["op"] in protocol.P2P
        fields = [(k, line[k]) for k in OP_ARGS]  # every one, or the line is malformed
        at = f"{line['file']}:{line['line']}"
        tid = None
        if self._shows(rank) and self._within(start, end):
            lane = P2P if p2p else COLLECTIVES
            if line["flags"] & protocol.FLAG_ASYNC:
                lane = ASYNC
            args = {k: v for k, v in fields if v is not None}
            args["at"] = at
            if not ended:
                args["never_ended"] = "running when the recording ended"
            tid = self._slice(rank, lane, line["op"], "p2p" if p2p else "collective", start,
                              end, args)
            if ended:
                self.written.slices += 1
                self.written.async_events += tid is None
            else:
                self.written.never_ended += 1
        if not ended:
            return
        job = self._survey.jobs.get((rank, line.get("inc", 0)), "")
        here = (rank, start, end, tid)
        if p2p:
            self._transfer(line, job, here)
        elif line["g"] in self._groups:
            self._collective((job, line["g"], line["seq"]), self._groups[line["g"]], here)

    def _slice(self, rank: int, lane: int, name: str, cat: str, start: int, end: int,
               args: dict) -> int | None:
        """A slice on ``lane`` of ``rank`` (an async one: on the first of the async lanes it
        fits), or where it fits on none, an async event pair; its lane, or None."""
        lanes = [lane] if lane != ASYNC else list(range(ASYNC, ASYNC + ASYNC_LANES))
        for tid in lanes:
            held = self._lanes.get((rank, tid))
            if held is None:
                held = self._lanes[(rank, tid)] = _Lane()
                n = tid - ASYNC + 1
                self._event({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                             "args": {"name": LANE_NAMES.get(tid, "async" if n == 1
                                                             else f"async {n}")}})
                self._event({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid,
                             "args": {"sort_index": tid}})
            if held.fits(start, end):
                held.add(start, end)
                self._event({"ph": "X", "name": name, "cat": cat, "pid": rank, "tid": tid,
                             "ts": self._us(start),
                             "dur": round(self._us(end) - self._us(start), 3), "args": args})
                return tid
        ident = self._next_id()
        base = {"name": name, "cat": cat, "id": ident, "pid": rank, "tid": lanes[0]}
        self._event({**base, "ph": "b", "ts": self._us(start), "args": args})
        self._event({**base, "ph": "e", "ts": self._us(end)})
        return None

    def _transfer(self, line: dict, job: str, here: tuple) -> None:
        """A send or a receive: matched with its other end by (job, src, dst, seq), the k-th
        send from src to dst with the k-th receive at dst from src (``rank/records.py``
        numbers them per peer), a flow from the send's slice to the receive's."""
        peer = line["peer"]
        if peer is None or line["seq"] <= 0:
            return  # a receive from any source whose source never came
        send = line["op"] in protocol.SENDS
        key = (job, line["rank"], peer, line["seq"]) if send else \
            (job, peer, line["rank"], line["seq"])
        mine, theirs = (self._sends, self._recvs) if send else (self._recvs, self._sends)
        other = theirs.pop(key, None)
        if other is None:
            mine[key] = here
            if len(mine) > PENDING_MAX:
                del mine[next(iter(mine))]
            return
        src, dst = (here, other) if send else (other, here)
        if self._flow("transfer", src, dst, max(src[1], dst[1])):
            self.written.transfer_flows += 1

    def _collective(self, key: tuple, size: int, here: tuple) -> None:
        """A member of a collective instance (group ``g`` and seq): once every member came,
        a flow from the last to arrive to each other one."""
        members = self._open.setdefault(key, [])
        members.append(here)
        self._held += 1
        if len(members) >= size:
            del self._open[key]
            self._held -= len(members)
            last = max(members, key=lambda m: m[1])
            for m in members:
                if m is not last and self._flow("collective", last, m, last[1]):
                    self.written.collective_flows += 1
        while self._held > PENDING_MAX:
            self._held -= len(self._open.pop(next(iter(self._open))))

    def _flow(self, cat: str, a: tuple, b: tuple, at_ns: int) -> bool:
        """A flow arrow from slice ``a`` to slice ``b`` ((rank, start, end, lane)), at
        ``at_ns`` (put inside each); none where either is not a slice of the trace."""
        if a[3] is None or b[3] is None:
            return False
        ident = self._next_id()
        for ph, (rank, start, end, tid) in (("s", a), ("f", b)):
            event = {"ph": ph, "name": cat, "cat": cat, "id": ident, "pid": rank, "tid": tid,
                     "ts": self._us(min(max(at_ns, start), end))}
            if ph == "f":
                event["bp"] = "e"
            self._event(event)
        return True

    def _phase(self, line: dict, offset: int) -> None:
        start, end = line["t_start_ns"] - offset, max(line["t_end_ns"], line["t_start_ns"]) - offset
        if self._shows(line["rank"]) and self._within(start, end):
            self._slice(line["rank"], PHASES, line["name"], "phase", start, end,
                        {"depth": line["depth"]})

    def _counters(self, line: dict, offset: int) -> None:
        t = line["t_ns"] - offset
        if not (self._shows(line["rank"]) and self._within(t, t)):
            return
        for key, name, unit, scale in COUNTERS:
            value = line.get(key)
            if _number(value):  # CPU ranks have none
                self._event({"ph": "C", "name": name, "pid": line["rank"], "ts": self._us(t),
                             "args": {unit: round(value * scale, 3)}})

    def _finding(self, line: dict) -> None:
        """A finding of the live diagnosis: on its rank's process when it names one, else
        global; with its facts."""
        ranks = line.get("ranks") or []
        if not self._within(line["t_ns"], line["t_ns"]) or \
                (ranks and not any(self._shows(r) for r in ranks)):
            return
        args = {k: line[k] for k in ("message", "ranks", "group", "seq", "facts", "about",
                                     "duration_s") if line.get(k) is not None}
        event = {"ph": "i", "name": line.get("type", "finding"), "cat": "finding",
                 "ts": self._us(line["t_ns"]), "s": "g", "args": args}
        if len(ranks) == 1:
            event.update(s="p", pid=ranks[0])
        self._event(event)

    def _ended(self, line: dict, offset: int) -> None:
        """A goodbye, or a harvester's word that a rank's process ended."""
        t = line["t_ns"] - offset
        if not (self._shows(line["rank"]) and self._within(t, t)):
            return
        if line["kind"] == "bye":
            name, args = "bye", {"dropped": line["dropped"]}
        else:
            name, args = "process ended", {k: line.get(k) for k in ("pid", "code", "running",
                                                                    "recovered")}
        self._event({"ph": "i", "name": name, "cat": "rank", "pid": line["rank"], "s": "p",
                     "ts": self._us(t), "args": args})
