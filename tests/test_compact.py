"""The compact recording format (``.cvz``): the same lines and messages as JSON Lines, read
up to the last whole chunk when cut short, corrupt files refused with a RecordingError, the
index rebuilt without its trailer, chunks found by time."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from fakes import T0_NS, bye, gpu_heartbeat, heartbeat, inflight, op_batch, scripted_all_reduce

from commviz import cli
from commviz.viewer import compact, recording
from commviz.wire import protocol

KINDS = {"rank", "tel", "group", "op", "running", "phase", "topo", "bye", "diag", "out",
         "event", "summary"}


@dataclasses.dataclass
class _Finding:
    """What the recorder takes of a diagnosis' finding."""

    line: dict

    def record(self) -> dict:
        return self.line


def _clocked(msg: protocol.Heartbeat) -> protocol.Heartbeat:
    return dataclasses.replace(msg, clock=((T0_NS, T0_NS + 5, T0_NS + 9, T0_NS + 20),),
                               inc=(1 << 62) + msg.rank, job="tcp://node0:29500")


def _every_kind(steps: int = 3) -> list[list[protocol.Message]]:
    """Messages of every kind, in rounds (a round: what one write gets), 1 s apart."""
    pair = {0: ("1", (0, 2)), 3: ("0", (0, 1, 2, 3))}  # and a gid no record uses
    sites = {0: ("train.py", 12), 7: ("model.py", 99)}
    topo = protocol.GpuTopology(0, "node0", 0, ((0, "GPU-0", "H200", "0000:01:00.0"),
                                                (1, "GPU-1", "H200", "0000:02:00.0")),
                                ((0, 1, 18, "PIX"),), "")
    rounds: list[list[protocol.Message]] = [[_clocked(heartbeat(r, 4)) for r in range(4)]
                                            + [topo, gpu_heartbeat(1, 4)]]
    for step in range(steps):
        t0 = T0_NS + step * 10**9
        rounds.append(scripted_all_reduce(world=4, steps=2, t0_ns=t0) + [
            op_batch(r, [{"id": 90 + step, "op": "all_reduce", "seq": step + 1, "gid": 0,
                          "t_start": t0 + 9, "site": 7},
                         {"id": 95 + step, "op": "send", "peer": 2 - r, "seq": step + 1,
                          "gid": 0, "t_start": t0 + 11, "dtype": None, "parent": "all_gather",
                          "flags": protocol.FLAG_ASYNC}], pair, sites) for r in (0, 2)]
            + [inflight(3, "barrier", 3 + step, t0 + 50, op_id=200 + step),
               protocol.Phases(1, (protocol.PhaseSpan("forward", 0, t0, t0 + 400),), 0),
               dataclasses.replace(heartbeat(2, 4, t_ns=t0 + 7), inc=(1 << 62) + 2)])
    rounds.append([bye(r, T0_NS + steps * 10**9) for r in range(4)])
    return rounds


def _record(path, rounds, monkeypatch, flush_each: bool = True) -> None:
    """``rounds`` through a Recorder, a chunk per round (``FLUSH_S`` 0), with the findings,
    output and events a viewer adds, at frozen times."""
    monkeypatch.setattr(recording.time, "time_ns", lambda: T0_NS + 123)
    monkeypatch.setattr(recording, "FLUSH_S", 0.0 if flush_each else 3600.0)
    rec = recording.Recorder(path, {"title": {"en": "every kind"}, "demo": "all_reduce"})
    for i, messages in enumerate(rounds):
        rec.write(messages)
        if i == 1:
            rec.write_findings([_Finding({"kind": "diag", "version": 2, "type": "straggler",
                                          "ranks": [3], "group": [0, 1, 2, 3], "seq": 2,
                                          "facts": {"k": [1, 2.5, None]}, "message": "late",
                                          "t_ns": T0_NS + 5})])
            rec.write_output("step 1 done ✓")
            rec.write_event("rank failed", {"who": "rank 3", "code": 1, "line": "oops",
                                            "rank": 3})
    rec.close({"records": 1, "ended": [0, 1, 2, 3]})


