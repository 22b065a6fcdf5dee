"""Lost ranks.

No message for 2 heartbeat intervals (the emitter beats every 0.5 s) while another rank
kept reporting for that long after it went quiet, still so 0.2 s later: when every rank
falls silent at once the viewer or the whole machine stalled (or the job ended: ``ended``
names who left without a goodbye), and ranks resuming after a stall come back a few ms
apart, so no rank is singled out for either. A rank silent that long after a rank of its
job said goodbye ended without one (a launcher such as torchrun stops the other workers as
soon as one fails, so they all fall silent together, and no viewer stall makes a goodbye);
so did a rank whose number comes back as another process (a new job, ``Model``'s
generations) with no goodbye from the old one: named once. One found as its job ended keeps
the silence it was found with: the job is over, nothing grows. In a job of several nodes, the
ranks of one node lost together are one finding that names the node (a dead node, its
network or its relay), not one per rank.
"""

from __future__ import annotations

import itertools
import signal
from typing import NamedTuple

from commviz.viewer.diagnose import facts as fx
from commviz.viewer.diagnose import watch as w
from commviz.viewer.diagnose.finding import Finding
from commviz.viewer.inflight import InFlight
from commviz.wire.protocol import HEARTBEAT_S

LOST_AFTER_S = 2 * HEARTBEAT_S
LOST_CONFIRM_S = 0.2
NODE_QUIET_S = HEARTBEAT_S  # a node-mate quiet this long is taken as going the same way


class _Lost(NamedTuple):
    """A rank found lost, its finding not made yet (its node's may stand for it)."""

    rank: int
    silent: float
    last: fx.Call | None


