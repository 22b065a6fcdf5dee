"""The animation clock and queue behind the topology view: no Textual, no Rich.

A collective takes a millisecond; a person needs about half a second to follow one step of
it. So every completed instance the viewer sees is queued and replayed at human speed, one
schedule step per ``step_s`` seconds. When the job outruns the display the queue is bounded,
but nothing disappears silently: runs of identical instances collapse into one animation
marked "×N", and when even that is not enough the oldest waiting entries are skipped and
counted. The queue also has a budget of time (``QUEUE_BUDGET_S`` at the speed shown): beyond
it the oldest waiting entries are skipped too, the newest always kept, so the display never
promises hours. ``enqueued == shown + skipped + waiting`` holds at every moment.

A group of more than ``REPLAY_RANKS_MAX`` ranks is replayed as nodes
(``knowledge/hierarchy``): its phases compressed into at most ``DRAWN_STEPS_MAX`` drawn steps,
each standing for a counted run of real steps, so that it replays within 10 s at the default
speed.

Point-to-point transfers arrive pair by pair (each rank's records come in its own batches),
so each waits ``GATHER_S`` for the rest of its round before it is drawn.

Time comes from an injected clock and frames are computed from elapsed time, never from how
often ``frame`` is called, so a slow terminal shows the same animation with fewer frames.
"""

from __future__ import annotations

import collections
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from commviz.knowledge import hierarchy, schedules
from commviz.knowledge.hierarchy import Scaled
from commviz.knowledge.schedules import Schedule, Transfer
from commviz.text import i18n, schedule_notes
from commviz.viewer.model import Instance, Model
from commviz.viewer.plain_text import human_bytes
from commviz.wire import protocol

#: Seconds per step the speed control moves between, each a doubling of the previous.
SPEEDS = (0.15, 0.3, 0.6, 1.2, 2.4)
#: Entries (an entry may stand for a "×N" run) that may wait before the queue collapses runs:
#: room for one step of the objects demo (five object collectives and their inner calls),
#: which a demo that waits for its replay queues at once.
MAX_WAITING = 16
#: Seconds a p2p transfer waits before it is drawn, for the other transfers of its round to
#: arrive: each rank sends its records every 50 ms, so a ring step's four transfers reach the
#: viewer over up to about two of those ticks, one rank's batch after another.
GATHER_S = 0.2
REPLAY_RANKS_MAX = 64  # larger groups are replayed as nodes, compressed (plan)
#: Seconds of replay, at the speed shown, that may wait: beyond, the oldest waiting are
#: skipped. Room for one step of the objects demo at the slowest speed (about 40 steps); at
#: 1,024 ranks, about 13 operations of 30 drawn steps at the default speed.
QUEUE_BUDGET_S = 120.0


@dataclass(frozen=True)
class AnimFrame:
    """What to draw now. ``transfers`` use global ranks (the instance's group mapped)."""

    instance: Instance
    schedule: Schedule | Scaled | None  # Scaled: a large group, drawn as nodes
    count: int            # instances this animation stands for (a collapsed run: > 1)
    step: int             # index of the step shown, 0-based
    steps: int            # steps in the animation (at least 1)
    step_label: str       # the schedule's label for the step ("RS1", "tree 0", "send")
    progress: float       # 0..1 within the step
    label: str            # the title: op, count, schematic or not, step k of n
    transfers: tuple[Transfer, ...]
    done: bool            # the queue is empty: the last step is held, complete
    round: bool = False   # p2p transfers drawn together as one round (_Entry.round)
    # p2p transfers drawn together: each one's instance, in the order of ``transfers``
    members: tuple[Instance, ...] = ()

    @property
    def p2p(self) -> bool:
        return self.instance.op in protocol.P2P


