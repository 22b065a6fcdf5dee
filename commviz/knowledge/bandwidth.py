"""nccl-tests' definitions of an operation's size S and its bus-bandwidth factor.

algbw = S / t and busbw = algbw x factor, with S and the factor per collective as in
nccl-tests (``knowledge/collectives.md``), so figures compare with what users already know.
"""

from __future__ import annotations

import math

from commviz.wire import protocol

# op -> (which per-rank byte count gives S: "in", "out" or "max"; multiply by n?)
_SIZE_RULE: dict[str, tuple[str, bool]] = {
    "all_reduce": ("in", False),
    "all_gather": ("out", False), "all_gather_into_tensor": ("out", False),
    "all_gather_single": ("out", False),
    "reduce_scatter": ("in", False), "reduce_scatter_tensor": ("in", False),
    "reduce_scatter_single": ("in", False),
    "broadcast": ("max", False), "reduce": ("in", False),
    "all_to_all": ("in", False), "all_to_all_single": ("in", False),
    "gather": ("in", True), "scatter": ("out", True),
    "send": ("in", False), "isend": ("in", False),
    "recv": ("out", False), "irecv": ("out", False),
}

SIZE_SOURCE = [_SIZE_RULE.get(op, ("max", False))[0] for op in protocol.OPS]
SIZE_TIMES_N = [_SIZE_RULE.get(op, ("max", False))[1] for op in protocol.OPS]


def size_of(op: str, n: int, bytes_in: int, bytes_out: int) -> int:
    """S for one rank's record of ``op`` in a group of ``n`` ranks."""
    source, times_n = _SIZE_RULE.get(op, ("max", False))
    base = {"in": bytes_in, "out": bytes_out}.get(source, max(bytes_in, bytes_out))
    return base * n if times_n else base


def bus_factor(op: str, n: int) -> float | None:
    """busbw / algbw for ``op`` over ``n`` ranks; None where nccl-tests defines none."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op.startswith(("all_gather", "reduce_scatter", "all_to_all")) and "object" not in op:
        return (n - 1) / n
    if op in ("gather", "scatter"):
        return (n - 1) / n
    if op in ("broadcast", "reduce") or op in protocol.P2P and "object" not in op:
        return 1.0
    return None


def gbps(size: float, seconds: float) -> float:
    """Bytes per second in GB/s (1e9), as nccl-tests prints them."""
    return size / seconds / 1e9 if seconds > 0 else 0.0


GBPS_FLOOR = 0.001  # GB/s (1 MB/s): a smaller figure prints as "<0.001"


def gbps_text(value: float | None) -> str:
    """A GB/s figure in at most 7 characters, by one rule for every column: three significant
    digits (0.00123: the small ones of CPU demos, where nccl-tests' two decimals would print
    0.00), "<0.001" below 1 MB/s, "n/a" for None (nothing moved, or no bus factor)."""
    if value is None:
        return "n/a"
    value = float(f"{value:.3g}")  # rounded first: 0.9999 -> 1.00, not 1.000
    if value >= 100:
        return f"{value:.0f}"
    if value < GBPS_FLOOR:
        return f"<{GBPS_FLOOR}" if value > 0 else "0"
    return f"{value:.{2 - math.floor(math.log10(value))}f}"
