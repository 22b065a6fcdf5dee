"""Does the TUI stay smooth under load? Frame intervals and viewer CPU at a given event rate.

Sender processes play 8 ranks' emitters: every 10 ms each sends a batch of all_reduce
records (wall-clock timestamps of now) plus a heartbeat every 0.5 s, at a total rate of
--rate events/s, over real sockets to a real Session; the real CommvizApp runs headless
under Textual's test driver; every screen frame (a compositor pass) and every data update
(refresh_view) is timed. Prints their interval percentiles, the viewer process's CPU use
in cores and the machine's load average (1 min) before and after.

    python bench/render.py [--rate 20000] [--ranks 8] [--seconds 10]
    python bench/render.py --fleet 1024 [--shape ddp] [--seconds 20] [--screenshot end.svg]
    python bench/render.py --fleet 1024 --seconds 30 --keys   # + each key's time to its frame

``--fleet N`` plays N SIMULATED ranks on N/8 simulated nodes with bench/fleet.py instead (its
traffic shapes, heartbeats and telemetry, in real time): the TUI at a large job's size.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing as mp
import os
import statistics
import time

import zmq
from fleet import SHAPES, Job, run_fleet
from ingest import encode_all_reduce

from commviz.tui.app import CommvizApp
from commviz.viewer.session import Session
from commviz.wire import protocol

TICK_S = 0.01


def sender(addr: str, rank: int, world: int, per_tick: int, seconds: float) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(addr)
    seq = 0
    next_beat = 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = time.time_ns()
        ids = range(seq + 1, seq + per_tick + 1)
        seq += per_tick
        sock.send(encode_all_reduce(rank, world, ids, [now - 200_000 + i for i in range(per_tick)],
                                    [now - 100_000 + i for i in range(per_tick)],
                                    groups_in_batches=True))
        if time.monotonic() >= next_beat:
            next_beat = time.monotonic() + 0.5
            sock.send(protocol.pack({
                "v": 1, "k": "hb", "rank": rank, "world": world, "host": "bench", "pid": rank,
                "backend": "gloo", "device": "cpu", "t_ns": now, "dropped": 0,
                "tel": {"cpu_pct": 50.0, "rss_bytes": 1e8}}))
        time.sleep(TICK_S)
    sock.close(linger=1000)
    ctx.term()


def _nice_fleet(nice: int, *args: object) -> None:
    os.nice(nice)
    run_fleet(*args)  # type: ignore[arg-type]


KEY_EVERY_S = 1.0  # a key pressed this often: z (zoom in), then Z (back out), in turn


async def drive(app: CommvizApp, seconds: float, updates: list[float],
                frames: list[float], shot: str | None = None,
                keys: list[float] | None = None) -> None:
    """Time every data update (the app's refresh_view) and every screen frame (a compositor
    pass that paints what changed: the replay's animation runs at its own rate). With
    ``keys``, a key every KEY_EVERY_S: from its press to the first frame painted after its
    action ran (what the person pressing it waits for), appended in seconds."""
    original = app.refresh_view

    def timed(*part: int, **how: bool) -> None:
        original(*part, **how)
        updates.append(time.perf_counter())

    app.refresh_view = timed  # type: ignore[method-assign]
    zoomed: list[float] = []  # when each z / Z had changed the timeline's window
    zoom = app._zoom

    def timed_zoom(zoom_s: float | None) -> None:
        zoom(zoom_s)
        zoomed.append(time.perf_counter())

    app._zoom = timed_zoom  # type: ignore[method-assign]
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        paint = screen._compositor_refresh

        def painted() -> None:
            paint()
            frames.append(time.perf_counter())

        screen._compositor_refresh = painted  # type: ignore[method-assign]
        if keys is None:
            await pilot.pause(seconds)
        else:
            end = time.perf_counter() + seconds
            for i in itertools.count():
                if time.perf_counter() + KEY_EVERY_S > end:
                    break
                await pilot.pause(KEY_EVERY_S)
                done = len(zoomed)
                t0 = time.perf_counter()
                app.simulate_key("z" if i % 2 == 0 else "Z")  # queued as a key pressed is
                while len(zoomed) == done:  # its action ran...
                    await asyncio.sleep(0.001)
                while frames[-1] < zoomed[-1]:  # ... and a frame painted what it changed
                    await asyncio.sleep(0.001)
                keys.append(frames[-1] - t0)
            await pilot.pause(max(0.0, end - time.perf_counter()))
        if shot is not None:  # the screen as it was at the end, to look at
            app.save_screenshot(shot)


def intervals(stamps: list[float]) -> str:
    gaps = sorted((b - a) * 1e3 for a, b in zip(stamps[2:], stamps[3:]))
    if not gaps:
        return "none"
    p95 = gaps[int(0.95 * (len(gaps) - 1))]
    return (f"{len(stamps)}, interval p50 {statistics.median(gaps):.1f} ms, p95 {p95:.1f} ms, "
            f"max {gaps[-1]:.1f} ms")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=int, default=20_000, help="events per second, all ranks")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--fleet", type=int, metavar="N", help="N SIMULATED ranks from bench/fleet.py")
    p.add_argument("--shape", choices=SHAPES, default="ddp", help="with --fleet")
    p.add_argument("--fleet-nice", type=int, default=10, metavar="N",
                   help="with --fleet: the simulator's niceness (default 10: a real job does not "
                        "share the viewer's cores, the simulator here does)")
    p.add_argument("--screenshot", metavar="SVG", help="save the last screen there")
    p.add_argument("--keys", action="store_true",
                   help=f"press z / Z every {KEY_EVERY_S:g} s and time each key to its frame")
    args = p.parse_args()
    per_tick = max(1, round(args.rate * TICK_S / args.ranks))
    session = Session("tcp://127.0.0.1:*")
    session.start()
    ctx = mp.get_context("fork")
    if args.fleet:
        job = Job(args.fleet, args.shape)
        procs = [ctx.Process(target=_nice_fleet, args=(args.fleet_nice, session.addr, job,
                                                        args.seconds + 1))]
        args.ranks, per_tick = args.fleet, 0  # what is offered: the fleet says (10/s a rank)
    else:
        procs = [ctx.Process(target=sender, args=(session.addr, r, args.ranks, per_tick,
                                                  args.seconds + 1))
                 for r in range(args.ranks)]
    for proc in procs:
        proc.start()
    updates: list[float] = []
    frames: list[float] = []
    load = os.getloadavg()[0]  # the machine's, before: other work slows frames down
    app = CommvizApp(session, None, "render benchmark")
    cpu0, ui0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    keys: list[float] | None = [] if args.keys else None
    asyncio.run(drive(app, args.seconds, updates, frames, args.screenshot, keys))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    ui = time.thread_time() - ui0  # the event loop: Textual and the app
    for proc in procs:
        proc.join(10)
    session.close()
    offered = "the fleet's" if args.fleet else f"{per_tick * args.ranks / TICK_S:.0f}"
    print(f"{args.ranks} {'SIMULATED ' if args.fleet else ''}ranks, {offered} events/s offered, "
          f"{session.model.records / wall:.0f} applied/s over {wall:.1f} s; "
          f"viewer CPU {cpu / wall:.2f} cores ({ui / wall:.2f} drawing, the rest receiving, "
          f"matching and diagnosing); load average {load:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after\n"
          f"screen frames: {intervals(frames)}\ndata updates: {intervals(updates)}\n"
          f"viewer behind the ranks at the end: {session.model.behind_s:.1f} s")
    if keys:
        ms = sorted(k * 1e3 for k in keys)
        print(f"keys: {len(ms)}, press to frame p50 {statistics.median(ms):.0f} ms, "
              f"p95 {ms[round(0.95 * (len(ms) - 1))]:.0f} ms, max {ms[-1]:.0f} ms")


if __name__ == "__main__":
    main()
