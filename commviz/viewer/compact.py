"""Compact recordings (``.cvz``): a recording's lines in zstandard-compressed chunks, the op
records of each chunk in columns.

A JSON Lines recording of 1,024 ranks spends some 330 bytes on every op line, most of them
field names and numbers in decimal that repeat from one line to the next. Here the other
lines (``rank``, ``tel``, ``diag``... as ``commviz.viewer.recording`` describes them) stay
maps, in msgpack, and the op records become columns: the wire's own (``protocol.COLUMNS``),
plus whose record it is (``who``, into the chunk's table of (rank, incarnation) pairs), its
group (``g``, the recording's group number) and its call site (into the chunk's table).
Each column is delta-coded where its values climb (start times from one record to the next,
ids and sequence numbers from a rank's previous record, end times from their start) and
split into byte planes, so that zstandard finds the runs.

The file: ``MAGIC``, then frames, each a ``_FRAME`` header (tag, payload bytes, op records,
first and last ns) and its zstandard payload, which carries its own checksum. The first
frame holds the header line alone. A chunk is written at least every ``FLUSH_S`` of the
recorder, as JSON Lines is flushed, and is whole in itself: its tables name every group,
site and rank its records use, so that a reader may start at any chunk. On close, an index
frame (each chunk's offset, op records and times) and a footer (the index's offset, ``END``)
follow; a file without them (a viewer killed) is read up to its last whole chunk, the index
rebuilt by reading the frame headers alone.

This module knows the container; what the lines mean is ``recording``'s. Any fault it finds
is a ``CompactError``, which ``recording`` reports as a ``RecordingError``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgpack
import msgspec
import numpy as np
import zstandard

from commviz.wire import protocol

SUFFIX = ".cvz"
MAGIC = b"\x89CVZ\r\n\x1a\n"  # PNG's trick: a byte above 127, and line ends a text tool mangles
_FRAME = struct.Struct("<4sIIqq")  # tag, payload bytes, op records, first ns, last ns
_FOOTER = struct.Struct("<Q4s")  # the index frame's offset, END
CHUNK, INDEX, END = b"CVZc", b"CVZi", b"CVZe"
NO_TIME = -1  # a chunk with no time in it (the header's)
LEVEL = 3  # zstandard's default: on a fleet recording, level 9 saves 2% at 1/8 the speed
MAX_CHUNK_RECORDS = 1 << 17  # a chunk is written at the latest then, even within FLUSH_S
MAX_PAYLOAD = 1 << 28  # bytes of one frame's payload: a larger length is a corrupt header
# the columns of a chunk's op records: the wire's, with the batch-local gid and site
# replaced by the recording's group number and the chunk's site, and whose record it is
COLUMNS = {"who": "<u4", "g": "<u4", "site": "<u4",
           **{k: v for k, v in protocol.COLUMNS.items() if k not in ("gid", "site")}}
DTYPES = {name: np.dtype(dt) for name, dt in COLUMNS.items()}
_UNPACK = msgspec.msgpack.Decoder()  # a chunk's payload, untyped (checked below)
_BY_WHO = ("id", "seq")  # delta-coded from the same rank's previous record
# lines of these kinds have string keys and lists only: they go to msgpack as they are;
# the others pass through JSON first, so that they read back as JSON Lines would give them
_PLAIN = frozenset({"rank", "tel", "bye", "phase", "topo", "gone", "rx"})


class CompactError(ValueError):
    """A file that is not, or no longer, a readable compact recording."""


def named_compact(path: str | Path) -> bool:
    """Whether a recording written at ``path`` is compact (by its suffix)."""
    return Path(path).suffix.lower() == SUFFIX


def is_compact(path: str | Path) -> bool:
    """Whether the file at ``path`` is a compact recording (by its first bytes)."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


# the kinds of lines a chunk's index entry says it has (``IndexEntry.kinds``, a bit each):
# those a player needs before it plays (the live findings, the job's output, the end), so
# that it decodes only the chunks that hold them
NOTED_KINDS = ("diag", "out", "event", "summary")
ANY_KIND = -1  # an index that does not say (older files, or rebuilt from the frames)


