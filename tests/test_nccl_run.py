"""``commviz run`` reads NCCL's lines from the job's output: headless with NCCL_DEBUG set (a
tee, the job's output passed on unchanged) and with the TUI (the captured output)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from procs import PY

from commviz.headless import PREFIX
from commviz.knowledge.nccl_log import NcclLog
from commviz.launch.job import Job

pytestmark = pytest.mark.integration  # real ranks, sockets or apps

DATA = Path(__file__).resolve().parent / "data" / "nccl"
JOB = str(Path(__file__).resolve().parent / "jobs" / "nccl_replay_job.py")
SUMMARY = ("NCCL 2.21.5+cuda12.4; 2 ranks on 1 node(s); 2 channels; ring 0 > 1; "
           "transports P2P/CUMEM; network Socket")


def test_headless_run_with_nccl_debug_reads_nccl_and_passes_output_on(procs):
    log = DATA / "two_gpus.log"
    proc = procs.start("-m", "commviz", "run", "--headless", "--", PY, JOB, str(log), "3",
                       env={"NCCL_DEBUG": "INFO"})
    rc = proc.finish(60)
    assert rc == 3
    job_lines = [line for line in proc.out if not line.startswith(PREFIX)]
    assert job_lines == log.read_text().splitlines()  # every line, as printed, in order
    assert proc.err == ["replay: done"]
    ours = [line.removeprefix(PREFIX) for line in proc.out if line.startswith(PREFIX)]
    assert ours.count(SUMMARY) == 1
    # and the wires it named, right after
    fabric = ours.index(SUMMARY) + 1
    assert ours[fabric] == "fabric: no connection between nodes · intra-node: P2P/CUMEM"


def test_headless_run_without_nccl_debug_leaves_the_output_alone(procs):
    proc = procs.start("-m", "commviz", "run", "--headless", "--", PY, JOB,
                       str(DATA / "two_gpus.log"), "0", env={"NCCL_DEBUG": ""})
    assert proc.finish(60) == 0
    assert not any(line.startswith(PREFIX + "NCCL") for line in proc.out)
    assert "[default0]:NCCL version 2.21.5+cuda12.4" in proc.out


def test_captured_output_feeds_the_reader():
    nccl = NcclLog()
    job = Job([PY, JOB, str(DATA / "two_nodes_ib.log"), "0"], None, capture=True,
              on_line=nccl.feed)
    try:
        job.wait(30)
    finally:
        job.close()
        job.cleanup()
    assert nccl.init_summary() is not None and nccl.version == "2.23.4+cuda12.6"
    assert job.output is not None
    assert ("stderr", "replay: done") in [(ln.stream, ln.text) for ln in job.output.tail(100)]


def test_tee_keeps_feeding_while_the_job_runs():
    seen: list[str] = []
    job = Job([PY, "-c", "import time\nprint('a', flush=True)\ntime.sleep(30)"], None,
              on_line=seen.append)
    try:
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen == ["a"]  # arrived while the job still runs
    finally:
        job.stop()
