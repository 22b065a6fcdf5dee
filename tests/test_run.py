"""``commviz run -- CMD``: unmodified jobs instrumented however they start their ranks, their
exit codes passed on, Ctrl-C and crashes ending the whole tree. Real torchrun and
torch.multiprocessing jobs on gloo; every test checks that no process of the job is left."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from procs import PY, TAG_VAR

from commviz.headless import PREFIX
from commviz.launch.job import Job, JobAsRanks, OutputBuffer
from commviz.launch.launcher import free_port, telling_line
from commviz.text import i18n
from commviz.viewer import recording
from commviz.wire import protocol

JOBS = Path(__file__).resolve().parent / "jobs"
TORCHRUN = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def _tagged(tag: str) -> list[psutil.Process]:
    """Live processes started under this test's tag: the job's, wherever they are now."""
    found = []
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and p.environ().get(TAG_VAR) == tag:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.fixture
def run(procs):
    """``run(*args)``: ``commviz run ARGS`` to completion; afterwards no job process is left."""

    def _run(*args: str, timeout: float = 90, env: dict[str, str] | None = None):
        proc = procs.start("-m", "commviz", "run", *args, env=env)
        rc = proc.finish(timeout)
        return rc, proc.out, proc.err

    yield _run
    assert not _tagged(procs.tag), "job processes left behind"


def _ops(path: Path) -> dict[int, list[dict]]:
    by_rank: dict[int, list[dict]] = {}
    for msg in recording.read(path):
        if isinstance(msg, protocol.OpBatch):
            by_rank.setdefault(msg.rank, []).extend(recording.op_dicts(msg))
    return {r: sorted(recs, key=lambda d: d["id"]) for r, recs in by_rank.items()}


def _commviz_lines(out: list[str]) -> list[str]:
    return [line.removeprefix(PREFIX) for line in out if line.startswith(PREFIX)]


# ---- real jobs, unmodified ------------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.timeout(150)
def test_torchrun_job_is_recorded_from_both_ranks_without_a_change(run, tmp_path):
    rec = tmp_path / "run.jsonl"
    rc, out, err = run("--headless", "--record", str(rec), "--",
                       *TORCHRUN, str(JOBS / "allreduce_job.py"), "3", timeout=120)
    assert rc == 0, "\n".join(out + err)
    assert {"rank 0: 3 steps ok", "rank 1: 3 steps ok"} <= set(out)  # the job's own, as is
    ours = _commviz_lines(out)
    assert ours[-1] == "the job exited with code 0"
    assert not any("without saying goodbye" in line for line in ours)
    assert any(line.startswith("rank 0/2 joined") for line in ours)
    ops = _ops(rec)
    assert sorted(ops) == [0, 1]
    for rank, recs in ops.items():
        assert [(d["op"], d["seq"]) for d in recs if d["op"] != "send" and d["op"] != "recv"] \
            == [("all_reduce", 1), ("broadcast", 2), ("all_reduce", 3), ("broadcast", 4),
                ("all_reduce", 5), ("broadcast", 6)], rank
        p2p = [(d["op"], d["peer"], d["seq"]) for d in recs if d["op"] in ("send", "recv")]
        assert p2p == ([("send", 1, s) for s in (1, 2, 3)] if rank == 0
                       else [("recv", 0, s) for s in (1, 2, 3)])
        assert all(d["bytes_in"] + d["bytes_out"] >= 1024 for d in recs)
        assert all(d["file"].endswith("allreduce_job.py") for d in recs)
    # the job's output is recorded too (commviz play shows it), and still printed as is
    extra = {"out": []}
    list(recording.read(rec, lines=extra))
    assert {"rank 0: 3 steps ok", "rank 1: 3 steps ok"} <= {x["text"] for x in extra["out"]}
    assert [x["t_ns"] for x in extra["out"]] == sorted(x["t_ns"] for x in extra["out"])


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_torch_multiprocessing_ranks_are_instrumented(run, tmp_path, start):
    rec = tmp_path / "run.jsonl"
    rc, out, err = run("--headless", "--record", str(rec), "--",
                       PY, str(JOBS / "mp_job.py"), start, str(free_port()), timeout=100)
    assert rc == 0, "\n".join(out + err)
    ops = _ops(rec)
    assert {r: [(d["op"], d["seq"]) for d in recs] for r, recs in ops.items()} == {
        r: [("all_reduce", 1), ("all_reduce", 2)] for r in (0, 1)}


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_dataloader_workers_forked_from_a_rank_are_never_taken_for_it(run, tmp_path):
    rec = tmp_path / "run.jsonl"
    rc, out, err = run("--headless", "--record", str(rec), "--", PY, str(JOBS / "mp_job.py"),
                       "fork", str(free_port()), "--dataloader", timeout=100)
    assert rc == 0, "\n".join(out + err)
    messages = list(recording.read(rec))
    pids = {r: {m.pid for m in messages if isinstance(m, protocol.Heartbeat) and m.rank == r}
            for r in (0, 1)}
    assert all(len(p) == 1 for p in pids.values()), pids  # the rank's own pid, no worker's
    lines = [json.loads(line) for line in rec.read_text().splitlines()]
    assert sorted(obj["rank"] for obj in lines if obj.get("kind") == "bye") == [0, 1]
    assert [(d["op"], d["seq"]) for d in _ops(rec)[0]] == [("all_reduce", s) for s in range(1, 5)]


# why a job failed whose rank 1 exited with code 3 and no exception
WHY = r"(rank 1 exited with code 3 \(torchrun's root cause\)|rank \d: \w+Error: .*)"


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_a_crashing_rank_makes_commviz_fail_and_say_so(run, tmp_path):
    # half a second between steps: rank 1 dies once it has been heard (os._exit right after
    # its start, under load, left nothing sent: a rank never heard is named by no one)
    rec = tmp_path / "crash.jsonl"
    rc, out, err = run("--headless", "--record", str(rec), "--", *TORCHRUN,
                       str(JOBS / "allreduce_job.py"), "3", "--crash-rank", "1", "--sleep",
                       "0.5", timeout=120)
    assert rc != 0
    assert "rank 1: crashing on purpose" in out
    ours = _commviz_lines(out)
    assert ours[-1] == f"the job exited with code {rc}"
    # above it, as the TUI's viewer panel says them: each rank's end from torchrun's summary,
    # then the line that says why (user trial: headless, only the TUI said the cause): rank 1
    # wrote no exception, so torchrun's root cause in words, not its peers' read errors (or,
    # should torchrun have seen a peer's failure first, that peer's own exception)
    why = rf"the job failed \(exit {rc}\): {WHY}"
    assert re.fullmatch(why, ours[-2]), ours
    assert "rank 1: ended, exit 3, says torchrun's summary" in ours, ours
    goodbye = [line for line in ours if re.fullmatch(
        r"ranks? [\d,-]+ ended without saying goodbye \(crashed, killed, or stopped\)", line)]
    assert len(goodbye) == 1 and "1" in goodbye[0].split("ended")[0], ours
    # recorded as the TUI records it, with the line that says why: commviz play lists it
    extra = {"event": []}
    list(recording.read(rec, lines=extra))
    (ended,) = [e for e in extra["event"] if e["key"] == "rank failed"]
    assert (ended["fields"]["who"], ended["fields"]["code"]) == ("the job", rc)
    # and each rank's exit as torchrun's summary gives it: rank 1's own code
    codes = {e["fields"]["rank"]: e["fields"]["code"] for e in extra["event"]
             if e["key"] == "rank ended"}
    assert codes.get(1) == 3, extra["event"]
    # the line that says why, as the TUI's line says
    assert re.fullmatch(WHY, ended["fields"]["line"]), ended


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_ctrl_c_stops_the_whole_job_tree_promptly(procs):
    proc = procs.start("-m", "commviz", "run", "--headless", "--", *TORCHRUN,
                       str(JOBS / "allreduce_job.py"), "100000", "--sleep", "0.2")
    try:
        proc.wait_for(lambda line: "all_reduce" in line and line.startswith(PREFIX), 100)
        tree = psutil.Process(proc.p.pid).children(recursive=True)
        workers = [p for p in _tagged(procs.tag) if (" ".join(p.cmdline())).startswith(PY)
                   and "allreduce_job.py" in " ".join(p.cmdline())
                   and "torch.distributed.run" not in " ".join(p.cmdline())]
        assert len(workers) == 2
        t0 = time.monotonic()
        proc.signal(signal.SIGINT)  # commviz only, as a terminal's Ctrl-C would reach it
        rc = proc.finish(30)
        took = time.monotonic() - t0
    finally:
        proc.kill_group()
    assert rc == 130
    assert took < 15
    assert _commviz_lines(proc.out)[-1].startswith("the job was stopped (SIGINT to commviz)")
    assert not [p for p in tree + workers if _alive(p)]
    assert not _tagged(procs.tag)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_sigterm_escalates_to_sigkill_for_processes_that_ignore_it(procs):
    proc = procs.start("-m", "commviz", "run", "--headless", "--", PY,
                       str(JOBS / "stubborn_job.py"))
    try:
        proc.wait_for(lambda line: line in ("parent up", "child up"), 30, count=2)
        job = [p for p in _tagged(procs.tag) if p.pid != proc.p.pid]
        assert len(job) == 2  # the job and its child (the exec shim became the job)
        t0 = time.monotonic()
        proc.signal(signal.SIGTERM)
        rc = proc.finish(30)
        took = time.monotonic() - t0
    finally:
        proc.kill_group()
    assert rc == 128 + signal.SIGTERM
    assert 5 <= took < 15  # SIGINT ignored for 5 s, SIGTERM by the child for 3 s more
    assert _commviz_lines(proc.out)[-1].startswith("the job was stopped (SIGTERM to commviz)")
    assert not [p for p in job if _alive(p)]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ---- exit codes and errors ------------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.parametrize("mode", [["--headless"], ["--no-viewer"]])
@pytest.mark.parametrize(("code", "expected"), [
    ("raise SystemExit(3)", 3),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + signal.SIGKILL),
])
def test_the_job_exit_code_becomes_commviz_exit_code(run, mode, code, expected):
    rc, out, err = run(*mode, "--", PY, "-c", code)
    assert rc == expected, "\n".join(out + err)


@pytest.mark.integration
@pytest.mark.parametrize(("args", "message"), [
    (["--headless", "--", "no-such-command-xyz"], "no-such-command-xyz: command not found"),
    (["--", "/nonexistent/train"], "/nonexistent/train: command not found"),
    (["--headless"], "no command to run"),
    (["--no-viewer", "--record", "x.jsonl", "--", PY, "-c", "pass"], "--no-viewer starts no"),
])
def test_a_command_that_cannot_run_is_a_one_line_error(run, args, message):
    rc, out, err = run(*args)
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("commviz: error: ") and message in err[0], err
    assert not out


@pytest.mark.integration
def test_the_job_is_told_where_the_viewer_is(run):
    port = free_port()
    rc, out, err = run("--headless", "--bind", f"tcp://127.0.0.1:{port}", "--", PY, "-c",
                       "import os; print('addr', os.environ['COMMVIZ_ADDR'])")
    assert rc == 0, err
    assert f"addr tcp://127.0.0.1:{port}" in out


@pytest.mark.integration
def test_no_viewer_points_the_job_at_its_relay_without_keys(run, tmp_path):
    """`--no-viewer`: the ranks report to this node's relay on loopback, keyless; the keys
    in the environment are the relay's (to reach $COMMVIZ_ADDR)."""
    from commviz.wire import keys

    keys.generate(tmp_path / "k")
    viewer = f"tcp://10.0.0.7:{free_port()}"
    rc, out, err = run("--no-viewer", "--", PY, "-c",
                       "import os; print('addr', os.environ['COMMVIZ_ADDR'], "
                       "os.environ.get('COMMVIZ_KEYS'))",
                       env={"COMMVIZ_ADDR": viewer, "COMMVIZ_KEYS": str(tmp_path / "k")})
    assert rc == 0, err
    [line] = [line for line in out if line.startswith("addr ")]
    addr, job_keys = line.split()[1:]
    assert addr.startswith("tcp://127.0.0.1:") and addr != viewer and job_keys == "None"


