"""A recording's op records read as ``model.Records`` (a batch of all ranks, what
``commviz stats`` and ``commviz play`` read) leave the model exactly as the per-rank batches
they stand for do: the same statistics, matches, late arrivals, clocks, lanes and counters,
from either format, with hosts whose clocks move between batches, an incarnation heard from
after its first records, transfers, ops still running, and more than MAX_BATCH records at
once."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from fakes import T0_NS, op_batch

from commviz import cli
from commviz.viewer import recording
from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.model import Model, Records
from commviz.wire import protocol

RANKS = 48  # 6 hosts of 8
STEPS = 24
MAX_BATCH = 500  # records a batch of ranks holds, here: several between two rank lines


def _heartbeat(rank: int, t_ns: int, offset_ns: int, delay_ns: int) -> protocol.Heartbeat:
    """Rank ``rank`` on host ``rank // 8``, whose clock is ``offset_ns`` off the viewer's,
    with one round trip of ``delay_ns``."""
    t1 = t_ns + offset_ns
    t2 = t_ns + delay_ns // 2
    return protocol.Heartbeat(rank, RANKS, f"node{rank // 8}", 100 + rank, "nccl",
                              f"cuda:{rank % 8}", t1, 0, {"cpu_pct": 10.0},
                              ((t1, t2, t2 + 10, t1 + delay_ns + 10),), (1 << 40) + rank,
                              "tcp://node0:29500")


def _rounds() -> list[list[protocol.Message]]:
    rng = np.random.default_rng(3)
    offsets = rng.integers(-4_000_000, 4_000_000, RANKS // 8)
    world = {0: ("0", tuple(range(RANKS))), 1: ("1", tuple(range(0, RANKS, 2)))}
    sites = {0: ("train.py", 10), 1: ("train.py", 20)}
    late = 17  # late at every all_reduce from step 10
    rounds = []
    for step in range(STEPS):
        t0 = T0_NS + step * 100_000_000
        msgs: list[protocol.Message] = []
        for r in range(RANKS):
            if r == 41 and step < 2:
                continue  # heard from after its first records
            msgs.append(_heartbeat(r, t0, int(offsets[r // 8]),
                                   int(rng.integers(50_000, 900_000))))
        starts = t0 + 1_000_000 + rng.integers(0, 500_000, RANKS)
        if step >= 10:
            starts[late] += 30_000_000
        end = int(starts.max()) + 2_000_000
        for r in range(RANKS):
            off = int(offsets[r // 8])
            recs = [{"id": 3 * step, "op": "all_reduce", "seq": step + 1, "gid": 0,
                     "bytes_in": 1 << 20, "bytes_out": 1 << 20, "t_start": int(starts[r]) + off,
                     "t_end": end + off + int(rng.integers(0, 20_000))}]
            if r % 2 == 0:
                recs.append({"id": 3 * step + 1, "op": "all_gather", "seq": step + 1, "gid": 1,
                             "site": 1, "bytes_in": 4096, "bytes_out": 4096 * RANKS // 2,
                             "t_start": t0 + 50_000_000 + off,
                             "t_end": t0 + 52_000_000 + off + int(rng.integers(0, 9_000))})
            if r < 8:  # pairs 0->1, 2->3...: sends and receives
                send = r % 2 == 0
                recs.append({"id": 3 * step + 2, "op": "send" if send else "recv",
                             "peer": r + 1 if send else r - 1, "seq": step + 1,
                             "bytes_in": 512 if send else 0, "bytes_out": 0 if send else 512,
                             "t_start": t0 + 60_000_000 + off,
                             "t_end": t0 + 61_000_000 + off})
            if r == 5 and step == STEPS - 1:  # still running when the recording ends
                recs.append({"id": 999, "op": "barrier", "seq": 1, "gid": 1,
                             "t_start": t0 + 70_000_000 + off, "t_end": -1})
            batch = op_batch(r, recs, world, sites)
            msgs.append(dataclasses.replace(batch, inc=(1 << 40) + r))
        rng.shuffle(msgs)  # the ranks' messages interleave
        rounds.append(msgs)
    return rounds


@pytest.fixture(params=["r.jsonl", "r.cvz"])
def path(request, tmp_path, monkeypatch):
    path = tmp_path / request.param
    monkeypatch.setattr(recording, "FLUSH_S", 0.0)
    monkeypatch.setattr(protocol, "MAX_BATCH", MAX_BATCH)
    rec = recording.Recorder(path)
    for msgs in _rounds():
        rec.write(msgs)
    rec.close({})
    return path


def _state(messages: list, lanes: bool = True) -> dict:
    """Everything ``commviz stats`` prints and more, of a model fed ``messages`` in one
    round."""
    model = Model(clock=lambda: 0.0, lanes=lanes)
    diagnosis = Diagnosis(model)
    model.apply(messages)
    coll, p2p = model.pending()
    return {"stats": model.stats_table(), "records": model.records,
            "instances": model.instances, "transfers": model.transfers,
            "failed": model.failed, "incomplete": model.incomplete(),
            "late": [(r, dataclasses.astuple(t)) for r, t in diagnosis.late_arrivals()],
            "groups": model.groups, "sites": model.sites,
            "clocks": model.clock_offsets(),
            "ranks": {r: (s.ops, s.bytes_in, s.bytes_out, s.last_op, s.last_seq, s.job)
                      for r, s in model.ranks.items()},
            "lanes": {r: lane.tolist() for r, lane in model.lanes(0).items()},
            "inflight": sorted(model.inflight),
            "pending": [{k: v.tolist() for k, v in rows.items()} for rows in (coll, p2p)],
            "first_transfer": model.first_transfer_ns}


def test_records_leave_the_model_as_the_batches_they_stand_for(path):
    for playback in (False, True):
        batches = list(recording.read(path, playback=playback))
        records = list(recording.read(path, playback=playback, records=True))
        assert sum(isinstance(m, Records) for m in records) >= 2  # more than MAX_BATCH
        assert not any(isinstance(m, Records) for m in batches)
        assert sum(len(m) for m in records if isinstance(m, Records)) == \
            sum(len(m) for m in batches if isinstance(m, protocol.OpBatch))
        assert _state(records) == _state(batches)
    state = _state(list(recording.read(path, records=True)))
    assert state["late"] and state["late"][0][0] == 17  # what is compared is not empty
    assert state["transfers"] == 4 * STEPS and state["instances"] == 2 * STEPS
    assert _state(list(recording.read(path, playback=True, records=True)))["inflight"]
    assert any(c.offset_ns for c in state["clocks"].values())


def test_the_model_stats_reads_into_keeps_no_lanes_and_all_else(path):
    """``commviz stats`` shows no timeline: its model keeps no lanes, and is otherwise the
    same."""
    assert not cli.stats_model().keeps_lanes
    for playback in (False, True):
        messages = list(recording.read(path, playback=playback, records=True))
        kept, none = _state(messages), _state(messages, lanes=False)
        assert any(kept.pop("lanes").values()) and not any(none.pop("lanes").values())
        assert none == kept


def test_stats_prints_what_it_printed_from_the_batches(path, capsys, monkeypatch):
    assert cli.main(["stats", "--json", str(path)]) == 0
    now = json.loads(capsys.readouterr().out)
    read = recording.read
    monkeypatch.setattr(recording, "read", lambda *a, records=False, **k: read(*a, **k))
    monkeypatch.setattr(cli, "STATS_ROUND_RECORDS", 1 << 40)  # rounds of 4096 messages
    assert cli.main(["stats", "--json", str(path)]) == 0
    before = json.loads(capsys.readouterr().out)
    assert now == before
    assert now["late_arrivals"] and now["transfers"]


def _hb(rank: int, host: str, inc: int, pid: int, offset_ns: int, t_ns: int) -> protocol.Heartbeat:
    return protocol.Heartbeat(rank, 4, host, pid, "nccl", "cuda:0", t_ns + offset_ns, 0, {},
                              ((t_ns + offset_ns, t_ns, t_ns + 10, t_ns + offset_ns + 1000),),
                              inc, "tcp://a:29500")


def _records(whos: list, batches: list[protocol.OpBatch]) -> Records:
    """One ``Records`` of ``batches`` (processes ``whos`` indexes, in order) on the table
    ``whos``: the very list each message shares, as a compact recording's reader gives it."""
    cols = protocol.join_columns([b.cols for b in batches], protocol.COLUMNS)
    who = np.concatenate([np.full(len(b), whos.index((b.rank, b.inc))) for b in batches])
    return Records(whos, who, cols, {0: ("0", (0, 1, 2, 3))}, {0: ("train.py", 10)})


