"""Hangs, failed operations and deadlocks.

* hang: an instance entered by some ranks and not others for more than 1 s (no healthy demo
  came near it in 10 minutes on a loaded 2-core machine: bench/false_findings.py), while
  someone still waits in it, and none judged while a rank's records of an earlier all_reduce
  of its group are on their way; the same for a send or receive whose counterpart never came;
  cycles of such waits are deadlocks, named with the op each of its ranks waits in and the
  ranks that wait on them. How long is counted as ``watch`` says; no new hang is named in a
  job that is gone (nobody is left to wait).
* failed: the same, once no rank waits in it any more and some failed in it (the backend
  raised: a peer closed the connection, the timeout): named with how long they were in it,
  at once if every missing rank has exited (it will not come), else after 1 s like a hang
  (its record may still be on its way); a missing rank found lost will not come either. Its
  key is the hang's, so a hang that ends in failure becomes this finding, not a resolution,
  and says the timeout ended the hang, with what the missing ranks did while it hung (they
  may have exited since) and the deadlock that caused it; a deadlock whose every wait failed
  becomes one too. Its facts are kept as first found, nothing in them counts on.
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Iterable
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from commviz.viewer.diagnose import facts as fx
from commviz.viewer.diagnose import watch as w
from commviz.viewer.diagnose.finding import Finding
from commviz.viewer.diagnose.lost import LOST_AFTER_S
from commviz.viewer.model import Model
from commviz.wire import protocol
from commviz.wire.link import CONNECT_WAIT_S

HANG_AFTER_S = 1.0
# how late a rank's records may come after records that prove it took part: a first connection
# holds them this long
REPORTS_LATE_S = CONNECT_WAIT_S


class _Wait(NamedTuple):
    """The op a rank waits in, for a deadlock's facts; ``took``: seconds it was in it before
    it failed, None while it waits."""

    op: str
    peer: int
    seq: int
    took: float | None


class _WaitGraph:
    """Who waits on whom (``on``: rank -> the ranks it waits on), for deadlock cycles, and in
    which op. The op is looked up only for the ranks of a cycle and those behind it: a hang of
    a thousand ranks in ten queued instances would make ten thousand, each update, for none."""

    def __init__(self) -> None:
        self.on: dict[int, set[int]] = {}
        self._instances: list[w.Unmatched] = []  # the hung collectives, in the order found
        self._transfers: dict[int, _Wait] = {}
        self._counted: dict[tuple[int, ...], set[int]] = {}  # missing ranks -> ranks on them

    def collective(self, u: w.Unmatched, missing: tuple[int, ...]) -> None:
        """Its ranks that wait or failed wait on ``missing`` (once for the queued instances
        that miss the same ranks)."""
        counted = self._counted.setdefault(missing, set())
        new = u.waiting() - counted
        counted |= new
        on = self.on
        for r in new:
            on.setdefault(r, set()).update(missing)
        self._instances.append(u)

    def transfer(self, rank: int, peer: int, wait: _Wait) -> None:
        self.on.setdefault(rank, set()).add(peer)
        self._transfers.setdefault(rank, wait)

    def waiting_in(self, rank: int) -> _Wait:
        """The op ``rank`` waits in: its first hung collective, else its first transfer."""
        for u in self._instances:
            f = u.flying.get(rank)
            if f is not None:
                return _Wait(f.op, -1, u.seq, None)
            e = u.pending.get(rank)
            if e is not None and e.failed:
                return _Wait(e.op, -1, u.seq, e.took)
        return self._transfers[rank]


class Hangs:
    def __init__(self, watch: w.Watch) -> None:
        self.watch = watch
        self.model = watch.model
        # hang key -> what its missing ranks did while it hung, as its failure will say
        self._hung: dict[tuple, tuple[tuple[int, fx.Doing], ...] | fx.Doing] = {}
        self._witness: dict[tuple[int, int], int] = {}  # (gkey, seq) -> rank (``_known``)

    def completed(self, gkeys: np.ndarray, seqs: np.ndarray, failed: np.ndarray) -> None:
        """Collective instances just matched: a hang among them is resolved, not unresolved
        with its job."""
        active = self.watch.active
        if any(k[0] == "hang" for k in active):
            self.watch.completed.update(
                k for k in zip(["hang"] * len(gkeys), gkeys[~failed].tolist(),
                               seqs[~failed].tolist()) if k in active)

    def transfers(self, recv: dict[str, np.ndarray], send: dict[str, np.ndarray]) -> None:
        """Transfers just paired: a send or receive found hung among them completed."""
        for src, dst, seq in zip(send["rank"].tolist(), recv["rank"].tolist(),
                                 send["seq"].tolist()):
            for key in (("hang-p2p", src, dst, seq, True), ("hang-p2p", src, dst, seq, False)):
                if key in self.watch.active:
                    self.watch.completed.add(key)

    def keep(self, current: Container[tuple]) -> None:
        """Forget what hung for the keys that no longer hold."""
        self._hung = {k: v for k, v in self._hung.items() if k in current}

    def find(self, now: float, wall: int, unmatched: dict[tuple[int, int], w.Unmatched],
             lost: set[int]) -> list[Finding]:
        """``lost``: ranks found lost in this update."""
        watch, model = self.watch, self.model
        out: list[Finding] = []
        graph = _WaitGraph()
        # (group, missing) -> its hung instances in flight: (seq, place found, instance, until
        # when it counts): one finding each, its first's (``_first_of_each``)
        hung: dict[tuple, list[tuple[int, int, w.Unmatched, float]]] = {}
        for place, ((gkey, seq), u) in enumerate(unmatched.items()):
            group, job = model.groups[gkey][1], model.job_of(gkey)
            # a rank never heard from is not missing: its reports are (a viewer started late,
            # a first connection still under way); only ranks whose reports are current are,
            # and only in their own job (a rank number of a later job is another process)
            absent, ranks_of = set(group).difference(u.flying, u.pending), model.ranks
            missing = tuple(r for r in group if r in absent and r in ranks_of
                            and ranks_of[r].job in (0, job)) if absent else ()
            key = ("hang", gkey, seq)
            if missing and seq > 1:  # nor one whose reports are behind in this group
                behind = {r for r in _reports_behind(model, gkey, seq, missing, wall)
                          if not watch.gone(r, lost)}  # (what will not come is not behind)
                if behind and key not in watch.active:
                    continue  # inside or not, it does not say yet: no verdict till it does
                missing = tuple(r for r in missing if r not in behind)
            # a rank that said goodbye inside it (stopped there) waits no more: with others
            # failed in it, it is a failed op
            failing = u.failed()
            if not missing or not (u.flying or failing):
                continue
            live = any(not watch.exited(r) for r in u.flying) if failing else True
            # (read only once nobody waits: then a missing rank whose process ended will never
            # come, with no grace for the others' backends to notice it; they have)
            gone = all(watch.gone(m, lost) or watch.ended(m) for m in missing)
            # < now: they all said goodbye, or their whole job is gone
            end = watch.job_end(job, now, lost)
            until = min(watch.until(itertools.chain(u.flying, u.pending, missing), now), end)
            if key not in watch.active and not (
                    end >= now and self._known(gkey, u, job, now) if live else
                    _age(u, now, until) >= HANG_AFTER_S or gone):
                continue
            graph.collective(u, missing)
            if not live:
                out.append(self._failed(gkey, seq, group, u.entries(now), missing, now, wall,
                                        lost))
                continue
            hung.setdefault((gkey, missing), []).append((seq, place, u, until))
        self._witness = {k: r for k, r in self._witness.items() if k in unmatched}
        out += self._first_of_each(hung, now, wall, lost)
        out += self._p2p_hangs(now, wall, graph, lost)
        out += self._deadlocks(now, wall, graph, lost)
        return out

    def _known(self, gkey: int, u: w.Unmatched, job: int, now: float) -> bool:
        """Whether a rank in ``u`` was heard from after it had waited HANG_AFTER_S: a new
        hang. One that died waiting, or a job that is gone (nobody is left to wait), makes
        none. The rank found so is asked first next time (it stays so while it waits: a
        queued instance, never named, is asked each update)."""
        heard, key = self.watch.heard, (gkey, u.seq)
        witness = self._witness.get(key)
        order = itertools.chain((witness,), u.flying) if witness in u.flying else u.flying
        for r in order:
            if w.flying_age(u.flying[r].seen, now) - (now - heard(r, job, now)) >= HANG_AFTER_S:
                self._witness[key] = r
                return True
        return False

    def _first_of_each(self, hung: dict[tuple, list[tuple[int, int, w.Unmatched, float]]],
                       now: float, wall: int, lost: set[int]) -> list[Finding]:
        """One hang per group and missing ranks: its first instance, saying how many later ones
        hang behind it (DDP's bucket all_reduces go on being called, each one more hung
        instance, one cause). Once the first completes, the next is named on its own. Only
        the first's finding is made: a thousand ranks' links and facts, once."""
        firsts = sorted((min(found, key=itemgetter(0)), len(found) - 1, key)
                        for key, found in hung.items())
        out = []
        for (seq, _, u, until), later, (gkey, missing) in firsts:
            group = self.model.groups[gkey][1]
            inside = tuple(sorted(u.ranks()))
            key = ("hang", gkey, seq)
            # what the missing did while it hung; once one is in no op any more (the timeout
            # ended its side first), what was found before stays
            if self.watch.in_ops(missing) or key not in self._hung:
                self._hung[key] = tuple((m, self._doing(m, wall, lost, timed=False))
                                        for m in missing)
            op = u.op()
            why = tuple((m, self._doing(m, wall, lost)) for m in missing)
            out.append(Finding(
                "hang", missing, group, seq,
                fx.Hang(op, seq, u.where(inside), group, _age(u, now, until), until < now, inside,
                        missing, why, self._nodes(missing), later),
                key, now, wall, links=tuple((r, m) for r in inside for m in missing), op=op))
        return out

    def _nodes(self, ranks: Iterable[int]) -> tuple[str, ...]:
        """The nodes of ``ranks``, for a job on several (() on one)."""
        ranks_of = self.model.ranks
        hosts = sorted({ranks_of[r].host for r in ranks if r in ranks_of})
        if len(hosts) == 1 and all(s.host == hosts[0] for s in ranks_of.values()):
            return ()
        return tuple(hosts)

    def _failed(self, gkey: int, seq: int, group: tuple[int, ...], entries: dict[int, w.Entry],
                missing: tuple[int, ...], now: float, wall: int, lost: set[int]) -> Finding:
        """A collective that no rank waits in any more, some failed in, others sent no record
        of: they never came, or died inside it before their record left (the emitter sends
        every 50 ms), so the facts claim neither."""
        op = w.majority(entries)[0]
        why = tuple((m, self._doing(m, wall, lost)) for m in missing)
        links = tuple((r, m) for r in sorted(entries) for m in missing)
        failed = tuple(sorted(r for r, e in entries.items() if e.failed))
        took = max(entries[r].took for r in failed)
        at = w.where(entries, failed)
        key = ("hang", gkey, seq)
        hung = self._hung.get(key)
        if hung is not None:  # the timeout ended a hang: say what it found, and its cause
            return Finding("failed", missing, group, seq,
                           fx.Failed(op, seq, at, group, took, failed, missing, hung, True,
                                     self._cause(failed, missing)),
                           key, now, wall, links=links, op=op, hung=True)
        return Finding("failed", missing, group, seq,
                       fx.Failed(op, seq, at, group, took, failed, missing, why, False, ()),
                       key, now, wall, links=links, op=op)

    def _cause(self, waiting: Iterable[int], missing: Iterable[int]) -> tuple[int, ...]:
        """The ranks of the deadlock that ``waiting`` and ``missing`` were in; empty if none
        was found."""
        waiting, missing = set(waiting), set(missing)
        for key in self.watch.active:
            if key[0] == "deadlock" and waiting & set(key[1]) and missing & set(key[1]):
                return tuple(sorted(key[1]))  # a cycle: two ranks at least
        return ()

    def _p2p_hangs(self, now: float, wall: int, graph: _WaitGraph,
                   lost: set[int]) -> list[Finding]:
        """Sends and receives that wait, or failed waiting, for a counterpart with no record."""
        watch, model = self.watch, self.model
        rows = model.pending()[1]
        failed = np.flatnonzero((rows["flags"] & protocol.FLAG_FAILED) > 0)
        job_of = model.job_of
        # (rank, op, peer, seq, seconds waited, seconds in it before failing or None if live,
        # job)
        waiters = [(f.rank, f.op, f.peer, f.seq, w.flying_age(f.seen, now), None,
                    job_of(f.gkey)) for f in model.flying.transfers.values()]
        waiters += [(r, protocol.OPS[op], peer, seq, watch.age(r, i, now), (t1 - t0) / 1e9,
                     job_of(g))
                    for r, op, peer, seq, i, t0, t1, g in zip(*(rows[k][failed].tolist() for k in (
                        "rank", "op", "peer", "seq", "id", "t_start", "t_end", "gkey")))]
        ends = {job: watch.job_end(job, now, lost) for job in {x[6] for x in waiters}}
        known = [secs - (now - watch.heard(r, job, now)) >= HANG_AFTER_S and ends[job] >= now
                 for r, _, _, _, secs, _, job in waiters]
        waiters = [(r, op, peer, seq, max(0.0, secs - (now - min(watch.until((r, peer), now),
                                                                 ends[job]))), took, job)
                   for r, op, peer, seq, secs, took, job in waiters]
        # a failed one is named at once if its peer has exited or is lost: that peer will not
        # come; a live one as a collective's (see find)
        old = [x for x, fresh in zip(waiters, known) if x[2] >= 0 and (
            _p2p_key(x) in watch.active or fresh if x[5] is None
            else x[4] >= HANG_AFTER_S or watch.gone(x[2], lost))]
        if not old:
            return []
        posted = set(zip(rows["rank"].tolist(), _is_send(rows["op"]).tolist(),
                         rows["peer"].tolist(), rows["seq"].tolist(),
                         map(job_of, rows["gkey"].tolist())))
        posted |= {(r, op in protocol.SENDS, peer, seq, job)
                   for r, op, peer, seq, _, _, job in waiters}
        out = []
        for rank, op, peer, seq, secs, took, job in old:
            sending = op in protocol.SENDS
            if (peer, not sending, rank, seq, job) in posted:
                continue  # the other side is there: data is moving, however slowly
            src, dst = (rank, peer) if sending else (peer, rank)
            graph.transfer(rank, peer, _Wait(op, peer, seq, took))
            key = _p2p_key((rank, op, peer, seq))
            hung = self._hung.get(key) if took is not None else None
            # the timeout ended a hang: what it found, not what the peer did since (exited)
            doing = hung if hung is not None else self._doing(peer, wall, lost)
            cause: tuple[int, ...] = ()
            if hung is not None:
                state, waited = "timeout", took
                cause = self._cause((rank,), (peer,))
            elif took is not None:
                state, waited = "failed", took
            elif min(watch.until((rank, peer), now), ends[job]) < now:
                state, waited = "waited", secs
            else:
                state, waited = "waits", secs
            if took is None and (watch.in_ops((peer,)) or key not in self._hung):
                self._hung[key] = self._doing(peer, wall, lost, timed=False)
            out.append(Finding("hang" if took is None else "failed", (peer,), (src, dst), seq,
                               fx.P2PWait(sending, src, dst, seq, state, waited, peer, doing,
                                          cause),
                               key, now, wall, links=((src, dst),),
                               op="recv" if sending else "send", hung=hung is not None))
        return out

    def _deadlocks(self, now: float, wall: int, graph: _WaitGraph,
                   lost: set[int]) -> list[Finding]:
        """Cycles of waits, with the ranks that wait on them. Once the timeout has failed
        every wait of a cycle, it is a failed finding, as its hangs are; once its ranks are
        gone, it says it lasted until then."""
        out = []
        waiting_in = graph.waiting_in
        for cycle in dict.fromkeys(_cycles(graph.on)):
            behind = _behind(graph.on, cycle)
            took = [waiting_in(r).took for r in cycle]
            over = None not in took
            job = self.model.ranks[cycle[0]].job if cycle[0] in self.model.ranks else 0
            ended = min(self.watch.until(cycle, now), self.watch.job_end(job, now, lost)) < now
            alike: dict[tuple, list[int]] = {}  # the waiters in the same op on the same ranks
            for r, on in behind.items():
                alike.setdefault((tuple(sorted(on)), waiting_in(r)[:3]), []).append(r)
            links = tuple(zip(cycle, cycle[1:] + cycle[:1])) + tuple(
                (r, q) for r, on in behind.items() for q in sorted(on))
            out.append(Finding(
                "failed" if over else "hang", cycle + tuple(sorted(behind)), None, None,
                fx.Deadlock(cycle, tuple(fx.Call(*waiting_in(r)[:3]) for r in cycle),
                            tuple(fx.Behind(tuple(ranks), fx.Call(*call), on)
                                  for (on, call), ranks in alike.items()),
                            "timeout" if over else "waited" if ended else "waits",
                            max(took) if over else None),
                ("deadlock", cycle), now, wall, links=links, hung=over))
        return out

    def _doing(self, rank: int, wall: int, lost: Container[int] = (),
               timed: bool = True) -> fx.Doing:
        """What a rank is doing instead. ``lost``: ranks found lost in this update;
        ``timed``: with how long (not in facts kept once the wait is over)."""
        watch, model = self.watch, self.model
        s = model.ranks.get(rank)
        if s is None:
            return fx.Doing("never_reported")
        if s.exited:
            return fx.Doing("exited")
        last = w.last_record(s)
        if s.ended_ns:  # its node's harvester saw its process end: no silence to judge
            return fx.Doing("ended", last=last, code=s.exit_code)
        if rank in lost or watch.found_lost(rank):
            return fx.Doing("lost", last=last)
        now = model.clock()
        silent = watch.job_end(s.job, now) - s.last_seen  # stops where its job ended
        if silent > LOST_AFTER_S:  # no goodbye: what it did last is not known
            return fx.Doing("silent", silent, last=last)
        f = model.flying.first_of(rank)
        if f is not None:
            secs = w.flying_age(f.seen, model.clock())
            return fx.Doing("in_op", secs if timed else None, fx.Call(f.op, f.peer, f.seq))
        if s.last_op is None:
            return fx.Doing("no_op")
        if not timed:
            return fx.Doing("idle", last_op=s.last_op)
        return fx.Doing("idle", (wall - s.last_end_ns) / 1e9, last_op=s.last_op)


# the collectives no rank completes before every member has entered: one rank's completed
# record of one is proof that each of the others took part
_EVERY_MEMBER = np.array([op not in protocol.ROOTED | protocol.P2P and op != "batch_isend_irecv"
                          for op in protocol.OPS] + [False] * (256 - len(protocol.OPS)))
_NOT_PROOF = protocol.FLAG_FAILED | protocol.FLAG_UNWAITED


def _reports_behind(model: Model, gkey: int, seq: int, ranks: tuple[int, ...],
                    wall: int) -> set[int]:
    """Those of ``ranks`` whose records of an earlier instance of group ``gkey`` have not
    come, where another rank completed that instance less than REPORTS_LATE_S ago and it is
    one that needs every member (an all_reduce): they took part, so their reports are on
    their way (a loaded rank, a first connection), and whether they are in instance ``seq``
    is not known yet. Longer ago, their records were lost (a viewer started late).
    Read only for a hang's candidates: a mask over the model's records waiting for a match."""
    rows = model.pending()[0]
    if not len(rows["rank"]):
        return set()
    mine = (rows["gkey"] == gkey) & (rows["seq"] < seq) \
        & (rows["t_end"] >= wall - round(REPORTS_LATE_S * 1e9))
    if not mine.any():
        return set()
    seqs, rank = rows["seq"][mine], rows["rank"][mine]
    proof = _EVERY_MEMBER[rows["op"][mine]] & ((rows["flags"][mine] & _NOT_PROOF) == 0)
    done = set(seqs[proof].tolist())
    return {r for r in ranks if done - set(seqs[rank == r].tolist())}


def _age(u: w.Unmatched, now: float, until: float) -> float:
    """How long ``u`` has hung: since its first rank entered, until ``until``."""
    return max(0.0, u.age(now) - (now - until))


def _p2p_key(waiter: tuple) -> tuple:
    """The finding key of a send or receive that waits: (rank, op, peer, seq, ...)."""
    rank, op, peer, seq = waiter[:4]
    sending = op in protocol.SENDS
    src, dst = (rank, peer) if sending else (peer, rank)
    return ("hang-p2p", src, dst, seq, sending)


def _is_send(ops: np.ndarray) -> np.ndarray:
    return np.isin(ops, [protocol.OP_CODE[o] for o in protocol.SENDS])


def _behind(waits: dict[int, set[int]], cycle: tuple[int, ...]) -> dict[int, set[int]]:
    """The ranks outside ``cycle`` that wait on it, directly or through one another, each with
    the ranks it waits on among the cycle's and theirs."""
    reached = set(cycle)
    grew = True
    while grew:
        new = {r for r, on in waits.items() if r not in reached and on & reached}
        reached |= new
        grew = bool(new)
    return {r: waits[r] & reached for r in sorted(reached - set(cycle))}


def _cycles(waits: dict[int, set[int]]) -> list[tuple[int, ...]]:
    """Simple cycles of the wait-for graph, each rotated to start at its lowest rank."""
    found = []

    def walk(path: list[int]) -> None:
        for nxt in sorted(waits.get(path[-1], ())):
            if nxt == path[0]:
                found.append(tuple(path))
            elif nxt > path[0] and nxt not in path:
                walk(path + [nxt])

    for start in sorted(waits):
        walk([start])
    return found
