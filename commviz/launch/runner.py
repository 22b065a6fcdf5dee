"""The entry point of one demo rank process: ``python -m commviz.launch.runner DEMO ...``.

Started by ``commviz demo``: it instruments itself, joins the process group, runs the demo's
``main(ctx)`` and leaves. Errors are printed as one line (then the traceback) on stderr,
where the launcher picks them up.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import datetime
import importlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from commviz.wire.control import StepGate


def elements(size: int, itemsize: int) -> int:
    """How many elements of ``itemsize`` bytes make ``size`` bytes (at least one)."""
    return max(1, size // itemsize)


def block_elements(size: int, itemsize: int, world: int) -> int:
    """Elements in each of ``world`` equal blocks that fit in ``size`` bytes (at least one)."""
    return max(1, elements(size, itemsize) // world)


@dataclass
class DemoContext:
    """What a demo program needs to know about its run, kept out of its teaching code."""

    rank: int
    world_size: int
    device: Any           # torch.device: cuda:<rank> with NCCL, cpu with gloo
    size: int             # bytes per rank the demo should move (--size)
    iters: int | None     # iterations to run; None: until stopped
    interval: float       # seconds between iterations (--interval)
    gate: StepGate | None = None  # the viewer's play/pause/next-iteration control, if any
    # iterations started so far, shared by the parts of a tour: the gate and the viewer count
    # them across the whole run
    started: list[int] = field(default_factory=lambda: [0])

    def numel(self, dtype: Any) -> int:
        """How many elements of ``dtype`` make ``size`` bytes (at least one)."""
        return elements(self.size, _itemsize(dtype))

    def block_numel(self, dtype: Any) -> int:
        """Elements of ``dtype`` in each of world equal blocks that fit in ``size`` bytes."""
        return block_elements(self.size, _itemsize(dtype), self.world_size)

    def iterations(self) -> Iterator[int]:
        """Iteration numbers 1, 2, ... as the viewer counts them (a tour's stops go on
        counting), paced by --interval; this part ends after ``iters`` of them.

        Under the TUI every rank also waits at the gate before each iteration until the viewer
        lets it start (pause / next iteration), so its first op happens on cue.
        """
        done = 0
        while self.iters is None or done < self.iters:
            if self.started[0] and self.interval > 0:
                time.sleep(self.interval)
            if self.gate is not None:
                self.gate.wait(self.started[0])
            self.started[0] += 1
            done += 1
            yield self.started[0]

    def part(self, iters: int) -> DemoContext:
        """The same run for ``iters`` iterations of another demo (a guided tour's stop)."""
        return dataclasses.replace(self, iters=iters)

    def check(self, ok: Any, what: str) -> None:
        """Fail loudly when a result is wrong: a demo must prove what it shows."""
        if not bool(ok):
            raise AssertionError(f"rank {self.rank}: wrong result: {what}")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="commviz.launch.runner")
    p.add_argument("demo")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--backend", choices=("gloo", "nccl"), required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--interval", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=60.0)
    return p.parse_args(argv)


def _itemsize(dtype: Any) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


def _die_with_parent() -> None:
    """Linux: get SIGTERM when the launcher dies, so no rank outlives a killed launcher."""
    parent = os.environ.get("COMMVIZ_PARENT_PID")
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # the launcher died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _timeout(module: Any, args: argparse.Namespace) -> float:
    """The process group's timeout: a fault demo sets a short ``PG_TIMEOUT_S`` so that ranks
    left waiting by its fault give up (and the demo ends) within seconds."""
    return float(getattr(module, "PG_TIMEOUT_S", args.timeout))


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    _die_with_parent()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    gate = StepGate.from_env(args.rank)  # connects early: the viewer's state is known at once
    try:
        module = importlib.import_module(f"commviz.demos.{args.demo}")
        import torch
        import torch.distributed as dist

        import commviz

        commviz.instrument()
        if args.backend == "nccl":
            device = torch.device("cuda", args.rank)
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
        dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{args.master_port}",
                                rank=args.rank, world_size=args.world,
                                timeout=datetime.timedelta(seconds=_timeout(module, args)))
        ctx = DemoContext(args.rank, args.world, device, args.size, args.iters, args.interval,
                          gate)
        module.main(ctx)
        # every rank done before any tears gloo down (a rank whose peer is still closing its
        # pairs can abort at exit: "terminate called without an active exception"); not
        # part of the demo, so not recorded
        commviz.uninstrument()
        dist.barrier()
        dist.destroy_process_group()
    except (KeyboardInterrupt, SystemExit) as exc:
        return 130 if isinstance(exc, KeyboardInterrupt) else int(exc.code or 0)
    except BaseException as exc:  # report every failure as one line the launcher can show
        print(f"commviz-rank-error: {type(exc).__name__}: {exc}".splitlines()[0],
              file=sys.stderr, flush=True)
        traceback.print_exc()
        return 1
    finally:
        gate.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
