"""What playing a recording back costs beside reading it for its numbers.

A recording of a 4-rank job (all_reduce records 1 ms apart, a heartbeat per rank every
0.5 s) is written with the viewer's own Recorder; then, in alternating rounds, `commviz
stats`' path (read every line, apply to the model with its diagnosis) and `commviz play`'s
(read every line, order the messages by time, then take them in 20 ms rounds of the
recording's clock, diagnosing every 0.25 s, to the end) take it in. Prints records/s of
each and their ratio per round, then the median ratio.

    python bench/playback.py [--records 400000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from fakes import STEP_NS, T0_NS, heartbeats, scripted_all_reduce  # noqa: E402

from commviz.viewer import recording  # noqa: E402
from commviz.viewer.diagnose import Diagnosis  # noqa: E402
from commviz.viewer.model import Model  # noqa: E402
from commviz.viewer.playback import Playback  # noqa: E402

WORLD = 4
ROUND_NS = 20_000_000  # the playback's collector round, in the recording's time


def write(path: str, records: int) -> None:
    rec = recording.Recorder(path)
    steps = records // WORLD
    for first in range(0, steps, 500):  # 0.5 s of steps: a heartbeat round, then the ops
        t0 = T0_NS + first * STEP_NS
        rec.write(heartbeats(WORLD, t_ns=t0)[:WORLD])
        rec.write(scripted_all_reduce(world=WORLD, steps=min(500, steps - first),
                                      first=first)[WORLD:])
    rec.close({"t_ns": T0_NS + steps * STEP_NS})


def stats_path(path: str) -> int:
    model = Model()
    Diagnosis(model)
    batch = []
    for msg in recording.read(path):
        batch.append(msg)
        if len(batch) >= 64:
            model.apply(batch)
            batch = []
    model.apply(batch)
    return model.records


def play_path(path: str) -> int:
    at = [0.0]
    playback = Playback(path, speed=1.0, real=lambda: at[0])
    while not playback.clock.stopped("end"):
        at[0] += ROUND_NS / 1e9
        playback.advance()
    return playback.model.records


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=400_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.jsonl")
        write(path, args.records)
        print(f"{args.records} op records of {WORLD} ranks, "
              f"{os.path.getsize(path) / 1e6:.0f} MB")
        ratios = []
        for r in range(args.rounds):
            t = time.perf_counter()
            n_stats = stats_path(path)
            t_stats = time.perf_counter() - t
            t = time.perf_counter()
            n_play = play_path(path)
            t_play = time.perf_counter() - t
            assert n_stats == n_play == args.records, (n_stats, n_play)
            ratios.append(t_play / t_stats)
            print(f"round {r + 1}: stats {n_stats / t_stats:,.0f} records/s, play "
                  f"{n_play / t_play:,.0f} records/s (to the end, in "
                  f"{t_play:.1f} s), play/stats {ratios[-1]:.2f}")
        print(f"median play/stats time ratio: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