@dataclass
class _Entry:
    instance: Instance
    schedule: Schedule | Scaled | None
    count: int = 1  # times it is repeated: a collapsed run of identical entries ("×N")
    # p2p transfers drawn in the same frame as ``instance``: those of its round (below), or
    # those that were in flight together with it, as the backend moved them
    together: list[Instance] = field(default_factory=list)
    # p2p: the next transfer of each pair, gathered while they arrive (a hand-written ring's
    # step k is the k-th transfer on each of its pairs); drawn as one round if they close,
    # every rank sending as many as it receives, else taken apart
    gathering: bool = False
    since: float = 0.0  # when its first transfer arrived

    @property
    def key(self) -> tuple:
        inst = self.instance
        if self.together:
            return (inst.op, tuple(sorted(i.group for i in self.members)), inst.size)
        return (inst.op, inst.group, inst.size)

    @property
    def members(self) -> list[Instance]:
        return [self.instance, *self.together]

    @property
    def instances(self) -> int:
        """Instances this entry stands for."""
        return self.count * (1 + len(self.together))

    @property
    def steps(self) -> int:
        return max(1, len(self.schedule.steps)) if self.schedule is not None else 1

    @property
    def round(self) -> bool:
        """Its transfers close a round: every rank among them sends as many as it receives
        (a ring's step, a pairwise exchange, a batch to both neighbours), so they are drawn
        together."""
        senders = [i.group[0] for i in self.members]
        return len(senders) > 1 and sorted(senders) == sorted(i.group[1] for i in self.members)

    def gathers(self, inst: Instance) -> bool:
        """Whether p2p transfer ``inst`` may join this gathering round: the same op, on a pair
        not in it yet (a batch to both neighbours is one round). Its number need not be the
        round's: a pair used before (the tour's sends from rank 0, then its ring) counts on
        from there, so the first round still gathering without the pair takes it."""
        return (self.gathering and inst.op == self.instance.op
                and inst.group not in {i.group for i in self.members})

    def joins(self, inst: Instance) -> bool:
        """Whether p2p transfer ``inst`` belongs with this entry's: the same op, moving data
        at the same time, between a pair of ranks not in it yet (the next step of a ring reuses
        the pairs: it is the next frame).

        Data moves only once both sides are inside, from the later start until the receive
        ends: a receive posted early, or a sender returning late, does not make a chain of
        dependent sends (a pipeline) simultaneous."""
        if self.schedule is not None or self.count > 1 or self.instance.op not in protocol.P2P \
                or inst.op != self.instance.op:
            return False
        members = self.members
        return (inst.group not in {i.group for i in members}
                and inst.t_last_start < max(_arrived(i) for i in members)
                and _arrived(inst) > min(i.t_last_start for i in members))


def _arrived(transfer: Instance) -> int:
    """When a transfer's data had arrived: its receive's end (the end, if not known)."""
    return transfer.t_end if transfer.t_recv_end is None else transfer.t_recv_end


