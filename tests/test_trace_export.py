"""``commviz export REC -o trace.json``: a Chrome trace that keeps the trace-event rules
(checked by ``problems`` below), holds one slice per op record and one flow per matched
transfer and per other member of each collective instance, corrects other hosts' clocks, is
cut by --from/--to/--ranks, and is the same from a compact recording as from JSON Lines."""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from fakes import (
    STEP_NS,
    T0_NS,
    bye,
    gpu_heartbeat,
    heartbeat,
    inflight,
    op_batch,
    scripted_all_reduce,
    scripted_send_recv,
)

from commviz import cli
from commviz.viewer import recording, trace_export
from commviz.viewer.model import Model
from commviz.wire import protocol

EPS = 1e-6  # µs: the trace's times have 3 decimals
OFFSET_NS = 5_000_000  # node1's clock runs this far ahead of the viewer's (node0)
SLICE_PHASES = ("X", "b")


def problems(trace: dict) -> list[str]:
    """Where ``trace`` breaks the trace-event rules Perfetto and chrome://tracing read by."""
    found: list[str] = []
    if trace.get("displayTimeUnit") != "ms" or not isinstance(trace.get("traceEvents"), list):
        return ["not the JSON object form"]
    events = trace["traceEvents"]
    pids = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    tids = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    slices: dict[tuple, list[tuple[float, float]]] = collections.defaultdict(list)
    begun: dict[tuple, list[float]] = collections.defaultdict(list)
    pairs: dict[tuple, list[str]] = collections.defaultdict(list)
    flows: dict[tuple, list[dict]] = collections.defaultdict(list)
    for e in events:
        ph = e["ph"]
        if ph != "M" and not (isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0):
            found.append(f"time not a non-negative number: {e}")
            continue
        if ph == "i" and e.get("s") == "g":
            continue  # a global instant: no process
        if e.get("pid") not in pids:
            found.append(f"pid with no process_name: {e}")
        if ph not in ("M", "C", "i") and (e.get("pid"), e.get("tid")) not in tids:
            found.append(f"tid with no thread_name: {e}")
        where = (e.get("pid"), e.get("tid"))
        if ph == "X":
            if not e["dur"] >= 0:
                found.append(f"negative duration: {e}")
            slices[where].append((e["ts"], e["ts"] + e["dur"]))
        elif ph == "B":
            begun[where].append(e["ts"])
        elif ph == "E":
            if not begun[where] or begun[where][-1] > e["ts"] + EPS:
                found.append(f"E without its B: {e}")
            else:
                slices[where].append((begun[where].pop(), e["ts"]))
        elif ph in ("b", "e"):
            pairs[(e["pid"], e["cat"], e["id"])].append((ph, e["ts"]))
        elif ph in ("s", "f"):
            flows[(e["cat"], e["id"])].append(e)
    found += [f"B never closed on {where}" for where, open_ in begun.items() if open_]
    for key, ends in pairs.items():
        if [ph for ph, _ in ends] != ["b", "e"] or ends[1][1] < ends[0][1] - EPS:
            found.append(f"async events not paired: {key} {ends}")
    for where, spans in slices.items():  # nesting: each slice inside or apart from the others
        stack: list[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start + EPS:
                stack.pop()
            if stack and end > stack[-1] + EPS:
                found.append(f"slices cross on {where}: one ends at {stack[-1]}, "
                             f"[{start}, {end}] begins inside it")
            stack.append(end)
    for key, ends in flows.items():
        if sorted(e["ph"] for e in ends) != ["f", "s"]:
            found.append(f"flow {key} is not one s and one f")
            continue
        for e in ends:
            if e["ph"] == "f" and e.get("bp") != "e":
                found.append(f"flow end not bound to its enclosing slice: {e}")
            if not any(s - EPS <= e["ts"] <= t + EPS for s, t in slices[(e["pid"], e["tid"])]):
                found.append(f"flow {key} {e['ph']} lies in no slice of its thread")
    return found


def _by(trace: dict, *phases: str, cat: str | None = None) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] in phases
            and (cat is None or e.get("cat") == cat)]


