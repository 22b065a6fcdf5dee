"""Pure diagnosis tests: scripted messages and a frozen clock in, findings out.

Times: FakeClock's monotonic seconds are the model's clock (last_seen, when an in-flight
record arrived, how long a wait lasted); its wall_ns stamps the findings. Record times
(t_start, t_end: the ranks' wall clocks) only matter between ranks (who arrived last).
"""

import json
from dataclasses import replace

import numpy as np
import pytest
from fakes import T0_NS, FakeClock, bye, heartbeat, op_batch

from commviz.viewer import diagnose, recording
from commviz.viewer import plain_text as text
from commviz.viewer.diagnose import Diagnosis, hangs, recorded_facts, recorded_text, stragglers
from commviz.viewer.diagnose.facts import Words
from commviz.viewer.diagnose.finding import resolved
from commviz.viewer.findings_text import advice
from commviz.viewer.model import Model
from commviz.wire import protocol

G4 = {0: ("0", (0, 1, 2, 3))}
MS = 1_000_000


def _setup(world=4):
    clock = FakeClock()
    model = Model(clock)
    diag = Diagnosis(model, wall_ns=clock.wall_ns)
    model.apply([heartbeat(r, world) for r in range(world)])
    return clock, model, diag


def _tick(clock, model, seconds, ranks=range(4)):
    """Time passes; the live ``ranks`` keep sending heartbeats."""
    clock.advance(seconds)
    model.apply([heartbeat(r, 4) for r in ranks])


def _rec(seq, start_ms, end_ms=None, op="all_reduce", nbytes=4096, **kw):
    start = T0_NS + round(start_ms * MS)
    end = -1 if end_ms == -1 else T0_NS + round((start_ms + 1 if end_ms is None else end_ms) * MS)
    return {"id": seq, "op": op, "seq": seq, "bytes_in": nbytes, "bytes_out": nbytes,
            "t_start": start, "t_end": end, **kw}


def _instance(seq, late_rank=None, late_ms=0.0, base_ms=None, took_ms=1.0, world=4):
    """One all_reduce instance: every rank arrives at base (+0.1 ms per rank), the late rank
    ``late_ms`` after the others; all end ``took_ms`` after the last arrival."""
    base = seq * 1000.0 if base_ms is None else base_ms
    starts = {r: base + 0.1 * r + (late_ms if r == late_rank else 0.0) for r in range(world)}
    end = max(starts.values()) + took_ms
    return [op_batch(r, [_rec(seq, starts[r], end)], G4) for r in range(world)]


def _types(found):
    return [(f.type, f.ranks, f.group, f.seq) for f in found]


# ---- straggler -----------------------------------------------------------------------------

def test_straggler_named_after_three_late_instances_with_lateness_and_waiting():
    clock, model, diag = _setup()
    found = []
    for seq in (1, 2):
        model.apply(_instance(seq, late_rank=2, late_ms=50))
        found += diag.update()
    assert found == []
    model.apply(_instance(3, late_rank=2, late_ms=50))
    (f,) = diag.update()
    assert _types([f]) == [("straggler", (2,), (0, 1, 2, 3), 3)]
    assert "rank 2 arrived last at all_reduce in group 0-3 3 times in a row" in f.message
    assert "on average 50 ms after the others" in f.message
    # the three others waited about 50 ms each, three times: 0.45 s (+ the 0.1 ms offsets) of
    # rank time, said so: they waited at the same time, 0.15 s of wall time (user trial: the
    # sum read as wall time)
    assert "who waited 0.15 s each for it in all (0.45 s of rank time)" in f.message
    assert "rank 2 chegou por último" in f.text("pt")
    assert "que esperaram por ele 0,15 s cada um no total (0,45 s de tempo de rank somados)" \
        in f.text("pt")
    assert diag.findings() == [f] and not hasattr(model, "findings")  # the model keeps none
    model.apply(_instance(4, late_rank=2, late_ms=50))
    assert diag.update() == []  # still the same finding, kept up to date
    assert "4 times in a row" in diag.findings()[0].message


def test_late_exactly_once_or_twice_is_no_straggler():
    clock, model, diag = _setup()
    found = []
    for seq, late in enumerate([1, None, 1, 1, None, 3, None, 2, 2], start=1):
        model.apply(_instance(seq, late_rank=late, late_ms=80))
        found += diag.update()
    assert found == []


def test_straggler_clears_after_three_instances_on_time():
    clock, model, diag = _setup()
    for seq in range(1, 4):
        model.apply(_instance(seq, late_rank=1, late_ms=30))
    assert _types(diag.update()) == [("straggler", (1,), (0, 1, 2, 3), 3)]
    _tick(clock, model, 2.0)
    for seq in (4, 5):
        model.apply(_instance(seq))
    assert diag.update() == []
    model.apply(_instance(6))
    (r,) = diag.update()
    assert (r.type, r.ranks, r.about, r.duration_s) == ("resolved", (1,), "straggler", 2.0)
    assert diag.findings() == []


G3 = {0: ("0", (0, 1, 2))}


def _step(k, late=None, late_at="all_reduce", late_ms=300.0):
    """One training step of 3 ranks (user trial): all_reduce, all_gather, barrier in group
    0-2, each its own instance; ``late`` arrives ``late_ms`` late at the ``late_at`` one, and
    everyone leaves it together, so the next ones are on time."""
    base, batches = k * 10_000.0, {r: [] for r in range(3)}
    for i, op in enumerate(("all_reduce", "all_gather", "barrier")):
        seq = 3 * k + i + 1
        starts = {r: base + i * 1000 + 0.1 * r + (late_ms if (r, op) == (late, late_at) else 0)
                  for r in range(3)}
        end = max(starts.values()) + 1
        for r in range(3):
            batches[r].append(_rec(seq, starts[r], end, op=op, nbytes=4096 if i < 2 else 0))
    return [op_batch(r, recs, G3) for r, recs in batches.items()]


def test_a_rank_late_at_each_steps_first_collective_is_named_after_three_steps():
    """The collectives after the late one are on time (everyone leaves it together): they do
    not hide a rank that is last at every step's all_reduce (user trial, 3 ranks)."""
    clock, model, diag = _setup(world=3)
    for k in (1, 2):
        model.apply(_step(k, late=2))
        assert diag.update() == []
    model.apply(_step(3, late=2))
    (f,) = diag.update()
    assert _types([f]) == [("straggler", (2,), (0, 1, 2), 10)]
    assert "rank 2 arrived last at all_reduce in group 0-2 3 times in a row" in f.message
    assert "on average 300 ms after the others" in f.message
    # ranks 0 and 1 waited about 0.3 s each at each of the 3 steps
    assert "who waited 0.90 s each for it in all (1.80 s of rank time)" in f.message


def test_a_rank_late_once_at_each_of_different_collectives_is_no_straggler():
    clock, model, diag = _setup(world=3)
    for k, op in enumerate(("all_reduce", "all_gather", "barrier", "all_reduce"), start=1):
        model.apply(_step(k, late=1, late_at=op))
    assert diag.update() == []


def test_overlapping_waits_are_counted_once():
    """DDP's two bucket all_reduces overlap: rank 0 waits for rank 2 in both at once, which
    is 0.3 s of waiting, not 0.6 s (user trial: 'waited 22.99 s' in a 12 s job)."""
    clock, model, diag = _setup(world=3)
    for k in (1, 2, 3):
        b, seq = k * 10_000.0, 2 * k
        a = {0: b, 1: b + 0.1, 2: b + 300}
        c = {0: b + 1, 1: b + 1.1, 2: b + 300.5}
        model.apply([op_batch(r, [_rec(seq - 1, a[r], b + 301, nbytes=4096),
                                  _rec(seq, c[r], b + 302, nbytes=8192)], G3)
                     for r in range(3)])
    (f,) = diag.update()
    assert (f.type, f.ranks) == ("straggler", (2,))
    assert "arrived last at all_reduce in group 0-2 3 times in a row" in f.message
    # per step: rank 0 waited 300.5 ms, rank 1 300.4 ms (the sum would be 3.60 s)
    assert "who waited 0.90 s each for it in all (1.80 s of rank time)" in f.message
    assert "que esperaram por ele 0,90 s cada um no total (1,80 s de tempo de rank" in f.text("pt")


def test_every_late_arrival_is_counted_per_rank_in_a_row_or_not():
    """A rank that stalls now and then is no straggler, yet the others wait for it each
    time (user trial: a DDP job whose rank 1 slept 0.3 s every 50 steps; 'no straggler')."""
    clock, model, diag = _setup()
    for seq, late in enumerate([1, None, None, 1, None, 3, None, 1, None], start=1):
        model.apply(_instance(seq, late_rank=late, late_ms=300 if late == 1 else 40))
    assert diag.update() == []  # no finding
    (r1, one), (r3, three) = diag.late_arrivals()
    assert (r1, one.count, one.op, one.seq) == (1, 3, "all_reduce", 1)
    # from the last but one arrival (rank 3 at +0.3 ms) to rank 1's (+300.1 ms), three times
    assert one.waited_ns == 3 * round(299.8 * MS) and one.longest_ns == round(299.8 * MS)
    assert (r3, three.count, three.seq, three.waited_ns) == (3, 1, 6, round(40.1 * MS))
    assert text.late_line(diag.late_arrivals()) == (
        "late arrivals (the others waited): rank 1: 3×, 899 ms in all, longest 300 ms "
        "(all_reduce #1) · rank 3: 1×, 40.1 ms (all_reduce #6)")
    assert text.late_line(diag.late_arrivals(), "pt").startswith(
        "atrasos (os outros esperaram): rank 1: 3×, 899 ms ao todo, o maior 300 ms")