class Animator:
    """Replays completed instances one schedule step per ``step_s`` seconds, in order.

    The app calls ``enqueue`` for each new instance and ``frame`` whenever it draws.
    """

    def __init__(self, clock: Callable[[], float], step_s: float = 0.6,
                 max_waiting: int = MAX_WAITING) -> None:
        self.clock = clock
        self.step_s = step_s
        self.max_waiting = max(1, max_waiting)
        self.enqueued = 0   # instances ever enqueued
        self.shown = 0      # instances whose animation has started (a "×N" counts N)
        self.skipped = 0    # instances dropped from a full queue, never animated
        self._pending: collections.deque[_Entry] = collections.deque()
        self._current: _Entry | None = None
        self._pos = 0.0     # steps of the current entry played so far (fractional)
        self._last = clock()
        self._paused = False

    # ---- feeding ---------------------------------------------------------------------
    def enqueue(self, instance: Instance, schedule: Schedule | Scaled | None) -> None:
        """Queue one completed instance; ``schedule`` None draws it as a single hop (a p2p
        transfer: with the rest of its round, or with those in flight with it)."""
        now = self.clock()
        self._advance(now)
        self.enqueued += 1
        p2p = schedule is None and instance.op in protocol.P2P
        if p2p:
            gathering = next((e for e in self._pending if e.gathers(instance)), None)
            if gathering is not None:
                gathering.together.append(instance)
                return
        entry = _Entry(instance, schedule, gathering=p2p, since=now)
        if not self._pending and (self._current is None or self._finished()) and not p2p:
            self._start(entry, now)
            return
        self._pending.append(entry)
        if len(self._pending) > self.max_waiting:
            self._collapse()
            while len(self._pending) > self.max_waiting:
                self.skipped += self._pending.popleft().instances
        self._keep_to_budget()

    def _keep_to_budget(self) -> None:
        """Beyond QUEUE_BUDGET_S of replay waiting, collapse runs, then skip the oldest
        waiting (counted), keeping the newest: the display stays near the job."""
        if self._waiting_s() <= QUEUE_BUDGET_S:
            return
        self._collapse()
        while len(self._pending) > 1 and self._waiting_s() > QUEUE_BUDGET_S:
            self.skipped += self._pending.popleft().instances

    def _waiting_s(self) -> float:
        return sum(e.steps for e in self._pending) * self.step_s

    def missed(self, count: int) -> None:
        """Count instances the viewer saw complete but could not hand over (they had left
        its bounded history): skipped, and said so, rather than dropped silently."""
        self.enqueued += count
        self.skipped += count

    def _collapse(self) -> None:
        """Merge runs of waiting entries with the same (op, group, size) into one ×N (the
        first instance of the run stands for it)."""
        merged: list[_Entry] = []
        for entry in self._pending:
            if merged and merged[-1].key == entry.key and not entry.gathering \
                    and not merged[-1].gathering:
                merged[-1].count += entry.count
            else:
                merged.append(entry)
        self._pending.clear()
        self._pending.extend(merged)

    # ---- speed and pause -----------------------------------------------------------
    def faster(self) -> float:
        """Halve the step duration (down to the fastest speed); returns it."""
        return self._set_speed(max((s for s in SPEEDS if s < self.step_s - 1e-9),
                                   default=SPEEDS[0]))

    def slower(self) -> float:
        """Double the step duration (up to the slowest speed); returns it."""
        return self._set_speed(min((s for s in SPEEDS if s > self.step_s + 1e-9),
                                   default=SPEEDS[-1]))

    def _set_speed(self, step_s: float) -> float:
        self._advance(self.clock())  # what was played so far stays played
        self.step_s = step_s
        self._keep_to_budget()  # slower: what waits takes longer
        return step_s

    @property
    def paused(self) -> bool:
        return self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._advance(self.clock())
        self._paused = value

    # ---- state -------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Something is animating or waiting (the widget redraws only then)."""
        return bool(self._pending) or self._current is not None and not self._finished()

    @property
    def waiting(self) -> int:
        """Instances queued behind the one shown."""
        return sum(e.instances for e in self._pending)

    @property
    def lag_s(self) -> float:
        """Seconds, at the current speed, until the display has shown everything queued."""
        left = 0.0 if self._current is None else max(0.0, self._current.steps - self._pos)
        return (left + sum(e.steps for e in self._pending)) * self.step_s

    def summary(self, lang: str = "en") -> str:
        """One line: whether the replay is held, its speed, how far it lags the job."""
        return " · ".join(filter(None, (self.state(lang), self.lag(lang))))

    def state(self, lang: str = "en") -> str:
        """Whether the replay is held, and its speed."""
        speed = i18n.ui("s/step", lang).format(i18n.number(f"{self.step_s:g}", lang))
        return f"{i18n.ui('replay held short', lang)} · {speed}" if self.paused else speed

    def lag(self, lang: str = "en") -> str:
        """How far the display lags the job: operations waiting, and skipped; "" if none."""
        parts = []
        if self.waiting:
            parts.append(i18n.ui("behind", lang).format(
                n=self.waiting, s=i18n.number(f"{self.lag_s:.1f}", lang)))
        if self.skipped:
            parts.append(i18n.ui_n("skipped", self.skipped, lang))
        return " · ".join(parts)

    # ---- frames ------------------------------------------------------------------------
    def frame(self, now: float | None = None) -> AnimFrame | None:
        """What to draw at ``now`` (default: the clock); None before anything was queued."""
        self._advance(self.clock() if now is None else now)
        entry = self._current
        if entry is None:
            return None
        done = self._finished()
        # a hair of tolerance so that float sums of elapsed time land on step boundaries
        step = min(int(self._pos + 1e-9), entry.steps - 1)
        progress = 1.0 if done else min(1.0, max(0.0, self._pos - step))
        return _frame_of(entry, step, progress, done)

    def _advance(self, now: float) -> None:
        """Play the time since the last call, moving on through the queue as steps end."""
        elapsed = max(0.0, now - self._last)
        self._last = now
        if self._paused:
            return
        if self._current is not None:
            self._pos += elapsed / self.step_s
        while (self._current is None or self._finished()) and self._pending:
            entry = self._pending[0]
            ready = entry.since + GATHER_S if entry.gathering else float("-inf")
            if now < ready:
                return  # its round may still be arriving
            self._pending.popleft()
            if entry.gathering:
                entry = self._settle(entry)
            # time already spent on it: since the one before ended, or since it was ready
            done = self._pos - self._current.steps if self._current is not None else math.inf
            extra = max(0.0, min(done, (now - ready) / self.step_s))
            self._start(entry, now)
            self._pos = extra

    def _settle(self, entry: _Entry) -> _Entry:
        """A round gathered: drawn whole if it closed; else its transfers one after another,
        those in flight together in one frame (returns the first, queues the others)."""
        entry.gathering = False
        if entry.round:
            return entry
        parts: list[_Entry] = []
        for inst in sorted(entry.members, key=lambda i: i.t_last_start):
            if parts and parts[-1].joins(inst):
                parts[-1].together.append(inst)
            else:
                parts.append(_Entry(inst, None))
        self._pending.extendleft(reversed(parts[1:]))
        return parts[0]

    def _finished(self) -> bool:
        return self._current is not None and self._pos + 1e-9 >= self._current.steps

    def _start(self, entry: _Entry, now: float) -> None:
        self._current, self._pos, self._last = entry, 0.0, now
        self.shown += entry.instances


