"""How fast ``commviz stats`` reads a recording and ``commviz play`` opens and seeks in one,
side by side with how they did it before (docs/scale.md, "Ten minutes at 1,024 ranks").

    python bench/play_stats.py REC.cvz [--before] [--seeks 60,120,...]
    python bench/play_stats.py REC.cvz --no-play --against /work/main --repeat 3

stats: the records a second of the model fed as ``commviz stats`` feeds it now (a batch of
all ranks, ``model.Records``, in rounds of ``cli.STATS_ROUND_RECORDS`` records) and, with
``--before``, as it did (a batch a rank, rounds of 4,096 messages), and whether the two agree
(the statistics, the counts, the late arrivals). With ``--against DIR``, the same stats
measurement of another checkout of commviz (another branch, or main before a change) in a
child process, alternately with this one's, ``--repeat`` times: their times side by side on a
machine whose load varies, and whether the two agree. play: how long the playback takes to be
ready and to take its first round (what its first frame shows), the pass that keeps its
snapshots (how long, how large), and each seek (forward from the one before), the clock
paused as with ``--paused``. Times are wall and CPU seconds of this process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from commviz import cli
from commviz.viewer import recording
from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.model import Model
from commviz.viewer.playback import Playback, PlaybackControl


def _stats(path: str, before: bool) -> tuple[dict, float, float]:
    """The model's counters after reading ``path`` as stats does (``before``: did), and the
    wall and CPU seconds it took. The model is the one this checkout's stats reads into
    (``--against`` runs this with another's)."""
    model = getattr(cli, "stats_model", Model)()
    diagnosis = Diagnosis(model)
    wall, cpu = time.perf_counter(), time.process_time()
    messages = recording.read(path, records=not before)
    rounds = cli._rounds(messages, records=1 << 62) if before else cli._rounds(messages)
    for batch in rounds:
        model.apply(batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    late = [(r, dataclasses.astuple(t)) for r, t in diagnosis.late_arrivals()]
    return ({"stats": model.stats_table(), "records": model.records,
             "instances": model.instances, "transfers": model.transfers,
             "failed": model.failed, "incomplete": model.incomplete(), "late": late},
            wall, cpu)


def _child(path: str) -> None:
    """``_stats`` of ``path`` as one JSON line (what ``--against`` reads of a checkout)."""
    now, wall, cpu = _stats(path, before=False)
    print(json.dumps({"wall": wall, "cpu": cpu, "records": now["records"],
                      "state": json.loads(json.dumps(now, default=str))}))


def _against(path: str, other: str, repeat: int) -> None:
    """This checkout's stats measurement and ``other``'s, alternately, each in a child."""
    here = str(Path(__file__).resolve().parents[1])
    runs: dict[str, list[dict]] = {here: [], other: []}
    for _ in range(repeat):
        for tree in (other, here):
            env = {**os.environ, "PYTHONPATH": tree}
            out = subprocess.run([sys.executable, __file__, path, "--child"], env=env,
                                 check=True, capture_output=True, text=True).stdout
            runs[tree].append(json.loads(out.splitlines()[-1]))
    for tree, results in runs.items():
        rates = ", ".join(f"{r['records'] / r['wall'] / 1e6:.2f} M/s "
                          f"({r['records'] / r['cpu'] / 1e6:.2f} per CPU s)" for r in results)
        print(f"stats {'this checkout' if tree == here else tree}: {rates}")
    best = {t: min(r["cpu"] for r in rs) for t, rs in runs.items()}
    print(f"stats: CPU time, best of {repeat}: {best[other]:.1f} s -> {best[here]:.1f} s "
          f"({best[other] / best[here]:.2f}x); the same statistics, counts and late arrivals: "
          f"{all(r['state'] == runs[here][0]['state'] for rs in runs.values() for r in rs)}")


def _play(path: str, seeks: list[float]) -> None:
    wall = time.perf_counter()
    playback = Playback(path)
    PlaybackControl(playback, paused=True)
    ready = time.perf_counter() - wall
    playback.advance()
    first = time.perf_counter() - wall
    print(f"play: ready in {ready:.2f} s, first round taken {first:.2f} s after the start "
          f"({playback.duration_s:.0f} s recorded, streamed: {playback.streamed})")
    wall, cpu = time.perf_counter(), time.process_time()
    playback.take_snapshots()
    sizes = [len(s.data) / 1e6 for s in playback.snapshots._taken]
    print(f"play: pass over the recording {time.perf_counter() - wall:.1f} s "
          f"({time.process_time() - cpu:.1f} s CPU), {len(sizes)} snapshots of "
          f"{min(sizes, default=0):.0f}-{max(sizes, default=0):.0f} MB, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    for at in seeks:
        wall = time.perf_counter()
        playback.seek(at)
        print(f"play: seek to {at:.0f} s: {time.perf_counter() - wall:.2f} s "
              f"({playback.model.records:,} records in the model)")


def _first_frame(path: str, size: tuple[int, int] = (200, 60)) -> None:
    """How long ``commviz play`` takes from its start (this interpreter's own start aside) to
    its first frame drawn, the real app headless under Textual's test driver (the terminal's
    own drawing aside)."""
    import asyncio

    start = time.perf_counter()
    from commviz.tui.app import CommvizApp  # as commviz play imports it: timed too

    async def run() -> float:
        playback = Playback(path)
        control = PlaybackControl(playback, each_op=playback.demo is not None)
        app = CommvizApp(playback, None, lambda lang: "play", lang="en", controller=control,
                         restart=lambda: None, output=playback.output,
                         wall_ns=playback.clock.wall_ns)
        playback.start()
        async with app.run_test(size=size) as pilot:
            await pilot.pause()  # mounted, and its first frame composed
            took = time.perf_counter() - start
        playback.close()
        return took

    print(f"play: first frame drawn {asyncio.run(run()):.2f} s after the start")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("recording")
    p.add_argument("--before", action="store_true", help="also read it as stats did before")
    p.add_argument("--no-stats", action="store_true")
    p.add_argument("--no-play", action="store_true")
    p.add_argument("--frame", action="store_true", help="also time the TUI's first frame")
    p.add_argument("--against", metavar="DIR",
                   help="time the stats of this checkout and of the one at DIR, alternately "
                        "(and nothing else)")
    p.add_argument("--repeat", type=int, default=3, help="rounds of --against")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--seeks", default="60,120,180,240,300,360,420,480,540",
                   help="seconds to seek to, in order (comma-separated)")
    args = p.parse_args(argv)
    if args.child:
        _child(args.recording)
        return 0
    if args.against:  # the stats alone, side by side
        _against(args.recording, args.against, args.repeat)
        return 0
    if not args.no_stats:
        now, wall, cpu = _stats(args.recording, before=False)
        print(f"stats now: {now['records']:,} records in {wall:.1f} s ({cpu:.1f} s CPU): "
              f"{now['records'] / wall / 1e6:.2f} M records/s "
              f"({now['records'] / cpu / 1e6:.2f} M per CPU second)")
        if args.before:
            then, wall, cpu = _stats(args.recording, before=True)
            print(f"stats before: {then['records']:,} records in {wall:.1f} s ({cpu:.1f} s "
                  f"CPU): {then['records'] / wall / 1e6:.2f} M records/s "
                  f"({then['records'] / cpu / 1e6:.2f} M per CPU second)")
            print(f"stats: the same statistics, counts and late arrivals: {now == then}")
    if args.frame:
        _first_frame(args.recording)
    if not args.no_play:
        _play(args.recording, [float(s) for s in args.seeks.split(",") if s])
    return 0


if __name__ == "__main__":
    sys.exit(main())