def _norm(msg: protocol.Message):
    """A message, comparable (its columns as lists, with their dtypes)."""
    if isinstance(msg, protocol.OpBatch):
        return ("ops", msg.rank, msg.inc, msg.groups, msg.sites,
                [(k, v.dtype.str, v.tolist()) for k, v in msg.cols.items()])
    return msg


def _read(path, playback: bool) -> tuple:
    findings: list[dict] = []
    cut: list[int] = []
    extra: dict[str, list[dict]] = {"out": [], "event": [], "summary": []}
    msgs = [_norm(m) for m in recording.read(path, findings, cut, playback, extra)]
    return msgs, findings, extra, cut


@pytest.fixture
def both(tmp_path, monkeypatch):
    """The same run recorded as JSON Lines and compact."""
    paths = tmp_path / "r.jsonl", tmp_path / "r.cvz"
    for path in paths:
        _record(path, _every_kind(), monkeypatch)
    return paths


def test_every_kind_reads_back_as_json_lines_gives_it(both):
    jsonl, cvz = both
    assert compact.is_compact(cvz) and not compact.is_compact(jsonl)
    assert recording.read_header(cvz) == recording.read_header(jsonl)
    assert set(line["kind"] for line in list(recording.lines(cvz))[1:]) == KINDS
    assert list(recording.lines(cvz)) == list(recording.lines(jsonl))
    for playback in (False, True):
        got = _read(cvz, playback)
        assert got == _read(jsonl, playback)
        assert any(m[0] == "ops" for m in got[0] if isinstance(m, tuple))
    assert cvz.stat().st_size < jsonl.stat().st_size / 4


def test_thousands_of_ranks_are_cut_into_the_batches_json_lines_gives(tmp_path, monkeypatch):
    """More than MAX_BATCH records between two rank lines, of many ranks, groups and sites:
    the batches are cut at the same records, numbered alike."""
    rng = np.random.default_rng(7)
    groups = {0: ("0", tuple(range(600))), 1: ("1", tuple(range(0, 600, 8)))}
    rounds = [[op_batch(r, [{"id": i, "op": "all_reduce", "seq": i, "gid": int(rng.integers(2)),
                             "site": int(rng.integers(3)), "t_start": T0_NS + i * 997 + r,
                             "t_end": T0_NS + i * 997 + r + int(rng.integers(-1, 10**6))}
                            for i in range(step * 4, step * 4 + 4)], groups,
                        {0: ("a.py", 1), 1: ("b.py", 2), 2: ("a.py", 3)})
               for r in range(600)] for step in range(6)]
    rounds[3].insert(0, heartbeat(5, 600))
    paths = tmp_path / "r.jsonl", tmp_path / "r.cvz"
    for path in paths:
        _record(path, rounds, monkeypatch, flush_each=False)
    for playback in (False, True):
        assert _read(paths[1], playback) == _read(paths[0], playback)


def test_a_file_cut_short_reads_up_to_its_last_whole_chunk(tmp_path, monkeypatch):
    path = tmp_path / "r.cvz"
    _record(path, _every_kind(steps=4), monkeypatch)
    data = path.read_bytes()
    entries, from_trailer = compact.index(path)
    assert from_trailer and len(entries) >= 6
    sizes = []
    for k, entry in enumerate(entries[1:], start=1):
        for at in (entry.offset, entry.offset + 5, entry.offset + 40):
            (tmp_path / "cut.cvz").write_bytes(data[:at])
            whole = [e.offset for e in entries[:k]]
            # rebuilt from the frames, the index cannot say which kinds of lines they hold
            rebuilt = [dataclasses.replace(e, kinds=compact.ANY_KIND) for e in entries[:k]]
            assert compact.index(tmp_path / "cut.cvz") == (rebuilt, False)
            assert [c.offset for c in compact.chunks(tmp_path / "cut.cvz")] == whole
            msgs, _, _, cut = _read(tmp_path / "cut.cvz", True)
            assert cut == ([] if at == entry.offset else [entry.offset])
            sizes.append(len(msgs))
    assert sizes == sorted(sizes) and sizes[0] == 0 < sizes[-1]  # more chunks, more read
    (tmp_path / "cut.cvz").write_bytes(data[:len(compact.MAGIC) + 3])
    with pytest.raises(recording.RecordingError, match="no header"):
        recording.read_header(tmp_path / "cut.cvz")


