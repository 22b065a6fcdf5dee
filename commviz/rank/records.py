"""The record of one call, from its start to its end, and the call sites records refer to.

A record is a plain list with one field per column of an ``ops`` batch, in
``protocol.COLUMNS`` order: ``start`` makes it with one list display and queues it, its end
is one store, and the emitter thread transposes a batch of records straight into columns.
The order is checked against the protocol when this module is imported. The same fields are
packed into the record's slot of the process' shared-memory ring (``wire/ring.py``) when it
starts and when it ends (one ``struct.pack_into`` each), so that a process killed before its
emitter's next tick still leaves them for the node's harvester.

The hooks (hooks.py, ddp.py, funcol.py) start and end records here. The state below is set
by hooks.py as it instruments (``active``, the emitter) and by ``start`` itself (the device,
the GPU timer). It is module-level on purpose: each hooked call reads these names as
globals, where an attribute lookup or a call more per record would show in its cost.

Torch-free (torch's tensors and groups are only handed in), so that the emitter, which
reads the layout here, is too.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import operator
import os
import struct
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from commviz.wire import protocol, ring
from commviz.wire.protocol import FLAG_ASYNC, FLAG_CUDA, FLAG_FAILED, FLAG_UNWAITED

if TYPE_CHECKING:
    from commviz.rank.describe import GroupInfo
    from commviz.rank.emitter import Emitter

# The fields of a record in the order ``start`` builds it.
FIELDS = ("id", "op", "parent", "gid", "seq", "peer", "bytes_in", "bytes_out", "dtype",
          "flags", "t_start", "t_end", "site")


def check_layout(columns: Mapping[str, str]) -> None:
    """Raise RuntimeError unless ``columns`` (the protocol's) are the record's fields, in
    order: the emitter turns the n-th field into the n-th column."""
    if tuple(columns) != FIELDS:
        raise RuntimeError(
            f"commviz.wire.protocol.COLUMNS lists {tuple(columns)}, but a record "
            f"(commviz/rank/records.py) is built as {FIELDS}: change both together")


check_layout(protocol.COLUMNS)
_INDEX = {name: i for i, name in enumerate(protocol.COLUMNS)}
(ID, OP, PARENT, GID, SEQ, PEER, BYTES_IN, BYTES_OUT, DTYPE, FLAGS, T_START, T_END,
 SITE) = (_INDEX[name] for name in FIELDS)

# What a call's sequence number counts: calls on its group, or transfers to or from its peer.
COLLECTIVE, SEND, RECV = 0, 1, 2
KIND = {name: SEND if name in protocol.SENDS else RECV if name in protocol.RECVS
        else COLLECTIVE for name in protocol.OPS}

_NO_CODE = protocol.NO_CODE
_FLAG_DDP = protocol.FLAG_DDP
_FLAG_GPU_TIME = protocol.FLAG_GPU_TIME
_RECV_CODES = frozenset(protocol.OP_CODE[n] for n in protocol.RECVS)
_time_ns = time.time_ns
_get_ident = threading.get_ident
_slot_pack = ring.SLOT.pack_into
_slot_fields = operator.itemgetter(*(_INDEX[name] for name in ring.SLOT_FIELDS))
_SLOTS_AT = ring.HEADER_BYTES
_SLOT_SHIFT = ring.SLOT_BYTES.bit_length() - 1
assert 1 << _SLOT_SHIFT == ring.SLOT_BYTES and ring.WORDS_PER_SLOT == 8
_FIRST_WORD, _T_END_WORD = ring.FIRST_WORD, ring.FIRST_WORD + ring.T_END_WORD

# ---- state, set by hooks.py ------------------------------------------------------------
# Whether hooks are installed: what outlives an uninstrument() (a DDP comm hook, a function
# bound while instrumented) records nothing while this is False.
active = False
push: Any = None  # the emitter queue's append: the one call start() makes into it
emitter: Emitter | None = None
device = "cpu"    # this rank's device, "cuda:N" from the first CUDA tensor on
gpu_timer: Any = None  # cuda_timing.GpuTimer, once a CUDA tensor has gone through NCCL
# threads running a DDP comm hook: what they communicate is flagged as DDP's
in_ddp_hook: set[int] = set()
# this process' shared-memory ring (wire/ring.py), set by its emitter: each record is packed
# into its slot when it starts and when it ends, so that it outlives the process; None: none
ring_buf: Any = None
ring_mask = 0
ring_words: Any = None  # the same ring as int64 words (RingWriter.words)


class ThreadState(threading.local):
    current: str | None = None   # the functional collective running on this thread (funcol)
    acc: list[int] | None = None  # bytes of an object collective's inner transfers
    site: int = 0                 # call site of that object collective


tls = ThreadState()
_ids = itertools.count()
_p2p_sent: dict[int, int] = {}
_p2p_received: dict[int, int] = {}
_dtype_codes: dict[Any, int] = {}  # torch.dtype -> DTYPES code


def attach(em: Emitter) -> None:
    """Queue records on ``em`` from now on, and tell it every call site and GPU timer."""
    global emitter, push
    emitter, push = em, em.queue.append
    for key, sid in _sites.items():
        em.note_site(sid, key)
    use_ring(em.ring)
    if gpu_timer is not None:
        em.pollers.append(gpu_timer.poll)


def detach() -> None:
    """The emitter is closed: call sites found from now on wait for the next one."""
    global emitter
    emitter = None
    use_ring(None)


def use_ring(writer: Any) -> None:
    """Pack records into ``writer``'s ring (a wire.ring.RingWriter) from now on; None: stop."""
    global ring_buf, ring_mask, ring_words
    ring_buf, ring_mask, ring_words = ((None, 0, None) if writer is None
                                       else (writer.buf, writer.mask, writer.words))


def ring_end(rec: list) -> None:
    """``rec`` ended and only its t_end changed (the usual end): store that in its slot.
    Not when a newer record has taken the slot (the ring went round while this op ran): the
    newer one is what a harvester needs."""
    words = ring_words
    if words is not None:
        at = (rec[0] & ring_mask) << 3
        try:
            if words[_FIRST_WORD + at] == rec[0]:
                words[_T_END_WORD + at] = rec[T_END]
        except (ValueError, TypeError):  # the ring closed meanwhile
            pass


def ring_write(rec: list) -> None:
    """Pack all of ``rec`` into its slot again: more than its t_end changed (its flags, its
    source, an object collective's bytes); as ``ring_end`` otherwise. Never raises into the
    program: a ring being closed, or a value out of its type's range, leaves the slot as it
    was."""
    words = ring_words
    if words is not None:
        slot = rec[0] & ring_mask
        try:
            if words[_FIRST_WORD + (slot << 3)] == rec[0]:
                _slot_pack(ring_buf, _SLOTS_AT + (slot << _SLOT_SHIFT), *_slot_fields(rec))
        except (struct.error, ValueError, TypeError):
            pass


def flag(rec: list, bits: int) -> None:
    """Set ``bits`` in a started record's flags, and in its ring slot: a harvester recovers the
    record as the viewer would have had it."""
    rec[FLAGS] |= bits
    ring_write(rec)


def _after_fork_in_child() -> None:
    """A forked child's first record goes through Emitter.push, which starts its sender
    (and its own ring: the parent's mapping is shared, and not the child's to write)."""
    global push
    use_ring(None)
    if emitter is not None:
        push = _push_after_fork


def _push_after_fork(rec: list) -> None:
    global push
    if emitter is not None:
        emitter.push(rec)
        push = emitter.queue.append


os.register_at_fork(after_in_child=_after_fork_in_child)


# ---- making and ending records -----------------------------------------------------------
def start(op_code: int, kind: int, parent_code: int, info: GroupInfo, peer: int, b_in: int,
          b_out: int, tensor: Any, async_op: bool, site: int) -> list:
    """Make and queue the record of a call that is starting: the hot path, kept lean."""
    global device
    if kind == COLLECTIVE:
        info.seq += 1
        seq = info.seq
    elif peer < 0:
        seq = 0  # receive from any source: numbered once the source is known
    elif kind == SEND:
        seq = _p2p_sent[peer] = _p2p_sent.get(peer, 0) + 1
    else:
        seq = _p2p_received[peer] = _p2p_received.get(peer, 0) + 1
    flags = FLAG_ASYNC if async_op else 0
    if in_ddp_hook and _get_ident() in in_ddp_hook:
        flags |= _FLAG_DDP
    if tensor is None:
        dtype = _NO_CODE
    else:
        dtype = _dtype_codes.get(tensor.dtype)
        if dtype is None:
            dtype = _dtype_code(tensor.dtype)
        if tensor.is_cuda:
            flags |= FLAG_CUDA
            if device == "cpu":
                device = f"cuda:{tensor.device.index}"
            if info.nccl:
                flags |= _FLAG_GPU_TIME
                if gpu_timer is None:
                    _start_gpu_timer()
    if parent_code != _NO_CODE:
        acc = tls.acc
        if acc is not None:
            acc[0] += b_in
            acc[1] += b_out
    rid, t0 = next(_ids), _time_ns()
    rec = [rid, op_code, parent_code, info.gid, seq, peer, b_in, b_out, dtype, flags, t0, -1,
           site]
    push(rec)
    buf = ring_buf
    if buf is not None:  # its slot, in ring.SLOT_FIELDS order
        try:
            _slot_pack(buf, _SLOTS_AT + ((rid & ring_mask) << _SLOT_SHIFT), rid, seq, b_in,
                       b_out, t0, -1, info.gid, peer, site, op_code, parent_code, dtype, flags)
        except (struct.error, ValueError, TypeError):
            pass
    return rec


def _dtype_code(dtype: Any) -> int:
    """The DTYPES code of a torch dtype, by its name (learnt once per dtype)."""
    name = str(dtype).removeprefix("torch.")
    code = _dtype_codes[dtype] = protocol.DTYPE_CODE.get(name, protocol.DTYPE_CODE["other"])
    return code


def _start_gpu_timer() -> None:
    """Time ops on CUDA tensors through NCCL by CUDA events, polled on the emitter thread."""
    global gpu_timer
    import torch

    from commviz.rank.cuda_timing import GpuTimer

    gpu_timer = GpuTimer(torch.cuda)
    if emitter is not None:
        emitter.pollers.append(gpu_timer.poll)


def resolve_source(rec: list, source: int) -> None:
    """Number a receive-from-any-source once its source (a global rank) is known."""
    if rec[PEER] < 0 and source >= 0:
        rec[PEER] = source
        rec[SEQ] = _p2p_received[source] = _p2p_received.get(source, 0) + 1
        ring_write(rec)


def complete(rec: list) -> None:
    """A successful end: ops on CUDA tensors through NCCL end when a CUDA event recorded now
    has run on the GPU (cuda_timing, t_end set later), others now."""
    if rec[FLAGS] & _FLAG_GPU_TIME and gpu_timer is not None:
        gpu_timer.track(rec, _FLAG_GPU_TIME)  # its ring slot stays in flight (see ring_write)
    else:
        rec[T_END] = _time_ns()
        ring_end(rec)


def finish(rec: list, failed: bool = False) -> None:
    if failed:
        rec[FLAGS] = (rec[FLAGS] | FLAG_FAILED) & ~_FLAG_GPU_TIME
        rec[T_END] = _time_ns()
        ring_write(rec)
    else:
        complete(rec)


def unwaited(rec: list) -> None:
    """Async work dropped before anyone observed its end: it ends now, flagged so."""
    rec[FLAGS] = (rec[FLAGS] | FLAG_UNWAITED) & ~_FLAG_GPU_TIME
    rec[T_END] = _time_ns()
    ring_write(rec)


def _on_future(rec: list, fut: Any) -> None:
    try:
        fut.value()
        failed = False
    except Exception:
        failed = True
    finish(rec, failed)


def track_async(rec: list, work: Any, info: GroupInfo, name: str) -> Any:
    """Time async work: by its future where the backend has one, else by wrapping wait()."""
    if name not in info.no_future and name not in protocol.P2P:
        try:
            fut = work.get_future()
        except RuntimeError:
            info.no_future.add(name)
        else:
            fut.then(functools.partial(_on_future, rec))
            return work
    return TimedWork(work, rec, info)


class TimedWork:
    """A Work whose completion is observed when the program waits on it (or polls it).

    Every other attribute is the real Work's. It never waits by itself: a second wait() on
    point-to-point work hangs.
    """

    __slots__ = ("_work", "_rec", "_info", "_ended")

    def __init__(self, work: Any, rec: list, info: GroupInfo) -> None:
        self._work, self._rec, self._info = work, rec, info
        self._ended = False

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        try:
            result = self._work.wait(*args, **kwargs)
        except BaseException:
            self._done(failed=True)
            raise
        self._done()
        return result

    def is_completed(self) -> bool:
        done = self._work.is_completed()
        if done:
            self._done()
        return done

    def _done(self, failed: bool = False) -> None:
        rec = self._rec
        if self._ended:  # its t_end may still be pending on a CUDA event
            return
        self._ended = True
        if rec[PEER] < 0 and rec[OP] in _RECV_CODES and not failed:
            try:
                resolve_source(rec, self._info.ranks[self._work._source_rank()])
            except Exception:  # the backend cannot say: the source stays unknown (-1)
                pass
        finish(rec, failed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)

    def __del__(self) -> None:
        if not self._ended:
            unwaited(self._rec)


# ---- call sites --------------------------------------------------------------------------
# torch's own files, found without importing torch (see the module's docstring)
TORCH_DIR = os.path.dirname(importlib.util.find_spec("torch").origin) + os.sep
_sites: dict[tuple[str, int], int] = {}  # (file, line) -> site id
# call sites by (id of the code object, instruction): a code object's own hash is computed
# afresh on every use (hundreds of ns); the code objects are kept so that ids stay unique
sites_by_instr: dict[tuple[int, int], int] = {}
_site_codes: dict[int, Any] = {}


def site_id(frame: Any) -> int:
    """The call site of a frame, keyed by code object and instruction (cheaper than f_lineno).

    A call made by torch's own code (FSDP, DTensor) is put at the program's line that led to
    it, the first frame outside torch, when the stack reaches one: that line is what a reader
    can act on. Such calls miss the hot path's cache and walk every time; they are few and big.
    """
    if frame is None:
        return _site_id_of(("<unknown>", 0))
    if frame.f_code.co_filename.startswith(TORCH_DIR):
        outer = frame.f_back
        while outer is not None and outer.f_code.co_filename.startswith(TORCH_DIR):
            outer = outer.f_back
        frame = outer or frame
    code = frame.f_code
    key = (id(code), frame.f_lasti)
    sid = sites_by_instr.get(key)
    if sid is None:
        _site_codes[id(code)] = code
        sid = sites_by_instr[key] = _site_id_of((code.co_filename, frame.f_lineno))
    return sid


def _site_id_of(key: tuple[str, int]) -> int:
    sid = _sites.get(key)
    if sid is None:
        sid = _sites[key] = len(_sites)
        if emitter is not None:
            emitter.note_site(sid, key)
    return sid
