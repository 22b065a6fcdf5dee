"""Several nodes, simulated on one machine: rank processes that report their own host names
(COMMVIZ_HOST) and clocks shifted by known amounts (COMMVIZ_CLOCK_SHIFT_NS), a viewer bound
on the machine's own non-loopback address with CURVE keys, peers without keys refused."""

from __future__ import annotations

import collections
import dataclasses
import multiprocessing as mp
import re
import signal
import socket
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import zmq
from fakes import T0_NS, heartbeat, op_batch
from ranks import _child, reap

from commviz import cli
from commviz.launch.launcher import free_port
from commviz.viewer.model import Model
from commviz.viewer.session import Session
from commviz.viewer.transport import BindError, Receiver
from commviz.wire import clocksync, keys, nodes, protocol

MS = 1_000_000
JOBS = Path(__file__).resolve().parent / "jobs"
HOSTS = {0: ("node-a", 300 * MS), 1: ("node-a", 300 * MS),
         2: ("node-b", -200 * MS), 3: ("node-b", -200 * MS)}


def _own_address() -> str:
    """This machine's first non-loopback IPv4 address, else loopback (still keyed)."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not nodes.is_loopback(f"tcp://{a.address}:1"):
                return a.address
    return "127.0.0.1"


@pytest.fixture(scope="module")
def keydir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    keys.generate(folder, force=True)
    return folder


# ---- pure: the estimate and the model ------------------------------------------------------
def _sample(theta: int, t_viewer: int, d1: int, d2: int, busy: int = 50_000) -> list[int]:
    """A round trip against a host whose clock is the viewer's + theta, delays d1 and d2."""
    t1 = t_viewer + theta
    t2 = t_viewer + d1
    t3 = t2 + busy
    return [t1, t2, t3, t3 + d2 + theta]


def test_estimate_bounds_the_offset_with_the_narrowest_round_trip():
    theta = 123 * MS
    samples = [clocksync.Sample(*_sample(theta, T0_NS + i * MS, d1, d2))
               for i, (d1, d2) in enumerate([(900_000, 100_000), (40_000, 60_000),
                                              (5_000_000, 10_000)])]
    est = clocksync.estimate(samples)
    assert est is not None and est.samples == 3
    assert est.uncertainty_ns == 50_000  # half of the narrowest round trip (40 + 60 us)
    assert abs(est.offset_ns - theta) <= est.uncertainty_ns
    assert est.offset_ns == theta + (60_000 - 40_000) // 2  # asymmetric: inside the bound
    bad = clocksync.Sample(10, 5, 100, 11)  # the viewer "took" longer than the round trip
    assert clocksync.estimate([bad]) is None


def test_a_window_keeps_the_estimate_of_its_last_samples():
    """Kept as samples come (the narrowest pushed out, ties, invalid ones), it is always
    ``estimate`` of the last WINDOW samples."""
    rng = np.random.default_rng(5)
    for size in (1, 2, 5, clocksync.WINDOW):
        window, last = clocksync.Window(size), collections.deque(maxlen=size)
        for _ in range(400):
            t1, t2 = (int(v) for v in rng.integers(0, 50, 2))
            sample = clocksync.Sample(t1, t2, t2 + int(rng.integers(-3, 10)),
                                      t1 + int(rng.integers(-5, 30)))  # some invalid
            window.add(sample)
            last.append(sample)
            assert window.estimate() == clocksync.estimate(last)
            assert list(window.samples) == list(last)


def _hb(rank: int, host: str, clk: list[list[int]]) -> protocol.Heartbeat:
    return dataclasses.replace(heartbeat(rank, 3), host=host,
                               clock=tuple(tuple(s) for s in clk))


def test_model_corrects_other_hosts_and_groups_ranks_by_node():
    theta = 2_000 * MS  # "far" runs 2 s ahead of the viewer
    m = Model(clock=lambda: 1.0, local_host="here")
    m.apply([_hb(0, "here", []), _hb(1, "far", [_sample(theta, T0_NS, 30_000, 30_000)]),
             _hb(2, "far", [])])
    offsets = m.clock_offsets()
    assert m.nodes() == {"here": [0], "far": [1, 2]}
    assert offsets["here"].local and offsets["here"].offset_ns == 0
    assert not offsets["far"].local and offsets["far"].uncertainty_ns == 30_000
    assert abs(offsets["far"].offset_ns - theta) <= offsets["far"].uncertainty_ns
    t = T0_NS + 10 * MS  # the same moment on the viewer's clock: rank 0 1 ms late
    group = {0: ("0", (0, 1, 2))}
    m.apply([op_batch(0, [{"id": 0, "op": "all_reduce", "seq": 1, "t_start": t + MS,
                           "t_end": t + 5 * MS}], group),
             op_batch(1, [{"id": 0, "op": "all_reduce", "seq": 1, "t_start": t + theta,
                           "t_end": t + theta + 5 * MS}], group),
             op_batch(2, [{"id": 0, "op": "all_reduce", "seq": 1, "t_start": t + theta,
                           "t_end": t + theta + 5 * MS}], group)])
    [inst] = list(m.recent)
    assert abs(inst.skew_ns - MS) <= 30_000  # 2 s without the correction
    lanes = m.timeline(T0_NS)
    assert abs(lanes[1][0].t_ready - lanes[1][0].t_start - MS) <= 30_000
    assert abs(lanes[0][0].t_ready - lanes[0][0].t_start) <= 30_000