def test_a_late_arrival_in_a_subgroup_names_the_group_its_number_belongs_to():
    """'(all_reduce #1)' on a subgroup read as the world's #1, a broadcast (user trial)."""
    clock, model, diag = _setup()
    sub = {0: ("0", (0, 1, 2, 3)), 1: ("sub", (0, 2))}
    for seq in (1, 2):
        model.apply([op_batch(r, [_rec(seq, seq * 1000.0 + (300 if r == 2 else 0.1 * r),
                                       seq * 1000.0 + 301, gid=1)], sub) for r in (0, 2)])
    model.apply(_instance(3, late_rank=1, late_ms=300))
    assert text.late_line(diag.late_arrivals()) == (
        "late arrivals (the others waited): rank 2: 2×, 600 ms in all, longest 300 ms "
        "(all_reduce #1 in group 0,2) · rank 1: 1×, 300 ms (all_reduce #3)")


def test_late_arrivals_are_all_counted_when_many_instances_come_at_once():
    """A replay (commviz stats) applies a recording in big batches: a late arrival among
    more than a window's worth of instances counts as it did live (user trial: stats said
    2x where the live run had counted 7)."""
    clock, model, diag = _setup()
    late_at = {5, 45, 85, 125}
    batch = [msg for seq in range(1, 3 * diagnose.WINDOW)
             for msg in _instance(seq, late_rank=1 if seq in late_at else None, late_ms=300)]
    model.apply(batch)
    ((rank, late),) = diag.late_arrivals()
    assert (rank, late.count, late.seq) == (1, 4, 5)


def test_a_late_arrival_seen_at_overlapping_ops_counts_once():
    """DDP's bucket all_reduces wait for the same late rank at once: one late arrival."""
    clock, model, diag = _setup(world=3)
    b = 10_000.0
    a = {0: b, 1: b + 0.1, 2: b + 300}
    c = {0: b + 1, 1: b + 1.1, 2: b + 300.5}
    model.apply([op_batch(r, [_rec(1, a[r], b + 301, nbytes=4096),
                              _rec(2, c[r], b + 302, nbytes=8192)], G3) for r in range(3)])
    model.apply([op_batch(r, [_rec(3, b + 1000 + (200 if r == 2 else r), b + 1201)], G3)
                 for r in range(3)])
    diag.update()
    ((rank, late),) = diag.late_arrivals()
    # 299.9 ms at the first bucket, 0.5 ms more at the second, then 199 ms once more
    assert (rank, late.count) == (2, 2)
    assert late.waited_ns == round(299.9 * MS) + round(0.5 * MS) + round(199 * MS)
    assert (late.longest_ns, late.seq) == (round(300.4 * MS), 2)


def test_late_arrivals_below_the_threshold_or_of_an_earlier_job_are_not_shown():
    clock, model, diag = _setup()
    for seq in range(1, 5):
        model.apply(_instance(seq, late_rank=2, late_ms=4))  # under the 10 ms floor
    diag.update()
    assert diag.late_arrivals() == []
    model.apply(_instance(5, late_rank=2, late_ms=50))
    assert [r for r, _ in diag.late_arrivals()] == [2]
    model.apply([bye(r) for r in range(4)])
    model.apply([protocol.Heartbeat(r, 4, "node0", 9000 + r, "gloo", "cpu", T0_NS, 0, {})
                 for r in range(4)])  # the next job's processes, under the same rank numbers
    assert diag.late_arrivals() == []


def test_lateness_is_judged_against_the_ops_own_duration():
    """50 ms late at an op that itself takes 100 ms is normal jitter, not a straggler."""
    clock, model, diag = _setup()
    for seq in range(1, 7):
        model.apply(_instance(seq, late_rank=3, late_ms=50, took_ms=100))
    assert diag.update() == []


def test_a_few_ms_late_is_below_the_floor():
    clock, model, diag = _setup()
    for seq in range(1, 8):
        model.apply(_instance(seq, late_rank=3, late_ms=4))
    assert diag.update() == []


# ---- hang ---------------------------------------------------------------------------------

def _in_flight(rank, seq, start_ms, op="all_reduce", op_id=None, **kw):
    rec = _rec(seq, start_ms, -1, op=op, **kw)
    rec["id"] = seq if op_id is None else op_id
    return op_batch(rank, [rec], G4)


def test_hang_names_op_group_seq_inside_and_missing_with_what_they_do():
    clock, model, diag = _setup()
    model.apply(_instance(1))  # rank 3's last op: all_reduce #1, ended at 1001.3 ms
    clock.set_wall_ns(T0_NS + 2000 * MS)
    model.apply([_in_flight(r, 2, 2000) for r in range(3)])
    clock.advance(0.9)
    model.apply([heartbeat(r, 4) for r in range(4)])
    assert diag.update() == []  # not yet: 0.9 s
    clock.advance(0.2)
    model.apply([heartbeat(r, 4) for r in range(4)])
    (f,) = diag.update()
    assert _types([f]) == [("hang", (3,), (0, 1, 2, 3), 2)]
    assert f.message.startswith("all_reduce #2 at demo.py:12 in group 0-3 hangs for 1.1 s: ranks "
                                "0,1,2 inside, rank 3 missing (3: idle since its last op, "
                                "all_reduce, ")
    assert set(f.links) == {(0, 3), (1, 3), (2, 3)}
    # rank 3 arrives: the instance completes and the hang is reported resolved, with its length
    clock.advance(0.5)
    model.apply([op_batch(r, [_rec(2, 2000 + (1600 if r == 3 else 0), 3601)], G4)
                 for r in range(4)])
    (r,) = diag.update()
    assert (r.type, r.ranks, r.seq, r.about, r.duration_s) == ("resolved", (3,), 2, "hang", 0.5)
    assert r.message.startswith("resolved after 0.5 s: all_reduce #2")
    assert diag.findings() == []


def test_a_rank_never_heard_from_is_not_called_missing():
    clock = FakeClock()
    model = Model(clock)
    diag = Diagnosis(model, wall_ns=clock.wall_ns)
    model.apply([heartbeat(r, 4) for r in range(3)])  # rank 3's first reports are late
    model.apply([_in_flight(r, 1, 0) for r in range(3)])
    _tick(clock, model, 1.5, ranks=range(3))
    assert diag.update() == []
    model.apply([heartbeat(3, 4)])
    assert _types(diag.update()) == [("hang", (3,), (0, 1, 2, 3), 1)]


def test_a_rank_whose_records_of_earlier_all_reduces_are_on_their_way_is_not_missing():
    """Ranks 0, 1 and 3 completed all_reduce #1 and #2, which they could not without rank 2,
    and wait in #3; rank 2's heartbeats come, its records not yet (a loaded rank, CI): it is
    behind in its reports, not missing from #3. Once they come, and it is not in #3, it is."""
    clock, model, diag = _setup()
    for seq in (1, 2):
        model.apply([b for b in _instance(seq) if b.rank != 2])
    model.apply([_in_flight(r, 3, 3000) for r in (0, 1, 3)])
    _tick(clock, model, 1.5)
    assert diag.update() == []
    model.apply([b for seq in (1, 2) for b in _instance(seq) if b.rank == 2])
    _tick(clock, model, 0.1)
    assert _types(diag.update()) == [("hang", (2,), (0, 1, 2, 3), 3)]


def test_a_rank_whose_records_of_an_all_reduce_never_came_is_missing_after_a_while():
    """Rank 2's records of all_reduce #1 and #2 were lost (a viewer started late, a drop): it
    is taken as behind in its reports only while they could still be held on its way."""
    clock, model, diag = _setup()
    for seq in (1, 2):
        model.apply([b for b in _instance(seq) if b.rank != 2])
    model.apply([_in_flight(r, 3, 3000) for r in (0, 1, 3)])
    clock.set_wall_ns(T0_NS + 2000 * MS)  # #2 ended at 2001.3 ms
    _tick(clock, model, 1.5)
    assert diag.update() == []
    clock.set_wall_ns(T0_NS + round((2001.3 + hangs.REPORTS_LATE_S * 1000) * MS))
    _tick(clock, model, 0.1)
    assert _types(diag.update()) == [("hang", (2,), (0, 1, 2, 3), 3)]


def test_a_rank_behind_in_its_reports_that_goes_silent_is_missing_at_once():
    """Rank 2's records of all_reduce #2 have not come, and it has gone silent (found lost):
    they will not come, and the hang of #3 is named without waiting for them."""
    clock, model, diag = _setup()
    for seq in (1, 2):
        model.apply([b for b in _instance(seq) if b.rank != 2])
    model.apply([_in_flight(r, 3, 3000) for r in (0, 1, 3)])
    clock.set_wall_ns(T0_NS + 2100 * MS)  # #2 ended at 2001.3 ms
    _tick(clock, model, 0.6, ranks=(0, 1, 3))
    assert diag.update() == []
    _tick(clock, model, 0.6, ranks=(0, 1, 3))  # rank 2 silent 1.2 s: lost
    diag.update()
    _tick(clock, model, 0.3, ranks=(0, 1, 3))  # (confirmed) #2 ended 1.5 s ago
    assert ("hang", (2,), (0, 1, 2, 3), 3) in _types(diag.update() + diag.findings())


def test_an_earlier_broadcast_completed_is_no_proof_that_a_rank_took_part():
    """Only the root's part is needed for a broadcast to complete at the root: rank 2, in none
    of them, is missing from the all_reduce after them."""
    clock, model, diag = _setup()
    for seq in (1, 2):
        model.apply([op_batch(0, [_rec(seq, seq * 1000.0, op="broadcast")], G4)])
    model.apply([_in_flight(r, 3, 3000) for r in (0, 1, 3)])
    _tick(clock, model, 1.5)
    assert _types(diag.update()) == [("hang", (2,), (0, 1, 2, 3), 3)]


