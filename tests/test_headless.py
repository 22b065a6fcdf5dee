"""The headless viewer's lines: their clock, their order within a round, their columns."""

from __future__ import annotations

import io
import re
import time

import pytest
import zmq

from commviz import headless
from commviz.viewer import plain_text as text
from commviz.viewer.model import Instance
from commviz.viewer.session import Session
from commviz.wire import protocol

T = 1_800_000_000_000_000_000
MS = 1_000_000


def _inst(op: str, group: tuple[int, ...], seq: int, start_ms: float, end_ms: float) -> Instance:
    return Instance(op, group, seq, 4096, T + round(start_ms * MS), T + round(start_ms * MS),
                    T + round(end_ms * MS), "float32", None)


def test_times_are_op_ends_since_t0_and_never_negative():  # the TUI's log: compact columns
    assert text.instance_line(_inst("all_reduce", (0, 1), 1, 2, 8), T).startswith(
        "   0.008s  all_reduce ")
    # ended before the viewer heard anything (a job already running when it started)
    assert text.instance_line(_inst("send", (0, 1), 1, -9, -1), T).startswith(
        "   0.000s  send ")


def test_columns_stay_aligned_for_the_longest_names():
    lines = [text.instance_header()] + [
        text.instance_line(_inst(op, group, seq, 0, 1), T, text.COLUMNS) for op, group, seq in [
            ("send", (0, 1), 1), ("reduce_scatter_single", (0, 1), 6),
            ("all_gather_into_tensor", tuple(range(8)), 1234567), ("broadcast", (100, 101), 2),
            ("all_reduce", (1000, 1001, 1002), 3), ("send", (9999, 9998), 4)]]
    ranks = [line.index("ranks") for line in lines[:1]] + [
        re.search(r"\s(\d+ -> \d+|[\d,]+|\d+ ranks)\s", line[11:]).start(1) + 11
        for line in lines[1:]]
    seqs = [lines[0].index("seq")] + [line.index("#") for line in lines[1:]]
    sizes = [line.index("size") + 4 for line in lines[:1]] + [
        line.index("KiB") + 3 for line in lines[1:]]
    assert len(set(ranks)) == 1 and len(set(seqs)) == 1 and len(set(sizes)) == 1, lines
    assert "8 ranks" in lines[3] and "3 ranks" in lines[5] and "100,101 " in lines[4]


def test_the_tuis_log_shortens_a_long_name_so_its_columns_stay_aligned():
    """FSDP's reduce_scatter_single pushed its line's columns right of the others' (user
    trial)."""
    lines = [text.instance_line(_inst(op, (0, 1, 2, 3), 7, 0, 1), T)
             for op in ("reduce_scatter_single", "all_gather_into_tensor", "all_reduce")]
    assert len({line.index("#") for line in lines}) == 1, lines
    assert " reduce_…single " in lines[0] and " all_gat…tensor " in lines[1]


@pytest.mark.integration
def test_lines_come_in_time_order_on_the_clock_of_the_first_message():
    """A round's transfers and collectives (and subgroups') came out each in its own order,
    timed from the first printed op's start: -0.001 s below 0.008 s."""
    session = Session("tcp://127.0.0.1:*", collect_instances=True)
    try:
        session.first_message_ns = T
        session.model.new_instances = [
            _inst("send", (0, 1), 1, 0.5, 1), _inst("send", (0, 1), 3, 7.5, 8),
            _inst("all_reduce", (0, 1), 1, 2, 3), _inst("all_reduce", (2, 3), 1, 1.5, 2)]
        out = io.StringIO()
        headless._Printer(session, out).flush()
    finally:
        session.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == text.instance_header()
    assert [line.split()[:2] for line in lines[1:]] == [
        ["0.001s", "send"], ["0.002s", "all_reduce"], ["0.003s", "all_reduce"],
        ["0.008s", "send"]]


