"""GPU completion times from CUDA events (commviz/rank/cuda_timing.py), with a fake CUDA.

No GPU here: the fake below keeps a GPU clock of its own (another origin than the host's),
completes events only when a test runs their stream, and fails a test that synchronizes
any stream but commviz's side stream. The real path is checked by bench/gpu_check.py on a
machine with a GPU (docs/nccl.md).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from commviz.rank import cuda_timing, records
from commviz.rank.cuda_timing import RECALIBRATE_S, GpuTimer
from commviz.rank.records import FLAGS, T_END, T_START
from commviz.wire import protocol

GPU_ORIGIN = 7_000_000_000  # the GPU's timer starts elsewhere than the host's clock


class Clock:
    """Host wall clock (ns) advancing by ``step`` at each reading, and a monotonic one."""

    def __init__(self, start: int = 1_000_000_000_000, step: int = 0) -> None:
        self.now, self.step, self.mono = start, step, 0.0

    def __call__(self) -> int:
        t = self.now
        self.now += self.step
        return t

    def monotonic(self) -> float:
        return self.mono


class FakeStream:
    def __init__(self, cuda: FakeCuda, device: int, side: bool = False) -> None:
        self.cuda, self.device, self.side = cuda, device, side
        self.queue: list[FakeEvent] = []

    def run(self, gpu_ns: int) -> None:
        """The GPU reaches this stream's events: they complete at GPU time ``gpu_ns``."""
        for ev in self.queue:
            ev.gpu_ns = gpu_ns
        self.queue = []


class FakeEvent:
    def __init__(self, cuda: FakeCuda, enable_timing: bool = False) -> None:
        assert enable_timing
        self.cuda, self.gpu_ns, self.stream = cuda, None, None

    def record(self, stream: FakeStream) -> None:
        if self.cuda.broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        self.stream = stream
        if stream.side:  # commviz's idle stream: runs at once, at the GPU's "now"
            self.gpu_ns = self.cuda.clock.now + GPU_ORIGIN + self.cuda.drift
        else:
            stream.queue.append(self)

    def query(self) -> bool:
        return self.gpu_ns is not None

    def synchronize(self) -> None:
        assert self.stream is not None and self.stream.side, "synchronized the job's stream"

    def elapsed_time(self, end: FakeEvent) -> float:
        if self.gpu_ns is None or end.gpu_ns is None:
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return (end.gpu_ns - self.gpu_ns) / 1e6


