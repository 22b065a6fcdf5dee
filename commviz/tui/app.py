"""The commviz TUI: ranks, timeline, the replay of each operation, what happens inside it,
statistics, the live diagnosis, explanations and source, for a demo or a watched job.

Fed only by the session's model, read under its lock at a fixed frame rate; no widget is
mounted per event. The panels' contents are drawn by ``panels`` and the line-API widgets; how
the screen's rows are shared out is ``layout``'s, the keys are ``commands``'.
"""

from __future__ import annotations

import functools
import gc
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from rich.table import Table
from rich.text import Text
from textual import events
from textual import screen as textual_screen
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.scalar import Scalar
from textual.screen import Screen
from textual.widgets import Footer, Static

from commviz.knowledge import costmodel
from commviz.launch.job import JobAsRanks
from commviz.launch.launcher import Ranks
from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.tui import commands, layout
from commviz.tui.animation import MAX_WAITING, Animator
from commviz.tui.help import HelpScreen
from commviz.tui.node_facts import node_rows
from commviz.tui.oplog import Line, OpLog
from commviz.tui.panels import status
from commviz.tui.panels.explanation import before_first, explanation
from commviz.tui.panels.findings import findings, findings_lead
from commviz.tui.panels.inside import inside, text_rows
from commviz.tui.panels.nodes import Entry, entries, nodes_table
from commviz.tui.panels.ranks import ranks_table
from commviz.tui.panels.source import SOURCE_CONTEXT, source
from commviz.tui.panels.stats import StatsTable, stats_table
from commviz.tui.ranks_panel import FindScreen, RanksPanel
from commviz.tui.reading import ReadingScreen
from commviz.tui.sweep_plot import SweepPlot
from commviz.tui.timeline import Timeline, title
from commviz.tui.topology import Topology
from commviz.viewer import diagnose, end_report, whatif_report
from commviz.viewer import plain_text as text
from commviz.viewer.gc_policy import RareFullCollections
from commviz.viewer.playback import PlaybackControl
from commviz.viewer.session import JOB_TAIL_LINES
from commviz.viewer.source import Source
from commviz.wire.control import Controller

FRAME_S = 1 / 30
BEHIND_SHOWN_S = 1.0  # the header says how far behind the ranks the viewer is from this
# Textual paints at TEXTUAL_FPS (60 by default) and waits a slot after a paint longer than its
# period: under load the frames would come late or merge. At 120 each frame is painted within
# a few ms. Set on Textual's screen module, not in the environment (the ranks and the job would
# inherit it); a TEXTUAL_FPS of the user's wins.
PAINT_FPS = 120
if "TEXTUAL_FPS" not in os.environ:
    textual_screen.UPDATE_PERIOD = 1 / PAINT_FPS  # type: ignore[misc]
# the timeline, the ranks, the logs: each drawn every PARTS frames, in turns; the timeline's
# copy of the model is taken a frame before it is drawn, with the logs (the lightest turn)
PARTS = 3
LOG_LINES_PER_FRAME = 20  # more than this per frame is unreadable, and costs a frame
REPLAY_STEP_S = 0.3  # one schematic step of the replay; + and - change it
CLASS_END_S = 4.0  # a follower says the class ended this long before it quits
SLOW_FRAME_S = 0.5  # statistics and the teaching panels: redrawn at most twice a second
FINDINGS_LINGER_S = 10.0  # the findings panel stays this long after the last one ended
TAIL_LINES = 20  # of a job's output, printed when the screen closes
RESTART_SETTLE_S = 0.15  # after stopping the ranks: time for their last messages to land


class CommvizApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "commviz"
    # Below 120 columns the right column goes under the left one (see app.tcss).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = commands.bindings()
    # What `v` turns through below 120 columns, where one panel group fits at a time (and,
    # beside a job, its output: OUTPUT_VIEW)
    NARROW_VIEWS = ("numbers", "replay", "inside", "explain")
    OUTPUT_VIEW = "output"
    VIEW_NAMES = {"numbers": N_("view numbers"), "replay": N_("view replay"),  # the header's
                  "inside": N_("view inside"), "explain": N_("view explain"),
                  "output": N_("view output")}

    def __init__(self, session: Source, ranks: Ranks | None = None,
                 title: str | Callable[[str], str] = "",
                 clock: Any = time.monotonic, wall_ns: Any = time.time_ns,
                 lang: str = "en", controller: Controller | PlaybackControl | None = None,
                 restart: Callable[[], Ranks] | None = None, output: Any = None,
                 demo: str | None = None, events: Iterable[tuple[str, dict]] = (),
                 class_ended: Callable[[], bool] | None = None) -> None:
        """``restart`` starts the demo's ranks again (the ``r`` key); None: not a demo.
        ``output``: the job's output (``job.OutputBuffer``) when running one, shown in a panel.
        ``title``: the header's, or a function of the language that gives it.
        ``demo``: the demo's name, explained before its first operation is done.
        ``events``: lines for the viewer panel from the start (UI string key, its fields): a
        shared class's address. ``class_ended``: a class's follower, whether the teacher's
        viewer closed (then it says so, and quits CLASS_END_S later).
        """
        super().__init__()
        self._collections = RareFullCollections()  # while mounted: steadier frames
        self.session, self.ranks, self.lang, self.demo = session, ranks, lang, demo
        self.controller = controller  # a demo's step gate; None when watching a job
        # a recording played back: the controller plays, pauses and steps its clock
        self._playback = controller if isinstance(controller, PlaybackControl) else None
        self._restart = restart
        self._output, self._output_n = output, 0
        self._ticks = 0
        self._new: list = []  # completed operations not yet in the log
        self._skipped = 0     # ... and how many more there were than a frame shows
        self._ended = False
        self._simulated = False  # a rank said it is a simulator's: the header says so
        self._view = self.NARROW_VIEWS[0]
        self._narrow = False  # below the width breakpoint, as of the last resize
        self._width = 0  # the screen's width, as of the last resize
        self._titled_by = (False, False)  # the timeline's title is that of lanes by node, group
        self._title = title if callable(title) else lambda lang: title
        self._clock, self._wall_ns = clock, wall_ns
        self._shown = 0
        self._slow_at = float("-inf")
        self._height_keys: dict[str, int | None] = {}
        self._shown_panels: dict[str, Any] = {}
        self._explained: tuple | None = None  # (op, site, group, root): the teaching panels'
        self._sourced: tuple | None = None  # (the same, the source's lines of context)
        self._explanation = Text()  # the explanation panel's text, for `e`
        # (instance, step, rows) the inside panel shows: it follows the replay, in the rows
        # the panels around it leave
        self._replayed: tuple | None = None
        self._whatif: str | None = None  # the inside panel's `what if` fabric (`w`)
        self._fit: costmodel.Fit | None = None
        self._t0: int | None = None  # the log's time 0: its first operation's start
        self._seeked = False  # a playback went further on at once: replay only its latest
        self._findings_until = float("-inf")  # the findings panel is shown until then
        self._events: list[tuple[str, dict[str, Any]]] = []  # (UI string key, its fields)
        # why the app quit: (the signal it counts as, Job.stop's reason); run_app tells a job
        self.quit_cause: tuple[int, str] = (signal.SIGINT, "stop q")
        self._events.extend(events)
        self._class_ended = class_ended
        self._follower = class_ended is not None  # a student's view of a shared class

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield RanksPanel(id="ranks")
                yield Timeline(id="timeline")
                # the sweep's hundreds of calls a size are timed, not taught one by one: its
                # curves take the replay's place, whose queue keeps only the newest call
                animator = Animator(self._clock, step_s=REPLAY_STEP_S,
                                    max_waiting=1 if self.demo == "sweep" else MAX_WAITING)
                yield Topology(animator, id="topology", clock=self._clock,
                               timer=False)  # the frame timer ticks it
                if self.demo == "sweep":  # its curves in the replay's place
                    yield SweepPlot(id="sweep")
                yield OpLog(id="log")
                yield OpLog(id="output")
                yield Static(id="source")
            with Vertical(id="right"):
                yield Static(id="stats")
                with VerticalScroll(id="findings"):  # the rest of the advice: tab, arrows
                    yield Static(id="findings-text")
                yield Static(id="inside")  # the inside panel
                with VerticalScroll(id="explain-box"):  # a long one scrolls (tab, arrows)
                    yield Static(id="explain")
                yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self._titles()
        cut = self._playback.playback.cut if self._playback is not None else None
        if cut:  # a recording whose viewer was killed while writing its last line
            self._events.append((N_("recording cut"), {"line": cut[0]}))
        elif self._playback is not None and not self._playback.playback.closed:
            self._events.append((N_("recording unclosed"), {}))
        if self._playback is not None:  # a recording started further on (--from)
            self._seeked = True
            self._t0 = self._playback.playback.origin_ns  # as its place and --from count
        self.refresh_view()
        self.set_interval(FRAME_S, self._tick)
        # what exists by now lives as long as the app: out of the collector's sight, a full
        # collection takes ~10 ms rather than two frames
        gc.freeze()
        self._collections.start()

    def on_unmount(self) -> None:
        gc.unfreeze()
        self._collections.stop()

    def _titles(self) -> None:
        """The panels' titles, the footer's keys and the header's title, in the language."""
        ui = functools.partial(i18n.ui, lang=self.lang)
        simulated = f"{ui('simulated')} · " if self._simulated else ""
        self.sub_title = simulated + self._title(self.lang)
        self.query_one(Topology).lang = self.query_one(Timeline).lang = self.lang
        self.query_one("#ranks").border_title = ui("ranks").lower()
        self._fit_titles()
        self.query_one("#timeline").border_subtitle = _zoom_subtitle(
            self.query_one(Timeline).zoom_s, self.lang)
        self.query_one("#log").border_title = ui("completed operations")
        self.query_one("#stats").border_title = ui("stats title")
        self.query_one("#inside").border_title = ui("inside")
        self.query_one("#source").border_title = ui("source")
        self.query_one("#explain-box").border_title = ui("explanation")
        self.query_one("#explain-box").border_subtitle = ui("explain subtitle")
        self.query_one("#status").border_title = ui("viewer")
        self.query_one("#findings").border_title = ui("findings")
        self.query_one("#output").border_title = ui("job output")
        self.screen.set_class(self._output is not None, "-job")
        self.screen.set_class(self.demo == "sweep", "-sweep")
        if self.demo == "sweep":
            self.query_one(SweepPlot).border_title = ui("sweep title")
        self._label_keys()

    def _fit_titles(self) -> None:
        """The replay's and the timeline's titles, their shorter forms where the whole would
        be cut."""
        room = layout.title_room(self._width, self._narrow)
        whole = i18n.ui("replay", self.lang)
        self.query_one("#topology").border_title = \
            whole if layout.fits(whole, room) else i18n.ui("replay short", self.lang)
        timeline = self.query_one(Timeline)
        self._titled_by = (timeline.by_node, timeline.by_group)
        timeline.border_title = title(self.lang, room, *self._titled_by)

    def _label_keys(self) -> None:
        """The footer's keys and descriptions (Textual's palette's too), in the language;
        shorter where the whole ones do not fit (a narrow terminal, Portuguese at 120
        columns), so that every key fits in 80 columns."""
        playback = self._playback is not None
        whole = commands.footer_keys(self.lang, playback, self._works)
        palette = i18n.ui("key palette", self.lang)
        tight = self._narrow or 0 < self._width < layout.footer_width(whole, palette)
        bindings = self._bindings.key_to_bindings
        for key, group in bindings.items():
            bindings[key] = [commands.footer_label(b, tight, self.lang, playback) for b in group]
        self.refresh_bindings()

    def _works(self, action: str) -> bool | None:
        """Whether ``action`` can be taken now (``check_action``, without parameters)."""
        return self.check_action(action, ())

    def _tick(self) -> None:
        """The frame timer: the replay every frame, the other panels every PARTS frames, in
        turns, so that no frame has to paint everything at once."""
        self._ticks += 1
        if self._class_ended is not None and self._class_ended():
            self._class_ended = None
            self._events.append((N_("class ended"), {}))
            self.set_timer(CLASS_END_S, self.exit)
        self.session.frame_begins()  # the collector holds back until the frame is painted
        self.call_after_refresh(self.session.frame_ends)
        self.refresh_view(self._ticks % PARTS, staged=True)

    def refresh_view(self, part: int | None = None, staged: bool = False) -> None:
        """Draw the model: ``part`` 0 the timeline, 1 the ranks and findings, 2 the logs and
        the viewer's status, None everything; the replay and the teaching panels that follow
        it, always. ``staged`` (the frame timer's turns): the timeline draws at 0 what it
        copied at 2, the frame before."""
        if not self.is_running:  # a frame timer tick can race the shutdown (run_test, Pilot)
            return
        self._watch_ranks()
        with self.session.lock:
            model, now = self.session.model, self._clock()
            self._refresh_replay(model, now, slow=part in (None, PARTS - 1))
            timeline = self.query_one(Timeline)
            if part in (None, 0):
                if not (staged and timeline.show_staged()):
                    self._copy_timeline(model)
                # its last frame's lanes changed
                if (timeline.by_node, timeline.by_group) != self._titled_by:
                    self._fit_titles()
                if self.demo == "sweep":
                    self.query_one(SweepPlot).update_from(model, self.lang)
            if part in (None, 1):
                self._refresh_ranks(model, now)
            if part in (None, 2):
                self._refresh_logs(model)
                if staged:
                    self._copy_timeline(model, staged=True)

    def _copy_timeline(self, model: Any, staged: bool = False) -> None:
        """The timeline's copy of the model (under the session lock), drawn at once or, when
        ``staged``, at its next turn."""
        paused = self.controller is not None and self.controller.paused
        # behind the ranks, the window ends where what it has ends (the header says how far
        # behind), rather than draw seconds of nothing
        self.query_one(Timeline).update_from(model, self._wall_ns() - int(model.behind_s * 1e9),
                                             paused, self._held(), staged=staged)

    def _explain(self, model: Any, shown: Any) -> None:
        """The explanation and source panels for the op ``shown`` (None: before the first),
        redrawn only when it is another op (the source also when its room changed)."""
        paused = shown is None and self.controller is not None \
            and self.controller.state.mode == "step"
        key = (shown.op, shown.site, shown.group, shown.root) if shown else \
            ("before", paused, tuple(sorted({s.backend for s in model.ranks.values()})))
        if key != self._explained:  # another op (the same again: nothing to redraw)
            self._explained = key
            if shown is None and self.demo is not None and self.controller is not None:
                explained = before_first(model, self.demo, paused, self.lang,
                                         self._playback is not None, self._follower)
            else:
                explained = explanation(model, shown, self.lang, self.demo)
            self._show("#explain", explained, _height_key(explained))
            self._explanation = explained
            self.query_one("#explain-box").scroll_home(animate=False)  # a new one: its top
        context = self._source_context()
        if (key, context) != self._sourced:  # another op, or another room for its lines
            self._sourced = (key, context)
            code = source(shown, self.lang, context)
            self._show("#source", code, _height_key(code))

    def _refresh_replay(self, model: Any, now: float, slow: bool = True) -> None:
        """Queue what completed for the replay; the teaching panels follow it (statistics at
        most every SLOW_FRAME_S, in a ``slow`` frame: one whose part is the lightest;
        explanation and source as the replay turns to another op)."""
        topology = self.query_one(Topology)
        done = model.instances + model.transfers
        arrived = min(done - self._shown, len(model.recent))
        new = [model.recent[-i] for i in range(arrived, 0, -1)] if arrived > 0 else []
        # a playback sent further on: every operation it took in is logged, only the latest
        # replayed
        topology.update_from(model, new[-1:] if self._seeked else new, self._held())
        self._seeked = False
        topology.animator.missed(done - self._shown - arrived)
        if self.controller is not None:  # a demo waits for its replay, unless that is held
            self.controller.hold(topology.animator.busy and not topology.animator.paused
                                 and self.demo != "sweep")  # (its ranks never wait for it)
        self._new.extend(new[-LOG_LINES_PER_FRAME:])
        self._skipped += done - self._shown - min(arrived, LOG_LINES_PER_FRAME)
        self._shown = done
        frame = topology.animator.frame()
        latest = model.recent[-1] if model.recent else None
        rows = self._inside_rows()
        replayed = (id(frame.instance), frame.step, rows) if frame is not None else (rows,)
        slow_tick = slow and now - self._slow_at >= SLOW_FRAME_S or latest is None
        if slow_tick:
            self._slow_at = now
            stats = stats_table(model, self.lang)
            self._show("#stats", stats, _height_key(stats))
            self._fit = _fit(model)
        # the teaching panels follow the replay as soon as it turns to another op (a one-step
        # op is replayed in less than SLOW_FRAME_S), else the latest operation
        if frame is not None or slow_tick:
            self._explain(model, frame.instance if frame is not None else latest)
        if slow_tick or replayed != self._replayed:  # follows the replay step by step
            self._replayed = replayed
            width = self._inside_width()
            drawn = inside(model, self.lang, frame, self._fit, self.session.nccl, width, rows,
                           self.demo, self._whatif)
            # too few rows for even its smallest form (a finding's panel took them): the
            # panel gives way, so that the viewer panel below stays on screen
            crowded = rows is not None and width is not None \
                and text_rows(drawn, width) > rows
            if self.screen.has_class("-crowded") != crowded:
                self.screen.set_class(crowded, "-crowded")
            self._show("#inside", drawn, _height_key(drawn))
        # not App.sub_title: setting that reactive repaints the whole screen every frame
        paused = self.controller is not None and self.controller.paused and not self._ended
        replay = self.demo != "sweep"  # (the sweep's replay is out of sight: its curves show)
        live = " · ".join(filter(None, (f"⏸ {i18n.ui('paused', self.lang)}" if paused else "",
                                        topology.animator.state(self.lang) if replay else "")))
        lag = topology.animator.lag(self.lang) if replay else ""
        if model.behind_s >= BEHIND_SHOWN_S:  # what the screen shows is that old
            lag = " · ".join(filter(None, (i18n.ui("viewer behind", self.lang).format(
                i18n.number(f"{model.behind_s:.1f}", self.lang)), lag)))
        view = f"[{i18n.ui(self.VIEW_NAMES[self._view], self.lang)} · v] " \
            if self.screen.has_class("-narrow") else ""  # which panels `v` shows now
        header = layout.fit_header(f"{view}{self.title} — ", self.sub_title,
                                   f" · {live}" if live else "",
                                   self.query_one("#header").size.width) \
            + (f" · {lag}" if lag else "")
        self._show("#header", Text(header, style="bold"), 0)

    def _refresh_ranks(self, model: Any, now: float) -> None:
        """The ranks and the live findings."""
        live = self._held()
        flagged = {r: f for f in live for r in f.ranks}
        panel = self.query_one("#ranks", RanksPanel)
        width = panel.content_region.width or None  # None: not laid out
        nodes = model.nodes()
        # by node once the ranks' rows (and their nodes' lines) would not fit the screen
        by_node = len(nodes) > 1 and len(model.ranks) + len(nodes) > self.size.height
        if by_node != panel.can_focus:
            panel.by_node(by_node)
            if by_node and self.focused is None:  # ↑↓ and enter choose a node at once
                panel.focus()
        if by_node:
            rows = node_rows(model, model.clock(), self._wall_ns(), flagged, self._late())
            panel.every = entries(rows, panel.opened, panel.fold_open)
            table = functools.partial(
                nodes_table, rows, panel.every, model, model.clock(), self._wall_ns(),
                flagged, self.lang, width, opened=panel.opened, fold_open=panel.fold_open,
                cursor=panel.cursor(), highlight=panel.has_focus)
        else:
            table = functools.partial(ranks_table, model, model.clock(), self._wall_ns(),
                                      flagged, self.lang, width, late=self._late())
        # rows beyond the screen's only say there are more: no need to build a thousand
        ranks = table(self.size.height + 2)
        if by_node:
            ranks, panel.shown = ranks
        rows = ranks.plain.count("\n") + 1
        self._fit_left(rows)  # from every row it has: cut, it would seem to need fewer
        most = self._max_rows(panel)
        if by_node:  # the lines around the one chosen, as many as the panel may grow to
            cut = int(most) if rows > most else None
        else:
            cut = layout.ranks_rows(rows, panel.content_region.height, most)
        if cut is not None:  # by rank, its last row names the ranks left out
            ranks = table(cut)
            if by_node:
                ranks, panel.shown = ranks
        self._show("#ranks", ranks, ranks.plain.count("\n"))
        # the panel comes up when something goes wrong, and stays a while after it ended
        # (with what ended): a finding that comes and goes does not make the screen jump
        if live:
            self._findings_until = now + FINDINGS_LINGER_S
        shown = now < self._findings_until
        if self.screen.has_class("-findings") != shown:  # the panel's display, by app.tcss
            self.screen.set_class(shown, "-findings")
        if shown:
            said = findings(live, self.lang, self._history())
            self._show("#findings-text", said, _height_key(said))
            self._fit_findings(findings_lead(live, self.lang))

    def _held(self) -> list[diagnose.Finding]:
        """The findings that hold now, by the session's diagnosis, oldest first (none
        without one). Under the session lock."""
        diagnosis = self.session.diagnosis
        return diagnosis.findings() if diagnosis is not None else []

    def _late(self) -> list[tuple[int, diagnose.Lateness]]:
        """The ranks the others waited for at collectives, by the session's diagnosis (none
        without one). Under the session lock."""
        diagnosis = self.session.diagnosis
        return diagnosis.late_arrivals() if diagnosis is not None else []

    def _history(self) -> Iterable[diagnose.Finding]:
        """The findings the session's diagnosis made and resolved so far, oldest first."""
        diagnosis = self.session.diagnosis
        return diagnosis.history if diagnosis is not None else ()

    @staticmethod
    def _max_rows(panel: Any) -> float:
        """The rows of text ``panel`` may grow to: its max-height (the stylesheet's share of
        its container, or the cap `_fit_left` set) less its border; unbounded without one."""
        scalar = panel.styles.max_height
        if scalar is None or panel.parent is None:
            return float("inf")
        cells = scalar.resolve(panel.parent.size, panel.app.size)
        return int(cells) - panel.styles.gutter.height

    def _fit_findings(self, lead: Text) -> None:
        """The findings panel grows to show its lead whole (``layout.findings_rows``); what is
        left below scrolls with ↑↓ once it has the focus (tab), as its subtitle says."""
        panel = self.query_one("#findings", VerticalScroll)
        width = self.query_one("#findings-text").content_region.width  # a scrollbar's less
        if width <= 0:  # just shown, not laid out yet: its least, until the next frame
            panel.styles.max_height = layout.FINDINGS_ROWS[self._narrow]
            return
        lead = lead.copy()
        lead.rstrip()  # no row for its last newline
        rows = len(lead.wrap(self.console, width)) if lead else 0
        kept = 0
        if self._narrow:  # stacked: the ranks the finding blames keep their rows above it
            ranks = self.query_one("#ranks")
            kept = (self.query_one("#status").outer_size.height + ranks.styles.gutter.height
                    + ranks.get_content_height(self.size, self.size, ranks.content_region.width))
        panel.styles.max_height = layout.findings_rows(rows, panel.styles.gutter.height,
                                                       self.size.height, self._narrow, kept)
        more = N_("findings more here") if panel.has_focus else N_("findings more")
        panel.border_subtitle = i18n.ui(more, self.lang) if panel.max_scroll_y > 0 else ""

    def _log_line(self, inst: Any, width: int | None) -> str:
        return text.instance_line(inst, self._t0, text.LOG_COLUMNS, self.lang, width)

    def _skipped_line(self, skipped: int, width: int | None) -> str:
        return i18n.ui_n("more operations", skipped, self.lang)

    def _refresh_logs(self, model: Any) -> None:
        """The operations log, the job's output and the viewer panel."""
        if not self._simulated and any(s.simulated for s in model.ranks.values()):
            self._simulated = True
            self._titles()
        new, self._new = self._new, []
        if new and self._t0 is None:
            self._t0 = new[0].t_first_start
        # each line written when drawn, for the log's width (a narrow one gets shorter lines)
        # and in the screen's language of the moment
        lines: list[Line] = [functools.partial(self._log_line, inst) for inst in new]
        if self._skipped > 0:  # faster than anyone can read: say how many were summed up
            lines.insert(0, functools.partial(self._skipped_line, self._skipped))
            self._skipped = 0
        self.query_one("#log", OpLog).write(*lines)
        if self._output is not None:
            fresh = self._output.since(self._output_n)
            if fresh:
                self._output_n = fresh[-1].n
                self.query_one("#output", OpLog).write(*(text.cell_safe(line.text)
                                                         for line in fresh))
        lang = self.lang
        said = status.counts(model, self.session.addr, self.session.rejected,
                             len(self._held()), sum(f.unresolved for f in self._history()),
                             self._ended, self._playback is not None, lang,
                             shed=self.session.shed, relays=self.session.dropped_by_relays,
                             following=self._follower)
        told = status.events(self._events, lang)
        # last, under the events: what the keys do now
        control = self._control_line() if self.controller is not None else ""
        shown = Text("\n").join([Text(said), *told, *([Text(control)] if control else [])])
        width = self.query_one("#status").content_region.width
        if width > 0:
            shown = status.fitted(said, told, control, width, self._status_room(),
                                  self.console)
        self._show("#status", shown, _height_key(shown))  # its lines wrap: a longer one may too

    def _inside_rows(self) -> int | None:
        """The rows the inside panel may take on a wide terminal (``layout.inside_rows``);
        None where it has the screen (narrow) or before a layout."""
        left = None if self._narrow else self._right_rows_left(("stats", "findings"))
        return layout.inside_rows(left, self.query_one("#status").styles.gutter.height,
                                  self.query_one("#inside").styles.gutter.height)

    def _fit_left(self, ranks_rows: int) -> None:
        """The left column's panels in its rows (``layout.fit_left``): the operations log
        hidden (-tight), the timeline and the ranks capped, where many ranks need it."""
        left = self.query_one("#left")
        ranks, timeline = self.query_one("#ranks"), self.query_one(Timeline)
        fit = layout.fit_left(
            left.size.height, ranks_rows + ranks.styles.gutter.height,
            timeline.get_content_height(self.size, self.size, left.size.width)
            + timeline.styles.gutter.height,
            self._least_rows("#topology"), self._least_rows("#log"),
            self.query_one("#source").styles.gutter.height,
            self.query_one("#output").outer_size.height, self._narrow)
        if fit.tight is not None and self.screen.has_class("-tight") != fit.tight:
            self.screen.set_class(fit.tight, "-tight")
        for panel, cap in ((timeline, fit.timeline_cap), (ranks, fit.ranks_cap)):
            if panel.styles.inline.max_height != (None if cap is None
                                                   else Scalar.from_number(cap)):
                panel.styles.max_height = cap  # None: the stylesheet's

    def _source_context(self) -> int:
        """Lines of the program to show around its call (``layout.source_context``)."""
        left, panel = self.query_one("#left"), self.query_one("#source")
        taken = sum(child.outer_size.height for child in left.children
                    if child.display and child.id not in ("topology", "source"))
        return layout.source_context(left.size.height, taken, self._least_rows("#topology"),
                                     panel.styles.gutter.height, SOURCE_CONTEXT,
                                     self._narrow)

    def _inside_width(self) -> int | None:
        """The inside panel's inner width, also while it gives way (hidden: no region);
        None before a layout."""
        panel = self.query_one("#inside")
        return layout.inside_width(panel.content_region.width,
                                   self.query_one("#right").size.width,
                                   panel.styles.gutter.width)

    def _right_rows_left(self, taken_by: tuple[str, ...]) -> int | None:
        """The right column's rows less those of the panels ``taken_by`` (ids, where shown)
        and the explanation's least; None before the screen is laid out."""
        right = self.query_one("#right")
        taken = sum(child.outer_size.height for child in right.children
                    if child.display and child.id in taken_by)
        return layout.right_rows_left(right.size.height, taken,
                                      self._least_rows("#explain-box"))

    def _least_rows(self, selector: str) -> int:
        """A panel's least rows by the stylesheet, its border included (border-box): its
        min-height, else a height in cells; 0 without either."""
        styles = self.query_one(selector).styles
        rows = styles.min_height or styles.height
        return int(rows.value) if rows is not None and rows.is_cells else 0

    def _status_shows_whole(self, event: str) -> bool:
        """The viewer panel is on screen and shows ``event`` whole: no toast need repeat it
        over the panel's bottom."""
        panel = self.query_one("#status")
        width = panel.content_region.width
        return (panel.display and panel.region.height > 0 and width > 0
                and len(Text(event).wrap(self.console, width)) <= layout.EVENT_ROWS)

    def _status_room(self) -> int | None:
        """The viewer panel's rows (``layout.status_room``)."""
        narrow = self.screen.has_class("-narrow")
        left = None if narrow else self._right_rows_left(("stats", "findings", "inside"))
        return layout.status_room(narrow, left, self.query_one("#status").styles.gutter.height)

    def _show(self, selector: str, renderable: Any, height_key: int | None) -> None:
        """Update a panel; lay the screen out again only when its height may have changed
        (a full layout every frame is most of a frame's cost under load)."""
        last = self._shown_panels.get(selector)
        if isinstance(renderable, (str, Text)) and last == renderable:
            return  # unchanged: not even a repaint
        self._shown_panels[selector] = renderable
        relayout = self._height_keys.get(selector) != height_key or height_key is None
        self._height_keys[selector] = height_key
        self.query_one(selector, Static).update(renderable, layout=relayout)

    @property
    def _recording(self) -> bool:
        """Whether the session records: a recording holds one run, so no restart."""
        return self.session.recorder is not None

    def _control_line(self) -> str:
        """The ranks' state (playing, paused), and the replay's when it is held apart."""
        held = f" · {i18n.ui('replay held', self.lang)}" \
            if self.query_one(Topology).animator.paused else ""
        if self._playback is not None:
            return status.playback_line(self._playback, held, self.lang, self._follower)
        return status.demo_line(self.controller.state,  # type: ignore[union-attr]
                                self._ended, bool(self.check_action("restart", ())), held,
                                self.lang)

    def _event(self, key: str, fields: dict[str, Any]) -> str:
        return text.event_line(key, fields, self.lang)

    def _watch_ranks(self) -> None:
        if self._playback is not None:  # what the launcher told, as recorded
            for key, fields in self._playback.playback.take_events():
                self._ranks_event(key, fields)
            if self._playback.ended != self._ended:
                self._ended = self._playback.ended  # the recording is over: pause and n rest
                self.refresh_bindings()
        if self.ranks is None:
            return
        for rp in self.ranks.poll():
            rank = {"rank": rp.rank} if type(rp.rank) is int else {}  # a job's has none
            if rp.returncode:
                self._ranks_event("rank failed", {"who": rp.who, "code": rp.returncode,
                                                  "line": text.cell_safe(rp.error_line()),
                                                  **rank})
            elif self._output is None:  # a job's end has its own line, below
                self._ranks_event("rank finished", {"who": rp.who, "code": 0, **rank})
        if self.ranks.failed() and self.ranks.running():
            self._ranks_event(N_("stopping others"), {})
            self.ranks.stop()
        if not self._ended and not self.ranks.running():
            self._ended = True  # the screen stays, to be read: q quits
            if self._output is not None:
                tail = [line.text for line in self._output.tail(JOB_TAIL_LINES)]
                for key, fields in end_report.rank_ends(tail):  # torchrun's summary
                    self._ranks_event(key, fields)
                self._ranks_event(N_("job ended"), {})
            self.refresh_bindings()  # pause and step have nothing left to hold

    def _ranks_event(self, key: str, fields: dict[str, Any]) -> None:
        """What the launcher tells of the ranks' processes: listed in the viewer panel,
        recorded; the first failure also toasted when the panel cannot show it whole (the
        failures after it are mostly its consequences: peers that lost it)."""
        first = key == "rank failed" and all(k != key for k, _ in self._events)
        self._events.append((key, fields))
        self.session.note_event(key, fields)  # recorded; how a rank ended, to the model
        if first and not self._status_shows_whole(self._event(key, fields)):
            self.notify(self._event(key, fields), severity="error", timeout=10, markup=False)

    async def action_quit(self, why: str = "stop q") -> None:
        """``why``: the UI string naming the key, for the job's end line (Job.stop)."""
        self.quit_cause = (signal.SIGINT, why)
        self.exit()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Pause and step exist only for a demo, whose ranks wait at a real step barrier, and
        a recording; a class's student has the teacher's (who drives them for everyone)."""
        if action in ("toggle_play", "step"):
            return self.controller is not None and not self._ended and not self._follower
        if action in ("play_faster", "play_slower", "next_finding"):  # a recording's clock
            return self._playback is not None and not self._follower
        if action == "restart":  # a recording holds one run: none while recording
            return self._restart is not None and not self._recording
        if action == "next_view":
            return self._narrow
        if action in ("zoom_in", "zoom_out", "group_lanes"):  # where the timeline is on screen
            return not self._narrow or self._view == "replay"
        if action == "find":  # the ranks panel by node
            return self.query_one("#ranks", RanksPanel).can_focus
        return True

    def action_toggle_play(self) -> None:
        if self.controller is not None:
            self.controller.toggle()
            self.refresh_view()

    def action_step(self) -> None:
        if self.controller is not None:
            self.controller.step()
            self.refresh_view()

    def action_next_finding(self) -> None:
        if self._playback is None:
            return
        if self._playback.playback.to_next_finding():
            self._seeked = True
            self.refresh_view()
        else:
            self.notify(i18n.ui("no later finding", self.lang), timeout=4)

    def action_play_faster(self) -> None:
        if self._playback is not None:
            self._playback.faster()
            self.refresh_view(2)

    def action_play_slower(self) -> None:
        if self._playback is not None:
            self._playback.slower()
            self.refresh_view(2)

    def action_restart(self) -> None:
        """Stop the demo's ranks and start new ones on an empty screen (the key works only
        where there is a demo to restart: ``check_action``)."""
        if self.ranks is not None:
            self.ranks.stop()
            self.ranks.cleanup_logs()
        time.sleep(RESTART_SETTLE_S)  # the old ranks' last messages: drained, then dropped
        if self.controller is not None:
            self.controller.restart()
        self.session.reset()
        self._shown, self._events = 0, [(N_("restarted"), {})]
        self._t0 = self._playback.playback.origin_ns if self._playback is not None else None
        self._findings_until = float("-inf")  # the old run's findings: gone with it
        self._new, self._skipped = [], 0
        self._explained = self._replayed = self._sourced = None
        self._slow_at = float("-inf")
        self.query_one(Topology).restart()
        self.query_one("#log", OpLog).clear()
        self.ranks = self._restart()
        self._ended = False
        self.refresh_bindings()
        self.refresh_view()

    @property
    def _views(self) -> tuple[str, ...]:
        return self.NARROW_VIEWS + ((self.OUTPUT_VIEW,) if self._output is not None else ())

    def action_next_view(self) -> None:
        """Narrow terminals: the next group of panels (numbers, replay, inside, explanation
        and source; a job's output)."""
        views = self._views
        self._view = views[(views.index(self._view) + 1) % len(views)]
        for view in views:
            self.screen.set_class(view == self._view and view != views[0], f"-view-{view}")
        self.refresh_bindings()  # z zooms the timeline where it shows
        self.refresh_view()  # the header names the view

    def on_resize(self, event: events.Resize) -> None:
        """`v` exists below the breakpoint only; there the footer packs shorter labels closer
        and leaves out the command palette's key."""
        narrow = event.size.width < self.HORIZONTAL_BREAKPOINTS[1][0]  # the screen's: later
        footer = self.query_one(Footer)
        footer.compact, footer.show_command_palette = narrow, not narrow
        self._narrow, self._width = narrow, event.size.width  # self.size: not yet
        self._label_keys()  # whether the whole descriptions fit
        self._fit_titles()

    def action_faster(self) -> None:
        self.query_one(Topology).faster()

    def action_slower(self) -> None:
        self.query_one(Topology).slower()

    def action_zoom_in(self) -> None:
        self._zoom(self.query_one(Timeline).zoom_in())

    def action_zoom_out(self) -> None:
        self._zoom(self.query_one(Timeline).zoom_out())

    def action_group_lanes(self) -> None:
        """The timeline by group, or back by node, where a lane per rank does not fit; where
        it does, it says so."""
        timeline = self.query_one(Timeline)
        if timeline.ranks_fit:
            self.notify(i18n.ui("lanes per rank", self.lang), timeout=4)
            return
        timeline.group_lanes = not timeline.group_lanes
        self.refresh_view(0)

    def _zoom(self, zoom_s: float | None) -> None:
        """The timeline's new window: in its subtitle from the next frame on."""
        self.query_one("#timeline").border_subtitle = _zoom_subtitle(zoom_s, self.lang)
        self.refresh_view(0)

    def action_replay_pause(self) -> None:
        """Hold the animation only: a training job is never paused, only its display."""
        self.query_one(Topology).toggle_pause()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's commands, then every commviz action this session can take."""
        for command in super().get_system_commands(screen):
            words = i18n.textual_command(command.help, self.lang)  # None: as Textual has it
            yield command if words is None else \
                command._replace(title=words[0], help=words[1])
        playback = self._playback is not None
        for name, help_text, action in commands.palette(self.lang, playback, self._works):
            yield SystemCommand(name, help_text, getattr(self, f"action_{action}"))

    def _binding(self, key_id: str) -> Binding:
        """A key's binding as the footer has it now (in the language, perhaps shortened)."""
        return next(b for group in self._bindings.key_to_bindings.values() for b in group
                    if b.id == key_id)

    def _help_rows(self) -> list[tuple[str, str]]:
        return commands.help_rows(self.lang, self._playback is not None, self._works)

    def action_command_palette(self) -> None:
        """Textual's palette, its search box in the language."""
        if self.use_command_palette and not CommandPalette.is_open(self):
            self.push_screen(CommandPalette(id="--command-palette",
                                            placeholder=i18n.ui("palette search", self.lang)))

    def action_switch_lang(self) -> None:
        """The next language (``i18n.next_lang``), for every panel at once."""
        self.lang = i18n.next_lang(self.lang)
        self.query_one("#log", OpLog).redraw()  # the lines already there, in the new language
        self._titles()
        self._explained = self._replayed = self._sourced = None
        self._slow_at = float("-inf")
        self.refresh_view()

    def action_whatif(self) -> None:
        """`w`: the inside panel's `what if` line on the next fabric, then none."""
        self._whatif = whatif_report.next_fabric(self._whatif)
        self._replayed = None
        self.refresh_view()

    def action_find(self) -> None:
        """`/`: a rank or a node to show in the ranks panel by node."""
        panel = self.query_one("#ranks", RanksPanel)
        if not panel.can_focus:
            return
        with self.session.lock:
            nodes = self.session.model.nodes()

        def found(entry: Entry | None) -> None:
            if entry is not None:
                panel.jump(entry)

        self.push_screen(FindScreen(nodes, self.lang), found)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self._help_rows(), i18n.ui("help", self.lang),
                                    i18n.ui("close", self.lang)))

    def action_read(self) -> None:
        """The explanation panel's text full screen: at 120x40 its box shows a few lines."""
        ui = functools.partial(i18n.ui, lang=self.lang)
        self.push_screen(ReadingScreen(self._explanation.copy(), ui("explanation"),
                                       ui("reading keys")))


