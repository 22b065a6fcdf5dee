"""A finding's words, made from its facts when it is shown, in the language asked for.

The sentences are data: ``commviz/text/<lang>/findings.toml``, one entry per sentence
shape, whose named fields this module fills with the facts written in that language (its
numbers' decimals, its phrases for a rank list). A language lacking an entry shows that
entry in English.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from commviz import text
from commviz.launch.launcher import signal_name
from commviz.text import i18n
from commviz.text.i18n import number
from commviz.viewer.diagnose import facts as fx
from commviz.wire import protocol

# a number with a unit after it ("0.53 s", "12.5 ms"): not versions, addresses or host names
NODES_NAMED = 3  # the nodes a finding names, past which it counts them
_QUANTITY = re.compile(r"(?<![\d.])\d+\.\d+(?=\s?(?:s|ms|us|KiB|MiB|GiB|GB/s|%|x)(?![\w/]))")


def say(facts: fx.Facts, lang: str = "en") -> str:
    """The line the facts of a finding make in ``lang``."""
    return _SAY[type(facts)](facts, _Words(lang))


class _Words:
    """One language's entries, and the facts written as it writes them."""

    def __init__(self, lang: str) -> None:
        self.lang = lang

    def entry(self, section: str, name: str) -> Any:
        for lang in (self.lang, "en"):
            found = text.prose(lang, "findings").get(section, {}).get(name)
            if found is not None:
                return found
        raise KeyError(f"commviz/text/en/findings.toml has no {section}.{name}")

    def __call__(self, section: str, name: str, **fields: Any) -> str:
        return self.entry(section, name).format_map(fields)

    def num(self, value: float, spec: str) -> str:
        return number(format(value, spec), self.lang)

    def ranks(self, ranks: Iterable[int]) -> _RankList:
        return _RankList(tuple(ranks), self)

    def group(self, group: tuple[int, ...]) -> str:
        """A group as ``0-3``, ``0,1,5``, or by its size past 8 ranks."""
        if len(group) > 2 and group == tuple(range(group[0], group[-1] + 1)):
            return f"{group[0]}-{group[-1]}"
        if len(group) <= 8:
            return ",".join(map(str, group))
        return self("phrases", "large_group", n=len(group))

    def on_nodes(self, nodes: tuple[str, ...]) -> str:
        """Where ranks are, after them: `` (node017)``, `` (nodes node017, node018)``, past
        NODES_NAMED `` (12 nodes)``; "" for a job on one node."""
        if not nodes:
            return ""
        if len(nodes) == 1:
            return self("phrases", "on_node", node=nodes[0])
        if len(nodes) <= NODES_NAMED:
            return self("phrases", "on_nodes", nodes=", ".join(nodes))
        return self("phrases", "on_many_nodes", n=len(nodes))

    def at(self, where: str | None) -> str:
        return "" if where is None else self("phrases", "at", where=where)

    def call(self, call: fx.Call) -> str:
        name = ("call_to" if call.op in protocol.SENDS else
                "call_from" if call.op in protocol.RECVS else "call")
        return self("phrases", name, op=call.op, peer=call.peer, seq=call.seq)

    def last(self, call: fx.Call | None) -> str:
        return "" if call is None else self("phrases", "last_record", call=self.call(call))

    def took(self, secs: float) -> str:
        """How long a rank was in an op that failed: in ms under 0.1 s (a peer that had
        exited failed it at once: not "0.0 s")."""
        return f"{self.num(secs, '.1f')} s" if secs >= 0.1 else f"{self.num(secs * 1e3, '.1f')} ms"

    def cause(self, cycle: tuple[int, ...]) -> str:
        return self("phrases", "cause", ranks=",".join(map(str, cycle))) if cycle else ""

    def how(self, code: int | None) -> str:
        """How a rank's process ended, as its launcher said."""
        if code is None or code == 0:
            return self("ended_how", "unknown")
        if code < 0:
            return self("ended_how", "signal", signal=signal_name(-code))
        return self("ended_how", "exit", code=code)

    def doing(self, d: fx.Doing) -> str:
        if d.state == "in_op":
            name = "in_op" if d.secs is not None else "in_op_untimed"
            return self("doing", name, call=self.call(d.call), secs=self._secs(d))
        if d.state == "ended":
            how = "" if d.code is None else self("first_end", "how", how=self.how(d.code))
            return self("doing", "ended", how=how, last=self.last(d.last))
        if d.state == "idle":
            name = "idle" if d.secs is not None else "idle_untimed"
            return self("doing", name, op=d.last_op, secs=self._secs(d))
        return self("doing", d.state, secs=self._secs(d), last=self.last(d.last))

    def why(self, why: Iterable[tuple[int, fx.Doing]]) -> str:
        """What each rank does: ``3: in recv from 0 #1; 5: exited``; ranks that do the same
        are said once, ``2,3: exited``, ``24-31: lost``, so that a lost node reads as one."""
        same: dict[str, list[int]] = {}
        for r, d in why:
            same.setdefault(self.doing(d), []).append(r)
        return "; ".join(f"{i18n.rank_list(sorted(rs))}: {doing}" for doing, rs in same.items())

    def _secs(self, d: fx.Doing) -> str:
        return "" if d.secs is None else self.num(d.secs, ".1f")