class FakeCuda:
    """What GpuTimer uses of torch.cuda."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.broken, self.device = clock, False, 0
        self.drift = 0  # how far the GPU's clock has run ahead of the host's since the start
        self.streams = {d: FakeStream(self, d) for d in (0, 1)}

    def Event(self, enable_timing: bool = False) -> FakeEvent:  # noqa: N802 (torch's name)
        return FakeEvent(self, enable_timing)

    def Stream(self, device: int) -> FakeStream:  # noqa: N802
        return FakeStream(self, device, side=True)

    def current_device(self) -> int:
        return self.device

    def current_stream(self, device: int) -> FakeStream:
        return self.streams[device]


def _rec(t_start: int, flags: int = protocol.FLAG_CUDA | protocol.FLAG_GPU_TIME) -> list:
    rec = [0] * 13
    rec[T_START], rec[T_END], rec[FLAGS] = t_start, -1, flags
    return rec


@pytest.fixture
def setup():
    clock = Clock()
    cuda = FakeCuda(clock)
    return clock, cuda, GpuTimer(cuda, clock, clock.monotonic)


def test_end_time_is_the_event_placed_by_the_reference(setup):
    clock, cuda, timer = setup
    t_call = clock.now
    rec = _rec(t_call)
    timer.track(rec, protocol.FLAG_GPU_TIME)  # the host call returned: the GPU has not run it
    assert rec[T_END] == -1 and timer.poll() == 0 and rec[T_END] == -1
    clock.step = 2_000  # the reference is recorded between two readings 2 us apart
    clock.now = t_call + 100_000
    assert timer.poll() == 0  # still running: no reference needed yet, nothing waited for
    assert timer.references == {}
    cuda.streams[0].run(gpu_ns=GPU_ORIGIN + t_call + 3_500_000)  # it ran 3.5 ms after the call
    assert timer.poll() == 1
    ref = timer.references[0]
    assert ref.wall_ns == t_call + 100_000 + 1_000 and ref.uncertainty_ns == 1_000
    # the reference ran between the two readings (the fake: at the second, t_call + 102 us),
    # the event 3.398 ms after it: placed 1 us early, within the uncertainty
    assert rec[T_END] == t_call + 3_499_000
    assert abs(rec[T_END] - (t_call + 3_500_000)) <= ref.uncertainty_ns
    assert rec[FLAGS] & protocol.FLAG_GPU_TIME


def test_poll_keeps_what_is_still_running_and_what_comes_meanwhile(setup):
    clock, cuda, timer = setup
    cuda.device = 1
    a, b = _rec(clock.now), _rec(clock.now)
    timer.track(a, protocol.FLAG_GPU_TIME)
    cuda.device = 0
    timer.track(b, protocol.FLAG_GPU_TIME)
    late = _rec(clock.now)
    query = FakeEvent.query
    queued: list[bool] = []

    def query_and_track(ev: FakeEvent) -> bool:  # the rank queues another op during a poll
        if not queued:
            queued.append(True)
            timer.track(late, protocol.FLAG_GPU_TIME)
        return query(ev)

    cuda.streams[0].run(GPU_ORIGIN + clock.now + 5_000)  # device 0 finishes first
    FakeEvent.query = query_and_track
    try:
        assert timer.poll() == 1
    finally:
        FakeEvent.query = query
    assert a[T_END] == -1 and b[T_END] == clock.now + 5_000
    assert len(timer.pending) == 2  # a, and the op queued during the poll
    cuda.streams[1].run(GPU_ORIGIN + clock.now + 9_000)
    assert timer.poll() == 1 and a[T_END] == clock.now + 9_000
    assert set(timer.references) == {0, 1}  # one reference per device
    cuda.streams[0].run(GPU_ORIGIN + clock.now + 9_500)
    assert timer.poll() == 1 and late[T_END] == clock.now + 9_500 and not timer.pending


def test_never_before_its_start(setup):
    clock, cuda, timer = setup
    rec = _rec(clock.now + 50_000)  # the host clock and the estimate disagree a little
    timer.track(rec, protocol.FLAG_GPU_TIME)
    cuda.streams[0].run(GPU_ORIGIN + clock.now + 10_000)
    timer.poll()
    assert rec[T_END] == rec[T_START]


def test_reference_renewed_to_follow_drift(setup):
    clock, cuda, timer = setup

    def op_done_after(ns: int) -> list:
        rec = _rec(clock.now)
        timer.track(rec, protocol.FLAG_GPU_TIME)
        cuda.streams[0].run(GPU_ORIGIN + cuda.drift + clock.now + ns)
        timer.poll()
        return rec

    assert op_done_after(1_000)[T_END] == clock.now + 1_000
    first = timer.references[0]
    cuda.drift = 30_000  # the GPU's clock runs ahead by 30 us
    clock.mono += RECALIBRATE_S / 2
    assert op_done_after(1_000)[T_END] == clock.now + 31_000  # the old reference misplaces it
    clock.mono += RECALIBRATE_S / 2
    assert op_done_after(1_000)[T_END] == clock.now + 1_000  # a new one: right again
    assert timer.references[0] is not first


def test_failing_cuda_falls_back_to_host_time(setup):
    clock, cuda, timer = setup
    cuda.broken = True
    rec = _rec(clock.now - 10)
    timer.track(rec, protocol.FLAG_GPU_TIME)
    assert rec[T_END] == clock.now and not rec[FLAGS] & protocol.FLAG_GPU_TIME
    assert timer.fallbacks == 1 and not timer.pending


def test_hooks_defer_the_end_of_gpu_timed_records(setup, monkeypatch):
    clock, cuda, timer = setup
    monkeypatch.setattr(records, "gpu_timer", timer)
    gpu = _rec(clock.now)
    host = _rec(clock.now, flags=protocol.FLAG_CUDA)  # CUDA tensors through gloo: host time
    records.complete(gpu)
    records.complete(host)
    assert gpu[T_END] == -1 and host[T_END] > 0
    failed = _rec(clock.now)
    records.finish(failed, failed=True)  # a failure ends now, not on the GPU's word
    assert failed[T_END] > 0 and not failed[FLAGS] & protocol.FLAG_GPU_TIME
    cuda.streams[0].run(GPU_ORIGIN + clock.now + 2_000)
    assert timer.poll() == 1 and gpu[T_END] == clock.now + 2_000


@pytest.mark.integration
def test_cpu_ranks_never_load_cuda_timing():
    code = (
        "import os, sys, torch, torch.distributed as dist\n"
        "from commviz.launch.launcher import free_port\n"
        "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(free_port()))\n"
        "import commviz; commviz.instrument('tcp://127.0.0.1:9')\n"
        "dist.init_process_group('gloo', rank=0, world_size=1)\n"
        "t = torch.ones(4); dist.all_reduce(t); dist.all_reduce(t, async_op=True).wait()\n"
        "from commviz.rank import describe\n"
        "assert not any(i.nccl for i in describe.REG.groups.values())\n"
        "print('commviz.rank.cuda_timing' in sys.modules)\n"
        "dist.destroy_process_group()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]
    assert cuda_timing.__name__  # imported here, by this test only
