"""Recordings: written by the viewer, read back by ``commviz stats`` and ``commviz play``.

A recording is a sequence of lines, in one of two formats chosen by the file's suffix when
written and by its first bytes when read: JSON Lines (``.jsonl``, and any suffix but
``.cvz``), or the compact format (``.cvz``, ``commviz.viewer.compact``: the same lines,
op records in compressed columns, some 20 times smaller), for large jobs.

The first line is a header naming the format and its version. Then one line per event:
``rank`` (a rank's identity), ``tel`` (a telemetry sample), ``group`` (a process group's
ranks, written once before the first line that names it by its number ``g``, since at 1,024
ranks the list is most of an op line), ``op`` (one completed operation on one rank),
``running`` (an operation a rank announced as running for a while: what a hang leaves
behind, since its ``op`` line never comes), ``phase`` (one compute phase a rank marked),
``topo`` (the GPUs of a rank's host and their links, when first seen or changed), ``bye`` (a
rank left normally), ``gone`` (a harvester saw a rank's process end), ``rx`` (when the
viewer received the ``tel``, ``bye`` and ``gone`` lines after it), ``diag`` (a finding of
the live diagnosis), ``out`` (a line of the output of a job commviz ran), ``event`` (a
rank's process ended, as its launcher told) and a closing ``summary``. Lines of a rank that
sent an incarnation id carry it (``inc``), so that the records of two jobs that ran at the
same time with the same rank numbers are replayed apart. Writes are flushed at least once a
second, so a killed viewer loses at most the last second (a compact one, its last chunk).
The header may say what was recorded (``title``, per language, and ``demo``, the demo's
name): ``commviz play`` shows it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

from commviz import __version__
from commviz.viewer import compact
from commviz.viewer.groups import GroupNumbers
from commviz.viewer.model import Records
from commviz.wire import protocol

FORMAT = "commviz-recording"
VERSION = 2  # 2: op and running lines name their group by ``g``, from a ``group`` line
READS = (1, 2)  # version 1: every op and running line lists its group's ranks
FLUSH_S = 1.0
MAX_OUTPUT_CHARS = 2000  # of one line of a job's output; the rest is left out


class Received(NamedTuple):
    """A message read back for a playback, with when the live viewer received it (``rx``:
    what its silences were judged from); the playback gives the model ``message``."""

    message: protocol.Heartbeat | protocol.Bye | protocol.Gone
    at_ns: int


class RecordingError(ValueError):
    """A file that is not a readable commviz recording."""


class Recorder:
    """``about``: what the header says of the run (``title``, ``demo``); the format is
    ``path``'s (``.cvz``: compact)."""

    def __init__(self, path: str | Path, about: dict[str, Any] | None = None) -> None:
        # the job's output comes from its reader threads; reentrant: a group line is
        # written while its first op records are
        self._lock = threading.RLock()
        self._identities: dict[tuple[int, int], tuple] = {}  # by (rank, inc)
        self._topologies: dict[int, protocol.GpuTopology] = {}  # ranks repeat it every 10 s
        self._groups = GroupNumbers()  # their ``g``, by (pg, ranks)
        self._last_flush = time.monotonic()
        self._sink = _sink(path, {"format": FORMAT, "version": VERSION, "commviz": __version__,
                                  "protocol": protocol.VERSION, "created_ns": time.time_ns(),
                                  **(about or {})})

    def write(self, messages: Iterable[protocol.Message], received_ns: int | None = None) -> None:
        """``received_ns``: when the viewer took them off its socket (wall clock), written
        as an ``rx`` line before the first of them that says a rank is alive or gone: a
        playback judges a silence from when the viewer heard a rank, as the live diagnosis
        did, not from the rank's own stamp, which a loaded rank or viewer puts earlier. One
        exact time a batch: it keeps their order, and costs a line a batch, not bytes a line."""
        for msg in messages:
            if received_ns is not None and isinstance(
                    msg, protocol.Heartbeat | protocol.Bye | protocol.Gone):
                self._write({"kind": "rx", "t_ns": received_ns})
                received_ns = None  # once a batch of messages
            if isinstance(msg, protocol.OpBatch):
                self._ops(msg)
            elif isinstance(msg, protocol.Heartbeat):
                ident = (msg.world, msg.host, msg.pid, msg.backend, msg.device, msg.job,
                         msg.simulated)
                if self._identities.get((msg.rank, msg.inc)) != ident:
                    self._identities[(msg.rank, msg.inc)] = ident
                    self._write({"kind": "rank", "rank": msg.rank, "world": msg.world,
                                 "host": msg.host, "pid": msg.pid, "backend": msg.backend,
                                 "device": msg.device, **_inc(msg.inc),
                                 **({"job": msg.job} if msg.job else {}),
                                 **({"sim": True} if msg.simulated else {})})
                tel = {"kind": "tel", "rank": msg.rank, **_inc(msg.inc), "t_ns": msg.t_ns,
                       "dropped": msg.dropped, **msg.telemetry}
                if msg.clock:  # replayed, the same clock offsets correct the same records
                    tel["clk"] = [list(row) for row in msg.clock]
                self._write(tel)
            elif isinstance(msg, protocol.Bye):
                self._write({"kind": "bye", "rank": msg.rank, **_inc(msg.inc), "t_ns": msg.t_ns,
                             "dropped": msg.dropped})
            elif isinstance(msg, protocol.Gone):
                self._write({"kind": "gone", "rank": msg.rank, **_inc(msg.inc), "pid": msg.pid,
                             "t_ns": msg.t_ns, "order": msg.order, "code": msg.code,
                             "recovered": msg.recovered, "running": msg.running})
            elif isinstance(msg, protocol.Phases):
                for span in msg.spans:
                    self._write({"kind": "phase", "rank": msg.rank, **_inc(msg.inc),
                                 "name": span.name,
                                 "depth": span.depth, "t_start_ns": span.t_start,
                                 "t_end_ns": span.t_end})
            elif isinstance(msg, protocol.GpuTopology) and \
                    self._topologies.get(msg.rank) != msg:
                self._topologies[msg.rank] = msg
                self._write({"kind": "topo", "rank": msg.rank, "host": msg.host, "gpu": msg.gpu,
                             "gpus": [list(g) for g in msg.gpus],
                             "links": [list(li) for li in msg.links], "note": msg.note})
        self.maybe_flush()

    def write_findings(self, findings: Iterable[Any]) -> None:
        """One ``diag`` line per finding (``commviz.viewer.diagnose.Finding.record()``)."""
        for finding in findings:
            self._write(finding.record())
        self.maybe_flush()

    def write_output(self, text: str) -> None:
        """One line of a job's output, when the viewer read it (any thread; none once the
        recording is closed)."""
        self._write({"kind": "out", "t_ns": time.time_ns(), "text": text[:MAX_OUTPUT_CHARS]})

    def write_event(self, key: str, fields: dict[str, Any]) -> None:
        """What the viewer learnt of the ranks' processes (``key``, a UI string: "rank
        failed"...; ``fields``, its fields), when it did."""
        self._write({"kind": "event", "t_ns": time.time_ns(), "key": key, "fields": fields})

    def maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush >= FLUSH_S:
            with self._lock:
                if not self._sink.closed:
                    self._sink.flush()
            self._last_flush = time.monotonic()

    def close(self, summary: dict[str, Any]) -> None:
        """The closing ``summary`` line, with when the viewer closed (``t_ns``, unless the
        summary gives it)."""
        self._write({"kind": "summary", "t_ns": time.time_ns(), **summary})
        with self._lock:
            self._sink.close()

    def _write(self, obj: dict[str, Any]) -> None:
        with self._lock:
            if not self._sink.closed:
                self._sink.line(obj)

    def _ops(self, batch: protocol.OpBatch) -> None:
        with self._lock:
            if not self._sink.closed:
                self._sink.ops(batch, self._group_ref)

    def _group_ref(self, name: str, ranks: tuple[int, ...]) -> int:
        """The ``g`` of a group: one per (name, ranks) in the whole recording, so that two
        jobs' groups of the same name and ranks share a line and a name reused with other
        ranks gets a new one; its ``group`` line is written before the first line naming it."""
        g, new = self._groups.number(name, ranks if type(ranks) is tuple else tuple(ranks))
        if new:
            self._write({"kind": "group", "g": g, "pg": name, "ranks": list(ranks)})
        return g


