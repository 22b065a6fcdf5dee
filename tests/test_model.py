"""Pure model tests: scripted messages in, matched instances and statistics out."""

import random

import pytest
from fakes import T0_NS, FakeClock, bye, heartbeat, inflight, op_batch

from commviz.knowledge import bandwidth
from commviz.viewer import model as model_mod
from commviz.viewer import waiting_rows
from commviz.viewer.model import Model

G4 = {0: ("0", (0, 1, 2, 3))}


def _coll(rank, seq, op="all_reduce", start=0, end=100, nbytes=64, out=None, gid=0, **kw):
    return {"id": seq, "op": op, "seq": seq, "gid": gid, "bytes_in": nbytes,
            "bytes_out": nbytes if out is None else out, "t_start": T0_NS + start,
            "t_end": T0_NS + end, **kw}


def test_collective_matches_only_when_every_member_reported():
    m = Model(FakeClock())
    m.new_instances = []
    m.apply([op_batch(r, [_coll(r, 1, start=r * 10, end=500 + r)], G4) for r in range(3)])
    assert m.instances == 0 and m.records == 3
    m.apply([op_batch(3, [_coll(3, 1, start=40, end=400)], G4)])
    (inst,) = m.new_instances
    assert (inst.op, inst.group, inst.seq, inst.size) == ("all_reduce", (0, 1, 2, 3), 1, 64)
    assert inst.t_first_start == T0_NS and inst.t_last_start == T0_NS + 40
    assert inst.time_ns == 502 - 40 and inst.skew_ns == 40


def test_same_seq_in_different_groups_are_different_instances():
    groups = {0: ("0", (0, 1)), 1: ("1", (0, 1))}
    m = Model(FakeClock())
    m.apply([op_batch(r, [_coll(r, 1, gid=0), {**_coll(r, 1, gid=1), "id": 9}], groups)
             for r in range(2)])
    assert m.instances == 2
    assert [(g, s) for g, s in m.groups] == [("0", (0, 1)), ("1", (0, 1))]


def test_p2p_pairs_kth_send_with_kth_recv():
    g = {0: ("0", (0, 1))}
    m = Model(FakeClock())
    m.new_instances = []
    sends = [{"id": k, "op": "send", "seq": k, "peer": 1, "bytes_in": 32, "t_start": T0_NS + k,
              "t_end": T0_NS + 100 + k} for k in (1, 2)]
    m.apply([op_batch(0, sends, g)])
    assert m.transfers == 0
    recvs = [{"id": 1, "op": "irecv", "seq": 2, "peer": 0, "bytes_out": 32,
              "t_start": T0_NS + 50, "t_end": T0_NS + 300}]
    m.apply([op_batch(1, recvs, g)])
    (t,) = m.new_instances
    assert (t.op, t.group, t.seq, t.size) == ("send", (0, 1), 2, 32)
    assert t.time_ns == 300 - 50
    assert m.transfers == 1 and len(m._p2p["rank"]) == 1  # send #1 still waits for its recv
    assert t.t_recv_end == T0_NS + 300


def test_a_transfer_knows_when_its_data_arrived_even_if_the_sender_returned_later():
    g = {0: ("0", (0, 1))}
    m = Model(FakeClock())
    m.new_instances = []
    m.apply([op_batch(0, [{"id": 0, "op": "send", "seq": 1, "peer": 1, "bytes_in": 32,
                           "t_start": T0_NS, "t_end": T0_NS + 900}], g),
             op_batch(1, [{"id": 0, "op": "recv", "seq": 1, "peer": 0, "bytes_out": 32,
                           "t_start": T0_NS + 10, "t_end": T0_NS + 400}], g)])
    (t,) = m.new_instances
    assert (t.t_last_start, t.t_recv_end, t.t_end) == (T0_NS + 10, T0_NS + 400, T0_NS + 900)
    all_reduce = [{"id": 1, "op": "all_reduce", "seq": 1, "bytes_in": 8, "t_start": T0_NS,
                   "t_end": T0_NS + 50}]
    m.apply([op_batch(0, all_reduce, g), op_batch(1, all_reduce, g)])
    assert m.new_instances[-1].op == "all_reduce" and m.new_instances[-1].t_recv_end is None


