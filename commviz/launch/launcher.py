"""Start and stop the rank processes of a demo, and find out which demos exist.

Ranks are separate Python processes (``commviz.launch.runner``), each in its own process
group so that stopping the demo stops everything it started, and each tied to the
launcher's life (PR_SET_PDEATHSIG) so that no rank outlives a killed launcher.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from commviz.launch.harvester import Harvester
from commviz.launch.runner import block_elements, elements
from commviz.rank.nvml import Nvml
from commviz.text import i18n
from commviz.text.i18n import N_

MAX_RANKS = 64
MAX_INTERVAL_S = 3600.0  # --interval: an hour between iterations at most
STOP_GRACE_S = 3.0
# the rank runner without the current directory on its path: a folder named commviz there
# (the parent of a clone, with commviz installed in editable mode) would be imported instead
_RUNNER_OFF_CWD = ("import runpy, sys; del sys.path[0]; "
                   "runpy.run_module('commviz.launch.runner', run_name='__main__', alter_sys=True)")


class LaunchError(ValueError):
    """A demo that cannot run as asked; the message says why and what to do instead."""


@dataclass(frozen=True)
class DemoInfo:
    name: str
    summary: str
    min_ranks: int
    path: Path
    headless_interval: float = 0.0  # seconds between iterations in a headless run, unless asked
    size_use: str = "none"  # how it sizes its float32 tensors from --size: see _size_use
    stops: tuple[str, ...] = ()  # a tour's demos, in order (its TOUR)


def _size_use(tree: ast.Module) -> str:
    """How a demo sizes its float32 tensors from --size, read from its calls: "blocks"
    (``ctx.block_numel``: world equal blocks), "elements" (``ctx.numel``), else "none"."""
    called = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
              and isinstance(node.value, ast.Name) and node.value.id == "ctx"}
    return "blocks" if "block_numel" in called else "elements" if "numel" in called else "none"


def _tour(tree: ast.Module) -> tuple[str, ...]:
    """The demos a tour runs (its ``TOUR`` list); () for any other demo."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "TOUR":
            return tuple(ast.literal_eval(node.value))
    return ()


def demos() -> dict[str, DemoInfo]:
    """The demos shipped in ``commviz.demos``, read without importing them (no torch)."""
    found = {}
    for entry in resources.files("commviz.demos").iterdir():
        name = entry.name
        if not name.endswith(".py") or name.startswith("_"):
            continue
        tree = ast.parse(entry.read_text(encoding="utf-8"))
        summary = (ast.get_docstring(tree) or name).strip().splitlines()[0]
        consts = {node.targets[0].id: node.value.value for node in tree.body
                  if isinstance(node, ast.Assign) and len(node.targets) == 1
                  and isinstance(node.targets[0], ast.Name)
                  and isinstance(node.value, ast.Constant)}
        found[name[:-3]] = DemoInfo(name[:-3], summary, int(consts.get("MIN_RANKS", 1)),
                                    Path(str(entry)),
                                    float(consts.get("HEADLESS_INTERVAL_S", 0.0)),
                                    _size_use(tree), _tour(tree))
    return dict(sorted(found.items()))


FLOAT32_BYTES = 4  # the demos' tensors are float32


def _size_used(use: str, size: int, world: int, lang: str) -> tuple[int, str] | None:
    """(bytes per rank, how they are made up) of a demo that sizes its tensors as ``use``
    says, for ``--size size``; None when it moves no tensor of that size."""
    if use == "blocks":
        block = block_elements(size, FLOAT32_BYTES, world)
        return world * block * FLOAT32_BYTES, \
            i18n.ui("size blocks", lang).format(n=world, block=block)
    if use == "elements":
        n = elements(size, FLOAT32_BYTES)
        return n * FLOAT32_BYTES, i18n.ui("size elements", lang).format(n=n)
    return None


def size_note(name: str, size: int, world: int, asked: bool, lang: str = "en") -> str | None:
    """One line when demo ``name`` moves other than ``size`` bytes per rank (whole float32
    elements, world equal blocks), saying what it uses instead (a tour: in which stops); and,
    when the size was ``asked`` for, when the demo uses no size at all. None otherwise."""
    available = demos()
    stops = available[name].stops or (name,)
    used: dict[tuple[int, str], list[str]] = {}  # (bytes, make-up): the stops using it
    for stop in stops:
        got = _size_used(available[stop].size_use, size, world, lang)
        if got is not None:
            used.setdefault(got, []).append(stop)
    if not used:
        return i18n.ui("size unused", lang).format(size=size, demo=name) if asked else None
    tour = len(stops) > 1
    parts = [i18n.ui("size using", lang).format(bytes=nbytes, detail=detail)
             + (i18n.ui("size in", lang).format(demos=", ".join(names)) if tour else "")
             for (nbytes, detail), names in used.items() if nbytes != size]
    return f"--size {size}: " + "; ".join(parts) if parts else None


