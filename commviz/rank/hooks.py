"""Hooks around every torch.distributed communication call.

Two layers, so that every call is seen exactly once:

* the public functions of ``torch.distributed``: torch wraps nearly all of them in its
  ``@_exception_logger`` decorator, whose closure cell holding the real function is pointed
  at a hook. The function objects stay the same, so calls through functions bound before
  ``instrument()`` ran (``from torch.distributed import all_reduce``) go through the hook
  too. A function without that layout (``monitored_barrier``, or any in a torch that
  decorates differently) is replaced by a wrapper in the modules instead;
* the ``ProcessGroup`` methods those functions call, for ``isend``/``irecv`` (left
  unpatched: ``P2POp`` and ``batch_isend_irecv`` check them by identity) and, when some
  function had to be replaced by a wrapper, for every op, to catch calls through a function
  bound before. These find the API function and its arguments in torch's own frames.

DistributedDataParallel runs its gradient all-reduces and broadcasts in C++, below both
layers: ``ddp.py`` brings them into view through DDP's own comm hook API. Functional
collectives (DTensor's) also go below them: ``funcol.py`` wraps their Python entry points.
All of them make their records through ``records.py``; this module installs them all.

A call made by torch itself (a deprecated name forwarding to its new one, the inner
transfers of an object collective, ``send`` calling ``isend``) finds the hook of the call
around it among its frames: it is not counted twice, and inside an object collective it is
a record of its own with ``parent`` set.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import time
import warnings
import weakref
from typing import Any

import torch
import torch.distributed as dist
import typing_extensions
from torch.distributed import c10d_logger
from torch.distributed import distributed_c10d as c10d

from commviz.rank import describe, phases, records
from commviz.rank.describe import REG, GroupInfo
from commviz.rank.emitter import DEFAULT_ADDR, Emitter
from commviz.rank.records import (
    BYTES_IN,
    BYTES_OUT,
    FLAGS,
    KIND,
    T_END,
    TimedWork,
    complete,
    finish,
    resolve_source,
    ring_write,
    site_id,
    start,
    tls,
    track_async,
)
from commviz.wire import protocol, ring
from commviz.wire.protocol import OBJECT_OPS, OP_CODE

# a ring slot's words (wire/ring.py): its id, its t_end
_RING_ID, _RING_T_END = ring.FIRST_WORD + ring.ID_WORD, ring.FIRST_WORD + ring.T_END_WORD
ENV_ADDR = "COMMVIZ_ADDR"
# torch.distributed's own frames, and the decorators it wraps its API with (@deprecated)
_TORCH_FILES = frozenset({c10d.__file__, c10d_logger.__file__, typing_extensions.__file__,
                          warnings.__file__})
_CONTAINERS = OBJECT_OPS | {"batch_isend_irecv"}
_API_NAMES = frozenset(describe.EXTRACTORS) | {"batch_isend_irecv"}
# isend/irecv stay unpatched (identity checks in P2POp); the ProcessGroup layer sees them.
# Names this torch lacks are left out (all_gather_single and reduce_scatter_single came in 2.13).
PATCHED_FUNCTIONS = tuple(n for n in describe.EXTRACTORS
                          if n not in ("isend", "irecv") and hasattr(c10d, n))
# The ProcessGroup methods the API functions call; those this torch lacks are skipped (before
# 2.13 the tensor collectives call _allgather_base, _reduce_scatter_base and alltoall_base).
PG_METHODS = ("allreduce", "allgather", "all_gather_single", "_allgather_base",
              "reduce_scatter", "reduce_scatter_single", "_reduce_scatter_base", "alltoall",
              "all_to_all_single", "alltoall_base", "broadcast", "reduce", "gather", "scatter",
              "send", "recv", "recv_anysource", "barrier", "monitored_barrier")
# what the ProcessGroup layer needs to see when every decorated function is hooked in place:
# isend/irecv, and monitored_barrier bound before instrument() (torch does not decorate it)
PG_METHODS_UNDECORATED = ("send", "recv", "recv_anysource", "monitored_barrier")
# hook functions inside torch's @_exception_logger wrappers (False: always module wrappers)
HOOK_IN_PLACE = True
_NO_CODE = protocol.NO_CODE
_OP_CODE = OP_CODE
_FLAG_GPU_TIME = protocol.FLAG_GPU_TIME
_time_ns = time.time_ns
_getframe = sys._getframe
# The call sites of direct calls (from the program, not from torch), by the caller's code
# object and instruction: looked up first, so that a call from a line seen before needs no
# other test. A caller inside torch (FSDP, DTensor) is put at the program's line that led to
# it, which differs from call to call: such callers are never kept here.
_direct_sites: dict[tuple[int, int], int] = {}


class _State:
    """What instrument() installed, so uninstrument() can put it back."""

    def __init__(self) -> None:
        self.saved_functions: list[tuple[Any, str, Any]] = []
        self.saved_cells: list[tuple[Any, Any]] = []  # (closure cell, the real function)
        self.saved_methods: list[tuple[str, Any]] = []
        self.saved_attributes: list[tuple[Any, str, Any]] = []  # ddp.py, funcol.py


_ACTIVE: _State | None = None
_EMITTER: Emitter | None = None


# ---- public API ------------------------------------------------------------------------
def instrument(addr: str | None = None) -> None:
    """Start reporting every torch.distributed call of this process to the viewer at ``addr``.

    ``addr`` defaults to ``$COMMVIZ_ADDR``, then to the default of ``commviz watch``. Safe to
    call before or after ``init_process_group``, and again after ``uninstrument()``.
    """
    global _ACTIVE, _EMITTER
    if _ACTIVE is not None:
        return
    addr = addr or os.environ.get(ENV_ADDR) or DEFAULT_ADDR
    if _EMITTER is None or _EMITTER.addr != addr:
        if _EMITTER is not None:
            _EMITTER.close()
        _EMITTER = Emitter(addr, _identity, _job_key)
        _EMITTER.pollers.append(REG.forget_destroyed)
        REG.on_new_group = _announce_group
        for info in REG.groups.values():  # tables known from an earlier emitter
            _announce_group(info)
        records.attach(_EMITTER)
    state = _State()
    try:
        _install(state)
    except Exception as exc:  # a torch laid out in a way commviz does not know
        _restore(state)
        print(f"commviz: cannot instrument torch {torch.__version__} ({type(exc).__name__}: "
              f"{exc}); this process runs without commviz", file=sys.stderr, flush=True)
        return
    phases.queue = _EMITTER.phases
    records.active = True
    _ACTIVE = state


def _install(state: _State) -> None:
    """Put every hook in place, noting in ``state`` what each replaced."""
    # torch.nn.parallel and DTensor's collectives: imported on use, and before anything is
    # patched (ddp.py keeps torch's own all_reduce)
    from commviz.rank import ddp, funcol

    for name in PATCHED_FUNCTIONS:
        orig = getattr(c10d, name)
        cell = _logger_cell(orig) if HOOK_IN_PLACE else None
        if cell is not None:
            real = cell.cell_contents
            state.saved_cells.append((cell, real))
            cell.cell_contents = _api_hook(name, real, depth=2)
            level = _stacklevel_cell(real)
            if level is not None:  # deprecated: its warning names the program's line
                state.saved_cells.append((level, level.cell_contents))
                level.cell_contents += 2  # past the hook and torch's @_exception_logger
            continue
        wrapper = _api_hook(name, orig, depth=1)
        wrapper.__commviz_original__ = orig  # type: ignore[attr-defined]
        for module in (c10d, dist):
            state.saved_functions.append((module, name, getattr(module, name)))
            setattr(module, name, wrapper)
    in_place = {n for _, n, _ in state.saved_functions} <= {"monitored_barrier"}
    for name in PG_METHODS_UNDECORATED if in_place else PG_METHODS:
        orig = dist.ProcessGroup.__dict__.get(name)
        if orig is not None:
            state.saved_methods.append((name, orig))
            setattr(dist.ProcessGroup, name, _pg_wrapper(orig))
    ddp.install(state.saved_attributes)
    funcol.install(state.saved_attributes)


def uninstrument() -> None:
    """Put torch.distributed back exactly as it was; records already made are still sent."""
    global _ACTIVE
    state, _ACTIVE = _ACTIVE, None
    if state is None:
        return
    phases.queue = None
    records.active = False
    _restore(state)


def _restore(state: _State) -> None:
    for module, name, orig in reversed(state.saved_functions + state.saved_attributes):
        setattr(module, name, orig)
    for cell, real in state.saved_cells:
        cell.cell_contents = real
    for name, orig in state.saved_methods:
        setattr(dist.ProcessGroup, name, orig)


def flush_and_close() -> None:
    """Send what is pending and stop the emitter (also done automatically at exit)."""
    global _EMITTER
    uninstrument()
    if _EMITTER is not None:
        _EMITTER.close()
        _EMITTER = None
        records.detach()


# ---- identity and tables -----------------------------------------------------------------
# (a weak reference to the default group it was learnt from, the identity)
_ident_cache: tuple[Any, tuple[int, int, str, str]] | None = None
_job = ""  # the job key of the identity in _ident_cache


def _identity() -> tuple[int, int, str, str] | None:
    """(rank, world, backend, device) of this process, known from init_process_group on.

    The last identity is kept after destroy_process_group so the final records still go out.
    """
    global _ident_cache, _job
    world_pg = c10d.GroupMember.WORLD
    if world_pg is not None and (_ident_cache is None or _ident_cache[0]() is not world_pg):
        try:
            ident = (dist.get_rank(), dist.get_world_size(), str(dist.get_backend()),
                     records.device)
        except Exception:
            return None
        _job = _store_key()
        _ident_cache = (weakref.ref(world_pg), ident)
    if _ident_cache is None:
        return None
    cached = _ident_cache[1]
    device = records.device
    return cached if cached[3] == device else (*cached[:3], device)


def _job_key() -> str:
    """The job key learned with the identity (see _store_key); kept, like the identity,
    after destroy_process_group, which may come before the first heartbeat."""
    return _job


def _store_key() -> str:
    """What every rank of this job shares and a job running beside it does not: the address
    of its rendezvous store (a loopback one with where it is meant); "" if not a TCPStore."""
    try:
        store = c10d._get_default_store()
    except Exception:  # no default group
        return ""
    while hasattr(store, "underlying_store"):  # PrefixStore
        store = store.underlying_store
    host, port = getattr(store, "host", None), getattr(store, "port", None)
    if not isinstance(host, str) or not isinstance(port, int):
        return ""
    local = host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.")
    return f"{_loopback_scope()}/{host}:{port}" if local else f"{host}:{port}"


def _loopback_scope() -> str:
    """Where a loopback address names one socket: one running kernel (its boot id, which its
    containers share) and one network namespace; the host name where /proc does not say.
    Not the reported host name: ranks on one machine may report others (COMMVIZ_HOST)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f"{f.read().strip()}/{os.readlink('/proc/self/ns/net')}"
    except OSError:
        return socket.gethostname()


