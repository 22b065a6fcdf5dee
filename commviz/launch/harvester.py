"""The node's harvester: what a rank that died had not sent, read from its ring and sent on.

The commviz process that starts a node's ranks (the demo launcher, ``commviz run``, and so the
node's relay under ``commviz run --no-viewer``) runs one. Its ranks' processes carry its tag
(``COMMVIZ_RING_TAG``) and so name their rings after it (``commviz/wire/ring.py``). A thread
finds each new ring, shares its lock (so no sweep removes it), and watches its process: by a
pidfd where the kernel has them (readable the moment the process ends, zombie or not), else
by polling. When a process ends, the harvester notes when (its wall clock, to the
millisecond) and in what order, reads the ring, and sends to the viewer, as the rank would
have, what the viewer had not received: the completed records the emitter never shipped,
its last batches again (ZeroMQ may not have sent them yet when the process died) and the ops
the process was inside, all flagged ``FLAG_RECOVERED``; then a ``gone`` message;
then it removes the ring. It sends over ZeroMQ like a rank, so a viewer in this process
records them as it records any message, and a relay forwards them.

Whatever goes wrong with one ring (unreadable, of another version) costs that ring, never the
job: it is removed and the harvester goes on.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import zmq

from commviz.wire import protocol, ring
from commviz.wire.keys import KeysError, client_keys

SCAN_S = 0.05         # how often new rings are looked for, and polled processes checked
EXIT_LINGER_MS = 1000  # at close: how long the last messages may take to leave
UNKNOWN_SITE = ("<unknown>", 0)  # a call site the ring's log had no room for


@dataclass(frozen=True)
class Death:
    """How one of the node's rank processes ended, as the harvester saw it."""

    rank: int            # -1: it ended before it knew its rank
    pid: int
    t_ns: int            # the harvester's wall clock when it saw the end
    order: int           # 1: the first of this harvester's processes to end
    code: int | None     # exit code (negative: killed by that signal), None: not a child
    recovered: int       # completed records sent after its death
    running: int         # records of ops it was inside when it ended


@dataclass
class _Watched:
    path: Path
    pid: int
    lock_fd: int
    pidfd: int | None
    proc: psutil.Process | None  # when polling (no pidfd)