class _RankList:
    """Ranks as a field: ``{missing}`` writes them by the language's ``ranks`` form,
    ``{missing:name}`` by its form ``name``: ``one`` for a single rank, ``many`` else."""

    def __init__(self, ranks: tuple[int, ...], words: _Words) -> None:
        self.ranks, self.words = ranks, words

    def __format__(self, spec: str) -> str:
        form = self.words.entry("forms", spec or "ranks")
        chosen = form["one"] if len(self.ranks) == 1 else form["many"]
        return chosen.format(list=i18n.rank_list(self.ranks))


def _straggler(f: fx.Straggler, w: _Words) -> str:
    return w("straggler", "line", rank=f.rank, op=f.op, group=w.group(f.group), times=f.times,
             avg_ms=w.num(f.avg_ms, ".0f"), each_s=w.num(f.each_s, ".2f"),
             waited_s=w.num(f.waited_s, ".2f"))


def _hang(f: fx.Hang, w: _Words) -> str:
    return w("hang", "ended" if f.ended else "waits", op=f.op, seq=f.seq, at=w.at(f.where),
             group=w.group(f.group), age=w.num(f.age_s, ".1f"), inside=w.ranks(f.inside),
             missing=w.ranks(f.missing), why=w.why(f.why), on=w.on_nodes(f.nodes),
             later=w("phrases", "later", n=f.later) if f.later else "")


def _failed(f: fx.Failed, w: _Words) -> str:
    return w("failed", "timeout" if f.hung else "failed", op=f.op, seq=f.seq, at=w.at(f.where),
             group=w.group(f.group), took=w.took(f.took_s), failed=w.ranks(f.failed),
             missing=w.ranks(f.missing), why=w.why(f.why), cause=w.cause(f.cause))


def _p2p(f: fx.P2PWait, w: _Words) -> str:
    wait = w("p2p", f.state, secs=w.num(f.secs, ".1f"), took=w.took(f.secs))
    return w("p2p", "send" if f.sending else "recv", src=f.src, dst=f.dst, seq=f.seq, wait=wait,
             peer=f.peer, doing=w.doing(f.doing), cause=w.cause(f.cause))


def _deadlock(f: fx.Deadlock, w: _Words) -> str:
    past = "_past" if f.state != "waits" else ""
    chain = str(f.cycle[0])  # each rank waits on the next, the last on the first
    for rank, call in reversed(list(zip(f.cycle[1:], f.calls[1:]))):
        chain = w("deadlock", "link" + past, rank=rank, call=w.call(call), rest=chain)
    chain = w("deadlock", "first" + past, rank=f.cycle[0], call=w.call(f.calls[0]), rest=chain)
    behind = "".join(w("deadlock", "behind" + past, ranks=w.ranks(b.ranks), call=w.call(b.call),
                       on=",".join(map(str, b.on))) for b in f.behind)
    took = "" if f.took_s is None else w.num(f.took_s, ".1f")
    return w("deadlock", f.state, took=took, cycle=chain, behind=behind)


def _ended_unheard(f: fx.EndedUnheard, w: _Words) -> str:
    return w("lost_rank", "unheard", rank=f.rank, how=w.how(f.code))


def _ended_no_goodbye(f: fx.EndedNoGoodbye, w: _Words) -> str:
    return w("lost_rank", "no_goodbye", rank=f.rank, how=w.how(f.code), last=w.last(f.last))


def _left_silent(f: fx.LeftSilent, w: _Words) -> str:
    return w("lost_rank", "left_silent", rank=f.rank, silent=w.num(f.silent_s, ".1f"),
             left=w.ranks(f.left), last=w.last(f.last))


def _stuck(stuck: tuple[tuple[int, fx.Call], ...], w: _Words) -> str:
    """``; rank 0 is stuck in all_reduce #1, ...``: of many, the ranks stuck in the same call
    said once; "" for none."""
    if len(stuck) <= i18n.LISTED_RANKS:
        parts = [w("lost_rank", "stuck", rank=r, call=w.call(c)) for r, c in stuck]
    else:
        calls: dict[str, list[int]] = {}
        for r, c in stuck:
            calls.setdefault(w.call(c), []).append(r)
        parts = [w("lost_rank", "stuck", rank=rs[0], call=call) if len(rs) == 1
                 else w("lost_rank", "stuck_many", ranks=w.ranks(sorted(rs)), call=call)
                 for call, rs in calls.items()]
    return "; " + ", ".join(parts) if parts else ""