def test_without_its_trailer_the_index_is_rebuilt_from_the_frames(tmp_path, monkeypatch):
    path = tmp_path / "r.cvz"
    _record(path, _every_kind(), monkeypatch)
    entries, from_trailer = compact.index(path)
    assert from_trailer
    data = path.read_bytes()
    at = int.from_bytes(data[-12:-4], "little")  # the footer: the index frame's offset
    assert data[-4:] == compact.END
    assert any(e.kinds > 0 for e in entries) and all(e.kinds >= 0 for e in entries)
    # the frames do not say which kinds of lines they hold: any
    entries = [dataclasses.replace(e, kinds=compact.ANY_KIND) for e in entries]
    (tmp_path / "open.cvz").write_bytes(data[:at])  # a viewer killed before closing it
    assert compact.index(tmp_path / "open.cvz") == (entries, False)
    (tmp_path / "bad.cvz").write_bytes(data[:-6] + b"zz" + data[-4:])  # a footer gone wrong
    assert compact.index(tmp_path / "bad.cvz") == (entries, False)
    assert _read(tmp_path / "open.cvz", True)[:3] == _read(path, True)[:3]
    assert entries[0].records == 0 and sum(e.records for e in entries) == sum(
        line.get("kind") in ("op", "running") for line in recording.lines(path))
    assert [e.first_ns <= e.last_ns for e in entries[1:]] == [True] * (len(entries) - 1)


def test_a_time_finds_the_first_chunk_that_reaches_it(tmp_path, monkeypatch):
    path = tmp_path / "r.cvz"
    _record(path, _every_kind(steps=4), monkeypatch)
    entries, _ = compact.index(path)
    for entry in entries[1:]:
        got = list(compact.chunks(path, from_ns=entry.last_ns))
        first = next(e for e in entries if e.last_ns >= entry.last_ns)
        assert got[0].offset == first.offset
        assert got[0].cols["t_start"].min(initial=entry.last_ns) <= entry.last_ns
        assert [c.offset for c in got] == [e.offset for e in entries if e.offset >= first.offset]
    assert list(compact.chunks(path, from_ns=max(e.last_ns for e in entries) + 1)) == []


def _corrupt(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1:]


@pytest.mark.parametrize("where, says", [
    (lambda e: e[2].offset + 40, "corrupt"),  # in a chunk's payload: its checksum
    (lambda e: e[2].offset, "not a chunk"),  # its frame's tag
    (lambda e: e[2].offset + 7, "not a chunk"),  # its length: past MAX_PAYLOAD
])
def test_corrupt_bytes_are_a_recording_error_that_says_where(tmp_path, monkeypatch, where,
                                                              says):
    path = tmp_path / "r.cvz"
    _record(path, _every_kind(), monkeypatch)
    at = where(compact.index(path)[0])
    (tmp_path / "bad.cvz").write_bytes(_corrupt(path.read_bytes(), at))
    with pytest.raises(recording.RecordingError, match=says):
        list(recording.read(tmp_path / "bad.cvz"))
    assert cli.main(["stats", str(tmp_path / "bad.cvz")]) == 2


@pytest.mark.parametrize("payload, says", [
    (b"not msgpack at all \xc1", "not msgpack"),
    (b"\x93\x01\x02\x03", "malformed chunk"),  # a list, not a map
    (None, "malformed chunk"),  # a map without the chunk's fields
])
def test_a_chunk_that_is_not_the_formats_is_refused(tmp_path, payload, says):
    import msgpack
    import zstandard

    header = msgpack.packb({"lines": [{"format": recording.FORMAT, "version": 2}], "n": 0,
                            "who": [], "groups": [], "sites": [],
                            "cols": compact._encode_columns(
                                {k: np.zeros(0, v) for k, v in compact.DTYPES.items()})})
    raw = payload if payload is not None else msgpack.packb({"lines": [7], "n": 7})
    frames = b"".join(compact._FRAME.pack(compact.CHUNK, len(z), 0, -1, -1) + z for z in (
        zstandard.ZstdCompressor().compress(header), zstandard.ZstdCompressor().compress(raw)))
    (tmp_path / "f.cvz").write_bytes(compact.MAGIC + frames)
    assert recording.read_header(tmp_path / "f.cvz")["version"] == 2
    with pytest.raises(recording.RecordingError, match=says):
        list(recording.read(tmp_path / "f.cvz"))