@pytest.mark.integration
def test_no_viewer_needs_keys_for_a_viewer_on_another_host(run, monkeypatch):
    for var in ("COMMVIZ_KEYS", "COMMVIZ_SERVER_KEY", "COMMVIZ_CLIENT_KEY"):
        monkeypatch.delenv(var, raising=False)
    rc, out, err = run("--no-viewer", "--", PY, "-c", "print('ran')",
                       env={"COMMVIZ_ADDR": f"tcp://10.0.0.7:{free_port()}"})
    assert rc == 2 and out == []
    assert len(err) == 1 and "is on another host: the relay needs the ranks' keys" in err[0], err


def _in_a_terminal(procs, script: str, key: bytes | int,
                   job_done: bool = False) -> tuple[int, str, float]:
    """``commviz run -- python -c SCRIPT`` in a pseudo-terminal, as a user runs it: once the
    TUI is up (its viewer panel drawn) and the job is running (``job_done``: has ended),
    ``key`` is typed (bytes) or sent to commviz (a signal). Returns commviz's exit code,
    what it wrote after leaving the screen (lines, ``\\r\\n`` turned into ``\\n``) and
    when the key went."""
    import os
    import pty
    import select

    pid, fd = pty.fork()  # the child leads a new session: killpg below ends all of it
    if pid == 0:  # pragma: no cover - the child becomes commviz
        os.execve(PY, [PY, "-m", "commviz", "run", "--", PY, "-c", script],
                  {**procs.env, "COLUMNS": "120", "LINES": "40", "TERM": "xterm-256color"})
    screen, t0, quit_at, status = b"", time.monotonic(), None, None
    try:
        while time.monotonic() - t0 < 45:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    screen += os.read(fd, 65536)
                except OSError:  # the terminal closed: commviz ended
                    break
            up = b"waiting for ranks" in screen or b"no rank ever connected" in screen
            if quit_at is None and up \
                    and bool([p for p in _tagged(procs.tag) if p.pid != pid]) != job_done:
                if isinstance(key, bytes):
                    os.write(fd, key)
                else:
                    os.kill(pid, key)
                quit_at = time.monotonic()
        _, status = os.waitpid(pid, 0)
    finally:
        if status is None:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    assert quit_at is not None, screen[-2000:]
    after = screen.rsplit(b"\x1b[?1049l", 1)[-1]  # the screen left: commviz's last words
    return (os.waitstatus_to_exitcode(status),
            after.decode("utf-8", "replace").replace("\r\n", "\n"), quit_at)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("key", "said", "code"), [
    (b"q", "q in commviz", 130), (b"\x03", "Ctrl-C in commviz", 130),
    (signal.SIGTERM, "SIGTERM to commviz", 143)])