def test_ranks_all_inside_with_different_ops_is_a_mismatch_not_a_hang():
    clock, model, diag = _setup()
    model.apply([_in_flight(r, 1, 0) for r in (0, 1)])
    model.apply([_in_flight(2, 1, 10, op="barrier", nbytes=0, dtype=None),
                 _in_flight(3, 1, 10, op="barrier", nbytes=0, dtype=None)])
    _tick(clock, model, 1.2)
    found = diag.update()
    # same group and seq, different ops: a mismatch, and nobody is missing: no hang
    assert _types(found) == [("mismatch", (2, 3), (0, 1, 2, 3), 1)]


def test_hang_timed_on_the_viewers_clock_not_the_ranks():
    """A rank whose clock is an hour behind: its ops look old on arrival, yet are not hung."""
    clock, model, diag = _setup()
    model.apply([_in_flight(r, 1, -3600_000) for r in range(3)])
    _tick(clock, model, 0.5)
    assert diag.update() == []
    _tick(clock, model, 0.5)
    assert _types(diag.update()) == [("hang", (3,), (0, 1, 2, 3), 1)]


def test_history_keeps_findings_and_resolutions():
    clock, model, diag = _setup()
    model.apply([_in_flight(1, 1, 0, op="recv", peer=0)])
    _tick(clock, model, 1.1)
    diag.update()
    model.apply([op_batch(0, [_rec(1, 1100, 1101, op="send", peer=1)], G4),
                 op_batch(1, [{**_rec(1, 0, 1101, op="recv", peer=0), "id": 1}], G4)])
    diag.update()
    assert [f.type for f in diag.history] == ["hang", "resolved"]
    assert diag.findings() == []


def test_hang_becomes_failed_when_the_waiters_fail_at_the_timeout():
    clock, model, diag = _setup()
    model.apply([_in_flight(r, 1, 0) for r in range(3)])
    _tick(clock, model, 1.1)
    assert _types(diag.update()) == [("hang", (3,), (0, 1, 2, 3), 1)]
    _tick(clock, model, 5)  # the process group's timeout: the waiting ops end, failed
    model.apply([op_batch(r, [_rec(1, 0, 6000, flags=8)], G4) for r in range(3)])
    (f,) = diag.update()  # the same condition, now what it is: no "resolved" in between
    assert _types([f]) == [("failed", (3,), (0, 1, 2, 3), 1)]
    # the failure is the timeout ending the hang: said so, with the hang's advice
    assert f.message == ("all_reduce #1 at demo.py:12 in group 0-3 hung until a timeout ended it "
                         "after 6.0 s: ranks 0,1,2 failed in it waiting for rank 3 (3: no op yet)")
    assert f.text("pt") == ("all_reduce #1 em demo.py:12 no grupo 0-3 ficou travado até um "
                            "timeout encerrá-lo após 6,0 s: os ranks 0,1,2 falharam nele "
                            "esperando pelo rank 3 (3: nenhuma operação ainda)")
    assert f.hung and f.topic == "timeout"
    assert _types(diag.findings()) == [("failed", (3,), (0, 1, 2, 3), 1)]
    _tick(clock, model, 5, ranks=range(3))  # rank 3, still idle, then silent: words kept
    diag.update()
    assert [g.message for g in diag.findings() if g.type == "failed"] == [f.message]


def test_failed_collective_whose_peer_exited_is_named_at_once_and_does_not_grow():
    """The trial's crash.py: rank 1 raises and says goodbye, then rank 0's all_reduce fails
    (connection closed by peer) 0.32 s after it entered; no live hang, nothing counting up."""
    clock, model, diag = _setup(world=2)
    g2 = {0: ("0", (0, 1))}
    model.apply([op_batch(r, [_rec(1, 0, 1)], g2) for r in (0, 1)])
    model.apply([bye(1)])
    clock.advance(0.4)
    model.apply([op_batch(0, [_rec(2, 100, 420, flags=8)], g2), bye(0)])
    (f,) = diag.update()
    assert _types([f]) == [("failed", (1,), (0, 1), 2)]
    assert f.message == ("rank 0 failed in all_reduce #2 at demo.py:12 in group 0,1 after 0.3 s: "
                         "no record from rank 1 for #2 (1: exited)")
    assert f.text("pt") == ("rank 0 falhou em all_reduce #2 em demo.py:12 no grupo 0,1 após 0,3 "
                            "s: nenhum registro do rank 1 para o #2 (1: já saiu)")
    assert "hang" not in f.message
    for _ in range(3):
        clock.advance(5)
        assert diag.update() == []
        assert [g.message for g in diag.findings()] == [f.message]


def test_failed_collective_whose_peer_crashed_unheard_says_only_what_is_known():
    """The trial's size mismatch: rank 0 aborts inside all_reduce #2 (gloo: "Received data
    size doesn't match expected size") before its emitter sends the record, rank 1 fails
    (connection reset) and says goodbye. Rank 0 was inside: it is not said to have never
    come, nor that its sizes differed (nothing shows it)."""
    clock, model, diag = _setup(world=2)
    g2 = {0: ("0", (0, 1))}
    model.apply([op_batch(r, [_rec(1, 0, 1)], g2) for r in (0, 1)])
    clock.advance(0.1)
    model.apply([op_batch(1, [_rec(2, 100, 110, nbytes=8192, flags=8)], g2), bye(1)])
    assert diag.update() == []  # rank 0's record may still be on its way
    clock.advance(1.1)
    (f,) = diag.update()
    assert _types([f]) == [("failed", (0,), (0, 1), 2)]
    assert "never" not in f.message and "mismatch" not in f.message
    # in ms under 0.1 s: "after 0.0 s" read as no time at all (user trial)
    assert f.message == ("rank 1 failed in all_reduce #2 at demo.py:12 in group 0,1 after 10.0 "
                         "ms: no record from rank 0 for #2 (0: silent for 1.2 s, no goodbye: it "
                         "may have crashed inside the call; its last record: all_reduce #1)")
    assert f.text("pt") == ("rank 1 falhou em all_reduce #2 em demo.py:12 no grupo 0,1 após 10,0 "
                            "ms: nenhum registro do rank 0 para o #2 (0: em silêncio há 1,2 s, "
                            "sem se despedir: pode ter caído dentro da chamada; seu último "
                            "registro: all_reduce #1)")
    assert "nunca" not in f.text("pt")


def test_failed_collective_waits_a_second_for_a_missing_rank_still_reporting():
    clock, model, diag = _setup(world=2)
    g2 = {0: ("0", (0, 1))}
    model.apply([op_batch(0, [_rec(1, 0, 300, flags=8)], g2)])
    assert diag.update() == []
    clock.advance(0.9)
    model.apply([heartbeat(r, 2) for r in (0, 1)])
    assert diag.update() == []  # rank 1's record of it may still be on its way
    clock.advance(0.2)
    model.apply([heartbeat(r, 2) for r in (0, 1)])
    assert _types(diag.update()) == [("failed", (1,), (0, 1), 1)]


def test_a_hang_stops_counting_once_every_rank_in_it_said_goodbye():
    clock, model, diag = _setup()
    model.apply([_in_flight(r, 1, 0) for r in range(3)])
    _tick(clock, model, 1.5)
    (f,) = diag.update()
    assert "hangs for 1.5 s" in f.message
    _tick(clock, model, 0.5)
    model.apply([bye(r) for r in range(4)])  # e.g. an async op never waited for
    clock.advance(10)
    diag.update()
    (f,) = diag.findings()
    assert "hung for 2.0 s, until the ranks exited: ranks 0,1,2 inside" in f.message
    assert "ficou travado 2,0 s, até os ranks saírem" in f.text("pt")
    clock.advance(10)
    diag.update()
    assert diag.findings()[0].message == f.message


def test_failed_send_whose_peer_exited_is_no_live_wait():
    clock, model, diag = _setup(world=2)
    g2 = {0: ("0", (0, 1))}
    model.apply([bye(1), op_batch(0, [_rec(1, 0, 250, op="send", peer=1, flags=8)], g2)])
    (f,) = diag.update()
    assert _types([f]) == [("failed", (1,), (0, 1), 1)]
    assert f.message == ("send 0 -> 1 #1 failed after 0.2 s waiting for its recv: no record of "
                         "it from rank 1 (exited)")
    clock.advance(5)
    diag.update()
    assert diag.findings()[0].message == f.message


def test_p2p_recv_without_send_and_send_without_recv():
    clock, model, diag = _setup()
    model.apply([_in_flight(1, 1, 0, op="recv", peer=0)])
    model.apply([_in_flight(2, 1, 0, op="send", peer=3)])
    _tick(clock, model, 1.1)
    found = diag.update()
    assert sorted(_types(found)) == [("hang", (0,), (0, 1), 1), ("hang", (3,), (2, 3), 1)]
    by_rank = {f.ranks: f.message for f in found}
    assert by_rank[(0,)].startswith("recv at 1 from 0 #1 waits 1.1 s for its send: no "
                                    "record of it from rank 0 (no op yet)")
    assert by_rank[(3,)].startswith("send 2 -> 3 #1 waits 1.1 s for its recv")
    # rank 0 sends at last: the transfer completes, the recv's hang resolves
    model.apply([op_batch(0, [_rec(1, 1100, 1101, op="send", peer=1)], G4),
                 op_batch(1, [{**_rec(1, 0, 1101, op="recv", peer=0), "id": 1}], G4)])
    (r,) = diag.update()
    assert (r.type, r.ranks, r.about) == ("resolved", (0,), "hang")


