"""The emitter never blocks or hangs a rank, whatever the viewer does, and counts its drops."""

import multiprocessing as mp
import os
import time

import pytest
import zmq

from commviz.launch.launcher import free_port
from commviz.rank.emitter import Emitter
from commviz.viewer.transport import Receiver
from commviz.wire import protocol, ring

pytestmark = pytest.mark.integration  # real ranks, sockets or apps


def _record(i, t_end=None):
    t = time.time_ns()
    return [i, protocol.OP_CODE["all_reduce"], protocol.NO_CODE, 0, i + 1, -1, 16, 16, 0, 0, t,
            t + 10 if t_end is None else t_end, 0]


def test_records_reach_a_viewer_in_flight_first_then_complete():
    receiver = Receiver("tcp://127.0.0.1:*")
    em = Emitter(receiver.addr, lambda: (0, 1, "gloo", "cpu"))
    try:
        em.groups[0] = ("0", [0])
        em.sites[0] = ("train.py", 7)
        done = [_record(i) for i in range(5)]
        slow = _record(5, t_end=-1)
        slow[10] -= 50_000_000  # started 50 ms ago: announced as in flight
        for rec in [*done, slow]:
            em.push(rec)
        seen = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sum(len(b) for b in seen) < 6:
            seen += [m for m in receiver.drain(50) if isinstance(m, protocol.OpBatch)]
        ids = {int(i): int(e) for b in seen for i, e in zip(b.cols["id"], b.cols["t_end"])}
        assert sorted(ids) == [0, 1, 2, 3, 4, 5]
        assert ids[5] == -1  # in flight
        slow[11] = time.time_ns()  # completes now
        deadline = time.monotonic() + 5
        final = None
        while final is None and time.monotonic() < deadline:
            for m in receiver.drain(50):
                if isinstance(m, protocol.OpBatch) and 5 in m.cols["id"].tolist():
                    final = m
        assert final is not None and int(final.cols["t_end"][0]) == slow[11]
        assert em.dropped == 0
    finally:
        em.close()
        receiver.close()


def _flood(addr: str, out: mp.Queue) -> None:
    em = Emitter(addr, lambda: (0, 1, "gloo", "cpu"))
    em.groups[0] = ("0", [0])
    em.sites[0] = ("x.py", 1)
    t0 = time.perf_counter()
    for i in range(100_000):
        em.push(_record(i))
        if i % 1000 == 0:
            time.sleep(0.001)  # let the sender thread run, as a real rank's ops would
    pushed = time.perf_counter() - t0
    time.sleep(0.3)
    c0 = time.perf_counter()
    em.close()
    out.put((pushed, time.perf_counter() - c0, em.sent, em.dropped))
    out.close()
    out.join_thread()  # os._exit would otherwise kill the queue's feeder thread first
    os._exit(0)


def _run_flood(addr):
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    p = ctx.Process(target=_flood, args=(addr, out))
    p.start()
    try:
        return out.get(timeout=60)
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()


def test_no_viewer_drops_and_counts_without_blocking():
    pushed_s, close_s, sent, dropped = _run_flood(f"tcp://127.0.0.1:{free_port()}")
    assert sent == 0 and dropped == 100_000
    assert close_s < 1.5  # exit never waits on a viewer that is not there


@pytest.mark.parametrize("rank", [0, 1])
def test_records_no_viewer_ever_took_are_reported_once_per_job(capfd, rank):
    """`commviz run --no-viewer` with a mistyped COMMVIZ_ADDR: rank 0 says so at exit."""
    addr = f"tcp://127.0.0.1:{free_port()}"
    em = Emitter(addr, lambda: (rank, 2, "gloo", "cpu"))
    em.groups[0] = ("0", [0, 1])
    em.sites[0] = ("x.py", 1)
    for i in range(5):
        em.push(_record(i))
    time.sleep(0.5)
    em.close()
    err = capfd.readouterr().err
    if rank == 0:
        assert f"no viewer ever answered at {addr}: the job's records were dropped" in err
        assert f"({em.dropped} of them from rank 0;" in err
        assert em.dropped >= 5
    else:
        assert err == ""


def test_viewer_that_never_reads_cannot_block_or_hang_the_rank():
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)  # bound, connected, never read
    sock.setsockopt(zmq.RCVHWM, 1)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    try:
        pushed_s, close_s, sent, dropped = _run_flood(f"tcp://127.0.0.1:{port}")
    finally:
        sock.close(linger=0)
        ctx.term()
    assert sent + dropped == 100_000
    assert close_s < 2.5  # bounded by the exit linger


_WHO = [0]  # the rank this process reports as: the forked child of the test below says 1


def _forked_rank(em: Emitter) -> None:
    _WHO[0] = 1
    for i in range(100, 103):
        em.push(_record(i))
    # leaves through multiprocessing's exit path (finalizers, then os._exit), like a rank


def _silent_child(em: Emitter) -> None:
    """A forked child that makes no call of its own, like a DataLoader worker."""


def test_a_forked_child_reports_through_a_thread_and_context_of_its_own():
    receiver = Receiver("tcp://127.0.0.1:*")
    em = Emitter(receiver.addr, lambda: (_WHO[0], 2, "gloo", "cpu"))
    try:
        em.groups[0] = ("0", [0, 1])
        em.sites[0] = ("train.py", 7)
        em.push(_record(0))
        em.push(_record(1, t_end=-1))  # the parent's, pending at the fork: never the child's
        fork = mp.get_context("fork")
        silent = fork.Process(target=_silent_child, args=(em,))
        silent.start()
        silent.join(20)
        child = fork.Process(target=_forked_rank, args=(em,))
        child.start()
        child.join(20)
        assert child.exitcode == 0 and silent.exitcode == 0
        em.push(_record(2))
        seen: dict[int, set[int]] = {0: set(), 1: set()}
        pids, byes = set(), set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (len(seen[1]) < 3 or 2 not in seen[0]
                                               or 1 not in byes):
            for m in receiver.drain(50):
                if isinstance(m, protocol.OpBatch):
                    seen[m.rank].update(m.cols["id"].tolist())
                elif isinstance(m, protocol.Heartbeat) and m.pid != os.getpid():
                    pids.add(m.pid)
                elif isinstance(m, protocol.Bye):
                    byes.add(m.rank)
        assert seen[1] == {100, 101, 102}
        assert pids == {child.pid}  # the silent child sent no heartbeat (nor anything else)
        assert byes == {1}  # the child flushed and said goodbye at its exit; the parent lives
        assert {0, 2} <= seen[0] and not seen[0] & {100, 101, 102}
    finally:
        em.close()
        receiver.close()


def test_the_ring_knows_the_rank_from_its_first_group_before_any_viewer_answers(
        tmp_path, monkeypatch):
    """A rank that dies before its sender thread ever connected (a short job on a busy
    machine) must still be one a harvester can speak for: the identity is in its ring from
    the moment the rank's first group is announced, on the rank's own thread."""
    monkeypatch.setenv(ring.ENV_DIR, str(tmp_path))
    em = Emitter(f"tcp://127.0.0.1:{free_port()}", lambda: (3, 4, "gloo", "cpu"),
                 lambda: "job-key")
    try:
        em.note_group(0, "0", [0, 1, 2, 3])
        got = ring.read(em.ring.path)
        assert got.rank == 3
        assert got.identity[:4] == (3, 4, "gloo", "cpu") and got.identity[5] == "job-key"
        assert not got.heartbeat_sent
    finally:
        em.close()
