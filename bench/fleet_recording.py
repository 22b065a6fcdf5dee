"""A long recording of a fleet of SIMULATED ranks, written straight to a file: what
``commviz watch --record`` would have written of ``bench/fleet.py``'s job, without sockets or
a viewer, so that a 10-minute 1,024-rank FSDP-like recording (some 60 M op records) takes
minutes to make on a small machine rather than the hour a live fleet would need.

The job is ``fleet.Plan``'s, seeded as the live fleet's: the same collectives, cost-model
durations, jitter, node clock offsets and faults. What the ranks' emitters would have sent
is written through the recorder's own writers (``recording.Recorder``: the rank, tel, topo
and bye lines from the heartbeats, topologies and goodbyes it is given; its compact writer,
``compact.Writer``, for the op records, as ``commviz export`` gives it columns): each 50 ms
emitter tick, every rank's records complete by its tick, and snapshots (``t_end`` -1) of its
ops running longer than ``ANNOUNCE_S``; a heartbeat with telemetry and a clock round trip
every 0.5 s; the node's GPUs every 10 s; a chunk a second, as the recorder flushes. Every
heartbeat says ``sim``, so the recording's ranks read as simulated (``commviz play`` says so
in its header, as for the live fleet). What it does not have: a live viewer's lag (each
record is written at its rank's tick), shedding, and findings (``diag`` lines).

    python bench/fleet_recording.py --ranks 1024 --shape fsdp --buckets 50 --seconds 600 \
        --out /tmp/fsdp600.cvz
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet  # noqa: E402  (bench/fleet.py, beside this file)

from commviz.viewer import recording  # noqa: E402
from commviz.wire import protocol  # noqa: E402

TICKS_PER_CHUNK = 20  # the recorder flushes a chunk a second


class _Ranks:
    """What each rank's emitter holds between ticks: its records by the tick that sends
    them."""

    def __init__(self, job: fleet.Job, t0: int) -> None:
        n = job.ranks
        self.n, self.t0 = n, t0
        self.offset = fleet.node_offsets(job)[np.arange(n) // fleet.RANKS_PER_NODE]
        self.phase = np.array([fleet.tick_phase_ns(r) for r in range(n)], np.int64)
        self.inc = np.random.default_rng([job.seed, 7]).integers(1, 1 << 62, n)
        self.next_id = np.zeros(n, np.int64)
        self.by_tick: dict[int, list[dict[str, np.ndarray]]] = {}

    def tick_at_or_after(self, rank: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The index of each rank's first emitter tick at or after ``t`` (true time)."""
        base = self.t0 + self.phase[rank]
        return np.maximum(0, -(-(t - base) // fleet.TICK_NS))

    def add(self, outs: list[fleet.Out]) -> None:
        """A step's records, to the ticks that send them (and their running snapshots)."""
        if not outs:
            return
        cols = {"rank": np.concatenate([o.ranks for o in outs]),
                "op": np.concatenate([o.op for o in outs]),
                "gid": np.concatenate([o.gid for o in outs]),
                "seq": np.concatenate([o.seq for o in outs]),
                "peer": np.concatenate([o.peer for o in outs]),
                "bytes_in": np.concatenate([o.bytes_in for o in outs]),
                "bytes_out": np.concatenate([o.bytes_out for o in outs]),
                "t_start": np.concatenate([o.t_start for o in outs]),
                "t_end": np.concatenate([o.t_end for o in outs]),
                "dtype": np.concatenate([np.full(len(o.ranks), o.dtype) for o in outs]),
                "flags": np.concatenate([np.full(len(o.ranks), o.flags) for o in outs]),
                "site": np.concatenate([np.full(len(o.ranks), o.site) for o in outs])}
        order = np.lexsort((cols["t_start"], cols["rank"]))  # each rank's in its call order
        cols = {k: v[order] for k, v in cols.items()}
        rank = cols["rank"]
        first = np.r_[True, rank[1:] != rank[:-1]]
        starts = np.flatnonzero(first)
        counts = np.diff(np.r_[starts, len(rank)])
        within = np.arange(len(rank)) - np.repeat(starts, counts)
        cols["id"] = self.next_id[rank] + within
        self.next_id[rank[starts]] += counts
        ends = cols["t_end"] < fleet.NEVER
        done_tick = np.where(ends, self.tick_at_or_after(rank, cols["t_end"]), fleet.NEVER)
        # announced at the first tick after ANNOUNCE_S from its start, if it is still running
        told = self.tick_at_or_after(rank, cols["t_start"] + fleet.ANNOUNCE_NS + 1)
        running = told < done_tick
        for tick, mask, in_flight in ((done_tick, ends, False), (told, running, True)):
            sel = {k: v[mask] for k, v in cols.items()}
            if in_flight:
                sel["t_end"] = np.full(int(mask.sum()), -1, np.int64)
            ticks = tick[mask]
            for k in np.unique(ticks).tolist():
                at = ticks == k
                self.by_tick.setdefault(k, []).append({c: v[at] for c, v in sel.items()})

    def take(self, tick: int) -> dict[str, np.ndarray] | None:
        """The records sent at emitter tick ``tick``: by rank (the slots' order), each rank's
        completed records, then its snapshots."""
        parts = self.by_tick.pop(tick, None)
        if not parts:
            return None
        cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        snap = cols["t_end"] < 0
        order = np.lexsort((snap, self.phase[cols["rank"]] * self.n + cols["rank"]))
        return {k: v[order] for k, v in cols.items()}


def write(job: fleet.Job, seconds: float, out: str, log=print) -> dict:
    """Write the recording; returns what it holds (records, snapshots, heartbeats)."""
    t0 = time.time_ns()
    dur = fleet.durations(job)
    plan = fleet.Plan(job, t0, dur)
    ranks = _Ranks(job, t0)
    rec = recording.Recorder(out, {"title": {"en": f"{job.ranks} SIMULATED ranks, "
                                             f"{job.shape}-like (bench/fleet_recording.py)"}})
    sink = rec._sink  # the recorder's compact sink: the op records go to its writer as columns
    if not hasattr(sink, "_writer"):
        raise SystemExit("the recording must be compact (.cvz)")
    writer = sink._writer
    gref = {g: rec._group_ref(name, members) for g, (name, members) in enumerate(plan.groups)}
    sites = {i: s for i, s in enumerate(fleet.SITES)}
    whos = [(r, int(ranks.inc[r])) for r in range(job.ranks)]
    hosts = [f"node{r // fleet.RANKS_PER_NODE:03d}" for r in range(job.ranks)]
    end_ns = t0 + int(seconds * 1e9)
    rng = np.random.default_rng([job.seed, 9])
    counts = {"records": 0, "snapshots": 0, "heartbeats": 0}
    for tick in range(int((end_ns - t0) // fleet.TICK_NS) + 1):
        # every record a rank may send at this tick started before the next one
        while plan.t_step < end_ns and plan.t_step < t0 + (tick + 2) * fleet.TICK_NS:
            ranks.add(plan.next_step())
        now = t0 + tick * fleet.TICK_NS
        if tick % (fleet.HEARTBEAT_NS // fleet.TICK_NS) == 0:
            counts["heartbeats"] += job.ranks
            rec.write(_heartbeats(job, ranks, hosts, now, rng))
        if tick % (fleet.TOPOLOGY_NS // fleet.TICK_NS) == 0:
            rec.write([protocol.GpuTopology(r, hosts[r], r % fleet.RANKS_PER_NODE,
                                            *_gpus(r % fleet.RANKS_PER_NODE),
                                            int(ranks.inc[r])) for r in range(job.ranks)])
        cols = ranks.take(tick)
        if cols is not None:
            snap = cols["t_end"] < 0
            counts["records"] += int((~snap).sum())
            counts["snapshots"] += int(snap.sum())
            off = ranks.offset[cols["rank"]]
            wire = {"id": cols["id"], "op": cols["op"],
                    "parent": np.full(len(snap), protocol.NO_CODE, np.uint8),
                    "gid": cols["gid"], "seq": cols["seq"], "peer": cols["peer"],
                    "bytes_in": cols["bytes_in"], "bytes_out": cols["bytes_out"],
                    "dtype": cols["dtype"], "flags": cols["flags"],
                    "t_start": cols["t_start"] + off,
                    "t_end": np.where(snap, -1, cols["t_end"] + off), "site": cols["site"],
                    "who": cols["rank"]}
            writer.ops({k: np.asarray(v).astype(np.int64) for k, v in wire.items()}, whos,
                       gref, sites)
        if tick % TICKS_PER_CHUNK == TICKS_PER_CHUNK - 1:
            writer.flush()
            if (tick + 1) % (60 * TICKS_PER_CHUNK) == 0:
                log(f"SIMULATED: {(tick + 1) * fleet.TICK_NS / 1e9:.0f} s written, "
                    f"{counts['records']:,} op records")
    last = t0 + tick * fleet.TICK_NS
    rec.write([protocol.Bye(r, int(last + ranks.offset[r]), 0, int(ranks.inc[r]))
               for r in range(job.ranks)])
    # closed when the job ended (a live viewer's time; not this tool's, minutes earlier)
    rec.close({"t_ns": last, "records": counts["records"], "ended": list(range(job.ranks))})
    return counts


def _gpus(local: int) -> tuple:
    topo = fleet._topology(local)
    return (tuple(tuple(g) for g in topo["gpus"]), tuple(tuple(li) for li in topo["links"]),
            topo["note"])


def _heartbeats(job: fleet.Job, ranks: _Ranks, hosts: list[str], now: int,
                rng: np.random.Generator) -> list[protocol.Heartbeat]:
    """Every rank's heartbeat at ``now`` (true time), with a clock round trip of the last
    0.5 s: a request 0.1-0.4 ms each way, the viewer's clock being the true time."""
    out = []
    d1, d2 = rng.integers(100_000, 400_000, (2, job.ranks)).tolist()
    util = (88 + 10 * rng.random(job.ranks)).tolist()
    for r in range(job.ranks):
        off = int(ranks.offset[r])
        t1 = now - 1_000_000
        t2 = t1 + d1[r]
        t3 = t2 + 20_000
        tel = {"cpu_pct": 115.0, "rss_bytes": 12_000_000_000, "gpu_util_pct": util[r],
               "gpu_mem_used": 118_000_000_000.0, "gpu_mem_total": float(fleet.GPU_MEM_TOTAL),
               "gpu_power_w": 150 + 5.5 * util[r], "nvlink_tx_bps": None,
               "nvlink_rx_bps": None, "pcie_tx_bps": None, "pcie_rx_bps": None}
        out.append(protocol.Heartbeat(
            r, job.ranks, hosts[r], 4000 + r % fleet.RANKS_PER_NODE, "nccl",
            f"cuda:{r % fleet.RANKS_PER_NODE}", now + off, 0, tel,
            ((t1 + off, t2, t3, t3 + d2[r] + off),), int(ranks.inc[r]), fleet.JOB_KEY, True))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--shape", choices=fleet.SHAPES, default="fsdp")
    p.add_argument("--buckets", type=int, default=50)
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fault", action="append", default=[], type=fleet.Fault.parse)
    p.add_argument("--fault-at", type=float, default=0.0)
    p.add_argument("--out", required=True, help="the recording (.cvz)")
    args = p.parse_args(argv)
    job = fleet.Job(args.ranks, args.shape, args.buckets, faults=tuple(args.fault),
                    fault_at=args.fault_at, seed=args.seed)
    started = time.monotonic()
    counts = write(job, args.seconds, args.out)
    size = Path(args.out).stat().st_size
    print(f"SIMULATED: wrote {args.out}: {counts['records']:,} op records, "
          f"{counts['snapshots']:,} running snapshots, {counts['heartbeats']:,} heartbeats, "
          f"{size / 1e6:.1f} MB ({size / max(counts['records'], 1):.1f} B per op record) "
          f"in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
