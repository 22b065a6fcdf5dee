"""A fleet simulator: N SIMULATED ranks on N/8 simulated nodes, for the tests and benchmarks
of intake at scale. Nothing it sends comes from a real job.

It speaks to a viewer as a real job would: one ZeroMQ PUSH socket (and one clock-channel
DEALER) per rank, the real wire protocol (``commviz.wire.protocol``) and a real rank's
emitter's batch layout (``commviz.rank.emitter``): heartbeats every ``HEARTBEAT_S`` with the
GPU telemetry of a rank on an H200, its node's GPUs (``topo``), columnar op batches every
emitter tick (50 ms, each rank at its own phase), in-flight snapshots of ops running longer
than ``ANNOUNCE_S``, clock round trips, and a goodbye. The protocol has no field that says
"simulated", so the job key is ``simulated-fleet``, the call sites are in
``simulated-fleet/train.py``, the GPUs are named ``NVIDIA H200 (simulated)``, and every line
this tool prints says so.

The ranks' behaviour is a plan (``Plan``), seeded, that every worker process computes whole,
so the ranks of one collective agree on its timing without talking to each other: a rank
arrives at each call when its program is ready (with jitter, and the faults' delays); the
call starts on its group when the last member has arrived and the group's previous call has
ended (NCCL runs a communicator's calls in order) and lasts what ``commviz.knowledge.costmodel``
predicts for the op, the group and the size on the links of an H200 fleet
(``knowledge/network.md``). Each node has a clock of its own, a few ms off the viewer's.

    python bench/fleet.py --ranks 1024 --shape ddp --seconds 20 --to tcp://127.0.0.1:5555
        [--fault straggler:RANK:MS] [--fault-at S] [--procs P] [--watch REC.jsonl|REC.cvz]

``--watch`` starts ``commviz watch --headless --record REC`` itself and measures how it kept
up (``docs/scale.md``). ``run_fleet`` is the same for tests.

It costs about one core at 1,024 DDP ranks (10 collectives a second each), mostly the v1
wire's own cost (each batch packs its group's 1,024 ranks) and ZeroMQ's per message: on a
machine it shares with the viewer, it reports how far behind its schedule it fell.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import multiprocessing as mp
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import zmq

from commviz.knowledge import bandwidth, costmodel
from commviz.rank.emitter import encode_batch, encode_groups
from commviz.rank.records import BYTES_IN, BYTES_OUT, ID, T_END
from commviz.relay.relay import Relay
from commviz.viewer import compact
from commviz.wire import clocksync, protocol
from commviz.wire.keys import client_keys, secure_client
from commviz.wire.nodes import ENV_HOST

RANKS_PER_NODE = 8
RANKS_PER_PROC = 128
MAX_RANKS_PER_PROC = 504       # 2 sockets a rank: a ZeroMQ context holds at most 1,023
RELAYS_PER_PROC = 16           # --relays: real relays (nodes) in one process
JOB_KEY = "simulated-fleet"
GPU_NAME = "NVIDIA H200 (simulated)"
GPU_MEM_TOTAL = 150_754_820_096
SIMULATED = "SIMULATED"  # what every printed line begins with

# The emitter's timing (commviz/rank/emitter.py and the protocol)
TICK_NS = 50_000_000           # emitter.TICK_S
SLOTS = 10                     # ranks tick at one of SLOTS phases of a tick, as processes do
SLOT_NS = TICK_NS // SLOTS
HEARTBEAT_NS = int(protocol.HEARTBEAT_S * 1e9)
ANNOUNCE_NS = int(protocol.ANNOUNCE_S * 1e9)
TOPOLOGY_NS = 10_000_000_000   # emitter.TOPOLOGY_EVERY_S
GROUPS_NS = int(protocol.GROUPS_EVERY_S * 1e9)
CLOCK_NS = int(clocksync.PERIOD_S * 1e9)
REPLY_WAIT_NS = clocksync.REPLY_WAIT_MS * 1_000_000
SEND_HWM = 1000
EXIT_LINGER_MS = 1000

# The fleet's links, for the cost model (knowledge/network.md): NCCL's per-hop latency of its
# Simple protocol (tuning.cc) on NVLink and on the network, NVLink 4 one way as measured on
# HGX H100, and a 400 Gb/s NIC per GPU.
NVLINK_HOP_S = 3.4e-6
NET_HOP_S = 14e-6
NVLINK_BPS = 360e9
NET_BPS = 48e9
SLOW_LINK_FACTOR = 16.0        # slow-link: as a 400 Gb/s link fallen back to 25 Gb/s

# The program's timing
FIRST_STEP_NS = 100_000_000    # after the first heartbeats, as after init_process_group
OPTIMIZER_NS = 5_000_000       # from the step's last collective to the next step
ARRIVAL_JITTER_NS = 500_000    # |N(0, this)| added to every arrival
END_JITTER_NS = 20_000         # ranks see one collective end a few us apart
DURATION_NOISE = 0.05          # |N(0, this)| relative, per instance
STALL_P = 0.3                  # stall: the chance of a stall in a step
STALL_MS = (50, 300)           # its length
NEVER = 1 << 62                # the end of an op that never ends
OFFLINE_T0_NS = 1_790_000_000_000_000_000  # ``offline``'s time 0: a fixed date, for tests

FLAGS_GPU = protocol.FLAG_CUDA | protocol.FLAG_GPU_TIME
SITES = [("simulated-fleet/train.py", 88),     # loss.backward()
         ("simulated-fleet/train.py", 87),     # model(x)
         ("simulated-fleet/pipeline.py", 41)]  # the stages' send and receive
BACKWARD, FORWARD, PIPELINE = 0, 1, 2
SHAPES = ("ddp", "fsdp", "tp-dp", "pipeline")
# mismatch: what the odd rank calls instead
OTHER_OP = {"all_reduce": "reduce_scatter_tensor", "all_gather_into_tensor": "all_reduce",
            "reduce_scatter_tensor": "all_gather_into_tensor"}


# ---- the job --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    kind: str                  # straggler, stall, stalls, hang, dead-node, mismatch, slow-link
    a: int                     # the rank, or the node
    b: int = 0                 # straggler: ms late; slow-link: the other node

    @staticmethod
    def parse(text: str) -> Fault:
        kind, *args = text.split(":")
        want = {"straggler": 2, "stall": 1, "stalls": 1, "hang": 1, "dead-node": 1, "mismatch": 1,
                "slow-link": 2}
        if kind not in want or len(args) != want[kind] or not all(a.isdigit() for a in args):
            raise ValueError(f"{text!r}: a fault is straggler:RANK:MS, stall:RANK, stalls:MS, "
                             "hang:RANK, "
                             "dead-node:NODE, mismatch:RANK or slow-link:NODE:NODE")
        return Fault(kind, *map(int, args))


@dataclass(frozen=True)
class Job:
    """What the fleet plays. ``buckets``: calls of one kind per step (DDP's gradient buckets,
    FSDP's units, the layers of tp-dp, the microbatches of the pipeline); ``size``: the bytes
    of each (a bucket, a unit's parameters, an activation)."""

    ranks: int
    shape: str = "ddp"
    buckets: int = 10
    step_s: float = 1.0
    size: int = 25 << 20
    stages: int = 0            # pipeline: 0 = one per node, at most 4
    faults: tuple[Fault, ...] = ()
    fault_at: float = 0.0
    clock_skew_ms: float = 5.0
    seed: int = 0
    groups_in_batches: bool = False  # as ranks before ``grp``: every batch lists its groups

    def __post_init__(self) -> None:
        if self.ranks < RANKS_PER_NODE or self.ranks % RANKS_PER_NODE:
            raise ValueError(f"ranks must be a multiple of {RANKS_PER_NODE}")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {', '.join(SHAPES)}")
        if self.ranks % self.pipeline_stages:
            raise ValueError("the pipeline's stages must divide the ranks")
        for f in self.faults:
            if f.kind == "stalls":  # its number is a length, not a rank
                continue
            top = self.nodes if f.kind in ("dead-node", "slow-link") else self.ranks
            if not (f.a < top and (f.kind != "slow-link" or f.b < top)):
                raise ValueError(f"fault {f.kind}:{f.a}: no such rank or node")
            if f.kind == "mismatch" and self.shape == "pipeline":
                raise ValueError("mismatch needs a shape with collectives")

    @property
    def nodes(self) -> int:
        return self.ranks // RANKS_PER_NODE

    @property
    def pipeline_stages(self) -> int:
        return self.stages or max(2, min(4, self.nodes))

    def ranks_with(self, kind: str) -> set[int]:
        if kind == "dead-node":
            return {r for f in self.faults if f.kind == kind
                    for r in range(f.a * RANKS_PER_NODE, (f.a + 1) * RANKS_PER_NODE)}
        return {f.a for f in self.faults if f.kind == kind}


@dataclass(frozen=True)
class Call:
    """A collective the program makes every step, on every group of a layout."""

    op: str
    layout: str                # world, tp, dp
    at: float                  # when in the step the program is ready to make it (fraction)
    bytes_in: int
    bytes_out: int
    dtype: str
    flags: int
    site: int
    blocking: bool             # the program waits for it before its next call


@dataclass(frozen=True)
class Transfer:
    """A pipeline transfer every step: each rank of stage ``src`` sends to its peer in ``dst``."""

    src: int
    dst: int
    at: float


def layouts(job: Job) -> dict[str, np.ndarray]:
    """Each layout's groups, as rows of global ranks: world; tp (8 consecutive ranks, one
    node) and dp (N/8 ranks with stride 8) for tp-dp."""
    world = np.arange(job.ranks, dtype=np.int64)
    out = {"world": world.reshape(1, -1)}
    if job.shape == "tp-dp":
        out["tp"] = world.reshape(-1, RANKS_PER_NODE)
        out["dp"] = world.reshape(-1, RANKS_PER_NODE).T.copy()
    return out


def calls(job: Job) -> list[Call | Transfer]:
    """One step of the program, in the order it makes its calls."""
    n, b, size = job.ranks, job.buckets, job.size
    grads = FLAGS_GPU | protocol.FLAG_ASYNC | protocol.FLAG_DDP
    if job.shape == "ddp":  # the gradient buckets, all-reduced as backward produces them
        # (forward the first third of the step, backward the rest)
        return [Call("all_reduce", "world", 0.35 + 0.6 * i / b, size, size, "float32", grads,
                     BACKWARD, False) for i in range(b)]
    if job.shape == "fsdp":  # each unit's parameters gathered for forward, gradients scattered
        shard = size // n
        fsdp = FLAGS_GPU | protocol.FLAG_ASYNC
        return ([Call("all_gather_into_tensor", "world", 0.05 + 0.3 * i / b, shard, shard * n,
                      "bfloat16", fsdp, FORWARD, False) for i in range(b)]
                + [Call("reduce_scatter_tensor", "world", 0.45 + 0.45 * i / b, shard * n, shard,
                        "bfloat16", fsdp, BACKWARD, False) for i in range(b)])
    if job.shape == "tp-dp":  # each layer's activations within the node, then DDP across them
        act = size // 4
        out = [Call("all_reduce", "tp", 0.05 + 0.3 * i / b, act, act, "bfloat16", FLAGS_GPU,
                    FORWARD, True) for i in range(b)]
        for i in range(b):
            out.append(Call("all_reduce", "tp", 0.4 + 0.4 * i / b, act, act, "bfloat16",
                            FLAGS_GPU, BACKWARD, True))
            out.append(Call("all_reduce", "dp", 0.42 + 0.4 * i / b, size, size, "float32",
                            grads, BACKWARD, False))
        return out
    # pipeline (GPipe): activations forward through the stages, gradients back
    p = job.pipeline_stages
    fwd, bwd = 0.4 / (b + p - 1), 0.45 / (b + p - 1)
    forward = [Transfer(k, k + 1, (i + k + 1) * fwd) for i in range(b) for k in range(p - 1)]
    backward = [Transfer(k, k - 1, 0.45 + (i + p - k) * bwd)
                for i in range(b) for k in range(p - 1, 0, -1)]
    return sorted(forward, key=lambda t: t.at) + sorted(backward, key=lambda t: t.at)


def durations(job: Job) -> dict[tuple, int]:
    """The cost model's time (ns) of every (op, group) the plan calls, by (op, bytes_in,
    bytes_out, ranks of the group): the busiest rank's steps and bytes as NCCL schedules the
    op (``costmodel.cost_of``), at the fleet's links. Slow for large groups (the schedule is
    built once): computed in the parent before the workers fork."""
    slow = {frozenset((f.a, f.b)) for f in job.faults if f.kind == "slow-link"}
    lays = layouts(job)
    out: dict[tuple, int] = {}

    def add(op: str, b_in: int, b_out: int, ranks: Iterable[int]) -> None:
        ranks = tuple(ranks)
        key = (op, b_in, b_out, ranks)
        if key in out:
            return
        k = len(ranks)
        nodes = {r // RANKS_PER_NODE for r in ranks}
        m = len(nodes) if len(nodes) > 1 else 0  # ring hops that cross nodes
        alpha = (m * NET_HOP_S + (k - m) * NVLINK_HOP_S) / k
        beta = NET_BPS if m else NVLINK_BPS
        if any(pair <= nodes for pair in slow):
            beta /= SLOW_LINK_FACTOR
        cost = costmodel.cost_of(op, "nccl", k, bandwidth.size_of(op, k, b_in, b_out))
        out[key] = int(costmodel.Fit(alpha, beta, 0).predict(cost) * 1e9)

    for call in calls(job):
        if isinstance(call, Call):
            for row in lays[call.layout]:
                add(call.op, call.bytes_in, call.bytes_out, row.tolist())
        else:
            s = job.ranks // job.pipeline_stages
            for j in range(s):
                add("isend", job.size, 0, (call.src * s + j, call.dst * s + j))
    return out


# ---- the plan -------------------------------------------------------------------------------
@dataclass
class Out:
    """What the ranks of one call did (one row per rank that made it): true times, ns."""

    ranks: np.ndarray
    op: np.ndarray
    gid: np.ndarray
    seq: np.ndarray
    peer: np.ndarray
    bytes_in: np.ndarray
    bytes_out: np.ndarray
    t_start: np.ndarray
    t_end: np.ndarray          # NEVER: it never ends
    dtype: int
    flags: int
    site: int


def tick_phase_ns(rank: int) -> int:
    """When in each emitter tick a rank's emitter wakes: ranks are not in step."""
    return (rank % SLOTS) * SLOT_NS


def first_tick_at(rank: int, t0: int, t: int) -> int:
    """A rank's first emitter tick at or after ``t``."""
    base = t0 + tick_phase_ns(rank)
    return base + max(0, -(-(t - base) // TICK_NS)) * TICK_NS


class Plan:
    """The job step by step, for every rank: seeded, so that every worker computes the same.

    Arrival: when the program is ready (the step's start plus the call's place in it), plus
    jitter and the faults' delays, and not before its previous blocking call ended. Start: the
    last member's arrival, or the end of the group's previous call. A call some member never
    makes (hang, dead node, a rank stuck in an earlier one) never ends, nor does any later
    call of its group; its ranks make no more calls after that step (at once after a blocking
    call). The next step starts a step after this one, or once its last collective ended."""

    def __init__(self, job: Job, t0_ns: int, dur: dict[tuple, int]) -> None:
        self.job = job
        self.t0 = t0_ns
        self.t_fault = t0_ns + int(job.fault_at * 1e9)
        n = job.ranks
        self.layouts = layouts(job)
        self.groups: list[tuple[str, tuple[int, ...]]] = [("0", tuple(range(n)))]
        self.gid0: dict[str, int] = {"world": 0}
        self.group_index: dict[str, np.ndarray] = {"world": np.zeros(n, np.int64)}
        for name in ("tp", "dp"):  # named as torch names groups: in the order they are made
            if name in self.layouts:
                self.gid0[name] = len(self.groups)
                index = np.zeros(n, np.int64)
                for g, row in enumerate(self.layouts[name]):
                    self.groups.append((str(len(self.groups)), tuple(row.tolist())))
                    index[row] = g
                self.group_index[name] = index
        self.calls = calls(job)
        self.stage_size = n // job.pipeline_stages
        self.base = [self._base_ns(c, dur) for c in self.calls]
        self.seq = np.zeros(len(self.groups), np.int64)
        self.stream_end = np.zeros(len(self.groups), np.int64)
        self.hung = np.zeros(len(self.groups), bool)
        self.free = np.zeros(n, np.int64)       # NEVER: stuck in a blocking call
        self.stuck = np.zeros(n, bool)          # stuck in a call: makes no more
        self.sends: dict[tuple[int, int], np.ndarray] = {}  # per stage pair: sends so far
        self.recvs: dict[tuple[int, int], np.ndarray] = {}
        self.late = {f.a: f.b * 1_000_000 for f in job.faults if f.kind == "straggler"}
        self.stalls = sorted(job.ranks_with("stall"))
        self.random_stalls = [f.a for f in job.faults if f.kind == "stalls"]  # their ms
        self.hang = self._mask("hang")
        self.dead = self._mask("dead-node")
        self.mismatch = job.ranks_with("mismatch")
        self.death = {r: first_tick_at(r, t0_ns, self.t_fault) for r in np.flatnonzero(
            self.dead).tolist()}
        self.step = 0
        self.t_step = t0_ns + FIRST_STEP_NS
        self.instances = self.transfers = self.mismatched = self.hung_calls = 0
        self.late_ends: dict[int, list[int]] = {r: [] for r in self.late}  # straggler's

    def _mask(self, kind: str) -> np.ndarray:
        mask = np.zeros(self.job.ranks, bool)
        mask[sorted(self.job.ranks_with(kind))] = True
        return mask

    def _base_ns(self, call: Call | Transfer, dur: dict[tuple, int]) -> np.ndarray:
        if isinstance(call, Call):
            return np.array([dur[(call.op, call.bytes_in, call.bytes_out, tuple(row.tolist()))]
                             for row in self.layouts[call.layout]], np.int64)
        s = self.stage_size
        return np.array([dur[("isend", self.job.size, 0, (call.src * s + j, call.dst * s + j))]
                         for j in range(s)], np.int64)

    def next_step(self) -> list[Out]:
        job, n = self.job, self.job.ranks
        rng = np.random.default_rng([job.seed, self.step])
        t, step_ns = self.t_step, int(job.step_s * 1e9)
        stalls = {r: (rng.random() < STALL_P, rng.random() * 0.8,
                      int(rng.uniform(*STALL_MS) * 1e6)) for r in self.stalls}
        for ms in self.random_stalls:  # a healthy job's hiccup: a random rank, each step
            stalls[int(rng.integers(n))] = (True, rng.random() * 0.8, int(ms * 1e6))
        outs, stuck_after, last_end = [], np.zeros(n, bool), t
        for call, base in zip(self.calls, self.base):
            planned = t + int(call.at * step_ns)
            delay = np.zeros(n, np.int64)
            if planned >= self.t_fault:
                for r, ns in self.late.items():
                    delay[r] += ns
                for r, (stalls_now, at, ns) in stalls.items():
                    if stalls_now and call.at >= at:
                        delay[r] += ns
            arrive = np.maximum(planned + delay + np.abs(
                rng.normal(0, ARRIVAL_JITTER_NS, n)).astype(np.int64), self.free)
            active = ~self.stuck & (self.free < NEVER)
            if planned >= self.t_fault:
                active &= ~self.hang & ~self.dead
            noise = 1 + DURATION_NOISE * np.abs(rng.normal(size=len(base)))
            jitter = rng.integers(0, END_JITTER_NS, n)
            if isinstance(call, Call):
                out, end = self._collective(call, base, noise, arrive, active, planned)
            else:
                out, end = self._transfer(call, base, noise, arrive, active)
            ended = end < NEVER
            end = np.where(ended, end + jitter, NEVER)
            out.t_end = end[out.ranks]
            if ended.any():
                last_end = max(last_end, int(end[ended].max()))
            made = np.zeros(n, bool)
            made[out.ranks] = True
            blocking = not isinstance(call, Call) or call.blocking
            self.free[made] = end[made] if blocking else arrive[made]
            stuck_after |= made & ~ended
            if len(out.ranks):
                outs.append(out)
        self.stuck |= stuck_after
        self.step += 1
        self.t_step = max(t + step_ns, last_end + OPTIMIZER_NS)
        return outs

    def _collective(self, call: Call, base: np.ndarray, noise: np.ndarray, arrive: np.ndarray,
                    active: np.ndarray, planned: int) -> tuple[Out, np.ndarray]:
        rows = self.layouts[call.layout]
        gids = self.gid0[call.layout] + np.arange(len(rows))
        made = active[rows]
        complete = made.all(axis=1) & ~self.hung[gids]
        start = np.maximum(arrive[rows].max(axis=1), self.stream_end[gids])
        end_g = start + (base * noise).astype(np.int64)
        if self.death:  # a dead node does not finish what it was in
            complete &= ~(self.dead[rows].any(axis=1) & (end_g > self.t_fault))
        end_g = np.where(complete, end_g, NEVER)
        self.hung[gids[made.any(axis=1) & ~complete]] = True
        self.hung_calls += int((made.any(axis=1) & ~complete).sum())
        self.stream_end[gids[complete]] = end_g[complete]
        self.seq[gids[made.any(axis=1)]] += 1
        index = self.group_index[call.layout]
        ranks = np.flatnonzero(active)
        op = np.full(len(ranks), protocol.OP_CODE[call.op], np.uint8)
        if planned >= self.t_fault:
            for r in sorted(self.mismatch):  # once, at its first collective from then on
                if active[r]:
                    op[np.searchsorted(ranks, r)] = protocol.OP_CODE[OTHER_OP[call.op]]
                    self.mismatch.discard(r)
                    g = index[r]
                    if complete[g]:
                        complete[g] = False
                        self.mismatched += 1
            for r in self.late:
                if complete[index[r]] and len(self.late_ends[r]) < 16:
                    self.late_ends[r].append(int(end_g[index[r]]))
        self.instances += int(complete.sum())
        out = Out(ranks, op, self.gid0[call.layout] + index[ranks], self.seq[gids][index[ranks]],
                  np.full(len(ranks), -1, np.int64), np.full(len(ranks), call.bytes_in),
                  np.full(len(ranks), call.bytes_out), arrive[ranks], np.empty(0, np.int64),
                  protocol.DTYPE_CODE[call.dtype], call.flags, call.site)
        return out, end_g[index]

    def _transfer(self, t: Transfer, base: np.ndarray, noise: np.ndarray, arrive: np.ndarray,
                  active: np.ndarray) -> tuple[Out, np.ndarray]:
        s, n = self.stage_size, self.job.ranks
        src = t.src * s + np.arange(s)
        dst = t.dst * s + np.arange(s)
        pair = (t.src, t.dst)
        sent = self.sends.setdefault(pair, np.zeros(s, np.int64))
        got = self.recvs.setdefault(pair, np.zeros(s, np.int64))
        both = active[src] & active[dst]
        end_p = np.maximum(arrive[src], arrive[dst]) + (base * noise).astype(np.int64)
        if self.death:
            both &= ~((self.dead[src] | self.dead[dst]) & (end_p > self.t_fault))
        end_p = np.where(both, end_p, NEVER)
        sent += active[src]
        got += active[dst]
        self.transfers += int(both.sum())
        self.hung_calls += int(((active[src] | active[dst]) & ~both).sum())
        end = np.full(n, NEVER, np.int64)
        end[src], end[dst] = end_p, end_p
        ms, md = active[src], active[dst]
        ranks = np.r_[src[ms], dst[md]]
        k = len(ranks)
        out = Out(ranks, np.r_[np.full(ms.sum(), protocol.OP_CODE["isend"]),
                               np.full(md.sum(), protocol.OP_CODE["irecv"])].astype(np.uint8),
                  np.zeros(k, np.int64), np.r_[sent[ms], got[md]], np.r_[dst[ms], src[md]],
                  np.r_[np.full(ms.sum(), self.job.size), np.zeros(md.sum(), np.int64)],
                  np.r_[np.zeros(ms.sum(), np.int64), np.full(md.sum(), self.job.size)],
                  arrive[ranks], np.empty(0, np.int64), protocol.DTYPE_CODE["bfloat16"],
                  FLAGS_GPU | protocol.FLAG_ASYNC, PIPELINE)
        return out, end


def node_offsets(job: Job) -> np.ndarray:
    """Each node's clock minus the true time (ns): nodes' clocks disagree by a few ms."""
    rng = np.random.default_rng([job.seed, 1 << 32])
    skew = job.clock_skew_ms * 1e6
    return rng.uniform(-skew, skew, job.nodes).astype(np.int64)


# ---- a worker: the sockets of some ranks -----------------------------------------------------
def _topology(local: int) -> dict:
    """The node's 8 GPUs as NVML shows an HGX H200 board: NVSwitch, 18 NVLinks each."""
    gpus = [[i, f"GPU-5a1d{i:04d}-0000-4000-8000-simulated{i:03d}", GPU_NAME,
             f"00000000:{0x18 + 0x10 * i:02X}:00.0"] for i in range(RANKS_PER_NODE)]
    links = [[a, b, 18, "NODE" if a // 4 == b // 4 else "SYS"]
             for a in range(RANKS_PER_NODE) for b in range(a + 1, RANKS_PER_NODE)]
    return {"gpu": local, "gpus": gpus, "links": links, "note": ""}


class _Rank:
    """One simulated rank's emitter: its sockets, its records, its heartbeats."""

    def __init__(self, rank: int, job: Job, offset_ns: int) -> None:
        self.rank = rank
        self.world = job.ranks
        self.local = rank % RANKS_PER_NODE
        self.host = f"node{rank // RANKS_PER_NODE:03d}"
        self.pid = 4000 + self.local
        self.inc = secrets.randbits(63) or 1
        self.offset = int(offset_ns)
        self.death = NEVER  # its last tick, if its node dies
        self.hung = rank in job.ranks_with("hang")
        self.sock: zmq.Socket | None = None
        self.dealer: zmq.Socket | None = None
        self.todo: collections.deque = collections.deque()  # (t_start, t_end, record), by start
        # its emitter's batches, encoded ahead: (tick, [outbox entries]), and the next tick
        self.prepared: collections.deque = collections.deque()
        self.next_flush = 0
        self.watching: list = []
        self.announced: set[int] = set()
        self.next_id = 0
        self.next_hb = self.next_topo = self.next_tq = self.next_groups = 0
        self.gids: list[int] = []  # the groups it is a member of
        self.tq: tuple[int, int] | None = None  # the request awaiting its answer: t1, sent at
        self.clk: list[list[int]] = []
        self.dropped = 0
        self.moved = 0  # bytes of the records sent since the last heartbeat
        self.silent = False


@dataclass
class Sent:
    records: int = 0           # completed op records
    announced: int = 0         # in-flight snapshots (t_end -1)
    messages: collections.Counter = field(default_factory=collections.Counter)
    bytes: collections.Counter = field(default_factory=collections.Counter)
    dropped_records: int = 0
    dropped_messages: int = 0


class Worker:
    """Plays ranks [lo, hi) of the plan in real time: every slot (5 ms) the ranks of that phase
    tick (heartbeat, clock request, the batches of their flush), as their emitters would. A
    tick's batches hold what was due at its scheduled time, so they are encoded ahead, in the
    worker's idle time, and a late worker sends the same, later: its lateness is measured
    per slot and reported."""

    def __init__(self, job: Job, lo: int, hi: int, addr: str | None, dur: dict[tuple, int],
                 relays: list[str] | None = None) -> None:
        """``addr`` None: no sockets (``offline``)."""
        self.job, self.lo, self.hi, self.addr, self.dur = job, lo, hi, addr, dur
        offsets = node_offsets(job)
        self.ranks = [_Rank(r, job, offsets[r // RANKS_PER_NODE]) for r in range(lo, hi)]
        self.sent = Sent()
        # (rank, message, kind, records, in-flight snapshots, bytes those records moved)
        self.outbox: list[tuple[_Rank, bytes, str, int, int, int]] = []
        self._cursor = 0  # the next rank whose batches _prepare_ahead encodes
        self.asking: list[_Rank] = []  # ranks whose clock request leaves after the slot's sends
        self.lateness: list[int] = []
        self.rng = np.random.default_rng([job.seed, 2 << 32, lo])  # telemetry's noise
        if addr is not None:
            self._open(addr, relays)

    def _open(self, addr: str, relays: list[str] | None) -> None:
        """Each rank's sockets, as its emitter's: events to ``addr`` (or its node's relay) and
        the clock channel."""
        self.ctx = zmq.Context()
        # only the clock sockets awaiting an answer are polled: libzmq looks at every socket
        # it is given at every wake-up, and a worker wakes every slot
        self.poller = zmq.Poller()
        self.awaiting: dict[zmq.Socket, _Rank] = {}
        keys = None if relays else client_keys()  # to a node's relay: locally, no keys
        for rk in self.ranks:
            to = relays[rk.rank // RANKS_PER_NODE] if relays else addr
            caddr = clocksync.clock_addr(to)
            rk.sock = self.ctx.socket(zmq.PUSH)
            rk.sock.setsockopt(zmq.SNDHWM, SEND_HWM)
            rk.sock.setsockopt(zmq.LINGER, EXIT_LINGER_MS)
            rk.sock.setsockopt(zmq.IMMEDIATE, 1)
            if keys is not None:
                secure_client(rk.sock, keys)
            rk.sock.connect(to)
            if caddr is not None:
                rk.dealer = self.ctx.socket(zmq.DEALER)
                for opt, value in ((zmq.LINGER, 0), (zmq.IMMEDIATE, 1), (zmq.SNDHWM, 4),
                                   (zmq.MAXMSGSIZE, clocksync.WIRE_BYTES)):
                    rk.dealer.setsockopt(opt, value)
                if keys is not None:
                    secure_client(rk.dealer, keys)
                rk.dealer.connect(caddr)

    def connect(self, timeout_s: float) -> int:
        """Wait until every socket is connected (or the timeout); returns how many ranks are."""
        socks = [s for rk in self.ranks for s in (rk.sock, rk.dealer) if s is not None]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(s.getsockopt(zmq.EVENTS) & zmq.POLLOUT for s in socks):
                break
            time.sleep(0.01)
        return sum(bool(rk.sock.getsockopt(zmq.EVENTS) & zmq.POLLOUT) for rk in self.ranks)

    def first_round_trips(self, timeout_s: float) -> None:
        """A clock round trip before the first heartbeat, as a rank's emitter waits for one."""
        for rk in self.ranks:
            self._ask_time(rk)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.awaiting:
            self._answers(50)
        for rk in list(self.awaiting.values()):
            self._answered(rk)

    def _begin(self, t0: int) -> Plan:
        """The plan from ``t0``, each rank's first ticks and its groups."""
        plan = Plan(self.job, t0, self.dur)
        self.t_fault = plan.t_fault
        for rk in self.ranks:
            rk.death = plan.death.get(rk.rank, NEVER)
            rk.next_hb = rk.next_topo = rk.next_flush = first_tick_at(rk.rank, t0, t0)
            rk.next_tq = rk.next_hb + CLOCK_NS // 2
        self.groups = [(name, list(members)) for name, members in plan.groups]
        mine = {rk.rank: rk for rk in self.ranks}
        for gid, (_, members) in enumerate(self.groups):
            for r in members:
                if r in mine:
                    mine[r].gids.append(gid)
        return plan

    def _slots(self) -> list[list[_Rank]]:
        """The ranks that tick in each slot, indexed by rank % SLOTS."""
        slots = [self.ranks[i::SLOTS] for i in range(SLOTS)]  # ranks lo+i, lo+i+SLOTS...
        return [slots[(i - self.lo) % SLOTS] for i in range(SLOTS)]

    def run(self, t0: int, seconds: float) -> dict:
        plan = self._begin(t0)
        t_stop = t0 + int(seconds * 1e9)
        step_ns = int(self.job.step_s * 1e9)
        slot, slot_t = 0, t0
        cpu0 = time.process_time()
        slots = self._slots()
        while True:
            while plan.t_step < t_stop and plan.t_step < slot_t + 2 * step_ns:
                self._add(plan.next_step())
            now = time.time_ns()
            if now < slot_t:
                # every record that starts before the next step's start is known by now
                horizon = min(plan.t_step if plan.t_step < t_stop else NEVER, slot_t + 2 * step_ns)
                busy = self._prepare_ahead(min(slot_t, now + 1_000_000), horizon)
                self._answers(0 if busy else max(1, (slot_t - now) // 1_000_000))
                continue
            self.lateness.append(now - slot_t)
            for rk in slots[slot]:
                if not rk.silent:
                    self._tick(rk, slot_t, now)
            self._send_all()
            if slot_t >= t_stop and plan.t_step >= t_stop and self._done():
                break
            slot, slot_t = (slot + 1) % SLOTS, slot_t + SLOT_NS
        for rk in self.ranks:
            if not rk.silent:
                self._prepare(rk, slot_t + 1)
                while rk.prepared:
                    self.outbox += rk.prepared.popleft()[1]
                now = time.time_ns()
                self._heartbeat(rk, now)
                self._send(rk, protocol.encode_bye(rk.rank, rk.inc, now + rk.offset,
                                                   rk.dropped), "bye")
        self._send_all()
        cpu = time.process_time() - cpu0
        self.close()
        late = np.array(self.lateness or [0]) / 1e6
        per_s = 1_000_000_000 // SLOT_NS
        by_second = [float(late[i:i + per_s].max()) for i in range(0, len(late), per_s)]
        sent = {**vars(self.sent), "messages": dict(self.sent.messages),
                "bytes": dict(self.sent.bytes)}
        out = {"sent": sent, "cpu_s": cpu,
               "late_ms": [float(np.percentile(late, 50)), float(np.percentile(late, 99)),
                           float(late.max())], "late_slots": int((late > TICK_NS / 1e6).sum()),
               "late_by_s": by_second,
               "slots": len(late)}
        if self.lo == 0:  # every worker computed the whole plan: one says what it holds
            out["plan"] = {"instances": plan.instances, "transfers": plan.transfers,
                           "mismatched": plan.mismatched, "hung_calls": plan.hung_calls,
                           "late_ends": plan.late_ends, "steps": plan.step}
        return out

    def _done(self) -> bool:
        """Nothing more to send: what is left never ends."""
        return all(rk.silent or (not rk.todo and not rk.prepared
                                 and all(e[1] >= NEVER for e in rk.watching))
                   for rk in self.ranks)

    def _add(self, outs: list[Out]) -> None:
        """The plan's records of this worker's ranks, each rank's in the order it made them."""
        lo, hi = self.lo, self.hi
        new: dict[int, list] = {}
        for out in outs:
            mine = (out.ranks >= lo) & (out.ranks < hi)
            if not mine.any():
                continue
            rows = zip(*(a[mine].tolist() for a in (out.ranks, out.op, out.gid, out.seq, out.peer,
                                                    out.bytes_in, out.bytes_out, out.t_start,
                                                    out.t_end)))
            for r, op, gid, seq, peer, b_in, b_out, t0, t1 in rows:
                off = self.ranks[r - lo].offset
                rec = [0, op, protocol.NO_CODE, gid, seq, peer, b_in, b_out, out.dtype,
                       out.flags, t0 + off, -1 if t1 >= NEVER else t1 + off, out.site]
                new.setdefault(r, []).append((t0, t1, rec))
        for r, entries in new.items():
            rk = self.ranks[r - lo]
            entries.sort(key=lambda e: e[0])
            for e in entries:
                e[2][ID] = rk.next_id
                rk.next_id += 1
            rk.todo.extend(entries)

    def _tick(self, rk: _Rank, now: int, clock_ns: int) -> None:
        """``rk``'s emitter tick scheduled at ``now``, run at ``clock_ns`` (later if late)."""
        if rk.tq is not None and now - rk.tq[1] > REPLY_WAIT_NS:
            self._answered(rk)  # no answer in time: a rank's clock client gives up too
        if now >= rk.next_tq:
            self.asking.append(rk)
            rk.next_tq += CLOCK_NS
        if now >= rk.next_hb:
            self._heartbeat(rk, clock_ns)
            rk.next_hb += HEARTBEAT_NS
        self._prepare(rk, now + 1)  # if the idle time did not get this far
        while rk.prepared and rk.prepared[0][0] <= now:
            self.outbox += rk.prepared.popleft()[1]
        if now >= rk.death:  # its node died: this tick was its last
            rk.silent = True

    def _prepare_ahead(self, until_ns: int, horizon: int) -> bool:
        """Encode the ranks' batches of the ticks before ``horizon``, round the ranks, until
        ``until_ns``; returns whether some are left. DDP's records come in bursts (a bucket
        ends on every rank at once): encoded in the idle time between, they leave on time."""
        ranks = self.ranks
        for _ in range(len(ranks)):
            rk = ranks[self._cursor]
            if rk.next_flush < horizon and rk.next_flush <= rk.death:
                self._prepare(rk, horizon)
                if time.time_ns() >= until_ns:
                    return True
            self._cursor = (self._cursor + 1) % len(ranks)
        return False

    def _prepare(self, rk: _Rank, until: int) -> None:
        """Encode ``rk``'s batches of its ticks before ``until`` (and none after its death)."""
        while rk.next_flush < until and rk.next_flush <= rk.death:
            entries = self._flush(rk, rk.next_flush)
            if entries:
                rk.prepared.append((rk.next_flush, entries))
            rk.next_flush += TICK_NS

    def _flush(self, rk: _Rank, now: int) -> list:
        """The emitter's flush at its tick ``now``: batches of the records complete by then and
        snapshots of those running longer than ANNOUNCE_S, not announced yet."""
        todo = rk.todo
        while todo and todo[0][0] <= now:
            rk.watching.append(todo.popleft())
        if not rk.watching:
            return []
        ready = [e for e in rk.watching if e[1] <= now]
        if ready:
            rk.watching = [e for e in rk.watching if e[1] > now]
        before = now - ANNOUNCE_NS
        running = [e for e in rk.watching if e[0] < before and e[2][ID] not in rk.announced]
        if not ready and not running:
            return []
        records = [e[2] for e in ready]
        if rk.announced and ready:
            rk.announced.difference_update(rec[ID] for rec in records)
        snapshots = []
        for e in running:
            rk.announced.add(e[2][ID])
            snap = e[2][:]
            snap[T_END] = -1
            snapshots.append(snap)
        moved = sum(rec[BYTES_IN] + rec[BYTES_OUT] for rec in records)
        batch = records + snapshots
        entries = []
        for i in range(0, len(batch), protocol.MAX_BATCH):
            chunk = batch[i:i + protocol.MAX_BATCH]
            done = sum(rec[T_END] >= 0 for rec in chunk)
            data = encode_batch(rk.rank, chunk, SITES, rk.inc,
                                groups=self.groups if self.job.groups_in_batches else None)
            entries.append((rk, data, "ops", done, len(chunk) - done, moved))
            moved = 0
        return entries

    def _heartbeat(self, rk: _Rank, now: int) -> None:
        dt = HEARTBEAT_NS / 1e9
        util = 0.0 if rk.hung and now >= self.t_fault else 88 + 10 * self.rng.random()
        moved, rk.moved = rk.moved, 0
        tel = {"cpu_pct": 100 + 30 * self.rng.random(), "rss_bytes": 12_000_000_000,
               "gpu_util_pct": util, "gpu_mem_used": 118_000_000_000.0,
               "gpu_mem_total": float(GPU_MEM_TOTAL), "gpu_power_w": 150 + 5.5 * util,
               "nvlink_tx_bps": 0.875 * moved / dt, "nvlink_rx_bps": 0.875 * moved / dt,
               "pcie_tx_bps": 0.125 * moved / dt, "pcie_rx_bps": 0.125 * moved / dt}
        clk, rk.clk = rk.clk, []
        self._send(rk, protocol.encode_heartbeat(
            rk.rank, world=rk.world, host=rk.host, pid=rk.pid, backend="nccl",
            device=f"cuda:{rk.local}", t_ns=now + rk.offset, dropped=rk.dropped, tel=tel,
            inc=rk.inc, job=JOB_KEY, clk=clk, simulated=True), "hb")
        if now >= rk.next_topo:
            self._send(rk, protocol.encode_topology(rk.rank, rk.host, _topology(rk.local),
                                                    rk.inc), "topo")
            rk.next_topo = now + TOPOLOGY_NS
        if now >= rk.next_groups and not self.job.groups_in_batches:
            for data in encode_groups(rk.rank, self.groups, rk.gids, rk.inc):
                self._send(rk, data, "grp")
            rk.next_groups = now + GROUPS_NS

    def _send(self, rk: _Rank, data: bytes, kind: str) -> None:
        """Queue a message: a slot's messages leave together (``_send_all``)."""
        self.outbox.append((rk, data, kind, 0, 0, 0))

    def _send_all(self) -> None:
        """Send the slot's messages back to back. Each send after a pause wakes libzmq's I/O
        thread, which costs several times the send itself on a virtualised core; a burst
        wakes it once."""
        sent = self.sent
        for rk, data, kind, done, running, moved in self.outbox:
            rk.moved += moved
            try:
                rk.sock.send(data, zmq.NOBLOCK)
            except zmq.Again:
                rk.dropped += done + running
                sent.dropped_records += done + running
                sent.dropped_messages += 1
                continue
            sent.messages[kind] += 1
            sent.bytes[kind] += len(data)
            sent.records += done
            sent.announced += running
        self.outbox = []
        for rk in self.asking:
            self._ask_time(rk)
        self.asking = []

    def _ask_time(self, rk: _Rank) -> None:
        if rk.dealer is None:
            return
        sent = time.time_ns()
        t1 = sent + rk.offset
        try:
            rk.dealer.send(clocksync.encode_request(t1), zmq.NOBLOCK)
        except zmq.Again:
            return self._answered(rk)
        rk.tq = (t1, sent)
        if rk.dealer not in self.awaiting:
            self.awaiting[rk.dealer] = rk
            self.poller.register(rk.dealer, zmq.POLLIN)

    def _answered(self, rk: _Rank) -> None:
        """No request of ``rk`` awaits an answer any more (answered, or too late now)."""
        rk.tq = None
        if self.awaiting.pop(rk.dealer, None) is not None:
            self.poller.unregister(rk.dealer)

    def _answers(self, timeout_ms: int) -> None:
        """Wait up to ``timeout_ms`` for the clock channel's answers, and note them."""
        if not self.awaiting:
            time.sleep(timeout_ms / 1000)
            return
        for sock, _ in self.poller.poll(timeout_ms):
            rk = self.awaiting[sock]
            while True:
                try:
                    data = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                t4 = time.time_ns() + rk.offset
                reply = clocksync.decode_reply(data)
                if (reply is not None and rk.tq is not None and reply[0] == rk.tq[0]
                        and t4 - rk.offset - rk.tq[1] <= REPLY_WAIT_NS + SLOT_NS):
                    rk.clk = (rk.clk + [[reply[0], reply[1], reply[2], t4]])[
                        -protocol.CLOCK_SAMPLES_MAX:]
                    self._answered(rk)
                    break

    def close(self) -> None:
        for rk in self.ranks:
            if rk.dealer is not None:
                rk.dealer.close(linger=0)
            rk.sock.close()  # lingers EXIT_LINGER_MS, as a rank's emitter at exit
        self.ctx.term()


def offline(job: Job, seconds: float, t0: int = OFFLINE_T0_NS) -> Iterator[tuple[int, list[bytes]]]:
    """What the fleet's ranks would send, slot by slot, with no sockets and no waiting: each
    slot's true time (ns) and the wire messages its ranks' emitters send then, the same bytes
    as ``Worker.run`` sends, for pure tests and the screen at scale. No clock round trips
    (heartbeats carry no ``clk``), no goodbyes: a job still running."""
    worker = Worker(job, 0, job.ranks, None, durations(job))
    plan = worker._begin(t0)
    slots = worker._slots()
    step_ns = int(job.step_s * 1e9)
    t_stop = t0 + int(seconds * 1e9)
    for n in range(int(seconds * 1e9) // SLOT_NS):
        slot_t = t0 + n * SLOT_NS
        while plan.t_step < t_stop and plan.t_step < slot_t + 2 * step_ns:
            worker._add(plan.next_step())
        for rk in slots[n % SLOTS]:
            if not rk.silent:
                worker._tick(rk, slot_t, slot_t)
        worker.asking = []
        for rk, _, _, _, _, moved in worker.outbox:  # as _send_all: the links' telemetry
            rk.moved += moved
        yield slot_t, [data for _, data, *_ in worker.outbox]
        worker.outbox = []


def _work(job: Job, lo: int, hi: int, addr: str, dur: dict, seconds: float, conn, go, t0,
          relays: list[str] | None) -> None:
    """A worker process: connect, say so, wait for the start, play, report."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the fleet
    try:
        worker = Worker(job, lo, hi, addr, dur, relays)
        connected = worker.connect(10.0)
        worker.first_round_trips(1.0)
        conn.send({"connected": connected})
        if not go.wait(60) or not t0.value:  # no start: the parent gave up
            worker.close()
            return
        conn.send(worker.run(t0.value, seconds))
    except Exception as exc:  # the parent reports it
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def _relay_host(addr: str, nodes: range, conn, stop) -> None:
    """A process of real relays (``commviz.relay``), one per simulated node in ``nodes``, each
    named as its node: sends their addresses, and when ``stop`` is set, closes them and sends
    what they forwarded and dropped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    relays = []
    try:
        cpu0 = time.process_time()
        relays = [Relay(addr, "tcp://127.0.0.1:*", environ={**os.environ,
                                                             ENV_HOST: f"node{n:03d}"})
                  for n in nodes]
        conn.send({"addrs": [r.addr for r in relays]})
        stop.wait()
        closing = [threading.Thread(target=r.close) for r in relays]  # each waits for quiet
        for t in closing:
            t.start()
        for t in closing:
            t.join()
        conn.send({"cpu_s": time.process_time() - cpu0,
                   **{k: sum(getattr(r, k) for r in relays)
                      for k in ("forwarded", "envelopes", "dropped", "lost")}})
    except Exception as exc:  # the parent reports it
        conn.send({"error": f"relay: {type(exc).__name__}: {exc}"})
    finally:
        for r in relays:
            r.close()
        conn.close()


class RelayFleet:
    """One real relay per simulated node, RELAYS_PER_PROC to a process, forwarding to the
    viewer: the fleet's ranks report to their node's relay."""

    def __init__(self, addr: str, job: Job, timeout_s: float = 30.0) -> None:
        ctx = mp.get_context("fork")
        self.stop = ctx.Event()
        self.procs, self.pipes, self.addrs, self.errors = [], [], [], []
        for lo in range(0, job.nodes, RELAYS_PER_PROC):
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_relay_host, daemon=True, args=(
                addr, range(lo, min(lo + RELAYS_PER_PROC, job.nodes)), child, self.stop))
            p.start()
            child.close()
            self.procs.append(p)
            self.pipes.append(parent)
        for conn in self.pipes:
            msg = conn.recv() if conn.poll(timeout_s) else {"error": "relay: no start"}
            self.addrs += msg.get("addrs", [])
            if "error" in msg:
                self.errors.append(msg["error"])

    def close(self, report: FleetReport) -> None:
        """Stop the relays (each sends on what it still holds) and add their counts."""
        self.stop.set()
        for conn in self.pipes:
            msg = conn.recv() if conn.poll(30) else {"error": "relay: no report in time"}
            if "error" in msg:
                report.errors.append(msg["error"])
                continue
            for key, value in msg.items():
                report.relayed[key] = report.relayed.get(key, 0) + value
        report.relays = len(self.addrs)
        report.relay_procs = len(self.procs)
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
        for conn in self.pipes:
            conn.close()


# ---- the fleet ------------------------------------------------------------------------------
@dataclass
class FleetReport:
    job: Job
    seconds: float
    procs: int
    connected: int
    records: int = 0
    announced: int = 0
    messages: dict = field(default_factory=dict)
    bytes: dict = field(default_factory=dict)
    dropped_records: int = 0
    dropped_messages: int = 0
    instances: int = 0
    transfers: int = 0
    mismatched: int = 0
    hung_calls: int = 0
    steps: int = 0
    late_ends: dict = field(default_factory=dict)  # straggler -> its late instances' ends (ns)
    late_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)  # slot lateness p50, p99, max
    late_slots: int = 0        # slots run more than a tick late
    late_by_s: list = field(default_factory=list)  # the latest slot of each second (ms)
    slots: int = 0
    cpu_s: float = 0.0
    started_ns: int = 0
    ended_ns: int = 0
    errors: list = field(default_factory=list)
    relays: int = 0            # --relays: real relays between the ranks and the viewer
    relay_procs: int = 0
    relayed: dict = field(default_factory=dict)  # forwarded, envelopes, dropped, lost, cpu_s

    @property
    def kept_real_time(self) -> bool:
        """Whether the workers kept their schedule: 99% of slots within a tick of their time,
        none more than 5 ticks late."""
        p99, worst = self.late_ms[1], self.late_ms[2]
        return not self.errors and p99 <= TICK_NS / 1e6 and worst <= 5 * TICK_NS / 1e6

    def lines(self) -> list[str]:
        job = self.job
        wall = (self.ended_ns - self.started_ns) / 1e9
        kinds = ", ".join(f"{k} {self.messages.get(k, 0):,}"
                          for k in ("ops", "hb", "grp", "topo", "bye"))
        out = [f"{SIMULATED}: {job.ranks} simulated ranks on {job.nodes} simulated nodes "
               f"(node000..node{job.nodes - 1:03d}), job {JOB_KEY!r}, shape {job.shape}, "
               f"{self.procs} processes, {wall:.1f} s",
               f"{SIMULATED}: sent {self.records:,} op records (+{self.announced:,} in-flight "
               f"snapshots) in {sum(self.messages.values()):,} messages ({kinds}), "
               f"{sum(self.bytes.values()):,} bytes; dropped {self.dropped_records:,} records "
               f"in {self.dropped_messages:,} messages; {self.connected}/{job.ranks} ranks "
               "connected",
               f"{SIMULATED}: complete: {self.instances:,} collective instances, "
               f"{self.transfers:,} transfers; {self.mismatched} mismatched, "
               f"{self.hung_calls} calls that never end; {self.steps} steps"]
        p50, p99, worst = self.late_ms
        share = self.cpu_s / wall if wall > 0 else 0.0
        timing = (f"slots late p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {worst:.1f} ms; "
                  f"{self.late_slots} of {self.slots} slots over a tick; simulator CPU "
                  f"{self.cpu_s:.1f} s ({share:.0%} of a core)")
        if self.kept_real_time:
            out.append(f"{SIMULATED}: kept real time ({timing})")
        else:
            out.append(f"{SIMULATED}: FELL BEHIND its schedule ({timing}): a measurement of "
                       "the viewer now would measure the simulator")
            out.append(f"{SIMULATED}: latest slot of each second (ms): "
                       + " ".join(f"{ms:.0f}" for ms in self.late_by_s))
        if self.relays:
            r = self.relayed
            out.append(f"{SIMULATED}: through {self.relays} real relays ({self.relay_procs} "
                       f"processes): forwarded {r.get('forwarded', 0):,} messages in "
                       f"{r.get('envelopes', 0):,} envelopes, dropped {r.get('dropped', 0):,} "
                       f"records in {r.get('lost', 0):,} messages; relays' CPU "
                       f"{r.get('cpu_s', 0.0):.1f} s ({r.get('cpu_s', 0.0) / wall:.2f} cores)")
        out += [f"{SIMULATED}: worker error: {e}" for e in self.errors]
        return out


def split(job: Job, procs: int | None) -> list[tuple[int, int]]:
    """Ranks per worker: whole nodes, about RANKS_PER_PROC each unless ``procs`` says (but
    at most MAX_RANKS_PER_PROC)."""
    procs = max(procs or math.ceil(job.ranks / RANKS_PER_PROC),
                math.ceil(job.ranks / MAX_RANKS_PER_PROC))
    procs = max(1, min(procs, job.nodes))
    bounds = [round(i * job.nodes / procs) * RANKS_PER_NODE for i in range(procs + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def run_fleet(addr: str, job: Job, seconds: float, procs: int | None = None,
              connect_timeout_s: float = 30.0, relays: bool = False) -> FleetReport:
    """Play ``job`` for ``seconds`` (the steps that start by then run to their end) into the
    viewer at ``addr``, from forked worker processes; returns what was sent. ``relays``: each
    simulated node's ranks report to a real relay of their own (``RelayFleet``). Every worker
    and relay is ended (joined, or killed past its time) before it returns."""
    dur = durations(job)  # before the fork: the workers share it
    chunks = split(job, procs)
    ctx = mp.get_context("fork")
    go, t0 = ctx.Event(), ctx.Value("q", 0)
    pipes, workers = [], []
    fleet = RelayFleet(addr, job) if relays else None
    if fleet is not None and fleet.errors:
        report = FleetReport(job, seconds, 0, 0, errors=fleet.errors)
        fleet.close(report)
        return report
    try:
        for lo, hi in chunks:
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_work, args=(job, lo, hi, addr, dur, seconds, child, go, t0,
                                                fleet.addrs if fleet else None),
                            daemon=True)
            p.start()
            child.close()
            pipes.append(parent)
            workers.append(p)
        report = FleetReport(job, seconds, len(chunks), 0)
        for conn in pipes:
            msg = conn.recv() if conn.poll(connect_timeout_s) else {"error": "no start"}
            report.connected += msg.get("connected", 0)
            if "error" in msg:
                report.errors.append(msg["error"])
        if report.errors:
            return report
        t0.value = time.time_ns() + 100_000_000
        report.started_ns = t0.value
        go.set()
        limit = seconds + 3 * job.step_s + 30
        for conn in pipes:
            msg = conn.recv() if conn.poll(limit) else {"error": "no report in time"}
            _merge(report, msg)
        report.ended_ns = time.time_ns()
        if fleet is not None:
            fleet.close(report)
            fleet = None
        return report
    finally:
        if fleet is not None:
            fleet.close(FleetReport(job, seconds, 0, 0))
        go.set()
        for p in workers:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        for conn in pipes:
            conn.close()


def _merge(report: FleetReport, msg: dict) -> None:
    if "error" in msg:
        report.errors.append(msg["error"])
        return
    sent = msg["sent"]
    report.records += sent["records"]
    report.announced += sent["announced"]
    report.dropped_records += sent["dropped_records"]
    report.dropped_messages += sent["dropped_messages"]
    for key in ("messages", "bytes"):
        total = getattr(report, key)
        for kind, count in sent[key].items():
            total[kind] = total.get(kind, 0) + count
    report.cpu_s += msg["cpu_s"]
    report.late_ms = tuple(max(a, b) for a, b in zip(report.late_ms, msg["late_ms"]))
    report.late_slots += msg["late_slots"]
    report.late_by_s = [max(pair) for pair in itertools.zip_longest(
        report.late_by_s, msg["late_by_s"], fillvalue=0.0)]
    report.slots += msg["slots"]
    plan = msg.get("plan")
    if plan is not None:
        report.instances, report.transfers = plan["instances"], plan["transfers"]
        report.mismatched, report.hung_calls = plan["mismatched"], plan["hung_calls"]
        report.late_ends, report.steps = plan["late_ends"], plan["steps"]


# ---- measuring a viewer ---------------------------------------------------------------------
class ViewerWatch:
    """Samples a viewer process as the fleet plays into it: its RSS and CPU, and what its
    recording holds (op lines, the diagnosis' lines), read as it grows. The recorder writes
    a message's lines once the model has applied it and flushes at least once a second (a
    compact one, a chunk), so the op lines written are the records applied, to within a
    second."""

    def __init__(self, pid: int, recording: str, every_s: float = 0.2) -> None:
        import psutil  # noqa: PLC0415  (a dependency of commviz, needed only here)

        self.proc = psutil.Process(pid)
        self.cpu0 = sum(self.proc.cpu_times()[:2])
        self.path, self.every_s = recording, every_s
        self.ops = 0
        self.samples: list[tuple[int, int]] = []  # (wall ns, op lines so far)
        self.findings: list[dict] = []
        self.peak_rss = 0
        self._partial = b""
        self._offset = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def sample(self) -> None:
        try:
            self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)
        except Exception:  # psutil.NoSuchProcess: it ended
            pass
        if compact.named_compact(self.path):
            self._sample_compact()
            return
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        data, _, self._partial = (self._partial + data).rpartition(b"\n")
        self.ops += data.count(b'"kind":"op"')
        if b'"kind":"diag"' in data:
            self.findings += [json.loads(line) for line in data.split(b"\n")
                              if b'"kind":"diag"' in line]
        self.samples.append((time.time_ns(), self.ops))

    def _sample_compact(self) -> None:
        """As ``sample``, of a compact recording: its chunks written since the last sample
        (the last one, if cut short, is read again next time)."""
        try:
            for chunk in compact.chunks(self.path, start=self._offset or None):
                self._offset = chunk.end
                self.ops += int((chunk.cols["t_end"] >= 0).sum())
                self.findings += [line for line in chunk.lines
                                  if isinstance(line, dict) and line.get("kind") == "diag"]
        except (FileNotFoundError, compact.CompactError):
            return  # not there yet, or its header alone cut short
        self.samples.append((time.time_ns(), self.ops))

    def ops_at(self, t_ns: int) -> int:
        return max((n for t, n in self.samples if t <= t_ns), default=0)

    def cpu_s(self) -> float:
        try:
            return sum(self.proc.cpu_times()[:2]) - self.cpu0
        except Exception:  # it ended
            return float("nan")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sample()


def wait_quiet(load: float, out=sys.stdout) -> None:
    """Wait (up to 15 minutes) until the 1-minute load average has been below ``load`` at two
    readings 20 s apart: the average lags, and a run just ended still weighs on it."""
    deadline = time.monotonic() + 900
    quiet = 0
    while quiet < 2 and time.monotonic() < deadline:
        now = os.getloadavg()[0]
        quiet = quiet + 1 if now < load else 0
        if quiet < 2:
            print(f"{SIMULATED}: load {now:.2f} (quiet below {load}): waiting", file=out,
                  flush=True)
            time.sleep(20)


def measure(job: Job, seconds: float, addr: str, recording: str, procs: int | None,
            nice: int = 0, out=sys.stdout, relays: bool = False) -> int:
    """Start ``commviz watch --headless --record RECORDING`` at ``addr`` (at ``nice``), play the
    fleet into it and say how it kept up: records applied when the fleet ended, how long it
    needed after, when it named each straggler, its peak RSS and CPU, the recording's bytes per
    op record."""
    cmd = [sys.executable, "-m", "commviz", "watch", "--headless", "--record", recording,
           "--bind", addr]
    if nice:  # the ranks' schedule first: a viewer does not share its host with its job
        cmd = ["nice", "-n", str(nice), *cmd]
    viewer = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    said: collections.deque[str] = collections.deque(maxlen=40)
    first = threading.Event()

    def read() -> None:
        for line in viewer.stdout:
            said.append(line.rstrip("\n"))
            first.set()
        first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not first.wait(30) or viewer.poll() is not None:
            print(f"{SIMULATED}: the viewer did not start: {' '.join(said)}", file=out)
            return 1
        watch = ViewerWatch(viewer.pid, recording)
        load0 = os.getloadavg()
        report = run_fleet(addr, job, seconds, procs, relays=relays)
        end = time.time_ns()
        cpu_during = watch.cpu_s()
        for line in report.lines():
            print(line, file=out, flush=True)
        applied = watch.ops_at(end)
        deadline, last, grown = time.monotonic() + 900, -1, time.monotonic()
        while watch.ops < report.records and time.monotonic() < deadline:
            if watch.ops != last:
                last, grown = watch.ops, time.monotonic()
            elif time.monotonic() - grown > 60:
                break
            time.sleep(0.2)
        caught = next((t for t, n in watch.samples if n >= report.records), None)
        viewer.send_signal(signal.SIGINT)
        try:
            viewer.wait(600)
        except subprocess.TimeoutExpired:
            viewer.kill()
            viewer.wait(10)
        reader.join(10)
        watch.stop()
        size = os.path.getsize(recording)
        wall = (report.ended_ns - report.started_ns) / 1e9
        lines = [f"machine load (1, 5, 15 min) {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} "
                 f"at the start, {os.getloadavg()[0]:.2f} at the end",
                 f"viewer: applied {applied:,} of {report.records:,} records when the fleet "
                 f"ended ({applied / max(report.records, 1):.0%})",
                 f"viewer: applied them all {max(0, caught - end) / 1e9:.1f} s after the fleet "
                 "ended" if caught is not None else
                 f"viewer: had applied {watch.ops:,} records when it was stopped",
                 f"viewer: CPU {cpu_during:.1f} s while the fleet played ({cpu_during / wall:.2f} "
                 f"cores), peak RSS {watch.peak_rss / 2**20:,.0f} MiB",
                 f"recording: {size:,} bytes, {watch.ops:,} op records, "
                 f"{size / max(watch.ops, 1):,.0f} bytes per op record"]
        for rank, ends in sorted(report.late_ends.items()):
            named = next((f["t_ns"] for f in watch.findings
                          if f.get("type") == "straggler" and rank in f.get("ranks", [])), None)
            began = report.started_ns + int(job.fault_at * 1e9)
            if named is None:
                lines.append(f"straggler {rank}: never named")
            elif len(ends) >= 3:
                lines.append(f"straggler {rank}: named {(named - ends[2]) / 1e9:.1f} s after its "
                             f"3rd late instance ({(named - began) / 1e9:.1f} s after it began)")
        for line in lines:
            print(f"{SIMULATED}: {line}", file=out)
        print(f"{SIMULATED}: the viewer's last lines:", file=out)
        for line in list(said)[-8:]:
            print(f"    {line}", file=out)
        return 0 if report.kept_real_time else 2
    finally:
        if viewer.poll() is None:
            viewer.kill()
            viewer.wait(10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Play a fleet of SIMULATED ranks (8 per simulated node) into a commviz "
                    "viewer over the real wire protocol. Nothing it sends is a real job: its "
                    f"job key is {JOB_KEY!r}.")
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--shape", choices=SHAPES, default="ddp")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--to", default="tcp://127.0.0.1:5555", help="the viewer's address")
    p.add_argument("--buckets", type=int, default=10,
                   help="calls of one kind per step: DDP buckets, FSDP units, tp-dp layers, "
                        "pipeline microbatches")
    p.add_argument("--step-s", type=float, default=1.0, help="seconds per training step")
    p.add_argument("--size-mib", type=float, default=25.0,
                   help="MiB of each bucket, unit or activation")
    p.add_argument("--stages", type=int, default=0, help="pipeline stages (default: nodes, <= 4)")
    p.add_argument("--fault", action="append", default=[], type=Fault.parse,
                   help="straggler:RANK:MS, stall:RANK, stalls:MS (a random rank each step), "
                        "hang:RANK, dead-node:NODE, "
                        "mismatch:RANK, slow-link:NODE:NODE (repeatable)")
    p.add_argument("--fault-at", type=float, default=0.0, help="seconds from the start")
    p.add_argument("--procs", type=int, default=None,
                   help=f"worker processes (default: one per {RANKS_PER_PROC} ranks)")
    p.add_argument("--clock-skew-ms", type=float, default=5.0,
                   help="each node's clock is off the true time by up to this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--groups-in-batches", action="store_true",
                   help="every batch lists its groups' members, as ranks did before the "
                        "groups were announced once (grp): to compare the two")
    p.add_argument("--watch", metavar="REC",
                   help="start `commviz watch --headless --record REC` at --to and measure it")
    p.add_argument("--viewer-nice", type=int, default=0, metavar="N",
                   help="with --watch: run the viewer at this niceness")
    p.add_argument("--relays", action="store_true",
                   help="one real relay (commviz.relay) per simulated node between its ranks "
                        "and the viewer")
    p.add_argument("--wait-quiet", type=float, metavar="LOAD",
                   help="first wait until the 1-minute load average is below LOAD")
    args = p.parse_args(argv)
    try:
        job = Job(args.ranks, args.shape, args.buckets, args.step_s,
                  int(args.size_mib * 2**20), args.stages, tuple(args.fault), args.fault_at,
                  args.clock_skew_ms, args.seed, args.groups_in_batches)
    except ValueError as exc:
        p.error(str(exc))
    print(f"{SIMULATED}: {job.ranks} simulated ranks, not a real job, into {args.to}",
          flush=True)
    if args.wait_quiet is not None:
        wait_quiet(args.wait_quiet)
    if args.watch:
        return measure(job, args.seconds, args.to, args.watch, args.procs, args.viewer_nice,
                       relays=args.relays)
    report = run_fleet(args.to, job, args.seconds, args.procs, relays=args.relays)
    for line in report.lines():
        print(line)
    return 0 if report.kept_real_time else 2


if __name__ == "__main__":
    sys.exit(main())
