"""The sweep demo (`commviz demo sweep`): nccl-tests' table from the ranks' timed loops.

Pure tests of knowledge/sweep.py (the sizes, the counts, the rows read from phases, the
columns and the fit), then the demo on real gloo ranks, headless, for every op it sweeps: its
table's sizes, counts, bandwidths and #wrong, against nccl-tests' formulas; and its errors.
"""

from __future__ import annotations

import io
import re
import threading
import types

import pytest
from fakes import heartbeat

from commviz.headless import _Printer
from commviz.knowledge import bandwidth, sweep
from commviz.knowledge.costmodel import cost_of
from commviz.viewer.model import Model
from commviz.wire import protocol
from commviz.wire.protocol import PhaseSpan

US = 1_000


def _span(op: str, size: int, t0: int, us: float, iters: int = 10, wrong: int = 0):
    return PhaseSpan(sweep.phase_name(op, size, iters, wrong), 0, t0, t0 + round(us * US))


# ---- pure ---------------------------------------------------------------------------------
def test_sizes_double_from_min_to_max_and_read_as_nccl_tests_reads_them():
    assert sweep.Sweep(min_bytes=8, max_bytes=64).sizes() == [8, 16, 32, 64]
    assert sweep.Sweep(min_bytes=3, max_bytes=20).sizes() == [3, 6, 12]
    assert [sweep.parse_bytes(t) for t in ("8", "64K", "64M", "1g", "2KB")] == [
        8, 64 << 10, 64 << 20, 1 << 30, 2 << 10]
    with pytest.raises(ValueError, match="no size"):
        sweep.parse_bytes("-8")
    with pytest.raises(ValueError, match="not 'gather'"):
        sweep.Sweep(op="gather").check()
    with pytest.raises(ValueError, match="--min must be"):
        sweep.Sweep(min_bytes=64, max_bytes=8).check()
    spec = sweep.Sweep("all_gather", 16, 1024, 3, 1)
    assert sweep.Sweep.from_env(spec.env()) == spec and sweep.Sweep.from_env({}) == sweep.Sweep()


def test_counts_are_whole_blocks_where_each_rank_has_one():
    assert sweep.count_of("all_reduce", 4, 1024) == 256
    assert sweep.count_of("all_gather", 3, 1024) == 255  # 85 elements a rank
    assert sweep.count_of("all_to_all", 4, 8) == 4  # at least one each
    assert sweep.count_of("broadcast", 4, 2) == 1


def test_a_row_is_the_ranks_mean_time_and_their_wrong_elements_summed():
    """Rank 1 took 30 us a call, rank 0 10 us: nccl-tests' time is their mean, 20 us. A size
    not every rank has timed yet is no row; other phases are passed over."""
    phases = {0: [_span("all_reduce", 1024, 0, 100), _span("all_reduce", 2048, 10**6, 200),
                  PhaseSpan("forward", 0, 0, 5)],
              1: [_span("all_reduce", 1024, 0, 300, wrong=3)]}
    (p,) = sweep.points(phases, world=2)
    assert (p.op, p.size, p.count, p.wrong) == ("all_reduce", 1024, 256, 3)
    assert p.time_s == pytest.approx(20e-6)
    assert p.algbw == pytest.approx(1024 / 20e-6 / 1e9)
    assert p.busbw == pytest.approx(p.algbw * 2 * (2 - 1) / 2)
    # nccl-tests' bus factors: (n-1)/n for all_gather, 1 for broadcast
    assert sweep.Point("all_gather", 4096, 1e-3, 0, 4).busbw == pytest.approx(
        4096 / 1e-3 / 1e9 * 3 / 4)
    assert sweep.Point("broadcast", 4096, 1e-3, 0, 4).busbw == pytest.approx(4.096e-3)


def test_rows_print_as_nccl_tests_prints_them():
    p = sweep.Point("all_reduce", 1048576, 123.456e-6, 0, 8)
    assert sweep.row_line(p).split() == ["1048576", "262144", "float", "sum", "-1", "123.5",
                                         "8.49", "14.86", "0"]
    assert sweep.row_line(sweep.Point("broadcast", 8, 12e-3, 0, 8)).split()[3:6] == [
        "none", "0", "12000"]
    assert len(sweep.row_line(p)) == len(sweep.HEADER[0])


def test_the_fit_recovers_a_known_alpha_and_beta_and_names_the_knee():
    """Times made by the model itself (gloo's ring at 4 ranks, alpha 50 us, beta 1 GB/s):
    the fit gives them back, and the knee is where both terms are equal."""
    alpha, beta = 50e-6, 1e9
    pts = []
    for size in (1 << 10, 1 << 14, 1 << 18, 1 << 22):
        c = cost_of("all_reduce", "gloo", 4, size)
        pts.append(sweep.Point("all_reduce", size,
                               c.steps * alpha + c.sent / beta, 0, 4))
    f = sweep.fitted(pts, "gloo")
    assert f.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert f.beta_bps == pytest.approx(beta, rel=1e-6)
    knee = sweep.knee(f, "all_reduce", 4, "gloo")
    c = cost_of("all_reduce", "gloo", 4, knee)
    assert c.steps * alpha == pytest.approx(c.sent / beta, rel=0.01)
    assert sweep.fitted(pts[:1], "gloo") is None  # one size cannot tell the two apart