def _inc(inc: int) -> dict[str, int]:
    """The ``inc`` field of a line: none for a rank that sent no incarnation id."""
    return {"inc": inc} if inc else {}


def _sink(path: str | Path, header: dict[str, Any]) -> _JsonLines | _Compact:
    """Where a recording's lines go: the format ``path``'s suffix names."""
    return _Compact(path, header) if compact.named_compact(path) else _JsonLines(path, header)


class _JsonLines:
    """The lines of a recording as JSON Lines, an op line per op record."""

    def __init__(self, path: str | Path, header: dict[str, Any]) -> None:
        self._file: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115
        self.line(header)

    @property
    def closed(self) -> bool:
        return self._file.closed

    def line(self, obj: dict[str, Any]) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def ops(self, batch: protocol.OpBatch, group_ref: Callable[[str, tuple[int, ...]], int]
            ) -> None:
        for record in op_dicts(batch, running=True, group_ref=group_ref):
            self.line(record)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class _Compact:
    """The lines of a recording in the compact format: a batch's records go to its columns
    as they are; op lines (``export`` from JSON Lines) are gathered into columns first."""

    def __init__(self, path: str | Path, header: dict[str, Any]) -> None:
        self._writer = compact.Writer(path, header)
        self._rows: list[dict[str, Any]] = []  # op lines not in columns yet
        self.closed = False

    def line(self, obj: dict[str, Any]) -> None:
        if obj.get("kind") in ("op", "running"):
            self._rows.append(obj)
            if len(self._rows) >= protocol.MAX_BATCH:
                self._columns()
            return
        self._columns()
        self._writer.line(obj)

    def ops(self, batch: protocol.OpBatch, group_ref: Callable[[str, tuple[int, ...]], int]
            ) -> None:
        self._columns()
        gid = batch.cols["gid"]
        if len(batch.groups) == 1:
            used = list(batch.groups)
        else:  # in the order the records come, as JSON Lines writes their group lines
            gids, first = np.unique(gid, return_index=True)
            used = gids[np.argsort(first)].tolist()
        self._writer.ops(batch.cols, [(batch.rank, batch.inc)],
                         {k: group_ref(*batch.groups[k]) for k in used}, batch.sites)

    def _columns(self) -> None:
        """The op lines gathered so far, to the writer as columns."""
        rows, self._rows = self._rows, []
        if not rows:
            return
        who: dict[tuple[int, int], int] = {}
        sites: dict[tuple[str, int], int] = {}
        code = lambda table, value: protocol.NO_CODE if value is None else table[value]
        cols = {"who": [who.setdefault((r["rank"], r.get("inc", 0)), len(who)) for r in rows],
                "gid": [r["g"] for r in rows],
                "site": [sites.setdefault((r["file"], r["line"]), len(sites)) for r in rows],
                "id": [r["id"] for r in rows], "op": [protocol.OP_CODE[r["op"]] for r in rows],
                "parent": [code(protocol.OP_CODE, r["parent"]) for r in rows],
                "seq": [r["seq"] for r in rows],
                "peer": [-1 if r["peer"] is None else r["peer"] for r in rows],
                "bytes_in": [r["bytes_in"] for r in rows],
                "bytes_out": [r["bytes_out"] for r in rows],
                "dtype": [code(protocol.DTYPE_CODE, r["dtype"]) for r in rows],
                "flags": [r["flags"] for r in rows],
                "t_start": [r["t_start_ns"] for r in rows],
                "t_end": [r.get("t_end_ns", -1) if r["kind"] == "op" else -1 for r in rows]}
        self._writer.ops({k: np.asarray(v, dtype=np.int64) for k, v in cols.items()},
                         list(who), {g: g for g in set(cols["gid"])},
                         {i: s for s, i in sites.items()})

    def flush(self) -> None:
        self._columns()
        self._writer.flush()

    def close(self) -> None:
        self._columns()
        self._writer.close()
        self.closed = True


