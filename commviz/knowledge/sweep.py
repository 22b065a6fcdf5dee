"""An nccl-tests sweep: one collective at doubling sizes, each timed over a loop and checked.

The ranks (``demos/sweep.py``) time each size as nccl-tests does: ``warmup`` calls, one call
whose result is checked (the wrong elements counted), then ``iters`` calls back to back inside
one compute phase (``commviz.phase``), which ends once the last has completed. The phase's name
carries the size, the loop's length and the count of wrong elements, so that the viewer reads
the whole table from what the ranks sent: per size, the time is the ranks' mean of their loop's
span over ``iters`` (nccl-tests averages its ranks' times), algbw = S / time and busbw =
algbw x nccl-tests' factor; #wrong is the ranks' sum. A time includes commviz's own cost per
call (a few microseconds: ``docs/performance.md``), which shows at the smallest sizes.

Pure (no torch, no screen): the rank's program, the headless table and the TUI's plot share
it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commviz.knowledge import bandwidth
from commviz.knowledge.costmodel import Fit, cost_of, fit

if TYPE_CHECKING:
    from commviz.wire.protocol import PhaseSpan

# the sweep's ops, as nccl-tests names them, and the torch.distributed call each one makes
OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather_into_tensor",
       "reduce_scatter": "reduce_scatter_tensor", "broadcast": "broadcast",
       "all_to_all": "all_to_all_single"}
ITEMSIZE = 4  # float32, nccl-tests' default type
DEFAULT_MIN, DEFAULT_MAX = 8, 64 << 20  # nccl-tests' -b 8 -e 64M (doubling: -f 2)
DEFAULT_ITERS, DEFAULT_WARMUP = 20, 5  # nccl-tests' -n and -w
ENV = "COMMVIZ_SWEEP"  # how the launcher hands the sweep to its ranks
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str) -> int:
    """``8``, ``64K``, ``64M``, ``1G`` (powers of 1,024, as nccl-tests reads -b and -e)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", text.upper())
    if match is None:
        raise ValueError(f"{text!r} is no size: bytes, or with K, M or G (64M)")
    return int(match[1]) * _UNITS[match[2]]


@dataclass(frozen=True)
class Sweep:
    op: str = "all_reduce"
    min_bytes: int = DEFAULT_MIN
    max_bytes: int = DEFAULT_MAX
    iters: int = DEFAULT_ITERS
    warmup: int = DEFAULT_WARMUP

    def check(self) -> None:
        """A sentence for what cannot run (ValueError)."""
        if self.op not in OPS:
            raise ValueError(f"the sweep runs {', '.join(OPS)}, not {self.op!r}")
        if not 1 <= self.min_bytes <= self.max_bytes:
            raise ValueError(f"--min must be at least 1 byte and at most --max, got "
                             f"{self.min_bytes} and {self.max_bytes}")
        if self.iters < 1 or self.warmup < 0:
            raise ValueError("--iters must be at least 1 and --warmup at least 0")

    def sizes(self) -> list[int]:
        """The bytes asked, doubling from min to max (nccl-tests' -f 2)."""
        out, size = [], self.min_bytes
        while size <= self.max_bytes:
            out.append(size)
            size *= 2
        return out

    def env(self) -> dict[str, str]:
        return {ENV: f"{self.op}:{self.min_bytes}:{self.max_bytes}:{self.iters}:{self.warmup}"}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Sweep:
        """The sweep the launcher asked for (the defaults without one)."""
        spec = environ.get(ENV)
        if not spec:
            return cls()
        op, *numbers = spec.split(":")
        return cls(op, *map(int, numbers))


