"""Bytes per op record of a recording of SIMULATED ranks, JSON Lines and compact, without
sockets.

Builds the op batches of a DDP-like job (every rank all-reduces ``--buckets`` 25 MiB buckets
a step over the whole world, one batch per rank per step, as the fleet simulator's call
sites and incarnation ids look), writes them through the viewer's ``Recorder`` in both
formats (``.jsonl``, ``.cvz``) and prints each file's bytes per op record (the whole file
over its op records), their ratio, and how fast each is written and read back
(``recording.read``, records/s). Each rank's start times carry ``--jitter-us`` of uniform
noise (seeded), as arrivals do: without it the columns compress to almost nothing. No
heartbeats, telemetry or in-flight snapshots: bench/fleet.py --watch measures those with
the live viewer.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from commviz.viewer import recording
from commviz.wire import protocol

T0_NS = 1_700_000_000_000_000_000
BUCKET_BYTES = 25 << 20


def batch(rank: int, world: int, step: int, buckets: int,
          jitter: np.ndarray | None = None) -> protocol.OpBatch:
    """One rank's all_reduces of one step (1 s), 10.7 ms each, 50 ms apart; ``jitter``: ns
    added to each start."""
    n, first = buckets, step * buckets + 1
    t_start = [T0_NS + step * 10**9 + b * 50_000_000 + rank * 1_000 for b in range(n)]
    if jitter is not None:
        t_start = (np.asarray(t_start, dtype=np.int64) + jitter).tolist()
    cols = {
        "id": np.arange(first, first + n), "op": [protocol.OP_CODE["all_reduce"]] * n,
        "parent": [protocol.NO_CODE] * n, "gid": [0] * n, "seq": np.arange(first, first + n),
        "peer": [-1] * n, "bytes_in": [BUCKET_BYTES] * n, "bytes_out": [BUCKET_BYTES] * n,
        "dtype": [protocol.DTYPE_CODE["float32"]] * n, "flags": [protocol.FLAG_DDP] * n,
        "t_start": t_start, "t_end": [t + 10_700_000 for t in t_start], "site": [0] * n,
    }
    return protocol.OpBatch(
        rank, {k: np.asarray(v, dtype=protocol.COLUMN_DTYPES[k]) for k, v in cols.items()},
        {0: ("0", tuple(range(world)))}, {0: ("simulated-fleet/train.py", 118)},
        inc=(1 << 62) + rank)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--buckets", type=int, default=10)
    ap.add_argument("--jitter-us", type=float, default=200.0,
                    help="uniform noise on each start time (default 200 us)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    batches = [batch(r, args.ranks, step, args.buckets,
                     rng.integers(0, int(args.jitter_us * 1e3) + 1, args.buckets))
               for step in range(args.steps) for r in range(args.ranks)]
    records = sum(len(b) for b in batches)
    sizes = {}
    print(f"SIMULATED: {args.ranks} ranks, {records:,} op records, {args.jitter_us:g} us "
          f"jitter, recording version {recording.VERSION}")
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in (".jsonl", ".cvz"):
            path = Path(tmp) / f"r{suffix}"
            t0 = time.perf_counter()
            rec = recording.Recorder(path)
            for step in range(args.steps):
                rec.write(batches[step * args.ranks:(step + 1) * args.ranks])
            rec.close({})
            wrote = time.perf_counter() - t0
            t0 = time.perf_counter()
            read = sum(len(m) for m in recording.read(path) if isinstance(m, protocol.OpBatch))
            took = time.perf_counter() - t0
            assert read == records, (read, records)
            sizes[suffix] = path.stat().st_size
            print(f"  {suffix:<6} {sizes[suffix]:>12,} B  {sizes[suffix] / records:8.1f} B per "
                  f"op record  written at {records / wrote / 1e6:.2f} M records/s, read at "
                  f"{records / took / 1e6:.2f} M records/s")
    print(f"  compact / JSON Lines: 1 : {sizes['.jsonl'] / sizes['.cvz']:,.0f}")


if __name__ == "__main__":
    main()
