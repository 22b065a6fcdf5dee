"""A user's command run under ``commviz run``: started, watched, stopped, its output kept.

The command runs exactly as given (an argv, no shell) in a session of its own, with a
``sitecustomize`` first on its PYTHONPATH that instruments every Python process of it when
torch.distributed starts (``commviz/launch/_site/``, described in docs/run.md). Every process of
the job carries ``COMMVIZ_JOB`` in its environment, so that stopping the job finds them all,
including workers that torchrun starts in sessions of their own and orphans whose parent
died. On Linux the job's first process gets SIGTERM if commviz itself dies
(PR_SET_PDEATHSIG, set by a small exec shim, as the demo ranks do for themselves); the kernel
sends it when the *thread* that started the job ends, so start jobs from the main thread.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

import psutil

from commviz.launch.harvester import Harvester
from commviz.launch.launcher import signal_name, telling_line
from commviz.relay.relay import DEFAULT_ADDR, Relay
from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.wire import keys

ENV_JOB = "COMMVIZ_JOB"
RELAY_KEYS = (keys.ENV_KEYS, keys.ENV_SERVER_KEY, keys.ENV_CLIENT_KEY)  # the relay's
SITE_DIR = Path(__file__).resolve().parent / "_site"
INT_GRACE_S = 5.0   # after SIGINT (torchrun then stops its workers itself)
TERM_GRACE_S = 3.0  # after SIGTERM, before SIGKILL
MAX_LINE = 4096     # longer lines are cut into pieces of this many bytes
SCAN_S = 0.1

# Runs between fork and the command: ties the job to commviz's life, then becomes the command.
_SHIM = """\
import ctypes, os, signal, sys
parent, exe, *argv = sys.argv[1:]
try:
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except Exception:
    pass
if os.getppid() != int(parent):
    sys.exit(128 + signal.SIGTERM)  # commviz died before prctl took effect
try:
    os.execv(exe, argv)
except OSError as exc:
    sys.stderr.write(f"commviz: error: cannot run {argv[0]}: {exc.strerror}\\n")
    sys.exit(126)
