"""The viewer without a screen: a line per completed collective/transfer and per finding of the
live diagnosis, then a summary."""

from __future__ import annotations

import io
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from commviz.knowledge import sweep
from commviz.launch.job import Interrupts, Job
from commviz.launch.launcher import Ranks
from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.viewer import end_report
from commviz.viewer import plain_text as text
from commviz.viewer.gc_policy import RareFullCollections
from commviz.viewer.session import Session

BYE_WAIT_S = 2.0
FAILURE_GRACE_S = 2.0  # after a rank fails, watch this long: the diagnosis names what it left


def run(session: Session, ranks: Ranks | None = None, out: TextIO = sys.stdout,
        banner: str | None = None, lang: str = "en", sweep_backend: str | None = None) -> int:
    """Print until interrupted or, with ``ranks``, until they have all ended. Returns the exit code.

    ``banner`` is printed first, once SIGINT/SIGTERM already lead to a clean stop, so whoever
    reads it may signal at once. The handlers stay until everything is stopped and closed.
    ``lang``: the language of the lines (the numbers of the tables keep their decimal point).
    ``sweep_backend``: the sweep demo's (its fit is the backend's schedule's): nccl-tests'
    table, a row per size, rather than a line per call (hundreds a size).
    """
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    printer = _Printer(session, out, lang, sweep_backend)
    code = 0
    failed_at: float | None = None
    rare_full_gc = RareFullCollections()
    rare_full_gc.start()
    try:
        if banner is not None:
            print(banner, file=out, flush=True)
        while not stop.is_set():
            session.poll(50)
            printer.flush()
            if ranks is not None:
                for rp in ranks.poll():
                    if rp.returncode:
                        fields = {"who": rp.who, "code": rp.returncode, "line": rp.error_line(),
                                  "rank": rp.rank}
                        said = i18n.in_language(fields["line"], lang)
                        print(i18n.ui("rank failed", lang).format(**{**fields, "line": said}),
                              file=out, flush=True)
                        session.note_event(N_("rank failed"), fields)
                    else:
                        session.note_event(N_("rank finished"), {"who": rp.who, "code": 0,
                                                             "rank": rp.rank})
                if ranks.failed():
                    code = 1
                    failed_at = failed_at or time.monotonic()
                    if time.monotonic() - failed_at >= FAILURE_GRACE_S or not ranks.running():
                        break
                    continue
                if not ranks.running():
                    _await_goodbyes(session, len(ranks.procs), printer)
                    break
    finally:
        try:
            if ranks is not None:
                ranks.stop()
            # a watcher (no ranks of its own) names the ranks that went silent without a goodbye
            session.close(ended=None if ranks is None else
                          [rp.rank for rp in ranks.procs if not rp.stopped])
            printer.flush()
            printer.sweep_end()
            if ranks is not None:  # the last of the end lines, after what the ranks left
                if ranks.failed():
                    code = 1
                    print(i18n.ui(ranks.logs, lang).format(dir=ranks.logdir), file=out)
                else:
                    ranks.cleanup_logs()
            printer.summary()
        finally:
            rare_full_gc.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return code


