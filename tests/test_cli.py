"""The ``commviz`` command end to end, as a user runs it: real subprocesses, real ranks.

Every command runs as ``python -m commviz`` in its own session with a timeout; every test
checks that it leaves no process behind (no child of pytest, no rank it started). Full
demo launches are few: each rank imports torch, which takes seconds on a small machine.
"""

from __future__ import annotations

import ast
import gc
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import zmq
from fakes import FakeClock
from procs import INSTANCE, PY, SUMMARY, TAG_VAR, Proc, Procs

from commviz.launch import launcher
from commviz.viewer import gc_policy
from commviz.viewer.playback import Playback, PlaybackControl

REPO = Path(__file__).resolve().parent.parent


# ---- demo --list and errors --------------------------------------------------------------

@pytest.mark.integration
def test_demo_list_names_every_demo_with_its_summary(procs):
    result = procs.commviz("demo", "--list")
    assert result.returncode == 0, result.stderr
    listed = {line.split(None, 1)[0]: line.split(None, 1)[1].strip()
              for line in result.stdout.splitlines() if line.strip()}
    files = sorted(p for p in (REPO / "demos").glob("*.py") if not p.name.startswith("_"))
    assert files, "no demos found"
    for path in files:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc, f"{path.name} has no docstring"
        assert listed.get(path.stem) == doc.strip().splitlines()[0], path.stem
    assert set(listed) == {p.stem for p in files}


@pytest.mark.integration
@pytest.mark.parametrize("args", [["demo", "--list"], ["stats", "{rec}"]])
def test_a_reader_that_went_away_ends_it_quietly(tmp_path, args):
    """`commviz demo --list | head -1`: no traceback when the pipe closes, the exit status of
    a program ended by SIGPIPE."""
    rec = tmp_path / "r.jsonl"
    rec.write_bytes(HEADER + b'{"kind":"summary","records":0}\n')  # closed: no note
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    with os.fdopen(write, "wb") as out:
        result = subprocess.run([sys.executable, "-m", "commviz",
                                 *[a.replace("{rec}", str(rec)) for a in args]],
                                stdout=out, stderr=subprocess.PIPE, timeout=60)
    assert result.stderr.decode() == ""
    assert result.returncode == 128 + signal.SIGPIPE