def op_dicts(batch: protocol.OpBatch, running: bool = False,
             group_ref: Callable[[str, tuple[int, ...]], int] | None = None
             ) -> list[dict[str, Any]]:
    """The completed records of a batch as recording lines; with ``running``, the in-flight
    snapshots too, as ``running`` lines (no ``t_end_ns``). Each names its group's ranks
    (``group``), or with ``group_ref`` the number it gives the group (``g``)."""
    cols = {k: v.tolist() for k, v in batch.cols.items()}
    out = []
    inc = _inc(batch.inc)
    refs: dict[int, dict[str, Any]] = {}  # the group field of each gid of the batch
    for i in range(len(batch)):
        t_end = cols["t_end"][i]
        if t_end < 0 and not running:
            continue  # still in flight: its completed record comes later
        gid = cols["gid"][i]
        name, ranks = batch.groups[gid]
        if gid not in refs:
            refs[gid] = ({"group": list(ranks)} if group_ref is None
                         else {"g": group_ref(name, ranks)})
        out.append(_op_line(batch.rank, inc, refs[gid], name, batch.sites[cols["site"][i]],
                            cols, i))
    return out


def _op_line(rank: int, inc: dict[str, int], group: dict[str, Any], pg: str,
             site: tuple[str, int], cols: dict[str, list], i: int) -> dict[str, Any]:
    """The line of record ``i`` of ``cols`` (the wire's columns, as lists)."""
    ops, dtypes = protocol.OPS, protocol.DTYPES
    peer, parent, dtype, flags = (cols["peer"][i], cols["parent"][i], cols["dtype"][i],
                                  cols["flags"][i])
    t_end = cols["t_end"][i]
    rec = {
        "kind": "op" if t_end >= 0 else "running", "rank": rank, **inc,
        "id": cols["id"][i],
        "op": ops[cols["op"][i]],
        "parent": None if parent == protocol.NO_CODE else ops[parent],
        **group, "pg": pg, "seq": cols["seq"][i],
        "peer": None if peer < 0 else peer,
        "bytes_in": cols["bytes_in"][i], "bytes_out": cols["bytes_out"][i],
        "dtype": None if dtype == protocol.NO_CODE else dtypes[dtype],
        "async": bool(flags & protocol.FLAG_ASYNC), "ddp": bool(flags & protocol.FLAG_DDP),
        "flags": flags,
        "t_start_ns": cols["t_start"][i], "t_end_ns": t_end, "file": site[0], "line": site[1]}
    if t_end < 0:
        del rec["t_end_ns"]
    return rec


def read_header(path: str | Path) -> dict[str, Any]:
    """The header line of a recording, checked."""
    if compact.is_compact(path):
        return _checked(_compactly(compact.header, path), path)
    with open(path, encoding="utf-8") as f:
        return _header(f, path)


def _header(f: IO[str], path: str | Path) -> dict[str, Any]:
    first = f.readline()
    if not first:
        raise RecordingError(f"{path} is empty (not a commviz recording)")
    try:
        header = json.loads(first)
    except json.JSONDecodeError:
        header = None
    return _checked(header, path)


def _checked(header: Any, path: str | Path) -> dict[str, Any]:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RecordingError(f"{path} is not a commviz recording (no header line)")
    if header.get("version") not in READS:
        raise RecordingError(f"{path}: recording version {header.get('version')} is not "
                             f"supported (this commviz reads versions "
                             f"{', '.join(map(str, READS))})")
    return header


def _compactly(call: Callable, *args: Any) -> Any:
    """``call(*args)``, a compact reader's, its faults a RecordingError."""
    try:
        return call(*args)
    except compact.CompactError as exc:
        raise RecordingError(str(exc)) from None


def cut_note(path: str | Path, cut: list[int]) -> str:
    """What a reader says of a recording whose end was cut short (``cut``, from ``read``)."""
    what = (f"the last chunk (from byte {cut[0]})" if compact.is_compact(path)
            else f"{path}:{cut[0]}: the last line")
    return (f"{what if what.startswith(str(path)) else f'{path}: {what}'} is cut short (the "
            "viewer was stopped while writing it): left out")


