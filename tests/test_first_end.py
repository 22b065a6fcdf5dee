"""How a failed run ended, told first (commviz/viewer/diagnose/ending.py): scripted messages,
the harvesters' ``gone`` notices among them, and a frozen clock in; the account out."""

from __future__ import annotations

import json

from fakes import T0_NS, FakeClock, bye, heartbeat, op_batch

from commviz.viewer.diagnose import Diagnosis, by_cause
from commviz.viewer.diagnose import facts as fx
from commviz.viewer.model import Model
from commviz.wire import protocol

G3 = {0: ("0", (0, 1, 2))}
SITES = {0: ("/job/train.py", 31)}
MS = 1_000_000


def _rec(seq: int, start_ms: float, end_ms: float | None, **kw) -> dict:
    start = T0_NS + round(start_ms * MS)
    return {"id": seq, "op": "all_reduce", "seq": seq, "bytes_in": 16, "bytes_out": 16,
            "t_start": start, "t_end": -1 if end_ms is None else T0_NS + round(end_ms * MS),
            **kw}


def _gone(rank: int, at_ms: float, order: int, code: int | None = None) -> protocol.Gone:
    return protocol.Gone(rank, 1000 + rank, T0_NS + round(at_ms * MS), order, code, 1, 0)


def _run(*messages) -> tuple[Model, Diagnosis]:
    clock = FakeClock()
    model = Model(clock)
    diag = Diagnosis(model, wall_ns=clock.wall_ns)
    model.apply([heartbeat(r, 3) for r in range(3)])
    # 137 all_reduces on every rank, the last ending at 137 ms
    model.apply([op_batch(r, [_rec(s, s - 0.5, s) for s in range(1, 138)], G3, SITES)
                 for r in range(3)])
    model.apply(list(messages))
    return model, diag


def _account(diag: Diagnosis, ended=(0, 1, 2)):
    found = [f for f in diag.finish(ended) if type(f.facts) is fx.FirstEnd]
    return found[0] if found else None


def test_the_first_rank_to_end_is_told_with_how_after_what_and_where_the_others_were():
    model, diag = _run(
        op_batch(0, [_rec(138, 137.2, None, flags=protocol.FLAG_RECOVERED)], G3, SITES),
        op_batch(2, [_rec(138, 137.3, None, flags=protocol.FLAG_RECOVERED)], G3, SITES),
        _gone(1, 137.4, 1), _gone(0, 160, 2), _gone(2, 161, 3))
    model.process_ended(1, -9)   # as torchrun's summary says
    model.process_ended(0, -15)
    model.process_ended(2, -15)
    f = _account(diag)
    assert f.type == "lost_rank" and f.ranks == (1,)
    assert f.facts == fx.FirstEnd(1, -9, f.facts.after_ms, fx.Call("all_reduce", -1, 137),
                                  "train.py:31", (fx.Inside((0, 2), fx.Call("all_reduce", -1,
                                                                            138),
                                                            "train.py:31", True),))
    assert round(f.facts.after_ms, 1) == 0.4
    assert f.message == ("rank 1 ended first (killed by SIGKILL) 0.4 ms after all_reduce #137 "
                         "at train.py:31; ranks 0,2 were in all_reduce #138 at train.py:31 and "
                         "were stopped by the launcher")
    assert f.text("pt") == ("rank 1 terminou primeiro (morto por SIGKILL) 0,4 ms depois de "
                            "all_reduce #137 em train.py:31; os ranks 0,2 estavam em all_reduce "
                            "#138 em train.py:31 e foram parados pelo lançador")
    assert f.text("es").startswith("el rank 1 terminó primero (matado por SIGKILL) 0,4 ms")
    # recorded as facts, read back the same
    assert fx.from_json(json.loads(json.dumps(fx.to_json(f.facts)))) == f.facts
    # and it stands for rank 1's own lost finding; ranks 0 and 2, stopped, are no lost ranks
    assert by_cause(diag.findings()) == [f]


def test_how_is_the_harvesters_code_when_no_launcher_said_and_left_out_when_unknown():
    model, diag = _run(_gone(1, 140, 1, code=17), _gone(0, 141, 2))
    f = _account(diag)
    assert f.message.startswith("rank 1 ended first (exit 17) 3.0 ms after all_reduce #137")
    model, diag = _run(_gone(2, 150, 1))
    assert _account(diag).message.startswith("rank 2 ended first 13.0 ms after")