@pytest.mark.integration
def test_without_a_terminal_the_tui_gives_way_to_lines(procs):
    """`commviz run -- CMD | tee log`, or in CI: no TUI drawn into a pipe, no wait for keys."""
    result = procs.commviz("run", "--", PY, "-c", "print('hello from the job')", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "not a terminal" in result.stderr and "Traceback" not in result.stderr
    assert "hello from the job" in result.stdout
    assert "\x1b[" not in result.stdout  # no screen drawn
    assert "the job exited with code 0" in result.stdout


def _gpus() -> int:
    return launcher.gpu_count()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


HEADER = b'{"format":"commviz-recording","version":1,"commviz":"0.1.0","protocol":1}\n'

ERRORS = {
    # id: (args, (substrings the error line must contain))
    "unknown-op": (["demo", "no_such_op", "--ranks", "2"], ("unknown demo", "no_such_op",
                                                             "--list")),
    "ranks-0": (["demo", "all_reduce", "--ranks", "0"], ("--ranks", "got 0")),
    "ranks-too-many": (["demo", "all_reduce", "--ranks", str(launcher.MAX_RANKS + 1)],
                       ("--ranks", str(launcher.MAX_RANKS))),
    "ranks-below-min": (["demo", "pipeline", "--ranks", "1"], ("--ranks", "between 2",
                                                               "pipeline")),
    "nccl-without-gpus": (["demo", "all_reduce", "--ranks", "2", "--backend", "nccl"],
                          ("nccl", "GPU", "--backend gloo")),
    "iters-0": (["demo", "all_reduce", "--ranks", "2", "--iters", "0"], ("--iters",)),
    # an infinite interval failed every rank at its first wait (OverflowError), nan passed
    "interval-inf": (["demo", "all_reduce", "--ranks", "2", "--interval", "inf"],
                     ("--interval", "between 0 and 3600", "got inf")),
    "interval-nan": (["demo", "all_reduce", "--ranks", "2", "--interval", "nan"],
                     ("--interval", "got nan")),
    # every rank failed at its first allocation (or overflowed converting the size)
    "size-beyond-memory": (["demo", "all_reduce", "--ranks", "2", "--size", str(10**15)],
                           ("--size 1000000000000000 B is too big", "GiB of memory is free")),
    "size-beyond-int64": (["demo", "all_reduce", "--ranks", "2", "--size", str(10**23)],
                          ("--size", "too big")),
    "no-op": (["demo"], ("name a demo", "--list")),
    "stats-missing": (["stats", "{tmp}/missing.jsonl"], ("missing.jsonl", "no such file")),
    "stats-not-recording": (["stats", "{tmp}/notes.txt"], ("notes.txt",
                                                          "not a commviz recording")),
    "stats-empty": (["stats", "{tmp}/empty.jsonl"], ("empty.jsonl is empty",
                                                     "not a commviz recording")),
    "stats-binary": (["stats", "{tmp}/noise.bin"], ("noise.bin", "not a commviz recording")),
    "stats-directory": (["stats", "{tmp}"], ("cannot read",)),
    "stats-newer-version": (["stats", "{tmp}/v3.jsonl"], ("version 3",)),
    "stats-not-object": (["stats", "{tmp}/list.jsonl"], ("list.jsonl:2",)),
    "stats-bad-middle-line": (["stats", "{tmp}/broken.jsonl"], ("broken.jsonl:2", "not JSON")),
    "play-missing": (["play", "{tmp}/missing.jsonl"], ("missing.jsonl", "no such file")),
    "play-not-recording": (["play", "{tmp}/notes.txt"], ("notes.txt", "not a commviz recording")),
    "play-nothing-recorded": (["play", "{tmp}/header.jsonl"], ("header.jsonl",
                                                               "nothing was recorded")),
    "play-speed": (["play", "{tmp}/header.jsonl", "--speed", "0"], ("--speed 0", "between")),
    "play-no-terminal": (["play", "{tmp}/one-rank.jsonl"], ("one-rank.jsonl", "a terminal",
                                                            "commviz stats")),
    "play-from-beyond-the-end": (["play", "{tmp}/one-rank.jsonl", "--from", "10"],
                                 ("--from 10", "between 0 and 0.0 s")),
    "play-from-before-the-start": (["play", "{tmp}/one-rank.jsonl", "--from", "-1"],
                                   ("--from -1", "between 0 and 0.0 s")),
}


def test_all_to_all_on_a_gloo_without_it_is_refused_before_any_rank_starts(monkeypatch):
    import torch

    assert launcher.torch_version() == tuple(map(int, torch.__version__.split(".")[:2]))
    monkeypatch.setattr(launcher, "torch_version", lambda: (2, 11))
    with pytest.raises(launcher.LaunchError, match=r"gloo in torch 2\.11 has no all_to_all"):
        launcher.check_backend("all_to_all", "gloo")
    launcher.check_backend("all_to_all", "nccl")
    launcher.check_backend("all_to_all_single", "gloo")
    monkeypatch.setattr(launcher, "torch_version", lambda: (2, 12))
    launcher.check_backend("all_to_all", "gloo")


@pytest.mark.parametrize(("demo", "size", "world", "asked", "lang", "note"), [
    ("all_reduce", 1001, 4, True, "en", "--size 1001: 1000 B used (250 float32)"),
    ("all_reduce", 1000, 4, True, "en", None),
    ("all_to_all", 1000, 4, True, "en",
     "--size 1000: 992 B used (4 blocks of 62 float32)"),
    ("reduce_scatter", 4096, 3, False, "pt",
     "--size 4096: 4092 B usados (3 blocos de 341 float32)"),
    ("ring_allreduce", 4096, 4, False, "en", None),
    ("barrier", 100, 4, True, "en", "--size 100: not used, barrier moves no tensor of that size"),
    ("objects", 4096, 4, False, "en", None),  # the default size, which no one asked for
    ("all", 1000, 3, True, "en",
     "--size 1000: 996 B used (3 blocks of 83 float32) in reduce_scatter, all_to_all"),
])
def test_the_size_note_says_what_a_demo_makes_of_the_size_asked(demo, size, world, asked, lang,
                                                                note):
    assert launcher.size_note(demo, size, world, asked, lang) == note


def _started_demo(monkeypatch, argv: list[str]) -> dict:
    """What `commviz demo ARGV` hands the headless printer or the TUI, no rank started."""
    from commviz import cli, headless
    from commviz.tui import app

    got = {}

    def printer(session, *_, banner=None, **__):
        got["banner"] = banner
        session.close()
        return 0

    def tui(session, *_, title, **__):
        got["title"] = {lang: title(lang) for lang in ("en", "pt")}
        session.close()
        return 0

    monkeypatch.setattr(headless, "run", printer)
    monkeypatch.setattr(app, "run_app", tui)
    monkeypatch.setattr(launcher, "Ranks", lambda *a, **k: None)
    monkeypatch.setattr(launcher, "gpu_count", lambda: 0)
    monkeypatch.setattr(cli, "_no_terminal_for_the_tui", lambda args: False)
    assert cli.main(["demo", *argv]) == 0
    return got


@pytest.mark.integration
def test_a_rounded_size_is_said_once_under_the_headless_banner(monkeypatch):
    got = _started_demo(monkeypatch, ["all_to_all", "--ranks", "4", "--size", "1000",
                                      "--headless", "--lang", "en"])
    banner, note = got["banner"].split("\n")
    assert banner.startswith("commviz demo all_to_all: 4 ranks, gloo")
    assert note == "--size 1000: 992 B used (4 blocks of 62 float32)"
    exact = _started_demo(monkeypatch, ["all_reduce", "--size", "1000", "--headless"])
    assert "\n" not in exact["banner"]


@pytest.mark.integration
def test_a_rounded_size_is_said_in_the_tui_header_in_both_languages(monkeypatch):
    """Before the backend and why, which a narrow header cuts (the viewer panel says it too):
    at 120 columns the note was cut ('--size 4096: 4092…', user trial)."""
    title = _started_demo(monkeypatch, ["all_gather", "--ranks", "2", "--size", "7"])["title"]
    assert title["en"].startswith("all_gather · 2 ranks · --size 7: 4 B used (1 float32) · "
                                  "gloo on CPU tensors")
    assert title["pt"].startswith("all_gather · 2 ranks · --size 7: 4 B usados (1 float32) · ")


@pytest.mark.integration
@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_are_one_line_with_exit_code_2(procs, tmp_path, case):
    args, expected = ERRORS[case]
    if case == "nccl-without-gpus" and _gpus() >= 2:
        pytest.skip("this machine has the GPUs nccl needs")
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    _write(tmp_path / "empty.jsonl", b"")
    _write(tmp_path / "noise.bin", bytes(range(128, 256)) * 4)
    _write(tmp_path / "v3.jsonl", HEADER.replace(b'"version":1', b'"version":3'))
    _write(tmp_path / "list.jsonl", HEADER + b"[1, 2]\n")
    _write(tmp_path / "broken.jsonl", HEADER + b'{"kind": "op", \n{"kind":"bye"}\n')
    _write(tmp_path / "header.jsonl", HEADER)
    _write(tmp_path / "one-rank.jsonl", HEADER + b'{"kind":"bye","rank":0,"t_ns":5,"dropped":0}\n')
    result = procs.commviz(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("commviz: error: "), lines[0]
    assert "Traceback" not in result.stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert result.stdout == ""


@pytest.mark.integration
@pytest.mark.parametrize("command", [["watch", "--headless"], ["run", "--", "sleep", "1"]])
def test_a_bind_address_without_its_scheme_says_what_it_must_look_like(procs, command):
    """Not that 127.0.0.1:5623 "can be reached from other hosts, so the viewer needs keys"."""
    args = command[:1] + ["--bind", "127.0.0.1:5623"] + command[1:]
    result = procs.commviz(*args)
    assert result.returncode == 2, result.stdout
    (line,) = result.stderr.splitlines()
    assert line.startswith("commviz: error: '127.0.0.1:5623' is not an address"), line
    assert "must look like tcp://HOST:PORT" in line and "keys" not in line, line
    assert result.stdout == ""


@pytest.mark.parametrize("port", ["65535", "99999"])
def test_a_port_out_of_range_is_refused_before_zeromq_wraps_it(port):
    """99999 was taken as 34463 (99999 - 65536) and announced as 99999; 65535 failed on a
    port 65536 the user never typed."""
    from commviz.viewer.transport import BindError, Receiver

    with pytest.raises(BindError, match=f"tcp://127.0.0.1:{port}: the port must be at most "
                                        "65534, since the clock channel takes the port after it"):
        Receiver(f"tcp://127.0.0.1:{port}")


@pytest.mark.integration
@pytest.mark.parametrize("command", ["watch", "run"])
@pytest.mark.parametrize("holder", ["tcp", "zmq"])
def test_a_port_in_use_says_how_to_pick_another(procs, holder, command):
    ctx = sock = None
    if holder == "tcp":
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
    else:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PULL)
        port = sock.bind_to_random_port("tcp://127.0.0.1")
    tail = ["--", "sleep", "1"] if command == "run" else []
    try:
        result = procs.commviz(command, "--headless", "--bind", f"tcp://127.0.0.1:{port}", *tail)
    finally:
        sock.close()
        if ctx is not None:
            ctx.term()
    assert result.returncode == 2, result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("commviz: error: "), result.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "already in use" in lines[0]
    assert "--bind tcp://127.0.0.1:PORT" in lines[0]
    if command == "watch":  # the user starts the ranks, and must tell them where it is
        assert "point the ranks at it with COMMVIZ_ADDR" in lines[0], lines[0]
    else:  # `commviz run` tells the job itself
        assert "COMMVIZ_ADDR" not in lines[0] and "leave out --bind" in lines[0], lines[0]
    assert result.stdout == ""


def _finding():
    from commviz.viewer.diagnose import Finding
    from commviz.viewer.diagnose.facts import Words

    return Finding("failed", (1,), (0, 1), 4, Words("rank 0 failed in all_reduce #4",
                   "rank 0 falhou em all_reduce #4"), ("hang", 0, 4), 0.0, 0)


@pytest.mark.integration
@pytest.mark.parametrize("lang", ["en", "pt"])
def test_headless_finding_lines_are_in_the_language_asked_for(lang):
    from commviz import headless
    from commviz.viewer.session import Session

    session = Session("tcp://127.0.0.1:*", collect_instances=True)
    try:
        session.new_findings.append(_finding())
        out = io.StringIO()
        headless._Printer(session, out, lang).flush()
    finally:
        session.close()
    expected = {"en": "!! failed: rank 0 failed in all_reduce #4",
                "pt": "!! failed: rank 0 falhou em all_reduce #4"}[lang]
    assert out.getvalue().splitlines() == [expected]


@pytest.mark.integration
@pytest.mark.parametrize(("args", "env", "expected"), [
    (["--lang", "pt"], {}, "pt"), ([], {"LC_ALL": "pt_BR.UTF-8"}, "pt"),
    ([], {"LC_ALL": "C"}, "en"), (["--lang", "en"], {"LC_ALL": "pt_BR.UTF-8"}, "en")])
@pytest.mark.parametrize("command", ["watch", "run", "demo"])
def test_headless_commands_pass_the_language_on(monkeypatch, command, args, env, expected):
    """--lang, else the locale as the TUI reads it, reaches the headless printer."""
    from commviz import cli, headless

    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    got = {}

    def fake(session, *_, lang="en", **__):
        got["lang"] = lang
        session.close()
        return 0

    monkeypatch.setattr(headless, "run", fake)
    monkeypatch.setattr(headless, "run_job", fake)
    if command == "demo":  # its ranks would start before the printer: stop them unstarted
        monkeypatch.setattr(launcher, "Ranks", lambda *a, **k: None)
    argv = {"watch": ["watch", "--headless", "--bind", "tcp://127.0.0.1:*"],
            "run": ["run", "--headless", "--", "true"],
            "demo": ["demo", "all_reduce", "--ranks", "2", "--headless"]}[command]
    assert cli.main(argv[:1] + args + argv[1:]) == 0
    assert got == {"lang": expected}


# ---- a headless demo, its recording and stats --------------------------------------------

@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """One real headless demo: 2 ranks, 5 all_reduce steps, recorded."""
    record = tmp_path_factory.mktemp("demo") / "ar.jsonl"
    tracker = Procs()
    proc = tracker.start("-m", "commviz", "demo", "all_reduce", "--ranks", "2", "--headless",
                         "--iters", "5", "--record", str(record))
    try:
        rc = proc.finish(90)
        assert not tracker.ranks_left(), "rank processes outlived the demo"
    finally:
        proc.kill_group()
    return rc, proc.stdout, proc.stderr, record


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.integration
def test_headless_demo_prints_instances_and_summary(procs, demo_run):
    rc, out, err, _ = demo_run
    assert rc == 0, (out, err)
    assert "Traceback" not in err
    lines = out.splitlines()
    assert lines[0].startswith("commviz demo all_reduce: 2 ranks, gloo")
    instances = [m.groups() for m in map(INSTANCE.match, lines) if m]
    assert instances == [("all_reduce", "0,1", str(seq)) for seq in range(1, 6)], out
    # Not asserted: the "rank r/2 joined" lines. The emitter sends heartbeats on its ticks
    # only, so a rank whose run ends before its first tick after init sends none.
    assert re.search(r"^all_reduce\s+2\s+4096\s+5\s", out, re.M), out  # the stats table
    summary = [m.groups() for m in map(SUMMARY.match, lines) if m]
    assert summary == [("10", "5", "0")], out
    assert "0 malformed messages rejected" in lines[-1]
    assert "rank logs kept" not in out


def test_headless_demo_recording(demo_run):
    rc, out, _, record = demo_run
    assert rc == 0, out
    lines = _lines(record)
    header = lines[0]
    assert header["format"] == "commviz-recording" and header["version"] == 2
    assert header["protocol"] == 1 and isinstance(header["created_ns"], int)
    assert header["demo"] == "all_reduce"  # what commviz play shows and how it paces it
    assert header["title"]["en"].startswith("all_reduce · 2 ranks · gloo")
    assert header["title"]["pt"].startswith("all_reduce · 2 ranks · gloo")
    ops = [line for line in lines if line.get("kind") == "op"]
    groups = {line["g"]: line["ranks"] for line in lines if line.get("kind") == "group"}
    assert len(ops) == 10
    for rank in (0, 1):
        mine = [op for op in ops if op["rank"] == rank]
        assert sorted(op["seq"] for op in mine) == [1, 2, 3, 4, 5], rank
        for op in mine:
            assert op["op"] == "all_reduce" and groups[op["g"]] == [0, 1]
            assert op["bytes_in"] == op["bytes_out"] == 4096
            assert op["dtype"] == "float32"
            assert 0 < op["t_start_ns"] <= op["t_end_ns"]
            assert op["file"].endswith("all_reduce.py")
    for ident in (line for line in lines if line.get("kind") == "rank"):  # from heartbeats
        assert ident["rank"] in (0, 1) and ident["world"] == 2
        assert (ident["backend"], ident["device"]) == ("gloo", "cpu")
    # each rank's GPU topology, sent after its first heartbeat, recorded once: CPU ranks say why
    topo = [line for line in lines if line.get("kind") == "topo"]
    assert sorted(t["rank"] for t in topo) == \
        sorted(line["rank"] for line in lines if line.get("kind") == "rank")
    for t in topo:
        assert (t["gpu"], t["gpus"], t["links"]) == (-1, [], [])
        assert t["note"] == "no GPU: CPU tensors"
    assert sorted(line["rank"] for line in lines if line.get("kind") == "bye") == [0, 1]
    assert lines[-1]["kind"] == "summary"
    assert lines[-1]["records"] == 10 and lines[-1]["instances"] == 5
    assert lines[-1]["rejected_messages"] == 0


@pytest.mark.integration
def test_stats_of_the_recording(procs, demo_run):
    record = demo_run[3]
    table = procs.commviz("stats", str(record))
    assert table.returncode == 0, table.stderr
    assert re.search(r"^all_reduce\s+2\s+4096\s+5\s", table.stdout, re.M), table.stdout
    assert "10 op records, 5 collective instances, 0 transfers" in table.stdout
    as_json = procs.commviz("stats", str(record), "--json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["records"] == 10
    assert len(data["rows"]) == 1
    row = data["rows"][0]
    assert (row["op"], row["ranks"], row["size"], row["count"]) == ("all_reduce", 2, 4096, 5)
    assert row["time_p50_us"] > 0 and row["algbw_gbps"] > 0


@pytest.mark.integration
def test_played_back_the_recording_shows_what_stats_counts(procs, demo_run):
    """commviz play's session, run to the end: the same instances and table as stats, the
    ranks' telemetry and their goodbyes, and no finding."""
    record = demo_run[3]
    stats = json.loads(procs.commviz("stats", str(record), "--json").stdout)
    real = FakeClock()
    playback = Playback(record, real=real)
    PlaybackControl(playback, each_op=False)
    while not playback.clock.stopped("end"):
        real.advance(0.1)
        playback.advance()
    model = playback.model
    assert (model.records, model.instances, model.transfers) == (10, 5, 0)
    assert model.stats_table() == stats["rows"]
    assert all(s.exited and s.telemetry for s in model.ranks.values())
    assert playback.diagnosis.findings() == []


@pytest.mark.integration
def test_stats_tells_the_counts_and_the_recorded_findings(procs, demo_run, tmp_path):
    lines = demo_run[3].read_text(encoding="utf-8").splitlines(keepends=True)
    found = {"type": "straggler", "ranks": [1], "group": [0, 1], "seq": 3,
             "message": "rank 1 arrived last at all_reduce in group 0,1 3 times in a row",
             "message_pt": "rank 1 chegou por último em 3 instâncias, 0.53 s", "t_ns": 1}
    ended = {"type": "resolved", "ranks": [1], "group": [0, 1], "seq": 4,
             "message": "straggler of rank 1 over after 2.0 s", "t_ns": 2,
             "about": "straggler", "duration_s": 2.0}
    with_findings = tmp_path / "findings.jsonl"
    with_findings.write_text("".join(lines[:-1]) + "".join(
        json.dumps({"kind": "diag", **f}) + "\n" for f in (found, ended)) + lines[-1])
    data = json.loads(procs.commviz("stats", str(with_findings), "--json").stdout)
    assert (data["records"], data["instances"], data["transfers"], data["failed"],
            data["unmatched"]) == (10, 5, 0, 0, 0)
    assert data["findings"] == [found, ended]
    table = procs.commviz("stats", str(with_findings)).stdout
    assert "findings of the live diagnosis (2):\n" \
        "  !! straggler: rank 1 arrived last at all_reduce in group 0,1 3 times in a row\n" \
        "     resolved: straggler of rank 1 over after 2.0 s" in table, table
    # in Portuguese, as a headless demo prints them (a line recorded without its Portuguese,
    # by an older commviz, in English)
    pt = procs.commviz("stats", str(with_findings), "--lang", "pt").stdout
    assert "problemas achados pelo diagnóstico ao vivo (2):\n" \
        "  !! straggler: rank 1 chegou por último em 3 instâncias, 0,53 s\n" \
        "     resolved: straggler of rank 1 over after 2.0 s" in pt, pt
    assert "tamanho (B)" in pt.splitlines()[0], pt


def test_the_counts_line_sets_failed_operations_apart():
    from commviz.viewer import plain_text as text

    assert text.counts_line(12, 5, 1, 0, 0) == \
        "12 op records, 5 collective instances, 1 transfer"
    assert text.counts_line(12, 5, 1, 2, 0) == \
        "12 op records, 5 collective instances, 1 transfer; 2 failed, not counted"
    assert text.counts_line(11, 5, 0, 1, 1) == \
        "11 op records, 5 collective instances, 0 transfers; 1 failed, not counted; 1 left " \
        "incomplete (records missing from some of its ranks)"


@pytest.mark.integration
def test_stats_of_a_truncated_recording(procs, demo_run, tmp_path):
    """As a killed viewer leaves it: no summary, the last line cut in the middle."""
    text = demo_run[3].read_text(encoding="utf-8").splitlines(keepends=True)
    last_op = max(i for i, line in enumerate(text) if '"kind":"op"' in line)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(text[:last_op]) + text[last_op][: len(text[last_op]) // 2])
    result = procs.commviz("stats", str(cut), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["records"] == 9  # the cut record is lost, the others are all there
    assert data["rows"][0]["count"] == 4
    table = procs.commviz("stats", str(cut))
    assert table.returncode == 0 and "9 op records, 4 collective instances" in table.stdout
    assert table.stderr == f"commviz: note: {cut}:{last_op + 1}: the last line is cut short " \
        "(the viewer was stopped while writing it): left out\n"

    whole_lines = tmp_path / "no-summary.jsonl"  # cut exactly after a line: nothing lost
    whole_lines.write_text("".join(text[:last_op + 1]))
    result = procs.commviz("stats", str(whole_lines), "--json")
    data = json.loads(result.stdout)
    assert data["records"] == 10 and data["rows"][0]["count"] == 5
    assert result.stderr == f"commviz: note: {whole_lines} has no closing summary line: its " \
        "viewer did not close it (killed?); what it recorded is all here\n"
    # commviz play says so on its screen
    playback = Playback(whole_lines)
    assert not playback.closed and Playback(demo_run[3]).closed

    # a rank's ops come before its rank line when they ran before its first heartbeat (it
    # waits for a clock round trip): cut before any rank line, they still count (they read
    # as 0 records, under load, in CI)
    parsed = [(json.loads(line), line) for line in text[1:]]
    groups = [line for obj, line in parsed if obj["kind"] == "group"]  # the ops name them
    ops = [line for obj, line in parsed if obj["kind"] == "op"]
    named = [line for obj, line in parsed if obj["kind"] in ("op", "rank") and obj["rank"] == 0]
    rank1 = [line for obj, line in parsed if obj["kind"] == "op" and obj["rank"] == 1]
    for name, lines in (("ops-only", groups + ops), ("rank-1-unnamed", groups + named + rank1)):
        unnamed = tmp_path / f"{name}.jsonl"
        unnamed.write_text(text[0] + "".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
        data = json.loads(procs.commviz("stats", str(unnamed), "--json").stdout)
        assert data["records"] == 9 and data["rows"][0]["count"] == 4, name


# ---- a rank that fails ------------------------------------------------------------------

@pytest.mark.integration
def test_failing_rank_is_reported_by_the_demo(procs):
    """A network interface gloo cannot find (a user's mistake on a cluster node): each rank
    fails creating its process group. (A --size no rank can allocate is refused before the
    ranks start now.)"""
    proc = procs.start("-m", "commviz", "demo", "all_reduce", "--ranks", "2", "--headless",
                       "--iters", "2", env={"GLOO_SOCKET_IFNAME": "commviz-no-such-if0"})
    rc = proc.finish(90)
    out = proc.stdout
    kept = re.search(r"^rank logs kept in (\S+)$", out, re.M)
    try:
        assert rc == 1, out
        failed = re.findall(r"^rank ([01]) failed \(exit 1\): (.*)$", out, re.M)
        assert failed, out
        assert all("RuntimeError" in why and "commviz-no-such-if0" in why
                   for _, why in failed), out
        assert "Traceback" not in out and "Traceback" not in proc.stderr
        assert SUMMARY.search(out.splitlines()[-1]), out
        assert kept, out
        logs = sorted(p.name for p in Path(kept.group(1)).iterdir())
        assert logs == ["rank0.log", "rank1.log"]
        assert "commviz-rank-error: RuntimeError" in (
            Path(kept.group(1)) / f"rank{failed[0][0]}.log").read_text()
    finally:
        if kept and Path(kept.group(1)).name.startswith("commviz-"):
            shutil.rmtree(kept.group(1), ignore_errors=True)


@pytest.mark.integration
@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P came in 3.11")
def test_a_folder_named_commviz_in_the_current_directory_does_not_hide_commviz(procs,
                                                                              tmp_path):
    """The parent of a clone installed in editable mode: its ``commviz`` folder is no
    package, yet the current directory comes first on a ``python -m`` path."""
    (tmp_path / "commviz").mkdir()
    # -P keeps the viewer itself off the current directory, as the commviz script is
    proc = procs.start("-P", "-m", "commviz", "demo", "all_reduce", "--ranks", "2",
                       "--headless", "--iters", "1", cwd=str(tmp_path))
    assert proc.finish(90) == 0, proc.stdout + proc.stderr
    assert [op for op, _, _ in proc.instances()] == ["all_reduce"], proc.stdout


@pytest.mark.integration
def test_failing_rank_is_reported_by_headless_run(procs, monkeypatch):
    """The launcher's view of a rank that cannot even start: a demo module that is missing."""
    from commviz import headless
    from commviz.viewer.session import Session

    monkeypatch.setenv(TAG_VAR, procs.tag)  # the ranks inherit it: found again if left over
    session = Session("tcp://127.0.0.1:*", collect_instances=True)
    try:
        ranks = launcher.Ranks("no_such_demo", 2, "gloo", session.addr, 64, 1, 0.0)
    except BaseException:
        session.close()
        raise
    out = io.StringIO()
    before, during, poll = gc.get_threshold(), [], session.poll
    monkeypatch.setattr(session, "poll", lambda ms: (during.append(gc.get_threshold()),
                                                     poll(ms))[1])
    try:
        code = headless.run(session, ranks, out=out)
    finally:
        ranks.stop()
    text = out.getvalue()
    # full collections rare while it ran (viewer/gc_policy.py), as before once it returned
    assert during and {t[2] for t in during} == {gc_policy.FULL_COLLECTION_EVERY} != {before[2]}
    assert gc.get_threshold() == before
    try:
        assert code == 1, text
        assert re.search(r"^rank [01] failed \(exit 1\): ModuleNotFoundError: .*"
                         r"commviz\.demos\.no_such_demo", text, re.M), text
        assert f"rank logs kept in {ranks.logdir}" in text
        assert ranks.running() == 0
        assert all(rp.proc.returncode is not None for rp in ranks.procs)
    finally:
        ranks.cleanup_logs()


# ---- commviz watch with ranks started elsewhere, stopped by a signal ----------------------

def _watch(procs: Procs, *args: str) -> tuple[Proc, str]:
    proc = procs.start("-m", "commviz", "watch", "--headless", *args)
    banner = proc.wait_for(lambda line: line.startswith("commviz watch: listening on "), 30)[0]
    return proc, banner.split()[4]


@pytest.mark.integration
def test_watch_records_ranks_then_stops_on_sigint(procs, tmp_path):
    record = tmp_path / "w.jsonl"
    watch, addr = _watch(procs, "--bind", f"tcp://127.0.0.1:{launcher.free_port()}", "--record",
                         str(record))
    master = launcher.free_port()
    ranks = [procs.start("-m", "commviz.launch.runner", "all_gather", "--rank", str(r),
                         "--world", "2", "--backend", "gloo", "--master-port", str(master),
                         "--iters", "3", env={"COMMVIZ_ADDR": addr}) for r in range(2)]
    codes = [r.finish(90) for r in ranks]
    assert codes == [0, 0], [r.stderr for r in ranks]
    watch.wait_for(lambda line: bool(INSTANCE.match(line)), 15, count=3)
    time.sleep(0.5)  # the goodbyes follow the last records
    watch.signal(signal.SIGINT)
    assert watch.finish(15) == 0, watch.stderr
    assert "Traceback" not in watch.stderr
    assert watch.instances() == [("all_gather", "0,1", s) for s in (1, 2, 3)], watch.stdout
    assert SUMMARY.match(watch.out[-1]).groups() == ("6", "3", "0"), watch.stdout
    lines = _lines(record)
    assert lines[0]["format"] == "commviz-recording"
    ops = [line for line in lines if line.get("kind") == "op"]
    assert len(ops) == 6
    assert sorted((op["rank"], op["seq"]) for op in ops) == [(r, s) for r in (0, 1)
                                                             for s in (1, 2, 3)]
    assert all(op["op"] == "all_gather" and op["bytes_out"] == 2 * op["bytes_in"]
               for op in ops)
    assert lines[-1]["kind"] == "summary" and lines[-1]["records"] == 6
    assert lines[-1]["instances"] == 3


@pytest.mark.integration
def test_watch_stops_on_sigterm(procs, tmp_path):
    record = tmp_path / "idle.jsonl"
    watch, _ = _watch(procs, "--bind", f"tcp://127.0.0.1:{launcher.free_port()}", "--record",
                      str(record))
    watch.signal(signal.SIGTERM)  # at once: the banner comes once the signal is handled
    assert watch.finish(15) == 0, watch.stderr
    assert watch.stderr == ""
    assert SUMMARY.match(watch.out[-1]).groups() == ("0", "0", "0"), watch.stdout
    lines = _lines(record)
    assert lines[0]["format"] == "commviz-recording"
    assert lines[-1]["kind"] == "summary" and lines[-1]["records"] == 0


@pytest.mark.integration
def test_a_rank_that_ends_at_once_still_delivers_its_records(procs):
    """One step on one rank is over before the emitter's first tick: still sent, with a bye."""
    from commviz.viewer import recording
    from commviz.viewer.transport import Receiver
    from commviz.wire import protocol

    receiver = Receiver("tcp://127.0.0.1:*")
    try:
        rank = procs.start("-m", "commviz.launch.runner", "all_reduce", "--rank", "0", "--world",
                           "1", "--backend", "gloo", "--master-port", str(launcher.free_port()),
                           "--iters", "1", env={"COMMVIZ_ADDR": receiver.addr})
        messages = []
        deadline = time.monotonic() + 60
        while rank.p.poll() is None and time.monotonic() < deadline:
            messages += receiver.drain(50)
        assert rank.finish(5) == 0, rank.stderr
        deadline = time.monotonic() + 3
        while not any(isinstance(m, protocol.Bye) for m in messages) \
                and time.monotonic() < deadline:
            messages += receiver.drain(50)
    finally:
        receiver.close()
    ops = [rec for m in messages if isinstance(m, protocol.OpBatch)
           for rec in recording.op_dicts(m)]
    assert [(op["op"], op["seq"], op["group"]) for op in ops] == [("all_reduce", 1, [0])]
    assert [m.rank for m in messages if isinstance(m, protocol.Bye)] == [0]
    assert receiver.rejected == 0


# ---- Ctrl-C on a headless demo ----------------------------------------------------------

@pytest.mark.integration
def test_ctrl_c_stops_a_headless_demo_and_its_ranks(procs):
    demo = procs.start("-m", "commviz", "demo", "all_gather", "--ranks", "2", "--headless",
                       "--interval", "0.5")  # 20 steps, 10 s: still running when interrupted
    demo.wait_for(lambda line: bool(INSTANCE.match(line)), 60)
    rank_pids = [p.pid for p in psutil.Process(demo.p.pid).children()]
    assert len(rank_pids) == 2
    t0 = time.monotonic()
    demo.signal(signal.SIGINT)  # the launcher only, as a terminal's Ctrl-C would reach it
    rc = demo.finish(10)
    assert time.monotonic() - t0 < 10
    kept = re.search(r"^rank logs kept in (\S+)$", demo.stdout, re.M)
    if kept and Path(kept.group(1)).name.startswith("commviz-"):
        shutil.rmtree(kept.group(1), ignore_errors=True)
    assert rc == 0, (demo.stdout, demo.stderr)  # a requested stop is no failure
    assert "Traceback" not in demo.stderr
    assert "failed" not in demo.stdout and "rank logs kept" not in demo.stdout
    assert SUMMARY.match(demo.out[-1]), demo.stdout
    assert not [pid for pid in rank_pids if psutil.pid_exists(pid)
                and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not procs.ranks_left(grace=0)


def test_ctrl_c_while_starting_up_is_one_line_not_a_traceback(monkeypatch, capsys):
    """Ctrl-C in the first fraction of a second, before the viewer handles it, printed a
    traceback out of an import (user trial)."""
    from commviz import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_stats", interrupted)
    assert cli.main(["stats", "x.jsonl"]) == 128 + signal.SIGINT
    assert capsys.readouterr().err == "commviz: interrupted\n"


def test_play_names_the_machine_a_recording_was_made_on(monkeypatch, demo_run):
    """Its header's "0 GPU(s) here" read as the machine playing it (user trial)."""
    import socket

    from commviz import cli
    from commviz.tui import app

    got = {}

    def tui(playback, *_, title, **__):
        got.update({lang: title(lang) for lang in ("en", "pt")})
        return 0

    monkeypatch.setattr(cli, "_no_terminal_for_the_tui", lambda args: False)
    monkeypatch.setattr(app, "run_app", tui)
    assert cli.main(["play", str(demo_run[3])]) == 0
    host = socket.gethostname()
    assert got["en"].startswith(f"play {demo_run[3].name}, recorded on {host} · all_reduce")
    assert got["pt"].startswith(f"gravação {demo_run[3].name}, feita em {host} · all_reduce")


def test_play_says_it_is_reading_a_large_recording(monkeypatch, capsys, demo_run):
    """The screen opens once the whole recording is read: 400,000 records take seconds."""
    from commviz import cli

    monkeypatch.setattr(cli, "BIG_RECORDING_BYTES", 100)
    assert cli.main(["play", str(demo_run[3])]) == 2  # no terminal here: after the reading
    err = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"commviz: reading \S+ar\.jsonl \(\d+ MB\)…", err[0]), err
    assert "a terminal" in err[1]