@dataclass(frozen=True)
class IndexEntry:
    offset: int  # of the frame's header
    records: int  # op records
    first_ns: int  # NO_TIME: none
    last_ns: int
    kinds: int = ANY_KIND  # which of NOTED_KINDS its lines hold (bit i: NOTED_KINDS[i])

    def holds(self, kind: str) -> bool:
        """Whether the chunk may hold lines of ``kind`` (one of NOTED_KINDS)."""
        return self.kinds == ANY_KIND or bool(self.kinds >> NOTED_KINDS.index(kind) & 1)


@dataclass
class Chunk:
    """One chunk, decoded: its ``lines`` in order, each a line's map or the number of op
    records that come there (the next ones of ``cols``, in order)."""

    offset: int
    end: int  # the offset of the next frame
    lines: list[dict[str, Any] | int]
    who: list[tuple[int, int]]  # (rank, inc) of each ``who``
    groups: dict[int, tuple[str, tuple[int, ...]]]  # (pg, ranks) of each ``g`` it uses
    sites: list[tuple[str, int]]  # (file, line) of each ``site``
    cols: dict[str, np.ndarray]  # COLUMNS, decoded: the wire's values, ``gid`` aside


class Writer:
    """Writes one compact recording. ``header``: its header line. Not thread-safe by itself:
    its recorder holds a lock around it."""

    def __init__(self, path: str | Path, header: dict[str, Any]) -> None:
        self._file: IO[bytes] = open(path, "wb")  # noqa: SIM115
        self._file.write(MAGIC)
        self._zstd = zstandard.ZstdCompressor(level=LEVEL, write_checksum=True)
        self._index: list[IndexEntry] = []
        self._groups: dict[int, tuple[str, tuple[int, ...]]] = {}  # every group line so far
        self._fresh()
        self.line(header)
        self.flush()  # alone in the first frame: read_header reads no more

    def _fresh(self) -> None:
        self._lines: list[dict[str, Any] | int] = []
        # each batch of records as given: its columns, its ``who`` numbers, its gids and the
        # group numbers they stand for, its sites and the chunk's numbers for them
        self._parts: list[tuple[dict[str, np.ndarray], list[int], list[int], list[int],
                                list[int], list[int]]] = []
        self._records = 0
        self._who: dict[tuple[int, int], int] = {}
        self._sites: dict[tuple[str, int], int] = {}
        self._times: list[int] = []  # of the lines that carry one
        self._kinds = 0  # which of NOTED_KINDS came

    def line(self, obj: dict[str, Any]) -> None:
        """One line, as JSON Lines would write it (but op lines: ``ops``)."""
        kind = obj.get("kind")
        if kind == "group":  # in the tables of the chunks whose records use it
            self._groups[obj["g"]] = (obj["pg"], tuple(obj["ranks"]))
            return
        if kind not in _PLAIN:
            obj = json.loads(json.dumps(obj))
        t = obj.get("t_ns")
        if type(t) is int:
            self._times.append(t)
        if kind in NOTED_KINDS:
            self._kinds |= 1 << NOTED_KINDS.index(kind)
        self._lines.append(obj)

    def ops(self, cols: dict[str, np.ndarray], who: list[tuple[int, int]],
            groups: dict[int, int], sites: dict[int, tuple[str, int]]) -> None:
        """Op records, in order: ``cols`` holds the wire's columns (``protocol.COLUMNS``),
        their ``gid`` a key of ``groups`` (the recording's group number, named by a group
        line before) and their ``site`` a key of ``sites``; with more than one ``who`` (a
        (rank, inc) pair), a ``who`` column says whose each record is. Kept as they are until
        the chunk is written: a batch costs a few microseconds here."""
        n = len(cols["id"])
        if not n:
            return
        unknown = set(groups.values()) - self._groups.keys()
        if unknown:
            raise CompactError(f"op records of groups {sorted(unknown)} named by no group line")
        whos = [self._who.setdefault(w, len(self._who)) for w in who]
        gids = sorted(groups)
        sids = sorted(sites)
        self._parts.append((cols, whos, gids, [groups[k] for k in gids], sids,
                            [self._sites.setdefault(sites[k], len(self._sites)) for k in sids]))
        self._records += n
        if self._lines and type(self._lines[-1]) is int:
            self._lines[-1] += n
        else:
            self._lines.append(n)
        if self._records >= MAX_CHUNK_RECORDS:
            self.flush()

    def flush(self) -> None:
        """Write what came since the last chunk as one (nothing if nothing came)."""
        if not self._lines or self._file.closed:
            return
        cols = self._columns()
        used = sorted(set(cols["g"].tolist()))
        payload = {"lines": self._lines, "n": self._records,
                   "who": [list(w) for w in self._who],
                   "groups": [[g, self._groups[g][0], _ints(self._groups[g][1])] for g in used],
                   "sites": [list(s) for s in self._sites],
                   "cols": _encode_columns(cols)}
        times = self._times + ([int(cols["t_start"].min()),
                                int(np.maximum(cols["t_end"], cols["t_start"]).max())]
                               if self._records else [])
        first, last = (min(times), max(times)) if times else (NO_TIME, NO_TIME)
        self._index.append(IndexEntry(self._file.tell(), self._records, first, last,
                                      self._kinds))
        self._frame(CHUNK, msgpack.packb(payload, use_bin_type=True), self._records,
                    first, last)
        self._file.flush()
        self._fresh()

    def _columns(self) -> dict[str, np.ndarray]:
        """The chunk's records in COLUMNS: each batch's gid and site looked up in its
        tables, all batches at once."""
        parts = self._parts
        if not parts:
            return {k: np.zeros(0, DTYPES[k]) for k in COLUMNS}
        wire = protocol.join_columns([p[0] for p in parts], protocol.COLUMNS)
        cols = {k: wire[k].astype(DTYPES[k], copy=False)
                for k in COLUMNS if k not in ("who", "g", "site")}
        sizes = np.array([len(p[0]["id"]) for p in parts])
        part = np.repeat(np.arange(len(parts), dtype=np.int64), sizes)
        cols["who"] = np.concatenate([
            np.full(len(p[0]["id"]), p[1][0], dtype=np.int64) if len(p[1]) == 1
            else np.asarray(p[1], dtype=np.int64)[p[0]["who"]] for p in parts])
        for name, src, keys, values in (("g", "gid", 2, 3), ("site", "site", 4, 5)):
            table = np.array([(i << 32) + k for i, p in enumerate(parts) for k in p[keys]],
                             dtype=np.int64)
            wanted = (part << 32) + wire[src].astype(np.int64)
            at = np.minimum(np.searchsorted(table, wanted), len(table) - 1)
            if not (table[at] == wanted).all():
                raise CompactError(f"op records name a {src} their batch has not")
            cols[name] = np.array([v for p in parts for v in p[values]], dtype=np.int64)[at]
        cols["t_end"] = np.where(cols["t_end"] < 0, -1, cols["t_end"])  # in flight: -1
        return {k: cols[k].astype(DTYPES[k], copy=False) for k in COLUMNS}

    def close(self) -> None:
        """The last chunk, the index and the footer."""
        if self._file.closed:
            return
        self.flush()
        at = self._file.tell()
        rows = [[e.offset, e.records, e.first_ns, e.last_ns, e.kinds] for e in self._index]
        self._frame(INDEX, msgpack.packb(rows), 0, NO_TIME, NO_TIME)
        self._file.write(_FOOTER.pack(at, END))
        self._file.close()

    def _frame(self, tag: bytes, raw: bytes, records: int, first: int, last: int) -> None:
        payload = self._zstd.compress(raw)
        self._file.write(_FRAME.pack(tag, len(payload), records, first, last) + payload)


