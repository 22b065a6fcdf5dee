"""The bytes point-to-point transfers and all_to_all moved between nodes, for the topology
view's node-by-node heatmap of a job too large for a rank-by-rank one.

Fed the completed instances as the views get them (``add``), it keeps a node-by-node matrix
of bytes, indexed by host in the order hosts were first seen, so that a rank moving to another
host later changes only what is added after. A transfer adds its bytes from its source's node
to its destination's; an all_to_all of ``n`` ranks, where each rank sends ``S / n`` to each
member (nccl-tests' S: what one rank sends in all), adds ``c_a x c_b x S / n`` from node a to b
(``c``: the group's members on each node; a rank's part to itself moves nothing). Costs: per
instance O(1) for a transfer, O(nodes spanned squared) for an all_to_all, with each group's
members counted by node once per mapping of ranks to hosts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import numpy as np

from commviz.viewer.model import Instance
from commviz.wire import protocol

ALL_TO_ALL = ("all_to_all", "all_to_all_single")


class NodePair(NamedTuple):
    src: str
    dst: str
    nbytes: float


class NodeTraffic:
    """Bytes between nodes, accumulated (see the module's doc)."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self._index: dict[str, int] = {}
        self.bytes = np.zeros((0, 0))
        self._node_of: dict[int, int] = {}  # rank -> index into hosts
        # per group (by its tuple's id): the tuple, its nodes, its parts between them
        self._counts: dict[int, tuple[tuple[int, ...], np.ndarray, np.ndarray]] = {}
        self.total = 0.0

    def place(self, nodes: Mapping[str, list[int]]) -> None:
        """Take the ranks' hosts (``Model.nodes()``); call again when they change."""
        for host in nodes:
            if host not in self._index:
                self._index[host] = len(self.hosts)
                self.hosts.append(host)
        grown = np.zeros((len(self.hosts), len(self.hosts)))
        grown[:len(self.bytes), :len(self.bytes)] = self.bytes
        self.bytes = grown
        self._node_of = {r: self._index[h] for h, ranks in nodes.items() for r in ranks}
        self._counts = {}

    def add(self, instances: Iterable[Instance]) -> None:
        """Count the transfers and all_to_all instances among these (the others move nothing
        this view shows); ranks of no known host are left out."""
        src, dst, sizes = [], [], []
        for inst in instances:
            if inst.op in protocol.P2P:
                a, b = self._node_of.get(inst.group[0]), self._node_of.get(inst.group[1])
                if a is not None and b is not None and inst.size:
                    src.append(a)
                    dst.append(b)
                    sizes.append(inst.size)
            elif inst.op in ALL_TO_ALL and inst.size:
                nodes, share = self._members(inst.group)
                if len(nodes):
                    part = inst.size / len(inst.group)
                    self.bytes[np.ix_(nodes, nodes)] += share * part
                    self.total += float(share.sum()) * part
        if src:
            np.add.at(self.bytes, (np.array(src), np.array(dst)), np.array(sizes, float))
            self.total += float(sum(sizes))

    def _members(self, group: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """A group's nodes and the all_to_all's parts between them (in units of S / n),
        counted once per group and placement (keyed by the tuple's identity: the model's
        instances share their group's tuple, which the entry keeps)."""
        kept = self._counts.get(id(group))
        if kept is None or kept[0] is not group:
            on = [self._node_of[r] for r in group if r in self._node_of]
            nodes, counts = np.unique(np.array(on, np.int64), return_counts=True)
            share = np.outer(counts, counts).astype(float) - np.diag(counts)
            kept = self._counts[id(group)] = (group, nodes, share)
        return kept[1], kept[2]

    def matrix(self, order: list[str]) -> np.ndarray:
        """The bytes from each host (row) to each host (column), hosts in ``order``."""
        at = [self._index.get(h, -1) for h in order]
        out = np.zeros((len(order), len(order)))
        known = [i for i, k in enumerate(at) if k >= 0]
        idx = [at[i] for i in known]
        out[np.ix_(known, known)] = self.bytes[np.ix_(idx, idx)]
        return out

    def busiest(self, count: int) -> list[NodePair]:
        """The ``count`` pairs of distinct nodes that moved the most, most first (ties in the
        order hosts were seen: of a pipeline's many equal pairs, the first nodes')."""
        if not len(self.bytes):
            return []
        off = self.bytes.copy()
        np.fill_diagonal(off, 0)
        flat = off.ravel()
        top = np.lexsort((np.arange(len(flat)), -flat))[:count]  # ties: the first nodes
        n = len(self.hosts)
        return [NodePair(self.hosts[k // n], self.hosts[k % n], float(flat[k]))
                for k in top.tolist() if flat[k] > 0]