def test_heartbeat_clock_field_is_optional_and_validated():
    hb = {"v": 1, "k": "hb", "rank": 0, "world": 1, "host": "h", "pid": 1, "backend": "gloo",
          "device": "cpu", "t_ns": 5, "dropped": 0, "tel": {}}
    assert protocol.decode(protocol.pack(hb)).clock == ()
    assert protocol.decode(protocol.pack({**hb, "clk": [[1, 2, 3, 4]]})).clock == ((1, 2, 3, 4),)
    for bad in ([[1, 2, 3]], [[1, 2, 3, -4]], "x", [[1, 2, 3, 4]] * 17):
        with pytest.raises(protocol.ProtocolError, match="clk"):
            protocol.decode(protocol.pack({**hb, "clk": bad}))


@pytest.mark.parametrize("addr, local", [
    ("tcp://127.0.0.1:5555", True), ("tcp://127.0.0.2:5555", True),
    ("tcp://localhost:5555", True), ("tcp://[::1]:5555", True), ("ipc:///tmp/x", True),
    ("tcp://0.0.0.0:5555", False), ("tcp://*:5555", False), ("tcp://192.0.2.7:5555", False),
    ("tcp://eth0:5555", False)])
def test_is_loopback(addr, local):
    assert nodes.is_loopback(addr) is local