def gpu_count() -> int:
    """GPUs this process may use, from NVML (no torch import); 0 without a driver."""
    nvml = Nvml()
    nv = nvml.open()
    if nv is None:
        return 0
    try:
        count = nv.nvmlDeviceGetCount()
    except Exception:
        return 0
    finally:
        nvml.close()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return count


def choose_backend(requested: str, ranks: int, lang: str = "en") -> tuple[str, str]:
    """The backend to run and a sentence for the screen saying why, in ``lang``."""
    gpus = gpu_count()
    if requested == "nccl":
        if gpus < ranks:
            raise LaunchError(f"nccl needs one GPU per rank: {ranks} ranks asked, {gpus} GPU(s) "
                              "here. Use --backend gloo (CPU tensors) or fewer --ranks.")
        return "nccl", i18n.ui_n("nccl on gpus", ranks, lang)
    if requested == "gloo":
        return "gloo", i18n.ui("gloo asked", lang)
    if gpus >= ranks:
        return "nccl", i18n.ui_n("nccl on gpus", ranks, lang)
    return "gloo", i18n.ui("gloo no gpus", lang).format(gpus=gpus, ranks=ranks)


def validate(name: str, ranks: int, iters: int | None, size: int, interval: float) -> DemoInfo:
    available = demos()
    info = available.get(name)
    if info is None:
        raise LaunchError(f"unknown demo {name!r}. Available: {', '.join(available)} "
                          "(commviz demo --list describes them)")
    if not info.min_ranks <= ranks <= MAX_RANKS:
        raise LaunchError(f"--ranks must be between {info.min_ranks} and {MAX_RANKS} for "
                          f"{name}, got {ranks}")
    if iters is not None and iters < 1:
        raise LaunchError("--iters must be at least 1")
    if size < 1:
        raise LaunchError("--size must be at least 1 byte")
    if not 0 <= interval <= MAX_INTERVAL_S:  # nan and inf too
        raise LaunchError(f"--interval must be between 0 and {MAX_INTERVAL_S:.0f} seconds, "
                          f"got {interval}")
    return info


def check_memory(size: int, ranks: int, backend: str) -> None:
    """A --size whose CPU buffers cannot fit in this machine's free memory is refused before
    any rank starts (each rank holds at least a buffer to send and one to receive into),
    rather than failing in every rank at its first allocation."""
    if backend != "gloo":  # CUDA tensors: each rank's GPU says so itself
        return
    import psutil

    need, free = 2 * size * ranks, psutil.virtual_memory().available
    if need > free:
        raise LaunchError(f"--size {size} B is too big here: {ranks} ranks need at least "
                          f"{need / 2**30:,.1f} GiB for their buffers, and "
                          f"{free / 2**30:,.1f} GiB of memory is free")


def torch_version() -> tuple[int, int]:
    """(major, minor) of the installed torch, read without importing it; (0, 0) if unknown."""
    try:
        major, minor = metadata.version("torch").split(".")[:2]
        return int(major), int(minor)
    except (metadata.PackageNotFoundError, ValueError):
        return 0, 0


def gloo_has_all_to_all() -> bool:
    """gloo runs the list form of all_to_all since torch 2.12 (all_to_all_single always)."""
    return torch_version() >= (2, 12)


def check_backend(name: str, backend: str) -> None:
    """A demo the chosen backend cannot run here is refused before any rank starts."""
    if name == "all_to_all" and backend == "gloo" and not gloo_has_all_to_all():
        major, minor = torch_version()
        raise LaunchError(f"gloo in torch {major}.{minor} has no all_to_all (it came in torch "
                          "2.12). Try `commviz demo all_to_all_single`, the same exchange on "
                          "one flat tensor, or --backend nccl with one GPU per rank.")


def free_port() -> int:
    """A free loopback port whose next one is free too (a viewer bound there takes port + 1
    for its clock channel: a port with a taken neighbour failed a bind now and then)."""
    while True:
        with socket.socket() as s, socket.socket() as neighbour:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            try:
                neighbour.bind(("127.0.0.1", port + 1))
            except (OSError, OverflowError):  # taken, or past 65535
                continue
            return port


@dataclass
class RankProcess:
    rank: int
    proc: subprocess.Popen
    log: Path
    returncode: int | None = None
    stopped: bool = False  # still running when stop() ended it: not a failure of its own

    @property
    def who(self) -> str:
        return f"rank {self.rank}"

    def error_line(self) -> str:
        """The rank's own one-line account of its failure, or the telling line of its log."""
        try:
            lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "no log"
        for line in lines:
            if line.startswith("commviz-rank-error: "):
                return _readable(line.removeprefix("commviz-rank-error: "))
        return telling_line(lines) or _without_words(self.returncode)


