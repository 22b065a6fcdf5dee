"""What a ``--metrics`` scrape costs at N SIMULATED ranks (bench/fleet.py, played in process):
the part under the session's lock (``metrics.take``: O(ranks + statistics rows)) and the
whole scrape (the exposition text, the rows' percentiles figured after the lock), with
``--rows`` statistics rows of 200,000 samples each (the most a row keeps) added, as a long
job with many sizes has. Prints the mean of ``--scrapes`` scrapes.

    python bench/metrics_scrape.py [--ranks 1024] [--rows 16] [--scrapes 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from fleet_model import fleet_view  # noqa: E402

from commviz.viewer import metrics  # noqa: E402
from commviz.viewer.model import SAMPLES_MAX, StatRow  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--scrapes", type=int, default=20)
    args = p.parse_args()
    view = fleet_view(args.ranks, 4.0, faults=("straggler:517:30",), fault_at=1.0)
    m, d = view.model, view.diagnosis
    rng = np.random.default_rng(0)
    for k in range(args.rows):
        key = ("all_gather", 8, 1 << (10 + k))
        row = m.stats[key] = StatRow(*key)
        row.add(rng.integers(10_000, 10_000_000, 2 * SAMPLES_MAX),
                rng.integers(0, 10_000, 2 * SAMPLES_MAX))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.Families(lambda: metrics.families(m, d, metrics.Intake())))
    generate_latest(registry)
    t = time.perf_counter()
    for _ in range(args.scrapes):
        metrics.take(m, d, metrics.Intake())
    locked = (time.perf_counter() - t) / args.scrapes
    t = time.perf_counter()
    for _ in range(args.scrapes):
        body = generate_latest(registry)
    whole = (time.perf_counter() - t) / args.scrapes
    print(f"{args.ranks} SIMULATED ranks, {len(m.nodes())} nodes, {len(m.stats)} statistics "
          f"rows: under the lock {locked * 1e3:.2f} ms, whole scrape {whole * 1e3:.1f} ms "
          f"({len(body):,} bytes, {len(body.splitlines()):,} lines)")


if __name__ == "__main__":
    main()
