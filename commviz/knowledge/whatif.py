"""What a recorded job's collectives would take on another fabric and at another scale: a
model, never a measurement.

For each op, NCCL's own cost model (``src/graph/tuning.cc``, figures in ``docs/network.md``):
``t = latency + S x f / bandwidth`` for each algorithm (ring; tree for all_reduce) and protocol
(LL, LL128, Simple), the fastest taken, as NCCL's tuner does. The latency counts the ring's
steps inside a node and across the network separately (hierarchical: N nodes of P GPUs):

* ring: ``base + (steps - inter) x intraLat + inter x interLat``, steps = 2(n-1) for
  all_reduce, n-1 for all_gather and reduce_scatter, n for broadcast and reduce; inter, the
  steps that cross the network = 2N, N, N (0 on one node);
* tree (all_reduce across nodes): ``base + 2((P-1) x intraLat + log2(N) x interLat)``.

The bandwidth term uses nccl-tests' bus factor f (``bandwidth.bus_factor``) over the slowest
link on the path (NVLink or PCIe inside a node, the GPU's NIC between nodes), scaled by
NCCL's efficiency per protocol. RoCE's tail under congestion multiplies the network's share.
Pure (stdlib only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from commviz.knowledge import bandwidth

# tuning.cc (2.19): base latency, us, per (algorithm, protocol); the tree is modelled with
# LL only, the one tree figure over the network the project's sources give
BASE_US = {("ring", "LL"): 6.6, ("ring", "LL128"): 14.0, ("ring", "Simple"): 8.4,
           ("tree", "LL"): 6.8}
# per-hop latency, us, per (link, protocol) for the ring; the tree's network hop with LL: 5.0
HOP_US = {"nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
          "pcie": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
          "net": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}}
TREE_NET_LL_US = 5.0
NET_OVERHEAD_US = 1.0  # per network step (Intel hosts; AMD: 2), x3 with Simple
# the share of a link's bandwidth each protocol moves data at (tuning.cc's refinements):
# LL: 8-byte lines of 4 data bytes and a flag, NCCL counts 1/4 (1/3 for all_gather-like ops on
# one node); LL128: 120 of 128 bytes, 0.92; the tree: 0.9, and LL on it 0.9/3.8
RING_LL_SHARE, RING_LL_SHARE_ONE_NODE, LL128_SHARE = 1 / 4, 1 / 3, 0.92
TREE_SHARE, TREE_LL_SHARE = 0.9, 0.9 / 3.8


@dataclass(frozen=True)
class Link:
    """One kind of hop: the per-hop latencies above (``kind``: nvlink, pcie or net) and the
    bandwidth one GPU sends at over it, GB/s (1e9 B/s) per direction."""

    kind: str
    gbps: float


@dataclass(frozen=True)
class Fabric:
    """What joins the GPUs: ``intra`` inside a node, ``inter`` between nodes (None: a fabric
    inside one node only); ``tail``: the factor on the network's share of an op's time under
    congestion (1: none modelled). ``alpha_us``: a custom flat model instead of NCCL's tables
    (``alpha_us`` per step on every hop, the links' ``gbps`` as beta)."""

    name: str
    intra: Link
    inter: Link | None
    tail: float = 1.0
    alpha_us: float | None = None


NVLINK = Link("nvlink", 376.0)  # HGX H100, one way, measured (docs/network.md)
PCIE = Link("pcie", 64.0)       # PCIe 5.0 x16, per direction
PRESETS: dict[str, Fabric] = {
    "nvlink": Fabric("nvlink", NVLINK, None),
    "pcie": Fabric("pcie", PCIE, None),
    "ib-ndr": Fabric("ib-ndr", NVLINK, Link("net", 50.0)),   # 400 Gb/s a GPU
    "ib-xdr": Fabric("ib-xdr", NVLINK, Link("net", 100.0)),  # 800 Gb/s a GPU
    "roce": Fabric("roce", NVLINK, Link("net", 50.0), tail=1.3),  # 400 Gb/s; C4's 30% gap
}


def custom(alpha_us: float, beta_gbps: float) -> Fabric:
    """One link everywhere, ``alpha_us`` a step and ``beta_gbps`` a GPU."""
    if not (alpha_us >= 0 and beta_gbps > 0 and math.isfinite(alpha_us + beta_gbps)):
        raise ValueError(f"--alpha-us {alpha_us:g} --beta-gbps {beta_gbps:g}: the latency must "
                         "be >= 0 and the bandwidth > 0")
    link = Link("custom", beta_gbps)
    return Fabric("custom", link, link, alpha_us=alpha_us)


@dataclass(frozen=True)
class Scale:
    nodes: int
    per_node: int

    @property
    def n(self) -> int:
        return self.nodes * self.per_node


@dataclass(frozen=True)
class Prediction:
    """The fastest (algorithm, protocol) for one op: seconds, of which ``network_s`` on the
    network's hops (latency and bytes); ``inter_steps``, the steps that cross the network."""

    algorithm: str
    protocol: str
    time_s: float
    network_s: float
    intra_steps: int
    inter_steps: int
    tail: float

    @property
    def congested_s(self) -> float:
        """The time with the network's share stretched by the fabric's tail factor."""
        return self.time_s + (self.tail - 1) * self.network_s


def family(op: str) -> str | None:
    """The op's collective as the model knows it; None where it has none (p2p: which node the
    peer is on is not recorded; object collectives: their pickling is no transfer)."""
    if "object" in op:
        return None
    for name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        if op.startswith(name):
            return name
    return {"broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier"}.get(op)


def ring_steps(fam: str, n: int, nodes: int) -> tuple[int, int]:
    """(steps, of which across the network) of NCCL's ring for ``fam`` over ``n`` GPUs."""
    if fam == "all_reduce":
        return 2 * (n - 1), 2 * nodes if nodes > 1 else 0
    if fam in ("all_gather", "reduce_scatter"):
        return n - 1, nodes if nodes > 1 else 0
    return n, nodes if nodes > 1 else 0  # broadcast, reduce: a chain along the ring


def predict(op: str, size: int, scale: Scale, fabric: Fabric,
            extra_us: float = 0.0) -> Prediction | None:
    """The model's time for ``op`` moving S = ``size`` bytes over ``scale``'s GPUs;
    ``extra_us`` more on every network hop. None for an op it has no model of."""
    fam = family(op)
    if fam is None:
        return None
    if fam == "barrier":  # NCCL's barrier: an all_reduce of one element
        fam, size = "all_reduce", 4
    n, nodes = scale.n, scale.nodes
    if n < 2:
        return Prediction("none", "-", 0.0, 0.0, 0, 0, fabric.tail)
    if nodes > 1 and fabric.inter is None:
        raise ValueError(f"{fabric.name} joins the GPUs of one node: --nodes {nodes} needs a "
                         "network (ib-ndr, ib-xdr, roce, or --alpha-us/--beta-gbps)")
    factor = bandwidth.bus_factor(fam, n) or 1.0
    slowest = min(fabric.intra.gbps, fabric.inter.gbps) if nodes > 1 else fabric.intra.gbps
    if fabric.alpha_us is not None:
        return _flat(fam, size, scale, fabric, factor, extra_us)
    if fam == "all_to_all":  # NCCL runs it as grouped send/recv, all peers at once
        return _all_to_all(size, scale, fabric, factor, slowest, extra_us)
    options = [_ring(fam, size, scale, fabric, factor, slowest, p, extra_us)
               for p in ("LL", "LL128", "Simple")]
    if fam == "all_reduce" and nodes > 1:
        options.append(_tree(size, scale, fabric, slowest, extra_us))
    return min(options, key=lambda p: p.time_s)


def _net_hop_us(protocol: str, extra_us: float) -> float:
    overhead = NET_OVERHEAD_US * (3 if protocol == "Simple" else 1)
    return HOP_US["net"][protocol] + overhead + extra_us


def _ring(fam: str, size: int, scale: Scale, fabric: Fabric, factor: float, slowest: float,
          protocol: str, extra_us: float) -> Prediction:
    steps, inter = ring_steps(fam, scale.n, scale.nodes)
    intra_us = HOP_US[fabric.intra.kind][protocol]
    inter_us = _net_hop_us(protocol, extra_us)
    share = {"LL": RING_LL_SHARE if scale.nodes > 1 or fam in ("all_reduce", "reduce")
             else RING_LL_SHARE_ONE_NODE, "LL128": LL128_SHARE, "Simple": 1.0}[protocol]
    wire_s = size * factor / (slowest * share * 1e9)
    latency_us = BASE_US[("ring", protocol)] + (steps - inter) * intra_us + inter * inter_us
    network_s = inter * inter_us / 1e6 + (wire_s if scale.nodes > 1 else 0.0)
    return Prediction("ring", protocol, latency_us / 1e6 + wire_s, network_s, steps - inter,
                      inter, fabric.tail)


def _tree(size: int, scale: Scale, fabric: Fabric, slowest: float,
          extra_us: float) -> Prediction:
    """NCCL's tree all_reduce with LL: a chain inside each node, a binary tree over the nodes,
    up then down; NCCL counts its algbw as half its busbw (S moves up and back)."""
    intra_steps = 2 * (scale.per_node - 1)
    inter_steps = 2 * int(math.log2(scale.nodes))
    inter_us = TREE_NET_LL_US + NET_OVERHEAD_US + extra_us
    wire_s = size / (slowest * TREE_LL_SHARE * 0.5 * 1e9)
    latency_us = (BASE_US[("tree", "LL")] + intra_steps * HOP_US[fabric.intra.kind]["LL"]
                  + inter_steps * inter_us)
    return Prediction("tree", "LL", latency_us / 1e6 + wire_s,
                      inter_steps * inter_us / 1e6 + wire_s, intra_steps, inter_steps,
                      fabric.tail)


def _all_to_all(size: int, scale: Scale, fabric: Fabric, factor: float, slowest: float,
                extra_us: float) -> Prediction:
    """Every peer at once: one hop's latency (the network's when there are nodes), then each
    GPU's (n-1)/n of S over its slowest link."""
    across = scale.nodes > 1
    hop_us = _net_hop_us("Simple", extra_us) if across else HOP_US[fabric.intra.kind]["Simple"]
    wire_s = size * factor / (slowest * 1e9)
    time_s = (BASE_US[("ring", "Simple")] + hop_us) / 1e6 + wire_s
    return Prediction("p2p", "Simple", time_s, hop_us / 1e6 + wire_s if across else 0.0,
                      0 if across else 1, 1 if across else 0, fabric.tail)


def _flat(fam: str, size: int, scale: Scale, fabric: Fabric, factor: float,
          extra_us: float) -> Prediction:
    """The textbook ring ``steps x alpha + S x f / beta`` (Thakur, Rabenseifner, Gropp)."""
    if fam == "all_to_all":
        steps, inter = 1, 1 if scale.nodes > 1 else 0
    else:
        steps, inter = ring_steps(fam, scale.n, scale.nodes)
    assert fabric.alpha_us is not None
    wire_s = size * factor / (fabric.intra.gbps * 1e9)
    time_s = (steps * fabric.alpha_us + inter * extra_us) / 1e6 + wire_s
    network_s = inter * (fabric.alpha_us + extra_us) / 1e6 + (wire_s if inter else 0.0)
    return Prediction("ring", "alpha-beta", time_s, network_s, steps - inter, inter,
                      fabric.tail)


# -- the training step -------------------------------------------------------------------

PERIOD_MAX = 512  # the longest step, in collectives, looked for
WINDOW = 8192     # the collectives searched for it, from the first: O(WINDOW x PERIOD_MAX)
DAY_S = 86_400


@dataclass(frozen=True)
class Step:
    """The job's step as its collectives repeat: ``pattern`` (keys, in order) recurs
    ``repeats`` times from the ``first``-th collective, one every ``seconds`` of wall time."""

    pattern: tuple
    repeats: int
    first: int
    seconds: float


def infer_step(keys: Sequence, starts_ns: Sequence[int]) -> Step | None:
    """The period whose unbroken repetition covers most of the sequence of collectives
    (``keys``, by start; its first ``WINDOW``), the shortest of equals: set-up before it and a
    different end after it are left out. Its wall time: from the first repetition's start to
    the last's, over the repetitions between. None without two whole repetitions covering at
    least half the collectives searched (a chance repeat among unrelated calls is no step)."""
    keys = list(keys[:WINDOW])
    best: tuple[int, int, int] | None = None  # (covered, period, first)
    for period in range(1, min(PERIOD_MAX, len(keys) // 2) + 1):
        run = 0  # consecutive i with keys[i] == keys[i + period]
        for i in range(len(keys) - period):
            run = run + 1 if keys[i] == keys[i + period] else 0
            covered = (run + period) // period * period
            if run and covered >= 2 * period and (best is None or covered > best[0]):
                best = (covered, period, i - run + 1)
    if best is None or 2 * best[0] < len(keys):
        return None
    covered, period, first = best
    repeats = covered // period
    last = first + (repeats - 1) * period
    seconds = (starts_ns[last] - starts_ns[first]) / 1e9 / (repeats - 1)
    if seconds <= 0:
        return None
    return Step(tuple(keys[first:first + period]), repeats, first, seconds)


def per_day(per_step_s: float, step_s: float) -> float:
    """Seconds a day of training at one step every ``step_s`` spends on ``per_step_s``."""
    return per_step_s * DAY_S / step_s