def label(inst: Instance, sched: Schedule | Scaled | None, count: int, step: int,
          lang: str = "en", members: Sequence[Instance] = (), round_: bool = False) -> str:
    """A frame's title in ``lang``: op, count, schematic or not, step k of n; for p2p
    transfers drawn together (``members``, more than one), how many, between whom, and
    whether they are one round (``round_``: the next transfer on each pair, its numbers
    given) or in flight at once."""
    ui = functools.partial(i18n.ui, lang=lang)
    times = f" ×{count}" if count > 1 else ""
    if sched is None and len(members) > 1:
        pairs = ", ".join(f"{i.group[0]} -> {i.group[1]}" for i in members[:4])
        if len(members) > 4:
            pairs += ui("and more").format(n=len(members) - 4)
        sizes = sorted({i.size for i in members})
        size = ui("each").format(size=human_bytes(sizes[0])) if len(sizes) == 1 else \
            ui("sizes from to").format(low=human_bytes(sizes[0]), high=human_bytes(sizes[-1]))
        seqs = sorted({i.seq for i in members})
        words = ui("at once" if not round_ else "round" if len(seqs) == 1 else "round numbered")
        return words.format(n=len(members), op=inst.op, seq=seqs[0], last=seqs[-1],
                               times=times, pairs=pairs, size=i18n.number(size, lang))
    if sched is None:
        if inst.op in protocol.P2P and len(inst.group) == 2:
            src, dst = inst.group
            return f"{inst.op}{times} {src} -> {dst}, " \
                f"{i18n.number(human_bytes(inst.size), lang)}"
        return f"{inst.op}{times}: {ui('backend unknown')}"
    if isinstance(sched, Scaled):
        return f"{inst.op}{times} · {scaled_step(sched, step, lang)} · " \
            f"{ui('schematic label')}{scaled_algorithm(sched, lang)}"
    algorithm = ui("algorithm").format(backend=sched.backend,
                                       algorithm=schedule_notes.algorithm(sched, lang))
    if not sched.steps:
        return f"{inst.op}{times} · {algorithm}: {ui('nothing moves')}"
    kind = ui("schematic label") if sched.schematic else ""
    where = ui("step of").format(label=schedule_notes.step_label(sched.steps[step].label, lang),
                                 k=step + 1, n=len(sched.steps))
    # the step before the algorithm's name, which can be long: a narrow replay keeps it
    return f"{inst.op}{times} · {where} · {kind}{algorithm}"


def scaled_algorithm(sched: Scaled, lang: str = "en") -> str:
    """The algorithm of a large group's drawing and its nodes: "nccl ring over 128 nodes of
    8"; without nodes, over how many ranks."""
    algorithm = i18n.ui("algorithm", lang).format(
        backend=sched.backend, algorithm=schedule_notes.algorithm(sched, lang))
    if sched.nodes > 1:
        return i18n.ui("over nodes", lang).format(algorithm=algorithm, nodes=sched.nodes,
                                                  per=sched.per_node)
    return i18n.ui("over ranks", lang).format(algorithm=algorithm, n=sched.n)


