"""Recordings: JSON Lines written by the viewer, read back by ``commviz stats``.

The first line is a header naming the format and its version. Then one line per event:
``rank`` (a rank's identity), ``tel`` (a telemetry sample), ``group`` (a process group's
ranks, written once before the first line that names it by its number ``g``, since at 1,024
ranks the list is most of an op line), ``op`` (one completed operation on one rank),
``running`` (an operation a rank announced as running for a while: what a hang leaves
behind, since its ``op`` line never comes), ``phase`` (one compute phase a rank marked),
``topo`` (the GPUs of a rank's host and their links, when first seen or changed), ``bye`` (a
rank left normally), ``diag`` (a finding of the live diagnosis), ``out`` (a line of the
output of a job commviz ran), ``event`` (a rank's process ended, as its launcher told) and a
closing ``summary``. Lines of a rank that sent an incarnation id carry it (``inc``), so that
the records of two jobs that ran at the same time with the same rank numbers are replayed
apart. Writes are flushed at least once a second, so a killed viewer loses at most the last
second. The header may say what was recorded (``title``, per language, and ``demo``, the
demo's name): ``commviz play`` shows it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from commviz import __version__
from commviz.wire import protocol

FORMAT = "commviz-recording"
VERSION = 2  # 2: op and running lines name their group by ``g``, from a ``group`` line
READS = (1, 2)  # version 1: every op and running line lists its group's ranks
FLUSH_S = 1.0
MAX_OUTPUT_CHARS = 2000  # of one line of a job's output; the rest is left out


class RecordingError(ValueError):
    """A file that is not a readable commviz recording."""


class Recorder:
    """``about``: what the header says of the run (``title``, ``demo``)."""

    def __init__(self, path: str | Path, about: dict[str, Any] | None = None) -> None:
        self._file: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()  # the job's output comes from its reader threads
        self._identities: dict[tuple[int, int], tuple] = {}  # by (rank, inc)
        self._topologies: dict[int, protocol.GpuTopology] = {}  # ranks repeat it every 10 s
        self._groups: dict[tuple[str, tuple[int, ...]], int] = {}  # their ``g``, by (pg, ranks)
        self._last_flush = time.monotonic()
        self._write({"format": FORMAT, "version": VERSION, "commviz": __version__,
                     "protocol": protocol.VERSION, "created_ns": time.time_ns(), **(about or {})})

    def write(self, messages: Iterable[protocol.Message]) -> None:
        for msg in messages:
            if isinstance(msg, protocol.OpBatch):
                self._ops(msg)
            elif isinstance(msg, protocol.Heartbeat):
                ident = (msg.world, msg.host, msg.pid, msg.backend, msg.device, msg.job)
                if self._identities.get((msg.rank, msg.inc)) != ident:
                    self._identities[(msg.rank, msg.inc)] = ident
                    self._write({"kind": "rank", "rank": msg.rank, "world": msg.world,
                                 "host": msg.host, "pid": msg.pid, "backend": msg.backend,
                                 "device": msg.device, **_inc(msg.inc),
                                 **({"job": msg.job} if msg.job else {})})
                tel = {"kind": "tel", "rank": msg.rank, **_inc(msg.inc), "t_ns": msg.t_ns,
                       "dropped": msg.dropped, **msg.telemetry}
                if msg.clock:  # replayed, the same clock offsets correct the same records
                    tel["clk"] = [list(row) for row in msg.clock]
                self._write(tel)
            elif isinstance(msg, protocol.Bye):
                self._write({"kind": "bye", "rank": msg.rank, **_inc(msg.inc), "t_ns": msg.t_ns,
                             "dropped": msg.dropped})
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
                if not self._file.closed:
                    self._file.flush()
            self._last_flush = time.monotonic()

    def close(self, summary: dict[str, Any]) -> None:
        """The closing ``summary`` line, with when the viewer closed (``t_ns``, unless the
        summary gives it)."""
        self._write({"kind": "summary", "t_ns": time.time_ns(), **summary})
        with self._lock:
            self._file.close()

    def _write(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self._lock:
            if not self._file.closed:
                self._file.write(line)

    def _ops(self, batch: protocol.OpBatch) -> None:
        for record in op_dicts(batch, running=True, group_ref=self._group_ref):
            self._write(record)

    def _group_ref(self, name: str, ranks: tuple[int, ...]) -> int:
        """The ``g`` of a group: one per (name, ranks) in the whole recording, so that two
        jobs' groups of the same name and ranks share a line and a name reused with other
        ranks gets a new one; its ``group`` line is written before the first line naming it."""
        key = (name, tuple(ranks))
        g = self._groups.get(key)
        if g is None:
            g = self._groups[key] = len(self._groups)
            self._write({"kind": "group", "g": g, "pg": name, "ranks": list(ranks)})
        return g


def _inc(inc: int) -> dict[str, int]:
    """The ``inc`` field of a line: none for a rank that sent no incarnation id."""
    return {"inc": inc} if inc else {}


def op_dicts(batch: protocol.OpBatch, running: bool = False,
             group_ref: Callable[[str, tuple[int, ...]], int] | None = None
             ) -> list[dict[str, Any]]:
    """The completed records of a batch as recording lines; with ``running``, the in-flight
    snapshots too, as ``running`` lines (no ``t_end_ns``). Each names its group's ranks
    (``group``), or with ``group_ref`` the number it gives the group (``g``)."""
    cols = {k: v.tolist() for k, v in batch.cols.items()}
    ops, dtypes, out = protocol.OPS, protocol.DTYPES, []
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
        file, line = batch.sites[cols["site"][i]]
        peer, parent, dtype, flags = (cols["peer"][i], cols["parent"][i], cols["dtype"][i],
                                      cols["flags"][i])
        rec = {
            "kind": "op" if t_end >= 0 else "running", "rank": batch.rank, **inc,
            "id": cols["id"][i],
            "op": ops[cols["op"][i]],
            "parent": None if parent == protocol.NO_CODE else ops[parent],
            **refs[gid], "pg": name, "seq": cols["seq"][i],
            "peer": None if peer < 0 else peer,
            "bytes_in": cols["bytes_in"][i], "bytes_out": cols["bytes_out"][i],
            "dtype": None if dtype == protocol.NO_CODE else dtypes[dtype],
            "async": bool(flags & protocol.FLAG_ASYNC), "ddp": bool(flags & protocol.FLAG_DDP),
            "flags": flags,
            "t_start_ns": cols["t_start"][i], "t_end_ns": t_end, "file": file, "line": line}
        if t_end < 0:
            del rec["t_end_ns"]
        out.append(rec)
    return out


def read_header(path: str | Path) -> dict[str, Any]:
    """The header line of a recording, checked."""
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
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RecordingError(f"{path} is not a commviz recording (no header line)")
    if header.get("version") not in READS:
        raise RecordingError(f"{path}: recording version {header.get('version')} is not "
                             f"supported (this commviz reads versions "
                             f"{', '.join(map(str, READS))})")
    return header


def read(path: str | Path, findings: list[dict] | None = None,
         cut: list[int] | None = None, playback: bool = False,
         lines: dict[str, list[dict]] | None = None) -> Iterator[protocol.Message]:
    """Messages equivalent to what was recorded, for the same model the live viewer uses;
    the live diagnosis's findings (``diag`` lines, without their kind) go to ``findings``,
    the number of a last line cut short (a viewer killed while writing it) to ``cut``, the
    lines of the kinds that ``lines`` has keys for (``out``, ``event``, ``summary``: no
    message of the model) to their lists, without their kind.
    ``playback``: also every heartbeat with its telemetry, and the ops announced as running
    (t_end -1), as the live viewer received them."""
    with open(path, encoding="utf-8") as f:
        _header(f, path)
        pending: list[dict] = []
        ranks: dict[tuple[int, int], dict] = {}  # identities by (rank, inc)
        with_ops: set[tuple[int, int]] = set()  # (rank, inc) of every op line
        groups: dict[int, list[int]] = {}  # the ranks of each ``group`` line, by its ``g``
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
            kind = obj.get("kind")
            if kind in ("rank", "bye"):  # they begin and end incarnations: earlier ops first
                yield from _batches(pending)
                pending = []
            if kind == "running" and playback:
                kind, obj = "op", {**obj, "t_end_ns": -1}
            if kind == "group":
                groups[_group_number(obj, f"{path}:{lineno}")] = obj["ranks"]
            elif kind == "op":
                if "group" not in obj:  # version 2: by reference to a group line
                    g = obj.get("g")
                    if type(g) is not int or g not in groups:
                        raise RecordingError(f"{path}:{lineno}: op line names no group "
                                             f"written before it (g: {g!r})")
                    obj["group"] = groups[g]
                pending.append(obj)
                if len(pending) >= protocol.MAX_BATCH:
                    yield from _batches(pending)
                    pending = []
            elif kind == "rank":
                ranks[(obj["rank"], obj.get("inc", 0))] = obj
                yield _identity(obj, 0, 0, ())
            elif (kind == "tel" and (playback or obj.get("clk"))
                  and (obj["rank"], obj.get("inc", 0)) in ranks):
                yield _identity(ranks[(obj["rank"], obj.get("inc", 0))], obj["t_ns"],
                                obj["dropped"], tuple(tuple(row) for row in obj.get("clk", ())),
                                _telemetry(obj) if playback else {})
            elif kind == "bye":  # the model's job generations end with their goodbyes
                yield protocol.Bye(obj["rank"], obj["t_ns"], obj["dropped"], obj.get("inc", 0))
            elif kind == "phase":
                yield protocol.Phases(obj["rank"], (protocol.PhaseSpan(
                    obj["name"], obj["depth"], obj["t_start_ns"], obj["t_end_ns"]),),
                    obj.get("inc", 0))
            elif kind == "topo":
                yield _topology(obj, f"{path}:{lineno}")
            elif kind == "diag" and findings is not None:
                findings.append({k: v for k, v in obj.items() if k != "kind"})
            elif lines is not None and kind in lines:
                lines[kind].append({k: v for k, v in obj.items() if k != "kind"})
            if kind == "op":
                with_ops.add((obj["rank"], obj.get("inc", 0)))
        yield from _batches(pending)
        # a rank's ops come before its ``rank`` line when they ran before its first heartbeat
        # (that waits for a clock round trip): a recording cut in between still counts them,
        # as ranks of the job of the last rank named
        last = next(reversed(ranks.values()), {})
        for rank, inc in sorted(with_ops - ranks.keys()):
            yield protocol.Heartbeat(rank, last.get("world", 0), "?", 0, "?", "?", 0, 0, {}, (),
                                     inc, last.get("job", ""))


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
                              clock, obj.get("inc", 0), obj.get("job", ""))


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


def _batches(records: list[dict]) -> Iterator[protocol.OpBatch]:
    by_rank: dict[tuple[int, int], list[dict]] = {}  # by (rank, inc)
    for rec in records:
        by_rank.setdefault((rec["rank"], rec.get("inc", 0)), []).append(rec)
    for (rank, inc), recs in by_rank.items():
        groups: dict[tuple, int] = {}
        sites: dict[tuple, int] = {}
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
        yield protocol.OpBatch(
            rank, {k: np.asarray(v, dtype=protocol.COLUMN_DTYPES[k]) for k, v in cols.items()},
            {g: (name, ranks) for (name, ranks), g in groups.items()},
            {s: site for site, s in sites.items()}, inc)