class Harvester:
    """Started by the constructor (a thread of its own); ``close()`` harvests what is left.

    ``to``: where the node's ranks report (the viewer's address, or the node's relay);
    ``environ``: the ranks' environment, whose keys (if any) it reports with, as they do; it
    must have ``env()`` in it. Sends never wait: with no viewer to take them, a dead rank's
    records are dropped and counted (``unsent``), as its own emitter would have. ``keep``:
    given each dead process' messages too (with who it was, always), on the harvester's
    thread, where the viewer is another process that may be gone with the job (a node's
    relay: ``viewer/black_box.py``).
    """

    def __init__(self, to: str, directory: Path | None = None, scan_s: float = SCAN_S,
                 out=sys.stderr, environ: Mapping[str, str] = os.environ,
                 keep: Callable[[list[bytes]], None] | None = None) -> None:
        self.tag = uuid.uuid4().hex[:16]
        self.directory = ring.ring_dir() if directory is None else directory
        self.scan_s = scan_s
        self._keep = keep
        self.deaths: list[Death] = []
        self.unsent = 0  # messages no viewer took
        self.lock = threading.Lock()  # deaths are appended on the harvester's thread
        self._watched: dict[Path, _Watched] = {}
        self._out = out
        swept = ring.sweep(self.directory)
        if swept:
            print(f"commviz: removed {len(swept)} shared-memory ring(s) left in "
                  f"{self.directory} by processes of an earlier run that died",
                  file=out, flush=True)
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PUSH)
        self._sock.setsockopt(zmq.SNDHWM, 0)  # a death's records are few: never dropped
        self._sock.setsockopt(zmq.LINGER, EXIT_LINGER_MS)
        try:
            keys = client_keys(environ)
        except KeysError:  # the ranks say so themselves, and connect without
            keys = None
        if keys is not None:
            from commviz.wire.keys import secure_client

            secure_client(self._sock, keys)
        self._sock.connect(to)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commviz-harvester",
                                        daemon=True)
        self._thread.start()

    def env(self) -> dict[str, str]:
        """What the ranks' environment needs so that their rings are this harvester's."""
        return {ring.ENV_TAG: self.tag, ring.ENV_DIR: str(self.directory)}

    def deaths_so_far(self) -> list[Death]:
        with self.lock:
            return list(self.deaths)

    def close(self) -> None:
        """Harvest every ring whose process has ended (call once the ranks are gone), stop,
        and let the last messages leave. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self._scan()  # a ring made just before its process ended
        for w in list(self._watched.values()):
            if not _alive(w):
                self._harvest(w, time.time_ns())
            else:  # still running (not ours to stop): its own exit removes its ring
                self._forget(w)
        self._sock.close(linger=EXIT_LINGER_MS)
        self._ctx.term()

    # ---- the thread ------------------------------------------------------------------
    def _run(self) -> None:
        poller = select.poll()
        by_fd: dict[int, _Watched] = {}
        while not self._stop.is_set():
            for w in self._scan():
                if w.pidfd is not None:
                    poller.register(w.pidfd, select.POLLIN)
                    by_fd[w.pidfd] = w
            ended = [by_fd.pop(fd) for fd, _ in poller.poll(self.scan_s * 1000)]
            t_ns = time.time_ns()  # when they ended, give or take the wake-up: not the reading
            for w in ended:
                poller.unregister(w.pidfd)
            ended += [w for w in self._watched.values() if w.pidfd is None and not _alive(w)]
            for w in ended:
                try:
                    self._harvest(w, t_ns)
                except Exception as exc:  # one ring's trouble must not end the harvesting
                    print(f"commviz: the ring of process {w.pid} could not be harvested "
                          f"({type(exc).__name__}: {exc}), and is removed", file=self._out,
                          flush=True)
                    _unlink(w.path)
                    self._forget(w)

    def _scan(self) -> list[_Watched]:
        """Claim the rings of this harvester's processes that appeared since the last scan."""
        new = []
        for path in ring.ring_files(self.directory, self.tag):
            if path in self._watched:
                continue
            pid = ring.pid_of(path)
            fd = ring.claim(path)
            if pid is None or fd is None:
                if fd is not None:
                    os.close(fd)
                continue
            w = _Watched(path, pid, fd, _pidfd(pid), None)
            if w.pidfd is None:
                try:
                    w.proc = psutil.Process(pid)
                except psutil.Error:
                    w.proc = None  # already gone: harvested at once
            self._watched[path] = w
            new.append(w)
        return new

    def _harvest(self, w: _Watched, t_ns: int) -> None:
        """``w``'s process ended at ``t_ns``: send what its ring holds that the viewer lacks
        (none when it exited cleanly, having removed its ring after its last records went
        out), then how it ended."""
        code = _exit_code(w)
        clean = ring.removed(w.lock_fd)
        try:
            got = ring.read_fd(w.lock_fd, w.path)
        except ring.RingError as exc:
            print(f"commviz: a rank's ring could not be read, and is removed ({exc})",
                  file=self._out, flush=True)
            got = None
        recovered = running = 0
        order = len(self.deaths) + 1  # only this thread (or close(), after it) appends
        if got is not None and got.rank >= 0:
            messages = []
            if not clean:
                messages, recovered, running = recovered_messages(got, t_ns)
            gone = protocol.encode_gone(got.rank, got.inc, w.pid, t_ns, order, code,
                                        recovered, running)
            for data in [*messages, gone]:
                try:
                    self._sock.send(data, zmq.NOBLOCK)
                except zmq.Again:  # no viewer connected
                    self.unsent += 1
            if messages and self._keep is not None:  # a recording of its own: who it was
                who = _identity_message(got, t_ns) if got.heartbeat_sent else []
                self._kept(who + messages + [gone])
        with self.lock:
            self.deaths.append(Death(-1 if got is None else got.rank, w.pid, t_ns, order, code,
                                     recovered, running))
        if not clean:
            _unlink(w.path)
        self._forget(w)

    def _kept(self, messages: list[bytes]) -> None:
        try:
            self._keep(messages)  # type: ignore[misc]
        except Exception as exc:  # the sending is done: this costs the copy only
            print(f"commviz: a dead rank's last records could not be kept on this node "
                  f"({type(exc).__name__}: {exc}); they went to the viewer only", file=self._out,
                  flush=True)

    def _forget(self, w: _Watched) -> None:
        self._watched.pop(w.path, None)
        for fd in (w.lock_fd, w.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


def recovered_messages(got: ring.Ring, t_ns: int,
                       identity: bool = False) -> tuple[list[bytes], int, int]:
    """The messages that give the viewer what a dead process had not sent: its identity if
    it never sent a heartbeat (``identity``: always, for a recording of their own), the groups
    its records name, its last batches again (under
    their numbers: they may have died in its socket with it, and the viewer keeps the first
    copy of each, ``viewer/batch_numbers.py``), then its records never shipped, all flagged
    recovered. Returns them with the counts of completed records never shipped and of
    running ones."""
    resent = got.maybe_lost()
    recs = got.records[resent | got.unshipped]
    if not len(recs):
        return [], 0, 0
    recs["flags"] |= protocol.FLAG_RECOVERED
    batch = got.shipped_in[resent | got.unshipped]
    messages = _identity_message(got, t_ns) if identity or not got.heartbeat_sent else []
    rows = [[gid, *got.groups[gid]] for gid in sorted(set(recs["gid"].tolist()))
            if gid in got.groups]
    if rows:
        messages.append(protocol.encode_groups(got.rank, rows, got.inc))
    for n in sorted(set(batch.tolist()) - {0}) + [0]:  # in the order they were shipped
        of_n = recs[batch == n]
        for i in range(0, len(of_n), protocol.MAX_BATCH):
            messages.append(_ops(got, of_n[i:i + protocol.MAX_BATCH], n))
    never = recs[batch == 0]
    running = int((never["t_end"] < 0).sum())
    return messages, len(never) - running, running


def _identity_message(got: ring.Ring, t_ns: int) -> list[bytes]:
    """A dead process' identity as a heartbeat (none if its ring never learnt it)."""
    if got.identity is None:
        return []
    rank, world, backend, device, host, job = got.identity
    return [protocol.encode_heartbeat(rank, world=world, host=host, pid=got.pid,
                                      backend=backend, device=device, t_ns=t_ns, dropped=0,
                                      tel={}, inc=got.inc, job=job)]


def _ops(got: ring.Ring, chunk: np.ndarray, n: int) -> bytes:
    cols = {name: np.ascontiguousarray(chunk[name]).tobytes() for name in protocol.COLUMNS}
    sites = [[sid, *got.sites.get(sid, UNKNOWN_SITE)]
             for sid in sorted(set(chunk["site"].tolist()))]
    return protocol.encode_ops(got.rank, cols, [], sites, got.inc, n)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (Linux 5.3 on), None where there is none: then it is polled."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        return pidfd_open(pid)
    except OSError:
        return None


def _alive(w: _Watched) -> bool:
    if w.pidfd is not None:
        return not select.select([w.pidfd], [], [], 0)[0]
    try:
        return w.proc is not None and w.proc.is_running() \
            and w.proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _exit_code(w: _Watched) -> int | None:
    """A child's exit code (negative: its signal), read without reaping it (its Popen does);
    None for a process that is not this one's child."""
    waitid = getattr(os, "waitid", None)
    if w.pidfd is None or waitid is None or not hasattr(os, "P_PIDFD"):
        return None
    try:
        res = waitid(os.P_PIDFD, w.pidfd, os.WEXITED | os.WNOWAIT | os.WNOHANG)
    except (ChildProcessError, OSError):
        return None
    if res is None:
        return None
    if res.si_code == os.CLD_EXITED:
        return res.si_status
    return -res.si_status