@pytest.mark.integration
def test_the_session_notes_when_its_first_message_arrived():
    session = Session("tcp://127.0.0.1:*")
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    try:
        assert session.first_message_ns is None
        session.poll(0)
        assert session.first_message_ns is None
        push.connect(session.addr)
        before = time.time_ns()
        push.send(protocol.pack({"v": protocol.VERSION, "k": "hb", "rank": 0, "world": 1,
                                 "host": "node0", "pid": 100, "backend": "gloo",
                                 "device": "cpu", "t_ns": before, "dropped": 0, "tel": {}}))
        deadline = time.monotonic() + 5
        while session.first_message_ns is None and time.monotonic() < deadline:
            session.poll(50)
        first = session.first_message_ns
        assert first is not None and before <= first <= time.time_ns()
        push.send(protocol.pack({"v": protocol.VERSION, "k": "bye", "rank": 0,
                                 "t_ns": time.time_ns(), "dropped": 0}))
        while not session.model.ranks[0].exited and time.monotonic() < deadline:
            session.poll(50)
        assert session.first_message_ns == first
    finally:
        push.close(linger=0)
        ctx.term()
        session.close()


def test_the_stats_table_lists_rows_by_op_ranks_and_size():
    """As nccl-tests lists its sizes (rows came in the order each shape first completed)."""

    def row(op, ranks, size):
        return {"op": op, "ranks": ranks, "size": size, "count": 1, "time_p50_us": 1.0,
                "time_p99_us": 1.0, "skew_p50_us": 0.0, "algbw_gbps": 1.0, "busbw_gbps": None}

    table = text.stats_table([row("broadcast", 4, 64), row("all_reduce", 4, 4096),
                              row("all_reduce", 2, 64), row("all_reduce", 4, 64)])
    lines = table.splitlines()
    assert "skew (us)" in lines[0]
    assert [line.split()[:3] for line in lines[2:]] == [
        ["all_reduce", "2", "64"], ["all_reduce", "4", "64"], ["all_reduce", "4", "4096"],
        ["broadcast", "4", "64"]]


def test_the_stats_tables_bandwidths_share_one_format_under_their_unit():
    """0.000873, <0.0001 and 0.00112 in one column, and no unit in the heads (user trial):
    one floor for both columns, each head says GB/s; the numbers stay under their heads."""

    def row(size, algbw, busbw):
        return {"op": "all_reduce", "ranks": 4, "size": size, "count": 2, "time_p50_us": 9.0,
                "time_p99_us": 9.0, "skew_p50_us": 0.0, "algbw_gbps": algbw,
                "busbw_gbps": busbw}

    lines = text.stats_table([row(64, 0.000873, 0.00004), row(4096, 0.00112, 0.00168)])
    lines = lines.splitlines()
    assert lines[0].split()[-4:] == ["algbw", "(GB/s)", "busbw", "(GB/s)"]
    assert [line.split()[-2:] for line in lines[2:]] == [["<0.001", "<0.001"],
                                                         ["0.00112", "0.00168"]]
    assert {len(line) for line in lines} == {len(lines[0])}


@pytest.mark.integration
def test_a_short_jobs_ops_that_ended_before_its_first_message_are_timed_from_the_first():
    """An instrumented 2-rank script under `commviz watch --headless`: its six ops ended
    within 2 ms, before its first batch reached the viewer, and every line read 0.000s;
    they are now timed from the first op's start, as the TUI's log times them."""
    session = Session("tcp://127.0.0.1:*", collect_instances=True)
    try:
        session.first_message_ns = T + 50 * MS  # the emitter's first tick, after them all
        session.model.new_instances = [_inst("all_reduce", (0, 1), k, 2 * k, 2 * k + 1)
                                       for k in range(1, 4)]
        out = io.StringIO()
        headless._Printer(session, out).flush()
    finally:
        session.close()
    assert [line.split()[0] for line in out.getvalue().splitlines()[1:]] == [
        "0.001s", "0.003s", "0.005s"]  # ends at 3, 5 and 7 ms, the first began at 2 ms