def _announce_group(info: GroupInfo) -> None:
    _identity()  # learn who we are while the process group surely exists
    if _EMITTER is not None:
        _EMITTER.note_group(info.gid, info.name, list(info.ranks))


def _walk(frame: Any) -> tuple[list[Any], str | None, Any]:
    """From ``frame`` outwards through torch's frames: its API frames; the op of the API hook
    around them, if one is (None: the call is not inside a recorded one); and the first
    frame outside torch."""
    apis = []
    while frame is not None:
        code = frame.f_code
        if code is _HOOK_CODE:
            return apis, apis[-1].f_code.co_name if apis else "", frame
        if code.co_filename not in _TORCH_FILES:
            break
        if code.co_name in _API_NAMES:
            apis.append(frame)
        frame = frame.f_back
    return apis, None, frame


def _logger_cell(fn: Any) -> Any:
    """The closure cell holding the real function inside torch's ``@_exception_logger``
    wrapper ``fn``, or None when ``fn`` is not laid out that way."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_filename != c10d_logger.__file__ or code.co_freevars != ("func",):
        return None
    cell = fn.__closure__[0]
    return cell if cell.cell_contents is getattr(fn, "__wrapped__", None) else None


def _stacklevel_cell(fn: Any) -> Any:
    """The closure cell holding the ``stacklevel`` of ``fn`` when ``fn`` is the wrapper that
    ``@deprecated`` (typing_extensions', or warnings' in Python 3.13) puts around a deprecated
    torch function; None otherwise. Its warning is issued that many frames above it: moved
    up past the hook, it names the program's line, not commviz's. Done once, here, so that
    the hook's hot path costs nothing more."""
    code = getattr(fn, "__code__", None)
    if (code is None or code.co_filename not in (typing_extensions.__file__, warnings.__file__)
            or "stacklevel" not in code.co_freevars):
        return None
    cell = fn.__closure__[code.co_freevars.index("stacklevel")]
    return cell if type(cell.cell_contents) is int else None