def test_q_in_the_tui_stops_the_job_and_shows_its_last_lines(procs, key, said, code):
    """`q` (or Ctrl-C, or SIGTERM to commviz) quits the TUI and ends the job, and the last
    line says which it was."""
    script = "import time; print('job up', flush=True); time.sleep(60)"
    rc, text, quit_at = _in_a_terminal(procs, script, key)
    assert rc == code
    assert time.monotonic() - quit_at < 15
    assert "job up" in text and f"the job was stopped ({said}); exit code {code}" in text
    # the job's own last line, not the traceback the stop made it print
    assert "the job's last line of output before the stop:\njob up\n" in text
    assert "KeyboardInterrupt" not in text
    assert re.search(r"… \d+ more lines, written as it was being stopped, left out", text)
    assert not _tagged(procs.tag)


@pytest.mark.timeout(60)
def test_the_last_line_speaks_the_language_the_screen_was_switched_to(procs):
    """`l` to Spanish, `l` to Portuguese, then `q`: every line after the screen in Portuguese,
    the last one too (user trial: 'the job exited with code 0' under 'as últimas 9 linhas de
    saída do job:')."""
    script = "import time; print('job up', flush=True); time.sleep(60)"
    rc, text, _ = _in_a_terminal(procs, script, b"llq")
    assert rc == 130
    assert "a última linha de saída do job antes de ser parado:\njob up\n" in text
    assert text.rstrip().endswith("o job foi parado (q no commviz); código de saída 130"), text
    assert not _tagged(procs.tag)