def _ops(trace: dict) -> list[dict]:
    """The events that stand for op records: slices, or the ``b`` of an async pair."""
    return [e for e in _by(trace, *SLICE_PHASES) if e.get("cat") in ("collective", "p2p")
            and "never_ended" not in e["args"]]


def _clocked(msg: protocol.Heartbeat) -> protocol.Heartbeat:
    """``msg`` from node1, with a round trip that says its clock is OFFSET_NS ahead."""
    t1 = msg.t_ns
    clock = ((t1, t1 - OFFSET_NS + 10_000, t1 - OFFSET_NS + 11_000, t1 + 21_000),)
    return dataclasses.replace(msg, host="node1", clock=clock)


def _on_node1(batch: protocol.OpBatch) -> protocol.OpBatch:
    """Rank 3's records on its own clock (node1's, OFFSET_NS ahead)."""
    if batch.rank != 3:
        return batch
    return dataclasses.replace(batch, cols={**batch.cols,
                                            "t_start": batch.cols["t_start"] + OFFSET_NS,
                                            "t_end": batch.cols["t_end"] + OFFSET_NS})


def _ops_of(messages: list[protocol.Message]) -> list[protocol.OpBatch]:
    return [_on_node1(m) for m in messages if isinstance(m, protocol.OpBatch)]


def _messages() -> list[list[protocol.Message]]:
    """A 4-rank run, a round a write (times from T0 in ms): all_reduces at 0, 1 and 2, sends
    from even to odd ranks at 5, 6 and 7, an isend and its irecv at 8, three DDP buckets from
    15 that overlap (each begun before the last ended), five async all_reduces from 16 that
    cross each other (one more than a rank's async lanes), a barrier rank 2 was in when the
    recording ended, phases and GPU telemetry on rank 1, and rank 3 on another host whose
    clock runs OFFSET_NS ahead."""
    heartbeats = [heartbeat(0, 4), gpu_heartbeat(1, 4), heartbeat(2, 4), _clocked(heartbeat(3, 4))]
    ar = _ops_of(scripted_all_reduce(world=4, steps=3))
    p2p = _ops_of(scripted_send_recv(world=4, steps=3, t0_ns=T0_NS + 5 * STEP_NS))
    at = T0_NS + 8 * STEP_NS  # an isend and its irecv: async, each the 4th of its pair
    p2p += [op_batch(0, [{"id": 40, "op": "isend", "seq": 4, "peer": 1, "t_start": at,
                          "flags": protocol.FLAG_ASYNC}]),
            op_batch(1, [{"id": 40, "op": "irecv", "seq": 4, "peer": 0, "t_start": at + 5_000,
                          "flags": protocol.FLAG_ASYNC}])]
    t = T0_NS + 15 * STEP_NS
    ddp = _ops_of([op_batch(r, [
        {"id": 50 + k, "op": "all_reduce", "seq": 3 + k, "t_start": t + k * 100_000,
         "t_end": t + k * 100_000 + 250_000, "flags": protocol.FLAG_ASYNC | protocol.FLAG_DDP}
        for k in range(3)] + [
        {"id": 60 + k, "op": "all_reduce", "seq": 6 + k, "t_start": t + STEP_NS + 10_000 * k,
         "t_end": t + STEP_NS + 300_000 + 10_000 * k, "flags": protocol.FLAG_ASYNC}
        for k in range(5)]) for r in range(4)])
    phases = [protocol.Phases(1, (protocol.PhaseSpan("forward", 0, T0_NS, T0_NS + 400_000),
                                  protocol.PhaseSpan("attention", 1, T0_NS + 10,
                                                     T0_NS + 200_000)))]
    hung = inflight(2, "barrier", 1, t + 1_500_000, op_id=300)  # its record never comes
    return [heartbeats, ar, p2p + phases, ddp + [hung],
            [bye(r, t + 2 * STEP_NS) for r in range(4)]]


@dataclasses.dataclass
class _Finding:
    line: dict

    def record(self) -> dict:
        return self.line


