"""Rich renderables drawn from the model: testable without running an app."""

from __future__ import annotations

import time

from rich.table import Table
from rich.text import Text

from ..viewer import text
from ..viewer.model import Model

SPARK = "▁▂▃▄▅▆▇█"
SILENT_AFTER_S = 1.5  # three missed heartbeats


def sparkline(values: list[float], top: float) -> str:
    if not values or top <= 0:
        return ""
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1)))] for v in values)


def ranks_table(model: Model, now: float, now_ns: int | None = None) -> Table:
    now_ns = time.time_ns() if now_ns is None else now_ns
    table = Table(expand=True, box=None, pad_edge=False)
    for col, justify in (("rank", "right"), ("host", "left"), ("device", "left"),
                         ("state", "left"), ("ops", "right"),
                         ("read", "right"), ("written", "right")):
        table.add_column(col, justify=justify, no_wrap=True)
    # load takes what the other columns leave, so a narrow terminal cuts the sparkline,
    # never a rank's state
    table.add_column("load", justify="left", no_wrap=True, ratio=1)
    inflight: dict[int, list] = {}
    for op in model.inflight.values():
        inflight.setdefault(op.rank, []).append(op)
    for rank, s in sorted(model.ranks.items()):
        if s.exited:
            state = Text("exited", style="dim")
        elif now - s.last_seen > SILENT_AFTER_S:
            state = Text(f"silent {now - s.last_seen:.0f}s", style="bold red")
        elif rank in inflight:
            op = min(inflight[rank], key=lambda o: o.t_start)
            waited = max(0, now_ns - op.t_start) / 1e6
            state = Text(f"in {op.op} #{op.seq} {waited:.0f} ms", style="bold yellow")
        elif s.last_op:
            state = Text(f"done {s.last_op}", style="green")
        else:
            state = Text("idle", style="dim")
        table.add_row(str(rank), s.host, s.device, state, str(s.ops),
                      text.human_bytes(s.bytes_in), text.human_bytes(s.bytes_out), _load(s))
    return table


def _load(s) -> Text:
    samples = [tel for _, tel in list(s.telemetry)[-16:]]
    if not samples:
        return Text("")
    last = samples[-1]
    if last.get("gpu_util_pct") is not None:
        spark = sparkline([t.get("gpu_util_pct") or 0 for t in samples], 100)
        mem = last.get("gpu_mem_used") or 0
        return Text(f"GPU {last['gpu_util_pct']:3.0f}% {spark} {text.human_bytes(mem)}",
                    style="cyan")
    cpu = last.get("cpu_pct") or 0
    spark = sparkline([t.get("cpu_pct") or 0 for t in samples], 100)
    rss = text.human_bytes(last.get("rss_bytes") or 0)
    return Text(f"CPU {cpu:3.0f}% {spark} rss {rss}", style="cyan")


def stats_table(model: Model) -> Table:
    table = Table(expand=True, box=None, pad_edge=False)
    for col in ("op", "n", "size", "count", "p50 us", "algbw", "busbw"):
        table.add_column(col, justify="left" if col == "op" else "right", no_wrap=True)
    for row in model.stats_table()[-12:]:
        busbw = "n/a" if row["busbw_gbps"] is None else f"{row['busbw_gbps']:.3f}"
        table.add_row(row["op"], str(row["ranks"]), text.human_bytes(row["size"]),
                      str(row["count"]), f"{row['time_p50_us']:.0f}", f"{row['algbw_gbps']:.3f}",
                      busbw)
    return table