def _ints(values: Any) -> bytes:
    """A list of ints (a group's ranks), delta-coded: consecutive ranks cost nothing."""
    a = np.asarray(values, dtype=np.int64)
    return np.diff(a, prepend=0).astype("<i8").tobytes()


def _ints_back(data: Any) -> tuple[int, ...]:
    if not isinstance(data, bytes) or len(data) % 8:
        raise CompactError("malformed group ranks")
    return tuple(np.cumsum(np.frombuffer(data, dtype="<i8")).tolist())


def _encode_columns(cols: dict[str, np.ndarray]) -> dict[str, bytes]:
    coded = dict(cols)
    coded["t_start"] = np.diff(cols["t_start"], prepend=np.int64(0))
    coded["t_end"] = cols["t_end"] - cols["t_start"]  # wraps, and unwraps, exactly
    for name in _BY_WHO:
        coded[name] = _delta_by(cols["who"], cols[name])
    return {k: _planes(v.astype(DTYPES[k], copy=False)) for k, v in coded.items()}


def _decode_columns(raw: Any, n: int) -> dict[str, np.ndarray]:
    if not isinstance(raw, dict) or set(raw) != COLUMNS.keys():
        raise CompactError("a chunk's columns are not the format's")
    cols = {k: _planes_back(raw[k], DTYPES[k], n) for k in COLUMNS}
    cols["t_start"] = np.cumsum(cols["t_start"], dtype=np.int64)
    cols["t_end"] = cols["t_end"] + cols["t_start"]
    runs = _runs(cols["who"])  # one sort for both columns
    for name in _BY_WHO:
        cols[name] = _undelta_by(runs, cols[name])
    return cols