# ---- the commands' errors ------------------------------------------------------------------
@pytest.mark.integration
def test_clear_errors(tmp_path, capsys, monkeypatch, keydir):
    monkeypatch.delenv(keys.ENV_KEYS, raising=False)
    assert cli.main(["watch", "--headless", "--bind", f"tcp://0.0.0.0:{free_port()}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commviz: error: ") and "commviz keys" in err and "--keys" in err
    assert cli.main(["watch", "--headless", "--bind", "tcp://0.0.0.0:1",
                     "--keys", str(tmp_path / "none")]) == 2
    assert "no such folder of keys" in capsys.readouterr().err
    assert cli.main(["keys", str(tmp_path / "k")]) == 0
    assert {p.name for p in (tmp_path / "k").iterdir()} == {
        "server.key", "server.key_secret", "client.key", "client.key_secret"}
    assert cli.main(["keys", str(tmp_path / "k")]) == 2
    assert "--force" in capsys.readouterr().err
    assert cli.main(["keys", str(tmp_path / "k"), "--force"]) == 0
    assert cli.main(["run", "--no-viewer", "--keys", str(keydir), "--", "true"]) == 2
    assert "--no-viewer starts no viewer: --keys" in capsys.readouterr().err
    assert cli.main(["run", "--headless", "--bind", "tcp://0.0.0.0:*", "--", "true"]) == 2
    assert "commviz keys" in capsys.readouterr().err
    monkeypatch.setattr(zmq, "has", lambda feature: False)
    assert cli.main(["watch", "--headless", "--bind", "tcp://0.0.0.0:1", "--keys",
                     str(keydir)]) == 2
    assert "without CURVE" in capsys.readouterr().err


# ---- real sockets: who gets in -------------------------------------------------------------
def _push(ctx: zmq.Context, addr: str, client: keys.ClientKeys | None) -> zmq.Socket:
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    if client is not None:
        keys.secure_client(sock, client)
    sock.connect(addr)
    return sock


@pytest.mark.integration
def test_unauthenticated_peers_never_reach_the_model(tmp_path, keydir):
    other = tmp_path / "other"
    keys.generate(other)  # a key pair the viewer does not know
    good = keys.client_keys({keys.ENV_KEYS: str(keydir)})
    stranger = keys.client_keys({keys.ENV_SERVER_KEY: str(keydir / "server.key"),
                                 keys.ENV_CLIENT_KEY: str(other / "client.key_secret")})
    session = Session(f"tcp://{_own_address()}:*", keys=keydir)
    ctx = zmq.Context()
    try:
        assert session.receiver.secure
        socks = {5: _push(ctx, session.addr, None), 6: _push(ctx, session.addr, stranger),
                 7: _push(ctx, session.addr, good)}
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            for rank, sock in socks.items():
                try:
                    sock.send(protocol.pack({"v": 1, "k": "hb", "rank": rank, "world": 8,
                                             "host": "h", "pid": rank, "backend": "gloo",
                                             "device": "cpu", "t_ns": time.time_ns(),
                                             "dropped": 0, "tel": {}}), zmq.NOBLOCK)
                except zmq.Again:
                    pass
            session.poll(50)
        assert set(session.model.ranks) == {7}
        assert session.rejected == 0  # refused before reading: nothing to reject
    finally:
        for sock in socks.values():
            sock.close(linger=0)
        ctx.term()
        session.close()


# ---- real ranks on simulated nodes ---------------------------------------------------------
def _allreduces(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    t = torch.ones(256)
    for _ in range(12):
        dist.barrier()
        dist.all_reduce(t)
        time.sleep(0.05)


def _rank(rank: int, world: int, port: int, addr: str, keydir: str) -> None:
    """A rank on its simulated node: its own host name and clock shift, with keys."""
    host, shift = HOSTS[rank]
    _child(_allreduces, rank, world, port, addr, (),
           env={nodes.ENV_HOST: host, nodes.ENV_CLOCK_SHIFT: str(shift), keys.ENV_KEYS: keydir})


@pytest.mark.integration
def test_simulated_nodes_offsets_skew_and_grouping(keydir):
    world = len(HOSTS)
    session = Session(f"tcp://{_own_address()}:*", keys=keydir, collect_instances=True)
    ctx = mp.get_context("fork")
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, session.addr, str(keydir)),
                         daemon=True) for r in range(world)]
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + 60
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            session.poll(50)
        end = time.monotonic() + 3
        while (sum(s.exited for s in session.model.ranks.values()) < world
               and time.monotonic() < end):
            session.poll(50)
    finally:
        reap(procs)
        session.close()
    assert [p.exitcode for p in procs] == [0] * world
    m = session.model
    assert m.nodes() == {"node-a": [0, 1], "node-b": [2, 3]}
    offsets = m.clock_offsets()
    for host, shift in {"node-a": 300 * MS, "node-b": -200 * MS}.items():
        off = offsets[host]
        assert off.samples >= 2 and off.uncertainty_ns < 50 * MS, off
        assert abs(off.offset_ns - shift) <= off.uncertainty_ns, (host, off)
    reduces = [i for i in m.new_instances if i.op == "all_reduce"]
    assert len(reduces) == 12
    # uncorrected, node-a's ranks would start 500 ms after node-b's
    assert max(i.skew_ns for i in reduces) < 100 * MS, [i.skew_ns for i in reduces]
    waits = [s.t_ready - s.t_start for lane in m.timeline(0).values() for s in lane
             if s.op == "all_reduce"]
    assert len(waits) == 12 * world and max(waits) < 100 * MS