def test_p2p_wait_whose_counterpart_is_posted_is_no_hang():
    clock, model, diag = _setup()
    model.apply([_in_flight(1, 1, 0, op="recv", peer=0),
                 op_batch(0, [_rec(1, 0, 1, op="send", peer=1)], G4)])
    _tick(clock, model, 3)
    assert diag.update() == []


def test_p2p_deadlock_cycle():
    clock, model, diag = _setup()
    model.apply([_in_flight(0, 1, 0, op="recv", peer=1), _in_flight(1, 1, 0, op="recv", peer=0)])
    _tick(clock, model, 1.5)
    found = diag.update()
    assert ("hang", (0, 1), None, None) in _types(found)
    (cycle,) = [f for f in found if f.key[0] == "deadlock"]
    assert cycle.message == ("deadlock: rank 0 (recv from 1 #1) waits on 1 (recv from 0 #1), "
                             "which waits on 0")
    assert cycle.text("pt") == ("deadlock (espera circular): rank 0 (recv de 1 #1) espera por 1 "
                                "(recv de 0 #1), que espera por 0")
    assert set(cycle.links) == {(0, 1), (1, 0)}


def test_collective_and_p2p_waits_make_a_cycle():
    """The hang demo's bug: 0,1,2 wait in all_reduce for 3, which waits in recv for 0."""
    clock, model, diag = _setup()
    model.apply([_in_flight(r, 3, 0) for r in range(3)])
    model.apply([_in_flight(3, 1, 0, op="recv", peer=0)])
    _tick(clock, model, 1.1)
    found = diag.update()
    assert sorted(_types(found), key=str) == sorted([
        ("hang", (3,), (0, 1, 2, 3), 3), ("hang", (0,), (0, 3), 1),
        ("hang", (0, 3, 1, 2), None, None)],
        key=str)
    (hang,) = [f for f in found if f.key[0] == "hang"]
    assert "(3: in recv from 0 #1 for 1.1 s)" in hang.message


def _hang_demo(clock, model, diag):
    """The hang demo's deadlock, found: 0,1,2 wait in all_reduce #3 for 3, which waits in
    recv #1 for 0."""
    model.apply([_in_flight(r, 3, 0) for r in range(3)])
    model.apply([_in_flight(3, 1, 0, op="recv", peer=0, op_id=9)])
    _tick(clock, model, 1.1)
    found = diag.update()
    (cycle,) = [f for f in found if f.key[0] == "deadlock"]
    return cycle


def test_a_deadlock_names_each_ranks_op_and_the_ranks_waiting_on_it():
    """User trial: 'deadlock: rank 0 waits on 3 waits on 0' left out ranks 1 and 2, which wait
    in the all_reduce too, and what each waits in."""
    cycle = _hang_demo(*_setup())
    assert (cycle.type, cycle.ranks) == ("hang", (0, 3, 1, 2))
    assert cycle.message == ("deadlock: rank 0 (all_reduce #3) waits on 3 (recv from 0 #1), "
                             "which waits on 0; ranks 1,2 (all_reduce #3) wait on 3 too")
    assert cycle.text("pt") == (
        "deadlock (espera circular): rank 0 (all_reduce #3) espera por 3 (recv de 0 #1), que "
        "espera por 0; os ranks 1,2 (all_reduce #3) também esperam por 3")
    assert set(cycle.links) == {(0, 3), (3, 0), (1, 3), (2, 3)}


def test_a_deadlock_ended_by_the_timeout_fails_as_its_hangs_do_and_they_name_it():
    """User trial: after the timeout the deadlock stayed a live hang, and the failed recv said
    rank 0 had 'exited' (it was in all_reduce #3 all along) with advice on data sizes."""
    clock, model, diag = _setup()
    _hang_demo(clock, model, diag)
    _tick(clock, model, 4.9)
    model.apply([op_batch(r, [_rec(3, 0, 6000, flags=8)], G4) for r in range(3)]
                + [op_batch(3, [{**_rec(1, 0, 6000, op="recv", peer=0, flags=8), "id": 9}], G4)]
                + [bye(r) for r in range(4)])
    found = {f.key[0]: f for f in diag.update()}
    assert {f.type for f in found.values()} == {"failed"}  # no "resolved" in between
    coll, recv, cycle = found["hang"], found["hang-p2p"], found["deadlock"]
    assert coll.message == ("all_reduce #3 at demo.py:12 in group 0-3 hung until a timeout ended "
                            "it after 6.0 s: ranks 0,1,2 failed in it waiting for rank 3 (3: in "
                            "recv from 0 #1); cause: the deadlock of ranks 0,3")
    assert recv.message == ("recv at 3 from 0 #1 hung until a timeout ended it after 6.0 s "
                            "waiting for its send: no record of it from rank 0 (in all_reduce "
                            "#3); cause: the deadlock of ranks 0,3")
    assert recv.text("pt") == (
        "recv em 3 de 0 #1 ficou travado até um timeout encerrá-lo após 6,0 s esperando pelo "
        "send: nenhum registro dele vindo do rank 0 (em all_reduce #3); causa: o deadlock "
        "(espera circular) dos ranks 0,3")
    assert cycle.ranks == (0, 3, 1, 2)
    assert cycle.message == ("deadlock, until a timeout ended it after 6.0 s: rank 0 "
                             "(all_reduce #3) waited on 3 (recv from 0 #1), which waited on 0; "
                             "ranks 1,2 (all_reduce #3) waited on 3 too")
    assert cycle.text("pt").startswith(
        "deadlock (espera circular), até um timeout encerrá-lo após 6,0 s: rank 0 (all_reduce "
        "#3) esperava por 3 (recv de 0 #1), que esperava por 0; os ranks 1,2 (all_reduce #3) "
        "também esperavam por 3")
    assert all(f.hung and f.topic == "timeout" for f in found.values())
    assert sorted(f.type for f in diag.findings()) == ["failed"] * 3
    clock.advance(10)
    assert diag.update() == []  # over: nothing more to say


def test_a_hang_keeps_what_it_found_when_the_missing_rank_times_out_and_exits_first():
    """CI: rank 3's recv timed out and it exited while ranks 0,1,2 still waited in all_reduce
    #3; the hang's words were taken again then, and its failure said '(3: exited)'."""
    clock, model, diag = _setup()
    _hang_demo(clock, model, diag)
    _tick(clock, model, 4.8)
    model.apply([op_batch(3, [{**_rec(1, 0, 6000, op="recv", peer=0, flags=8), "id": 9}], G4),
                 bye(3)])
    _tick(clock, model, 0.1)
    diag.update()
    model.apply([op_batch(r, [_rec(3, 0, 6000, flags=8)], G4) for r in range(3)]
                + [bye(r) for r in range(3)])
    diag.update()
    coll = next(f for f in diag.findings() if f.key[0] == "hang")
    assert coll.type == "failed"
    assert "waiting for rank 3 (3: in recv from 0 #1)" in coll.message, coll.message


def test_a_deadlock_whose_ranks_exited_waiting_says_until_when():
    clock, model, diag = _setup()
    _hang_demo(clock, model, diag)
    _tick(clock, model, 0.5)
    model.apply([bye(r) for r in range(4)])  # e.g. stopped by a signal
    clock.advance(5)
    diag.update()
    (cycle,) = [f for f in diag.findings() if f.key[0] == "deadlock"]
    assert cycle.type == "hang"
    assert cycle.message.startswith("deadlock, until the ranks exited: rank 0 (all_reduce #3) "
                                    "waited on 3")
    assert cycle.text("pt").startswith("deadlock (espera circular), até os ranks saírem: ")


def test_findings_in_the_order_of_what_explains_what():
    """User trial: the panel led with the newest finding, a failed recv, not the deadlock that
    made it. Causes lead (deadlock, lost rank, mismatch), then hangs, failures, slow links,
    stragglers; the newest first among findings of a kind."""
    def f(kind, since, key=None):
        return diagnose.Finding(kind, (0,), None, None, Words(kind), key or (kind, since),
                                since, 0)

    found = [f("straggler", 0), f("failed", 1), f("hang", 2), f("failed", 3, ("deadlock", (0, 1))),
             f("slow", 4), f("mismatch", 5), f("lost_rank", 6), f("hang", 7)]
    assert [(g.type, g.since) for g in diagnose.by_cause(found)] == [
        ("failed", 3), ("lost_rank", 6), ("mismatch", 5), ("hang", 7), ("hang", 2),
        ("failed", 1), ("slow", 4), ("straggler", 0)]


# ---- lost rank -----------------------------------------------------------------------------

def test_lost_rank_after_two_heartbeat_intervals_then_back():
    clock, model, diag = _setup()
    model.apply([_in_flight(r, 1, 0) for r in (0, 1, 3)])
    found = []
    for _ in range(5):  # 1.25 s: the hang of all_reduce #1, which waits for rank 2
        _tick(clock, model, 0.25, ranks=(0, 1, 3))
        found += diag.update()
    assert [f.type for f in found] == ["hang"]
    _tick(clock, model, 0.25, ranks=(0, 1, 3))  # 1.5 s, and still so 0.25 s later
    (f,) = diag.update()
    assert _types([f]) == [("lost_rank", (2,), (0, 1, 2, 3), 1)]
    assert f.message.startswith("rank 2 is lost: nothing from it for 1.5 s")
    assert "rank 0 is stuck in all_reduce #1" in f.message
    _tick(clock, model, 2.0)  # it rejoins
    found = diag.update()
    assert ("resolved", (2,), (0, 1, 2, 3), 1) in _types(found)
    assert [f.about for f in found if f.type == "resolved"] == ["lost_rank"]
    assert [f.type for f in diag.findings()] == ["hang"]  # it is back, but not in all_reduce