def signal_name(number: int) -> str:
    """A signal by its name ("SIGKILL"), by its number where it has none."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _without_words(returncode: int | None) -> str:
    """What a rank that wrote no error said by its exit: the signal that killed it (English:
    ``i18n.in_language`` says it in the screen's language)."""
    if returncode is not None and returncode < 0:
        try:
            return i18n.ui("killed no error").format(signal.Signals(-returncode).name)
        except ValueError:
            pass
    return i18n.ui("no error written")


# where in gloo's or NCCL's C++ sources an error was raised: "[/__w/.../unbound_buffer.cc:78] "
_SOURCE_LOCATION = re.compile(r"\[[^\]\s]+\.(?:cc|cpp|cu|c|h|hpp):\d+\]\s*")


def _readable(line: str) -> str:
    """An error line without the C++ source location a backend puts in it."""
    return _SOURCE_LOCATION.sub("", line)


# "RuntimeError: boom", "[rank1]: ValueError: x", "KeyboardInterrupt"
_EXCEPTION_LINE = re.compile(r"^(?:\[rank(?P<rank>\d+)\]:\s*)?(?P<error>[A-Za-z_][\w.]*(?:Error|"
                             r"Exception|Exit|Interrupt|Failure)\b(?::.*)?)$")
# a launcher's summary of a failed child: its own exception, less telling than the child's
_LAUNCHER_ERRORS = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
                    "torch.multiprocessing.spawn.ProcessRaisedException")
# torch.multiprocessing.spawn's: the failed process's traceback under "-- Process 2 terminated
# with the following error:", or "...ProcessExitedException: process 2 terminated with signal
# SIGKILL" for one a signal killed
_SPAWN_RAISED = re.compile(r"^-- Process \d+ terminated with the following error:$")
_SPAWN_EXITED = "torch.multiprocessing.spawn.ProcessExitedException: "


# torchrun's summary: "Root Cause (first observed failure):", then "rank      : 1 (local_rank:
# 1)" and "exitcode  : -9 (pid: 123)  (SIGKILL)" among its fields
_ROOT_CAUSE = "Root Cause (first observed failure):"
_ROOT_FIELD = re.compile(r"^\s*(rank|exitcode)\s*:\s*(-?\d+)")


def _root_cause(lines: list[str]) -> tuple[int, int] | None:
    """torchrun's root cause: the rank of the first observed failure and its exit code (a
    negative code: the signal that killed it); None without a summary."""
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == _ROOT_CAUSE)
    except StopIteration:
        return None
    fields = {}
    for line in lines[start + 1:start + 8]:
        found = _ROOT_FIELD.match(line)
        if found:
            fields.setdefault(found.group(1), int(found.group(2)))
    if "rank" not in fields or "exitcode" not in fields:
        return None
    return fields["rank"], fields["exitcode"]


def _said_root_cause(rank: int, code: int) -> str:
    """torchrun's root cause in words, for a rank that wrote no exception of its own (a
    signal killed it, or it exited): the other ranks' broken connections are its effects."""
    if code < 0:
        return i18n.ui("root cause killed").format(rank, signal_name(-code))
    return i18n.ui("root cause exited").format(rank, code)


def torchrun_exit_codes(lines: list[str]) -> dict[int, int]:
    """The exit code of each rank torchrun's failure summary lists (its "Failures:" and its
    root cause; a negative code: the signal that ended it); {} without a summary."""
    start = next((i for i, line in enumerate(lines)
                  if line.strip() in ("Failures:", _ROOT_CAUSE)), None)
    if start is None:
        return {}
    codes: dict[int, int] = {}
    rank = None
    for line in lines[start:]:
        found = _ROOT_FIELD.match(line)
        if found and found.group(1) == "rank":
            rank = int(found.group(2))
        elif found and rank is not None:
            codes[rank] = int(found.group(2))
            rank = None
    return codes


def _spawn_root_cause(lines: list[str]) -> str | None:
    """What torch.multiprocessing.spawn says made the first of its processes fail: the other
    processes' broken connections may come before it in the output."""
    for i, line in enumerate(lines):
        if line.startswith(_SPAWN_EXITED):
            return line.removeprefix(_SPAWN_EXITED).strip()
        if _SPAWN_RAISED.match(line.strip()):
            for after in lines[i + 1:]:
                match = _EXCEPTION_LINE.match(after.strip())
                if match:
                    return _readable(match["error"])
    return None


