"""Bytes per op record of a JSON Lines recording of SIMULATED ranks, without sockets.

Builds the op batches of a DDP-like job (every rank all-reduces ``--buckets`` 25 MiB buckets
a step over the whole world, one batch per rank per step, as the fleet simulator's call
sites and incarnation ids look), writes them through the viewer's ``Recorder`` and prints
the file's bytes per op line and per op record (the whole file over its op lines). No
heartbeats, telemetry or in-flight snapshots: bench/fleet.py --watch measures those with
the live viewer.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from commviz.viewer import recording
from commviz.wire import protocol

T0_NS = 1_700_000_000_000_000_000
BUCKET_BYTES = 25 << 20


def batch(rank: int, world: int, step: int, buckets: int) -> protocol.OpBatch:
    """One rank's all_reduces of one step (1 s), 10.7 ms each, 50 ms apart."""
    n, first = buckets, step * buckets + 1
    t_start = [T0_NS + step * 10**9 + b * 50_000_000 + rank * 1_000 for b in range(n)]
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.jsonl"
        rec = recording.Recorder(path)
        for step in range(args.steps):
            rec.write(batch(r, args.ranks, step, args.buckets) for r in range(args.ranks))
        rec.close({})
        size = path.stat().st_size
        op_lines = [len(line) for line in path.read_bytes().splitlines(keepends=True)
                    if json.loads(line).get("kind") == "op"]
    print(f"SIMULATED: {args.ranks} ranks, {len(op_lines)} op records, recording version "
          f"{recording.VERSION}: {size:,} B, {sum(op_lines) / len(op_lines):,.0f} B per op "
          f"line, {size / len(op_lines):,.0f} B per op record (whole file)")


if __name__ == "__main__":
    main()
