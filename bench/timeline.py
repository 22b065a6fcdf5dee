"""What the timeline by group (`g`) costs a frame beside the timeline by node, at N SIMULATED
ranks of tensor- and data-parallel groups (bench/fleet.py's tp-dp, played in process, rank 5
30 ms late). Each frame as the widget makes it: the copy under the session lock
(``Model.lanes``, with the rows' groups by group; the nodes; the groups' lanes) and the lines
drawn (``lane_runs``), the two views in turns so that both see the same machine load. Prints
the median CPU time of each part, the frame's p95, and the ratios by group / by node.

    python bench/timeline.py [--ranks 1024] [--frames 40] [--width 94] [--height 23]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from fleet_model import fleet_view  # noqa: E402

from commviz.tui.timeline import group_lanes, lane_runs  # noqa: E402
from commviz.viewer import shape_words  # noqa: E402
from commviz.viewer.model import Model  # noqa: E402

WINDOW_NS = 2_000_000_000  # the timeline's default window


def frames(model: Model, now: int, width: int,
           height: int) -> dict[str, Callable[[], Callable[[], object]]]:
    """Each view's frame in two parts: the copy under the lock, which returns the drawing."""
    since = now - WINDOW_NS

    def by_node() -> Callable[[], object]:
        lanes, nodes = model.lanes(since, now), model.nodes()
        inflight = list(model.inflight.values())
        return lambda: lane_runs(lanes, inflight, since, now, width, height=height,
                                 nodes=nodes)

    def by_group() -> Callable[[], object]:
        lanes, nodes = model.lanes(since, now, groups=True), model.nodes()
        inflight = list(model.inflight.values())
        groups = group_lanes(model.groups, model.shown_groups(),
                             shape_words.guesses(model.group_families()[0]))
        return lambda: lane_runs(lanes, inflight, since, now, width, height=height,
                                 nodes=nodes, groups=groups)

    return {"by node": by_node, "by group": by_group}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--width", type=int, default=94, help="the panel's cells (160x48: 94)")
    p.add_argument("--height", type=int, default=23, help="the panel's lines (160x48: 23)")
    args = p.parse_args()
    view = fleet_view(args.ranks, 3.0, shape="tp-dp", faults=("straggler:5:30",), fault_at=1.0)
    model, now = view.model, view.clock.t_ns
    segments = sum(map(len, model.lanes(now - WINDOW_NS, now).values()))
    print(f"{args.ranks} SIMULATED ranks (tp-dp), {segments:,} segments in the "
          f"{WINDOW_NS / 1e9:.0f} s window, {len(model.inflight)} ops in flight, "
          f"{len(model.shown_groups())} groups, {len(model.nodes())} nodes; "
          f"{args.width}x{args.height} cells")
    views = frames(model, now, args.width, args.height)
    parts = ("copy", "draw", "frame")
    times = {name: {part: [] for part in parts} for name in views}
    for _ in range(args.frames):
        for name, copy in views.items():  # in turns: the same load for both
            t0 = time.process_time()
            draw = copy()
            t1 = time.process_time()
            draw()
            t2 = time.process_time()
            for part, taken in zip(parts, (t1 - t0, t2 - t1, t2 - t0)):
                times[name][part].append(taken * 1e3)
    median = {name: {part: statistics.median(taken) for part, taken in by.items()}
              for name, by in times.items()}
    for name, by in times.items():
        frame = sorted(by["frame"])
        print(f"timeline {name}: copy {median[name]['copy']:.1f} ms + draw "
              f"{median[name]['draw']:.1f} ms = frame median {median[name]['frame']:.1f} ms, "
              f"p95 {frame[int(0.95 * (len(frame) - 1))]:.1f} ms CPU")
    print("by group / by node: " + ", ".join(
        f"{part} {median['by group'][part] / median['by node'][part]:.2f}x" for part in parts))

if __name__ == "__main__":
    main()
