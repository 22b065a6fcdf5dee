"""What the emitter thread costs a rank: its own CPU time per second, idle and under op loops.

One gloo rank, instrumented, with a viewer listening (a drain thread in this process). The
emitter and clock threads' CPU clocks are read around windows in which the rank runs
all_reduce at a fixed rate (0: idle), so the figure is theirs alone. Each tick length given
gets an emitter of its own, one after the other in the same run.

    python bench/emitter_cpu.py [--seconds 4] [--rates 0,1000,3000] [--ticks 0.01,0.05]
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import torch
import torch.distributed as dist

import commviz
from commviz.launch.launcher import free_port
from commviz.rank import emitter, hooks
from commviz.viewer.transport import Receiver


def thread_cpu_ns(name: str) -> int:
    for thread in threading.enumerate():
        if thread.name == name and thread.ident is not None:
            return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
    return 0


def window(seconds: float, rate: int) -> tuple[float, float, float]:
    """Emitter and clock CPU in ms per second, and the op rate reached."""
    threads = ("commviz-emitter", "commviz-clock")
    before = [thread_cpu_ns(n) for n in threads]
    t = torch.zeros(1)
    ops = 0
    start = time.monotonic()
    end = start + seconds
    if rate:
        due = start
        while time.monotonic() < end:
            dist.all_reduce(t)
            ops += 1
            due += 1 / rate
            time.sleep(max(0.0, due - time.monotonic()))
    else:
        time.sleep(seconds)
    after = [thread_cpu_ns(n) for n in threads]
    em, clk = ((a - b) / seconds / 1e6 for a, b in zip(after, before))
    return em, clk, ops / seconds


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--rates", default="0,1000,3000", help="all_reduce calls a second")
    p.add_argument("--ticks", default=f"0.01,{emitter.TICK_S}", help="emitter ticks, seconds")
    args = p.parse_args()
    receiver = Receiver("tcp://127.0.0.1:*")
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            receiver.drain(20)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    print(f"load average {os.getloadavg()[0]:.2f}")
    for tick in (float(t) for t in args.ticks.split(",")):
        emitter.TICK_S = tick
        commviz.instrument(receiver.addr)
        time.sleep(1.5)  # past the first heartbeat and its fast ticks
        for rate in (int(r) for r in args.rates.split(",")):
            em, clk, reached = window(args.seconds, rate)
            per_op = f"{em * 1e3 / reached:5.2f} us/op" if reached else "idle"
            print(f"tick {tick * 1e3:3.0f} ms, {reached:5.0f} ops/s: emitter {em:6.2f} ms/s "
                  f"({per_op}), clock {clk:5.2f} ms/s", flush=True)
        hooks.flush_and_close()
    stop.set()
    drainer.join()
    receiver.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
