"""The shared-memory ring's layout (commviz/wire/ring.py): records written as the hooks write
them, read back as a harvester reads a dead process' ring; wrapping, the shipped marks, the
meta log, stale rings; and the messages a harvester makes of what it read. Files in a
temporary folder, no process: the integration tests kill real ranks."""

from __future__ import annotations

import itertools
import json
import os
import time
import types

import pytest

from commviz.launch.harvester import recovered_messages
from commviz.rank import records
from commviz.viewer.black_box import BlackBox
from commviz.viewer.playback import Playback
from commviz.wire import protocol, ring

F = protocol.FLAG_RECOVERED


@pytest.fixture
def writer(tmp_path, monkeypatch):
    """A ring of 8 slots that records.start and records' ends write, as in a rank."""
    w = ring.RingWriter("t", inc=77, directory=tmp_path, capacity=8, meta=4096)
    for name, value in (("push", [].append), ("_ids", itertools.count()), ("emitter", None),
                        ("gpu_timer", None), ("in_ddp_hook", set())):
        monkeypatch.setattr(records, name, value)
    records.use_ring(w)
    yield w
    records.use_ring(None)
    if w.path.exists():
        w.remove()


GROUP = types.SimpleNamespace(gid=0, ranks=(0, 1, 2), seq=0, nccl=False, no_future=set())


def _start(n: int, site: int = 0) -> list[list]:
    """``n`` all_reduce calls starting, through the hot path."""
    return [records.start(protocol.OP_CODE["all_reduce"], records.COLLECTIVE, protocol.NO_CODE,
                          GROUP, -1, 16, 16, None, False, site) for _ in range(n)]


def test_a_slot_holds_every_column_in_its_wire_type_with_8_byte_fields_aligned():
    assert ring.SLOT.size == ring.SLOT_BYTES == ring.SLOT_DTYPE.itemsize == 64
    assert sorted(ring.SLOT_FIELDS) == sorted(protocol.COLUMNS) == sorted(records.FIELDS)
    for name, dt in protocol.COLUMNS.items():
        kind, offset = ring.SLOT_DTYPE.fields[name]
        assert kind == dt
        assert kind.itemsize != 8 or (ring.HEADER_BYTES + offset) % 8 == 0, name
    assert ring.SLOT_DTYPE.fields["t_end"][1] == 8 * ring.T_END_WORD


def test_records_written_at_start_and_end_are_read_back_in_id_order(writer):
    GROUP.seq = 0
    recs = _start(5)
    records.complete(recs[1])
    records.finish(recs[3], failed=True)
    got = ring.read(writer.path)
    assert (got.pid, got.inc, got.rank) == (os.getpid(), 77, -1)
    assert got.records["id"].tolist() == [0, 1, 2, 3, 4]
    assert got.records["seq"].tolist() == [1, 2, 3, 4, 5]
    for name in protocol.COLUMNS:
        assert got.records[name].tolist() == [r[records.FIELDS.index(name)] for r in recs]
    assert (got.records["t_end"] >= 0).tolist() == [False, True, False, True, False]
    assert got.records["flags"][3] & protocol.FLAG_FAILED
    assert got.unshipped.all()  # nothing was shipped


def test_a_ring_keeps_the_last_capacity_records_when_it_wraps(writer):
    for rec in _start(20):
        records.complete(rec)
    assert ring.read(writer.path).records["id"].tolist() == list(range(12, 20))


def test_an_old_records_late_end_leaves_the_newer_record_in_its_slot(writer):
    old, *newer = _start(12)
    records.complete(old)  # ends after the ring went round: slot 0 holds record 8 now
    got = ring.read(writer.path)
    assert got.records["id"].tolist() == list(range(4, 12))
    assert (got.records["t_end"] == -1).all()


def test_what_the_emitter_shipped_is_not_sent_again_but_an_op_in_flight_always_is(writer):
    recs = _start(6)
    for i in (0, 1, 3, 4, 5):
        records.complete(recs[i])
    writer.mark_shipped([0, 1, 3], batch=1)
    got = ring.read(writer.path)
    assert (got.last_shipped, got.last_batch) == (3, 1)
    assert got.records["id"][got.unshipped].tolist() == [2, 4, 5]
    assert got.shipped_in.tolist() == [1, 1, 0, 1, 0, 0]
    # a slot reused by a newer record does not inherit the shipped mark of its old one
    for rec in _start(6):
        records.complete(rec)
    got = ring.read(writer.path)
    assert got.records["id"][got.unshipped].tolist() == [4, 5, 6, 7, 8, 9, 10, 11]