class _Tables:
    """A compact recording's tables, merged over its chunks: whose records (rank, inc),
    their sites and their groups, numbered in the order the reader met them."""

    def __init__(self) -> None:
        self.who: list[tuple[int, int]] = []
        self.sites: list[tuple[str, int]] = []
        self.groups: dict[int, tuple[str, tuple[int, ...]]] = {}
        self._who: dict[tuple[int, int], int] = {}
        self._sites: dict[tuple[str, int], int] = {}

    def take(self, chunk: compact.Chunk) -> dict[str, np.ndarray]:
        """The chunk's columns, its ``who`` and ``site`` renumbered as these tables do."""
        who = np.array([self._who.setdefault(w, len(self._who)) for w in chunk.who] or [0])
        self.who[len(self.who):] = list(self._who)[len(self.who):]
        site = np.array([self._sites.setdefault(s, len(self._sites)) for s in chunk.sites]
                        or [0])
        self.sites[len(self.sites):] = list(self._sites)[len(self.sites):]
        self.groups.update(chunk.groups)
        return {**chunk.cols, "who": who[chunk.cols["who"]], "site": site[chunk.cols["site"]]}


class _Ops:
    """A run of op records of a compact recording: rows ``lo:hi`` of its chunk's columns
    (``compact.COLUMNS``, numbered by the reader's ``_Tables``), sliced only when read (a
    chunk of a 1,024-rank recording has thousands of runs between its heartbeats)."""

    def __init__(self, chunk: _ChunkColumns, lo: int = 0, hi: int | None = None) -> None:
        self.chunk, self.lo = chunk, lo
        self.hi = chunk.size if hi is None else hi

    @property
    def cols(self) -> dict[str, np.ndarray]:
        if self.lo == 0 and self.hi == self.chunk.size:
            return self.chunk.cols
        return {k: v[self.lo:self.hi] for k, v in self.chunk.cols.items()}

    def __len__(self) -> int:
        return self.hi - self.lo

    def completed(self) -> _Ops:
        done = self.chunk.done_before
        if done is None or done[self.hi] - done[self.lo] == self.hi - self.lo:
            return self
        cols = self.cols
        kept = cols["t_end"] >= 0
        return _Ops(_ChunkColumns({k: v[kept] for k, v in cols.items()}))


class _ChunkColumns:
    """A chunk's op records in columns, and how many of them had ended before each row
    (None: all of them)."""

    def __init__(self, cols: dict[str, np.ndarray]) -> None:
        self.cols = cols
        self.size = len(cols["id"])
        ended = cols["t_end"] >= 0
        self.done_before: list[int] | None = None if ended.all() else \
            np.r_[0, np.cumsum(ended)].tolist()


def _compact_items(path: str | Path, cut: list[int] | None,
                   tables: _Tables) -> Iterator[tuple[str, dict[str, Any] | _Ops]]:
    """The lines of a compact recording after its header, each with where it is; its op
    records as runs of columns."""
    try:
        for k, chunk in enumerate(compact.chunks(path, cut)):
            yield from _chunk_items(path, chunk, tables, first=k == 0)
    except compact.CompactError as exc:
        raise RecordingError(str(exc)) from None


def _chunk_items(path: str | Path, chunk: compact.Chunk, tables: _Tables, first: bool
                 ) -> Iterator[tuple[str, dict[str, Any] | _Ops]]:
    """The lines of one chunk (``first``: the recording's first, whose first line is the
    header), each with where it is; its op records as runs of columns."""
    where = f"{path}: chunk at byte {chunk.offset}"
    cols, at = _ChunkColumns(tables.take(chunk)), 0
    for item in chunk.lines[1:] if first else chunk.lines:
        if type(item) is int:
            yield where, _Ops(cols, at, at + item)
            at += item
        elif item.get("kind") in ("op", "running", "group"):
            raise RecordingError(f"{where}: an {item.get('kind')} line among the "
                                 "lines (they are columns)")
        else:
            yield where, item