def _names(inner: str, apis: list[Any]) -> tuple[str, str | None]:
    """The op as the program named it (outermost non-container) and its container, if any."""
    name, parent = inner, None
    for f in apis:
        n = f.f_code.co_name
        if n in _CONTAINERS:
            parent = n
        elif parent is None:
            name = n
    return name, parent


# ---- records ---------------------------------------------------------------------------
def _start_named(op: str, parent: str | None, info: GroupInfo, peer: int, b_in: int,
                 b_out: int, tensor: Any, async_op: bool, site: int) -> list:
    """records.start for the less travelled paths, where the op's name is found at call time."""
    return start(_OP_CODE[op], KIND[op], _NO_CODE if parent is None else _OP_CODE[parent],
                 info, peer, b_in, b_out, tensor, async_op, site)


# ---- the two hook layers ---------------------------------------------------------------
def _nested(name: str, caller: Any) -> tuple[str, str | None, int] | None:
    """Name, parent and call site of a call made by torch itself; None when the call is part
    of one already recorded (a forwarded deprecated name, ``send`` calling ``isend``)."""
    apis, outer, user = _walk(caller)
    if outer is not None:
        return (name, outer, tls.site) if outer in OBJECT_OPS else None
    op, parent = _names(name, apis)
    return op, parent, site_id(user)


