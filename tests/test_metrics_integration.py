"""``--metrics`` end to end: a real demo's /metrics scraped over HTTP while its ranks run,
read with prometheus-client's own parser; a port in use is a one-line error that starts
nothing."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import pytest
from procs import SUMMARY
from prometheus_client.parser import text_string_to_metric_families

from commviz.launch.launcher import free_port

pytestmark = pytest.mark.integration  # real ranks, sockets and processes

ITERS = 6


def _scrape(port: int) -> dict[str, dict[tuple, float]] | None:
    """/metrics parsed (sample name -> sorted labels -> value); None while nothing serves."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain")
            body = resp.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_a_demo_serves_its_op_counts_and_ranks_alive_while_it_runs(procs):
    port = free_port()
    proc = procs.start("-m", "commviz", "demo", "all_reduce", "--ranks", "4", "--headless",
                       "--iters", str(ITERS), "--interval", "0.5",
                       "--metrics", f"127.0.0.1:{port}")
    key = (("op", "all_reduce"), ("ranks", "4"), ("size_bucket", "4096"))
    seen: list[tuple[float, float]] = []  # (all_reduces, ranks alive) of each scrape
    deadline = time.monotonic() + 60
    while proc.p.poll() is None and time.monotonic() < deadline:
        got = _scrape(port)
        if got is not None and got.get("commviz_ops_total"):
            alive = sum(got.get("commviz_ranks_alive", {}).values())
            seen.append((got["commviz_ops_total"][key], alive))
            assert got["commviz_op_records_total"][()] >= got["commviz_ops_total"][key] * 4
            assert got["commviz_op_duration_seconds_count"][key] == \
                got["commviz_ops_total"][key]
        time.sleep(0.1)
    assert proc.finish(60) == 0, proc.stderr
    assert f"Prometheus metrics at http://127.0.0.1:{port}/metrics" in proc.stderr
    # while it ran: its all_reduces counted as they completed, its four ranks alive
    assert any(0 < ops <= ITERS and alive == 4 for ops, alive in seen), seen
    assert [ops for ops, _ in seen] == sorted(ops for ops, _ in seen)
    (summary,) = [line for line in proc.out if SUMMARY.match(line)]
    assert summary.startswith(f"{4 * ITERS} op records, {ITERS} collective instances")
    assert _scrape(port) is None  # it served no longer than the viewer ran


def test_a_metrics_port_in_use_is_one_line_and_starts_nothing(procs):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args in (("demo", "all_reduce", "--ranks", "2", "--headless", "--iters", "2"),
                     ("watch", "--headless", "--bind", f"tcp://127.0.0.1:{free_port()}")):
            done = procs.commviz(*args, "--metrics", str(port))
            assert done.returncode == 2
            assert done.stderr == (f"commviz: error: --metrics 127.0.0.1:{port}: the port is "
                                   "already in use (another commviz, or an exporter?): pick "
                                   "another\n")
            assert done.stdout == ""  # no banner, no rank joined