def telling_line(lines: list[str], whose: bool = False) -> str | None:
    """The line of a failed process's output that says why, or None when there is none.

    In turn: torchrun's root cause when a signal killed that rank (it wrote nothing of its
    own); torch.multiprocessing.spawn's failed process; the exception of the rank torchrun
    names as its root cause; the first exception that torch marked with no rank (the cause:
    the other ranks' errors and a launcher's summary come after); torchrun's root cause in
    words, when it wrote no exception (the others' broken connections are its effects); the
    first exception of any rank; else the last line with a word in it (not a rule such as
    torchrun's ``=====``). A backend's C++ source location is left out. ``whose``: an
    exception that torch marked with its rank (``[rank1]: ``) says which, as ``rank 1: ...``
    (a job's output mixes its ranks')."""
    root = _root_cause(lines)
    if root is not None and root[1] < 0:
        return _said_root_cause(*root)
    cause = _spawn_root_cause(lines)
    if cause is not None:
        return cause
    errors = [m for m in map(_EXCEPTION_LINE.match, map(str.strip, lines))
              if m and not m["error"].startswith(_LAUNCHER_ERRORS)]
    first = next((m for m in errors if root is not None and m["rank"] == str(root[0])),
                 None) or next((m for m in errors if not m["rank"]), None)
    if first is None and root is not None:
        return _said_root_cause(*root)
    first = first or next(iter(errors), None)
    if first is not None:
        rank = f"rank {first['rank']}: " if whose and first["rank"] else ""
        return rank + _readable(first["error"])
    last = next((line.strip() for line in reversed(lines) if re.search(r"\w", line)), None)
    return None if last is None else _readable(last)


def runner_command() -> list[str]:
    """How to start a rank so that it imports the commviz this process runs."""
    if Path(__file__).resolve().parents[2] == Path.cwd().resolve():
        return [sys.executable, "-m", "commviz.launch.runner"]  # run from a clone's root
    return [sys.executable, "-c", _RUNNER_OFF_CWD]


class Ranks:
    """The N rank processes of one demo run."""

    logs = N_("rank logs kept")  # the UI string that says where logdir is

    def __init__(self, demo: str, world: int, backend: str, viewer_addr: str, size: int,
                 iters: int | None, interval: float,
                 extra_env: dict[str, str] | None = None) -> None:
        """``extra_env``: more variables for the ranks, e.g. a Controller's ``env()``."""
        self.logdir = Path(tempfile.mkdtemp(prefix="commviz-"))
        port = free_port()
        # what a rank that dies had not sent, from its ring, to the same viewer
        self.harvester = Harvester(viewer_addr)
        env = {**os.environ, "COMMVIZ_ADDR": viewer_addr, "PYTHONUNBUFFERED": "1",
               "COMMVIZ_PARENT_PID": str(os.getpid()), **self.harvester.env(),
               **(extra_env or {})}
        self.procs: list[RankProcess] = []
        for rank in range(world):
            cmd = [*runner_command(), demo, "--rank", str(rank),
                   "--world", str(world), "--backend", backend, "--master-port", str(port),
                   "--size", str(size), "--interval", str(interval)]
            if iters is not None:
                cmd += ["--iters", str(iters)]
            log = self.logdir / f"rank{rank}.log"
            with open(log, "w") as out:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                        env=env, start_new_session=True)
            self.procs.append(RankProcess(rank, proc, log))

    def poll(self) -> list[RankProcess]:
        """Ranks that ended since the last call."""
        ended = []
        for rp in self.procs:
            if rp.returncode is None and rp.proc.poll() is not None:
                rp.returncode = rp.proc.returncode
                ended.append(rp)
        return ended

    def running(self) -> int:
        return sum(rp.proc.poll() is None for rp in self.procs)

    def failed(self) -> list[RankProcess]:
        """Ranks that ended with an error, not counting those that stop() ended."""
        return [rp for rp in self.procs if rp.returncode not in (None, 0) and not rp.stopped]

    def stop(self) -> None:
        """SIGTERM every rank's process group, SIGKILL what is left after a grace period."""
        for rp in self.procs:
            if rp.proc.poll() is None:
                rp.stopped = True
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._signal(signal.SIGKILL)
        for rp in self.procs:
            rp.proc.wait()
        self.poll()
        self.harvester.close()  # the rings of those that did not exit cleanly

    def cleanup_logs(self) -> None:
        shutil.rmtree(self.logdir, ignore_errors=True)

    def _signal(self, sig: int) -> None:
        for rp in self.procs:
            if rp.proc.poll() is None:
                try:
                    os.killpg(rp.proc.pid, sig)
                except ProcessLookupError:
                    pass