def count_of(op: str, world: int, size: int) -> int:
    """nccl-tests' element count for ``size`` bytes: of the whole buffer, a multiple of the
    ranks where each rank has its block (at least one element, or one each)."""
    count = max(1, size // ITEMSIZE)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        count = max(world, count // world * world)
    return count


# the timed loop's phase: what the viewer reads the table from
_PHASE = re.compile(r"sweep (?P<op>\w+) (?P<size>\d+) x(?P<iters>\d+) wrong (?P<wrong>\d+)")


def phase_name(op: str, size: int, iters: int, wrong: int) -> str:
    """The timed loop's phase (``size``: S, the bytes of nccl-tests' size column)."""
    return f"sweep {op} {size} x{iters} wrong {wrong}"


# the calls that reduce (nccl-tests' redop "sum"), and those with a root (its "root" 0)
_REDUCING = {"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor",
             "reduce_scatter_single"}
_ROOTED = {"broadcast", "reduce", "gather", "scatter"}


@dataclass(frozen=True)
class Point:
    """One row of the table: one size of one call (``op``: torch.distributed's name)."""

    op: str
    size: int       # S, bytes
    time_s: float   # the ranks' mean time of one call
    wrong: int      # wrong elements, summed over the ranks
    world: int

    @property
    def count(self) -> int:
        """Elements (float32: the sweep's, nccl-tests' default)."""
        return self.size // ITEMSIZE

    @property
    def algbw(self) -> float:
        return bandwidth.gbps(self.size, self.time_s)

    @property
    def busbw(self) -> float:
        return self.algbw * (bandwidth.bus_factor(self.op, self.world) or 0.0)


def points(phases: Mapping[int, Iterable[PhaseSpan]], world: int) -> list[Point]:
    """The sizes every one of ``world`` ranks has timed, smallest first, from each rank's
    phases (``Model.phases``); phases of anything else are passed over."""
    timed: dict[tuple[str, int], list[tuple[float, int]]] = {}
    for spans in phases.values():
        for span in spans:
            m = _PHASE.fullmatch(span.name)
            if m is not None and m["op"] in OPS:
                timed.setdefault((m["op"], int(m["size"])), []).append(
                    ((span.t_end - span.t_start) / 1e9 / int(m["iters"]), int(m["wrong"])))
    out = []
    for (op, size), ranks in sorted(timed.items(), key=lambda kv: kv[0][1]):
        if len(ranks) >= world:
            out.append(Point(OPS[op], size, sum(t for t, _ in ranks) / len(ranks),
                             sum(w for _, w in ranks), world))
    return out


def fitted(pts: Sequence[Point], backend: str) -> Fit | None:
    """The alpha-beta line through the points (``costmodel.fit``: alpha the cost of a step,
    beta the bandwidth a rank sends at, by the backend's schedule of the op)."""
    return fit((c, p.time_s) for p in pts
               if (c := cost_of(p.op, backend, p.world, p.size)) is not None)


def predicted_s(f: Fit, p: Point, backend: str) -> float | None:
    c = cost_of(p.op, backend, p.world, p.size)
    return None if c is None else f.predict(c)


def from_stats(rows: Iterable[dict]) -> list[list[Point]]:
    """A recording's statistics rows (``Model.stats_table``) as points: one list per call and
    group size recorded at two sizes or more, each size's time its median call's."""
    by: dict[tuple[str, int], list[Point]] = {}
    for row in rows:
        if bandwidth.bus_factor(row["op"], row["ranks"]) is not None and row["size"] > 0:
            by.setdefault((row["op"], row["ranks"]), []).append(Point(
                row["op"], row["size"], row["time_p50_us"] / 1e6, 0, row["ranks"]))
    return [sorted(pts, key=lambda p: p.size) for pts in by.values()
            if len({p.size for p in pts}) >= 2]


def knee(f: Fit, op: str, world: int, backend: str) -> int | None:
    """The size where the fitted line's bandwidth term equals its latency term: below it a
    call is latency-bound, above it bandwidth-bound (None without a schedule, or with no
    byte count that mattered)."""
    one = cost_of(op, backend, world, 1 << 20)
    if one is None or not math.isfinite(f.beta_bps) or one.sent == 0:
        return None
    # sent grows with the size: steps x alpha = sent(S) / beta
    return round(one.steps * f.alpha_s * f.beta_bps * (1 << 20) / one.sent)


# ---- nccl-tests' table --------------------------------------------------------------------
HEADER = ("#       size         count      type   redop    root     time   algbw   busbw "
          "#wrong",
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)")


def row_line(p: Point) -> str:
    """A row as nccl-tests prints one (its out-of-place columns)."""
    redop = "sum" if p.op in _REDUCING else "none"
    root = 0 if p.op in _ROOTED else -1
    us = p.time_s * 1e6  # nccl-tests' precision: fewer decimals for longer times
    time = f"{us:8.0f}" if us >= 10_000 else f"{us:8.1f}" if us >= 100 else f"{us:8.2f}"
    return (f"{p.size:>12} {p.count:>13} {'float':>9} {redop:>7} {root:>7} "
            f"{time} {p.algbw:>7.2f} {p.busbw:>7.2f} {p.wrong:>6}")


def avg_busbw(pts: Sequence[Point]) -> float:
    """nccl-tests' last line: the mean busbw over the sizes."""
    return sum(p.busbw for p in pts) / len(pts) if pts else 0.0