def test_every_rank_silent_at_once_singles_out_none():
    """The viewer or the whole machine stalled for 3 s: nobody is lost, also not the ranks
    whose first reports after the stall come a moment later than the others'."""
    clock, model, diag = _setup()
    clock.advance(3.0)
    assert diag.update() == []
    _tick(clock, model, 0.01, ranks=(0, 1))
    assert diag.update() == []
    _tick(clock, model, 0.1, ranks=(2, 3))
    assert diag.update() == []
    for _ in range(5):  # then rank 2 really stops: named after 1 s and a confirmation
        _tick(clock, model, 0.25, ranks=(0, 1, 3))
        assert diag.update() == []
    _tick(clock, model, 0.25, ranks=(0, 1, 3))
    assert _types(diag.update()) == [("lost_rank", (2,), None, None)]


def test_a_rank_that_said_goodbye_is_not_lost():
    clock, model, diag = _setup(world=2)
    model.apply([bye(1)])
    clock.advance(5)
    model.apply([heartbeat(0, 2)])
    assert diag.update() == []
    assert diag.finish([1]) == []


def test_finish_names_ranks_that_ended_without_goodbye():
    clock, model, diag = _setup(world=3)
    model.apply([bye(0), bye(2)])
    (f,) = diag.finish([0, 1, 2])
    assert (f.type, f.ranks) == ("lost_rank", (1,))
    assert f.message == "rank 1 ended without saying goodbye (it crashed or was killed)"
    assert diag.finish([1]) == []  # reported once
    clock.advance(10)
    assert diag.update() == []     # and held: the job is over, it is not "resolved"
    assert _types(diag.findings()) == [("lost_rank", (1,), None, None)]


def _crash_demo(clock, model):
    """The crash demo: rank 2 is killed after all_reduce #3; the others fail in #4 at once
    (connection closed) and leave with a goodbye."""
    for seq in (1, 2, 3):
        model.apply(_instance(seq))
    clock.advance(0.3)
    model.apply([op_batch(r, [_rec(4, 4000, 4010, flags=8)], G4) for r in (0, 1, 3)]
                + [bye(r) for r in (0, 1, 3)])


CRASH_FAILED = ("ranks 0,1,3 failed in all_reduce #4 at demo.py:12 in group 0-3 after 10.0 ms: no "
                "record from rank 2 for #4 (2: lost, no goodbye; its last record: all_reduce #3)")


def test_finish_names_where_a_lost_rank_left_its_peers():
    """User trial (crash demo): '1 failed', and the only finding named rank 2, not where it
    was last nor the all_reduce the others failed in without it."""
    clock, model, diag = _setup()
    _crash_demo(clock, model)
    assert diag.update() == []  # rank 2's record of #4 may still be on its way
    lost, failed = diag.finish(range(4))
    assert (lost.type, lost.ranks) == ("lost_rank", (2,))
    assert lost.message == ("rank 2 ended without saying goodbye (it crashed or was killed); "
                            "its last record: all_reduce #3")
    assert lost.text("pt") == ("rank 2 terminou sem se despedir (caiu ou foi morto); seu último "
                               "registro: all_reduce #3")
    assert _types([failed]) == [("failed", (2,), (0, 1, 2, 3), 4)]
    assert failed.message == CRASH_FAILED and not failed.hung
    assert failed.text("pt") == (
        "os ranks 0,1,3 falharam em all_reduce #4 em demo.py:12 no grupo 0-3 após 10,0 ms: nenhum "
        "registro do rank 2 para o #4 (2: perdido, sem se despedir; seu último registro: "
        "all_reduce #3)")
    assert [f.type for f in diagnose.by_cause(diag.findings())] == ["lost_rank", "failed"]


def test_a_rank_found_lost_live_names_the_op_its_peers_failed_in_at_once():
    """The same seen live (the TUI): once rank 2 is found lost, it will not come."""
    clock, model, diag = _setup()
    _crash_demo(clock, model)
    found = []
    for _ in range(15):
        clock.advance(0.1)
        found += diag.update()
    assert _types(found) == [("lost_rank", (2,), None, None), ("failed", (2,), (0, 1, 2, 3), 4)]
    assert found[0].message.endswith("ranks 0,1,3 said goodbye; its last record: all_reduce #3")
    assert found[1].message == CRASH_FAILED


def test_a_rank_stopped_inside_the_op_its_peers_failed_in_does_not_keep_it_a_hang():
    """The crash demo in the TUI: the launcher stops rank 0 inside all_reduce #4 (in flight,
    then a goodbye) while 1 and 3 failed in it: nothing waits in it any more, it failed; rank
    0, gone, is not 'stuck in all_reduce #4', and the silence stops growing with the job."""
    clock, model, diag = _setup()
    for seq in (1, 2, 3):
        model.apply(_instance(seq))
    clock.advance(0.3)
    model.apply([op_batch(r, [_rec(4, 4000, 4010, flags=8)], G4) for r in (1, 3)]
                + [_in_flight(0, 4, 4000, op_id=4), bye(1), bye(3)])
    clock.advance(1.0)
    model.apply([bye(0)])
    found = []
    for _ in range(15):
        clock.advance(0.1)
        found += diag.update()
    assert _types(found) == [("failed", (2,), (0, 1, 2, 3), 4), ("lost_rank", (2,), None, None)]
    assert found[0].message.startswith("ranks 1,3 failed in all_reduce #4 at demo.py:12 in group "
                                       "0-3 after ")
    assert "stuck" not in found[1].message
    clock.advance(10)
    diag.update()
    assert [f.message for f in diag.findings()] == [f.message for f in found]


def test_a_lost_ranks_last_record_names_a_peer():
    clock, model, diag = _setup(world=2)
    model.apply([op_batch(0, [_rec(2, 0, 1, op="send", peer=1)], G4),
                 op_batch(1, [_rec(2, 0, 1, op="recv", peer=0)], G4), bye(0)])
    (lost,) = diag.finish([0, 1])
    assert lost.message.endswith("its last record: recv from 0 #2")
    assert lost.text("pt").endswith("seu último registro: recv de 0 #2")


def test_finish_names_a_rank_that_ended_before_reporting_anything():
    clock, model, diag = _setup(world=2)
    model.apply([bye(0)])
    (f,) = diag.finish([0, 5])  # rank 5 was started, and never heard from
    assert (f.type, f.ranks) == ("lost_rank", (5,))
    assert f.message == "rank 5 ended before it reported anything (it crashed or was killed)"
    assert diag.finish([5]) == []


def test_a_rank_its_launcher_stopped_is_not_lost():
    """A hang's healthy rank, stopped by torchrun (SIGTERM) once the others failed at the
    timeout, led the findings as a lost rank whose advice was the OOM killer (user trial)."""
    clock, model, diag = _setup(world=2)
    model.process_ended(1, -15)
    model.process_ended(0, 1)
    (f,) = diag.finish([0, 1])
    assert f.ranks == (0,) and f.message.endswith("(exit 1)")


@pytest.mark.parametrize("code, en, pt", [(1, "exit 1", "saída 1"),
                                          (-9, "killed by SIGKILL", "morto por SIGKILL")])
def test_a_rank_that_ended_before_reporting_anything_says_how_as_its_launcher_did(
        code: int, en: str, pt: str) -> None:
    """Beside 'rank 0 failed (exit 1): RuntimeError: ...' the finding said 'it crashed or
    was killed'."""
    clock, model, diag = _setup(world=2)
    model.apply([bye(0)])
    model.process_ended(5, code)  # never heard from
    model.process_ended(1, code)  # heard from, then gone without a goodbye
    (heard, unheard) = diag.finish([0, 1, 5])
    assert unheard.message == f"rank 5 ended before it reported anything ({en})"
    assert unheard.text("pt") == f"rank 5 terminou antes de enviar qualquer coisa ({pt})"
    assert heard.message == f"rank 1 ended without saying goodbye ({en})"
    assert heard.text("pt") == f"rank 1 terminou sem se despedir ({pt})"


def test_a_rank_lost_as_its_job_ended_is_not_silent_ever_longer():
    """After the job ended its text stays as found (user trial: 'nothing from it for 5.6 s',
    then 15.7 s at quit), and the Portuguese agrees in number."""
    clock, model, diag = _setup()
    clock.advance(0.3)
    model.apply([bye(0), bye(1), bye(3)])
    clock.advance(0.8)
    assert diag.update() == []  # rank 2 silent for 1.1 s: confirming
    clock.advance(0.3)
    (f,) = diag.update()
    assert f.message == ("rank 2 ended without saying goodbye (it crashed or was killed): "
                         "nothing from it for 1.4 s, and ranks 0,1,3 said goodbye")
    assert f.text("pt") == ("rank 2 terminou sem se despedir (caiu ou foi morto): nada dele "
                            "havia 1,4 s, e os ranks 0,1,3 já se despediram")
    clock.advance(10)
    assert diag.update() == [] and diag.findings()[0].message == f.message


def test_no_new_hang_once_every_rank_of_the_job_is_gone():
    """Ranks 0, 1 and 3 said goodbye, rank 2 was killed while it waited: nobody is left to
    wait, so no hang (user trial: 'hangs for 1.1 s' after the job's processes were dead)."""
    clock, model, diag = _setup()
    model.apply([_in_flight(r, 1, 0) for r in range(3)])
    _tick(clock, model, 0.5)
    assert diag.update() == []
    clock.advance(0.3)
    model.apply([bye(0), bye(1), bye(3)])
    clock.advance(0.6)
    (lost,) = diag.finish(range(4))
    assert (lost.type, lost.ranks) == ("lost_rank", (2,))
    clock.advance(1)
    assert diag.update() == [] and _types(diag.findings()) == [("lost_rank", (2,), None, None)]
    clock.advance(10)
    assert diag.update() == []


