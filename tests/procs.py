"""Test helpers for whole commands: subprocesses in their own sessions, their output
collected line by line, and a fixture that proves no process is left behind."""

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

PY = sys.executable
TAG_VAR = "COMMVIZ_TEST_TAG"
INSTANCE = re.compile(r"^\s*\d+\.\d+s  (\w+)\s+([\d,]+)\s+#(\d+)\s")
SUMMARY = re.compile(r"^(\d+) op records?, (\d+) collective instances?, (\d+) transfers?; ")


class Proc:
    """A subprocess in its own session; threads collect its stdout and stderr lines."""

    def __init__(self, args: list[str], env: dict[str, str], stderr=subprocess.PIPE,
                 cwd: str | None = None) -> None:
        self.args = args
        self.p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=stderr, text=True, env=env, start_new_session=True,
                                  cwd=cwd)
        self.out: list[str] = []
        self.err: list[str] = []
        self._cond = threading.Condition()
        streams = [(self.p.stdout, self.out)]
        if stderr is subprocess.PIPE:
            streams.append((self.p.stderr, self.err))
        self._readers = [threading.Thread(target=self._read, args=(s, acc), daemon=True)
                         for s, acc in streams]
        for t in self._readers:
            t.start()

    def _read(self, stream, acc: list[str]) -> None:
        for line in stream:
            with self._cond:
                acc.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pred, timeout: float, count: int = 1) -> list[str]:
        """Wait until ``count`` stdout lines satisfy ``pred``; fails the test on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                hits = [line for line in self.out if pred(line)]
                if len(hits) >= count:
                    return hits
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not any(
                        t.is_alive() for t in self._readers)):
                    pytest.fail(f"{self.args[2:]}: no {count} matching line(s) in time; "
                                f"rc={self.p.poll()}\nstdout:\n{self.stdout}\n"
                                f"stderr:\n{self.stderr}")
                self._cond.wait(min(left, 0.2))

    def finish(self, timeout: float) -> int:
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.args[2:]} still running after {timeout} s\n{self.stdout}")
        for t in self._readers:
            t.join(5)
        return rc

    def instances(self) -> list[tuple[str, str, int]]:
        """(op, ranks, seq) of every instance line the headless viewer printed so far."""
        with self._cond:
            found = [m.groups() for m in map(INSTANCE.match, self.out) if m]
        return [(op, ranks, int(seq)) for op, ranks, seq in found]

    def signal(self, sig: int) -> None:
        self.p.send_signal(sig)  # the process only, not its group

    def kill_group(self) -> None:
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            pass
        for t in self._readers:
            t.join(2)

    @property
    def stdout(self) -> str:
        return "\n".join(self.out)

    @property
    def stderr(self) -> str:
        return "\n".join(self.err)


def tagged_ranks(tag: str) -> list[psutil.Process]:
    """Live rank processes (``commviz.launch.runner``) started under this test's tag."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if "commviz.launch.runner" not in " ".join(proc.info["cmdline"] or ()):
                continue
            if proc.environ().get(TAG_VAR) == tag:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


class Procs:
    """Starts the test's processes with a unique tag in their environment, so that every
    rank they start (which inherits it) can be found again, however it was started."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex
        self.env = {**os.environ, TAG_VAR: self.tag, "PYTHONUNBUFFERED": "1"}
        self.env.pop("COMMVIZ_ADDR", None)
        self.started: list[Proc] = []

    def start(self, *args: str, env: dict[str, str] | None = None,
              stderr=subprocess.PIPE, cwd: str | None = None) -> Proc:
        proc = Proc([PY, *args], {**self.env, **(env or {})}, stderr, cwd)
        self.started.append(proc)
        return proc

    def commviz(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run ``python -m commviz ARGS`` to completion."""
        proc = self.start("-m", "commviz", *args)
        rc = proc.finish(timeout)
        return subprocess.CompletedProcess(proc.args, rc, proc.stdout + "\n" if proc.out
                                           else "", proc.stderr + "\n" if proc.err else "")

    def ranks_left(self, grace: float = 5.0) -> list[psutil.Process]:
        deadline = time.monotonic() + grace
        while (left := tagged_ranks(self.tag)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left


@pytest.fixture
def procs():
    """A Procs for the test; afterwards, nothing it started may still run."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    tracker = Procs()
    try:
        yield tracker
    finally:
        still_running = [p.args[2:] for p in tracker.started if p.p.poll() is None]
        for proc in tracker.started:
            proc.kill_group()
        left_ranks = tracker.ranks_left()
        for proc in left_ranks:  # started (indirectly) by this test: end them by pid
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        children = [p for p in psutil.Process().children(recursive=True)
                    if p.pid not in before]
    assert not still_running, f"processes still running at the end of the test: {still_running}"
    assert not left_ranks, f"rank processes left behind: {[p.pid for p in left_ranks]}"
    assert not children, f"child processes left behind: {children}"
