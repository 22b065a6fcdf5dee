"""What the ranks panel by node costs a frame at N SIMULATED ranks (bench/fleet.py, played in
process): node_facts' rows and the panel's text, beside the panel by rank it replaces (which
builds only the rows a screen shows). Prints the median and p95 of each, per frame.

    python bench/nodes_panel.py [--ranks 1024] [--frames 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from fleet_model import fleet_view  # noqa: E402

from commviz.tui.node_facts import node_rows  # noqa: E402
from commviz.tui.panels.nodes import entries, nodes_table  # noqa: E402
from commviz.tui.panels.ranks import ranks_table  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--frames", type=int, default=50)
    args = p.parse_args()
    view = fleet_view(args.ranks, 3.0, faults=("straggler:5:30",), fault_at=1.0)
    m, d, now_ns = view.model, view.diagnosis, view.clock.t_ns
    flagged = {r: f for f in d.findings() for r in f.ranks}

    def by_node() -> None:
        rows = node_rows(m, m.clock(), now_ns, flagged, d.late_arrivals())
        nodes_table(rows, entries(rows, (), False), m, m.clock(), now_ns, flagged, "en", 94,
                    16, (), False, 0)

    def by_rank() -> None:
        ranks_table(m, m.clock(), now_ns, flagged, "en", 94, 16, late=d.late_arrivals())

    for name, draw in (("by node", by_node), ("by rank (16 rows)", by_rank)):
        times = []
        for _ in range(args.frames):
            t = time.process_time()
            draw()
            times.append((time.process_time() - t) * 1e3)
        times.sort()
        print(f"{args.ranks} SIMULATED ranks, ranks panel {name}: median "
              f"{statistics.median(times):.1f} ms, p95 {times[int(0.95 * len(times))]:.1f} ms "
              "CPU a frame")


if __name__ == "__main__":
    main()