def scaled_step(sched: Scaled, step: int, lang: str = "en") -> str:
    """Which drawn step of a large group's drawing is shown, and the real steps it stands
    for: "RS 69-136 of 1023 (2 of 30)"."""
    s = sched.steps[step]
    run = f"{s.first + 1}" if s.count == 1 else f"{s.first + 1}-{s.first + s.count}"
    return i18n.ui("scaled step of", lang).format(
        phase=schedule_notes.step_label(s.phase, lang), run=run, total=s.total, k=step + 1,
        n=len(sched.steps))


def frame_label(frame: AnimFrame, lang: str = "en") -> str:
    """``frame.label`` in ``lang``."""
    return label(frame.instance, frame.schedule, frame.count, frame.step, lang,
                 frame.members, frame.round)


def _frame_of(entry: _Entry, step: int, progress: float, done: bool) -> AnimFrame:
    inst, sched = entry.instance, entry.schedule
    if sched is None and entry.together:
        members = tuple(sorted(entry.members, key=lambda i: i.group) if entry.round
                        else entry.members)
        transfers = tuple(Transfer(i.group[0], i.group[1], 0, i.size, False) for i in members)
        return AnimFrame(inst, None, entry.count, 0, 1, "", progress,
                         label(inst, None, entry.count, 0, members=members,
                               round_=entry.round), transfers, done, entry.round, members)
    title = label(inst, sched, entry.count, step)
    if sched is None:
        if inst.op in protocol.P2P and len(inst.group) == 2:
            src, dst = inst.group
            transfers = (Transfer(src, dst, 0, inst.size, False),)
        else:
            transfers = ()
        return AnimFrame(inst, None, entry.count, 0, 1, "", progress, title, transfers, done)
    total = len(sched.steps)
    if isinstance(sched, Scaled):  # its hops are nodes' and GPUs' in a node: drawn as such
        return AnimFrame(inst, sched, entry.count, step, max(1, total),
                         sched.steps[step].label if total else "", progress, title, (), done)
    if not total:
        return AnimFrame(inst, sched, entry.count, 0, 1, "", progress, title, (), done)
    s = sched.steps[step]
    # schedules number the group's members 0..n-1 (p2p: 0 sender, 1 receiver)
    group = inst.group if len(inst.group) == sched.n else tuple(range(sched.n))
    transfers = tuple(Transfer(group[t.src], group[t.dst], t.chunk, t.nbytes, t.reduce)
                      for t in s.transfers)
    return AnimFrame(inst, sched, entry.count, step, total, s.label, progress, title,
                     transfers, done)


def plan(instance: Instance, backend: str | None,
         host_of: Callable[[int], str | None] | None = None) -> Schedule | Scaled | None:
    """The schedule to animate ``instance`` with: None for a p2p transfer (a single hop), and
    when the backend is unknown or has no schedule for the op. A group of more than
    REPLAY_RANKS_MAX ranks gets its drawing as nodes (``hierarchy.scaled``), its nodes the
    hosts ``host_of`` gives its ranks (None: not known, one): a ring's full schedule grows as
    the square of its ranks (5 s to plan at 1,024), and no screen shows its 2,046 steps of
    1,024 arrows."""
    if instance.op in protocol.P2P or backend is None:
        return None
    root = instance.group.index(instance.root) if instance.root in instance.group else None
    if len(instance.group) > REPLAY_RANKS_MAX:
        nodes = hierarchy.node_sizes(instance.group, host_of) if host_of is not None else \
            (len(instance.group),)
        return _cached_scaled(instance.op, backend, nodes, instance.size, root)
    return _cached_schedule(instance.op, backend, len(instance.group), instance.size, root)


def host_of(model: Model, rank: int) -> str | None:
    """The host a rank reported (None before it did): the nodes a large group is drawn as."""
    state = model.ranks.get(rank)
    return state.host if state is not None and state.host != "?" else None


@functools.lru_cache(maxsize=512)
def _cached_schedule(op: str, backend: str, n: int, size: int,
                     root: int | None) -> Schedule | None:
    """Schedules are pure and a training loop repeats the same few: compute each once."""
    try:
        return schedules.schedule(op, backend, n, size, root)
    except ValueError:
        return None


@functools.lru_cache(maxsize=64)
def _cached_scaled(op: str, backend: str, nodes: tuple[int, ...], size: int,
                   root: int | None) -> Scaled | None:
    """As _cached_schedule, for the drawing of a large group (about a millisecond each)."""
    try:
        return hierarchy.scaled(op, backend, nodes, size, root)
    except ValueError:
        return None