def test_recv_of_unknown_source_never_matches():
    g = {0: ("0", (0, 1))}
    m = Model(FakeClock())
    m.apply([op_batch(0, [{"id": 0, "op": "send", "seq": 1, "peer": 1, "t_start": T0_NS}], g),
             op_batch(1, [{"id": 0, "op": "recv", "seq": 0, "peer": -1, "t_start": T0_NS}], g)])
    assert m.transfers == 0


def test_inflight_then_completed():
    m = Model(FakeClock())
    m.apply([inflight(2, "all_reduce", seq=5, t_start=T0_NS, op_id=7)])
    (op,) = m.inflight.values()
    assert (op.rank, op.op, op.seq, op.group) == (2, "all_reduce", 5, (0, 1, 2, 3))
    assert m.records == 0
    m.apply([op_batch(2, [{"id": 7, "op": "all_reduce", "seq": 5, "t_start": T0_NS}], G4)])
    assert not m.inflight and m.records == 1


def test_heartbeat_and_bye_track_rank_state():
    clock = FakeClock()
    m = Model(clock)
    m.apply([heartbeat(1, 4, cpu=50.0, dropped=3)])
    s = m.ranks[1]
    assert (s.world, s.host, s.device, s.dropped, s.last_seen) == (4, "node0", "cpu", 3, clock.t)
    assert s.telemetry[-1][1]["cpu_pct"] == 50.0 and not s.exited
    clock.advance(2)
    m.apply([bye(1, dropped=4)])
    assert s.exited and s.dropped == 4 and s.last_seen == clock.t
    assert m.world_size() == 4


def test_per_rank_counters_and_last_op():
    m = Model(FakeClock())
    m.apply([op_batch(0, [_coll(0, 1, end=10, nbytes=8), _coll(0, 2, op="broadcast", end=20,
                                                               nbytes=8, out=0)], G4)])
    s = m.ranks[0]
    assert (s.ops, s.bytes_in, s.bytes_out, s.last_op) == (2, 16, 8, "broadcast")


def test_last_op_is_the_latest_to_end_and_of_equal_ends_the_first_come():
    """Counted per rank number in a round of several ranks (the 3rd rank has none): the
    latest t_end wins, of equal ones the earliest row, and an earlier round's later end
    stands."""
    m = Model(FakeClock())
    m.apply([op_batch(3, [_coll(3, 1, end=50, nbytes=4), _coll(3, 2, end=90, nbytes=4),
                          _coll(3, 3, op="broadcast", end=90, nbytes=4, out=0),
                          _coll(3, 4, end=70, nbytes=4)], G4),
             op_batch(0, [_coll(0, 1, end=10, nbytes=2, out=1)], G4),
             op_batch(1, [_coll(1, 7, op="broadcast", end=200, nbytes=8, out=0)], G4)])
    three, zero = m.ranks[3], m.ranks[0]
    assert (three.ops, three.bytes_in, three.bytes_out) == (4, 16, 12)
    assert (three.last_op, three.last_seq, three.last_end_ns) == ("all_reduce", 2, T0_NS + 90)
    assert (zero.ops, zero.bytes_in, zero.bytes_out, zero.last_seq) == (1, 2, 1, 1)
    assert (m.ranks[1].last_op, m.ranks[1].last_seq) == ("broadcast", 7)
    m.apply([op_batch(3, [_coll(3, 5, op="broadcast", end=80, nbytes=4, out=0)], G4)])
    assert (three.last_op, three.last_seq, three.ops) == ("all_reduce", 2, 5)


@pytest.mark.parametrize("op,n,b_in,b_out,size", [
    ("all_reduce", 4, 100, 100, 100),
    ("all_gather", 4, 25, 100, 100),
    ("reduce_scatter_tensor", 4, 100, 25, 100),
    ("gather", 4, 25, 0, 100),
    ("scatter", 4, 0, 25, 100),
    ("broadcast", 4, 0, 100, 100),
    ("all_to_all_single", 4, 100, 100, 100),
])
def test_sizes_follow_nccl_tests(op, n, b_in, b_out, size):
    assert bandwidth.size_of(op, n, b_in, b_out) == size


