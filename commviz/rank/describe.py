"""What one torch.distributed call means: its group, peer, bytes read and written, dtype.

One small extractor per API function, with the same parameter names as torch 2.13, so a
hook can call it with the call's own arguments (or with the locals of a torch frame when
the call was made through a function bound before ``instrument()``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d


@dataclass(slots=True)
class GroupInfo:
    """A process group as the protocol names it: global ranks plus this rank's counters."""

    gid: int
    name: str
    ranks: tuple[int, ...]
    member: bool
    seq: int = 0
    no_future: set[str] = field(default_factory=set)  # ops whose Work has no future here
    nccl: bool = False  # CUDA tensors go through NCCL in this group (cuda_timing times them)
    torch_owned: bool = False  # in torch's registry of groups (not one the program built alone)


class Registry:
    """The process groups this process has used, by ProcessGroup object, and its own rank."""

    def __init__(self) -> None:
        self.groups: dict[Any, GroupInfo] = {}
        self.made = 0  # group ids handed out: never reused, even for a group forgotten
        self.me = -1
        self.on_new_group: Callable[[GroupInfo], None] = lambda info: None

    def group(self, pg: Any) -> GroupInfo | None:
        if pg is None:
            pg = c10d._world._default_pg
        info = self.groups.get(pg)
        if info is None:
            if not isinstance(pg, dist.ProcessGroup):
                return None  # NON_GROUP_MEMBER or a backend-level object: not ours to record
            self.me = dist.get_rank()
            ranks = tuple(dist.get_process_group_ranks(pg))
            info = GroupInfo(self.made, pg.group_name, ranks, self.me in ranks,
                             nccl=_uses_nccl(pg), torch_owned=pg in c10d._world.pg_map)
            self.made += 1
            self.groups[pg] = info
            self.on_new_group(info)
        return info

    def forget_destroyed(self) -> None:
        """Let go of the groups ``destroy_process_group`` has removed from torch's registry,
        so that commviz is not what keeps them (and their communicators) alive."""
        live = c10d._world.pg_map
        for pg in [pg for pg, info in list(self.groups.items())
                   if info.torch_owned and pg not in live]:
            del self.groups[pg]


def _uses_nccl(pg: Any) -> bool:
    """The group's backend for CUDA tensors is NCCL ("nccl", or "cpu:gloo,cuda:nccl")."""
    try:
        return "nccl" in str(dist.get_backend(pg))
    except Exception:
        return False


REG = Registry()
_groups = REG.groups


def group_info(pg: Any) -> GroupInfo | None:
    """The GroupInfo of ``pg`` (None: the default group). Runs on every call, so it reads
    torch's registry of the default group directly rather than through its accessors."""
    info = _groups.get(c10d._world._default_pg if pg is None else pg)
    return info if info is not None else REG.group(pg)


def _sum(tensors: Any) -> int:
    return sum(t.nbytes for t in tensors) if tensors else 0


def _root(info: GroupInfo, rank: int | None, group_rank: int | None) -> int:
    if rank is not None:
        return rank
    if group_rank is not None and 0 <= group_rank < len(info.ranks):
        return info.ranks[group_rank]
    return -1


# Each extractor returns (group info, peer or -1, bytes_in, bytes_out, tensor for dtype, async).
Desc = tuple[GroupInfo | None, int, int, int, Any, bool]


def send(tensor, dst=None, group=None, tag=0, group_dst=None) -> Desc:
    info = group_info(group)
    return info, _root(info, dst, group_dst) if info else -1, tensor.nbytes, 0, tensor, False


def recv(tensor, src=None, group=None, tag=0, group_src=None) -> Desc:
    info = group_info(group)
    return info, _root(info, src, group_src) if info else -1, 0, tensor.nbytes, tensor, False


def isend(tensor, dst=None, group=None, tag=0, group_dst=None) -> Desc:
    return (*send(tensor, dst, group, tag, group_dst)[:5], True)


def irecv(tensor, src=None, group=None, tag=0, group_src=None) -> Desc:
    return (*recv(tensor, src, group, tag, group_src)[:5], True)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None) -> Desc:
    info = group_info(group)
    root = _root(info, src, group_src) if info else -1
    nb = tensor.nbytes
    return (info, root, nb, 0, tensor, async_op) if root == REG.me else \
        (info, root, 0, nb, tensor, async_op)


def all_reduce(tensor, op=None, group=None, async_op=False) -> Desc:
    nb = tensor.nbytes
    return group_info(group), -1, nb, nb, tensor, async_op