class LostRanks:
    def __init__(self, watch: w.Watch) -> None:
        self.watch = watch
        self.model = watch.model
        self._quiet: dict[int, float] = {}  # rank -> when it first looked lost
        self._left_silent: dict[int, float] = {}  # rank lost as its job ended -> silence then
        self._replacements = 0  # of the model's replaced incarnations, those looked at
        self._stuck_now: list[tuple[int, InFlight, fx.Call]] | None = None  # (``_stuck``)

    def silent(self) -> list[int]:
        """Ranks neither gone with a goodbye nor heard from for LOST_AFTER_S."""
        now, after = self.model.clock(), LOST_AFTER_S + self.model.behind_s
        return sorted(r for r, s in self.model.ranks.items()
                      if not s.exited and now - s.last_seen > after)

    def find(self, now: float, wall: int, accounted: bool = False) -> list[Finding]:
        """``accounted``: an account tells how the run ended (``ending``): a rank whose end
        a harvester saw is then no lost rank (its job stopping: the account is the job's)."""
        model, watch = self.model, self.watch
        out: list[Finding | _Lost] = []
        latest = max((s.last_seen for s in model.ranks.values()), default=0.0)
        exited: dict[int, tuple[int, ...]] = {}  # job -> its ranks gone with a goodbye

        def left_of(job: int) -> tuple[int, ...]:
            """Once a pass and a job (not once a rank: a thousand ranks' scans of a thousand
            mates were most of a pass)."""
            if job not in exited:
                mates = model.jobs[job - 1] if job else {}
                exited[job] = tuple(sorted(q for q, o in mates.items() if o.exited))
            return exited[job]

        silent_ranks = []
        for r, s in model.ranks.items():  # in any order, nothing made: a pass's bulk
            # a backlog holds its messages, as the others': a silence passes it too
            quiet = now - s.last_seen <= LOST_AFTER_S + model.behind_s
            # (a rank that said goodbye is passed over: its own is never among them)
            if s.exited or quiet or (accounted and s.ended_ns) \
                    or (latest - s.last_seen <= LOST_AFTER_S and not left_of(s.job)):
                self._quiet.pop(r, None)
                self._left_silent.pop(r, None)
            else:
                silent_ranks.append(r)
        for r in sorted(silent_ranks):  # the few left, in order
            s = model.ranks[r]
            silent, left = now - s.last_seen, left_of(s.job)
            if now - self._quiet.setdefault(r, now) < LOST_CONFIRM_S:
                continue
            last = w.last_record(s)
            if left and latest - s.last_seen <= LOST_AFTER_S:  # its job ended around it
                silent = self._left_silent.setdefault(r, silent)  # as found: the job is over
                out.append(Finding("lost_rank", (r,), None, None,
                                   fx.LeftSilent(r, silent, left, last), ("lost_rank", r),
                                   now, wall))
                continue
            if watch.job_end(s.job, now, (r,)) < now:  # its job is over: the silence as found
                silent = self._left_silent.setdefault(r, silent)
            out.append(_Lost(r, silent, last))
        found = self._by_node(out, now, wall) if out else []
        self._stuck_now = None  # (this pass's)
        return found

    def _stuck(self) -> list[tuple[int, InFlight, fx.Call]]:
        """Each rank still in an op (but those that said goodbye) with the op it has been in
        longest, the longest first: made once a pass, for every rank lost in it."""
        if self._stuck_now is None:
            flying, exited = self.model.flying, self.watch.exited
            firsts = [f for f in map(flying.first_of, flying.by_rank) if f is not None
                      and not exited(f.rank)]
            firsts.sort(key=lambda f: (f.seen, f.noted))  # (the order they came, of equal ones)
            self._stuck_now = [(f.rank, f, fx.Call(f.op, f.peer, f.seq)) for f in firsts]
        return self._stuck_now

    def _shared(self, rank: int) -> InFlight | None:
        """The op stuck longest that waits on ``rank`` (others', not its own)."""
        return next((f for q, f, _ in self._stuck() if q != rank
                     and (rank in f.group or f.peer == rank)), None)

    def _lost(self, x: _Lost, now: float, wall: int) -> Finding:
        """A rank lost alone, with the op each other rank is stuck in."""
        r, stuck, shared = x.rank, self._stuck(), self._shared(x.rank)
        return Finding("lost_rank", (r,), shared.group if shared else None,
                       shared.seq if shared else None,
                       fx.Lost(r, x.silent, x.last, tuple((q, c) for q, _, c in stuck if q != r)),
                       ("lost_rank", r), now, wall, links=tuple((q, r) for q, _, _ in stuck
                                                                if q != r))

    def _by_node(self, found: list[Finding | _Lost], now: float, wall: int) -> list[Finding]:
        """The ranks of one node lost together, in a job of several nodes, as one finding
        that names the node (``lost_node``): not 8 findings for a dead node (nor 8 made to be
        merged: each names the op every other rank is stuck in). Its ranks found lost while
        its other ranks have been quiet NODE_QUIET_S wait for them (half a heartbeat or so):
        a node's ranks fall silent a few ms apart."""
        # ranks not heard from by heartbeat ("?"): no host to name
        nodes = {host: ranks for host, ranks in self.model.nodes().items() if host != "?"}
        lost = {x.rank: x for x in found if isinstance(x, _Lost)}
        if len(nodes) < 2 or not lost:
            return [self._lost(x, now, wall) if isinstance(x, _Lost) else x for x in found]
        host_of = {r: h for h, ranks in nodes.items() for r in ranks}
        out = [f for f in found if isinstance(f, Finding)]
        taken: set[int] = set()
        for host in dict.fromkeys(host_of.get(r) for r in lost):
            ranks = nodes.get(host, ())  # type: ignore[call-overload]
            if len(ranks) < 2:
                continue
            if all(r in lost for r in ranks):
                out.append(self._node(host, ranks, [lost[r] for r in ranks], now, wall))
                taken.update(ranks)
            elif all(r in lost or now - self.model.ranks[r].last_seen > NODE_QUIET_S
                     for r in ranks):
                taken.update(ranks)  # the rest of the node is going quiet too: next pass
        return out + [self._lost(x, now, wall) for r, x in lost.items() if r not in taken]

    def _node(self, host: str, ranks: list[int], each: list[_Lost], now: float,
              wall: int) -> Finding:
        """What its ranks' own findings would say together: the ops the others are stuck in,
        each rank of theirs linked to each of the node."""
        mine = set(ranks)
        stuck = sorted((q, c) for q, _, c in self._stuck() if q not in mine)
        facts = fx.LostNode(host, tuple(ranks), max(x.silent for x in each), each[0].last,
                            tuple(stuck))
        shared = self._shared(ranks[0])
        links = tuple(itertools.product([q for q, _ in stuck], sorted(ranks)))
        return Finding("lost_rank", tuple(ranks), shared.group if shared else None,
                       shared.seq if shared else None, facts, ("lost_node", host), now, wall,
                       links=links)

    def replaced(self, now: float, wall: int) -> list[Finding]:
        """Incarnations replaced by another process of the same rank number (a new job)
        without a goodbye and not found lost before: each named once, then forgotten."""
        model = self.model
        new = min(model.replacements - self._replacements, len(model.replaced))
        self._replacements = model.replacements
        return [Finding("lost_rank", (s.rank,), None, None, fx.Replaced(s.rank, s.job, s.pid),
                        ("lost_rank", s.rank, s.job, s.pid), now, wall)
                for s in list(model.replaced)[len(model.replaced) - new:]
                if not s.exited and not self.watch.found_lost(s.rank)]

    def ended(self, rank: int, now: float, wall: int,
              accounted: bool = False) -> Finding | None:
        """A rank of a job that ended, if it left without a goodbye; not one its launcher
        says it stopped (SIGTERM: torchrun stops the others when one fails), nor one whose
        end a harvester saw while an account tells how the run ended (as ``find``)."""
        s = self.model.ranks.get(rank)
        key = ("lost_rank", rank)
        code = self.model.exit_codes.get(rank) if s is None else s.exit_code
        if (s is not None and (s.exited or accounted and s.ended_ns)) \
                or self.watch.found_lost(rank) or code == -signal.SIGTERM:
            return None
        if s is None:  # it died before its first heartbeat could leave
            return Finding("lost_rank", (rank,), None, None, fx.EndedUnheard(rank, code), key,
                           now, wall)
        return Finding("lost_rank", (rank,), None, None,
                       fx.EndedNoGoodbye(rank, code, w.last_record(s)), key, now, wall)