def run_job(session: Session, start: Callable[[], Job], out: TextIO = sys.stdout,
            banner: str | None = None, lang: str = "en") -> int:
    """Print while a ``commviz run`` job runs, until it ends or SIGINT/SIGTERM stops it.

    The job shares the terminal, so every line of commviz's own goes to ``out`` behind a
    ``[commviz] `` prefix. ``start`` starts the job once the signal handlers are in place, so
    that a Ctrl-C at any moment stops it. Returns the job's exit code (Job.exit_code).
    """
    out = Prefixed(out, PREFIX)
    printer = _Printer(session, out, lang)
    job: Job | None = None
    with Interrupts() as interrupts, RareFullCollections():
        try:
            if banner is not None:
                print(banner, file=out, flush=True)
            job = start()
            while interrupts.first is None and job.poll() is None:
                session.poll(50)
                printer.flush()
            if interrupts.first is None:
                with session.lock:
                    joined = sum(bool(s.pid) for s in session.model.ranks.values())
                _await_goodbyes(session, joined, printer)
        finally:
            events: list[tuple[str, dict]] = []
            if job is not None:  # stops it if interrupted; else ends only what is left of it
                job.stop(interrupts.first or signal.SIGINT, N_("stop signal"))
                events = _note_job_end(session, job)
            session.close()
            if job is not None:
                printer.flush()
                printer.summary()
                printer.findings_held()
                with session.lock:
                    silent = sorted(r for r, s in session.model.ranks.items() if not s.exited)
                if silent:
                    print(i18n.ui_n("no goodbye", len(silent), lang,
                                       ranks=text.ranks_phrase(silent)), file=out)
                for line in end_report.event_lines(events, lang):  # the cause, last
                    print(line, file=out)
                print(job.describe_end(lang), file=out, flush=True)
    assert job is not None and job.exit_code is not None
    return job.exit_code


def _note_job_end(session: Session, job: Job) -> list[end_report.Event]:
    """How the job ended (``end_report.job_end``), noted as the TUI notes it: recorded, and
    how each rank's process ended given to the model; nothing when commviz stopped it.
    Returns what to print of it: all but "job ended", which the end line says."""
    if job.stopped_by is not None:
        return []
    events = end_report.job_end(session.job_tail, job.exit_code, job.describe_end())
    for key, fields in events:
        session.note_event(key, fields)
    return [(key, fields) for key, fields in events if key != "job ended"]


PREFIX = "[commviz] "


class Prefixed(io.TextIOBase):
    """A text stream that writes each complete line to ``out`` behind ``prefix``, in one
    write, so that it stays whole beside the lines of a job sharing the terminal."""

    def __init__(self, out: TextIO, prefix: str) -> None:
        self.out, self.prefix = out, prefix
        self._partial = ""

    def write(self, s: str) -> int:
        *lines, self._partial = (self._partial + s).split("\n")
        if lines:
            self.out.write("".join(f"{self.prefix}{line}\n" for line in lines))
        return len(s)

    def flush(self) -> None:
        self.out.flush()


def _await_goodbyes(session: Session, world: int, printer: _Printer) -> None:
    deadline = time.monotonic() + BYE_WAIT_S
    while time.monotonic() < deadline:
        session.poll(50)
        printer.flush()
        with session.lock:
            said_bye = sum(s.exited for s in session.model.ranks.values())
        if said_bye >= world:
            return