def test_a_rank_that_died_waiting_makes_no_hang_while_its_loss_is_confirmed():
    """Updated as the session does (10 a second): rank 2, in the all_reduce, is killed, the
    others leave with a goodbye. Its wait is known only as long as it was heard from, so no
    hang comes before it is found lost (user trial: 'hangs for 1.1 s' after the job died)."""
    clock, model, diag = _setup()
    model.apply([_in_flight(r, 1, 0) for r in range(3)])
    _tick(clock, model, 0.5)
    clock.advance(0.3)
    model.apply([bye(0), bye(1), bye(3)])
    found = []
    for _ in range(30):
        clock.advance(0.1)
        found += diag.update()
    assert _types(found) == [("lost_rank", (2,), None, None)]


def test_a_hang_that_completes_as_its_job_ends_is_resolved():
    """Both records came, then the ranks left: completed, not 'unresolved' (user trial: a
    broadcast that completed after 8 s, reported as ended with its job)."""
    clock, model, diag = _setup(world=2)
    g2 = {0: ("0", (0, 1))}
    model.apply([op_batch(0, [_rec(1, 0, -1, op="broadcast")], g2)])
    _tick(clock, model, 1.5, ranks=(0, 1))
    (hang,) = diag.update()
    assert (hang.type, hang.ranks) == ("hang", (1,))
    _tick(clock, model, 6.5, ranks=(0, 1))
    model.apply([op_batch(0, [_rec(1, 0, 8000, op="broadcast")], g2),
                 op_batch(1, [_rec(1, 7990, 8000, op="broadcast")], g2), bye(0), bye(1)])
    (end,) = diag.update()
    assert (end.type, end.about, end.unresolved) == ("resolved", "hang", False)
    assert end.message.startswith("resolved after 6.5 s: broadcast #1")


def test_queued_hangs_are_one_finding_and_the_next_is_named_once_the_first_completes():
    """DDP's later buckets: ranks 0-2 enter all_reduce #1, #2 and #3, rank 3 none of them: one
    hang, on #1, counting the two behind it. Rank 3 makes #1: it is resolved, and #2 named on
    its own, with the one behind it."""
    clock, model, diag = _setup()
    model.apply([_in_flight(r, seq, 10 * seq) for seq in (1, 2, 3) for r in range(3)])
    _tick(clock, model, 1.1)
    (f,) = diag.update()
    assert _types([f]) == [("hang", (3,), (0, 1, 2, 3), 1)] and f.facts.later == 2
    assert f.message.endswith("; 2 later calls of the group wait behind it")
    _tick(clock, model, 0.5)
    model.apply([op_batch(r, [_rec(1, 10 if r < 3 else 1500, 1501)], G4) for r in range(4)])
    new, done = diag.update()
    assert _types([new]) == [("hang", (3,), (0, 1, 2, 3), 2)] and new.facts.later == 1
    assert (done.type, done.seq, done.about) == ("resolved", 1, "hang")
    assert _types(diag.findings()) == [("hang", (3,), (0, 1, 2, 3), 2)]


def test_queued_instances_missing_other_ranks_are_other_hangs():
    """Rank 3 is missing from #1 and #2; rank 2, stuck in #1, from #2 and #3 too: the group's
    first hang with rank 3 missing, and its first with ranks 2 and 3 missing, each with what
    queues behind it."""
    clock, model, diag = _setup()
    model.apply([_in_flight(r, 1, 10) for r in range(3)]
                + [_in_flight(r, seq, 10 * seq) for seq in (2, 3) for r in range(2)])
    _tick(clock, model, 1.1)
    found = diag.update()
    assert _types(found) == [("hang", (3,), (0, 1, 2, 3), 1), ("hang", (2, 3), (0, 1, 2, 3), 2)]
    assert [f.facts.later for f in found] == [0, 1]
    assert found[0].facts.inside == (0, 1, 2) and found[1].facts.inside == (0, 1)


def test_hangs_in_two_groups_are_named_and_resolved_each_on_its_own():
    groups = {0: ("0", (0, 1)), 1: ("1", (2, 3))}
    clock, model, diag = _setup()

    def inside(rank, seq, gid):
        return op_batch(rank, [_rec(seq, 10 * seq, -1, gid=gid)], groups)

    model.apply([inside(0, 1, 0), inside(0, 2, 0), inside(2, 1, 1)])
    _tick(clock, model, 1.1)
    found = diag.update()
    assert _types(found) == [("hang", (1,), (0, 1), 1), ("hang", (3,), (2, 3), 1)]
    assert [f.facts.later for f in found] == [1, 0]
    _tick(clock, model, 0.5)
    model.apply([op_batch(r, [_rec(1, 10, 1600, gid=1)], groups) for r in (2, 3)])
    (done,) = diag.update()
    assert (done.type, done.ranks, done.group) == ("resolved", (3,), (2, 3))
    assert _types(diag.findings()) == [("hang", (1,), (0, 1), 1)]


def test_a_failed_wait_counts_from_when_an_update_saw_it_in_flight():
    """Rank 0 waits in #1, seen so by an update, and fails 0.8 s later: named 1 s after it
    was first seen, not 1 s after it failed. A wait no update saw in flight counts from the
    first update that sees it ended (its in-flight record may come after it)."""
    g2 = {0: ("0", (0, 1))}
    for seen in (True, False):
        clock, model, diag = _setup(world=2)
        model.apply([op_batch(0, [_rec(1, 0, -1)], g2)])
        if seen:
            assert diag.update() == []
        _tick(clock, model, 0.8, ranks=(0, 1))
        model.apply([op_batch(0, [_rec(1, 0, 800, flags=8)], g2)])
        assert diag.update() == []
        _tick(clock, model, 0.3, ranks=(0, 1))
        assert _types(diag.update()) == ([("failed", (1,), (0, 1), 1)] if seen else [])
        if not seen:
            _tick(clock, model, 0.8, ranks=(0, 1))
            assert _types(diag.update()) == [("failed", (1,), (0, 1), 1)]


# ---- mismatch ------------------------------------------------------------------------------

def test_mismatched_op_named_from_in_flight_records_before_anything_completes():
    clock, model, diag = _setup()
    # each side's line of the program, as the source panel names it (user trial: neither was
    # said, and the source panel showed another op)
    sites = {0: ("/home/u/train.py", 32), 1: ("/home/u/train.py", 40)}
    model.apply([op_batch(r, [_rec(3, 0, -1, op="broadcast" if r == 3 else "all_reduce",
                                   peer=0 if r == 3 else -1, site=int(r == 3), id=3)], G4,
                          sites) for r in range(4)])
    (f,) = diag.update()
    assert _types([f]) == [("mismatch", (3,), (0, 1, 2, 3), 3)]
    # "!! mismatch: ranks disagree at #3": not "mismatch: mismatch at #3" (user trial)
    assert f.message == ("ranks disagree at #3 in group 0-3: rank 3 called broadcast "
                         "(4096 B float32) at train.py:40, while ranks 0,1,2 called all_reduce "
                         "(4096 B float32) at train.py:32")
    assert f.text("pt") == ("os ranks divergem no #3 do grupo 0-3: rank 3 chamou broadcast "
                            "(4096 B float32) em train.py:40, enquanto os ranks 0,1,2 chamaram "
                            "all_reduce (4096 B float32) em train.py:32")


def test_mismatch_waits_for_the_rest_of_the_group_before_naming_sides():
    # rank 3's broadcast and rank 0's all_reduce are in; ranks 1 and 2 are on their way: named
    # now, the majority would be a coin toss ("rank 0 called all_reduce, while rank 3 ...")
    clock, model, diag = _setup()
    model.apply([_in_flight(0, 3, 0), _in_flight(3, 3, 0, op="broadcast", peer=0)])
    assert diag.update() == []
    _tick(clock, model, diagnose.MISMATCH_WAIT_S / 2)
    model.apply([_in_flight(r, 3, 0) for r in (1, 2)])
    (f,) = diag.update()
    assert _types([f]) == [("mismatch", (3,), (0, 1, 2, 3), 3)]


def test_mismatch_named_with_the_ranks_in_once_the_others_are_overdue():
    clock, model, diag = _setup()
    model.apply([_in_flight(r, 3, 0) for r in (0, 1)] + [_in_flight(3, 3, 0, op="broadcast",
                                                                     peer=0)])
    assert diag.update() == []
    _tick(clock, model, diagnose.MISMATCH_WAIT_S)
    (f,) = diag.update()
    assert _types([f]) == [("mismatch", (3,), (0, 1, 2, 3), 3)]
    # the line is recorded once: it says who had not come in when it was named
    assert f.message.endswith("while ranks 0,1 called all_reduce (4096 B float32) at demo.py:12 "
                              "(rank 2 has not reached it yet)")
    assert f.text("pt").endswith("(rank 2 ainda não chegou a ele)")
    # once it is in, the panel's line says what it called
    model.apply([_in_flight(2, 3, 0)])
    assert diag.update() == []
    (now,) = diag.findings()
    assert now.message.endswith("while ranks 0,1,2 called all_reduce (4096 B float32) at "
                                "demo.py:12")


@pytest.mark.parametrize("field, value, shown", [("nbytes", 8192, "(8192 B float32)"),
                                                 ("dtype", "float16", "(4096 B float16)")])
def test_size_or_dtype_mismatch_in_a_completed_instance(field, value, shown):
    clock, model, diag = _setup()
    model.apply([op_batch(r, [_rec(1, 0, 5, **({field: value} if r == 1 else {}))], G4)
                 for r in range(4)])
    assert model.instances == 1
    (f,) = diag.update()
    assert _types([f]) == [("mismatch", (1,), (0, 1, 2, 3), 1)]
    assert f"rank 1 called all_reduce {shown}" in f.message
    _tick(clock, model, diagnose.MISMATCH_HOLD_S + 1)
    assert [r.type for r in diag.update()] == ["resolved"]


