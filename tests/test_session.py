"""The collector gives way to the TUI's frames: real Session, real ZeroMQ socket on loopback."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from commviz.viewer import session as session_mod
from commviz.viewer.session import Session
from commviz.wire import protocol

pytestmark = pytest.mark.integration  # real ranks, sockets or apps


def _heartbeat(rank: int) -> bytes:
    return protocol.pack({"v": protocol.VERSION, "k": "hb", "rank": rank, "world": 2,
                          "host": "node0", "pid": 100 + rank, "backend": "gloo",
                          "device": "cpu", "t_ns": time.time_ns(), "dropped": 0, "tel": {}})


def _poll_in_thread(session: Session) -> threading.Thread:
    thread = threading.Thread(target=lambda: session.poll(200), daemon=True)
    thread.start()
    return thread


def test_collector_holds_back_while_a_frame_is_drawn(monkeypatch):
    monkeypatch.setattr(session_mod, "FRAME_YIELD_S", 30.0)  # no give-up within the test
    session = Session("tcp://127.0.0.1:*")
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    try:
        push.connect(session.addr)
        push.send(_heartbeat(0))
        session.frame_begins()
        poller = _poll_in_thread(session)
        time.sleep(0.3)
        assert poller.is_alive() and session.model.ranks == {}  # nothing taken in meanwhile
        session.frame_ends()
        poller.join(10)
        assert not poller.is_alive()
        deadline = time.monotonic() + 5
        while 0 not in session.model.ranks and time.monotonic() < deadline:
            session.poll(50)  # the message, had the first poll drained before it arrived
        assert 0 in session.model.ranks
    finally:
        push.close(linger=0)
        ctx.term()
        session.close()


def test_a_frame_that_never_ends_holds_the_collector_back_briefly():
    session = Session("tcp://127.0.0.1:*")
    try:
        session.frame_begins()  # and no frame_ends: the TUI stalled or crashed mid-frame
        started = time.monotonic()
        poller = _poll_in_thread(session)
        poller.join(10)
        assert not poller.is_alive()
        assert time.monotonic() - started >= session_mod.FRAME_YIELD_S
    finally:
        session.close()


def test_an_event_of_how_a_rank_ended_is_recorded_and_told_to_the_model(tmp_path):
    """Headless, torchrun's summary was recorded but not told to the model: the end's
    diagnosis named a rank torchrun had stopped a lost rank (user trial)."""
    from commviz.viewer import recording

    session = Session("tcp://127.0.0.1:*", str(tmp_path / "e.jsonl"))
    try:
        session.note_event("rank ended", {"who": "rank 1", "code": -15, "rank": 1})
        assert session.model.exit_codes == {1: -15}
    finally:
        session.close(ended=[1])
    extra: dict = {"event": []}
    findings: list = []
    list(recording.read(tmp_path / "e.jsonl", findings, lines=extra))
    assert [e["fields"]["code"] for e in extra["event"]] == [-15]
    assert findings == []  # stopped by its launcher: not lost