@pytest.mark.timeout(60)
def test_after_a_failed_tui_run_commviz_lines_are_prefixed_and_the_kept_log_comes_last(procs):
    """The job's last 20 lines as it wrote them; every line of commviz's own behind
    ``[commviz] ``, the kept log's below the job's lines, where it is not scrolled away."""
    script = ("import sys\nfor i in range(30): print('job line', i)\n"
              "sys.exit('the job gives up')")
    rc, text, _ = _in_a_terminal(procs, script, b"q", job_done=True)
    assert rc == 1
    text = re.sub(r"\x1b\[[^a-zA-Z]*[a-zA-Z]", "", text)  # the terminal's modes, put back
    lines = [line for line in text.split("\n") if line.strip()]
    job = [line for line in lines if not line.startswith(PREFIX)]
    ours = [line.removeprefix(PREFIX) for line in lines if line.startswith(PREFIX)]
    # stdout and stderr come through two pipes: the stderr line may come anywhere near the end
    written = {f"job line {i}" for i in range(30)} | {"the job gives up"}
    assert len(job) == 20 and set(job) <= written and "job line 29" in job, lines
    kept = re.fullmatch(r"the job's output kept in (\S+)", ours[-2])
    assert kept, lines
    try:
        assert ours[0] == "the job failed (exit 1): the job gives up", lines
        assert ours[1] == "the job's last 20 lines of output:", lines
        assert lines.index(PREFIX + ours[-2]) > max(map(lines.index, job))
        assert ours[-1] == "the job exited with code 1"
        assert "job line 29" in (Path(kept.group(1)) / "job.log").read_text()
    finally:
        if Path(kept.group(1)).name.startswith("commviz-job-"):
            shutil.rmtree(kept.group(1), ignore_errors=True)
    assert not _tagged(procs.tag)


