"""The alpha-beta cost model of a collective: what the busiest rank sends, in how many steps,
and how long that should take on the links this run has measured.

``t = alpha x steps + sent / beta``: alpha is the fixed cost of one step (latency, the
backend's bookkeeping), beta the bandwidth one rank sends at. Both are fitted to the run's own
median times, so a prediction compares one operation with the others of the same run; with a
single shape of operation the two cannot be told apart and no prediction is made.
Pure (stdlib only), like the schedules it reads.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from commviz.knowledge import schedules
from commviz.knowledge.schedules import Schedule

MIN_SHAPES = 2  # distinct (steps, bytes) shapes a fit needs: two unknowns
# groups beyond this are left out of fit_stats: a cost is counted from the op's schedule,
# which grows as the square of its ranks (a 1,024-rank ring: 2 million transfers, 5 s)
COST_RANKS_MAX = 64


@dataclass(frozen=True)
class Cost:
    """What a schedule asks of its busiest rank."""

    steps: int
    sent: int  # bytes


def cost(s: Schedule) -> Cost:
    sent: dict[int, int] = {}
    for step in s.steps:
        for t in step.transfers:
            sent[t.src] = sent.get(t.src, 0) + t.nbytes
    return Cost(len(s.steps), max(sent.values(), default=0))


@functools.lru_cache(maxsize=1024)
def cost_of(op: str, backend: str, n: int, size: int) -> Cost | None:
    """The cost of ``op`` as ``backend`` schedules it; None where it has no schedule. The
    busiest rank's bytes do not depend on which rank is the root."""
    try:
        return cost(schedules.schedule(op, backend, n, size))
    except ValueError:
        return None


def fit_stats(rows: Iterable[dict], backend: str) -> Fit | None:
    """A fit to the median times of a model's statistics rows (``Model.stats_table``), of
    groups up to COST_RANKS_MAX ranks (a live view fits at its frame rate)."""
    samples = []
    for row in rows:
        c = None if "object" in row["op"] or row["ranks"] > COST_RANKS_MAX else cost_of(
            row["op"], backend, row["ranks"], row["size"])
        if c is not None:  # object collectives also pickle: not a transfer's cost
            samples.append((c, row["time_p50_us"] / 1e6))
    return fit(samples)


@dataclass(frozen=True)
class Fit:
    alpha_s: float        # seconds per step
    beta_bps: float       # bytes per second; inf: no byte count measured mattered
    shapes: int           # distinct shapes the fit was made from

    def predict(self, c: Cost) -> float:
        """Seconds the model expects ``c`` to take."""
        return c.steps * self.alpha_s + c.sent / self.beta_bps


def fit(samples: Iterable[tuple[Cost, float]]) -> Fit | None:
    """Least squares over (cost, measured seconds) pairs, on relative error so that a 5 ms op
    does not drown a 50 us one; alpha and 1/beta kept >= 0. None when fewer than
    ``MIN_SHAPES`` distinct shapes or when the shapes cannot tell alpha from beta."""
    rows: dict[Cost, list[float]] = {}
    for c, t in samples:
        if t > 0 and c.steps > 0:
            rows.setdefault(c, []).append(t)
    if len(rows) < MIN_SHAPES:
        return None
    pts = [(c.steps, c.sent, sorted(ts)[len(ts) // 2]) for c, ts in rows.items()]
    # scaled rows: (steps / t) alpha + (sent / t) gamma = 1, with gamma = 1 / beta
    a11 = sum((s / t) ** 2 for s, _, t in pts)
    a12 = sum(s * b / t ** 2 for s, b, t in pts)
    a22 = sum((b / t) ** 2 for _, b, t in pts)
    r1 = sum(s / t for s, _, t in pts)
    r2 = sum(b / t for _, b, t in pts)
    det = a11 * a22 - a12 * a12
    if det <= 1e-9 * a11 * a22:
        return None  # every shape a multiple of one: latency and bandwidth are confounded
    # the unconstrained optimum, else the best with one of the two at zero
    candidates = [(r1 / a11, 0.0), (0.0, r2 / a22)]
    alpha, gamma = (r1 * a22 - r2 * a12) / det, (a11 * r2 - a12 * r1) / det
    if alpha >= 0 and gamma > 0:
        candidates.append((alpha, gamma))

    def residual(ag: tuple[float, float]) -> float:
        return sum(((s * ag[0] + b * ag[1]) / t - 1) ** 2 for s, b, t in pts)

    alpha, gamma = min(candidates, key=residual)
    return Fit(alpha, 1 / gamma if gamma > 0 else float("inf"), len(pts))