def test_a_rank_that_ended_inside_an_op_is_said_to_have_ended_in_it():
    model, diag = _run(
        op_batch(0, [_rec(138, 137.2, None, flags=protocol.FLAG_RECOVERED)], G3, SITES),
        _gone(0, 137.4, 1, code=-6))
    f = _account(diag)
    assert f.message == ("rank 0 ended first (killed by SIGABRT) inside all_reduce #138 at "
                         "train.py:31")


def test_no_account_without_the_harvesters_notices_or_when_the_first_said_goodbye():
    model, diag = _run()
    assert _account(diag) is None
    model, diag = _run(bye(0, T0_NS + 140 * MS), _gone(0, 140, 1, code=0), _gone(1, 150, 2))
    assert _account(diag) is None
    # nor after an error of its own: the findings of the op it failed in say it
    model, diag = _run(bye(0, T0_NS + 140 * MS), _gone(0, 140, 1, code=1), _gone(1, 150, 2))
    assert _account(diag) is None


def test_the_account_is_told_live_the_moment_a_harvester_says_and_again_with_more():
    """The viewer need not wait a second of silence to call rank 1 lost: its harvester said
    how it ended, so the next pass tells the account, and no silence makes another finding
    of it. What the launcher says afterwards (the others stopped) is told again."""
    model, diag = _run(
        op_batch(0, [_rec(138, 137.2, None, flags=protocol.FLAG_RECOVERED)], G3, SITES),
        op_batch(2, [_rec(138, 137.3, None, flags=protocol.FLAG_RECOVERED)], G3, SITES),
        _gone(1, 137.4, 1, code=-9))
    first = diag.update()
    (f,) = [f for f in first if f.type == "lost_rank"]
    assert f.message == ("rank 1 ended first (killed by SIGKILL) 0.4 ms after all_reduce #137 "
                         "at train.py:31; ranks 0,2 were in all_reduce #138 at train.py:31")
    model.clock.advance(5.0)  # silent long since: still the account alone
    later = diag.update()
    assert [x for x in later if x.type == "lost_rank"] == []
    model.apply([heartbeat(0, 3), heartbeat(2, 3)])  # the others are heard from, waiting
    # what they hang in without it says how it ended, not how long it has been quiet
    (hang,) = [x for x in first + later + diag.update() if x.type == "hang"]
    assert "(1: ended (killed by SIGKILL); its last record: all_reduce #137)" in hang.message
    assert "(1: terminou (morto por SIGKILL);" in hang.text("pt")
    model.process_ended(0, -15)
    model.process_ended(2, -15)
    model.apply([_gone(0, 160, 2), _gone(2, 161, 3)])
    (again,) = [x for x in diag.update() if x.type == "lost_rank"]
    assert again.key == f.key and again.since == f.since
    assert again.message.endswith("and were stopped by the launcher")
    assert [x for x in diag.finish((0, 1, 2)) if x.type == "lost_rank"] == []  # nothing new
    # (and ranks 0 and 2 hung in #138 without it, as they did)
    assert [x for x in by_cause(diag.findings()) if x.type == "lost_rank"] == [again]


def test_the_op_the_others_failed_in_is_named_at_once_once_nobody_waits_in_it():
    """Rank 1 was killed; ranks 0 and 2 failed in all_reduce #138 within milliseconds, and
    the job ended 0.2 s later, well within ENDED_GRACE_S of rank 1's end: the op is a failed
    one now (nobody is left to wait for a backend to notice), not after a grace, nor never."""
    failed = protocol.FLAG_FAILED
    model, diag = _run(
        op_batch(0, [_rec(138, 137.2, 137.6, flags=failed)], G3, SITES),
        op_batch(2, [_rec(138, 137.3, 137.7, flags=failed)], G3, SITES),
        bye(0, T0_NS + 138 * MS), bye(2, T0_NS + 138 * MS), _gone(1, 137.4, 1, code=-9))
    model.clock.advance(0.2)
    (f,) = [x for x in diag.update() if x.type == "failed"]
    assert (f.ranks, f.seq, f.facts.failed) == ((1,), 138, (0, 2))
    assert f.message.endswith("(1: ended (killed by SIGKILL); its last record: all_reduce #137)")
