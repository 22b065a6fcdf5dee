"""The fleet simulator (bench/fleet.py): its plan (pure), and small fleets played over real
sockets into a real Session, which must take in all of it and diagnose its faults."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import fleet  # noqa: E402  (bench/ is no package)

from commviz.viewer.session import Session  # noqa: E402
from commviz.viewer.transport import Receiver  # noqa: E402
from commviz.wire import protocol  # noqa: E402

T0 = 1_700_000_000_000_000_000
T_FAULT = T0 + 500_000_000
CLEAR_NS = 5_000_000  # a call this far from the fault is surely on one side of it
SMALL = dict(buckets=4, step_s=0.25)  # 16 collectives a second per rank, 4 late ones in a step


def _steps(job: fleet.Job, count: int) -> tuple[fleet.Plan, list[list[fleet.Out]]]:
    plan = fleet.Plan(job, T0, fleet.durations(job))
    return plan, [plan.next_step() for _ in range(count)]


def _fault(text: str) -> tuple[fleet.Fault, ...]:
    return (fleet.Fault.parse(text),)


# ---- the plan ------------------------------------------------------------------------------
def test_a_ddp_step_is_one_world_all_reduce_per_bucket_ending_together():
    plan, steps = _steps(fleet.Job(16, "ddp", **SMALL), 3)
    assert plan.instances == 12 and plan.hung_calls == 0
    for step in steps:
        for out in step:
            assert sorted(out.ranks.tolist()) == list(range(16))
            assert set(out.op.tolist()) == {protocol.OP_CODE["all_reduce"]}
            assert (out.t_end > out.t_start).all()
            assert out.t_end.max() - out.t_end.min() < fleet.END_JITTER_NS  # one instance
            assert out.flags & protocol.FLAG_DDP and out.bytes_in[0] == 25 << 20
    seqs = [int(out.seq[0]) for step in steps for out in step]
    assert seqs == list(range(1, 13))  # the world group's sequence numbers, in order


def test_the_cost_model_sets_durations_larger_for_larger_groups():
    dur = fleet.durations(fleet.Job(64, "tp-dp"))
    tp = dur[("all_reduce", (25 << 20) // 4, (25 << 20) // 4, tuple(range(8)))]
    dp = dur[("all_reduce", 25 << 20, 25 << 20, tuple(range(0, 64, 8)))]
    assert 0 < tp < dp  # NVLink within a node, the network across nodes


def test_tp_dp_groups_are_the_nodes_and_the_strides():
    plan = fleet.Plan(fleet.Job(32, "tp-dp"), T0, fleet.durations(fleet.Job(32, "tp-dp")))
    names = [name for name, _ in plan.groups]
    assert names == [str(i) for i in range(1 + 4 + 8)]  # as torch numbers new groups
    members = [ranks for _, ranks in plan.groups]
    assert members[1:5] == [tuple(range(8 * i, 8 * i + 8)) for i in range(4)]
    assert members[5:] == [tuple(range(j, 32, 8)) for j in range(8)]


def test_a_straggler_arrives_late_at_every_collective_from_fault_at():
    job = fleet.Job(16, "ddp", faults=_fault("straggler:5:30"), fault_at=0.5, **SMALL)
    plan, steps = _steps(job, 4)
    for out in (out for step in steps for out in step):
        others = out.t_start[out.ranks != 5]
        lead = out.t_start[out.ranks == 5][0] - others.max()
        if others.min() >= T_FAULT + CLEAR_NS:
            assert lead >= 30_000_000 - 8 * fleet.ARRIVAL_JITTER_NS
        elif others.max() < T_FAULT:
            assert lead < 10_000_000
    assert len(plan.late_ends[5]) >= 3 and plan.late_ends[5][0] > T_FAULT


def test_a_hung_rank_leaves_its_peers_inside_and_the_job_stops():
    job = fleet.Job(16, "ddp", faults=_fault("hang:3"), fault_at=0.5, **SMALL)
    plan, steps = _steps(job, 5)
    after = [out for step in steps for out in step if out.t_start.min() >= T_FAULT + CLEAR_NS]
    assert after, "the fault came after the last step"
    first = after[0]
    assert 3 not in first.ranks.tolist() and len(first.ranks) == 15
    assert (first.t_end == fleet.NEVER).all()  # in flight for ever
    assert not steps[-1]  # nobody makes a call any more
    assert plan.hung_calls >= 1


def test_a_dead_node_makes_no_calls_and_what_it_was_in_never_ends():
    job = fleet.Job(16, "ddp", faults=_fault("dead-node:1"), fault_at=0.5, **SMALL)
    plan, steps = _steps(job, 4)
    for out in (out for step in steps for out in step):
        if out.t_end.max() < fleet.NEVER:
            assert out.t_end.max() <= T_FAULT + fleet.END_JITTER_NS or not (out.ranks >= 8).any()
        if out.t_start.min() >= T_FAULT + CLEAR_NS:
            assert (out.ranks < 8).all()
    assert plan.hung_calls >= 1
    assert sorted(plan.death) == list(range(8, 16))
    assert all(T_FAULT <= d < T_FAULT + fleet.TICK_NS for d in plan.death.values())


def test_a_mismatch_is_one_rank_calling_another_op_once():
    job = fleet.Job(16, "fsdp", faults=_fault("mismatch:2"), fault_at=0.3, **SMALL)
    plan, steps = _steps(job, 3)
    odd = [(out, out.ranks[out.op != out.op[0]]) for step in steps for out in step
           if (out.op != out.op[0]).any()]
    assert len(odd) == 1 and odd[0][1].tolist() == [2]
    assert plan.mismatched == 1


def test_pipeline_transfers_pair_each_send_with_its_receive():
    plan, steps = _steps(fleet.Job(24, "pipeline", **SMALL), 2)
    sends, recvs = {}, {}
    for out in (out for step in steps for out in step):
        for r, op, peer, seq, t0, t1 in zip(*(a.tolist() for a in (
                out.ranks, out.op, out.peer, out.seq, out.t_start, out.t_end))):
            if protocol.OPS[op] == "isend":
                sends[(r, peer, seq)] = (t0, t1)
            else:
                recvs[(peer, r, seq)] = (t0, t1)
    assert sends.keys() == recvs.keys() and len(sends) == plan.transfers
    for key, (t0, t1) in sends.items():
        r0, r1 = recvs[key]
        assert abs(t1 - r1) < fleet.END_JITTER_NS and t1 > max(t0, r0)
    assert {r // 8 for r, peer, _ in sends} == {0, 1, 2}  # 3 stages, one per node


def test_a_slow_link_slows_the_transfers_between_its_nodes_only():
    job = fleet.Job(24, "pipeline", faults=_fault("slow-link:0:1"), **SMALL)
    dur = fleet.durations(job)
    slow = dur[("isend", job.size, 0, (0, 8))]
    fast = dur[("isend", job.size, 0, (8, 16))]
    assert slow > 8 * fast


def test_faults_and_jobs_are_checked():
    for bad in ("straggler:3", "stall", "dead-node:x", "teleport:1"):
        with pytest.raises(ValueError):
            fleet.Fault.parse(bad)
    with pytest.raises(ValueError):
        fleet.Job(12)
    with pytest.raises(ValueError):
        fleet.Job(16, faults=_fault("dead-node:2"))
    with pytest.raises(ValueError):
        fleet.Job(16, "pipeline", faults=_fault("mismatch:1"))


def test_offline_sends_what_the_plan_holds_and_the_model_takes_it_all():
    """``fleet.offline``: the fleet's wire bytes in virtual time. A 2 s DDP run of 16 ranks
    (16 all_reduces a second) arrives whole: every rank, as simulated, every instance the plan
    completed before the last flush, nothing rejected."""
    from fleet_model import fleet_view
    view = fleet_view(16, 2.0, **SMALL)
    model = view.model
    assert view.rejected == 0 and sorted(model.ranks) == list(range(16))
    assert all(s.simulated and s.host == f"node{r // 8:03d}" for r, s in model.ranks.items())
    plan, _ = _steps(fleet.Job(16, "ddp", **SMALL), 8)
    assert model.instances >= plan.instances - 4  # the last step's may not be flushed yet
    # the records of instances some ranks have not flushed yet are counted, not matched
    assert 16 * model.instances <= model.records < 16 * (model.instances + 1)


def test_offline_faults_are_found_as_live():
    from fleet_model import fleet_view
    view = fleet_view(16, 3.0, faults=("straggler:5:30",), fault_at=0.5, **SMALL)
    names = {(f.type, f.ranks) for f in view.diagnosis.history}
    assert ("straggler", (5,)) in names, names


def test_a_rank_that_stalls_now_and_then_is_late_but_no_straggler():
    """1,024 ranks; rank 139 stalls 50-300 ms in about a third of the steps. Each stall makes
    it late at every bucket all_reduce of its step: one late episode, not a straggler's run."""
    from fleet_model import fleet_view
    view = fleet_view(1024, 5.0, faults=("stall:139",), fault_at=1.0)
    assert not [f for f in view.diagnosis.history if f.type != "resolved"], \
        [f.text("en") for f in view.diagnosis.history]
    late = dict(view.diagnosis.late_arrivals())
    assert 139 in late and late[139].count >= 1


def test_a_hung_rank_among_1024_is_one_finding_naming_its_node():
    """Rank 139 stops calling; DDP's bucket all_reduces go on being called by the 1,023
    others, each one more hung instance: one hang, its node named, the later ones counted."""
    from fleet_model import fleet_view
    view = fleet_view(1024, 4.0, faults=("hang:139",), fault_at=1.0)
    named = [f for f in view.diagnosis.history if f.type == "hang"]
    assert len(named) == 1 and named[0].ranks == (139,)
    assert "rank 139 (node017) missing" in named[0].text("en")
    assert "ranks 0-138,140-1023 inside" in named[0].text("en")
    (now,) = [f for f in view.diagnosis.findings() if f.type == "hang"]
    assert now.seq == named[0].seq and "later calls of the group wait behind it" in now.text("en")
    assert "(node017) faltando" in now.text("pt")


def test_a_slow_link_among_128_nodes_names_its_pairs_and_no_others():
    """A 1,024-rank pipeline (4 stages of 256), the link between nodes 0 and 32 at 1/16 of
    its bandwidth: its 8 pairs each way are named, and no pair across other nodes whose
    clocks disagree by milliseconds (offline, no clock samples: the ranks' own clocks)."""
    from fleet_model import fleet_view
    view = fleet_view(1024, 6.0, shape="pipeline", faults=("slow-link:0:32",), fault_at=1.0)
    named = {f.ranks for f in view.diagnosis.history if f.type == "slow"}
    assert named == {(r, 256 + r) for r in range(8)} | {(256 + r, r) for r in range(8)}