def test_bus_factors():
    assert bandwidth.bus_factor("all_reduce", 4) == 1.5
    assert bandwidth.bus_factor("all_gather", 4) == 0.75
    assert bandwidth.bus_factor("broadcast", 8) == 1.0
    assert bandwidth.bus_factor("send", 2) == 1.0
    assert bandwidth.bus_factor("barrier", 4) is None
    assert bandwidth.bus_factor("all_gather_object", 4) is None


def test_stats_rows_group_by_op_size_and_give_bandwidth():
    m = Model(FakeClock())
    # 4 instances of all_gather: 1000 B in per rank -> S = 4000 B; each takes 1 us
    batches = [op_batch(r, [_coll(r, s, op="all_gather", nbytes=1000, out=4000,
                                  start=s * 10_000, end=s * 10_000 + 1000) for s in (1, 2, 3, 4)],
                        G4) for r in range(4)]
    m.apply(batches)
    (row,) = m.stats_table()
    assert (row["op"], row["ranks"], row["size"], row["count"]) == ("all_gather", 4, 4000, 4)
    assert row["time_p50_us"] == pytest.approx(1.0)
    assert row["algbw_gbps"] == pytest.approx(4000 / 1e-6 / 1e9)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 0.75)


@pytest.mark.parametrize("value, shown", [
    (None, "n/a"), (0.0, "0"), (0.00004, "<0.001"), (0.000873, "<0.001"),
    (0.0009996, "0.00100"), (0.0012345, "0.00123"), (0.5, "0.500"), (0.99996, "1.00"),
    (1.2345, "1.23"), (12.345, "12.3"), (99.96, "100"), (371.8, "372")])
def test_bandwidths_keep_three_significant_digits_down_to_one_mb_per_second(value, shown):
    """CPU demos move KiBs in milliseconds: 0.00123 GB/s must not print as 0.001 or 0.000,
    or busbw = algbw x factor cannot be seen on screen. Below 0.001 one floor, "<0.001":
    0.000873, <0.0001 and 0.00112 side by side widened the columns (user trial)."""
    assert bandwidth.gbps_text(value) == shown
    assert len(shown) <= 7


def test_a_barrier_moves_no_data_so_neither_bandwidth_is_given():
    """Its algbw read 0 beside a busbw of n/a (user trial): both are None (n/a)."""
    m = Model(FakeClock())
    m.apply([op_batch(r, [_coll(r, s, op="barrier", nbytes=0, start=s * 10_000,
                                end=s * 10_000 + 1000) for s in (1, 2)], G4) for r in range(4)])
    (row,) = m.stats_table()
    assert (row["op"], row["size"], row["count"]) == ("barrier", 0, 2)
    assert row["algbw_gbps"] is None and row["busbw_gbps"] is None


def test_a_collective_that_failed_or_mixed_ops_is_no_instance():
    """The mismatch demo: at seq 3 ranks 0 and 1 call all_reduce, rank 2 broadcast, all fail
    after the timeout. That is not a 6 s all_reduce: kept out of the statistics and the
    replay, counted as failed (the diagnosis says what happened)."""
    from commviz.wire import protocol

    m = Model(FakeClock())
    m.new_instances = []
    seen = []
    m.on_collectives = lambda rows, heads: seen.append(len(rows["rank"]))
    ok = [op_batch(r, [_coll(r, 1, end=100)], G4) for r in range(4)]
    failed = [op_batch(r, [_coll(r, 2, start=200, end=6_000_000, flags=protocol.FLAG_FAILED
                                 if r == 1 else 0)], G4) for r in range(4)]
    mixed = [op_batch(r, [_coll(r, 3, op="broadcast" if r == 2 else "all_reduce",
                                start=7_000_000, end=7_000_100)], G4) for r in range(4)]
    m.apply(ok + failed + mixed)
    assert (m.instances, m.failed) == (1, 2)
    assert [i.seq for i in m.new_instances] == [1] and [i.seq for i in m.recent] == [1]
    assert [row["count"] for row in m.stats_table()] == [1]
    assert seen == [12]  # the diagnosis still sees all three rounds
    lanes = m.lanes(T0_NS, T0_NS + 8_000_000)
    assert all(len(lanes[r]) == 3 for r in range(4))
    # the failed and the mixed rounds waited until they ended: no transfer drawn (it read
    # as 6 s of transferring); the good one transferred from its last arrival
    assert all(lanes[r][1][2] == lanes[r][1][3] and lanes[r][2][2] == lanes[r][2][3]
               and lanes[r][0][2] < lanes[r][0][3] for r in range(4)), lanes


