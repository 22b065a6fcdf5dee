"""Two jobs running at the same time with the same rank numbers into one viewer: the
incarnation id (``inc``) and job key (``job``) of the protocol, the model's generations, the
recording and its replay. Pure tests with scripted messages;
tests/test_concurrent_jobs_integration.py runs real gloo jobs."""

import json
from dataclasses import replace

import msgpack
import pytest
import zmq
from fakes import T0_NS, FakeClock, op_batch

from commviz import cli
from commviz.viewer import model as model_module
from commviz.viewer import recording
from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.model import Model
from commviz.viewer.session import Session
from commviz.wire import protocol

G2 = {0: ("0", (0, 1))}
SEC = 1_000_000_000
KEY_A, KEY_B = "node0/127.0.0.1:29500", "node0/127.0.0.1:29501"
# (rank, inc, pid) of each job's processes
JOB_A = ((0, 101, 11), (1, 102, 12))
JOB_B = ((0, 201, 21), (1, 202, 22))


def _hb(rank, inc, pid, key):
    return protocol.Heartbeat(rank, 2, "node0", pid, "gloo", "cpu", T0_NS, 0, {}, (), inc, key)


def _coll(rank, inc, seq, nbytes, t):
    return replace(op_batch(rank, [{"id": seq, "op": "all_reduce", "seq": seq,
                                    "bytes_in": nbytes, "bytes_out": nbytes,
                                    "t_start": T0_NS + t, "t_end": T0_NS + t + 1000}], G2),
                   inc=inc)


def _p2p(rank, inc, seq, nbytes, t):
    op, peer = ("send", 1) if rank == 0 else ("recv", 0)
    return replace(op_batch(rank, [{"id": 100 + seq, "op": op, "seq": seq, "peer": peer,
                                    "bytes_in": nbytes if rank == 0 else 0,
                                    "bytes_out": nbytes if rank == 1 else 0,
                                    "t_start": T0_NS + t, "t_end": T0_NS + t + 1000}], G2),
                   inc=inc)


def _steps(job, seqs, nbytes, t):
    """Per seq: an all_reduce and a send 0 -> 1 on both ranks of ``job``, at ``t`` + seq ms."""
    return [make(rank, inc, seq, nbytes, t + seq * 1_000_000)
            for seq in seqs for make in (_coll, _p2p) for rank, inc, _ in job]