def _json_items(f: IO[str], path: str | Path,
                cut: list[int] | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """The lines of a JSON Lines recording after its header, each with where it is."""
    for lineno, line in enumerate(f, start=2):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if line.endswith("\n"):
                raise RecordingError(f"{path}:{lineno}: not JSON") from None
            if cut is not None:
                cut.append(lineno)
            break  # a last line cut short by a killed viewer
        if not isinstance(obj, dict):
            raise RecordingError(f"{path}:{lineno}: not a JSON object")
        yield f"{path}:{lineno}", obj


def _items(path: str | Path, cut: list[int] | None, tables: _Tables
           ) -> Iterator[tuple[str, dict[str, Any] | _Ops]]:
    """The header-checked lines of a recording of either format."""
    if compact.is_compact(path):
        read_header(path)
        yield from _compact_items(path, cut, tables)
        return
    with open(path, encoding="utf-8") as f:
        _header(f, path)
        yield from _json_items(f, path, cut)


def read(path: str | Path, findings: list[dict] | None = None,
         cut: list[int] | None = None, playback: bool = False,
         lines: dict[str, list[dict]] | None = None,
         records: bool = False) -> Iterator[protocol.Message | Records | Received]:
    """Messages equivalent to what was recorded, for the same model the live viewer uses;
    the live diagnosis's findings (``diag`` lines, without their kind) go to ``findings``,
    where a last line or chunk was cut short (a viewer killed while writing it: its line
    number, or byte offset, for ``cut_note``) to ``cut``, the lines of the kinds that
    ``lines`` has keys for (``out``, ``event``, ``summary``: no message of the model) to
    their lists, without their kind. Both formats give the same messages.
    ``playback``: also every heartbeat with its telemetry, and the ops announced as running
    (t_end -1), as the live viewer received them, and a rank's heartbeats, goodbye and end
    with when the viewer received them (``Received``) where the recording says.
    ``records``: the op records of each batch of ranks as one ``model.Records`` rather than
    an ``OpBatch`` a rank (the model applies them alike, at a fraction of the cost: at 1,024
    ranks a batch holds about 8 records)."""
    state = _Reading(playback, records, findings, lines)
    for where, obj in _items(path, cut, state.tables):
        yield from state.take(where, obj)
    yield from state.end()


class _Reading:
    """What reading a recording's lines in order remembers: the tables of its chunks, the
    identities and groups its lines named, the op records not in a batch yet. Plain data:
    a copy reads on from where the original was (``Parts``)."""

    def __init__(self, playback: bool, records: bool, findings: list[dict] | None,
                 lines: dict[str, list[dict]] | None) -> None:
        self.playback, self.findings, self.lines = playback, findings, lines
        self.records = records
        self.tables = _Tables()
        self.pending: _LinePending | _ColumnPending = _LinePending(records)
        self.ranks: dict[tuple[int, int], dict] = {}  # identities by (rank, inc)
        self.with_ops: set[tuple[int, int]] = set()  # (rank, inc) of every op line
        self._with_ops = np.zeros(0, bool)  # ... and of every compact record, by its ``who``
        self.groups: dict[int, list[int]] = {}  # the ranks of each ``group`` line, by ``g``
        self.received: int | None = None  # the last ``rx`` line's time

    def take(self, where: str, obj: dict[str, Any] | _Ops
             ) -> Iterator[protocol.Message | Records | Received]:
        """The messages one line (or a compact run of op records) gives."""
        tables, playback = self.tables, self.playback
        if isinstance(obj, _Ops):  # a compact recording's records
            if not isinstance(self.pending, _ColumnPending):
                self.pending = _ColumnPending(tables, self.records)
            run = obj if playback else obj.completed()
            if len(run):
                if len(self._with_ops) < len(tables.who):
                    self._with_ops = np.r_[self._with_ops,
                                           np.zeros(len(tables.who) - len(self._with_ops), bool)]
                self._with_ops[run.chunk.cols["who"][run.lo:run.hi]] = True
                self.pending.add(run)
                yield from self.pending.full()
            return
        kind = obj.get("kind")
        if kind == "tel":  # the most common line by far (at 1,024 ranks, 2,000 a second)
            ident = self.ranks.get((obj["rank"], obj.get("inc", 0))) \
                if playback or obj.get("clk") else None
            if ident is not None:
                yield self._received(_identity(ident, obj["t_ns"], obj["dropped"],
                                               tuple(map(tuple, obj.get("clk", ()))),
                                               _telemetry(obj) if playback else {}))
            elif self.lines is not None and kind in self.lines:
                self.lines[kind].append({k: v for k, v in obj.items() if k != "kind"})
            return
        if kind in ("rank", "bye", "gone"):  # they begin and end incarnations: earlier ops first
            yield from self.pending.all()
        if kind == "running" and playback:
            kind, obj = "op", {**obj, "t_end_ns": -1}
        if kind == "rx" and type(obj.get("t_ns")) is int:
            self.received = obj["t_ns"]
        elif kind == "group":
            self.groups[_group_number(obj, where)] = obj["ranks"]
        elif kind == "op":
            if "group" not in obj:  # version 2: by reference to a group line
                g = obj.get("g")
                if type(g) is not int or g not in self.groups:
                    raise RecordingError(f"{where}: op line names no group "
                                         f"written before it (g: {g!r})")
                obj["group"] = self.groups[g]
            assert isinstance(self.pending, _LinePending)
            self.pending.add(obj)
            yield from self.pending.full()
        elif kind == "rank":
            self.ranks[(obj["rank"], obj.get("inc", 0))] = obj
            yield _identity(obj, 0, 0, ())
        elif kind == "bye":  # the model's job generations end with their goodbyes
            yield self._received(protocol.Bye(obj["rank"], obj["t_ns"], obj["dropped"],
                                              obj.get("inc", 0)))
        elif kind == "gone":  # a harvester's notice: how the run ended is told from these
            yield self._received(protocol.Gone(obj["rank"], obj["pid"], obj["t_ns"],
                                               obj["order"], obj.get("code"), obj["recovered"],
                                               obj["running"], obj.get("inc", 0)))
        elif kind == "phase":
            yield protocol.Phases(obj["rank"], (protocol.PhaseSpan(
                obj["name"], obj["depth"], obj["t_start_ns"], obj["t_end_ns"]),),
                obj.get("inc", 0))
        elif kind == "topo":
            yield _topology(obj, where)
        elif kind == "diag" and self.findings is not None:
            self.findings.append({k: v for k, v in obj.items() if k != "kind"})
        elif self.lines is not None and kind in self.lines:
            self.lines[kind].append({k: v for k, v in obj.items() if k != "kind"})
        if kind == "op":
            self.with_ops.add((obj["rank"], obj.get("inc", 0)))

    def _received(self, msg: protocol.Heartbeat | protocol.Bye | protocol.Gone
                  ) -> protocol.Message | Received:
        """``msg`` with when the live viewer received it (the last ``rx`` line), for a
        playback, where the recording says (older ones do not)."""
        return msg if not self.playback or self.received is None \
            else Received(msg, self.received)

    def flush(self) -> Iterator[protocol.Message | Records]:
        """The op records not in a batch yet."""
        yield from self.pending.all()

    def end(self) -> Iterator[protocol.Message | Records]:
        """What the end of the recording gives: the last records, and the ranks whose ops
        came before their ``rank`` line (that waits for a clock round trip), for a
        recording cut in between, as ranks of the job of the last rank named."""
        yield from self.pending.all()
        last = next(reversed(self.ranks.values()), {})
        with_ops = self.with_ops | {self.tables.who[w]
                                    for w in np.flatnonzero(self._with_ops).tolist()}
        for rank, inc in sorted(with_ops - self.ranks.keys()):
            yield protocol.Heartbeat(rank, last.get("world", 0), "?", 0, "?", "?", 0, 0, {},
                                     (), inc, last.get("job", ""))


class Parts:
    """A compact recording's messages a chunk at a time, as ``read(playback=True,
    records=True)`` gives them, and before each chunk a time its messages and the later
    chunks' are due after (``bound_ns``): a player reads only as far as what is due, and a
    copy of this reads on from where it was (what a seek restores). Its chunks are those of
    the recording's index; it reads none but its own."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.cut: list[int] = []  # where a last chunk was cut short (a viewer killed)
        entries, self.indexed = _compactly(compact.index, path, self.cut)
        self.entries = [e for e in entries if e.offset > len(compact.MAGIC)]  # not the header's
        firsts = [e.first_ns if e.first_ns != compact.NO_TIME else _NEVER for e in self.entries]
        # the earliest time of each chunk and every later one
        self._bounds = np.minimum.accumulate(np.array(firsts[::-1] or [_NEVER],
                                                      np.int64))[::-1].tolist()
        self.last_ns = max((e.last_ns for e in self.entries), default=compact.NO_TIME)
        self.next = 0  # the index of the next chunk to read
        self._reading = _Reading(True, True, None, None)

    @property
    def bound_ns(self) -> int | None:
        """The earliest time of what is left to read (None: nothing is left)."""
        return self._bounds[self.next] if self.next < len(self.entries) else None

    def read(self) -> list[protocol.Message | Records | Received]:
        """The next chunk's messages (the last one's, with the end's)."""
        entry = self.entries[self.next]
        self.next += 1
        out: list[protocol.Message | Records | Received] = []
        try:
            for chunk in compact.chunks(self.path, start=entry.offset):
                for where, obj in _chunk_items(self.path, chunk, self._reading.tables,
                                                first=False):
                    out += self._reading.take(where, obj)
                break
        except compact.CompactError as exc:
            raise RecordingError(str(exc)) from None
        out += self._reading.flush()
        if self.next == len(self.entries):
            out += self._reading.end()
        return out


_NEVER = 1 << 62  # a time after any other


def extras(path: str | Path) -> tuple[list[dict], dict[str, list[dict]]]:
    """A compact recording's live findings (``diag`` lines) and its ``out``, ``event`` and
    ``summary`` lines, without their kind, read from the chunks whose index entry says they
    hold some (every chunk, where the index does not say)."""
    found: list[dict] = []
    extra: dict[str, list[dict]] = {"out": [], "event": [], "summary": []}
    entries, _ = _compactly(compact.index, path)
    wanted = [e for e in entries if any(e.holds(k) for k in compact.NOTED_KINDS)]
    tables = _Tables()
    try:
        for e in wanted:
            for chunk in compact.chunks(path, start=e.offset):
                header_chunk = chunk.offset == len(compact.MAGIC)
                for _, obj in _chunk_items(path, chunk, tables, first=header_chunk):
                    if isinstance(obj, dict):
                        kind = obj.get("kind")
                        if kind == "diag":
                            found.append({k: v for k, v in obj.items() if k != "kind"})
                        elif kind in extra:
                            extra[kind].append({k: v for k, v in obj.items() if k != "kind"})
                break
    except compact.CompactError as exc:
        raise RecordingError(str(exc)) from None
    return found, extra


def lines(path: str | Path, cut: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """Every line of a recording of either format and version, header first, as this
    version writes them: op lines name their group by ``g``, after its ``group`` line."""
    yield {**read_header(path), "version": VERSION}
    tables = _Tables()
    if compact.is_compact(path):
        seen: set[int] = set()
        for _, obj in _compact_items(path, cut, tables):
            if isinstance(obj, _Ops):
                yield from _op_lines(obj.cols, tables, seen)
            else:
                yield obj
        return
    refs: dict[tuple[str, tuple[int, ...]], int] = {}  # the g of a version 1 line's group
    for _, obj in _items(path, cut, tables):
        assert isinstance(obj, dict)
        if obj.get("kind") in ("op", "running") and "group" in obj:
            key = (obj["pg"], tuple(obj["group"]))
            if key not in refs:
                refs[key] = len(refs)
                yield {"kind": "group", "g": refs[key], "pg": key[0], "ranks": list(key[1])}
            obj = {("g" if k == "group" else k): (refs[key] if k == "group" else v)
                   for k, v in obj.items()}
        yield obj


def _op_lines(cols: dict[str, np.ndarray], tables: _Tables,
              seen: set[int]) -> Iterator[dict[str, Any]]:
    """A compact run's op records as op lines, each group's line before the first."""
    lists = {k: v.tolist() for k, v in cols.items()}
    for i, g in enumerate(lists["g"]):
        pg, ranks = tables.groups[g]
        if g not in seen:
            seen.add(g)
            yield {"kind": "group", "g": g, "pg": pg, "ranks": list(ranks)}
        rank, inc = tables.who[lists["who"][i]]
        yield _op_line(rank, _inc(inc), {"g": g}, pg, tables.sites[lists["site"][i]], lists, i)


def export(src: str | Path, dst: str | Path, to_compact: bool) -> list[int]:
    """Write the recording ``src`` again at ``dst``, compact or as JSON Lines; where ``src``
    was cut short (as ``read``'s ``cut``) is returned. ``dst`` is removed if it fails."""
    cut: list[int] = []
    source = lines(src, cut)
    header = next(source)  # src is readable before dst is written
    try:
        sink = _Compact(dst, header) if to_compact else _JsonLines(dst, header)
    except OSError as exc:
        raise RecordingError(f"cannot write {dst}: {exc.strerror}") from None
    try:
        for obj in source:
            sink.line(obj)
        sink.close()
    except BaseException:
        sink.close()
        Path(dst).unlink(missing_ok=True)
        raise
    return cut


def _group_number(obj: dict, where: str) -> int:
    """A ``group`` line's ``g``, checked (its ranks are a list of ranks)."""
    g, ranks = obj.get("g"), obj.get("ranks")
    if type(g) is not int or not isinstance(ranks, list) or \
            not all(type(r) is int for r in ranks):
        raise RecordingError(f"{where}: malformed group line")
    return g


def _identity(obj: dict, t_ns: int, dropped: int, clock: tuple,
              telemetry: dict | None = None) -> protocol.Heartbeat:
    """The heartbeat a ``rank`` line stands for (with a ``tel`` line's clock round trips and
    telemetry)."""
    return protocol.Heartbeat(obj["rank"], obj["world"], obj["host"], obj["pid"],
                              obj["backend"], obj["device"], t_ns, dropped, telemetry or {},
                              clock, obj.get("inc", 0), obj.get("job", ""),
                              obj.get("sim") is True)


def _telemetry(obj: dict) -> dict[str, float | None]:
    """A ``tel`` line's telemetry fields, as the heartbeat carried them (a value that is not
    a non-negative number is read as unknown, as the live viewer would not have taken it)."""
    return {k: v if type(v) in (int, float) and v >= 0 else None
            for k, v in ((k, obj.get(k)) for k in protocol.TELEMETRY_KEYS)}


def _topology(obj: dict, where: str) -> protocol.GpuTopology:
    """A ``topo`` line, checked as the live viewer checks the message."""
    try:
        msg = protocol.decode(protocol.encode_topology(
            obj.get("rank"), obj.get("host"), {k: obj.get(k) for k in ("gpu", "gpus", "links",
                                                                        "note")}))
    except (ValueError, TypeError, OverflowError) as exc:  # a ProtocolError, or unpackable
        raise RecordingError(f"{where}: malformed topo line ({exc})") from None
    assert isinstance(msg, protocol.GpuTopology)
    return msg


class _LinePending:
    """A JSON Lines recording's op lines not yet in a batch (``records``: in a ``Records``)."""

    def __init__(self, records: bool = False) -> None:
        self._recs: list[dict] = []
        self._records = records

    def add(self, rec: dict) -> None:
        self._recs.append(rec)

    def full(self) -> Iterator[protocol.OpBatch]:
        if len(self._recs) >= protocol.MAX_BATCH:
            yield from self.all()

    def all(self) -> Iterator[protocol.OpBatch | Records]:
        recs, self._recs = self._recs, []
        if not recs:
            return
        if self._records:
            yield _line_records(recs)
        else:
            yield from _batches(recs)


class _ColumnPending:
    """A compact recording's op records not yet in a batch: they are cut into the very
    batches JSON Lines gives (``MAX_BATCH`` records in all, then one per rank, in the order
    the ranks come, their groups and sites numbered in the order they come), or with
    ``records`` as one ``Records`` standing for them."""

    def __init__(self, tables: _Tables, records: bool = False) -> None:
        self._tables = tables
        self._cut = _records if records else _split
        self._runs: list[_Ops] = []
        self._n = 0

    def add(self, run: _Ops) -> None:
        runs = self._runs
        if runs and runs[-1].chunk is run.chunk and runs[-1].hi == run.lo:
            runs[-1] = _Ops(run.chunk, runs[-1].lo, run.hi)  # the next rows: one slice
        else:
            runs.append(run)
        self._n += len(run)

    def full(self) -> Iterator[protocol.OpBatch]:
        while self._n >= protocol.MAX_BATCH:
            cols = self._joined()
            rest = {k: v[protocol.MAX_BATCH:] for k, v in cols.items()}
            self._runs, self._n = [_Ops(_ChunkColumns(rest))], self._n - protocol.MAX_BATCH
            yield from self._cut({k: v[:protocol.MAX_BATCH] for k, v in cols.items()},
                                 self._tables)

    def all(self) -> Iterator[protocol.OpBatch]:
        if self._n:
            cols = self._joined()
            self._runs, self._n = [], 0
            yield from self._cut(cols, self._tables)

    def _joined(self) -> dict[str, np.ndarray]:
        if len(self._runs) == 1:
            return self._runs[0].cols
        runs = [r.cols for r in self._runs]
        return {k: np.concatenate([r[k] for r in runs]) for k in runs[0]}


def _split(cols: dict[str, np.ndarray], tables: _Tables) -> Iterator[protocol.OpBatch]:
    """Records of many ranks, one batch per rank (as ``_batches`` cuts op lines)."""
    batch, whos = _numbered(np.zeros(len(cols["who"]), dtype=np.int64), cols["who"])
    order = np.argsort(batch, kind="stable")
    bounds = np.searchsorted(batch[order], np.arange(len(whos) + 1))
    gid, g_at, g_of = _numbered(batch[order], cols["g"][order], per_batch=True)
    sid, s_at, s_of = _numbered(batch[order], cols["site"][order], per_batch=True)
    wire = {k: cols[k][order] for k in protocol.COLUMNS if k not in ("gid", "site")}
    wire["gid"], wire["site"] = (gid.astype(protocol.COLUMN_DTYPES["gid"]),
                                 sid.astype(protocol.COLUMN_DTYPES["site"]))
    names, columns = list(protocol.COLUMNS), [wire[k] for k in protocol.COLUMNS]
    bounds, g_at, s_at = bounds.tolist(), g_at.tolist(), s_at.tolist()  # Python ints: faster
    g_of, s_of = g_of.tolist(), s_of.tolist()
    for b, who in enumerate(whos.tolist()):
        lo, hi = bounds[b], bounds[b + 1]
        groups = {i: tables.groups[g] for i, g in enumerate(g_of[g_at[b]:g_at[b + 1]])}
        sites = {i: tables.sites[s] for i, s in enumerate(s_of[s_at[b]:s_at[b + 1]])}
        rank, inc = tables.who[who]
        yield protocol.OpBatch(rank, dict(zip(names, [c[lo:hi] for c in columns])),
                               groups, sites, inc)


def _records(cols: dict[str, np.ndarray], tables: _Tables) -> Iterator[Records]:
    """Records of many ranks as one ``Records`` (what ``_split`` cuts into batches)."""
    wire = {k: cols[k] for k in protocol.COLUMNS if k not in ("gid", "site")}
    wire["gid"], wire["site"] = cols["g"], cols["site"]
    yield Records(tables.who, cols["who"], wire, tables.groups, tables.sites)


def _line_records(recs: list[dict]) -> Records:
    """Op lines of many ranks as one ``Records`` (what ``_batches`` cuts into batches)."""
    whos: dict[tuple[int, int], int] = {}
    groups: dict[tuple, int] = {}
    sites: dict[tuple, int] = {}
    who = [whos.setdefault((r["rank"], r.get("inc", 0)), len(whos)) for r in recs]
    cols = _line_columns(recs, groups, sites)
    return Records(list(whos), np.asarray(who, dtype=np.int64), cols,
                   {g: (name, ranks) for (name, ranks), g in groups.items()},
                   {s: site for site, s in sites.items()})


def _line_columns(recs: list[dict], groups: dict[tuple, int],
                  sites: dict[tuple, int]) -> dict[str, np.ndarray]:
    """The wire's columns of op lines, their groups and sites numbered in ``groups`` and
    ``sites`` as they first come."""
    gid = [groups.setdefault((r["pg"], tuple(r["group"])), len(groups)) for r in recs]
    sid = [sites.setdefault((r["file"], r["line"]), len(sites)) for r in recs]
    code = lambda table, value: protocol.NO_CODE if value is None else table[value]
    cols = {
        "id": [r["id"] for r in recs], "op": [protocol.OP_CODE[r["op"]] for r in recs],
        "parent": [code(protocol.OP_CODE, r["parent"]) for r in recs], "gid": gid,
        "seq": [r["seq"] for r in recs],
        "peer": [-1 if r["peer"] is None else r["peer"] for r in recs],
        "bytes_in": [r["bytes_in"] for r in recs], "bytes_out": [r["bytes_out"] for r in recs],
        "dtype": [code(protocol.DTYPE_CODE, r["dtype"]) for r in recs],
        "flags": [r["flags"] for r in recs], "t_start": [r["t_start_ns"] for r in recs],
        "t_end": [r["t_end_ns"] for r in recs], "site": sid,
    }
    return {k: np.asarray(v, dtype=protocol.COLUMN_DTYPES[k]) for k, v in cols.items()}


def _numbered(batch: np.ndarray, values: np.ndarray, per_batch: bool = False) -> tuple:
    """Each value's number among those of its batch (``batch``, ascending when
    ``per_batch``), in the order they first come there; with ``per_batch``, also where each
    batch's values begin in the third array, the values in that order. Without it, the
    values in the order they come (one batch)."""
    span = int(values.max()) + 1 if len(values) else 1
    keys, first, inverse = np.unique(batch.astype(np.int64) * span + values,
                                     return_index=True, return_inverse=True)
    of_batch = keys // span
    order = np.lexsort((first, of_batch))  # by batch, then by first place
    starts = np.searchsorted(of_batch[order], of_batch[order])
    number = np.empty(len(keys), dtype=np.int64)
    number[order] = np.arange(len(keys)) - starts
    if not per_batch:
        return number[inverse], (keys % span)[order]
    at = np.searchsorted(of_batch[order], np.arange(int(batch[-1]) + 2 if len(batch) else 1))
    return number[inverse], at, (keys % span)[order]


def _batches(records: list[dict]) -> Iterator[protocol.OpBatch]:
    by_rank: dict[tuple[int, int], list[dict]] = {}  # by (rank, inc)
    for rec in records:
        by_rank.setdefault((rec["rank"], rec.get("inc", 0)), []).append(rec)
    for (rank, inc), recs in by_rank.items():
        groups: dict[tuple, int] = {}
        sites: dict[tuple, int] = {}
        cols = _line_columns(recs, groups, sites)
        yield protocol.OpBatch(rank, cols,
                               {g: (name, ranks) for (name, ranks), g in groups.items()},
                               {s: site for site, s in sites.items()}, inc)