def test_a_transfer_that_failed_is_no_instance():
    from commviz.wire import protocol

    m = Model(FakeClock())
    send = op_batch(0, [{"id": 1, "op": "send", "seq": 1, "peer": 1, "bytes_in": 64,
                         "t_start": T0_NS, "t_end": T0_NS + 10, "flags": protocol.FLAG_FAILED}],
                    G4)
    recv = op_batch(1, [{"id": 1, "op": "recv", "seq": 1, "peer": 0, "bytes_out": 64,
                         "t_start": T0_NS, "t_end": T0_NS + 10}], G4)
    m.apply([send, recv])
    assert (m.transfers, m.failed, m.stats_table()) == (0, 1, [])


def test_a_record_that_failed_unmatched_still_shows_its_wait_on_the_lanes():
    """The hang demo: rank 2's recv from 0 failed after 6 s, its send never posted; ranks 0
    and 1 failed in an all_reduce rank 2 never joined. Their waits vanished from the
    timeline once the ops were no longer in flight."""
    from commviz.wire import protocol

    m = Model(FakeClock())
    failed = protocol.FLAG_FAILED
    recv = op_batch(2, [{"id": 1, "op": "recv", "seq": 1, "peer": 0, "bytes_out": 64,
                         "t_start": T0_NS, "t_end": T0_NS + 6_000, "flags": failed}], G4)
    stuck = [op_batch(r, [_coll(r, 3, start=10, end=6_010, flags=failed)], G4) for r in (0, 1)]
    m.apply([recv, *stuck])
    lanes = m.lanes(T0_NS, T0_NS + 10_000)
    assert [lanes[r].tolist() for r in (0, 1, 2)] == [
        [[protocol.OP_CODE["all_reduce"], T0_NS + 10, T0_NS + 6_010, T0_NS + 6_010]]] * 2 + [
        [[protocol.OP_CODE["recv"], T0_NS, T0_NS + 6_000, T0_NS + 6_000]]]
    # the failed ranks' records counted once on the lanes when the instance completes
    m.apply([op_batch(r, [_coll(r, 3, start=20, end=6_020)], G4) for r in (2, 3)])
    assert [len(m.lanes(T0_NS, T0_NS + 10_000)[r]) for r in range(4)] == [1, 1, 2, 1]


def test_incomplete_counts_what_waits_for_records_failed_or_not():
    """The trial's size mismatch: rank 1 failed in all_reduce #6, rank 0 (aborted inside
    it) sent no record: that instance is failed, never silently dropped; one only half
    recorded without a failure is incomplete; a lone failed send too; completed ones are
    neither."""
    from commviz.wire import protocol

    m = Model(FakeClock())
    failed = protocol.FLAG_FAILED
    assert m.incomplete() == (0, 0)
    m.apply([op_batch(r, [_coll(r, 5)], G4) for r in range(4)])  # completed
    m.apply([op_batch(1, [_coll(1, 6, flags=failed)], G4),  # failed, the others unheard
             op_batch(2, [_coll(2, 6)], G4),  # same instance, a record that did not fail
             op_batch(0, [_coll(0, 7)], G4), op_batch(3, [_coll(3, 7)], G4),  # half there
             op_batch(0, [{"id": 9, "op": "send", "seq": 1, "peer": 1, "bytes_in": 64,
                           "t_start": T0_NS, "t_end": T0_NS + 10, "flags": failed}], G4),
             op_batch(2, [{"id": 9, "op": "recv", "seq": 1, "peer": 3, "bytes_out": 64,
                           "t_start": T0_NS, "t_end": T0_NS + 10}], G4)])
    assert (m.instances, m.failed) == (1, 0)
    assert m.incomplete() == (2, 2)  # #6 and the send failed; #7 and the recv incomplete
    # #6 completes, failed: counted by the model's ``failed`` instead, not twice
    m.apply([op_batch(r, [_coll(r, 6)], G4) for r in (0, 3)])
    assert (m.failed, m.incomplete()) == (1, (1, 2))


