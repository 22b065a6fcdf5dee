"""The per-node relay on real sockets: real relays (processes, or in this process) between
real ranks or fake senders and a real Receiver on loopback. Each test is bounded in time
and leaves no process behind."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import time

import msgpack
import pytest
import zmq
from ranks import _child, reap

from commviz import cli
from commviz.launch.launcher import free_port
from commviz.rank.emitter import Emitter, encode_batch, encode_groups
from commviz.relay import relay as relay_module
from commviz.relay.relay import Relay
from commviz.viewer.model import Model
from commviz.viewer.transport import Receiver
from commviz.wire import clocksync, nodes, protocol, relayed

pytestmark = pytest.mark.integration  # real sockets and processes

MS = 1_000_000
BANNER = re.compile(r"commviz relay: node (\S+): its ranks report to COMMVIZ_ADDR=(\S+),")


def _ops(rank: int, first: int, n: int = 4) -> bytes:
    t = time.time_ns()
    recs = [[first + i, protocol.OP_CODE["all_reduce"], protocol.NO_CODE, 0, first + i, -1, 16,
             16, 0, 0, t, t + 10, 0] for i in range(n)]
    return encode_batch(rank, recs, {0: ("x.py", 1)}, inc=rank + 1, groups={0: ("0", [0, 1, 2])})


def _drain_for(receiver: Receiver, seconds: float, until=None) -> list[protocol.Message]:
    out: list[protocol.Message] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (until and until(out)):
        out += receiver.drain(20)
    return out


def _start_relay(procs, to: str, host: str, bind: str = "tcp://127.0.0.1:*"):
    proc = procs.start("-m", "commviz", "relay", "--to", to, "--bind", bind,
                       env={nodes.ENV_HOST: host})
    [line] = proc.wait_for(BANNER.match, 30)
    node, addr = BANNER.match(line).groups()
    assert node == host
    return proc, addr


def test_fake_ranks_through_a_relay_process_keep_identity_and_order(procs):
    receiver = Receiver("tcp://127.0.0.1:*")
    ctx = zmq.Context()
    try:
        relay, addr = _start_relay(procs, receiver.addr, "node-f")
        socks = [ctx.socket(zmq.PUSH) for _ in range(3)]
        for s in socks:
            s.connect(addr)
        time.sleep(0.3)
        for step in range(20):
            for rank, s in enumerate(socks):
                s.send(_ops(rank, 4 * step))
            if step == 10:
                socks[0].send(b"not msgpack")  # rejected alone, the others unaffected
            time.sleep(0.005)
        got = _drain_for(receiver, 10, lambda out: len(out) >= 60)
        relay.signal(signal.SIGINT)
        assert relay.finish(10) == 0, relay.stderr
    finally:
        for s in socks:
            s.close(linger=0)
        ctx.term()
        receiver.close()
    batches = [m for m in got if isinstance(m, protocol.OpBatch)]
    assert len(batches) == 60
    for rank in range(3):
        ids = [int(i) for m in batches if m.rank == rank for i in m.cols["id"]]
        assert ids == list(range(80)), rank  # all of them, in the order sent
        assert {m.inc for m in batches if m.rank == rank} == {rank + 1}
    assert receiver.rejected == 1
    assert receiver.relays["node-f"] == (0, 0)
    assert receiver.received < 60  # merged: fewer messages on the viewer's socket than sent


def _allreduces(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    t = torch.ones(64)
    for _ in range(10):
        dist.barrier()
        dist.all_reduce(t)
        time.sleep(0.05)


NODES = {"node-a": 300 * MS, "node-b": -200 * MS}


def _rank(rank: int, world: int, port: int, addr: str, host: str) -> None:
    _child(_allreduces, rank, world, port, addr, (),
           env={nodes.ENV_HOST: host, nodes.ENV_CLOCK_SHIFT: str(NODES[host])})


@pytest.mark.timeout(120)
def test_real_ranks_on_two_nodes_through_their_relays_on_the_viewers_clock(procs):
    """Four gloo ranks, two a node, each node's clock off by a known amount, each node
    behind a relay process: the viewer sees every rank, the nodes' offsets within their
    bounds, and the all_reduces aligned on its own clock."""
    receiver = Receiver("tcp://127.0.0.1:*")
    model = Model()
    model.new_instances = []  # every matched instance, kept
    relays = {host: _start_relay(procs, receiver.addr, host) for host in NODES}
    hosts = ["node-a", "node-a", "node-b", "node-b"]
    ctx = mp.get_context("fork")
    port = free_port()
    ranks = [ctx.Process(target=_rank, args=(r, 4, port, relays[h][1], h), daemon=True)
             for r, h in enumerate(hosts)]
    messages: list[protocol.Message] = []
    try:
        for p in ranks:
            p.start()
        deadline = time.monotonic() + 60
        while any(p.is_alive() for p in ranks) and time.monotonic() < deadline:
            got = receiver.drain(50)
            messages += got
            model.apply(got)
        got = _drain_for(receiver, 5, lambda out: sum(isinstance(m, protocol.Bye)
                                                      for m in messages + out) >= 4)
        messages += got
        model.apply(got)
    finally:
        reap(ranks)
        for proc, _ in relays.values():
            proc.signal(signal.SIGTERM)
        codes = [proc.finish(10) for proc, _ in relays.values()]
        receiver.close()
    assert [p.exitcode for p in ranks] == [0] * 4 and codes == [0, 0]
    assert receiver.rejected == 0 and set(receiver.relays) == set(NODES)
    assert model.nodes() == {"node-a": [0, 1], "node-b": [2, 3]}
    offsets = model.clock_offsets()
    for host, shift in NODES.items():
        off = offsets[host]
        assert off.samples >= 2 and off.uncertainty_ns < 50 * MS, off
        assert abs(off.offset_ns - shift) <= off.uncertainty_ns, (host, off)
    for rank in range(4):  # each rank's records arrive in its order
        ids = [int(i) for m in messages if isinstance(m, protocol.OpBatch) and m.rank == rank
               for i, t_end in zip(m.cols["id"], m.cols["t_end"]) if t_end >= 0]
        assert ids == sorted(ids) and len(ids) >= 20, rank
    reduces = [i for i in model.new_instances if i.op == "all_reduce"]
    assert len(reduces) == 10
    assert max(i.skew_ns for i in reduces) < 100 * MS  # uncorrected: 500 ms


@pytest.mark.parametrize("keep", [False, True], ids=["plain", "keeping the last dropped"])
def test_a_relay_with_no_viewer_drops_and_counts_and_never_blocks(keep, monkeypatch):
    """Asked to (a node's black box), it keeps the last of what it dropped, bounded."""
    monkeypatch.setattr(relay_module, "KEPT_BYTES", 20_000)
    relay = Relay(f"tcp://127.0.0.1:{free_port()}", "tcp://127.0.0.1:*",
                  keep_unforwarded=keep)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 10_000)
    sock.connect(relay.addr)
    sent = 0
    try:
        time.sleep(0.2)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3:  # past the 2 s a relay holds while connecting
            try:
                sock.send(_ops(0, sent, 4), zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                pass
            time.sleep(0.001)
        time.sleep(0.3)
    finally:
        t_close = time.monotonic()
        relay.close()
        close_s = time.monotonic() - t_close
        sock.close(linger=0)
        ctx.term()
    assert close_s < 4
    assert sent > 500  # the relay kept reading: the sender was not held back
    assert relay.forwarded == 0 and relay.lost > 0
    assert relay.dropped == 4 * relay.lost  # records, counted inside each dropped message
    assert "no viewer ever answered" in (relay.end_line() or "")
    kept = relay.unforwarded()
    if not keep:
        assert kept == []
        return
    assert 0 < sum(map(len, kept)) <= 20_000 < sum(map(len, kept)) + len(kept[0])
    ids = [protocol.decode(data).cols["id"].tolist()[0] for data in kept]
    assert ids == sorted(ids) and ids[-1] == sent - 1  # the last dropped, in their order


def test_a_relay_forwards_to_a_relay_and_the_clock_goes_through_both():
    receiver = Receiver("tcp://127.0.0.1:*")
    top = Relay(receiver.addr, "tcp://127.0.0.1:*", environ={nodes.ENV_HOST: "top"})
    node = Relay(top.addr, "tcp://127.0.0.1:*", environ={nodes.ENV_HOST: "node-c"})
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(node.addr)
    clock = clocksync.ClockClient(ctx, clocksync.clock_addr(node.addr), None)
    try:
        time.sleep(0.3)
        for step in range(10):
            sock.send(_ops(5, 4 * step))
        got = _drain_for(receiver, 10, lambda out: len(out) >= 10)
        assert clock.first.wait(5)
        samples = [clocksync.Sample(*s) for s in clock.take()]
    finally:
        clock.close()
        sock.close(linger=0)
        ctx.term()
        node.close()
        top.close()
        receiver.close()
    ids = [int(i) for m in got for i in m.cols["id"]]
    assert ids == list(range(40))
    assert set(receiver.relays) == {"top", "node-c"}
    assert receiver.clock is not None and receiver.clock.answered >= 1
    est = clocksync.estimate(samples)
    assert est is not None and abs(est.offset_ns) <= est.uncertainty_ns < 50 * MS


def test_a_killed_relay_loses_its_last_tick_and_the_rank_drops_and_counts(procs):
    receiver = Receiver("tcp://127.0.0.1:*")
    relay, addr = _start_relay(procs, receiver.addr, "node-k")
    em = Emitter(addr, lambda: (0, 1, "gloo", "cpu"))
    em.groups[0] = ("0", [0])
    em.sites[0] = ("x.py", 1)
    seen = 0
    try:
        def push(n: int, first: int) -> None:
            for i in range(n):
                t = time.time_ns()
                em.push([first + i, protocol.OP_CODE["all_reduce"], protocol.NO_CODE, 0,
                         first + i, -1, 16, 16, 0, 0, t, t + 10, 0])
                time.sleep(0.002)

        push(300, 0)
        got = _drain_for(receiver, 5, lambda out: sum(len(m) for m in out
                                                      if isinstance(m, protocol.OpBatch)) >= 300)
        seen = sum(len(m) for m in got if isinstance(m, protocol.OpBatch))
        os.killpg(relay.p.pid, signal.SIGKILL)
        relay.finish(10)
        push(300, 300)
        time.sleep(2.5)  # the emitter holds for 2 s, then knows the relay is gone
        push(300, 600)
        t0 = time.monotonic()
        em.close()
        close_s = time.monotonic() - t0
    finally:
        em.close()
        receiver.close()
    assert seen == 300  # everything before the kill arrived
    assert em.dropped > 0 and em.sent + em.dropped >= 600
    assert close_s < 3


@pytest.mark.parametrize("args, message", [
    (["--to", "localhost:5555"], "is not an address to forward to"),
    (["--to", "tcp://127.0.0.1:*"], "is not an address to forward to"),
    (["--to", "tcp://127.0.0.1:7000", "--bind", "127.0.0.1"], "is not an address to listen"),
    (["--to", "tcp://127.0.0.1:7000", "--bind", "tcp://127.0.0.1:65535"], "at most 65534"),
    (["--to", "tcp://127.0.0.1:7000", "--bind", "tcp://127.0.0.1:7000"], "to itself"),
    (["--to", "tcp://127.0.0.1:7000", "--bind", "tcp://0.0.0.0:7002"], "needs keys there"),
    (["--to", "tcp://10.0.0.7:7000"], "the relay needs the ranks' keys"),
])
def test_clear_errors(args, message, capsys, monkeypatch):
    for var in ("COMMVIZ_KEYS", "COMMVIZ_SERVER_KEY", "COMMVIZ_CLIENT_KEY"):
        monkeypatch.delenv(var, raising=False)
    assert cli.main(["relay", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("commviz: error: ") and message in err[0], err


def test_a_port_in_use_is_a_clear_error(capsys):
    ctx = zmq.Context()
    taken = ctx.socket(zmq.PULL)
    port = taken.bind_to_random_port("tcp://127.0.0.1", max_port=65000)
    try:
        assert cli.main(["relay", "--to", "tcp://127.0.0.1:7000", "--bind",
                         f"tcp://127.0.0.1:{port}"]) == 2
    finally:
        taken.close(linger=0)
        ctx.term()
    err = capsys.readouterr().err
    assert "is already in use (another relay or viewer?)" in err and "Traceback" not in err


def test_the_viewer_counts_a_bad_envelope_as_one_and_a_bad_inner_message_alone():
    receiver = Receiver("tcp://127.0.0.1:*")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(receiver.addr)
    good = protocol.encode_bye(1, 2, 3, 0)
    deep = good
    for level in range(relayed.MAX_DEPTH + 1):
        deep = relayed.encode(f"n{level}", [deep], 0, 0)
    bad_envelope = msgpack.packb({"v": 1, "k": "fwd", "node": "n", "msgs": [good] * 3,
                                  "dropped": "many", "lost": 0}, use_bin_type=True)
    try:
        for data in (relayed.encode("n", [good, b"junk", good, b"\x81\xa1v\x02"], 7, 9),
                     bad_envelope, deep):
            sock.send(data)
        got = _drain_for(receiver, 3, lambda out: receiver.rejected >= 4)
    finally:
        sock.close(linger=0)
        ctx.term()
        receiver.close()
    assert [type(m) for m in got] == [protocol.Bye, protocol.Bye]
    assert receiver.rejected == 4  # two inner messages, one envelope, one too deep
    assert receiver.relays["n"] == (7, 9)
    assert sum(receiver.reject_reasons.values()) == 4


def test_a_viewer_started_again_behind_a_relay_gets_the_groups_at_once():
    """The relay tells a viewer it connects to anew the groups its ranks announced: a batch
    that names its group by id alone is complete there without waiting for a repeat."""
    addr = f"tcp://127.0.0.1:{free_port()}"
    t = time.time_ns()
    named = lambda first: encode_batch(7, [[first, protocol.OP_CODE["all_reduce"],  # noqa: E731
                                            protocol.NO_CODE, 0, first + 1, -1, 16, 16, 0, 0,
                                            t, t + 10, 0]], {0: ("x.py", 1)}, inc=8)
    receiver = Receiver(addr)
    relay = Relay(addr, "tcp://127.0.0.1:*")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(relay.addr)
    try:
        time.sleep(0.3)
        sock.send(encode_groups(7, {0: ("0", [0, 7])}, [0], inc=8)[0])
        sock.send(named(0))
        batches = lambda out: [m for m in out if isinstance(m, protocol.OpBatch)]  # noqa: E731
        got = batches(_drain_for(receiver, 5, lambda out: batches(out)))
        assert [m.groups for m in got] == [{0: ("0", (0, 7))}]
        receiver.close()
        time.sleep(0.2)
        receiver = Receiver(addr)  # the viewer again, on the same address
        time.sleep(0.5)  # the relay connects to it again
        sock.send(named(1))
        got = batches(_drain_for(receiver, 5, lambda out: batches(out)))
        assert [(m.cols["id"].tolist(), m.groups) for m in got] == [([1], {0: ("0", (0, 7))})]
    finally:
        sock.close(linger=0)
        ctx.term()
        relay.close()
        receiver.close()