# ---- the auto-instrumentation in the job's Python processes -----------------------------

PROBE = ("import sys, sitecustomize; print(getattr(sitecustomize, 'MARK', None)); "
         "print(any(type(f).__name__ == '_Finder' for f in sys.meta_path)); "
         "print('torch' in sys.modules)")


@pytest.mark.integration
def test_the_users_sitecustomize_still_runs_and_torch_is_not_imported(run, tmp_path):
    (tmp_path / "sitecustomize.py").write_text("MARK = 'user sitecustomize ran'\n")
    rc, out, err = run("--no-viewer", "--", PY, "-c", PROBE, env={"PYTHONPATH": str(tmp_path)})
    assert rc == 0, err
    assert out == ["user sitecustomize ran", "True", "False"]


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_a_job_whose_python_cannot_import_commviz_runs_unchanged(run, tmp_path):
    broken = tmp_path / "zmq"  # as in a Python where commviz's dependencies are missing
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('no zmq in this Python')\n")
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); "
            "import torch, torch.distributed as dist; "
            f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', "
            "rank=0, world_size=1); t = torch.ones(2); dist.all_reduce(t); "
            "print('job done', t.tolist()); dist.destroy_process_group()")
    rc, out, err = run("--no-viewer", "--", PY, "-c", code, timeout=80)
    assert rc == 0, err
    assert out == ["job done [1.0, 1.0]"]
    assert any("commviz: this process is not instrumented (ImportError: no zmq" in line
               for line in err), err


# ---- the Job class, for a screen that shows the job's output ---------------------------

