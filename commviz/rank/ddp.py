"""DistributedDataParallel's communication, which its C++ reducer runs below the hooks.

DDP sums gradients bucket by bucket from C++, through no Python function the hooks could
wrap, unless a *comm hook* is registered: then the reducer calls it for every bucket. So,
while instrumented:

* a DDP that has no comm hook at its first forward pass gets one that does exactly what the
  reducer does by itself (scale each gradient by 1/world as it enters the bucket, then sum
  the bucket), and records the bucket's all_reduce, flagged as DDP's;
* a comm hook the program registers is wrapped, so that what it communicates is flagged;
* ``dist._broadcast_coalesced`` (DDP's construction-time sync of parameters and buffers,
  its per-forward buffer broadcasts, FSDP1's ``sync_module_states``) is recorded as one
  broadcast per call, flagged as DDP's when DDP made it.

What stays out of sight (the reducer's own small collectives) is listed in docs/coverage.md.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
from torch.nn.parallel import DistributedDataParallel

from commviz.rank import describe, records
from commviz.rank.records import COLLECTIVE, complete, finish, flag, site_id, start
from commviz.wire import protocol

# Frames of torch and of commviz are not the program's line: the site is found outside them;
# but a demo is a program, and installed (not editable) it lies inside commviz's package
_SKIP_DIRS = (os.path.dirname(torch.__file__) + os.sep,
              os.path.dirname(os.path.dirname(__file__)) + os.sep)
_DEMOS_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "demos") + os.sep
_BROADCAST = protocol.OP_CODE["broadcast"]
_ALL_REDUCE = protocol.OP_CODE["all_reduce"]
_DDP_FILE = sys.modules[DistributedDataParallel.__module__].__file__
# torch's own all_reduce, for the records made here on DDP's behalf; and the ProcessGroup
# method it calls, which DDP's own reduction calls from C++ with the same options (a sum):
# called directly, a bucket skips the Python API's checks (about 10 us). Taken as this
# module is imported, which hooks.instrument() does before it patches anything.
_all_reduce = c10d.all_reduce
_pg_allreduce = dist.ProcessGroup.__dict__["allreduce"]


def install(saved: list[tuple[Any, str, Any]]) -> None:
    """Patch DDP and ``dist._broadcast_coalesced``, noting in ``saved`` what to restore."""
    for owner, name, wrap in ((DistributedDataParallel, "__init__", _init_wrapper),
                              (DistributedDataParallel, "register_comm_hook", _register_wrapper),
                              (dist, "_broadcast_coalesced", _broadcast_wrapper)):
        orig = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        saved.append((owner, name, orig))
        setattr(owner, name, wrap(orig))


def _program_frame(frame: Any) -> Any:
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP_DIRS) \
            and not frame.f_code.co_filename.startswith(_DEMOS_DIR):
        frame = frame.f_back
    return frame


def _called_by_ddp(frame: Any) -> bool:
    while frame is not None:
        if frame.f_code.co_filename == _DDP_FILE:
            return True
        frame = frame.f_back
    return False


# ---- gradient buckets -----------------------------------------------------------------
class _Default:
    """State of the stand-in for DDP's own reduction (the reducer keeps a reference)."""

    __slots__ = ("group", "scale", "site", "hook", "hook_state", "__weakref__")

    def __init__(self, group: Any, site: int) -> None:
        self.group = group
        self.scale = 1.0 / group.size()
        self.site = site  # where the DDP model was built: the fallback call site
        self.hook: Any = None  # a comm hook the program registered after the stand-in
        self.hook_state: object = None


# the DDP models whose reducer holds the stand-in, which the program's hook may replace
_stand_ins: weakref.WeakKeyDictionary[Any, _Default] = weakref.WeakKeyDictionary()


def _default_hook(state: _Default, bucket: Any) -> Any:
    """DDP's built-in reduction, seen: the same arithmetic, bit for bit.

    Without a hook the reducer copies each gradient into the bucket multiplied by 1/world
    (``mul_out`` with a wrapped double scalar; with ``gradient_as_bucket_view`` and a
    gradient already in the bucket it divides in place instead). With a hook it copies
    exactly and leaves scaling to the hook: ``mul_`` by the same 1/world reproduces it.
    """
    if state.hook is not None:
        return state.hook(state.hook_state, bucket)
    buffer = bucket.buffer()
    buffer.mul_(state.scale)
    frame = _program_frame(sys._getframe(1))  # loss.backward(), where autograd runs here
    site = site_id(frame) if frame is not None else state.site
    return _bucket_all_reduce(buffer, state.group, site)


def _bucket_all_reduce(tensor: Any, group: Any, site: int) -> Any:
    """Sum one DDP gradient bucket across ``group``, as DDP's reducer does, and record it.

    Returns the future DDP expects from a comm hook (its value: the bucket). The record is
    timed by the future, so it ends when gloo/NCCL has finished, not when backward does.
    """
    info = describe.group_info(group) if records.active else None
    if info is None or not info.member or tensor.is_complex():  # complex: the API's view
        return _all_reduce(tensor, group=group, async_op=True).get_future().then(_bucket)
    nb = tensor.nbytes
    rec = start(_ALL_REDUCE, COLLECTIVE, protocol.NO_CODE, info, -1, nb, nb, tensor, True,
                site)
    flag(rec, protocol.FLAG_DDP)
    try:
        work = _pg_allreduce(group, [tensor])  # not the wrapped method: recorded once
    except BaseException:
        finish(rec, failed=True)
        raise
    return work.get_future().then(functools.partial(_bucket_done, rec))


