"""Acceptance: killing the viewer (SIGKILL) in the middle of a demo does not hurt the ranks.

Every rank still finishes its loop with correct results (the demos check their own results
and exit non-zero on a wrong one) and exits 0; a viewer restarted on the same address
receives the later records.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import psutil
import pytest

from commviz import launcher

PY = sys.executable
TAG_VAR = "COMMVIZ_TEST_TAG"
WORLD = 3
ITERS = 60  # 3 s of steps at 0.05 s: room to kill the viewer and start another one
INSTANCE = re.compile(r"^\[\s*\d+\.\d+s\] (\w+)\s+ranks ([\d,]+)\s+seq (\d+)\s")
SUMMARY = re.compile(r"^(\d+) op records, (\d+) collective instances, (\d+) transfers; ")


class Proc:
    """A subprocess in its own session; a thread collects its stdout lines."""

    def __init__(self, args: list[str], env: dict[str, str], stderr=subprocess.PIPE) -> None:
        self.args = args
        self.p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=stderr, text=True, env=env, start_new_session=True)
        self.out: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            with self._cond:
                self.out.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pred, timeout: float, count: int = 1) -> list[str]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                hits = [line for line in self.out if pred(line)]
                if len(hits) >= count:
                    return hits
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self._reader.is_alive()):
                    pytest.fail(f"{self.args[2:]}: no {count} matching line(s) in time; "
                                f"rc={self.p.poll()}\n" + "\n".join(self.out))
                self._cond.wait(min(left, 0.2))

    def instances(self) -> list[tuple[str, str, int]]:
        with self._cond:
            found = [m.groups() for m in map(INSTANCE.match, self.out) if m]
        return [(op, ranks, int(seq)) for op, ranks, seq in found]

    def kill_group(self) -> None:
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._reader.join(2)


def _tagged_ranks(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if "commviz.rank.runner" not in " ".join(proc.info["cmdline"] or ()):
                continue
            if proc.environ().get(TAG_VAR) == tag:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _start_watch(env: dict[str, str], bind: str, started: list[Proc]) -> Proc:
    watch = Proc([PY, "-m", "commviz", "watch", "--headless", "--bind", bind], env)
    started.append(watch)
    watch.wait_for(lambda line: line.startswith(f"commviz watch: listening on {bind} "), 30)
    return watch


@pytest.mark.timeout(150)
def test_ranks_finish_correctly_when_the_viewer_is_killed(tmp_path):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG_VAR: tag, "PYTHONUNBUFFERED": "1"}
    bind = f"tcp://127.0.0.1:{launcher.free_port()}"
    master = launcher.free_port()
    started: list[Proc] = []
    logs = [tmp_path / f"rank{r}.log" for r in range(WORLD)]
    try:
        first = _start_watch(env, bind, started)
        ranks = []
        for r in range(WORLD):
            with open(logs[r], "w") as log:
                ranks.append(Proc(
                    [PY, "-m", "commviz.rank.runner", "all_reduce", "--rank", str(r),
                     "--world", str(WORLD), "--backend", "gloo", "--master-port", str(master),
                     "--iters", str(ITERS), "--interval", "0.05"],
                    {**env, "COMMVIZ_ADDR": bind}, stderr=log))
            started.append(ranks[-1])

        # The viewer shows the demo running, then dies without any chance to clean up.
        first.wait_for(lambda line: bool(INSTANCE.match(line)), 90, count=3)
        first.p.send_signal(signal.SIGKILL)
        assert first.p.wait(10) == -signal.SIGKILL
        seen_by_first = max(seq for _, _, seq in first.instances())
        assert all(p.p.poll() is None for p in ranks), "the ranks did not outlive the viewer"

        # A new viewer on the same address picks the running ranks up again.
        second = _start_watch(env, bind, started)

        deadline = time.monotonic() + 60
        for r, rank in enumerate(ranks):
            try:
                rank.p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {r} still running 60 s after the viewer was killed")
        codes = [rank.p.returncode for rank in ranks]
        errors = {r: logs[r].read_text() for r in range(WORLD) if codes[r] != 0}
        assert codes == [0] * WORLD, errors
        for log in logs:
            assert "commviz-rank-error" not in log.read_text()

        # Every rank ran its whole loop: the restarted viewer saw the last instance.
        second.wait_for(lambda line: bool(INSTANCE.match(line)
                                          and int(INSTANCE.match(line).group(3)) == ITERS), 10)
        time.sleep(0.3)  # the goodbyes follow the last records
        second.p.send_signal(signal.SIGINT)
        assert second.p.wait(15) == 0
        second._reader.join(5)
        later = second.instances()
        assert later, "the restarted viewer received nothing"
        assert all(op == "all_reduce" and who == "0,1,2" for op, who, _ in later)
        seqs = [seq for _, _, seq in later]
        assert min(seqs) > seen_by_first and max(seqs) == ITERS
        assert len(set(seqs)) == len(seqs)
        assert SUMMARY.match(second.out[-1]), second.out[-5:]
        assert all(f"rank {r}/{WORLD} joined" in "\n".join(second.out) for r in range(WORLD))
    finally:
        running = [p.args[2:] for p in started if p.p.poll() is None]
        for proc in started:
            proc.kill_group()
        deadline = time.monotonic() + 5
        while (left := _tagged_ranks(tag)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for proc in left:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        children = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not running, f"still running at the end: {running}"
    assert not left, f"rank processes left behind: {[p.pid for p in left]}"
    assert not children, f"child processes left behind: {children}"