def test_a_failed_jobs_line_is_the_exception_that_caused_it():
    """torchrun's stderr after one rank raised (recorded from a real run): the rank's own
    exception, not the other rank's broken connection, torchrun's ChildFailedError or the
    rule under its summary."""
    lines = (Path(__file__).parent / "data" / "torchrun_crash.log").read_text().splitlines()
    assert lines[-1].startswith("=====")
    assert telling_line(lines) == "RuntimeError: boom on rank 1 at step 3"
    # a job's output mixes its ranks': which one raised it (user trial: 'the job failed (exit
    # 1): RuntimeError: CUDA out of memory' named none); a rank's own log needs no rank
    assert telling_line(lines, whose=True) == "rank 1: RuntimeError: boom on rank 1 at step 3"
    assert telling_line(["ValueError: x"], whose=True) == "ValueError: x"
    assert telling_line(["Traceback (most recent call last):", '  File "x.py", line 1',
                         "KeyboardInterrupt"]) == "KeyboardInterrupt"
    assert telling_line(["some output", "=" * 60, ""]) == "some output"
    assert telling_line(["", "----"]) is None
    # a rank killed by a signal writes nothing: the first exception is another rank's broken
    # connection, and torchrun's root cause says what happened (user trial)
    killed = ["[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:42",
              "Root Cause (first observed failure):", "[0]:", "  time      : 2026-12-01",
              "  host      : localhost", "  rank      : 1 (local_rank: 1)",
              "  exitcode  : -9 (pid: 19908)  (SIGKILL)", "  error_file: <N/A>"]
    assert telling_line(killed) == "rank 1 was killed by SIGKILL (torchrun's root cause)"
    # one that exited without an exception: the root cause still, not the peer's error
    # (CI: whether the peers' read errors were written raced torchrun stopping them)
    exited = killed[:-2] + ["  exitcode  : 3 (pid: 19908)"]
    assert telling_line(exited) == "rank 1 exited with code 3 (torchrun's root cause)"
    assert i18n.in_language(telling_line(exited), "pt") == \
        "rank 1 terminou com código 3 (a causa raiz segundo o torchrun)"
    # and with one of its own, that exception
    assert telling_line(["[rank1]: ValueError: bad batch"] + exited, whose=True) == \
        "rank 1: ValueError: bad batch"
    assert telling_line(killed[:-2]) == "RuntimeError: Connection closed by peer [127.0.0.1]:42"
    assert telling_line(["RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
                         "tcp/unbound_buffer.cc:78] Timed out waiting 6000ms for recv operation "
                         "to complete"]) == \
        "RuntimeError: Timed out waiting 6000ms for recv operation to complete"


def test_a_failed_spawn_jobs_line_is_the_exception_of_the_process_that_failed():
    """torch.multiprocessing.spawn's stderr (user trial: the TUI said only 'the job failed
    (exit 1): torch.multiprocessing.spawn.ProcessRaisedException:'): the failed process's own
    exception, before which another rank's broken connection may come; for a process a
    signal killed, spawn's line that says so."""
    broken = "[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:42"
    raised = [broken, "Traceback (most recent call last):",
              '  File "job.py", line 16, in <module>',
              "    raise ProcessRaisedException(msg, error_index, failed_process.pid)",
              "torch.multiprocessing.spawn.ProcessRaisedException: ", "",
              "-- Process 2 terminated with the following error:",
              "Traceback (most recent call last):", '  File "job.py", line 11, in worker',
              '    raise ValueError("bad batch")', "ValueError: bad batch"]
    assert telling_line(raised) == "ValueError: bad batch"
    assert telling_line(raised[:-1]) == "RuntimeError: Connection closed by peer [127.0.0.1]:42"
    exited = [broken, "torch.multiprocessing.spawn.ProcessExitedException: process 2 "
              "terminated with signal SIGKILL"]
    assert telling_line(exited) == "process 2 terminated with signal SIGKILL"