def _direct_site(caller: Any) -> int:
    """The call site of a call from ``caller``, a frame outside torch.distributed's own files;
    kept in ``_direct_sites`` when the caller is the program's (records.site_id keeps the
    code object alive, so that its id is not reused)."""
    site = site_id(caller)
    if not caller.f_code.co_filename.startswith(records.TORCH_DIR):
        _direct_sites[(id(caller.f_code), caller.f_lasti)] = site
    return site


def _api_hook(name: str, real: Any, depth: int) -> Any:
    """The hook that records a call of API function ``name`` and runs ``real``; the program's
    frame is ``depth`` frames up (2 inside torch's @_exception_logger wrapper)."""
    extract = describe.EXTRACTORS[name]
    op_code, kind = _OP_CODE[name], KIND[name]
    container = name in OBJECT_OPS
    is_anysource_recv = name == "recv"

    @functools.wraps(real)
    def hook(*args: Any, **kwargs: Any) -> Any:
        if _ACTIVE is None:
            return real(*args, **kwargs)
        caller = _getframe(depth)
        site = _direct_sites.get((id(caller.f_code), caller.f_lasti))
        named = None
        if site is None:
            if caller.f_code.co_filename in _TORCH_FILES:  # called by torch itself
                named = _nested(name, caller)
                if named is None:
                    return real(*args, **kwargs)
            else:
                site = _direct_site(caller)
        try:
            info, peer, b_in, b_out, tensor, async_op = extract(*args, **kwargs)
        except Exception:
            return real(*args, **kwargs)  # a wrong call: let torch report it in its words
        if info is None or not info.member:
            return real(*args, **kwargs)
        if named is None:  # the usual direct call
            op = name
            rec = start(op_code, kind, _NO_CODE, info, peer, b_in, b_out, tensor, async_op,
                        site)
        else:
            op, parent, site = named
            rec = _start_named(op, parent, info, peer, b_in, b_out, tensor, async_op, site)
        if container:
            saved = tls.acc, tls.site
            tls.acc, tls.site = [0, 0], site
        try:
            result = real(*args, **kwargs)  # torch.distributed itself: commviz only records
        except BaseException:
            finish(rec, failed=True)
            raise
        finally:
            if container:
                rec[BYTES_IN], rec[BYTES_OUT] = tls.acc  # type: ignore[misc]
                tls.acc, tls.site = saved
                ring_write(rec)  # its bytes are known now
        if async_op and result is not None:
            return track_async(rec, result, info, op)
        if is_anysource_recv and peer < 0 and type(result) is int:
            resolve_source(rec, result)
        if rec[FLAGS] & _FLAG_GPU_TIME:
            complete(rec)
        else:
            t_end = rec[T_END] = _time_ns()
            words = records.ring_words
            if words is not None:  # records.ring_end, inlined: a call costs as much again
                at = (rec[0] & records.ring_mask) << 3
                try:
                    if words[_RING_ID + at] == rec[0]:
                        words[_RING_T_END + at] = t_end
                except ValueError:  # the ring closed meanwhile
                    pass
        return result

    return hook


