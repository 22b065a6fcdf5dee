"""Several jobs into one viewer: job generations in the model, the diagnosis and the replay.

Pure tests (scripted messages, a frozen clock) and a recording read back as ``commviz stats``
does; tests/test_jobs_integration.py runs real gloo jobs.
"""

import json

import pytest
from fakes import T0_NS, FakeClock, bye, op_batch

from commviz import cli
from commviz.viewer import recording
from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.model import Model
from commviz.wire import protocol

G2 = {0: ("0", (0, 1))}
SEC = 1_000_000_000


def _hb(rank, pid, world=2):
    return protocol.Heartbeat(rank, world, "node0", pid, "gloo", "cpu", T0_NS, 0, {})


def _coll(rank, seq, op="all_reduce", nbytes=4000, t=0, flags=0):
    return op_batch(rank, [{"id": seq, "op": op, "seq": seq, "bytes_in": nbytes,
                            "bytes_out": nbytes, "t_start": T0_NS + t,
                            "t_end": T0_NS + t + 1000, "flags": flags}], G2)


def _p2p(rank, seq, t=0):
    op, peer = ("send", 1) if rank == 0 else ("recv", 0)
    return op_batch(rank, [{"id": 100 + seq, "op": op, "seq": seq, "peer": peer,
                            "bytes_in": 2000 if rank == 0 else 0,
                            "bytes_out": 2000 if rank == 1 else 0,
                            "t_start": T0_NS + t, "t_end": T0_NS + t + 1000}], G2)


def _job(pids, seqs, t=0, op="all_reduce", byes=True):
    """One clean job of 2 ranks: heartbeats, a collective and a transfer per seq, goodbyes."""
    msgs = [_hb(r, pid) for r, pid in enumerate(pids)]
    for seq in seqs:
        msgs += [_coll(r, seq, op, t=t + seq) for r in (0, 1)]
        msgs += [_p2p(r, seq, t=t + seq) for r in (0, 1)]
    return msgs + ([bye(0), bye(1)] if byes else [])


def _model():
    clock = FakeClock()
    model = Model(clock)
    model.new_instances = []
    return clock, model, Diagnosis(model, wall_ns=clock.wall_ns)


def test_two_jobs_in_a_row_with_equal_seq_numbers_never_match_across():
    _, m, _ = _model()
    # job 1 leaves rank 0's all_reduce #3 and send #3 unmatched (rank 1 did not get there)
    m.apply(_job((11, 12), (1, 2), byes=False) + [_coll(0, 3), _p2p(0, 3), bye(0), bye(1)])
    assert (m.instances, m.transfers) == (2, 2)
    # job 2: other processes, the same ranks and seq numbers, 60 s later
    m.apply(_job((21, 22), (1, 2, 3), t=60 * SEC))
    assert (m.instances, m.transfers) == (2 + 3, 2 + 3)
    assert all(i.skew_ns < SEC for i in m.new_instances)  # nothing paired across the minute
    coll, p2p = m.pending()
    assert len(coll["rank"]) == 1 and len(p2p["rank"]) == 1  # job 1's leftovers wait on
    assert [sorted(j) for j in m.jobs] == [[0, 1], [0, 1]]
    assert [m.ranks[r].job for r in (0, 1)] == [2, 2]
    assert [m.job_of(g) for g in range(len(m.groups))] == [1, 2]  # the group, once per job


def test_a_failed_leftover_does_not_swallow_the_next_jobs_op():
    """The trial: job 1's rank 0 failed in all_reduce #4 (rank 1 crashed before it); job 2's
    broadcast #4 is its own instance, not an all_reduce mixing both jobs."""
    _, m, _ = _model()
    m.apply([_hb(0, 11), _hb(1, 12)] + [_coll(r, s) for s in (1, 2, 3) for r in (0, 1)]
            + [_coll(0, 4, flags=protocol.FLAG_FAILED), bye(1), bye(0)])
    m.new_instances = []
    m.apply([_hb(1, 22), _hb(0, 21)]  # job 2's rank 1 reports first
            + [_coll(r, s, "broadcast" if s % 2 == 0 else "all_reduce", nbytes=16000,
                     t=6 * SEC + s) for s in range(1, 7) for r in (0, 1)])
    assert [(i.op, i.seq, i.size) for i in m.new_instances] == [
        ("all_reduce", 1, 16000), ("broadcast", 2, 16000), ("all_reduce", 3, 16000),
        ("broadcast", 4, 16000), ("all_reduce", 5, 16000), ("broadcast", 6, 16000)]
    assert m.instances == 3 + 6
    assert m.stats[("broadcast", 2, 16000)].count == 3 and len(m.pending()[0]["rank"]) == 1