def test_the_meta_log_keeps_sites_groups_and_identity_until_it_is_full(writer):
    writer.note_site(0, "train.py", 31)
    writer.note_group(0, "0", [0, 1, 2])
    writer.note_identity(1, 3, "gloo", "cpu", "node-a", "job")
    got = ring.read(writer.path)
    assert got.sites == {0: ("train.py", 31)}
    assert got.groups == {0: ("0", [0, 1, 2])}
    assert got.identity == (1, 3, "gloo", "cpu", "node-a", "job")
    assert (got.rank, got.world) == (1, 3)
    for sid in range(1, 1000):
        writer.note_site(sid, "x" * 40, sid)
    assert writer.full
    got = ring.read(writer.path)
    assert got.sites[1] == ("x" * 40, 1) and len(got.sites) < 1000  # whole entries only


def test_a_file_that_is_not_a_ring_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "commviz-ring-t-1-1.ring"
    bad.write_bytes(b"x" * 300)
    with pytest.raises(ring.RingError, match="not a commviz ring"):
        ring.read(bad)
    bad.write_bytes(b"x")
    with pytest.raises(ring.RingError, match="too short"):
        ring.read(bad)


def test_a_ring_nobody_holds_is_swept_and_a_held_one_is_not(tmp_path):
    live = ring.RingWriter("t", inc=1, directory=tmp_path, capacity=8, meta=64)
    dead = ring.RingWriter("t", inc=2, directory=tmp_path, capacity=8, meta=64)
    dead.forget_after_fork()  # its lock gone, its file left: as a killed process leaves it
    watched = ring.RingWriter("u", inc=3, directory=tmp_path, capacity=8, meta=64)
    fd = ring.claim(watched.path)  # a harvester watches it
    watched.forget_after_fork()
    assert ring.sweep(tmp_path) == [dead.path]
    assert sorted(ring.ring_files(tmp_path)) == sorted([live.path, watched.path])
    assert ring.ring_files(tmp_path, "t") == [live.path]
    assert ring.pid_of(live.path) == os.getpid()
    os.close(fd)
    assert ring.sweep(tmp_path) == [watched.path]
    live.remove()  # a clean exit leaves nothing
    assert os.listdir(tmp_path) == []


def test_a_ring_that_cannot_be_made_says_where(tmp_path):
    with pytest.raises(ring.RingError, match="cannot create a ring in"):
        ring.RingWriter("t", inc=1, directory=tmp_path / "absent")


def test_the_harvesters_messages_are_the_unshipped_records_flagged_recovered(writer):
    writer.note_site(4, "train.py", 31)
    writer.note_group(0, "0", [0, 1, 2])
    writer.note_identity(1, 3, "gloo", "cpu", "node-a", "job")
    recs = _start(5, site=4)
    for rec in recs[:4]:
        records.complete(rec)
    writer.mark_shipped([0, 1], batch=1)
    got = ring.read(writer.path)
    t = time.time_ns()
    messages, recovered, running = recovered_messages(got, t)
    assert (recovered, running) == (2, 1)
    decoded = [protocol.decode(m) for m in messages]
    kinds = [type(m).__name__ for m in decoded]
    assert kinds == ["Heartbeat", "Groups", "OpBatch", "OpBatch"]  # it never sent a heartbeat
    hb, grp, again, ops = decoded
    assert (hb.rank, hb.world, hb.inc, hb.pid, hb.t_ns) == (1, 3, 77, os.getpid(), t)
    assert grp.groups == {0: ("0", (0, 1, 2))}
    # its last batch again, under its number (it may have died in the socket), then the rest
    assert (again.rank, again.inc, again.n, again.cols["id"].tolist()) == (1, 77, 1, [0, 1])
    assert (ops.rank, ops.inc, ops.n) == (1, 77, 0)
    assert ops.cols["id"].tolist() == [2, 3, 4]
    assert ops.cols["t_end"].tolist() == [recs[2][records.T_END], recs[3][records.T_END], -1]
    assert (ops.cols["flags"] & F).all() and (again.cols["flags"] & F).all()
    assert ops.sites == {4: ("train.py", 31)}
    writer.note_heartbeat()  # once its emitter has sent one, no heartbeat is made for it
    messages, _, _ = recovered_messages(ring.read(writer.path), t)
    assert [type(protocol.decode(m)).__name__ for m in messages] == ["Groups", "OpBatch",
                                                                      "OpBatch"]