# the code every API hook's frames run: how a frame is known to be inside a recorded call
_HOOK_CODE = next(c for c in _api_hook.__code__.co_consts if getattr(c, "co_name", "") == "hook")


def _pg_wrapper(orig: Any) -> Any:
    def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _ACTIVE is None or tls.current is not None:  # inside a functional collective
            return orig(self, *args, **kwargs)
        apis, outer, user = _walk(_getframe(1))
        if not apis or (outer is not None and outer not in OBJECT_OPS):
            # a direct ProcessGroup call from user code (no API to describe it by), or part
            # of an op an API hook records
            return orig(self, *args, **kwargs)
        inner = apis[0]
        try:
            info, peer, b_in, b_out, tensor, async_op = describe.from_locals(
                inner.f_code.co_name, inner.f_locals)
        except Exception:
            return orig(self, *args, **kwargs)
        if info is None or not info.member:
            return orig(self, *args, **kwargs)
        op, parent = _names(inner.f_code.co_name, apis)
        parent = outer or parent
        op_frame = next(f for f in apis if f.f_code.co_name == op)
        async_op = (op in ("isend", "irecv") or parent == "batch_isend_irecv"
                    or bool(op_frame.f_locals.get("async_op", False)))
        site = tls.site if outer is not None else site_id(user)
        rec = _start_named(op, parent, info, peer, b_in, b_out, tensor, async_op, site)
        try:
            work = orig(self, *args, **kwargs)
        except BaseException:
            finish(rec, failed=True)
            raise
        if work is None:
            finish(rec)
            return work
        if async_op and op not in protocol.P2P:
            return track_async(rec, work, info, op)
        return TimedWork(work, rec, info)

    functools.update_wrapper(hook, orig, assigned=("__name__", "__doc__"), updated=())
    return hook