def test_a_job_killed_without_goodbyes_is_still_left_behind():
    """No goodbye (torchrun killed every worker): another process for a rank number that
    job already has begins a new generation, and so does its partner reporting later."""
    _, m, diag = _model()
    m.apply(_job((11, 12), (1,), byes=False))
    m.apply([_hb(0, 21), _coll(0, 2, t=SEC)])
    m.apply([_hb(1, 22), _coll(1, 2, t=SEC)])
    assert [m.ranks[r].job for r in (0, 1)] == [2, 2] and m.instances == 2
    assert [(s.rank, s.pid, s.job) for s in m.replaced] == [(0, 11, 1), (1, 12, 1)]
    found = diag.update()
    assert sorted(f.message for f in found) == [
        f"rank {r} of job 1 (pid {11 + r}) ended without saying goodbye (it crashed or was "
        "killed)" for r in (0, 1)]
    assert diag.update() == [] and diag.findings() == []  # said once, not held


def test_a_new_rank_joins_the_running_job_not_a_new_one():
    """Ranks of one job report one by one, and a rank may end before another's first
    heartbeat arrives: one generation while none of its ranks is replaced and not all left."""
    _, m, _ = _model()
    m.apply([_hb(0, 11), _coll(0, 1), bye(0)])
    m.apply([_hb(1, 12), _coll(1, 1)])
    assert m.ranks[1].job == 1 and m.instances == 1 and len(m.jobs) == 1


def test_ops_before_any_heartbeat_match_the_first_job():
    """A viewer started late may see a rank's ops before its heartbeat: they are the newest
    job's, as the rank's first heartbeat then says."""
    _, m, _ = _model()
    m.apply([_hb(0, 11), _coll(0, 1), _coll(1, 1)])
    m.apply([_hb(1, 12), _coll(0, 2), _coll(1, 2)])
    assert m.instances == 2 and len(m.jobs) == 1


def test_another_world_size_is_another_job():
    _, m, _ = _model()
    m.apply([_hb(0, 11)])
    m.apply([_hb(1, 22, world=4)])
    assert [m.ranks[r].job for r in (0, 1)] == [1, 2]


def test_a_jobs_hang_ends_with_it_and_is_not_resolved_by_the_next_job():
    clock, m, diag = _model()
    m.apply([_hb(0, 11), _hb(1, 12), _coll(0, 1), _coll(1, 1), bye(1),
             op_batch(0, [{"id": 2, "op": "all_reduce", "seq": 2, "t_start": T0_NS,
                           "t_end": -1}], G2)])  # still in it: a live hang
    assert diag.update() == []  # a wait is timed from when the viewer first saw it
    clock.advance(1.5)
    m.apply([_hb(0, 11)])  # still there, waiting
    (hang,) = diag.update()
    assert hang.type == "hang" and hang.seq == 2
    clock.advance(3)
    m.apply(_job((21, 22), (1, 2), t=5 * SEC))
    lost, end = diag.update()  # rank 0 of job 1 never said goodbye: replaced, it is lost
    assert (lost.type, lost.ranks) == ("lost_rank", (0,))
    assert (end.type, end.about) == ("resolved", "hang")
    assert end.message.startswith("ended with job 1, unresolved after 3.0 s: all_reduce #2")
    assert m.instances == 1 + 2 and diag.findings() == []


def test_a_rank_silent_after_a_job_mate_said_goodbye_ended_without_one():
    """What ``commviz watch`` sees when torchrun stops a worker after another one failed:
    no rank keeps reporting, but the goodbye shows the job ended, not the viewer stalling."""
    clock, m, diag = _model()
    m.apply([_hb(0, 11), _hb(1, 12)])
    clock.advance(0.3)
    m.apply([bye(0)])
    clock.advance(0.7)
    assert diag.update() == []  # rank 1's silence (1.0 s) is not long enough yet
    clock.advance(0.3)
    assert diag.update() == []  # long enough: confirming
    clock.advance(0.3)
    (lost,) = diag.update()
    assert lost.type == "lost_rank" and lost.ranks == (1,)
    assert lost.message.startswith("rank 1 ended without saying goodbye (it crashed or was "
                                   "killed): nothing from it for 1.6 s, and rank 0 said goodbye")
    m.apply([_hb(1, 22), _hb(0, 21)])  # the next job: no "resolved" for a lost rank
    assert diag.update() == []


def test_a_watcher_names_the_ranks_silent_at_its_close():
    clock, m, diag = _model()
    m.apply([_hb(0, 11), _hb(1, 12), bye(1)])
    assert diag.silent() == []
    clock.advance(1.5)
    assert diag.silent() == [0]
    (f,) = diag.finish(diag.silent())
    assert f.message == "rank 0 ended without saying goodbye (it crashed or was killed)"