def test_a_black_box_is_a_recording_of_a_dead_process_that_had_sent_its_heartbeat(
        writer, tmp_path):
    """What a node's relay keeps (viewer/black_box.py): the process' identity although its
    emitter had told the viewer (that viewer may be gone), its unsent records flagged
    recovered, how it ended; a recording that a playback reads."""
    writer.note_site(4, "train.py", 31)
    writer.note_group(0, "0", [0, 1, 2])
    writer.note_identity(1, 3, "gloo", "cpu", "node-a", "job")
    writer.note_heartbeat()
    recs = _start(3, site=4)
    for rec in recs[:2]:
        records.complete(rec)
    got = ring.read(writer.path)
    t = time.time_ns()
    messages, recovered, running = recovered_messages(got, t, identity=True)
    gone = protocol.encode_gone(1, 77, os.getpid(), t, 1, -9, recovered, running)
    box = BlackBox(tmp_path)
    assert box.close() is None and not list(tmp_path.glob("commviz-blackbox-*"))  # none died
    box.keep([*messages, gone, b"\x92not a message"])
    said = box.close()
    assert box.path is not None and str(box.path) in said and "what rank 1 had not sent" in said
    assert box.rejected == 1
    lines = [json.loads(line) for line in box.path.read_text().splitlines()]
    kinds = [d.get("kind") for d in lines]
    assert kinds[1:3] == ["rank", "tel"] and "gone" in kinds and kinds[-1] == "summary"
    told = [d["message"] for d in lines if d.get("kind") == "diag"]  # the box's own diagnosis
    assert told and told[0].startswith("rank 1 ended first (killed by SIGKILL)"), told
    ops = [d for d in lines if d.get("kind") in ("op", "running")]
    first = ops[0]["seq"]  # (the group's sequence goes on from the tests before)
    assert [(d["kind"], d["seq"] - first, d["flags"] & F) for d in ops] == [
        ("op", 0, F), ("op", 1, F), ("running", 2, F)]
    assert lines[-1]["ended"] == [1]
    playback = Playback(box.path)
    assert playback.end_ns > playback.start_ns
    unwritable = BlackBox(tmp_path / "absent")  # said at the end, in a line; nothing raised
    unwritable.keep([*messages, gone])
    assert "black box could not be written" in unwritable.close()


def test_nothing_in_the_ring_makes_no_message(writer):
    assert recovered_messages(ring.read(writer.path), 0) == ([], 0, 0)


def test_only_the_last_batches_are_sent_again_each_under_its_number(writer, monkeypatch):
    monkeypatch.setattr(ring, "RESEND_BATCHES", 2)
    writer.note_identity(1, 3, "gloo", "cpu", "node-a", "job")
    for n, rec in enumerate(_start(5), 1):  # a batch a record: 1..5
        records.complete(rec)
        writer.mark_shipped([rec[records.ID]], batch=n)
    messages, recovered, running = recovered_messages(ring.read(writer.path), 0)
    batches = [m for m in map(protocol.decode, messages) if type(m) is protocol.OpBatch]
    assert [(b.n, b.cols["id"].tolist()) for b in batches] == [(4, [3]), (5, [4])]
    assert (recovered, running) == (0, 0)  # none that had not been shipped


def test_a_batch_that_could_not_be_sent_leaves_its_records_unshipped(writer):
    recs = _start(2)
    for rec in recs:
        records.complete(rec)
    writer.mark_shipped([0, 1], batch=1)
    writer.unmark([0, 1])  # the send failed (no viewer): the next batch 1 ships them
    assert ring.read(writer.path).unshipped.all()


def test_the_gone_notice_round_trips_and_is_checked():
    data = protocol.encode_gone(1, 77, 4242, 10**18, 1, -9, 12, 0)
    gone = protocol.decode(data)
    assert gone == protocol.Gone(1, 4242, 10**18, 1, -9, 12, 0, 77)
    assert protocol.decode(protocol.encode_gone(0, 5, 1, 2, 2, None, 0, 1)).code is None
    with pytest.raises(protocol.ProtocolError, match="malformed gone"):
        protocol.decode(protocol.encode_gone(0, 5, 1, 2, 0, None, 0, 1))  # order from 1
