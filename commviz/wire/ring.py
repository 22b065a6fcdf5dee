"""A rank's records in shared memory, so that they outlive its process (docs/protocol.md).

Each instrumented process keeps a ring file in ``/dev/shm``: a header, ``capacity`` fixed
slots of 64 bytes (one record each, the fields and types of ``protocol.COLUMNS``, packed
widest first), the id shipped from each slot and the batch that shipped it, and an
append-only log of what its records refer to (call sites, groups, its identity). The hooks
pack a record's slot when the call starts (one ``struct.pack_into``) and store its ``t_end``
when it ends (one int64 store); the emitter notes in the file which of its numbered batches
shipped each record. When the process dies, however it dies, the file is still there: the
node's harvester (``commviz/launch/harvester.py``) reads it, sends what the viewer may not
have got and removes it.

The slot of record ``id`` is ``id % capacity``: a slot is valid when the id it holds maps to
it and is among the last ``capacity`` ids. Liveness is an ``flock``: the process holds a
shared lock on its ring for its life (and its harvester another); a ring nobody holds is
stale, and whoever finds one removes it (``sweep``). A ring is created under a hidden name
and renamed once locked, so a sweep never takes a ring being born.

Only what the files hold and how to read and write them lives here: no threads, no policy.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from commviz.wire import protocol

ENV_DIR = "COMMVIZ_RING_DIR"   # where rings live (tests); default /dev/shm
ENV_TAG = "COMMVIZ_RING_TAG"   # the harvester a process' ring belongs to; "0": none
ENV_OFF = "COMMVIZ_RING"       # "0": no ring (today's path only)
DEFAULT_DIR = "/dev/shm"
PREFIX = "commviz-ring-"
SUFFIX = ".ring"
MAGIC = b"cvzring1"
VERSION = 2  # 2: the batch that shipped each slot
CAPACITY = 8192        # records kept: the last few thousand ops, 512 KiB of slots
# a dead process' last batches sent again (viewer/batch_numbers.py): ZeroMQ sends a batch a
# moment after the emitter hands it over, so a process that dies takes the last few along;
# 64 are more than 3 s of ticks, far more than ever wait in a live viewer's direction
RESEND_BATCHES = 64
META_BYTES = 1 << 20   # call sites, groups and identity: thousands of sites fit
HEADER_BYTES = 256  # a multiple of 64: slots are 8-byte aligned

_STRUCT_CODES = {"<i8": "q", "u1": "B", "<u4": "I", "<i4": "i"}
# a slot's fields: the columns, widest first, so that each 8-byte one is 8-byte aligned in the
# file (slots start at HEADER_BYTES, a multiple of 64): an op's end is one int64 store of its
# t_end through ``RingWriter.words``, its start one pack of these fields
SLOT_FIELDS = tuple(sorted(protocol.COLUMNS, key=lambda n: -np.dtype(protocol.COLUMNS[n]).itemsize))
SLOT = struct.Struct("<" + "".join(_STRUCT_CODES[protocol.COLUMNS[n]] for n in SLOT_FIELDS))
SLOT_BYTES = 64
assert SLOT.size == SLOT_BYTES, SLOT.size
_offsets = [0]
for _name in SLOT_FIELDS:
    _offsets.append(_offsets[-1] + np.dtype(protocol.COLUMNS[_name]).itemsize)
# the same layout for numpy: a slot array read back is the columns of an ``ops`` batch
SLOT_DTYPE = np.dtype({"names": list(SLOT_FIELDS),
                       "formats": [protocol.COLUMNS[n] for n in SLOT_FIELDS],
                       "offsets": _offsets[:-1], "itemsize": SLOT_BYTES})
WORDS_PER_SLOT = SLOT_BYTES // 8
FIRST_WORD = HEADER_BYTES // 8  # slot 0's first int64 word in ``RingWriter.words``
ID_WORD, T_END_WORD = SLOT_FIELDS.index("id"), SLOT_FIELDS.index("t_end")  # words in a slot
assert _offsets[T_END_WORD] == 8 * T_END_WORD and _offsets[ID_WORD] == 0

# header: magic, version, slot bytes, capacity, meta bytes, pid, inc, rank, world, how far
# the emitter shipped (the last id it shipped, -1: none; the number of its last batch), meta_used,
# heartbeat_sent, created_ns
HEADER = struct.Struct("<8sIIIIqQiiqQIIq")
_PID_AT, _INC_AT = 24, 32
_RANK_AT = 40
_SHIPPED_AT = 48
_META_USED_AT = 64
_BEAT_AT = 68
_I4, _I8, _U4, _U8 = struct.Struct("<i"), struct.Struct("<q"), struct.Struct("<I"), \
    struct.Struct("<Q")
_RANK_WORLD = struct.Struct("<ii")
_SHIPPED = struct.Struct("<qQ")


class RingError(OSError):
    """A ring that cannot be created or read; the message says why."""


def ring_dir(environ: Any = os.environ) -> Path:
    return Path(environ.get(ENV_DIR) or DEFAULT_DIR)


def file_bytes(capacity: int = CAPACITY, meta: int = META_BYTES) -> int:
    return HEADER_BYTES + capacity * (SLOT_BYTES + 16) + meta


def _layout(capacity: int) -> tuple[int, int, int]:
    """Offsets of the shipped ids, of the batches that shipped them and of the meta log."""
    shipped = HEADER_BYTES + capacity * SLOT_BYTES
    return shipped, shipped + capacity * 8, shipped + capacity * 16


class RingWriter:
    """The ring of this process: created, locked, mapped; ``buf`` is what the hooks pack
    records into (``SLOT``, at ``HEADER_BYTES + (id % capacity) * SLOT_BYTES``), ``words``
    the same bytes as int64 (an op's end: its ``T_END_WORD``)."""

    def __init__(self, tag: str, inc: int, directory: Path | None = None,
                 capacity: int = CAPACITY, meta: int = META_BYTES) -> None:
        if capacity & (capacity - 1) or capacity <= 0:
            raise ValueError("a ring's capacity is a power of two")
        directory = ring_dir() if directory is None else directory
        self.pid = os.getpid()
        name = f"{PREFIX}{tag}-{self.pid}-{inc:x}{SUFFIX}"
        self.path = directory / name
        hidden = directory / f".{name}.new"
        size = file_bytes(capacity, meta)
        self.capacity, self.mask = capacity, capacity - 1
        try:
            fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise RingError(exc.errno, f"cannot create a ring in {directory}: "
                            f"{exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            # reserve the pages now: a write into a full tmpfs through a mapping is SIGBUS
            os.posix_fallocate(fd, 0, size)
            self.buf = mmap.mmap(fd, size)
            HEADER.pack_into(self.buf, 0, MAGIC, VERSION, SLOT_BYTES, capacity, meta,
                             self.pid, inc, -1, 0, -1, 0, 0, 0, time.time_ns())
            shipped_at, batches_at, self._meta_at = _layout(capacity)
            self._meta_size = meta
            self._meta_used = 0
            self._meta_lock = threading.Lock()
            # the file as int64 words: slot k's id is word FIRST_WORD + k * WORDS_PER_SLOT, the
            # id shipped from it word _shipped + k, that id's batch word _batches + k
            self.words = memoryview(self.buf).cast("q")
            self._shipped, self._batches = shipped_at // 8, batches_at // 8
            self.words[self._shipped:self._shipped + capacity] = array("q", [-1]) * capacity
            os.rename(hidden, self.path)
        except OSError as exc:
            os.close(fd)
            try:
                os.unlink(hidden)
            except OSError:
                pass
            raise RingError(exc.errno, f"cannot create a ring in {directory}: "
                            f"{exc.strerror}") from None
        self._fd = fd
        self._last = -1
        self.full = False  # the meta log ran out of room: later entries are lost

    def note(self, entry: list) -> None:
        """Append one entry to the meta log (a call site, a group, the identity), from any
        thread: the rank's notes its sites and groups, the sender thread the identity."""
        data = msgpack.packb(entry, use_bin_type=True)
        with self._meta_lock:
            end = self._meta_used + 4 + len(data)
            if end > self._meta_size:
                self.full = True
                return
            at = self._meta_at + self._meta_used
            self.buf[at + 4:at + 4 + len(data)] = data
            _U4.pack_into(self.buf, at, len(data))
            self._meta_used = end
            _U4.pack_into(self.buf, _META_USED_AT, end)  # last: a reader sees whole entries

    def note_site(self, sid: int, file: str, line: int) -> None:
        self.note(["s", sid, file, line])

    def note_group(self, gid: int, name: str, ranks: list[int]) -> None:
        self.note(["g", gid, name, list(ranks)])

    def note_identity(self, rank: int, world: int, backend: str, device: str, host: str,
                      job: str) -> None:
        _RANK_WORLD.pack_into(self.buf, _RANK_AT, rank, world)
        self.note(["i", rank, world, backend, device, host, job])

    def note_inc(self, inc: int) -> None:
        _U8.pack_into(self.buf, _INC_AT, inc)

    def note_heartbeat(self) -> None:
        _U4.pack_into(self.buf, _BEAT_AT, 1)

    def mark_shipped(self, ids: list[int], batch: int) -> None:
        """The completed records ``ids`` go to the socket in batch number ``batch``: marked
        before the send (a process that dies in between has them sent again, as one whose
        batch died in its socket), unmarked (``unmark``) if the send fails.

        A loop of word stores, not numpy: on the emitter thread, woken once a tick with its
        caches cold, numpy's few calls took 70-77 us for 150 ids, the loop 18 us."""
        if ids:
            words, mask, shipped, batches = self.words, self.mask, self._shipped, self._batches
            for i in ids:
                at = i & mask
                words[shipped + at] = i
                words[batches + at] = batch
            self._last = max(self._last, max(ids))
            _SHIPPED.pack_into(self.buf, _SHIPPED_AT, self._last, batch)

    def unmark(self, ids: list[int]) -> None:
        """The batch that was to ship ``ids`` could not be sent: they are unshipped again."""
        words, mask, shipped = self.words, self.mask, self._shipped
        for i in ids:
            words[shipped + (i & mask)] = -1

    def remove(self) -> None:
        """The process leaves cleanly: nothing of its ring is left."""
        try:
            os.unlink(self.path)
        except OSError:
            pass
        self._release()

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's ring is not ours to write or remove; let go of
        this process' copies of its mapping and file (and so of its lock)."""
        self._release()

    def _release(self) -> None:
        self.words.release()  # before the mapping it views
        try:
            self.buf.close()  # its own dup of the file goes with it
        except (BufferError, ValueError):
            pass  # a view still held somewhere: the mapping goes with the process
        try:
            os.close(self._fd)
        except OSError:
            pass


@dataclass
class Ring:
    """What a dead process' ring holds, read back."""

    path: Path
    pid: int
    inc: int
    rank: int
    world: int
    created_ns: int
    last_shipped: int                # the highest id the emitter shipped, -1: none
    last_batch: int                  # the number of the last batch it shipped records in
    heartbeat_sent: bool
    records: np.ndarray              # SLOT_DTYPE, valid slots in id order
    # per record, the number of the batch that shipped it complete, 0: none (still running,
    # or ended after the last batch)
    shipped_in: np.ndarray
    sites: dict[int, tuple[str, int]] = field(default_factory=dict)
    groups: dict[int, tuple[str, list[int]]] = field(default_factory=dict)
    identity: tuple | None = None    # (rank, world, backend, device, host, job)

    @property
    def unshipped(self) -> np.ndarray:
        """Bool per record: the viewer never got it complete."""
        return self.shipped_in == 0

    def maybe_lost(self) -> np.ndarray:
        """Bool per record: shipped in one of the last ``RESEND_BATCHES`` batches, which may
        have died in the process' socket with it."""
        return self.shipped_in > max(self.shipped_in.max(initial=0) - RESEND_BATCHES, 0)


def read(path: Path) -> Ring:
    """Read a ring file (its writer dead, or stopped); RingError if it is not one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RingError(exc.errno, f"cannot read {path}: {exc.strerror}") from None
    return parse(data, path)


def read_fd(fd: int, path: Path) -> Ring:
    """Read the ring open at ``fd`` (a harvester's claim): readable even once its process has
    removed the file (a clean exit)."""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0)
    except OSError as exc:
        raise RingError(exc.errno, f"cannot read {path}: {exc.strerror}") from None
    return parse(data, path)


def removed(fd: int) -> bool:
    """Whether the ring open at ``fd`` was removed by its process (it exited cleanly)."""
    try:
        return os.fstat(fd).st_nlink == 0
    except OSError:
        return True


def parse(data: bytes, path: Path = Path("?")) -> Ring:
    if len(data) < HEADER_BYTES:
        raise RingError(0, f"{path}: not a commviz ring (too short)")
    (magic, version, slot_bytes, capacity, meta, pid, inc, rank, world, last, last_batch,
     meta_used, beat, created) = HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION or slot_bytes != SLOT_BYTES:
        raise RingError(0, f"{path}: not a commviz ring of version {VERSION}")
    if len(data) < file_bytes(capacity, meta) or meta_used > meta or capacity & (capacity - 1):
        raise RingError(0, f"{path}: a ring cut short or damaged")
    shipped_at, batches_at, meta_at = _layout(capacity)
    slots = np.frombuffer(data, SLOT_DTYPE, capacity, HEADER_BYTES)
    shipped_ids = np.frombuffer(data, np.int64, capacity, shipped_at)
    shipped_in = np.frombuffer(data, np.int64, capacity, batches_at)
    ids = slots["id"]
    used = (slots["t_start"] > 0) & ((ids & (capacity - 1)) == np.arange(capacity))
    if used.any():
        head = int(ids[used].max())
        used &= ids > head - capacity  # an older record's late end over a newer one's slot
    order = np.argsort(ids[used], kind="stable")
    records = slots[used][order].copy()
    # a slot's mark is its record's only if the id matches (a newer record took the slot);
    # in flight at the end: never shipped, whatever was announced of it (it never ended)
    shipped = (shipped_ids[used][order] == records["id"]) & (records["t_end"] >= 0)
    ring = Ring(path, pid, inc, rank, world, created, last, last_batch, bool(beat), records,
                np.where(shipped, shipped_in[used][order], 0))
    for entry in _entries(data, meta_at, meta_used):
        kind = entry[0] if isinstance(entry, list) and entry else None
        if kind == "s" and len(entry) == 4:
            ring.sites[int(entry[1])] = (str(entry[2]), int(entry[3]))
        elif kind == "g" and len(entry) == 4:
            ring.groups[int(entry[1])] = (str(entry[2]), [int(r) for r in entry[3]])
        elif kind == "i" and len(entry) == 7:
            ring.identity = tuple(entry[1:])
    return ring


def _entries(data: bytes, at: int, used: int) -> Iterator[Any]:
    end, pos = at + used, at
    while pos + 4 <= end:
        (n,) = _U4.unpack_from(data, pos)
        if pos + 4 + n > end:
            return
        try:
            yield msgpack.unpackb(data[pos + 4:pos + 4 + n], raw=False)
        except Exception:  # a damaged entry: the rest may still be read
            pass
        pos += 4 + n


def ring_files(directory: Path, tag: str | None = None) -> list[Path]:
    """The ring files in ``directory`` (of harvester ``tag`` only, if given)."""
    head = PREFIX if tag is None else f"{PREFIX}{tag}-"
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(directory / n for n in names if n.startswith(head) and n.endswith(SUFFIX))


def pid_of(path: Path) -> int | None:
    """The writer's pid, from the file's name (``commviz-ring-TAG-PID-INC.ring``)."""
    try:
        return int(path.name[:-len(SUFFIX)].rsplit("-", 2)[1])
    except (IndexError, ValueError):
        return None


def claim(path: Path) -> int | None:
    """Open ``path`` and share its lock (a harvester watching it): the fd, or None if it is
    gone or being removed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def sweep(directory: Path | None = None) -> list[Path]:
    """Remove the rings nobody holds (their process dead, no harvester watching): left by an
    earlier run that crashed. Returns what was removed."""
    directory = ring_dir() if directory is None else directory
    removed = []
    for path in ring_files(directory):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # held: its process lives, or a harvester is reading it
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed
