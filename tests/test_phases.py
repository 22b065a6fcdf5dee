"""commviz.phase(): marked on real ranks, validated on the wire, kept by the model, recorded."""

import threading

import pytest
import torch.distributed as dist
from fakes import T0_NS, FakeClock, op_batch
from ranks import run_ranks

import commviz
from commviz.rank import phases
from commviz.viewer import recording
from commviz.viewer.model import PHASES_MAX, Model
from commviz.wire import protocol


@commviz.phase("optimizer")
def _step():
    return 42


def _job(rank, world):
    for _ in range(2):
        with commviz.phase("step"):
            with commviz.phase("forward"):
                pass
            with commviz.phase("backward"):
                dist.barrier()
            assert _step() == 42


@pytest.mark.integration
def test_phases_arrive_from_real_ranks_and_nest():
    run = run_ranks(_job, 2, timeout=60)
    for rank in range(2):
        spans = [s for m in run.messages if isinstance(m, protocol.Phases) and m.rank == rank
                 for s in m.spans]
        assert [(s.name, s.depth) for s in spans] == [
            ("forward", 1), ("backward", 1), ("optimizer", 1), ("step", 0)] * 2
        for i in (0, 4):  # each step holds its three phases, one after the other
            fwd, bwd, opt, step = spans[i:i + 4]
            assert (step.t_start <= fwd.t_start <= fwd.t_end <= bwd.t_start <= bwd.t_end
                    <= opt.t_start <= opt.t_end <= step.t_end)


def test_a_phase_is_a_no_op_when_not_instrumented(monkeypatch):
    monkeypatch.setattr(phases, "queue", None)
    with commviz.phase("forward") as p:
        assert _step() == 42
    assert p._t0 == -1 and phases._depth.value == 0


def test_nesting_depth_is_per_thread_and_survives_exceptions(monkeypatch):
    import collections

    queue = collections.deque()
    monkeypatch.setattr(phases, "queue", queue)
    with pytest.raises(RuntimeError), commviz.phase("outer"):
        with commviz.phase("inner"):
            raise RuntimeError
    other = threading.Thread(target=_step)
    other.start()
    other.join()
    assert [(n, d) for n, d, _, _ in queue] == [("inner", 1), ("outer", 0), ("optimizer", 0)]
    assert phases._depth.value == 0


@pytest.mark.parametrize("name", ["", "x" * 65, 3, None])
def test_bad_names_are_refused_at_once(name):
    with pytest.raises(ValueError, match="phase name"):
        commviz.phase(name)


def test_rank_side_limits_match_the_protocol():
    assert (phases.NAME_MAX, phases.DEPTH_MAX) == (protocol.PHASE_NAME_MAX,
                                                   protocol.PHASE_DEPTH_MAX)


def test_phases_round_trip_the_wire():
    msg = protocol.decode(protocol.encode_phases(3, [("forward", 0, 10, 20), ("b", 1, 12, 12)]))
    assert msg == protocol.Phases(3, (protocol.PhaseSpan("forward", 0, 10, 20),
                                      protocol.PhaseSpan("b", 1, 12, 12)))


@pytest.mark.parametrize("spans", [
    [], [["", 0, 1, 2]], [["x" * 65, 0, 1, 2]], [["f", -1, 1, 2]], [["f", 256, 1, 2]],
    [["f", 0, 5, 4]], [["f", 0, -1, 2]], [["f", 0, 1.0, 2]], [["f", 0, 1]], "f", [[b"f", 0, 1, 2]],
])
def test_malformed_phases_are_rejected(spans):
    data = protocol.pack({"v": 1, "k": "ph", "rank": 0, "spans": spans})
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(data)


def _spans(rank, *rows):
    return protocol.Phases(rank, tuple(protocol.PhaseSpan(*r) for r in rows))


def test_model_keeps_recent_phases_per_rank_in_a_window():
    m = Model(FakeClock())
    m.apply([_spans(0, ("forward", 0, 10, 20), ("backward", 0, 30, 60)),
             _spans(1, ("forward", 0, 12, 25))])
    assert m.phases(0) == {0: [("forward", 0, 10, 20), ("backward", 0, 30, 60)],
                           1: [("forward", 0, 12, 25)]}
    assert m.phases(21, 40) == {0: [("backward", 0, 30, 60)], 1: [("forward", 0, 12, 25)]}
    assert 0 in m.ranks and 1 in m.ranks
    m.apply([_spans(0, *((f"p{i}", 0, 100 + i, 101 + i) for i in range(PHASES_MAX)))])
    kept = m.phases(0)[0]
    assert len(kept) == PHASES_MAX and kept[0].name == "p0"


def test_ddp_flag_reaches_the_matched_instance():
    m = Model(FakeClock())
    m.new_instances = []
    groups = {0: ("0", (0, 1))}
    m.apply([op_batch(r, [{"id": 1, "op": "all_reduce", "seq": 1, "bytes_in": 8, "bytes_out": 8,
                           "t_start": T0_NS, "flags": protocol.FLAG_ASYNC | protocol.FLAG_DDP},
                          {"id": 2, "op": "all_reduce", "seq": 2, "t_start": T0_NS}], groups)
             for r in range(2)])
    assert [i.ddp for i in m.new_instances] == [True, False]


def test_recording_keeps_phases_and_the_ddp_flag(tmp_path):
    path = tmp_path / "run.jsonl"
    rec = recording.Recorder(path)
    batch = op_batch(0, [{"id": 1, "op": "all_reduce", "seq": 1, "t_start": T0_NS,
                          "flags": protocol.FLAG_DDP}], {0: ("0", (0,))})
    rec.write([_spans(0, ("forward", 0, 10, 20), ("step", 0, 5, 30)), batch])
    rec.close({})
    lines = path.read_text().splitlines()
    assert '"kind":"phase","rank":0,"name":"forward","depth":0' in lines[1]
    assert lines[3].startswith('{"kind":"group"')  # the op's group, before the op
    assert '"ddp":true' in lines[4]
    m = Model(FakeClock())
    m.new_instances = []
    m.apply(recording.read(path))
    assert m.phases(0) == {0: [("step", 0, 5, 30), ("forward", 0, 10, 20)]}
    assert [i.ddp for i in m.new_instances] == [True]