def reduce(tensor, dst=None, op=None, group=None, async_op=False, group_dst=None) -> Desc:
    info = group_info(group)
    root = _root(info, dst, group_dst) if info else -1
    nb = tensor.nbytes
    return info, root, nb, nb if root == REG.me else 0, tensor, async_op


def all_gather(tensor_list, tensor, group=None, async_op=False) -> Desc:
    return group_info(group), -1, tensor.nbytes, _sum(tensor_list), tensor, async_op


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False) -> Desc:
    return (group_info(group), -1, input_tensor.nbytes, output_tensor.nbytes, input_tensor,
            async_op)


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False,
           group_dst=None) -> Desc:
    info = group_info(group)
    root = _root(info, dst, group_dst) if info else -1
    out = _sum(gather_list) if root == REG.me else 0
    return info, root, tensor.nbytes, out, tensor, async_op


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False,
            group_src=None) -> Desc:
    info = group_info(group)
    root = _root(info, src, group_src) if info else -1
    read = _sum(scatter_list) if root == REG.me else 0
    return info, root, read, tensor.nbytes, tensor, async_op


def reduce_scatter(output, input_list, op=None, group=None, async_op=False) -> Desc:
    return group_info(group), -1, _sum(input_list), output.nbytes, output, async_op


def reduce_scatter_tensor(output, input, op=None, group=None, async_op=False) -> Desc:
    return group_info(group), -1, input.nbytes, output.nbytes, output, async_op


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False) -> Desc:
    return (group_info(group), -1, _sum(input_tensor_list), _sum(output_tensor_list),
            input_tensor_list[0] if input_tensor_list else None, async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False) -> Desc:
    return group_info(group), -1, input.nbytes, output.nbytes, input, async_op


def barrier(group=None, async_op=False, device_ids=None, timeout=None) -> Desc:
    return group_info(group), -1, 0, 0, None, async_op


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False) -> Desc:
    return group_info(group), -1, 0, 0, None, False


# Object collectives: the logical record's bytes are the sum of its inner transfers.
def all_gather_object(object_list, obj, group=None) -> Desc:
    return group_info(group), -1, 0, 0, None, False


def broadcast_object_list(object_list, src=None, group=None, device=None,
                          group_src=None) -> Desc:
    info = group_info(group)
    return info, _root(info, src, group_src) if info else -1, 0, 0, None, False


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None) -> Desc:
    info = group_info(group)
    return info, _root(info, dst, group_dst) if info else -1, 0, 0, None, False


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None,
                        group=None, group_src=None) -> Desc:
    info = group_info(group)
    return info, _root(info, src, group_src) if info else -1, 0, 0, None, False


def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None,
                     use_batch=False) -> Desc:
    info = group_info(group)
    return info, _root(info, dst, group_dst) if info else -1, 0, 0, None, False


def recv_object_list(object_list, src=None, group=None, device=None, group_src=None,
                     use_batch=False) -> Desc:
    info = group_info(group)
    return info, _root(info, src, group_src) if info else -1, 0, 0, None, False


EXTRACTORS: dict[str, Callable[..., Desc]] = {
    "send": send, "recv": recv, "isend": isend, "irecv": irecv, "broadcast": broadcast,
    "all_reduce": all_reduce, "reduce": reduce, "all_gather": all_gather,
    "all_gather_into_tensor": all_gather_into_tensor,
    "all_gather_single": all_gather_into_tensor, "gather": gather, "scatter": scatter,
    "reduce_scatter": reduce_scatter, "reduce_scatter_tensor": reduce_scatter_tensor,
    "reduce_scatter_single": reduce_scatter_tensor, "all_to_all": all_to_all,
    "all_to_all_single": all_to_all_single, "barrier": barrier,
    "monitored_barrier": monitored_barrier, "all_gather_object": all_gather_object,
    "broadcast_object_list": broadcast_object_list, "gather_object": gather_object,
    "scatter_object_list": scatter_object_list, "send_object_list": send_object_list,
    "recv_object_list": recv_object_list,
}


def from_locals(name: str, local_vars: dict[str, Any]) -> Desc:
    """Describe a call from the locals of torch's own frame for ``name``."""
    fn = EXTRACTORS[name]
    code = fn.__code__
    params = code.co_varnames[:code.co_argcount]
    info, peer, b_in, b_out, tensor, async_op = fn(
        **{p: local_vars[p] for p in params if p in local_vars})
    # torch has replaced a complex tensor by its real view by now: report the program's dtype
    base = getattr(tensor, "_base", None)
    if base is not None and base.is_complex() and not tensor.is_complex():
        tensor = base
    return info, peer, b_in, b_out, tensor, async_op