def _planes(a: np.ndarray) -> bytes:
    """The bytes of ``a``, each byte of its items apart (all low bytes, then the next...)."""
    return np.ascontiguousarray(a.view(np.uint8).reshape(-1, a.itemsize).T).tobytes()


def _planes_back(data: Any, dtype: np.dtype, n: int) -> np.ndarray:
    if not isinstance(data, bytes) or len(data) != n * dtype.itemsize:
        raise CompactError("a column's length is not the chunk's")
    if dtype.itemsize == 1:  # one plane: the bytes themselves
        return np.frombuffer(data, dtype=dtype)
    planes = np.frombuffer(data, dtype=np.uint8).reshape(dtype.itemsize, n)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(n)


def _runs(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A stable order by ``key``, and where (in that order) each key's run begins."""
    order = np.argsort(key, kind="stable")
    k = key[order]
    first = np.ones(len(k), dtype=bool)
    first[1:] = k[1:] != k[:-1]
    return order, first


def _delta_by(key: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each value less the previous one of the same key (the first of a key as it is)."""
    order, first = _runs(key)
    v = values[order].astype(np.int64)
    d = np.diff(v, prepend=np.int64(0))
    d[first] = v[first]
    out = np.empty_like(d)
    out[order] = d
    return out


def _undelta_by(runs: tuple[np.ndarray, np.ndarray], deltas: np.ndarray) -> np.ndarray:
    """``_delta_by`` undone, with ``_runs`` of its key."""
    order, first = runs
    d = deltas[order]
    total = np.cumsum(d, dtype=np.int64)
    starts = np.flatnonzero(first)
    before = (total[starts] - d[starts]) if len(d) else total[:0]
    v = total - before[np.cumsum(first) - 1]
    out = np.empty_like(v)
    out[order] = v
    return out


def header(path: str | Path) -> dict[str, Any]:
    """The header line of a compact recording (the first line of its first chunk)."""
    for chunk in chunks(path):
        if chunk.lines and isinstance(chunk.lines[0], dict):
            return chunk.lines[0]
        break
    raise CompactError(f"{path}: no header")


def index(path: str | Path, cut: list[int] | None = None) -> tuple[list[IndexEntry], bool]:
    """The chunks of a recording, from its index, or (False) from its frames when it has
    none (a viewer killed before closing it: the offset of a last chunk cut short goes to
    ``cut``)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        found = _trailer(f, size)
        if found is not None:
            return found, True
        return [entry for entry, _, _ in _scan(f, path, size, read=False, cut=cut)], False


def chunks(path: str | Path, cut: list[int] | None = None, from_ns: int | None = None,
           start: int | None = None) -> Iterator[Chunk]:
    """The chunks of a recording in order, decoded; with ``from_ns``, from the first one
    whose times reach it (through the index); with ``start``, from that offset (a chunk's
    ``end``: a reader following a recording as it grows). The offset of a last chunk cut
    short goes to ``cut``."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        start = len(MAGIC) if start is None else start
        if from_ns is not None:
            found = _trailer(f, size)
            entries = found if found is not None else [
                e for e, _, _ in _scan(f, path, size, read=False)]
            later = [e.offset for e in entries if e.last_ns >= from_ns]
            if not later:
                return
            start = later[0]
        for entry, raw, end in _scan(f, path, size, read=True, start=start, cut=cut):
            yield _chunk(entry.offset, end, raw, path)


def _trailer(f: IO[bytes], size: int) -> list[IndexEntry] | None:
    """The index the footer points to, or None (no footer, or not a whole one)."""
    if size < len(MAGIC) + _FRAME.size + _FOOTER.size:
        return None
    f.seek(size - _FOOTER.size)
    at, end = _FOOTER.unpack(f.read(_FOOTER.size))
    if end != END or not len(MAGIC) <= at <= size - _FOOTER.size - _FRAME.size:
        return None
    f.seek(at)
    tag, length, _, _, _ = _FRAME.unpack(f.read(_FRAME.size))
    if tag != INDEX or at + _FRAME.size + length != size - _FOOTER.size:
        return None
    try:
        rows = msgpack.unpackb(zstandard.ZstdDecompressor().decompress(f.read(length)))
        return [IndexEntry(*map(int, row[:5])) for row in rows]  # 4 before the kinds
    except (zstandard.ZstdError, ValueError, TypeError):
        return None  # the frames are read instead


def _scan(f: IO[bytes], path: str | Path, size: int, read: bool, start: int | None = None,
          cut: list[int] | None = None) -> Iterator[tuple[IndexEntry, bytes, int]]:
    """The chunk frames from ``start`` (their payloads, decompressed, when ``read``; where
    the next frame begins), up to the index, the end, or a last frame cut short."""
    f.seek(0)
    if f.read(len(MAGIC)) != MAGIC:
        raise CompactError(f"{path} is not a compact commviz recording")
    at = start if start is not None else len(MAGIC)
    unzstd = zstandard.ZstdDecompressor()
    while at < size:
        f.seek(at)
        head = f.read(_FRAME.size)
        if len(head) < _FRAME.size:
            break  # cut short
        tag, length, records, first, last = _FRAME.unpack(head)
        if tag == INDEX:
            return
        if tag != CHUNK or length > MAX_PAYLOAD:
            raise CompactError(f"{path}: byte {at}: not a chunk (corrupt file)")
        if at + _FRAME.size + length > size:
            break  # cut short
        raw = b""
        if read:
            try:
                raw = unzstd.decompress(f.read(length))
            except zstandard.ZstdError as exc:
                raise CompactError(f"{path}: chunk at byte {at} is corrupt ({exc})") from None
        end = at + _FRAME.size + length
        yield IndexEntry(at, records, first, last), raw, end
        at = end
    if at < size and cut is not None:
        cut.append(at)


def _chunk(offset: int, end: int, raw: bytes, path: str | Path) -> Chunk:
    where = f"{path}: chunk at byte {offset}"
    try:
        obj = _UNPACK.decode(raw)  # msgspec's: a fifth faster than msgpack's here
    except Exception:  # garbage may raise more than msgspec.DecodeError
        raise CompactError(f"{where} is not msgpack") from None
    try:
        n, lines = obj["n"], obj["lines"]
        who = [(int(r), int(i)) for r, i in obj["who"]]
        groups = {int(g): (str(pg), _ints_back(ranks)) for g, pg, ranks in obj["groups"]}
        sites = [(str(file), int(line)) for file, line in obj["sites"]]
        if type(n) is not int or not isinstance(lines, list) or not all(
                isinstance(x, dict) or (type(x) is int and x > 0) for x in lines) or \
                sum(x for x in lines if type(x) is int) != n:
            raise CompactError(f"{where}: malformed chunk")
        cols = _decode_columns(obj["cols"], n)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, CompactError):
            raise CompactError(f"{where}: {exc}" if where not in str(exc) else str(exc)) \
                from None
        raise CompactError(f"{where}: malformed chunk") from None
    if n and ((cols["who"] >= len(who)).any() or (cols["site"] >= len(sites)).any()
              or not set(_present(cols["g"])) <= groups.keys()):
        raise CompactError(f"{where}: op records name no rank, group or site of the chunk")
    if n and ((cols["op"] >= len(protocol.OPS)).any() or _unknown(cols["parent"], protocol.OPS)
              or _unknown(cols["dtype"], protocol.DTYPES)):
        raise CompactError(f"{where}: op records of unknown ops or dtypes")
    return Chunk(offset, end, lines, who, groups, sites, cols)


def _present(values: np.ndarray) -> list[int]:
    """The distinct values of small non-negative ints (a chunk's group numbers), in order:
    a count of each rather than a sort."""
    return np.flatnonzero(np.bincount(values.astype(np.int64))).tolist()


def _unknown(codes: np.ndarray, table: tuple | list) -> bool:
    return bool(((codes >= len(table)) & (codes != protocol.NO_CODE)).any())
