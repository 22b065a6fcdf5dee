"""A compact recording played as it is read (``commviz play``): chunk by chunk, no further
than what is due, letting go of what it took; and seeks from the snapshots a pass over the
recording keeps, which leave the playback as a seek from the start does. Pure: no Textual,
no threads (the pass runs in the test's own)."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest
from fakes import T0_NS, FakeClock, bye, op_batch

from commviz.viewer import recording
from commviz.viewer.model import Records
from commviz.viewer.playback import WARMUP_NS, Playback, PlaybackControl, Timetable
from commviz.wire import protocol

RANKS = 16
SECONDS = 22
WORLD = {0: ("0", tuple(range(RANKS)))}


def _heartbeat(rank: int, t_ns: int) -> protocol.Heartbeat:
    off = 1_000_000 * (rank // 8)  # two hosts, 1 ms apart
    return protocol.Heartbeat(rank, RANKS, f"node{rank // 8}", 100 + rank, "nccl",
                              f"cuda:{rank % 8}", t_ns + off, 0, {"cpu_pct": 50.0},
                              ((t_ns + off, t_ns + 100, t_ns + 110, t_ns + off + 200),),
                              1000 + rank, "tcp://node0:29500")


def _write(path, seconds: int = SECONDS) -> None:
    """``seconds`` of 16 ranks: 10 all_reduces a second, one rank late from second 10 (so
    that the diagnosis has something to find), a heartbeat a rank every 0.5 s, a chunk a
    write, and goodbyes."""
    rec = recording.Recorder(path)
    rng = np.random.default_rng(5)
    for tick in range(seconds * 10):
        t0 = T0_NS + tick * 100_000_000
        msgs: list[protocol.Message] = []
        if tick % 5 == 0:
            msgs += [_heartbeat(r, t0) for r in range(RANKS)]
        starts = t0 + rng.integers(0, 200_000, RANKS)
        if tick >= 100:
            starts[3] += 40_000_000
        end = int(starts.max()) + 5_000_000
        for r in range(RANKS):
            off = 1_000_000 * (r // 8)
            msgs.append(dataclasses.replace(op_batch(r, [{
                "id": tick, "op": "all_reduce", "seq": tick + 1, "bytes_in": 1 << 20,
                "bytes_out": 1 << 20, "t_start": int(starts[r]) + off,
                "t_end": end + off + int(rng.integers(0, 10_000))}], WORLD), inc=1000 + r))
        rec.write(msgs)
        rec._sink.flush()  # a chunk a write, as a recorder a second apart
    last = T0_NS + seconds * 10**9
    rec.write([dataclasses.replace(bye(r, last), inc=1000 + r) for r in range(RANKS)])
    rec.close({"t_ns": last})


@pytest.fixture(scope="module")
def cvz(tmp_path_factory):
    path = tmp_path_factory.mktemp("stream") / "r.cvz"
    _write(path)
    return path


def _state(pb: Playback) -> dict:
    m = pb.model
    return {"records": m.records, "instances": m.instances, "stats": m.stats_table(),
            "lanes": {r: lane.tolist() for r, lane in m.lanes(0).items()},
            "inflight": sorted(m.inflight), "clocks": m.clock_offsets(),
            "ranks": {r: (s.ops, s.last_seq, s.last_seen) for r, s in m.ranks.items()},
            "late": [(r, dataclasses.astuple(t)) for r, t in pb.diagnosis.late_arrivals()],
            "findings": [(f.type, f.ranks) for f in pb.diagnosis.history]}


def test_the_timetable_reads_a_chunk_only_once_something_in_it_is_due(cvz):
    parts = recording.Parts(cvz)
    table = Timetable(source=parts)
    whole = Timetable(recording.read(cvz, playback=True, records=True))
    assert table.first_ns == whole.first_ns and parts.next <= 2  # the first chunks only
    mid = T0_NS + 12 * 10**9
    taken = table.take(mid)
    assert parts.next < len(parts.entries) * 0.6  # not beyond what may be due by then
    assert len(table._messages) < 100  # what it took, let go of
    assert all(isinstance(m, Records) for m in taken if not isinstance(
        m, protocol.Heartbeat | protocol.Bye | protocol.GpuTopology))
    ops = lambda msgs: sorted(  # noqa: E731
        (int(w[0]), int(s)) for m in msgs if isinstance(m, Records)
        for w, s in zip((m.whos[i] for i in m.who.tolist()), m.cols["seq"].tolist()))
    assert ops(taken) == ops(whole.take(mid))  # the same records by then
    assert ops(table.take(1 << 62)) == ops(whole.take(1 << 62))  # and the rest
    assert table.done and parts.bound_ns is None
    table.rewind()
    assert table.next_ns() == table.first_ns and table._source.next <= 2  # read again


def test_a_played_compact_recording_shows_what_its_json_lines_twin_shows(cvz, tmp_path):
    jsonl = tmp_path / "r.jsonl"
    recording.export(cvz, jsonl, to_compact=False)
    a, b = Playback(cvz, real=FakeClock()), Playback(jsonl, real=FakeClock())
    assert a.streamed and not b.streamed
    assert (a.origin_ns, a.duration_s) == (b.origin_ns, b.duration_s)
    for pb in (a, b):
        PlaybackControl(pb, paused=True)
        pb.seek(14.0)
    assert _state(a) == _state(b)
    assert _state(a)["late"]  # the late rank is seen: the comparison is not of nothing


def test_a_seek_from_a_snapshot_leaves_the_playback_as_a_seek_from_the_start(cvz):
    fresh = Playback(cvz, real=FakeClock())
    snapped = Playback(cvz, real=FakeClock())
    snapped.take_snapshots(every_s=10.0)
    taken = [(s.at_ns - snapped.origin_ns, s.warm is not None) for s in snapped.snapshots._taken]
    assert taken == [(k * 10**10 + d, d == 0) for k in (1, 2) for d in (-WARMUP_NS, 0)]
    for pb in (fresh, snapped):
        PlaybackControl(pb, paused=True)
    # at a warmed snapshot's time; between two; at the next one (a seek from the warmed
    # state at 10 s to 17.5 s: from the snapshot at 15 - 5 s)
    for at in (10.0, 17.5, 20.0):
        fresh.seek(at)
        snapped.seek(at)
        assert snapped.at_s == fresh.at_s == at
        assert _state(snapped) == _state(fresh)
    assert _state(snapped)["findings"]  # the straggler, found from second 10
    assert snapped.model.clock() == snapped.clock.seconds()  # the playback's own clock


def test_a_seek_behind_the_playback_goes_on_from_where_it_is(cvz):
    """Snapshots before the playback's place are not gone back to: seeks go forward."""
    pb = Playback(cvz, real=FakeClock())
    PlaybackControl(pb, paused=True)
    pb.seek(12.0)
    records = pb.model.records
    pb.take_snapshots(every_s=10.0)  # one at 5 s, behind it
    pb.seek(13.0)
    assert pb.model.records > records and pb.at_s == 13.0