def test_records_of_one_table_follow_hosts_and_incarnations_as_batches_do():
    """Messages on one growing table (its processes' incarnations kept from one to the
    next): a rank moved to another host (another clock) in between, a rank number without
    ``inc`` whose process changed, and a process heard only after its first records."""
    whos: list[tuple[int, int]] = [(0, 7), (1, 8), (2, 0)]
    group = {0: ("0", (0, 1, 2, 3))}

    def ops(rank: int, inc: int, seq: int, t_ns: int) -> protocol.OpBatch:
        batch = op_batch(rank, [{"id": seq, "op": "all_reduce", "seq": seq, "bytes_in": 64,
                                 "t_start": t_ns, "t_end": t_ns + 1_000_000}], group,
                         {0: ("train.py", 10)})
        return dataclasses.replace(batch, inc=inc)

    t = T0_NS
    script: list[list] = [  # each: heartbeats, or the batches of one Records
        [_hb(0, "a", 7, 10, 0, t), _hb(1, "b", 8, 11, 5_000_000, t), _hb(2, "a", 0, 12, 0, t)],
        [ops(1, 8, 1, t + 5_000_000), ops(0, 7, 1, t), ops(2, 0, 1, t)],
        [_hb(1, "c", 8, 11, -3_000_000, t + 1), _hb(2, "a", 0, 13, 0, t + 1)],
    ]
    whos.append((3, 9))  # the same table, grown
    script += [[ops(0, 7, 2, t + 2), ops(3, 9, 1, t + 2), ops(1, 8, 2, t - 3_000_000),
                ops(2, 0, 2, t + 2)],
               [_hb(3, "c", 9, 14, -3_000_000, t + 3)],
               [ops(3, 9, 2, t - 2_999_000), ops(0, 7, 3, t + 3), ops(1, 8, 3, t + 3),
                ops(2, 0, 3, t + 3)]]
    as_records = [m for step in script for m in (
        [_records(whos, step)] if isinstance(step[0], protocol.OpBatch) else step)]
    as_batches = [m for step in script for m in step]
    assert _state(as_records) == _state(as_batches)
    state = _state(as_records)
    assert state["ranks"][3][0] == 2 and state["ranks"][2][5] == 2  # held, then applied;
    # a new process of rank 2, in a job of its own; rank 1's times on host b's clock, then c's
    coll = state["pending"][0]
    assert sorted(t for r, t in zip(coll["rank"], coll["t_start"]) if r == 1) == \
        [t - 495, t - 495, t + 3 + 2_999_505]