@pytest.mark.integration
def test_headless_lines_speak_the_language_asked():
    """--lang pt: the header, the lines, the statistics and the counts in Portuguese (the
    source material's language); the table's numbers keep their decimal point for programs."""
    session = Session("tcp://127.0.0.1:*", collect_instances=True)
    try:
        session.first_message_ns = T
        session.model.new_instances = [_inst("all_reduce", (0, 1), 1, 2, 3)]
        out = io.StringIO()
        printer = headless._Printer(session, out, "pt")
        printer.flush()
        lines = out.getvalue().splitlines()
        assert lines[0].split()[:2] == ["fim", "(s)"] and "tamanho" in lines[0], lines
        assert "tempo desde a última chegada, defasagem das chegadas" in lines[0]
        assert re.search(r"0,003s  all_reduce .* 4,0 KiB  tempo +1 ms  defasagem ",
                         lines[1]), lines
    finally:
        session.close()
    rows = [{"op": "all_reduce", "ranks": 2, "size": 4096, "count": 3, "time_p50_us": 624.8,
             "time_p99_us": 833.0, "skew_p50_us": 13.8, "algbw_gbps": 0.00656,
             "busbw_gbps": 0.00656}]
    table = text.stats_table(rows, "pt").splitlines()
    assert table[0].split() == ["op", "ranks", "tamanho", "(B)", "chamadas", "p50", "(us)", "p99",
                                "(us)", "defasagem", "(us)", "algbw", "(GB/s)", "busbw",
                                "(GB/s)"], table
    assert table[2].split()[3:] == ["3", "624.8", "833.0", "13.8", "0.00656", "0.00656"]
    # the longer Portuguese heads widen their columns: the numbers stay under them
    assert table[0].index("(us)", table[0].index("defasagem")) + 4 == table[2].index("13.8") + 4
    assert text.counts_line(6, 3, 1, 2, 0, "pt") == \
        "6 registros de op, 3 instâncias de coletivas, 1 transferência; 2 com falha, não contadas"
    assert text.counts_line(6, 3, 1, 1, 1, "pt") == \
        "6 registros de op, 3 instâncias de coletivas, 1 transferência; 1 com falha, não " \
        "contada; 1 ficou incompleta (faltam registros de alguns dos seus ranks)"
    assert text.stats_table([], "pt").endswith("(nenhuma coletiva ou transferência concluída)")


def _recorded_summary(messages: list, path) -> str:
    """``messages`` through a session recording to ``path``; its headless summary."""
    session = Session("tcp://127.0.0.1:*", record=path)
    try:
        session.model.apply(messages)
        session.recorder.write(messages)
        out = io.StringIO()
        headless._Printer(session, out).summary()
    finally:
        session.close()
    return out.getvalue()