def _fit(model: Any) -> costmodel.Fit | None:
    """The run's cost model, fitted to its statistics, for the backend its ranks use."""
    backend = model.backend()
    return None if backend is None else costmodel.fit_stats(model.stats_table(), backend)


def _zoom_subtitle(zoom_s: float | None, lang: str) -> str:
    """'zoom: auto · z/Z', or the window zoomed to ('zoom: 50 ms · z/Z')."""
    window = i18n.ui("zoom auto", lang) if zoom_s is None else \
        i18n.number(text.duration(zoom_s * 1e9), lang)
    return i18n.ui("zoom", lang).format(window=window)


def _height_key(renderable: Any) -> int | None:
    """Something that changes when a panel's natural height may change; None: unknown."""
    if isinstance(renderable, (Table, StatsTable)):
        return renderable.row_count
    if isinstance(renderable, Text):  # its lines' lengths: how it wraps, where it does
        return hash(tuple(map(len, renderable.plain.split("\n"))))
    return None


def run_app(session: Source, ranks: Ranks | None, title: str | Callable[[str], str], lang: str,
            controller: Controller | PlaybackControl | None = None,
            restart: Callable[[], Ranks] | None = None, output: Any = None,
            demo: str | None = None, out: TextIO | None = None,
            wall_ns: Callable[[], int] = time.time_ns, events: Iterable[tuple[str, dict]] = (),
            class_ended: Callable[[], bool] | None = None) -> int:
    """Run the TUI until quit or SIGTERM; always stops the ranks and closes the session (the
    caller closes the controller, after the ranks are stopped). Then says how the run ended
    on ``out`` (stdout; a job's run prefixes commviz's lines there): the failures, the
    findings still holding, a job's last lines of ``output`` (written to stdout as the job
    wrote them), where the logs of a failed run are kept and, last, how a job ended.
    ``wall_ns``: the clock the ranks' times are read against (a recording's, played back)."""
    app = CommvizApp(session, ranks, title, lang=lang, controller=controller, restart=restart,
                     output=output, demo=demo, wall_ns=wall_ns, events=events,
                     class_ended=class_ended)
    session.start()

    def on_sigterm(signo: int, frame: Any) -> None:
        app.quit_cause = (signal.SIGTERM, "stop signal")
        app.exit()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        app.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        ranks = app.ranks  # a restart replaced them
        _end_of_run(app, session, ranks, output, out or sys.stdout)
    if app.return_code:  # the screen itself failed (Textual printed why): no success
        return app.return_code
    return 1 if ranks is not None and ranks.failed() else 0