"""


class JobError(ValueError):
    """A command that cannot be started; the message says why."""


@dataclass(frozen=True)
class OutputLine:
    n: int        # 1 for the job's first line, counting both streams in arrival order
    stream: str   # "stdout" or "stderr"
    text: str     # without the line end


class OutputBuffer:
    """The last ``maxlen`` lines of a job's output, appended by reader threads.

    Safe to read from any thread. A reader keeps the ``n`` of the last line it has shown and
    asks for what came after it with ``since(n)``; lines that fell out of the buffer meanwhile
    are skipped (the first returned line's ``n`` says how many).
    """

    def __init__(self, maxlen: int = 2000) -> None:
        self._lines: collections.deque[OutputLine] = collections.deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self.total = 0  # lines ever appended
        self.stopped_at: int | None = None  # lines appended before commviz began the stop

    def append(self, stream: str, text: str) -> None:
        with self._lock:
            self.total += 1
            self._lines.append(OutputLine(self.total, stream, text))

    def since(self, n: int = 0) -> list[OutputLine]:
        """Lines with a number above ``n`` that are still held, oldest first."""
        with self._lock:
            if n >= self.total:
                return []
            held = len(self._lines)
            return list(self._lines)[max(0, held - (self.total - n)):]

    def tail(self, count: int) -> list[OutputLine]:
        with self._lock:
            return list(self._lines)[-count:] if count > 0 else []

    def mark_stop(self) -> None:
        """commviz begins to stop the job: what it writes from now on is its reaction."""
        with self._lock:
            self.stopped_at = self.total

    def closing(self, count: int) -> tuple[list[OutputLine], int]:
        """The job's last ``count`` lines to show once it is over, and how many it wrote after
        them: after the stop, when commviz stopped it (the tracebacks that an interrupt makes
        torchrun and the ranks print would push the job's own last lines out), else none."""
        with self._lock:
            end = self.total if self.stopped_at is None else self.stopped_at
            held = [line for line in self._lines if line.n <= end]
            return (held[-count:] if count > 0 else []), self.total - end


def job_env(addr: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The job's environment: ``base`` (os.environ) with the auto-instrumentation added.

    ``addr`` None keeps the COMMVIZ_ADDR of ``base``, or instrument()'s default when unset.
    """
    env = dict(os.environ if base is None else base)
    if addr is not None:
        env["COMMVIZ_ADDR"] = addr
    python_path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(SITE_DIR) + (os.pathsep + python_path if python_path else "")
    env[ENV_JOB] = uuid.uuid4().hex
    return env


def resolve(cmd: list[str], env: dict[str, str]) -> str:
    """The executable that ``cmd`` names, found as a shell would; JobError if none."""
    if not cmd:
        raise JobError("no command to run: put it after `--`, e.g. "
                       "`commviz run -- torchrun --nproc-per-node 2 train.py`")
    exe = shutil.which(cmd[0], path=env.get("PATH", os.defpath))
    if exe is not None:
        return exe
    if os.sep in cmd[0] and os.path.exists(cmd[0]):
        raise JobError(f"{cmd[0]}: not an executable file")
    raise JobError(f"{cmd[0]}: command not found")


class Job:
    """One run of a user's command.

    ``capture=False``: the job shares commviz's stdin, stdout and stderr (headless runs).
    ``capture=True``: its stdout and stderr are read line by line into ``output`` (an
    OutputBuffer) and into ``log`` (the whole output, in ``logdir``), for a screen that owns
    the terminal; Python processes of the job then run unbuffered so lines arrive as printed.
    ``on_line`` (e.g. NcclLog.feed) is called with every line read. Without capture it makes
    a tee: stdout and stderr go through pipes and are written on to commviz's own, each line
    in one write, as they come (headless runs that read NCCL's lines).

    ``poll()`` / ``returncode`` as subprocess.Popen; ``exit_code`` is the shell's view of it;
    ``stop()`` ends the whole process tree. After ``close()`` nothing of the job is left.
    """

    def __init__(self, cmd: list[str], addr: str | None, capture: bool = False,
                 env: dict[str, str] | None = None, max_lines: int = 2000,
                 on_line: Callable[[str], object] | None = None,
                 keep: Callable[[list[bytes]], None] | None = None) -> None:
        self.cmd = list(cmd)
        self.env = job_env(addr, env)
        exe = resolve(self.cmd, self.env)
        self.tag = self.env[ENV_JOB]
        # what a rank of the job that dies had not sent, from its ring, to the same viewer
        # (and to ``keep``: Harvester)
        self.harvester = Harvester(self.env.get("COMMVIZ_ADDR") or DEFAULT_ADDR,
                                   environ=self.env, keep=keep)
        self.env.update(self.harvester.env())
        self.stopped_by: int | None = None  # the signal that made commviz stop the job
        self.stop_reason = ""
        self.output: OutputBuffer | None = None
        self.logdir: Path | None = None
        self.log: Path | None = None
        self._log_file: TextIO | None = None
        self._log_lock = threading.Lock()
        self._readers: list[threading.Thread] = []
        self._on_line = on_line
        tee = on_line is not None and not capture
        argv, executable = self.cmd, exe
        if sys.platform.startswith("linux"):
            argv = [sys.executable, "-I", "-S", "-c", _SHIM, str(os.getpid()), exe, *self.cmd]
            executable = sys.executable
        pipe = subprocess.PIPE if capture or tee else None
        if capture or tee:
            self.env["PYTHONUNBUFFERED"] = "1"
        if capture:
            self.output = OutputBuffer(max_lines)
            self.logdir = Path(tempfile.mkdtemp(prefix="commviz-job-"))
            self.log = self.logdir / "job.log"
            self._log_file = open(self.log, "w", encoding="utf-8")
        try:
            self.proc = subprocess.Popen(
                argv, executable=executable, env=self.env,
                stdin=subprocess.DEVNULL if capture else None, stdout=pipe, stderr=pipe,
                start_new_session=True)
        except OSError as exc:
            if self._log_file is not None:
                self._log_file.close()
            self.harvester.close()
            self.cleanup()
            raise JobError(f"cannot run {self.cmd[0]}: {exc.strerror}") from None
        if capture or tee:
            for name, stream in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
                t = threading.Thread(target=self._pump if capture else self._tee,
                                     args=(name, stream),
                                     name=f"commviz-job-{name}", daemon=True)
                t.start()
                self._readers.append(t)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def exit_code(self) -> int | None:
        """What commviz exits with: the job's code, 128+N for a job killed by signal N, and
        128+N too when commviz stopped the job because it got signal N (Ctrl-C: 130)."""
        rc = self.proc.returncode
        if rc is None:
            return None
        if self.stopped_by is not None:
            return 128 + self.stopped_by
        return 128 - rc if rc < 0 else rc

    def describe_end(self, lang: str = "en") -> str:
        """One line on how the job ended, for the user, in ``lang``."""
        rc, code = self.proc.returncode, self.exit_code
        if rc is None:
            return i18n.ui("job running", lang)
        if self.stopped_by is not None:
            reason = i18n.ui(self.stop_reason, lang).format(signal=signal_name(self.stopped_by))
            return i18n.ui("job stopped", lang).format(reason=reason, code=code)
        if rc < 0:
            return i18n.ui("job killed", lang).format(signal=signal_name(-rc), code=code)
        return i18n.ui("job exited", lang).format(code=rc)

    def poll(self) -> int | None:
        """The first process's return code once the job has ended, else None."""
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def stop(self, sig: int = signal.SIGINT, reason: str = N_("stop q")) -> None:
        """End the job and every process it started; returns when none is left.

        SIGINT to the job's process group first (what Ctrl-C does in a shell: torchrun stops
        its workers), SIGTERM to every process of the job after INT_GRACE_S, SIGKILL after
        TERM_GRACE_S more. ``sig`` is the signal commviz got, or SIGINT for a quit (it sets
        ``exit_code``); ``reason``, the UI string that says which for describe_end(): "stop
        signal" (the signal named), "stop q" or "stop ctrl+c" (keys of the TUI). A job that
        already ended only has its leftovers ended.
        """
        if self.proc.poll() is None:
            self.stopped_by, self.stop_reason = sig, reason
            if self.output is not None:
                self.output.mark_stop()
            self._killpg(signal.SIGINT)
            self._settle(INT_GRACE_S)
        self.close()

    def close(self) -> None:
        """End whatever is left of the job (SIGTERM, then SIGKILL), reap it, stop reading."""
        members = self._members()
        if members:
            self._signal_all(members, signal.SIGTERM)
            self._settle(TERM_GRACE_S)
            self._signal_all(self._members(), signal.SIGKILL)
            self._settle(TERM_GRACE_S)
        self.proc.wait()
        self.harvester.close()  # every process of the job has ended: its rings are read
        for t in self._readers:
            t.join(2)
        if self._log_file is not None:
            with self._log_lock:
                self._log_file.close()

    def cleanup(self) -> None:
        """Remove the output log (after a successful run)."""
        if self.logdir is not None:
            shutil.rmtree(self.logdir, ignore_errors=True)

    # ---- the process tree ------------------------------------------------------------
    def _members(self) -> list[psutil.Process]:
        """Live processes of the job: the tree under its first process, and every process
        with this job's tag (those that left the tree: torchrun's workers' sessions,
        orphans)."""
        found: dict[int, psutil.Process] = {}
        if self.proc.returncode is None:  # its pid is still ours
            try:
                root = psutil.Process(self.proc.pid)
                found = {p.pid: p for p in [root, *root.children(recursive=True)]}
            except psutil.NoSuchProcess:
                pass
        me = os.getpid()
        uid = os.getuid()
        for p in psutil.process_iter(["uids"]):
            if p.pid in found or p.pid == me or p.info["uids"] is None \
                    or p.info["uids"].real != uid:
                continue
            try:
                if p.environ().get(ENV_JOB) == self.tag:
                    found[p.pid] = p
            except (psutil.Error, OSError):
                continue
        return [p for p in found.values() if _alive(p)]

    def _settle(self, seconds: float) -> None:
        """Wait until the job has no process left, at most ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.proc.poll()
            if not self._members():
                return
            time.sleep(SCAN_S)

    def _killpg(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _signal_all(self, members: list[psutil.Process], sig: int) -> None:
        if self.proc.returncode is None:
            self._killpg(sig)
        for p in members:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    # ---- output ------------------------------------------------------------------------
    def _pump(self, name: str, stream: BinaryIO) -> None:
        assert self.output is not None and self._log_file is not None
        with stream:
            while chunk := stream.readline(MAX_LINE):
                text = chunk.decode("utf-8", "replace").rstrip("\r\n")
                text = text.rsplit("\r", 1)[-1]  # a progress bar's last state, as a terminal shows
                self.output.append(name, text)
                if self._on_line is not None:
                    self._on_line(text)
                with self._log_lock:
                    if not self._log_file.closed:
                        self._log_file.write(text + "\n")
                        self._log_file.flush()


    def _tee(self, name: str, stream: BinaryIO) -> None:
        assert self._on_line is not None
        fd = 1 if name == "stdout" else 2
        with stream:
            while chunk := stream.readline(MAX_LINE):
                view = memoryview(chunk)
                try:
                    while view:
                        view = view[os.write(fd, view):]
                except OSError:  # our own stdout closed: keep reading, the job must not block
                    pass
                self._on_line(chunk.decode("utf-8", "replace").rstrip("\r\n"))


class Interrupts:
    """While in the ``with`` block, SIGINT and SIGTERM are noted (``got``, ``event``) instead
    of raising KeyboardInterrupt or killing commviz, so the job can be stopped cleanly."""

    def __init__(self) -> None:
        self.got: list[int] = []
        self.event = threading.Event()
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Interrupts:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @property
    def first(self) -> int | None:
        return self.got[0] if self.got else None

    def _note(self, signo: int, _frame: object) -> None:
        self.got.append(signo)
        self.event.set()


def run_plain(cmd: list[str], keep: Callable[[list[bytes]], None] | None = None,
              keep_unforwarded: Callable[[list[bytes]], None] | None = None) -> int:
    """``commviz run --no-viewer``: the job, with this process as its node's relay
    (``commviz/relay/``), forwarding to $COMMVIZ_ADDR (or the default of instrument()); its
    exit code, or 128+N when signal N made commviz stop it. ``keep``: given what a dying
    rank had not sent, besides the viewer (which may be gone with the job);
    ``keep_unforwarded``: at the end, the last of what the relay could not send.

    The ranks report to the relay on loopback, without keys: the keys in the environment are
    the relay's, to reach the viewer."""
    to = os.environ.get("COMMVIZ_ADDR") or DEFAULT_ADDR
    relay = Relay(to, "tcp://127.0.0.1:*", keep_unforwarded=keep_unforwarded is not None)
    env = {k: v for k, v in os.environ.items() if k not in RELAY_KEYS}
    try:
        with Interrupts() as interrupts:
            job = Job(cmd, relay.addr, env=env, keep=keep)
            try:
                while interrupts.first is None:
                    try:
                        job.wait(0.2)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            finally:
                job.stop(interrupts.first or signal.SIGINT, N_("stop signal"))
    finally:
        relay.close()  # after the job: its ranks' last messages are sent on first
        unforwarded = relay.unforwarded()
        if unforwarded and keep_unforwarded is not None:
            keep_unforwarded(unforwarded)
        line = relay.end_line()
        if line is not None:
            print(line, file=sys.stderr, flush=True)
    code = job.exit_code
    assert code is not None
    return code


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class JobAsRanks:
    """A Job in the shape of launcher.Ranks, for the TUI's ``run_app(ranks=...)``: one
    "rank" named ``job`` that ends when the job's first process ends. ``stop()`` ends the
    whole job (SIGINT first); a job that commviz stopped is not a failure."""

    rank = "job"
    who = "the job"
    logs = N_("job output kept")  # the UI string that says where logdir is

    def __init__(self, job: Job) -> None:
        self.job = job
        self._reported = False
        # what stop() tells the job made commviz stop it: (signal, Job.stop's reason); the TUI
        # sets it when it quits for another cause than `q`
        self.cause: tuple[int, str] = (signal.SIGINT, N_("stop q"))

    @property
    def logdir(self) -> Path | None:
        return self.job.logdir

    @property
    def returncode(self) -> int | None:
        return self.job.exit_code

    def poll(self) -> list[JobAsRanks]:
        if not self._reported and self.job.poll() is not None:
            self._reported = True
            return [self]
        return []

    def running(self) -> int:
        return int(self.job.poll() is None)

    def failed(self) -> list[JobAsRanks]:
        job = self.job
        return [self] if job.poll() not in (None, 0) and job.stopped_by is None else []

    def error_line(self) -> str:
        """The telling line of the job's stderr (the exception a rank died of, not torchrun's
        rule under its summary), or how it ended."""
        if self.job.output is not None:
            line = telling_line([ln.text for ln in self.job.output.tail(200)
                                 if ln.stream == "stderr"], whose=True)
            if line is not None:
                return line
        return self.job.describe_end()

    def stop(self) -> None:
        self.job.stop(*self.cause)

    def cleanup_logs(self) -> None:
        self.job.cleanup()
