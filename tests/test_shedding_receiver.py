"""A receiver that takes in less per round than is waiting sheds telemetry and counts it, and
still takes in every op record, over a real socket."""

import time

import pytest
import zmq

from commviz.rank.emitter import encode_batch
from commviz.viewer.transport import Receiver
from commviz.wire import protocol

pytestmark = pytest.mark.integration  # real sockets

BATCHES, BEATS = 200, 600


def _heartbeat(t):
    return protocol.encode_heartbeat(0, world=1, host="h", pid=1, backend="gloo", device="cpu",
                                     t_ns=t, dropped=0, tel={"cpu_pct": 1.0}, inc=5, job="j")


def _batch(i):
    rec = [i, protocol.OP_CODE["all_reduce"], protocol.NO_CODE, 0, i + 1, -1, 8, 8, 0, 0,
           1000 + i, 2000 + i, 0]
    return encode_batch(0, [rec], [("x.py", 1)], inc=5, groups={0: ("0", [0])})


def test_a_receiver_behind_sheds_heartbeats_but_no_record():
    receiver = Receiver("tcp://127.0.0.1:*")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    try:
        sock.connect(receiver.addr)
        for i in range(max(BATCHES, BEATS)):
            if i < BEATS:
                sock.send(_heartbeat(i + 1))
            if i < BATCHES:
                sock.send(_batch(i))
        ids, beats = [], 0
        deadline = time.monotonic() + 20
        while len(ids) < BATCHES and time.monotonic() < deadline:
            for msg in receiver.drain(100, max_messages=50):
                if isinstance(msg, protocol.OpBatch):
                    ids += msg.cols["id"].tolist()
                elif isinstance(msg, protocol.Heartbeat):
                    beats += 1
        assert ids == list(range(BATCHES))
        assert receiver.behind_rounds > 0 and receiver.shed["telemetry"] > 0
        assert beats + receiver.shed["telemetry"] <= BEATS
        assert receiver.rejected == 0
    finally:
        sock.close(linger=0)
        ctx.term()
        receiver.close()