def test_workers_take_whole_nodes():
    assert fleet.split(fleet.Job(1024), None) == [(i, i + 128) for i in range(0, 1024, 128)]
    assert fleet.split(fleet.Job(16), 4) == [(0, 8), (8, 16)]
    assert all(hi - lo <= fleet.MAX_RANKS_PER_PROC for lo, hi in fleet.split(fleet.Job(2048), 1))


# ---- fleets over sockets -------------------------------------------------------------------
def _play(job: fleet.Job, seconds: float, until=None,
          relays: bool = False) -> tuple[Session, fleet.FleetReport]:
    """Play ``job`` into a live Session on loopback (``relays``: through a real relay per
    node); wait until the model has every record sent (and ``until(session)``, if given)
    before returning it, still open."""
    session = Session("tcp://127.0.0.1:*")
    session.start()
    try:
        report = fleet.run_fleet(session.addr, job, seconds, procs=2, relays=relays)
        assert not report.errors
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with session.lock:
                done = session.model.records >= report.records
            if done and (until is None or until(session)):
                break
            time.sleep(0.05)
    except BaseException:
        session.close()
        raise
    return session, report


def _found(session: Session, kind: str) -> list:
    with session.lock:
        return [f for f in session.diagnosis.history if f.type == kind]


@pytest.mark.integration
@pytest.mark.timeout(60)
@pytest.mark.parametrize("relays", [False, True])
def test_a_small_fleet_is_taken_in_whole(procs, relays):
    job = fleet.Job(16, "ddp", **SMALL)
    session, report = _play(job, 2.0, until=lambda s: all(
        st.exited for st in s.model.ranks.values()) and len(s.model.ranks) == 16, relays=relays)
    try:
        model = session.model
        with session.lock:
            assert set(session.receiver.relays) == ({"node000", "node001"} if relays else set())
            assert report.relays == (2 if relays else 0)
            assert report.relayed.get("lost", 0) == 0
            assert session.rejected == 0 and report.dropped_records == 0
            assert report.connected == 16 and report.messages["bye"] == 16
            assert sorted(model.ranks) == list(range(16))
            assert model.nodes() == {"node000": list(range(8)), "node001": list(range(8, 16))}
            assert {s.job_key for s in model.ranks.values()} == {fleet.JOB_KEY}
            assert {s.device for s in model.ranks.values()} == {f"cuda:{i}" for i in range(8)}
            assert model.records == report.records and model.instances == report.instances
            assert report.instances == 4 * report.steps and report.steps >= 7
            clocks = model.clock_offsets()  # each node's clock, found through the clock channel
            true = fleet.node_offsets(job)
            for node, host in enumerate(("node000", "node001")):
                c = clocks[host]
                assert c.offset_ns is not None
                assert abs(c.offset_ns - true[node]) <= c.uncertainty_ns + 1
            telemetry = model.ranks[3].telemetry[-1][1]
            assert telemetry["gpu_util_pct"] > 0 and telemetry["gpu_mem_total"] > 0
        assert not [f for f in session.diagnosis.history if f.type != "lost_rank"]
    finally:
        session.close()


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_straggler_is_named_on_its_rank(procs):
    job = fleet.Job(16, "ddp", faults=_fault("straggler:5:30"), fault_at=0.5, **SMALL)
    session, report = _play(job, 1.5, until=lambda s: any(
        f.type == "straggler" for f in s.diagnosis.history))
    try:
        named = _found(session, "straggler")
        assert named and {f.ranks for f in named} == {(5,)}
        assert session.rejected == 0
    finally:
        session.close()


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_dead_node_leaves_exactly_its_ranks_lost(procs):
    job = fleet.Job(16, "ddp", faults=_fault("dead-node:1"), fault_at=0.5, **SMALL)
    session, report = _play(job, 2.5, until=lambda s: len(  # one finding, or one a rank
        {r for f in s.diagnosis.history if f.type == "lost_rank" for r in f.ranks}) >= 8)
    try:
        lost = {r for f in _found(session, "lost_rank") for r in f.ranks}
        assert lost == set(range(8, 16))
        assert report.messages["bye"] == 8 and session.rejected == 0
    finally:
        session.close()


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_the_command_says_it_is_simulated(procs):
    receiver = Receiver("tcp://127.0.0.1:*")
    try:
        proc = procs.start(str(BENCH / "fleet.py"), "--ranks", "8", "--seconds", "1",
                           "--step-s", "0.25", "--buckets", "2", "--to", receiver.addr)
        messages = []
        deadline = time.monotonic() + 30
        while proc.p.poll() is None and time.monotonic() < deadline:
            messages += receiver.drain(50)
        messages += receiver.drain(200)
        rc = proc.finish(10)
        assert rc in (0, 2), proc.stderr  # 2: it fell behind its schedule, and says so
        assert receiver.rejected == 0
        beats = [m for m in messages if isinstance(m, protocol.Heartbeat)]
        assert beats and {(m.job, m.world) for m in beats} == {(fleet.JOB_KEY, 8)}
        assert all(line.startswith(fleet.SIMULATED) for line in proc.out)
        said = "kept real time" if rc == 0 else "FELL BEHIND"
        assert any(said in line for line in proc.out), proc.stdout
        ops = sum(int((m.cols["t_end"] >= 0).sum()) for m in messages
                  if isinstance(m, protocol.OpBatch))
        sent = next(line for line in proc.out if " sent " in line)
        assert ops and f"sent {ops:,} op records" in sent
    finally:
        receiver.close()