def test_the_pass_stops_when_asked(cvz):
    pb = Playback(cvz, real=FakeClock())
    pb.take_snapshots(every_s=5.0, stop=lambda: len(pb.snapshots) >= 2)
    assert len(pb.snapshots) == 2  # of the 8 it would take


def test_a_recording_cut_short_plays_up_to_its_last_whole_chunk(cvz, tmp_path):
    data = cvz.read_bytes()
    entries, _ = recording.compact.index(cvz)
    cut = tmp_path / "cut.cvz"
    cut.write_bytes(data[:entries[40].offset + 30])  # a viewer killed while writing
    pb = Playback(cut, real=FakeClock())
    assert pb.streamed and pb.cut == [entries[40].offset] and not pb.closed
    PlaybackControl(pb, paused=True)
    pb.seek(pb.duration_s)
    whole = sum(e.records for e in entries[:40])
    assert pb.model.records == whole and pb.timetable.done


def test_the_pass_begins_once_the_first_frame_is_drawn(cvz):
    pb = Playback(cvz, real=FakeClock())
    calls, release = [], threading.Event()

    def take_snapshots(stop):  # the pass, held until the test lets it go
        calls.append(stop)
        release.wait(10)

    pb.take_snapshots = take_snapshots  # type: ignore[method-assign]
    pb.start()
    try:
        time.sleep(0.05)
        assert not calls  # not before the first frame
        pb.frame_begins()
        pb.frame_ends()
        for _ in range(100):
            if calls:
                break
            time.sleep(0.01)
        pb.frame_ends()
        time.sleep(0.05)
        assert len(calls) == 1  # one pass, after the first frame
        assert not calls[0]()  # told to stop only once the playback closes
    finally:
        release.set()
        pb.close()
    assert calls[0]()