def test_output_buffer_keeps_the_last_lines_and_says_what_is_new():
    buf = OutputBuffer(maxlen=3)
    for i in range(5):
        buf.append("stdout", f"line {i}")
    assert [(line.n, line.text) for line in buf.since(0)] == [(3, "line 2"), (4, "line 3"),
                                                              (5, "line 4")]
    assert [line.n for line in buf.since(4)] == [5]
    assert buf.since(5) == [] and [line.text for line in buf.tail(1)] == ["line 4"]


def test_the_closing_lines_of_a_stopped_job_are_its_own_before_the_stop():
    """What a job wrote after commviz began stopping it (its interrupt tracebacks) does not
    push its own last lines out; a job that ended by itself shows its last lines, errors
    and all."""
    buf = OutputBuffer()
    for i in range(30):
        buf.append("stdout", f"step {i}")
    assert ([line.text for line in buf.closing(3)[0]], buf.closing(3)[1]) == (
        ["step 27", "step 28", "step 29"], 0)
    buf.append("stdout", "rank 1 is stuck")
    buf.mark_stop()
    for i in range(25):
        buf.append("stderr", f"Traceback line {i}")
    lines, after = buf.closing(3)
    assert [line.text for line in lines] == ["step 28", "step 29", "rank 1 is stuck"]
    assert after == 25


@pytest.mark.integration
def test_captured_job_output_arrives_line_by_line_with_its_stream():
    script = ("import sys; print('out 1'); print('err 1', file=sys.stderr); "
              "sys.stdout.write('x' * 5000 + '\\n'); print('bar 10%\\rbar 100%'); sys.exit(4)")
    job = Job([sys.executable, "-c", script], "tcp://127.0.0.1:1", capture=True)
    try:
        assert job.wait(30) == 4
    finally:
        job.close()
    assert job.output is not None and job.log is not None
    lines = [(line.stream, line.text) for line in job.output.since(0)]
    assert ("stderr", "err 1") in lines
    out = [text for stream, text in lines if stream == "stdout"]
    assert out == ["out 1", "x" * 4096, "x" * 904, "bar 100%"]
    assert job.log.read_text().count("\n") == 5
    ranks = JobAsRanks(job)
    assert ranks.poll() == [ranks] and ranks.poll() == []
    assert ranks.failed() == [ranks] and ranks.returncode == 4
    assert ranks.error_line() == "err 1"
    ranks.cleanup_logs()
    assert not job.log.exists()


@pytest.mark.integration
def test_stopping_a_captured_job_is_not_its_failure():
    job = Job([sys.executable, "-c", "import time; time.sleep(60)"], None, capture=True)
    ranks = JobAsRanks(job)
    t0 = time.monotonic()
    ranks.stop()
    assert time.monotonic() - t0 < 10
    assert job.returncode is not None and job.exit_code == 130
    assert ranks.failed() == [] and ranks.running() == 0
    job.cleanup()


@pytest.mark.integration
def test_a_killed_commviz_takes_the_job_with_it(procs):
    """PR_SET_PDEATHSIG: a job whose commviz got SIGKILL gets SIGTERM."""
    proc = procs.start("-m", "commviz", "run", "--no-viewer", "--", PY, "-c",
                       "import time; print('job up', flush=True); time.sleep(60)")
    try:
        proc.wait_for(lambda line: line == "job up", 30)
        job = _tagged(procs.tag)
        proc.p.send_signal(signal.SIGKILL)
        proc.p.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in job) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in job)
    finally:
        proc.kill_group()


def test_torchruns_summary_gives_each_ranks_exit_code():
    """A job whose rank 1 raised: rank 0, which torchrun stopped, read 'lost rank: silent'
    for ever and rank 1 'exited', as if it had ended well."""
    from commviz.launch.launcher import torchrun_exit_codes

    lines = (Path(__file__).parent / "data" / "torchrun_crash.log").read_text().splitlines()
    assert torchrun_exit_codes(lines) == {0: -15, 1: 1}
    assert torchrun_exit_codes(lines[:40]) == {}  # no summary: nothing said
