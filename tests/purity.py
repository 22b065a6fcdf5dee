"""Unit tests stay pure: a test not marked ``integration`` that opens a socket, starts a process
or runs a Textual app fails and says what it did, so that ``pytest -m "not integration"`` is a
fast run of the model, the diagnosis, the layout and the texts alone."""

from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
import threading

import pytest


class ImpureUnitTest(AssertionError):
    pass


def _refuse(what: str, original):
    def guarded(*args, **kwargs):
        # other threads (an integration test's leftovers winding down) are not this test's doing
        if threading.current_thread() is threading.main_thread():
            raise ImpureUnitTest(f"this unit test {what}: mark it integration "
                                 "(@pytest.mark.integration) or make it pure")
        return original(*args, **kwargs)
    return guarded


@pytest.fixture(autouse=True)
def unit_tests_stay_pure(request, monkeypatch):
    if request.node.get_closest_marker("integration"):
        yield
        return
    monkeypatch.setattr(socket.socket, "__init__",
                        _refuse("opened a socket", socket.socket.__init__))
    monkeypatch.setattr(subprocess.Popen, "__init__",
                        _refuse("started a process", subprocess.Popen.__init__))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start",
                        _refuse("started a process", multiprocessing.process.BaseProcess.start))
    monkeypatch.setattr(os, "fork", _refuse("forked", os.fork))
    import zmq  # noqa: PLC0415  (its sockets are not Python's)
    monkeypatch.setattr(zmq.Context, "socket",
                        _refuse("opened a ZeroMQ socket", zmq.Context.socket))
    from textual.app import App  # noqa: PLC0415
    for name in ("run", "run_async", "run_test"):
        monkeypatch.setattr(App, name, _refuse("ran a Textual app", getattr(App, name)))
    yield