def test_pending_is_bounded(monkeypatch):
    monkeypatch.setattr(model_mod, "PENDING_MAX", 10)
    m = Model(FakeClock())
    m.apply([op_batch(0, [_coll(0, s, end=s) for s in range(1, 26)], G4)])  # never completed
    assert len(m.pending()[0]["rank"]) == 10 and m.evicted == 15
    assert sorted(m.pending()[0]["seq"].tolist()) == list(range(16, 26))  # the newest are kept


def test_batches_from_many_rounds_match_in_any_order():
    m = Model(FakeClock())
    for seq in (3, 1, 2):
        for r in (2, 0, 3, 1):
            m.apply([op_batch(r, [_coll(r, seq)], G4)])
    assert m.instances == 3 and not len(m.pending()[0]["rank"])
    assert [i.seq for i in m.recent] == [3, 1, 2]


def test_latest_stats_lists_the_shapes_that_completed_most_recently_first() -> None:
    from fakes import scripted_all_reduce, scripted_broadcast

    m = Model(FakeClock())
    m.apply(list(scripted_broadcast(world=4)))
    m.apply(list(scripted_all_reduce(world=4)))
    assert [r["op"] for r in m.latest_stats(5)] == ["all_reduce", "broadcast"]
    assert [r["op"] for r in m.latest_stats(1)] == ["all_reduce"]
    assert [r["op"] for r in m.stats_table()] == ["all_reduce", "broadcast"]


def test_instances_match_whatever_rounds_their_rows_come_in():
    """16 ranks' records of 300 all_reduces on two groups, in rounds of random sizes with the
    ranks far out of step (thousands of rows wait at once, so the waiting store compacts many
    times): every instance is matched once, from its own rows' times, and nothing waits at
    the end. It fails if a compaction or a merge loses, repeats or mixes up a row."""
    rng = random.Random(3)
    groups = {0: ("0", tuple(range(16))), 1: ("1", tuple(range(0, 16, 2)))}
    per_rank = {r: [] for r in range(16)}
    for seq in range(1, 301):
        for gid, (_, members) in groups.items():
            for r in members:
                start, end = seq * 1000 + r * 7 + gid, seq * 1000 + 900 + r + gid
                per_rank[r].append({**_coll(r, seq, gid=gid, start=start, end=end),
                                    "id": 2 * seq + gid})
    m = Model(FakeClock())
    m.new_instances = []
    waited = 0
    while any(per_rank.values()):
        batches = []
        for r in rng.sample(range(16), rng.randint(1, 16)):
            n = rng.randint(0, 60)
            take, per_rank[r] = per_rank[r][:n], per_rank[r][n:]
            if take:
                batches.append(op_batch(r, take, groups))
        m.apply(batches)
        waited = max(waited, len(m.pending()[0]["rank"]))
    assert waited > waiting_rows.MIN_ROWS  # the store was full, and compacted
    assert m.instances == 600 and not len(m.pending()[0]["rank"])
    got = sorted((i.group, i.seq, i.t_first_start, i.t_last_start, i.t_end)
                 for i in m.new_instances)
    want = sorted((members, seq, T0_NS + seq * 1000 + members[0] * 7 + gid,
                   T0_NS + seq * 1000 + members[-1] * 7 + gid,
                   T0_NS + seq * 1000 + 900 + members[-1] + gid)
                  for seq in range(1, 301) for gid, (_, members) in groups.items())
    assert got == want