def test_sizes_that_may_differ_are_no_mismatch():
    clock, model, diag = _setup()
    model.apply([op_batch(r, [_rec(1, 0, 5, op="all_to_all_single", nbytes=100 * (r + 1))], G4)
                 for r in range(4)])
    model.apply([op_batch(r, [_rec(2, 10, 15, op="all_gather_object", nbytes=7 * r)], G4)
                 for r in range(4)])
    assert model.instances == 2 and diag.update() == []


# ---- slow link -----------------------------------------------------------------------------

def _sends_with_a_slow_pair(model):
    """40 rounds of rank 0 sending to ranks 1-3, the transfers to 3 taking 40 ms, not 1."""
    for k in range(1, 41):
        for dst in (1, 2, 3):
            took = 40 if dst == 3 else 1
            start = k * 100
            model.apply([op_batch(0, [{**_rec(k, start, start + took, op="send", peer=dst),
                                       "id": k * 10 + dst}], G4),
                         op_batch(dst, [{**_rec(k, start, start + took, op="recv", peer=0),
                                         "id": k}], G4)])


def test_slow_pair_named_against_the_other_pairs():
    clock, model, diag = _setup()
    _sends_with_a_slow_pair(model)
    assert diag.update() == []  # slow for a moment only, so far
    _tick(clock, model, diagnose.SLOW_HOLD_S)
    found = diag.update()
    assert _types(found) == [("slow", (0, 3), (0, 3), 40)]
    assert found[0].message.startswith("send 0 -> 3 of 4096 B takes 40.0 ms (median), 40x the "
                                       "other pairs (1.0 ms)")


@pytest.mark.parametrize("slow_ms, named", [(30.0, True), (1.5, False)])
def test_slow_group_named_against_the_other_groups_of_its_size(slow_ms, named):
    clock = FakeClock()
    model = Model(clock)
    diag = Diagnosis(model, wall_ns=clock.wall_ns)
    groups = {g: (str(g), (2 * g, 2 * g + 1)) for g in range(4)}
    model.apply([heartbeat(r, 8) for r in range(8)])
    for k in range(1, 41):
        for g, (_, ranks) in groups.items():
            took = slow_ms if g == 2 else 1.0
            model.apply([op_batch(r, [{**_rec(k, k * 100, k * 100 + took), "gid": g,
                                       "id": k * 10 + g}], groups) for r in ranks])
    assert diag.update() == []
    clock.advance(diagnose.SLOW_HOLD_S)
    model.apply([heartbeat(r, 8) for r in range(8)])
    found = diag.update()
    if named:
        assert _types(found) == [("slow", (4, 5), (4, 5), None)]
        assert found[0].message.startswith("all_reduce of 4096 B in group 4,5 takes 30.0 ms")
    else:
        assert found == []


def test_a_pair_slow_for_less_than_the_hold_time_is_never_named():
    clock, model, diag = _setup()
    _sends_with_a_slow_pair(model)
    assert diag.update() == []
    _tick(clock, model, diagnose.SLOW_HOLD_S / 2)
    for k in range(41, 200):  # the pair is fast again: its slow transfers leave the window
        start = k * 100
        model.apply([op_batch(0, [{**_rec(k, start, start + 1, op="send", peer=3),
                                   "id": k * 10 + 3}], G4),
                     op_batch(3, [{**_rec(k, start, start + 1, op="recv", peer=0),
                                   "id": k}], G4)])
    assert diag.update() == []
    _tick(clock, model, diagnose.SLOW_HOLD_S)
    assert diag.update() == [] and list(diag.history) == []


def test_a_pair_slow_for_a_busy_moment_is_no_slow_link():
    """Half of one pair's transfers delayed 8 ms (a rank descheduled for a while on a loaded
    machine): its median is far above the others', but not consistently: not named."""
    clock, model, diag = _setup()
    for k in range(1, 65):
        for dst in (1, 2, 3):
            took = 9 if dst == 1 and k > 32 else 1
            start = k * 100
            model.apply([op_batch(0, [{**_rec(k, start, start + took, op="isend", peer=dst),
                                       "id": k * 10 + dst}], G4),
                         op_batch(dst, [{**_rec(k, start, start + took, op="irecv", peer=0),
                                         "id": k}], G4)])
    assert diag.update() == []


def test_equal_pairs_are_not_slow():
    clock, model, diag = _setup()
    for k in range(1, 41):
        for dst in (1, 2, 3):
            model.apply([op_batch(0, [{**_rec(k, k * 100, k * 100 + 2), "op": "send",
                                       "peer": dst, "id": k * 10 + dst}], G4),
                         op_batch(dst, [{**_rec(k, k * 100, k * 100 + 2), "op": "recv",
                                         "peer": 0}], G4)])
    assert diag.update() == []


def test_a_pair_whose_clocks_disagree_is_not_slow():
    """Every receiver posts its recv 10 ms before the send comes, and each transfer takes
    1 ms; rank 3's clock runs 8 ms ahead of rank 0's (another host, its offset not known
    yet). On the two clocks read together, its transfers ended 9 ms after the send came; on
    each side's own clock the side that came last (the sender) took 1 ms: no slow link (a
    1,024-rank pipeline named 8 such pairs between two nodes 6.7 ms apart)."""
    clock, model, diag = _setup()
    for k in range(1, 41):
        for dst in (1, 2, 3):
            ahead = 8 if dst == 3 else 0
            start = k * 100
            model.apply([op_batch(0, [{**_rec(k, start, start + 1, op="send", peer=dst),
                                       "id": k * 10 + dst}], G4),
                         op_batch(dst, [{**_rec(k, start - 10 + ahead, start + 1 + ahead,
                                                op="recv", peer=0), "id": k}], G4)])
    found = diag.update()
    _tick(clock, model, diagnose.SLOW_HOLD_S)
    assert [f for f in found + diag.update() if f.type == "slow"] == []


# ---- what the recording and the panel get --------------------------------------------------

def test_findings_are_recorded_as_diag_lines_that_stats_skips(tmp_path):
    clock, model, diag = _setup()
    for seq in range(1, 4):
        model.apply(_instance(seq, late_rank=2, late_ms=50))
    found = diag.update()
    path = tmp_path / "r.jsonl"
    rec = recording.Recorder(path)
    rec.write_findings(found)
    rec.close({"records": 0})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    (line,) = [x for x in lines if x.get("kind") == "diag"]
    facts = line.pop("facts")
    assert line == {"kind": "diag", "version": 2, "type": "straggler", "ranks": [2],
                    "group": [0, 1, 2, 3], "seq": 3, "message": found[0].text("en"),
                    "t_ns": clock.wall_ns()}
    waited = {k: facts.pop(k) for k in ("avg_ms", "each_s", "waited_s")}
    assert facts == {"shape": "straggler", "rank": 2, "op": "all_reduce", "group": [0, 1, 2, 3],
                     "times": 3}
    assert waited == pytest.approx({"avg_ms": 49.9, "each_s": 0.1502, "waited_s": 0.4506})
    assert list(recording.read(path)) == []  # stats reads ops and ranks only
    # read back, the facts make the line in any language
    found_again: list[dict] = []
    list(recording.read(path, found_again))
    assert recorded_facts(found_again[0]) == found[0].facts
    assert recorded_text(found_again[0], "pt") == found[0].text("pt")
    assert "0,15 s cada um" in recorded_text(found_again[0], "pt")


def test_recorded_facts_are_read_back_as_found_and_worded_alike():
    """A deadlock's facts hold facts within facts (each rank's op, the ranks waiting on it),
    a failure ended by the timeout what its ranks did; through JSON they come back equal."""
    clock, model, diag = _setup()
    found = [_hang_demo(clock, model, diag)]
    _tick(clock, model, 4.9)
    model.apply([op_batch(r, [_rec(3, 0, 6000, flags=8)], G4) for r in range(3)]
                + [op_batch(3, [{**_rec(1, 0, 6000, op="recv", peer=0, flags=8), "id": 9}], G4)]
                + [bye(r) for r in range(4)])
    found += diag.update()
    found += [resolved(found[0], 9.0, 0), resolved(found[1], 9.0, 0, job=1)]
    assert {f.facts.shape for f in found} == {"deadlock", "failed", "p2p", "resolved"}
    for f in found:
        line = json.loads(json.dumps(f.record()))
        assert recorded_facts(line) == f.facts, f
        for lang in ("en", "pt"):
            assert recorded_text(line, lang) == f.text(lang)


def test_a_language_lacking_an_entry_shows_it_in_english(monkeypatch):
    """A translation is its TOML file: each entry it lacks is the English one, and its own
    forms make its words agree with a list of ranks (here a Portuguese file of one entry)."""
    from commviz import text
    from commviz.viewer.diagnose.facts import Doing, Hang

    english = text.prose
    sparse = {"hang": {"waits": "{op} n.º {seq}: {missing:who} há {age} s ({why})"},
              "forms": {"who": {"one": "falta o {list}", "many": "faltam os {list}"}}}
    monkeypatch.setattr(text, "prose", lambda lang, name: sparse if lang == "pt"
                        else english(lang, name))
    hang = Hang("all_reduce", 2, None, (0, 1, 2, 3), 1.25, False, (0, 1, 2), (3,),
                ((3, Doing("exited")),))
    f = diagnose.Finding("hang", (3,), (0, 1, 2, 3), 2, hang, ("hang", 0, 2), 0.0, 0)
    assert f.text("pt") == "all_reduce n.º 2: falta o 3 há 1,2 s (3: exited)"
    ended = diagnose.Finding("hang", (3,), (0, 1, 2, 3), 2, replace(hang, ended=True),
                             ("hang", 0, 2), 0.0, 0)
    assert ended.text("pt") == ended.text("en").replace("1.2 s", "1,2 s")
    both = replace(hang, missing=(2, 3), why=((2, Doing("exited")), (3, Doing("exited"))))
    assert diagnose.Finding("hang", (2, 3), (0, 1, 2, 3), 2, both, ("hang", 0, 2), 0.0,
                            0).text("pt") == ("all_reduce n.º 2: faltam os 2,3 há 1,2 s "
                                              "(2,3: exited)")


def test_a_finding_recorded_as_its_words_is_shown_in_them():
    """A recording made before findings were recorded as facts: its diag lines (version 1, no
    ``version``) hold the line in English and Portuguese, or in English only (older still)."""
    line = {"type": "hang", "ranks": [3], "group": [0, 1, 2, 3], "seq": 3, "t_ns": 1,
            "message": "all_reduce #3 in group 0-3 hangs for 1.5 s",
            "message_pt": "all_reduce #3 no grupo 0-3 travado há 1.5 s"}
    assert recorded_text(line) == "all_reduce #3 in group 0-3 hangs for 1.5 s"
    assert recorded_text(line, "pt") == "all_reduce #3 no grupo 0-3 travado há 1,5 s"
    del line["message_pt"]
    assert recorded_text(line, "pt") == "all_reduce #3 in group 0-3 hangs for 1.5 s"


@pytest.mark.parametrize("kind", diagnose.TYPES + ("timeout",))  # and Finding.topic's
@pytest.mark.parametrize("lang", ["en", "pt"])
def test_every_type_has_advice_in_both_languages(kind, lang):
    title, meaning, check = advice(kind, lang)
    assert title and len(meaning) > 40 and len(check) > 40
    assert advice(kind, "pt") != advice(kind, "en")


def test_a_hang_ended_by_a_timeout_is_advised_on_the_hang_not_on_data_sizes():
    """User trial: the failed recv of the hang demo came with gloo's "Received data size
    doesn't match" to look for, irrelevant once the op had been found hung."""
    _, meaning, check = advice("timeout")
    assert "timeout" in meaning and "hang" in meaning
    assert "data size" not in check and "different number of iterations" in check
    assert "Received data size" in advice("failed")[2]  # a failure that came as such keeps it


def test_tables_stay_bounded_when_sizes_keep_changing(monkeypatch):
    monkeypatch.setattr(diagnose.watch, "KEYS_MAX", 8)
    clock, model, diag = _setup(world=2)
    g2 = {0: ("0", (0, 1))}
    for k in range(1, 30):
        model.apply([op_batch(r, [_rec(k, k * 10, k * 10 + 1, nbytes=k)], g2) for r in (0, 1)])
        model.apply([op_batch(0, [{**_rec(k, k * 10, k * 10 + 1, op="send", peer=1, nbytes=k),
                                   "id": 100 + k}], g2),
                     op_batch(1, [{**_rec(k, k * 10, k * 10 + 1, op="recv", peer=0, nbytes=k),
                                   "id": 100 + k}], g2)])
    assert model.instances == 29 and model.transfers == 29
    assert len(diag.stragglers.durations) == 8 and len(diag.slow._pairs) == 8


def test_portuguese_findings_write_decimals_after_a_comma():
    """'esperaram 0,53 s', as Portuguese writes it; versions, addresses and group lists keep
    their points and commas (user trial: '0.53 s' in a Portuguese sentence)."""
    from commviz.viewer.diagnose import Finding

    f = Finding("straggler", (2,), (0, 1, 2), 3, Words(
        "rank 2 was 0.53 s late (3.2x)",
        "rank 2 chegou 0.53 s atrasado (3.2x) no grupo 0,1,2, NCCL 2.28.9 em "
        "10.0.0.7:5555, 4.0 KiB em 12.5 ms"), ("straggler", 2), 0.0, 0)
    assert f.text("pt") == ("rank 2 chegou 0,53 s atrasado (3,2x) no grupo 0,1,2, NCCL 2.28.9 "
                            "em 10.0.0.7:5555, 4,0 KiB em 12,5 ms")
    assert f.text("en") == "rank 2 was 0.53 s late (3.2x)"


def test_a_lost_node_at_a_thousand_ranks_reads_in_ranges():
    """Past 8 ranks, lists are written as runs and ranks that do the same are said once: a
    hang with a node's 8 ranks missing and 1,016 inside fits a line, in every language."""
    from commviz.viewer.diagnose.facts import Call, Doing, Hang, Lost
    from commviz.viewer.diagnose.wording import say

    world = tuple(range(1024))
    missing = tuple(range(24, 32))
    inside = tuple(r for r in world if r not in missing)
    last = Call("all_reduce", -1, 30)
    hang = Hang("all_reduce", 31, None, world, 1.1, False, inside, missing,
                tuple((r, Doing("lost", last=last)) for r in missing))
    assert say(hang) == (
        "all_reduce #31 in group 0-1023 hangs for 1.1 s: ranks 0-23,32-1023 inside, "
        "ranks 24-31 missing (24-31: lost, no goodbye; its last record: all_reduce #30)")
    apart = replace(hang, missing=(3, 900), why=((3, Doing("lost", last=last)),
                                                 (900, Doing("exited"))))
    assert say(apart).endswith("ranks 3,900 missing (3: lost, no goodbye; its last record: "
                               "all_reduce #30; 900: exited)")
    lost = Lost(24, 1.3, last, tuple((r, Call("all_reduce", -1, 31)) for r in inside))
    assert say(lost) == ("rank 24 is lost: nothing from it for 1.3 s (process died or "
                         "network broke); its last record: all_reduce #30; ranks "
                         "0-23,32-1023 are stuck in all_reduce #31")
    assert say(lost, "pt").endswith("os ranks 0-23,32-1023 estão presos em all_reduce #31")
    assert say(lost, "es").endswith("los ranks 0-23,32-1023 están atascados en all_reduce #31")


def test_rank_lists_stay_whole_up_to_eight_ranks_then_run():
    from commviz.text.i18n import rank_list

    assert rank_list([0, 1, 2, 3]) == "0,1,2,3"  # a small job's words do not change
    assert rank_list(list(range(9))) == "0-8"
    assert rank_list([0, 1, 5, 6, 7, 9, 20, 21, 22, 23]) == "0,1,5-7,9,20-23"
    assert text.ranks_phrase([0, 2, *range(10, 20)]) == "ranks 0,2,10-19"


def _nodes_setup(nodes=4, per_node=4):
    clock = FakeClock()
    model = Model(clock)
    diag = Diagnosis(model, wall_ns=clock.wall_ns)
    world = nodes * per_node
    beats = lambda ranks: [replace(heartbeat(r, world), host=f"node{r // per_node}")  # noqa: E731
                           for r in ranks]
    model.apply(beats(range(world)))
    return clock, model, diag, beats


def test_a_node_whose_ranks_fall_silent_together_is_one_finding():
    clock, model, diag, beats = _nodes_setup()
    found = []
    for step in range(8):  # node2 (ranks 8-11) stops; its last two ranks 0.3 s after
        clock.advance(0.25)
        model.apply(beats([r for r in range(16) if r not in (8, 9) and (step > 0 or r < 12)
                           and not (step > 0 and 8 <= r < 12)]))
        found += diag.update()
    (f,) = found
    assert (f.type, f.ranks, f.key) == ("lost_rank", (8, 9, 10, 11), ("lost_node", "node2"))
    assert f.message.startswith("node node2 is lost: nothing from ranks 8,9,10,11 for 1.")
    assert f.text("pt").startswith("nó node2 perdido: nada dos ranks 8,9,10,11 há 1,")
    assert diag.watch.found_lost(9) and not diag.watch.found_lost(12)
    assert recorded_facts(json.loads(json.dumps(f.record()))) == f.facts  # as recorded
    assert diag.finish([9]) == []  # the job ends: said once, as a node


def test_a_lost_node_that_comes_back_is_resolved():
    clock, model, diag, beats = _nodes_setup()
    for _ in range(7):
        clock.advance(0.25)
        model.apply(beats([r for r in range(16) if not 8 <= r < 12]))
        diag.update()
    assert [f.key for f in diag.findings()] == [("lost_node", "node2")]
    model.apply(beats(range(16)))
    assert [(g.type, g.about, g.ranks) for g in diag.update()] == \
        [("resolved", "lost_rank", (8, 9, 10, 11))]


def test_one_rank_lost_on_a_node_whose_others_report_is_named_alone():
    clock, model, diag, beats = _nodes_setup()
    found = []
    for _ in range(7):
        clock.advance(0.25)
        model.apply(beats([r for r in range(16) if r != 9]))
        found += diag.update()
    assert [(f.ranks, f.key) for f in found] == [((9,), ("lost_rank", 9))]


def test_the_last_two_arrivals_of_each_instance_are_those_a_stable_sort_gives():
    """Of equal start times the later row counts as the later arrival, as the sort by arrival
    had it; an instance of one row has that row for both."""
    rng = np.random.default_rng(11)
    counts = rng.integers(1, 9, 400)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    t0 = T0_NS + rng.integers(0, 6, int(counts.sum()))  # many ties
    order = np.lexsort((t0, np.repeat(np.arange(len(counts)), counts)))
    ends = starts + counts - 1
    last, second = stragglers.last_two(t0, starts, counts)
    assert last.tolist() == order[ends].tolist()
    assert second.tolist() == order[np.maximum(ends - 1, starts)].tolist()