def test_stats_replays_a_recording_of_two_jobs_in_their_generations(tmp_path, capsys):
    """The trial's second finding: two clean runs into one watcher, replayed by stats."""
    path = tmp_path / "two.jsonl"
    rec = recording.Recorder(path)
    for pids, t in (((11, 12), 0), ((21, 22), 18 * SEC)):
        rec.write(_job(pids, (1, 2, 3), t=t))
    rec.close({})
    assert cli.main(["stats", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["records"] == 24
    rows = {(r["op"], r["size"]): r for r in out["rows"]}
    assert rows[("all_reduce", 4000)]["count"] == 6
    assert rows[("send", 2000)]["count"] == 6
    assert all(r["skew_p50_us"] < 1 for r in out["rows"])  # no pair 18 s apart
    kinds = [json.loads(line).get("kind") for line in path.read_text().splitlines()]
    assert kinds.count("bye") == 4 and kinds.count("rank") == 4
    replay = Model()
    replay.apply(list(recording.read(path)))
    assert (replay.instances, replay.transfers, len(replay.jobs)) == (6, 6, 2)


@pytest.mark.integration
def test_headless_shows_each_job_joining(tmp_path):
    from io import StringIO

    from commviz import headless
    from commviz.viewer.session import Session

    session = Session("tcp://127.0.0.1:*", collect_instances=True)
    out = StringIO()
    try:
        printer = headless._Printer(session, out)
        session.model.apply(_job((11, 12), (1,)))
        printer.flush()
        session.model.apply([_hb(1, 22)])
        printer.flush()
        session.model.apply([_hb(0, 21)])
        printer.flush()
    finally:
        session.close()
    joined = [line for line in out.getvalue().splitlines() if "joined" in line]
    assert joined == ["rank 0/2 joined: node0 pid 11 gloo cpu",
                      "rank 1/2 joined: node0 pid 12 gloo cpu",
                      "job 2: rank 1/2 joined: node0 pid 22 gloo cpu",
                      "job 2: rank 0/2 joined: node0 pid 21 gloo cpu"]


def test_a_later_jobs_op_is_not_aged_by_an_earlier_jobs_op_of_the_same_id():
    """Each process numbers its ops from 0: job 2's op 3, in flight for a moment, is not the
    leftover op 3 of job 1 that has waited for seconds (no false hang), and a replaced
    process's ops in flight are dropped (they will never end)."""
    clock, m, diag = _model()
    m.apply([_hb(0, 11), _hb(1, 12), _coll(0, 1), _coll(1, 1), bye(1),
             op_batch(0, [{"id": 3, "op": "all_reduce", "seq": 2, "t_start": T0_NS,
                           "t_end": T0_NS + 1000, "flags": protocol.FLAG_FAILED},
                          {"id": 4, "op": "barrier", "seq": 3, "t_start": T0_NS,
                           "t_end": -1}], G2)])
    # #2: rank 0 failed in it and rank 1 left without coming: said at once
    assert [(f.type, f.seq) for f in diag.update()] == [("failed", 2)]
    clock.advance(5)
    m.apply([_hb(0, 11)])
    assert [(f.type, f.seq) for f in diag.update()] == [("hang", 3)]  # rank 0 still in #3
    m.apply([_hb(0, 21), _hb(1, 22),
             op_batch(0, [{"id": 3, "op": "all_reduce", "seq": 1, "t_start": T0_NS + 6 * SEC,
                           "t_end": -1}], G2)])
    assert [(f.rank, f.seq) for f in m.inflight.values()] == [(0, 1)]  # job 1's barrier: gone
    clock.advance(0.3)
    assert sorted((f.type, f.about or "", f.seq or 0) for f in diag.update()) == [
        ("lost_rank", "", 0), ("resolved", "failed", 2), ("resolved", "hang", 3)]


def test_a_jobs_straggler_holds_until_the_next_job_and_ends_with_its_job():
    clock, m, diag = _model()
    ms = 1_000_000

    def step(seq, late_ms):
        return [op_batch(r, [{"id": seq, "op": "all_reduce", "seq": seq, "bytes_in": 4000,
                              "t_start": T0_NS + seq * SEC + (late_ms * ms if r else 0),
                              "t_end": T0_NS + seq * SEC + (late_ms + 1) * ms}], G2)
                for r in (0, 1)]

    m.apply([_hb(0, 11), _hb(1, 12)] + [b for seq in (1, 2, 3) for b in step(seq, 50)]
            + [bye(0), bye(1)])
    (f,) = diag.update()
    assert (f.type, f.ranks) == ("straggler", (1,))
    clock.advance(5)
    assert diag.update() == [] and diag.findings() == [f]  # the job ended: still what it did
    m.apply([_hb(0, 21), _hb(1, 22)] + step(1, 0))
    (end,) = diag.update()
    assert (end.type, end.about) == ("resolved", "straggler")
    assert end.message.startswith("ended with job 1, unresolved after 5.0 s: rank 1 arrived")