def _interleaved():
    """Heartbeats in the order that pairs ranks across jobs by number alone (A0, B0, B1, A1),
    then both jobs' steps one after the other, job B half a second later than job A; job A
    moves 4000 bytes, job B 8000, so that its statistics tell which job an instance was."""
    msgs = [_hb(0, 101, 11, KEY_A), _hb(0, 201, 21, KEY_B), _hb(1, 202, 22, KEY_B),
            _hb(1, 102, 12, KEY_A)]
    a, b = _steps(JOB_A, (1, 2, 3), 4000, 0), _steps(JOB_B, (1, 2, 3), 8000, SEC // 2)
    for i in range(0, len(a), 2):
        msgs += b[i:i + 2] + a[i:i + 2]
    return msgs


def _model():
    clock = FakeClock()
    m = Model(clock)
    m.new_instances = []
    return m, Diagnosis(m, wall_ns=clock.wall_ns)


def _counts(m):
    return {(row.op, row.size): row.count for row in m.stats.values()}


def test_two_jobs_at_once_with_the_same_ranks_never_match_across():
    m, diag = _model()
    m.apply(_interleaved())
    assert [{r: s.pid for r, s in j.items()} for j in m.jobs] == [{0: 11, 1: 12},
                                                                   {0: 21, 1: 22}]
    assert (m.instances, m.transfers, m.failed) == (6, 6, 0)
    assert _counts(m) == {("all_reduce", 4000): 3, ("send", 4000): 3,
                          ("all_reduce", 8000): 3, ("send", 8000): 3}
    assert all(i.skew_ns < SEC // 10 for i in m.new_instances)
    assert len(m.pending()[0]["rank"]) == len(m.pending()[1]["rank"]) == 0
    assert not m.replaced and not any(f.type == "lost_rank" for f in diag.update())
    assert [m.ranks[r].pid for r in (0, 1)] == [21, 12]  # the newest process of each number
    assert (m.job_over(1), m.job_over(2)) == (False, False)


def test_when_one_job_ends_the_other_goes_on_and_is_shown():
    m, _ = _model()
    m.apply(_interleaved() + [protocol.Bye(0, T0_NS, 0, 201), protocol.Bye(1, T0_NS, 0, 202)])
    assert (m.job_over(1), m.job_over(2)) == (False, True)
    assert [(m.ranks[r].pid, m.ranks[r].exited) for r in (0, 1)] == [(11, False), (12, False)]
    m.apply([protocol.Bye(0, T0_NS, 0, 101), protocol.Bye(1, T0_NS, 0, 102)])
    assert m.job_over(1)


def test_heartbeats_of_a_job_running_beside_another_change_neither():
    m, _ = _model()
    m.apply(_interleaved())
    m.apply(_interleaved()[:4] * 3)  # both jobs' heartbeats keep coming, interleaved
    assert len(m.jobs) == 2 and not m.replaced and m.replacements == 0


def test_a_later_process_of_the_same_job_key_replaces_only_its_own():
    """Job A is followed by job A' on the same rendezvous (A killed, no goodbyes) while job
    B runs: A's processes are replaced (and reported lost), B's are not."""
    m, diag = _model()
    m.apply(_interleaved())
    m.apply([_hb(0, 301, 31, KEY_A), _hb(1, 302, 32, KEY_A)]
            + _steps(((0, 301, 31), (1, 302, 32)), (1, 2), 4000, 60 * SEC))
    assert [{r: s.pid for r, s in j.items()} for j in m.jobs] == [
        {0: 11, 1: 12}, {0: 21, 1: 22}, {0: 31, 1: 32}]
    assert [s.pid for s in m.replaced] == [11, 12]
    assert m.job_over(1) and not m.job_over(2) and not m.job_over(3)
    lost = sorted(f.key for f in diag.update() if f.type == "lost_rank")
    assert lost == [("lost_rank", 0, 1, 11), ("lost_rank", 1, 1, 12)]
    assert (m.instances, m.transfers) == (8, 8)


def test_records_of_a_process_not_heard_yet_wait_for_its_heartbeat():
    """A viewer started late: job B's ops come before its heartbeats, while job A runs."""
    m, _ = _model()
    m.apply([_hb(0, 101, 11, KEY_A), _hb(1, 102, 12, KEY_A)])
    m.apply(_steps(JOB_B, (5, 6), 8000, 0) + _steps(JOB_A, (5, 6), 4000, 0))
    assert (m.instances, m.transfers) == (2, 2)  # job A's only: B's wait
    m.apply([_hb(0, 201, 21, KEY_B), _hb(1, 202, 22, KEY_B)])
    assert (m.instances, m.transfers) == (4, 4)
    assert _counts(m) == {("all_reduce", 4000): 2, ("send", 4000): 2,
                          ("all_reduce", 8000): 2, ("send", 8000): 2}
    assert m.evicted == 0 and not m._unheard


def test_records_held_for_unheard_processes_are_bounded(monkeypatch):
    monkeypatch.setattr(model_module, "UNHEARD_MAX", 3)
    m, _ = _model()
    m.apply(_steps(JOB_B, (1, 2), 8000, 0))  # 8 records, one per batch
    assert m.evicted == 5 and m.records == 0
    m.apply([protocol.Bye(0, T0_NS, 0, 201)])  # a goodbye of a process never heard
    assert not m.ranks or not any(s.exited for s in m.ranks.values())


# ---- protocol ---------------------------------------------------------------------------
_TEL = {"cpu_pct": 1.0}


def _msgs(**extra):
    """One valid message of every kind a rank sends, with ``extra`` fields."""
    cols = op_batch(0, [{"id": 1, "op": "barrier", "seq": 1, "t_start": 5}]).cols
    return {
        "ops": {"v": 1, "k": "ops", "rank": 0, "cols": {k: v.tobytes() for k, v in cols.items()},
                "groups": [[0, "0", [0, 1]]], "sites": [[0, "x.py", 1]], **extra},
        "hb": {"v": 1, "k": "hb", "rank": 0, "world": 2, "host": "h", "pid": 9,
               "backend": "gloo", "device": "cpu", "t_ns": 5, "dropped": 0, "tel": _TEL,
               **extra},
        "bye": {"v": 1, "k": "bye", "rank": 0, "t_ns": 5, "dropped": 0, **extra},
        "ph": {"v": 1, "k": "ph", "rank": 0, "spans": [["step", 0, 1, 2]], **extra},
        "topo": {"v": 1, "k": "topo", "rank": 0, "host": "h", "gpu": -1, "gpus": [],
                 "links": [], "note": "", **extra},
    }


@pytest.mark.parametrize("kind", ["ops", "hb", "bye", "ph", "topo"])
def test_every_rank_message_carries_its_incarnation(kind):
    assert protocol.decode(msgpack.packb(_msgs(inc=(1 << 63) - 1)[kind])).inc == (1 << 63) - 1
    assert protocol.decode(msgpack.packb(_msgs()[kind])).inc == 0  # an older rank: none


def test_encoders_add_inc_only_when_given():
    cols = {k: v.tobytes() for k, v in op_batch(0, [{"id": 1, "op": "barrier", "seq": 1,
                                                     "t_start": 5}]).cols.items()}
    assert protocol.decode(protocol.encode_ops(0, cols, [[0, "0", [0]]], [[0, "x", 1]],
                                               7)).inc == 7
    assert "inc" not in msgpack.unpackb(protocol.encode_phases(0, [("s", 0, 1, 2)]))
    assert protocol.decode(protocol.encode_phases(0, [("s", 0, 1, 2)], 8)).inc == 8
    assert protocol.decode(protocol.encode_topology(0, "h", {"gpu": -1, "gpus": [], "links": [],
                                                             "note": ""}, 9)).inc == 9


def test_heartbeat_job_key():
    assert protocol.decode(msgpack.packb(_msgs(job=KEY_A)["hb"])).job == KEY_A
    assert protocol.decode(msgpack.packb(_msgs()["hb"])).job == ""


@pytest.mark.parametrize("kind", ["ops", "hb", "bye", "ph", "topo"])
@pytest.mark.parametrize("inc", [0, -1, 1 << 63, "7", 1.5, True, None, [1]])
def test_a_malformed_incarnation_is_rejected(kind, inc):
    with pytest.raises(protocol.ProtocolError, match="'inc'"):
        protocol.decode(msgpack.packb(_msgs(inc=inc)[kind]))


@pytest.mark.parametrize("job", [5, None, "x" * (protocol.JOB_KEY_MAX + 1), b"k"])
def test_a_malformed_job_key_is_rejected(job):
    with pytest.raises(protocol.ProtocolError, match="'job'"):
        protocol.decode(msgpack.packb(_msgs(job=job)["hb"], use_bin_type=True))


@pytest.mark.integration
def test_the_viewer_counts_a_bad_incarnation_and_keeps_going():
    session = Session("tcp://127.0.0.1:*")
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(session.addr)
    try:
        for msg in (_msgs(inc="one")["hb"], _msgs(inc=0)["ops"], _msgs(inc=5)["hb"]):
            push.send(msgpack.packb(msg))
        for _ in range(100):
            session.poll(20)
            if session.rejected == 2 and session.model.ranks:
                break
        assert session.rejected == 2
        assert [(s.inc, s.pid) for s in session.model.ranks.values()] == [(5, 9)]
    finally:
        push.close(linger=0)
        ctx.term()
        session.close()


# ---- recording --------------------------------------------------------------------------
def test_a_recording_of_two_jobs_at_once_replays_them_apart(tmp_path, capsys):
    path = tmp_path / "both.jsonl"
    live, _ = _model()
    msgs = _interleaved() + [protocol.Bye(r, T0_NS, 0, inc) for r, inc, _ in JOB_A + JOB_B]
    live.apply(msgs)
    rec = recording.Recorder(path)
    rec.write(msgs)
    rec.close({})
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert {(o["rank"], o["inc"], o["job"]) for o in lines if o["kind"] == "rank"} == {
        (0, 101, KEY_A), (1, 102, KEY_A), (0, 201, KEY_B), (1, 202, KEY_B)}
    assert all("inc" in o for o in lines if o["kind"] in ("op", "bye", "tel"))
    replay = Model()
    replay.apply(list(recording.read(path)))
    assert [{r: s.pid for r, s in j.items()} for j in replay.jobs] == [{0: 11, 1: 12},
                                                                        {0: 21, 1: 22}]
    assert (replay.instances, replay.transfers, replay.failed) == (6, 6, 0)
    assert _counts(replay) == _counts(live)
    assert cli.main(["stats", str(path), "--json"]) == 0
    rows = {(r["op"], r["size"]): r["count"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows == {("all_reduce", 4000): 3, ("send", 4000): 3,
                    ("all_reduce", 8000): 3, ("send", 8000): 3}


def test_a_recording_without_incarnations_still_loads(tmp_path):
    """What an earlier commviz wrote: no ``inc``, no ``job``; two jobs one after the other."""
    path = tmp_path / "old.jsonl"
    lines = [{"format": "commviz-recording", "version": 1, "commviz": "0.1", "protocol": 1,
              "created_ns": T0_NS}]
    for job, pids in enumerate(((11, 12), (21, 22))):
        lines += [{"kind": "rank", "rank": r, "world": 2, "host": "node0", "pid": pid,
                   "backend": "gloo", "device": "cpu"} for r, pid in enumerate(pids)]
        lines += [{"kind": "op", "rank": r, "id": 1, "op": "all_reduce", "parent": None,
                   "group": [0, 1], "pg": "0", "seq": 1, "peer": None, "bytes_in": 4000,
                   "bytes_out": 4000, "dtype": "float32", "async": False, "ddp": False,
                   "flags": 0, "t_start_ns": T0_NS + job * SEC, "t_end_ns": T0_NS + job * SEC + 9,
                   "file": "x.py", "line": 1} for r in (0, 1)]
        lines += [{"kind": "bye", "rank": r, "t_ns": T0_NS, "dropped": 0} for r in (0, 1)]
    path.write_text("".join(json.dumps(o) + "\n" for o in lines))
    replay = Model()
    replay.apply(list(recording.read(path)))
    assert (replay.instances, len(replay.jobs)) == (2, 2)
    assert all(s.inc == 0 for j in replay.jobs for s in j.values())


def test_a_smaller_job_after_one_that_ended_leaves_the_ended_ranks_out_of_the_panels():
    """`commviz watch`: a 3-rank job, then a 2-rank one: the ranks panel kept job 1's rank 2
    ('exited'), the ring drew a [2] for the 2-rank all_reduce (user trial)."""
    model = Model(FakeClock())
    first = [(r, 300 + r, 30 + r) for r in range(3)]
    model.apply([replace(_hb(r, inc, pid, KEY_A), world=3) for r, inc, pid in first])
    model.apply([replace(protocol.Bye(r, T0_NS, 0), inc=inc) for r, inc, _ in first])
    assert set(model.shown_ranks()) == {0, 1, 2} and model.world_size() == 3  # over, alone
    model.apply([_hb(r, inc, pid, KEY_B) for r, inc, pid in JOB_B])
    assert set(model.shown_ranks()) == {0, 1} and model.world_size() == 2
    assert model.nodes() == {"node0": [0, 1]} and set(model.lanes(0)) == {0, 1}
    assert set(model.ranks) == {0, 1, 2}  # still known: the diagnosis and stats see it
