"""A real headless demo recorded in the compact format: the recording holds what its JSON
Lines export holds, and ``commviz stats`` reads both alike."""

from __future__ import annotations

import json

import pytest

from commviz.viewer import compact, recording

pytestmark = pytest.mark.integration  # real rank processes and sockets


def test_a_headless_demo_records_compactly(procs, tmp_path):
    record = tmp_path / "ar.cvz"
    run = procs.commviz("demo", "all_reduce", "--ranks", "2", "--headless", "--iters", "5",
                        "--record", str(record), timeout=90)
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert not procs.ranks_left(), "rank processes outlived the demo"
    assert compact.is_compact(record) and compact.index(record)[1]  # closed: with its index
    header = recording.read_header(record)
    assert header["version"] == recording.VERSION and header["demo"] == "all_reduce"
    lines = list(recording.lines(record))
    ops = [line for line in lines if line.get("kind") == "op"]
    groups = {line["g"]: line["ranks"] for line in lines if line.get("kind") == "group"}
    assert sorted((op["rank"], op["seq"]) for op in ops) == [(r, s) for r in (0, 1)
                                                             for s in range(1, 6)]
    assert all(op["op"] == "all_reduce" and groups[op["g"]] == [0, 1] and
               op["bytes_in"] == 4096 and op["file"].endswith("all_reduce.py") for op in ops)
    assert {"rank", "topo", "bye", "summary"} <= {line.get("kind") for line in lines}
    assert lines[-1]["kind"] == "summary" and lines[-1]["records"] == 10

    exported = procs.commviz("export", str(record), "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    stats = []
    for path in (record, tmp_path / "ar.jsonl"):
        out = procs.commviz("stats", "--json", str(path))
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        stats.append({k: v for k, v in json.loads(out.stdout).items() if k != "file"})
    assert stats[0] == stats[1] and stats[0]["records"] == 10 and stats[0]["instances"] == 5
