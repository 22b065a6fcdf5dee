"""The encoders that the rank's emitter and the fleet simulator share write the wire exactly
as laid out here: each expected message is built field by field, in its key order, and the
encoder's bytes must equal its msgpack bytes (the viewer reads what was sent before)."""

import msgpack
import numpy as np

from commviz.rank.emitter import encode_batch, encode_groups
from commviz.rank.records import FIELDS
from commviz.wire import clocksync, protocol

GROUPS = {0: ("0", [0, 1]), 3: ("3", [1])}
SITES = [("train.py", 7), ("train.py", 9)]
T = 1_700_000_000_000_000_000


def _record(i, gid=0, site=0, t_end=None):
    return [i, protocol.OP_CODE["all_reduce"], protocol.NO_CODE, gid, i + 1, -1, 16, 32,
            protocol.DTYPE_CODE["float32"], protocol.FLAG_ASYNC, T + i,
            T + i + 10 if t_end is None else t_end, site]


def _expected_ops(rank, records, groups, sites, inc, shift=0):
    columns = {name: [rec[n] for rec in records] for n, name in enumerate(FIELDS)}
    columns["t_start"] = [t + shift for t in columns["t_start"]]
    columns["t_end"] = [t + shift if t >= 0 else t for t in columns["t_end"]]
    cols = {name: np.array(columns[name], protocol.COLUMN_DTYPES[name]).tobytes()
            for name in protocol.COLUMNS}
    msg = {"v": 1, "k": "ops", "rank": rank, "cols": cols,
           **({"groups": groups} if groups else {}), "sites": sites, "inc": inc}
    return msgpack.packb(msg, use_bin_type=True)


def test_a_small_batch_with_two_groups_two_sites_one_in_flight_and_a_clock_shift():
    records = [_record(0), _record(1, gid=3, site=1), _record(2, t_end=-1)]
    data = encode_batch(5, records, SITES, inc=77, shift_ns=1_000, groups=GROUPS)
    assert data == _expected_ops(5, records, [[0, "0", [0, 1]], [3, "3", [1]]],
                                 [[0, "train.py", 7], [1, "train.py", 9]], 77, shift=1_000)
    batch = protocol.decode(data)
    assert batch.cols["t_start"].tolist() == [T + 1_000, T + 1_001, T + 1_002]
    assert batch.cols["t_end"].tolist() == [T + 1_010, T + 1_011, -1]


def test_a_large_batch_of_repeated_values_is_the_same_layout():
    records = [_record(i, site=1) for i in range(100)]
    for rec in records:  # every column but id, seq, t_start, t_end holds one value
        rec[10], rec[11] = T, T + 10
    data = encode_batch(2, records, SITES, inc=9, groups=GROUPS)
    assert data == _expected_ops(2, records, [[0, "0", [0, 1]]], [[1, "train.py", 9]], 9)
    assert len(protocol.decode(data)) == 100


def test_a_batch_names_its_groups_by_id_unless_given_their_members():
    records = [_record(0), _record(1, gid=3)]
    data = encode_batch(4, records, SITES, inc=5)
    assert data == _expected_ops(4, records, [], [[0, "train.py", 7]], 5)
    batch = protocol.decode(data)
    assert batch.groups == {} and batch.cols["gid"].tolist() == [0, 3]


def test_groups_are_announced_in_grp_messages_split_by_members():
    data = encode_groups(6, GROUPS, [3, 0], inc=11)
    assert data == [msgpack.packb({"v": 1, "k": "grp", "rank": 6,
                                   "groups": [[3, "3", [1]], [0, "0", [0, 1]]], "inc": 11},
                                  use_bin_type=True)]
    assert protocol.decode(data[0]) == protocol.Groups(6, {3: ("3", (1,)), 0: ("0", (0, 1))}, 11)
    big = {g: (str(g), list(range(protocol.GROUP_MEMBERS_MAX // 2))) for g in range(3)}
    parts = [protocol.decode(m) for m in encode_groups(0, big, [0, 1, 2])]
    assert [sorted(p.groups) for p in parts] == [[0, 1], [2]]


def test_a_batch_with_no_incarnation_leaves_it_out():
    data = encode_batch(0, [_record(0)], SITES)
    assert "inc" not in msgpack.unpackb(data)


def _expected_heartbeat(**extra):
    return msgpack.packb({"v": 1, "k": "hb", "rank": 3, "world": 8, "host": "node-1",
                          "pid": 4242, "backend": "nccl", "device": "cuda:3", "t_ns": T,
                          "dropped": 2, "tel": {"cpu_pct": 12.5}, "inc": 77, **extra},
                         use_bin_type=True)


def _heartbeat(job="job-a", clk=None):
    return protocol.encode_heartbeat(3, world=8, host="node-1", pid=4242, backend="nccl",
                                     device="cuda:3", t_ns=T, dropped=2,
                                     tel={"cpu_pct": 12.5}, inc=77, job=job, clk=clk)


def test_heartbeat_layout_with_and_without_clock_samples():
    assert _heartbeat() == _expected_heartbeat(job="job-a")
    assert _heartbeat(clk=[]) == _expected_heartbeat(job="job-a")
    clk = [[T, T + 5, T + 6, T + 20]]
    assert _heartbeat(clk=clk) == _expected_heartbeat(job="job-a", clk=clk)
    hb = protocol.decode(_heartbeat(clk=clk))
    assert isinstance(hb, protocol.Heartbeat) and hb.rank == 3 and hb.job == "job-a"


def test_heartbeat_cuts_the_job_key_to_what_the_viewer_accepts():
    data = _heartbeat(job="j" * (protocol.JOB_KEY_MAX + 10))
    assert data == _expected_heartbeat(job="j" * protocol.JOB_KEY_MAX)
    assert protocol.decode(data).job == "j" * protocol.JOB_KEY_MAX


def test_bye_layout():
    data = protocol.encode_bye(3, 77, T, 2)
    assert data == msgpack.packb({"v": 1, "k": "bye", "rank": 3, "inc": 77, "t_ns": T,
                                  "dropped": 2}, use_bin_type=True)
    assert protocol.decode(data) == protocol.Bye(3, T, 2, 77)


def test_clock_request_layout():
    data = clocksync.encode_request(T)
    assert data == msgpack.packb({"v": 1, "k": "tq", "t1": T}, use_bin_type=True)
    assert clocksync.decode_request(data) == T