def _bucket(fut: Any) -> Any:
    return fut.value()[0]


def _bucket_done(rec: list, fut: Any) -> Any:
    try:
        value = fut.value()[0]
    except BaseException:
        finish(rec, failed=True)
        raise
    complete(rec)
    return value


def _exact_with_default_hook(ddp: Any) -> bool:
    """Whether the stand-in reproduces the reducer's arithmetic exactly for this model.

    With ``gradient_as_bucket_view`` a gradient kept between steps is divided in place by
    the reducer, one computed afresh is multiplied by 1/world: both agree with ``mul_`` only
    when 1/world is exact, i.e. for a power-of-two world size.
    """
    size = ddp.process_group.size()
    return not ddp.gradient_as_bucket_view or size & (size - 1) == 0


def _init_wrapper(orig: Any) -> Any:
    @functools.wraps(orig)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        frame = _program_frame(sys._getframe(1))
        site = site_id(frame)
        orig(self, *args, **kwargs)
        if getattr(self, "reducer", None) is None or describe.group_info(
                self.process_group) is None:
            return  # nothing to reduce, or not a group commviz records
        if self._use_python_reducer:
            _note_unseen("DDP runs its Python reducer (compiled autograd)")
            return
        if not _exact_with_default_hook(self):
            _note_unseen(f"gradient_as_bucket_view=True on {self.process_group.size()} ranks, "
                         "not a power of two")
            return
        handle = None

        def first_forward(module: Any, args: Any) -> None:
            # Installed this late so that a comm hook registered before (a built-in C++
            # one included) is left to DDP; one registered later replaces the stand-in.
            if not records.active:
                return
            handle.remove()
            hook_name = module._get_ddp_logging_data().get("comm_hook")
            if not hook_name:
                stand_in = _stand_ins[module] = _Default(module.process_group, site)
                dist._register_comm_hook(module.reducer, stand_in, _default_hook)
            elif not any(name == hook_name for name in _python_hook_names(module)):
                _note_unseen(f"DDP runs the built-in comm hook {hook_name}")

        handle = self.register_forward_pre_hook(first_forward)

    return __init__


def _python_hook_names(module: Any) -> list[str]:
    return [hook.__qualname__ for hook, _ in getattr(module, "_comm_hooks", [])]


_noted: set[str] = set()


def _note_unseen(reason: str) -> None:
    """Say once, from the first rank only, that a DDP model's gradient all-reduces stay out
    of sight and why: a job whose training traffic silently vanished would mislead."""
    if reason in _noted or describe.REG.me > 0:
        return
    _noted.add(reason)
    print(f"commviz: this DDP model's gradient all-reduces are not seen: {reason} "
          "(docs/coverage.md says how to see them)", file=sys.stderr, flush=True)


def _register_wrapper(orig: Any) -> Any:
    @functools.wraps(orig)
    def register_comm_hook(self: Any, state: object, hook: Any) -> None:
        stand_in = _stand_ins.pop(self, None)
        if stand_in is None:
            return orig(self, state, _flagged(hook))
        # The reducer takes one hook and holds the stand-in: the program's hook goes inside
        # it, after what DDP's register_comm_hook does besides registering.
        self._check_comm_hook(hook)
        self.logger._set_comm_hook_name(hook.__qualname__)
        self._comm_hooks.append((hook, state))
        stand_in.hook, stand_in.hook_state = _flagged(hook), state
        return None

    return register_comm_hook


def _flagged(hook: Any) -> Any:
    """The program's comm hook, with what it communicates flagged as DDP's."""

    @functools.wraps(hook)  # DDP checks the hook's signature and logs its name
    def ddp_comm_hook(state: object, bucket: Any) -> Any:
        tid = threading.get_ident()
        records.in_ddp_hook.add(tid)
        try:
            return hook(state, bucket)
        finally:
            records.in_ddp_hook.discard(tid)

    return ddp_comm_hook


# ---- construction-time broadcasts -------------------------------------------------------
def _broadcast_wrapper(orig: Any) -> Any:
    @functools.wraps(orig)
    def _broadcast_coalesced(process_group: Any, tensors: Any, buffer_size: int,
                             src: int = 0) -> None:
        info = describe.group_info(process_group) if records.active else None
        if info is None or not info.member:
            return orig(process_group, tensors, buffer_size, src)
        nb = sum(t.nbytes for t in tensors)
        root = info.ranks[src] if 0 <= src < len(info.ranks) else -1
        mine = root == describe.REG.me
        caller = sys._getframe(1)
        frame = _program_frame(caller)
        rec = start(_BROADCAST, COLLECTIVE, protocol.NO_CODE, info, root,
                    nb if mine else 0, 0 if mine else nb,
                    tensors[0] if len(tensors) else None, False, site_id(frame))
        if _called_by_ddp(caller):  # FSDP1's sync_module_states broadcasts this way too
            flag(rec, protocol.FLAG_DDP)
        try:
            result = orig(process_group, tensors, buffer_size, src)
        except BaseException:
            finish(rec, failed=True)
            raise
        complete(rec)
        return result

    return _broadcast_coalesced
