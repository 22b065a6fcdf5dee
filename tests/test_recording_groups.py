"""Recordings name process groups by reference (``group`` lines, version 2) and still read
version 1, whose op lines list their group's ranks."""

from __future__ import annotations

import dataclasses
import json

import pytest
from fakes import T0_NS, heartbeat, inflight, op_batch, scripted_all_reduce

from commviz.viewer import recording
from commviz.wire import protocol


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _record(path, messages) -> list[dict]:
    rec = recording.Recorder(path)
    rec.write(messages)
    rec.close({})
    return _lines(path)


def _ops(messages, running: bool = False) -> list[dict]:
    """The op records of the messages' batches, each with its group's ranks."""
    return [r for m in messages if isinstance(m, protocol.OpBatch)
            for r in recording.op_dicts(m, running=running)]


def _two_groups() -> list[protocol.Message]:
    """A world all_reduce, a pair's all_reduce in group "1", and a snapshot still running."""
    pair = {0: ("1", (0, 2))}
    return scripted_all_reduce(world=4, steps=2) + [
        op_batch(r, [{"id": 9, "op": "all_reduce", "seq": 1, "t_start": T0_NS + 9}], pair)
        for r in (0, 2)] + [inflight(3, "barrier", 3, T0_NS + 50)]


def _as_version_1(lines: list[dict]) -> list[dict]:
    """A recording's lines as version 1 wrote them: group lists on op and running lines."""
    ranks = {line["g"]: line["ranks"] for line in lines if line.get("kind") == "group"}
    return [{**lines[0], "version": 1}] + [
        {k: v for k, v in {**line, "group": ranks[line["g"]]}.items() if k != "g"}
        if line.get("kind") in ("op", "running") else line
        for line in lines[1:] if line.get("kind") != "group"]


def _write(path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _batches(path, playback: bool = False) -> list[list[dict]]:
    return [recording.op_dicts(m, running=True) for m in recording.read(path, playback=playback)
            if isinstance(m, protocol.OpBatch)]


def _key(rec: dict) -> tuple:
    return rec["rank"], rec["t_start_ns"], rec["id"], rec["kind"]


def test_a_recorders_messages_read_back_as_the_same_batches(tmp_path):
    messages = _two_groups()
    lines = _record(tmp_path / "new.jsonl", messages)
    _write(tmp_path / "old.jsonl", _as_version_1(lines))
    for playback in (False, True):
        new = _batches(tmp_path / "new.jsonl", playback)
        assert new == _batches(tmp_path / "old.jsonl", playback)
        assert sorted((r for b in new for r in b), key=_key) == sorted(
            _ops(messages, running=playback), key=_key)
    assert any(r["kind"] == "running" for b in _batches(tmp_path / "new.jsonl", True)
               for r in b)


def test_a_group_line_comes_once_before_the_first_line_naming_it(tmp_path):
    lines = _record(tmp_path / "r.jsonl", _two_groups() + scripted_all_reduce(world=4))
    assert lines[0]["version"] == recording.VERSION == 2
    groups = [line for line in lines if line.get("kind") == "group"]
    assert groups == [{"kind": "group", "g": 0, "pg": "0", "ranks": [0, 1, 2, 3]},
                      {"kind": "group", "g": 1, "pg": "1", "ranks": [0, 2]}]
    seen: set[int] = set()
    for line in lines:
        if line.get("kind") == "group":
            seen.add(line["g"])
        elif line.get("kind") in ("op", "running"):
            assert "group" not in line and line["g"] in seen, line
            assert line["pg"] == ("0", "1")[line["g"]]


def test_a_name_reused_with_other_ranks_gets_a_group_line_of_its_own(tmp_path):
    """A later job (here a world of 2 after one of 4) reuses the default group's name."""
    later = [m for m in scripted_all_reduce(world=2, t0_ns=T0_NS + 10**9)
             if isinstance(m, protocol.OpBatch)]
    lines = _record(tmp_path / "r.jsonl", scripted_all_reduce(world=4) + later)
    groups = [(g["g"], g["pg"], g["ranks"]) for g in lines if g.get("kind") == "group"]
    assert groups == [(0, "0", [0, 1, 2, 3]), (1, "0", [0, 1])]
    by_t = {line["t_start_ns"] >= T0_NS + 10**9: line["g"] for line in lines
            if line.get("kind") == "op"}
    assert by_t == {False: 0, True: 1}
    got = [r for b in _batches(tmp_path / "r.jsonl") for r in b]
    assert sorted(got, key=_key) == sorted(_ops(scripted_all_reduce(world=4) + later), key=_key)


def test_a_version_1_recording_with_group_lists_still_reads(tmp_path):
    messages = _two_groups()
    old = _as_version_1(_record(tmp_path / "new.jsonl", messages))
    assert old[0]["version"] == 1 and all("g" not in line for line in old)
    assert sum("group" in line for line in old) == len(_ops(messages, running=True))
    _write(tmp_path / "old.jsonl", old)
    for playback in (False, True):
        got = [r for b in _batches(tmp_path / "old.jsonl", playback) for r in b]
        assert sorted(got, key=_key) == sorted(_ops(messages, running=playback), key=_key)


def _with(path, *lines: dict, version: int = 2) -> None:
    _write(path, [{"format": recording.FORMAT, "version": version}, *lines])


def _op_line(**fields) -> dict:
    line = _ops(scripted_all_reduce(world=2, steps=1))[0]
    del line["group"]
    return {**line, **fields}


@pytest.mark.parametrize("lines, says", [
    ((_op_line(g=0),), "names no group written before it"),
    (({"kind": "group", "g": 1, "pg": "0", "ranks": [0, 1]}, _op_line(g=0)), "g: 0"),
    (({"kind": "group", "g": [0], "pg": "0", "ranks": [0, 1]},), "malformed group line"),
    (({"kind": "group", "g": 0, "pg": "0", "ranks": "0,1"},), "malformed group line"),
])
def test_an_op_line_without_its_group_is_an_error_that_says_which_line(tmp_path, lines, says):
    _with(tmp_path / "r.jsonl", *lines)
    with pytest.raises(recording.RecordingError, match=says):
        list(recording.read(tmp_path / "r.jsonl"))


def test_a_later_version_is_refused_and_the_versions_read_are_named(tmp_path):
    _with(tmp_path / "r.jsonl", version=3)
    with pytest.raises(recording.RecordingError, match="reads versions 1, 2"):
        recording.read_header(tmp_path / "r.jsonl")



@pytest.mark.parametrize("suffix", [".jsonl", ".cvz"])
def test_a_simulators_ranks_stay_marked_in_both_formats(tmp_path, suffix):
    path = tmp_path / f"r{suffix}"
    rec = recording.Recorder(path)
    rec.write([dataclasses.replace(heartbeat(0, 2), simulated=True), heartbeat(1, 2)])
    rec.close({})
    beats = [m for m in recording.read(path) if isinstance(m, protocol.Heartbeat)]
    assert {m.rank: m.simulated for m in beats} == {0: True, 1: False}