@pytest.mark.integration
def test_every_summary_counts_an_instance_left_failed_or_incomplete(tmp_path, capsys):
    """The trial's size mismatch: rank 1 failed in all_reduce #2, rank 0 aborted inside it
    and sent no record. '3 op records, 1 collective instances' and a summary with
    "failed": 0 left that record out of every count; the headless lines, the recording's
    summary and `commviz stats` now give it as failed (and a half-recorded one that did not
    fail as incomplete), the same in each."""
    import json

    from fakes import T0_NS, heartbeat, op_batch

    from commviz import cli

    g2 = {0: ("0", (0, 1))}

    def rec(seq, flags=0, op="all_reduce", **kw):
        return {"id": seq, "op": op, "seq": seq, "bytes_in": 4096, "bytes_out": 4096,
                "t_start": T0_NS + seq, "t_end": T0_NS + seq + 1, "flags": flags, **kw}

    messages = [heartbeat(0, 2), heartbeat(1, 2),
                op_batch(0, [rec(1)], g2), op_batch(1, [rec(1), rec(2, protocol.FLAG_FAILED)], g2),
                op_batch(0, [rec(3, op="send", peer=1)], g2)]  # its recv never recorded
    path = tmp_path / "size.jsonl"
    out = _recorded_summary(messages, path)
    assert out.strip().splitlines()[-1].startswith(
        "4 op records, 1 collective instance, 0 transfers; 1 failed, not counted; 1 left "
        "incomplete (records missing from some of its ranks); "), out
    summary = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
    assert (summary["kind"], summary["failed"], summary["unmatched"]) == ("summary", 1, 1)
    assert cli.main(["stats", str(path), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["records"], stats["instances"], stats["failed"], stats["unmatched"]) == \
        (4, 1, 1, 1)
    assert cli.main(["stats", str(path)]) == 0
    assert "; 1 failed, not counted; 1 left incomplete" in capsys.readouterr().out


@pytest.mark.integration
def test_whom_the_others_waited_for_is_said_by_the_summary_and_by_stats(tmp_path, capsys):
    """Rank 1 late twice, not in a row: no straggler, but the headless summary, ``commviz
    stats`` and its JSON say whom the others waited for, how often and how long."""
    import json

    from fakes import T0_NS, heartbeat, op_batch

    from commviz import cli

    g2 = {0: ("0", (0, 1))}

    def rec(seq, late_ms, end_ms):  # an instance ends 1 ms after its last arrival
        base = T0_NS + seq * 1_000_000_000
        return {"id": seq, "op": "all_reduce", "seq": seq, "bytes_in": 4096, "bytes_out": 4096,
                "t_start": base + round(late_ms * 1e6), "t_end": base + round(end_ms * 1e6)}

    messages = [heartbeat(0, 2), heartbeat(1, 2)]
    for seq, late in enumerate([250, 0, 0, 120, 0], start=1):
        messages += [op_batch(0, [rec(seq, 0, late + 1)], g2),
                     op_batch(1, [rec(seq, late, late + 1)], g2)]
    path = tmp_path / "late.jsonl"
    out = _recorded_summary(messages, path)
    line = ("late arrivals (the others waited): rank 1: 2×, 370 ms in all, longest 250 ms "
            "(all_reduce #1)")
    assert line in out.splitlines(), out
    assert cli.main(["stats", str(path)]) == 0
    assert line in capsys.readouterr().out.splitlines()
    assert cli.main(["stats", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["late_arrivals"] == [
        {"rank": 1, "count": 2, "waited_us": 370_000.0, "longest_us": 250_000.0,
         "longest_at": {"op": "all_reduce", "seq": 1, "group": None}}]


@pytest.mark.integration
def test_a_jobs_summary_repeats_the_findings_that_still_held(tmp_path):
    """A failed torchrun job's tracebacks and summary push the live `!! mismatch` line out of
    sight (user trial: 60 lines of them under it); the end repeats what still held."""
    import sys

    from fakes import T0_NS, heartbeat, op_batch

    from commviz.launch.job import Job

    g2 = {0: ("0", (0, 1))}

    def in_flight(rank, op):
        return op_batch(rank, [{"id": 1, "op": op, "seq": 1, "bytes_in": 4096,
                                "bytes_out": 4096 * (2 if op == "all_gather" else 1),
                                "t_start": T0_NS, "t_end": -1}], g2)

    session = Session("tcp://127.0.0.1:*", collect_instances=True)
    session.model.apply([heartbeat(0, 2), heartbeat(1, 2),
                         in_flight(0, "all_reduce"), in_flight(1, "all_gather")])
    out = io.StringIO()
    code = headless.run_job(session, lambda: Job([sys.executable, "-c", "exit(3)"], session.addr),
                            out=out, lang="pt")
    lines = out.getvalue().splitlines()
    assert code == 3
    said = [n for n, line in enumerate(lines) if line.startswith("[commviz] !! mismatch: ")]
    assert len(said) == 2, lines  # live, then again at the end
    end = lines.index("[commviz] no fim do job, 1 problema ainda presente:")
    assert said[0] < end < said[1] < len(lines) - 1


@pytest.mark.parametrize(("ns", "shown"), [
    (850_000, "850 µs"), (999_700, "1 ms"), (7_142_000, "7.14 ms"), (1.2e9, "1.2 s"),
    (999.4e9, "999 s"), (3700e9, "61.7 min"), (59_000e9, "983 min"), (9_000e9 * 10, "25 h"),
    (4e15, "1111 h")])
def test_durations_keep_three_digits_and_never_an_exponent(ns, shown):
    """A training job waited an hour for a rank: the line read "3.7e+03 s"."""
    assert text.duration(ns) == shown