def test_foreign_files_are_recording_errors(tmp_path, capsys):
    (tmp_path / "a.cvz").write_bytes(b"PK\x03\x04 a zip file")
    (tmp_path / "b.cvz").write_bytes(compact.MAGIC + b"\x00" * 50)
    for name in ("a.cvz", "b.cvz"):
        assert cli.main(["stats", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("commviz: error: ") and "Traceback" not in err


@pytest.mark.parametrize("dtype", ["<i8", "<u4", "<i4"])
def test_delta_coding_by_rank_is_exact_at_the_ends_of_the_range(dtype):
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    values = np.concatenate([rng.integers(info.min, info.max, 500, dtype=dtype, endpoint=True),
                             np.array([info.min, info.max, info.min, 0], dtype=dtype)])
    key = rng.integers(0, 7, len(values)).astype("<u4")
    coded = compact._delta_by(key, values).astype(dtype)
    back = compact._undelta_by(compact._runs(key), coded.astype(np.int64))
    assert back.astype(dtype).tolist() == values.tolist()
    n = len(values)
    arr = values.astype(dtype)
    assert compact._planes_back(compact._planes(arr), arr.dtype, n).tolist() == arr.tolist()


def test_export_goes_both_ways_and_keeps_every_line(both, tmp_path):
    jsonl, cvz = both
    assert cli.main(["export", str(jsonl), "--format", "cvz", "-o", str(tmp_path / "x.cvz")]) \
        == 0
    assert cli.main(["export", str(tmp_path / "x.cvz"), "--format", "jsonl",
                     "-o", str(tmp_path / "x.jsonl")]) == 0
    assert list(recording.lines(tmp_path / "x.cvz")) == list(recording.lines(cvz))
    assert (tmp_path / "x.jsonl").read_text() == jsonl.read_text()
    assert _read(tmp_path / "x.cvz", True) == _read(jsonl, True)


def test_a_version_1_recording_exports_to_compact(both, tmp_path):
    jsonl, _ = both
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    ranks = {line["g"]: line["ranks"] for line in lines if line.get("kind") == "group"}
    old = [{**lines[0], "version": 1}] + [
        {("group" if k == "g" else k): (ranks[v] if k == "g" else v) for k, v in line.items()}
        if line.get("kind") in ("op", "running") else line
        for line in lines[1:] if line.get("kind") != "group"]
    (tmp_path / "v1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in old))
    assert cli.main(["export", str(tmp_path / "v1.jsonl"), "--format", "cvz"]) == 0
    assert _read(tmp_path / "v1.cvz", True) == _read(tmp_path / "v1.jsonl", True) == \
        _read(jsonl, True)


@pytest.mark.parametrize("args, says", [
    (["missing.jsonl", "--format", "cvz"], "no such file"),
    (["r.jsonl", "--format", "cvz", "-o", "out.jsonl"], "ends in .cvz"),
    (["r.jsonl", "--format", "jsonl", "-o", "out.cvz"], "ends in .cvz"),
    (["r.jsonl", "--format", "cvz", "-o", "r.cvz"], "exists: --force"),
    (["r.cvz", "--format", "cvz", "-o", "r.cvz", "--force"], "the recording itself"),
    (["r.jsonl", "--format", "cvz", "-o", "no/such/dir/x.cvz"], "cannot write"),
])
def test_export_errors_are_one_line(both, tmp_path, monkeypatch, capsys, args, says):
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(["export", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commviz: error: ") and says in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_stats_reads_both_formats_alike(both, capsys):
    outs = []
    for path in both:
        assert cli.main(["stats", "--json", str(path)]) == 0
        outs.append({k: v for k, v in json.loads(capsys.readouterr().out).items() if k != "file"})
    assert outs[0] == outs[1] and outs[0]["records"] > 0 and outs[0]["findings"]
