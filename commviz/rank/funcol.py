"""Functional collectives (``torch.distributed._functional_collectives``), which DTensor uses.

They hand their work to C++ ops that reach the ProcessGroup below the other hooks, and
return at once: eagerly, an ``AsyncCollectiveTensor`` that waits (``wait_tensor``) when its
value is first needed. So a call is recorded when it is made, ends when the program first
waits for its result (as p2p work without a future does), and is marked unwaited if its
result is dropped first. While torch.compile traces, nothing is recorded.
"""

from __future__ import annotations

import functools
import sys
import weakref
from typing import Any

import torch.distributed._functional_collectives as fc
from torch.distributed import distributed_c10d as c10d

from commviz.rank import describe, records
from commviz.rank.records import (
    COLLECTIVE,
    FLAGS,
    T_END,
    complete,
    finish,
    site_id,
    start,
    tls,
    unwaited,
)
from commviz.wire import protocol


# Extractors take a call's arguments and give (group, tag, tensor, bytes_in, bytes_out, the
# root's group rank or None); bytes_out -1: bytes_in times the group size, -2: divided by it.
def _all_reduce(self: Any, reduceOp: str, group: Any, tag: str = "") -> tuple:  # noqa: N803
    return group, tag, self, self.nbytes, self.nbytes, None


def _all_gather(self: Any, gather_dim: int, group: Any, tag: str = "") -> tuple:
    return group, tag, self, self.nbytes, -1, None


def _reduce_scatter(self: Any, reduceOp: str, scatter_dim: int, group: Any,  # noqa: N803
                    tag: str = "") -> tuple:
    return group, tag, self, self.nbytes, -2, None


def _all_to_all(self: Any, output_split_sizes: Any, input_split_sizes: Any, group: Any,
                tag: str = "") -> tuple:
    out = self.nbytes
    if output_split_sizes is not None and self.shape[0]:
        out = sum(output_split_sizes) * (self.nbytes // self.shape[0])
    return group, tag, self, self.nbytes, out, None


def _broadcast(self: Any, src: int, group: Any, tag: str = "") -> tuple:
    return group, tag, self, self.nbytes, self.nbytes, src


FUNCTIONS = {  # name in torch -> (name recorded, extractor)
    "all_reduce": ("all_reduce", _all_reduce),
    "all_gather_single": ("all_gather_single", _all_gather),
    "all_gather_tensor": ("all_gather_single", _all_gather),
    "reduce_scatter_single": ("reduce_scatter_single", _reduce_scatter),
    "reduce_scatter_tensor": ("reduce_scatter_single", _reduce_scatter),
    "all_to_all_single": ("all_to_all_single", _all_to_all),
    "broadcast": ("broadcast", _broadcast),
}
# a group, mesh or rank list -> a ProcessGroup or a group name (before torch 2.13: the name)
_resolve_group = getattr(fc, "_resolve_group", None) or fc._resolve_group_name
# results not waited for yet, by the address of their storage (views of a result share it)
_pending: dict[int, list] = {}


def install(saved: list[tuple[Any, str, Any]]) -> None:
    """Patch the functional collectives and their ``wait_tensor``, noting in ``saved`` what
    to restore."""
    saved.append((fc, "wait_tensor", fc.wait_tensor))
    fc.wait_tensor = _wait_wrapper(fc.wait_tensor)
    for name, (op, extract) in FUNCTIONS.items():
        orig = getattr(fc, name, None)
        if orig is None:  # a name this torch does not have yet
            continue
        saved.append((fc, name, orig))
        setattr(fc, name, _wrapper(orig, op, extract))


def _wrapper(orig: Any, op: str, extract: Any) -> Any:
    op_code = protocol.OP_CODE[op]

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if fc._are_we_tracing() or not records.active:
            return orig(*args, **kwargs)  # compiling (first: dynamo must see nothing else)
        if tls.current is not None:
            return orig(*args, **kwargs)  # inside another recorded op
        try:
            group, tag, tensor, b_in, b_out, src = extract(*args, **kwargs)
            pg = _resolve_group(group, tag)
            if not isinstance(pg, c10d.ProcessGroup):
                pg = c10d._resolve_process_group(pg)
            info = describe.group_info(pg)
        except Exception:
            return orig(*args, **kwargs)  # a wrong call: let torch report it in its words
        if info is None or not info.member:
            return orig(*args, **kwargs)
        n = len(info.ranks)
        b_out = b_in * n if b_out == -1 else b_in // n if b_out == -2 else b_out
        root = -1 if src is None else info.ranks[src] if 0 <= src < n else -1
        if root >= 0 and root == describe.REG.me:
            b_out = 0
        elif root >= 0:
            b_in = 0
        frame = sys._getframe(1)
        rec = start(op_code, COLLECTIVE, protocol.NO_CODE, info, root, b_in, b_out, tensor,
                    True, site_id(frame))
        tls.current = op
        try:
            result = orig(*args, **kwargs)
        except BaseException:
            finish(rec, failed=True)
            raise
        finally:
            tls.current = None
        elem = getattr(result, "elem", None) if isinstance(result, fc.AsyncCollectiveTensor) \
            else None
        if elem is None:  # waited for inside the call
            complete(rec)
        else:
            key = elem.untyped_storage().data_ptr()
            _pending[key] = rec
            weakref.finalize(elem, _dropped, key, rec)
        return result

    return wrapper


def _wait_wrapper(orig: Any) -> Any:
    @functools.wraps(orig)
    def wait_tensor(tensor: Any) -> Any:
        result = orig(tensor)
        if _pending:
            rec = _pending.pop(tensor.untyped_storage().data_ptr(), None)
            if rec is not None:
                complete(rec)
        return result

    return wait_tensor


def _dropped(key: int, rec: list) -> None:
    """A result freed before anyone waited: the record ends now, flagged unwaited."""
    if _pending.get(key) is rec:
        del _pending[key]
    elif rec[FLAGS] & protocol.FLAG_GPU_TIME:
        return  # waited for: its t_end comes from a CUDA event
    if rec[T_END] < 0:
        unwaited(rec)