def _record(path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(recording, "FLUSH_S", 0.0)  # a compact chunk a round
    rec = recording.Recorder(path, {"host": "node0"})
    for i, messages in enumerate(_messages()):
        rec.write(messages)
        if i == 1:
            rec.write_findings([_Finding({
                "kind": "diag", "version": 2, "type": "straggler", "ranks": [3],
                "group": [0, 1, 2, 3], "seq": 2, "facts": {"shape": "straggler", "rank": 3},
                "message": "rank 3 was late", "t_ns": T0_NS + 3 * STEP_NS})])
    rec.close({"records": 0})
    return path


@pytest.fixture
def rec(tmp_path, monkeypatch) -> Path:
    return _record(tmp_path / "r.jsonl", monkeypatch)


def _export(src: Path, dst: Path, cut: trace_export.Cut | None = None) -> dict:
    trace_export.export(src, dst, cut or trace_export.Cut())
    return json.loads(dst.read_text(encoding="utf-8"))


def _model(path: Path) -> Model:
    model = Model(local_host=recording.read_header(path).get("host"))
    model.apply(list(recording.read(path, records=True)))
    return model


def test_the_validator_finds_each_broken_rule():
    meta = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0"}},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "c"}}]
    x = {"ph": "X", "name": "a", "cat": "c", "pid": 0, "tid": 1}

    def broken(*events: dict) -> list[str]:
        return problems({"displayTimeUnit": "ms", "traceEvents": meta + list(events)})

    assert broken({**x, "ts": 0, "dur": 10}, {**x, "ts": 2, "dur": 3}) == []
    assert broken({**x, "ts": 0, "dur": 10}, {**x, "ts": 5, "dur": 10})  # crossing
    assert broken({**x, "ts": -1, "dur": 1})
    assert broken({**x, "tid": 2, "ts": 0, "dur": 1})
    assert broken({**x, "pid": 1, "ts": 0, "dur": 1})
    assert broken({"ph": "B", "name": "a", "pid": 0, "tid": 1, "ts": 0})
    assert broken({"ph": "b", "cat": "c", "id": 1, "name": "a", "pid": 0, "tid": 1, "ts": 0})
    flow = {"name": "t", "cat": "t", "id": 1, "pid": 0, "tid": 1}
    assert broken({**x, "ts": 0, "dur": 10}, {**flow, "ph": "s", "ts": 1})
    assert broken({**x, "ts": 0, "dur": 10}, {**flow, "ph": "s", "ts": 1},
                  {**flow, "ph": "f", "ts": 20, "bp": "e"})
    assert broken({**x, "ts": 0, "dur": 10}, {**flow, "ph": "s", "ts": 1},
                  {**flow, "ph": "f", "ts": 2}) == ["flow end not bound to its enclosing "
                                                    "slice: " + str({**flow, "ph": "f", "ts": 2})]


def test_the_trace_keeps_the_rules_and_the_recordings_counts(rec, tmp_path):
    trace = _export(rec, tmp_path / "t.json")
    assert problems(trace) == []
    lines = list(recording.lines(rec))
    ops = [line for line in lines if line.get("kind") == "op"]
    assert len(_ops(trace)) == len(ops) == 3 * 4 + 3 * 4 + 2 + 8 * 4
    model = _model(rec)
    assert len(_by(trace, "s", cat="transfer")) == model.transfers == 7
    # the isend's arrow, from rank 0's async lane to rank 1's, when the irecv was called
    ends = [(e["ph"], e["pid"], e["tid"]) for e in _by(trace, "s", "f", cat="transfer")
            if e["ts"] == 8_005.0]
    assert ends == [("s", 0, trace_export.ASYNC), ("f", 1, trace_export.ASYNC)]
    # every instance of the 4-rank group: an arrow from its last rank to each other one, but
    # where an end is an async pair (no thread slice a flow could bind to)
    bound = {(e["pid"], e["args"]["seq"]) for e in _by(trace, "X", cat="collective")}
    instances = collections.Counter(op["seq"] for op in ops if op["op"] == "all_reduce")
    whole = [s for s, n in instances.items() if n == 4 and all((r, s) in bound for r in range(4))]
    assert len(whole) == 3 + 3 + 4
    assert len(_by(trace, "s", cat="collective")) == 3 * len(whole)
    # the fifth of the async all_reduces that cross each other, on each rank: an async pair
    assert sorted((e["pid"], e["args"]["seq"]) for e in _by(trace, "b")) == \
        [(r, 10) for r in range(4)]
    assert len(_by(trace, "e")) == 4


def test_processes_lanes_phases_counters_and_findings(rec, tmp_path):
    trace = _export(rec, tmp_path / "t.json")
    names = {e["pid"]: e["args"]["name"] for e in _by(trace, "M")
             if e["name"] == "process_name"}
    assert names == {0: "rank 0 (node0, cpu)", 1: "rank 1 (node0, cuda:1)",
                     2: "rank 2 (node0, cpu)", 3: "rank 3 (node1, cpu)"}
    lanes = {(e["pid"], e["args"]["name"]) for e in _by(trace, "M") if e["name"] == "thread_name"}
    assert {(0, "collectives"), (0, "p2p"), (0, "async"), (0, "async 4"), (1, "phases")} <= lanes
    phases = _by(trace, "X", cat="phase")
    assert [(e["name"], e["pid"], e["dur"]) for e in phases] == [
        ("forward", 1, 400.0), ("attention", 1, 199.99)]
    counters = {e["name"]: e["args"] for e in _by(trace, "C")}
    assert counters == {"GPU utilization": {"%": 87.0}, "GPU memory": {"GB": 60.0},
                        "GPU power": {"W": 412.0}}
    assert {e["pid"] for e in _by(trace, "C")} == {1}  # the CPU ranks have no GPU telemetry
    (finding,) = [e for e in _by(trace, "i") if e["cat"] == "finding"]
    assert finding["s"] == "p" and finding["pid"] == 3 and finding["name"] == "straggler"
    assert finding["args"]["facts"] == {"shape": "straggler", "rank": 3}
    assert finding["ts"] == 3 * STEP_NS / 1e3
    assert sorted(e["pid"] for e in _by(trace, "i") if e["name"] == "bye") == [0, 1, 2, 3]
    (hung,) = [e for e in _by(trace, "X") if "never_ended" in e.get("args", {})]
    assert (hung["pid"], hung["tid"], hung["name"], hung["ts"], hung["dur"]) == \
        (2, trace_export.COLLECTIVES, "barrier", 16_500.0, 500.0)  # to the last goodbye


def test_another_hosts_clock_is_corrected(rec, tmp_path):
    """Rank 3's clock runs OFFSET_NS ahead: on the trace, its all_reduces start 10 µs after
    rank 2's, as they did (``scripted_collective``), not 5 ms after."""
    trace = _export(rec, tmp_path / "t.json")
    starts = {(e["pid"], e["args"]["seq"]): e["ts"] for e in _by(trace, "X", cat="collective")
              if e["name"] == "all_reduce" and e["args"]["seq"] < 3}
    assert min(e["ts"] for e in _ops(trace)) == 0.0
    assert [round(starts[(3, s)] - starts[(2, s)], 3) for s in range(3)] == [10.0] * 3


@pytest.mark.parametrize("cut", [trace_export.Cut(0.005, 0.0052),
                                 trace_export.Cut(ranks=frozenset({1, 3})),
                                 trace_export.Cut(0.0154, 0.0162, frozenset({0, 3}))])
def test_from_to_and_ranks_cut_the_trace(rec, tmp_path, cut):
    whole = _export(rec, tmp_path / "all.json")
    part = _export(rec, tmp_path / "part.json", cut)
    assert problems(part) == []

    def key(e: dict) -> tuple:
        return (e["pid"], e["name"], e["ts"], e["args"]["seq"])

    def end(e: dict) -> float:
        return e["ts"] + e.get("dur", 0)

    lo, hi = cut.start_s * 1e6, cut.end_s * 1e6
    kept = sorted(key(e) for e in _ops(whole) if (cut.ranks is None or e["pid"] in cut.ranks)
                  and e["ts"] <= hi and end(e) >= lo)
    assert kept and sorted(key(e) for e in _ops(part)) == kept
    assert len(kept) < len(_ops(whole))
    names = {e["pid"] for e in _by(part, "M") if e["name"] == "process_name"}
    assert names == (cut.ranks or {0, 1, 2, 3})


def test_a_compact_recording_gives_the_same_trace(rec, tmp_path, monkeypatch):
    cvz = _record(tmp_path / "r.cvz", monkeypatch)
    assert _export(cvz, tmp_path / "c.json") == _export(rec, tmp_path / "j.json")


def test_records_before_their_ranks_line_join_its_instances(tmp_path):
    """A rank's first records may come before its ``rank`` line (which waits for a clock
    round trip): they are of its job all the same, and their instances get their flows."""
    rec = recording.Recorder(tmp_path / "r.jsonl", {"host": "node0"})
    job = "tcp://node0:29500"
    ops = [m for m in scripted_all_reduce(world=4, steps=2) if isinstance(m, protocol.OpBatch)]
    rec.write([dataclasses.replace(heartbeat(r, 4), job=job) for r in range(3)] + ops)
    rec.write([dataclasses.replace(heartbeat(3, 4), job=job)])
    rec.close({})
    trace = _export(tmp_path / "r.jsonl", tmp_path / "t.json")
    assert problems(trace) == [] and len(_by(trace, "s", cat="collective")) == 2 * 3


def test_unmatched_state_stays_bounded(tmp_path, monkeypatch):
    """Sends never received and collectives some rank never joined: what the export keeps of
    them is capped."""
    monkeypatch.setattr(trace_export, "PENDING_MAX", 10)
    rec = recording.Recorder(tmp_path / "r.jsonl", {"host": "node0"})
    rec.write([heartbeat(0, 4), op_batch(0, [
        {"id": k, "op": op, "seq": k + 1, "peer": 1 if op == "send" else -1,
         "t_start": T0_NS + k * STEP_NS} for k in range(50) for op in ("send", "all_reduce")])])
    rec.close({})
    with open(tmp_path / "t.json", "w") as out:
        trace = trace_export._Trace(tmp_path / "r.jsonl", out,
                                    trace_export._survey(tmp_path / "r.jsonl"),
                                    trace_export.Cut())
        written = trace.write(recording.lines(tmp_path / "r.jsonl"))
    assert written.slices == 100 and written.unmatched == 10
    assert len(trace._sends) == 10 and trace._held <= 10


@pytest.mark.parametrize("args, says", [
    (["r.jsonl"], "name the format"),
    (["r.jsonl", "-o", "t.json"], "exists: --force"),
    (["r.jsonl", "--format", "trace", "-o", "t.cvz"], "ends in .cvz"),
    (["r.jsonl", "-o", "x.json", "--ranks", "4-x"], "--ranks 4-x"),
    (["r.jsonl", "-o", "x.json", "--from", "3", "--to", "1"], "0 <= --from < --to"),
    (["r.jsonl", "--format", "cvz", "--from", "1"], "needs --format trace"),
    (["bad.jsonl", "-o", "x.json"], "bad.jsonl:3: not JSON"),
    (["foreign.jsonl", "-o", "x.json"], "not a commviz recording"),
    (["no_end.jsonl", "-o", "x.json"], "no_end.jsonl:4: malformed line (KeyError('t_end_ns'))"),
    (["no_seq.jsonl", "-o", "x.json"], "no_seq.jsonl:5: malformed line (KeyError('seq'))"),
    (["hung_nowhere.jsonl", "-o", "x.json"], ": malformed line (KeyError('file'))"),
    (["r.jsonl", "-o", "no/such/dir/x.json"], "cannot write"),
])
def test_export_errors_are_one_line_and_write_nothing(rec, tmp_path, monkeypatch, capsys, args,
                                                      says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text("{}")
    lines = rec.read_text().splitlines(keepends=True)
    (tmp_path / "bad.jsonl").write_text(lines[0] + lines[1] + "{oops\n" + "".join(lines[2:]))
    (tmp_path / "foreign.jsonl").write_text('{"traceEvents": []}\n')
    ops = [i for i, line in enumerate(lines) if '"kind":"op"' in line]
    for name, at, field in (("no_end", 3, "t_end_ns"), ("no_seq", 4, "seq")):  # 0-based
        broken = dict(json.loads(lines[ops[0]]))
        del broken[field]
        (tmp_path / f"{name}.jsonl").write_text("".join(
            lines[:at] + [json.dumps(broken) + "\n"] + lines[at:ops[0]] + lines[ops[0] + 1:]))
    hung = [json.loads(line) if '"kind":"running"' in line else None for line in lines]
    (at,) = [i for i, line in enumerate(hung) if line and line["op"] == "barrier"]
    del hung[at]["file"]
    (tmp_path / "hung_nowhere.jsonl").write_text("".join(
        json.dumps(hung[i]) + "\n" if i == at else line for i, line in enumerate(lines)))
    says = says if not says.startswith(":") else f"hung_nowhere.jsonl:{at + 1}{says}"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(["export", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commviz: error: ") and says in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_trace_is_inferred_from_its_name_and_replaces_with_force(rec, tmp_path, capsys):
    out = tmp_path / "t.json"
    out.write_text("{}")
    assert cli.main(["export", str(rec), "-o", str(out), "--force"]) == 0
    assert problems(json.loads(out.read_text())) == []
    said = capsys.readouterr().out
    assert re.search(r"wrote .*t\.json \(trace: [\d,]+ events, 58 op slices of 4 ranks \(4 "
                     r"of them async pairs\), 7 transfer and 30 collective flows, 1 op running "
                     r"when it ended;", said), said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "t.json"]


@pytest.mark.integration
@pytest.mark.parametrize("demo", ["all_reduce", "isend_irecv", "ddp"])
def test_a_real_demos_trace(procs, tmp_path, demo):
    """A real 4-rank demo, recorded, exported through the CLI: the rules kept, one slice per
    op record, as many arrows as ``commviz stats`` (the viewer's model) counts transfers and
    collective instances (one per other member)."""
    record = tmp_path / f"{demo}.jsonl"
    run = procs.commviz("demo", demo, "--ranks", "4", "--headless", "--iters", "3",
                        "--record", str(record), timeout=120)
    kept = re.search(r"^rank logs kept in (\S+)$", run.stdout, re.M)
    if kept and Path(kept.group(1)).name.startswith("commviz-"):
        shutil.rmtree(kept.group(1), ignore_errors=True)
    assert run.returncode == 0, (run.stdout, run.stderr)
    exported = procs.commviz("export", str(record), "-o", str(tmp_path / "t.json"))
    assert exported.returncode == 0 and "Traceback" not in exported.stderr, exported.stderr
    trace = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert problems(trace) == []
    stats = procs.commviz("stats", "--json", str(record))
    counts = json.loads(stats.stdout)
    lines = list(recording.lines(record))
    ops = [line for line in lines if line.get("kind") == "op"]
    sizes = {line["g"]: len(line["ranks"]) for line in lines if line.get("kind") == "group"}
    members = collections.Counter((op["g"], op["seq"]) for op in ops
                                  if op["op"] not in protocol.P2P)
    whole = [(g, n) for (g, _), n in members.items() if n == sizes[g]]
    assert len(_ops(trace)) == len(ops) == counts["records"] >= 12
    assert len(_by(trace, "s", cat="transfer")) == counts["transfers"]
    assert len(whole) == counts["instances"]
    assert len(_by(trace, "s", cat="collective")) == sum(n - 1 for _, n in whole)
    assert counts["transfers"] + counts["instances"] > 0
    names = sorted(e["args"]["name"] for e in _by(trace, "M") if e["name"] == "process_name")
    assert len(names) == 4 and all(re.fullmatch(r"rank \d \(.+, cpu\)", n) for n in names)
    assert not procs.ranks_left(), "rank processes outlived the demo"