def _poll_for(session: Session, seconds: float) -> None:
    """Let ``session`` take what reaches it for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        session.poll(50)


@pytest.mark.integration
def test_a_rank_without_keys_is_told_and_never_heard(keydir, capfd, monkeypatch):
    from commviz.rank.emitter import Emitter

    for var in (keys.ENV_KEYS, keys.ENV_SERVER_KEY, keys.ENV_CLIENT_KEY):
        monkeypatch.delenv(var, raising=False)
    session = Session(f"tcp://{_own_address()}:*", keys=keydir)
    emitter = Emitter(session.addr, lambda: (3, 4, "gloo", "cpu"))
    try:
        _poll_for(session, 1.5)
    finally:
        emitter.close()
        session.close()
    assert session.model.ranks == {}
    assert "refused this rank" in capfd.readouterr().err


@pytest.mark.integration
def test_a_refused_rank_0_ends_with_why_it_was_not_heard(keydir, capfd, monkeypatch):
    """The viewer answered, and refused: rank 0's line at exit says so, not that no viewer
    ever answered (which sends the user looking for a viewer that is there)."""
    from commviz.rank.emitter import Emitter

    for var in (keys.ENV_KEYS, keys.ENV_SERVER_KEY, keys.ENV_CLIENT_KEY):
        monkeypatch.delenv(var, raising=False)
    session = Session(f"tcp://{_own_address()}:*", keys=keydir)
    emitter = Emitter(session.addr, lambda: (0, 2, "gloo", "cpu"))
    emitter.groups[0] = ("0", [0, 1])
    emitter.sites[0] = ("x.py", 1)
    try:
        t = time.time_ns()
        emitter.push([0, protocol.OP_CODE["all_reduce"], protocol.NO_CODE, 0, 1, -1, 16, 16,
                      0, 0, t, t + 10, 0])
        _poll_for(session, 1.5)
    finally:
        emitter.close()
        session.close()
    err = capfd.readouterr().err
    assert emitter.dropped >= 1
    assert (f"the viewer at {session.addr} refused rank 0: its {emitter.dropped} records "
            "were dropped") in err
    assert "no viewer ever answered" not in err


# ---- the commands, end to end --------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.timeout(150)
def test_watch_with_keys_and_a_job_on_another_node(procs, keydir):
    """`commviz watch --bind ADDR --keys DIR` and `commviz run --no-viewer` on a simulated
    node 0.25 s ahead: the viewer names the node, its ranks and its clock."""
    addr = f"tcp://{_own_address()}:{free_port()}"
    viewer = procs.start("-m", "commviz", "watch", "--headless", "--bind", addr,
                         "--keys", str(keydir))
    try:
        viewer.wait_for(lambda line: line.startswith("commviz watch: listening"), 30)
        job = procs.start("-m", "commviz", "run", "--no-viewer", "--", sys.executable,
                          str(JOBS / "mp_job.py"), "fork", str(free_port()), env={
                              "COMMVIZ_ADDR": addr, keys.ENV_KEYS: str(keydir),
                              nodes.ENV_HOST: "node-z", nodes.ENV_CLOCK_SHIFT: str(250 * MS)})
        assert job.finish(100) == 0, job.stderr
        viewer.wait_for(lambda line: line.startswith("rank 1/2 joined: node-z"), 30)
        viewer.wait_for(lambda line: line.lstrip().startswith(("0.", "1.", "2.")) and
                        "all_reduce" in line, 30, count=2)
        viewer.signal(signal.SIGINT)
        assert viewer.finish(30) == 0
    finally:
        viewer.kill_group()
    [line] = [line for line in viewer.out if line.startswith("node node-z")]
    assert line.startswith("node node-z: ranks 0, 1; clock +")
    offset_ms, unc_ms = (float(x) for x in re.findall(r"[+-]?\d+\.\d+", line)[:2])
    assert abs(offset_ms - 250) <= unc_ms < 50, line


@pytest.mark.integration
def test_the_clock_channel_takes_the_next_port():
    receiver = Receiver("tcp://127.0.0.1:*")
    try:
        assert receiver.clock is not None
        assert receiver.clock.addr == clocksync.clock_addr(receiver.addr)
        port = int(receiver.addr.rsplit(":", 1)[1])
        with pytest.raises(BindError, match=r"port \+ 1, the clock channel"):
            Receiver(f"tcp://127.0.0.1:{port - 1}")  # its clock port is taken by the events
    finally:
        receiver.close()


def test_a_recording_replays_the_clock_correction(tmp_path):
    from commviz.viewer import recording

    theta, t = 2_000 * MS, T0_NS + 10 * MS
    group = {0: ("0", (0, 1))}
    messages = [_hb(0, "here", []), _hb(1, "far", [_sample(theta, T0_NS, 30_000, 30_000)]),
                op_batch(0, [{"id": 0, "op": "all_reduce", "seq": 1, "t_start": t}], group),
                op_batch(1, [{"id": 0, "op": "all_reduce", "seq": 1, "t_start": t + theta}],
                         group)]
    rec = recording.Recorder(tmp_path / "r.jsonl")
    rec.write(messages)
    rec.close({})
    m = Model(local_host="here")
    m.apply(list(recording.read(tmp_path / "r.jsonl")))
    [inst] = list(m.recent)
    assert inst.skew_ns <= 30_000 and m.clock_offsets()["far"].offset_ns is not None


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_run_binds_a_non_loopback_address_with_keys_and_gives_them_to_its_ranks(procs, keydir):
    job = procs.start("-m", "commviz", "run", "--headless", "--bind",
                      f"tcp://{_own_address()}:*", "--keys", str(keydir), "--",
                      sys.executable, str(JOBS / "mp_job.py"), "fork", str(free_port()),
                      env={keys.ENV_KEYS: ""})
    assert job.finish(100) == 0, job.stderr
    assert any(line.endswith("4 op records, 2 collective instances, 0 transfers; 0 malformed "
                             "messages rejected; 0 records dropped by ranks")
               for line in job.out), job.stdout
    assert "refused" not in job.stderr