def _lost(f: fx.Lost, w: _Words) -> str:
    return w("lost_rank", "lost", rank=f.rank, silent=w.num(f.silent_s, ".1f"),
             last=w.last(f.last), stuck=_stuck(f.stuck, w))


def _lost_node(f: fx.LostNode, w: _Words) -> str:
    return w("lost_rank", "node", host=f.host, ranks=w.ranks(f.ranks),
             silent=w.num(f.silent_s, ".1f"), last=w.last(f.last), stuck=_stuck(f.stuck, w))


def _replaced(f: fx.Replaced, w: _Words) -> str:
    return w("lost_rank", "replaced", rank=f.rank, job=f.job, pid=f.pid)


def _signature(s: fx.Signature) -> str:
    dtype = f" {s.dtype}" if s.dtype else ""
    return f"{s.op} ({s.size} B{dtype})"


def _mismatch(f: fx.Mismatch, w: _Words) -> str:
    odd = "; ".join(w("mismatch", "odd", rank=w.ranks((o.rank,)), call=_signature(o.call),
                      at=w.at(o.where)) for o in f.odd)
    late = w("mismatch", "late", out=w.ranks(f.out)) if f.out else ""
    return w("mismatch", "line", seq=f.seq, group=w.group(f.group), odd=odd,
             same=w.ranks(f.same), call=_signature(f.call), at=w.at(f.where), late=late)


def _slow_pair(f: fx.SlowPair, w: _Words) -> str:
    return w("slow", "pair", op=f.op, src=f.src, dst=f.dst, size=f.size,
             median=w.num(f.median_ms, ".1f"), ratio=w.num(f.ratio, ".0f"),
             others=w.num(f.others_ms, ".1f"))


def _slow_group(f: fx.SlowGroup, w: _Words) -> str:
    return w("slow", "group", op=f.op, size=f.size, group=w.group(f.group), n=len(f.group),
             median=w.num(f.median_ms, ".1f"), ratio=w.num(f.ratio, ".0f"),
             others=w.num(f.others_ms, ".1f"))


def _resolved(f: fx.Resolved, w: _Words) -> str:
    return w("resolved", "resolved" if f.job is None else "ended", took=w.num(f.took_s, ".1f"),
             job=f.job, finding=say(f.ended, w.lang))


def _words(f: fx.Words, w: _Words) -> str:
    """Words recorded in the languages a recording had then, each a field of ``Words`` named
    by its code: English where they lack the language."""
    recorded = getattr(f, w.lang, None)
    if recorded is None:
        return f.en
    return _QUANTITY.sub(lambda m: number(m.group(0), w.lang), recorded)


def _first_end(f: fx.FirstEnd, w: _Words) -> str:
    how = "" if f.code is None else w("first_end", "how", how=w.how(f.code))
    if f.last is None:
        after = w("first_end", "no_op")
    elif f.during:
        after = w("first_end", "during", call=w.call(f.last), at=w.at(f.where))
    elif f.after_ms is None:
        after = w("first_end", "after_untimed", call=w.call(f.last), at=w.at(f.where))
    else:
        after = w("first_end", "after", took=w.took(f.after_ms / 1e3), call=w.call(f.last),
                  at=w.at(f.where))
    inside = "".join(
        w("first_end", "inside", ranks=w.ranks(i.ranks), call=w.call(i.call), at=w.at(i.where),
          stopped=w("first_end", "stopped", ranks=w.ranks(i.ranks)) if i.stopped else "")
        for i in f.inside)
    return w("first_end", "line", rank=f.rank, how=how, after=after, inside=inside)


_SAY: dict[type, Callable[[Any, _Words], str]] = {
    fx.Straggler: _straggler, fx.Hang: _hang, fx.Failed: _failed, fx.P2PWait: _p2p,
    fx.Deadlock: _deadlock, fx.EndedUnheard: _ended_unheard,
    fx.EndedNoGoodbye: _ended_no_goodbye, fx.LeftSilent: _left_silent, fx.Lost: _lost,
    fx.LostNode: _lost_node,
    fx.Replaced: _replaced, fx.Mismatch: _mismatch, fx.SlowPair: _slow_pair,
    fx.SlowGroup: _slow_group, fx.Resolved: _resolved, fx.Words: _words,
    fx.FirstEnd: _first_end}