def _end_of_run(app: CommvizApp, session: Source, ranks: Ranks | None, output: Any,
                out: TextIO) -> None:
    """Stop the ranks, close the session, then say how the run ended (``run_app``), in the
    language the screen had last."""
    ended: list[int] = []
    if isinstance(ranks, JobAsRanks):
        ranks.cause = app.quit_cause
    lang = app.lang  # l may have switched it
    if ranks is not None:
        ranks.stop()
        failures = [("rank failed", {"who": rp.who, "code": rp.returncode,
                                     "line": rp.error_line()}) for rp in ranks.failed()]
        for line in end_report.event_lines(failures, lang):
            print(line, file=out)
        ended = [rp.rank for rp in getattr(ranks, "procs", ()) if not rp.stopped]
    session.close(ended=ended)
    diagnosis = session.diagnosis
    _print_findings(diagnosis.findings() if diagnosis is not None else [], out, lang)
    late = text.late_line(diagnosis.late_arrivals() if diagnosis is not None else [], lang)
    if late:
        print(late, file=out)
    if output is not None and ranks is not None:  # a job's (not a recording's)
        _print_tail(output, out, lang)
    if ranks is not None:
        if ranks.failed():  # last: the one line to copy, not scrolled away by the tail
            print(i18n.ui(ranks.logs, lang).format(dir=ranks.logdir), file=out)
        else:
            ranks.cleanup_logs()
    if isinstance(ranks, JobAsRanks):  # how it ended
        print(ranks.job.describe_end(lang), file=out)
    out.flush()


def _print_findings(findings: Iterable[diagnose.Finding], out: TextIO, lang: str) -> None:
    """The findings that still held when the screen closed (``end_report.findings_lines``)."""
    for line in end_report.findings_lines(findings, lang):
        print(line, file=out)


def _print_tail(output: Any, out: TextIO, lang: str) -> None:
    """The job's last lines (``output``, a job.OutputBuffer) under a line of ``out``'s; of a
    job commviz stopped, those before the stop, and how many came after."""
    tail, after = output.closing(TAIL_LINES)
    stopped = output.stopped_at is not None
    if tail:
        head = N_("job tail before stop") if stopped else N_("job tail")
        print(i18n.ui_n(head, len(tail), lang), file=out, flush=True)
        sys.stdout.write("".join(f"{line.text}\n" for line in tail))
        sys.stdout.flush()
    if after:
        print(i18n.ui_n("job tail left out", after, lang), file=out)