class _Printer:
    def __init__(self, session: Session, out: TextIO, lang: str = "en",
                 sweep_backend: str | None = None) -> None:
        self.session, self.out, self.lang = session, out, lang
        self.t0: int | None = None
        self.known: set[tuple[int, int]] = set()  # (rank, job) of the incarnations shown
        self.nccl_said = False  # the line on what NCCL reported at init is printed once
        self.sweep_backend = sweep_backend
        self.swept: list[sweep.Point] = []  # the sweep's rows printed

    def flush(self) -> None:
        model = self.session.model
        with self.session.lock:
            new, model.new_instances = model.new_instances or [], []
            found, self.session.new_findings = self.session.new_findings or [], []
            joined = [s for members in model.jobs for r, s in sorted(members.items())
                      if (r, s.job) not in self.known]
            self.known.update((s.rank, s.job) for s in joined)
        for s in joined:  # one line per rank; a job after the first is named in it
            said = i18n.ui("job rank joined" if s.job > 1 else "rank joined", self.lang).format(
                job=s.job, rank=s.rank, world=s.world, host=s.host, pid=s.pid,
                backend=s.backend, device=s.device)
            print(f"{i18n.ui('simulated', self.lang)}: {said}" if s.simulated else said,
                  file=self.out)
        if self.sweep_backend is not None:
            self._sweep_rows()
            new = []
        if new and self.t0 is None:
            print(text.instance_header(self.lang), file=self.out)
            # the first op's start, as the TUI's log counts, or the first message if that
            # came first: a short job's ops all end before its first batch arrives (0.000s)
            first = min(i.t_first_start for i in new)
            self.t0 = min(first, self.session.first_message_ns or first)
        for inst in sorted(new, key=lambda i: i.t_end):  # in time order within a round
            print(text.instance_line(inst, self.t0, text.COLUMNS, self.lang), file=self.out)
        for f in found:
            print(text.finding_line(f, self.lang), file=self.out)
        if not self.nccl_said:
            nccl = self.session.nccl.init_summary()
            if nccl is not None:
                print(nccl, file=self.out)
                self._fabric()
                self.nccl_said = True
        self.out.flush()

    def _sweep_rows(self) -> None:
        """The sizes every rank has timed since the last flush, as nccl-tests' rows."""
        model = self.session.model
        with self.session.lock:
            done = sweep.points(model.phases(0), model.world_size())
        if done and not self.swept:
            print(i18n.ui("sweep table", self.lang), file=self.out)
            print("\n".join(sweep.HEADER), file=self.out)
        for p in done[len(self.swept):]:
            print(sweep.row_line(p), file=self.out)
        self.swept = done

    def sweep_end(self) -> None:
        """nccl-tests' last line, then the alpha-beta line fitted to the rows."""
        if self.sweep_backend is None or not self.swept:
            return
        print(f"# Avg bus bandwidth    : {sweep.avg_busbw(self.swept):.4g}", file=self.out)
        print(text.sweep_fit_line(self.swept, self.sweep_backend, self.lang), file=self.out)

    def _fabric(self) -> None:
        """After NCCL's init line: the wires it named (InfiniBand or RoCE, GPUDirect RDMA)."""
        fabric = self.session.nccl.fabric()
        if fabric is not None:
            print(f"{i18n.ui('fabric', self.lang)}: {text.fabric_line(fabric, self.lang)}",
                  file=self.out)

    def findings_held(self) -> None:
        """The findings that still held at the end, causes first: a job's own output (a
        launcher's tracebacks and summary) has pushed their live lines out of sight."""
        with self.session.lock:
            found = self.session.diagnosis.findings()
        held = end_report.findings_lines(found, self.lang)
        if held:
            print("\n" + i18n.ui_n("findings at end", len(held), self.lang), file=self.out)
        for line in held:
            print(line, file=self.out)

    def summary(self) -> None:
        s = self.session.summary()
        nccl = None if self.nccl_said else self.session.nccl.init_summary(final=True)
        if nccl is not None:
            print(nccl, file=self.out)
            self._fabric()
        print(file=self.out)
        model = self.session.model
        clocks = model.clock_offsets()
        if any(not c.local for c in clocks.values()):  # several nodes, or a node elsewhere
            for host, ranks in model.nodes().items():
                print(text.node_line(clocks[host], ranks), file=self.out)
        print(text.stats_table(self.session.model.stats_table(), self.lang), file=self.out)
        late = text.late_line(self.session.diagnosis.late_arrivals(), self.lang)
        if late:
            print(f"\n{late}", file=self.out)
        dropped = sum(s["dropped_by_ranks"].values())
        counts = text.counts_line(s["records"], s["instances"], s["transfers"], s["failed"],
                                  s["unmatched"], self.lang)
        viewer = i18n.ui("counts viewer", self.lang).format(
            rejected=s["rejected_messages"], dropped=dropped)
        relays = sum(s["dropped_by_relays"].values())
        if relays:
            viewer += i18n.ui("counts relays", self.lang).format(dropped=relays)
        shed = sum(s["shed"].values())
        behind = f"; {i18n.ui_n('shed', shed, self.lang)}" if shed else ""
        print(f"\n{counts}{viewer}{behind}", file=self.out, flush=True)