# ---- on real ranks ------------------------------------------------------------------------
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+float\s+(sum|none)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)"
                 r"\s+([\d.]+)\s+(\d+)$", re.M)


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("op", list(sweep.OPS))
def test_the_sweep_prints_nccl_tests_table_with_every_result_checked(procs, op):
    proc = procs.start("-m", "commviz", "demo", "sweep", "--ranks", "3", "--headless",
                       "--op", op, "--min", "64", "--max", "16K", "--iters", "4",
                       "--warmup", "1")
    rc = proc.finish(100)
    out = proc.stdout
    assert rc == 0, out + proc.stderr
    assert "Traceback" not in proc.stderr
    rows = ROW.findall(out)
    sizes = [int(r[0]) for r in rows]
    # every size, doubling; all_gather's and all_to_all's rounded to whole blocks of 3 ranks
    assert sizes == [sweep.count_of(op, 3, s) * 4 for s in (64 << i for i in range(9))], out
    for size, count, redop, root, time_us, algbw, busbw, wrong in rows:
        assert int(count) * 4 == int(size)
        assert redop == ("sum" if op in ("all_reduce", "reduce_scatter") else "none")
        assert int(root) == (0 if op == "broadcast" else -1)
        assert float(time_us) > 0 and int(wrong) == 0, out
        assert float(algbw) == pytest.approx(int(size) / float(time_us) / 1e3, abs=0.011)
        factor = bandwidth.bus_factor(sweep.OPS[op], 3)
        assert float(busbw) == pytest.approx(float(algbw) * factor, abs=0.011)
    assert re.search(r"^# Avg bus bandwidth    : [\d.e-]+$", out, re.M), out
    assert "alpha " in out and " per step (latency)" in out, out
    # a call's line per op is left out: the table says it
    assert not re.search(rf"^\s+[\d.]+s\s+{sweep.OPS[op]}\s", out, re.M), out


@pytest.mark.integration
@pytest.mark.parametrize("args, said", [
    (["sweep", "--op", "gather"], "invalid choice: 'gather'"),
    (["sweep", "--min", "1M", "--max", "8"], "--min must be at least 1 byte and at most --max"),
    (["sweep", "--max", "lots"], "'lots' is no size"),
    (["all_reduce", "--op", "all_reduce"], "--op: options of the sweep demo"),
])
def test_bad_sweep_options_get_one_sentence_and_exit_2(procs, args, said):
    proc = procs.start("-m", "commviz", "demo", *args, "--headless")
    assert proc.finish(30) == 2
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("op", list(sweep.OPS))
def test_the_check_counts_the_elements_a_call_left_wrong(op):
    """Each op's checked buffers, the call not made: #wrong counts what differs from the
    result the call must give (a check that passes on anything would pass here too)."""
    import torch
    from commviz.demos import sweep as demo

    count = sweep.count_of(op, 4, 64)
    out, _call, expected = demo._checked_call(op, 1, 4, count, torch.device("cpu"))
    want = torch.as_tensor(expected).expand(out.shape)
    assert demo._wrong(out, expected) == int((out != want).sum()) > 0
    out.copy_(want)  # as the call would have left it
    assert demo._wrong(out, expected) == 0


def test_a_recordings_ops_at_two_sizes_or_more_make_curves_of_their_median_calls():
    rows = [{"op": "all_reduce", "ranks": 4, "size": s, "time_p50_us": t}
            for s, t in ((4096, 50.0), (1024, 40.0))] + [
        {"op": "broadcast", "ranks": 4, "size": 64, "time_p50_us": 9.0},  # one size: none
        {"op": "barrier", "ranks": 4, "size": 0, "time_p50_us": 9.0},
        {"op": "all_reduce", "ranks": 2, "size": 64, "time_p50_us": 9.0}]
    (curve,) = sweep.from_stats(rows)
    assert [(p.op, p.size, p.time_s, p.world) for p in curve] == [
        ("all_reduce", 1024, 40e-6, 4), ("all_reduce", 4096, 50e-6, 4)]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_stats_plot_draws_a_recorded_sweeps_curves(procs, tmp_path):
    rec = tmp_path / "sweep.jsonl"
    proc = procs.start("-m", "commviz", "demo", "sweep", "--ranks", "2", "--headless",
                       "--max", "4K", "--iters", "3", "--record", str(rec))
    assert proc.finish(100) == 0, proc.stderr
    proc = procs.start("-m", "commviz", "stats", str(rec), "--plot")
    assert proc.finish(60) == 0, proc.stderr
    out = proc.stdout
    assert "all_reduce · 2 ranks" in out and "\x1b[" not in out  # no colour into a pipe
    assert "busbw (GB/s)" in out and "time per call (µs)" in out
    # (beta ∞ where no size was large enough for the bytes to matter on a loaded machine)
    assert re.search(r"^model: alpha [\d.]+ [µm]?s per step, beta ([\d.]+ GB/s|∞)$", out, re.M) \
        or "no alpha-beta line" in out, out
    assert all(tick in out for tick in ("8", "32", "128", "512", "2K"))  # every other size


def test_a_size_is_a_row_once_every_rank_of_the_job_has_timed_it_not_every_rank_heard():
    """Rank 1 of 3 joins late: the ranks heard so far are not the job. Before it reports,
    no row; then each row once (CI printed the first row twice, the header too)."""
    model = Model()
    session = types.SimpleNamespace(model=model, lock=threading.Lock())
    out = io.StringIO()
    printer = _Printer(session, out, "en", "gloo")  # type: ignore[arg-type]
    for rank in (0, 2):
        model.apply([heartbeat(rank, 3),
                     protocol.Phases(rank, (_span("all_reduce", 64, 0, 100),))])
    printer._sweep_rows()
    assert out.getvalue() == ""
    model.apply([heartbeat(1, 3), protocol.Phases(1, (_span("all_reduce", 64, 0, 100),))])
    printer._sweep_rows()
    printer._sweep_rows()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[3].split()[0] == "64", lines  # title, header, one row
