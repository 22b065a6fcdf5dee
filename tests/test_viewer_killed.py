"""Acceptance: killing the viewer (SIGKILL) in the middle of a demo does not hurt the ranks.

Every rank still finishes its loop with correct results (the demos check their own results
and exit non-zero on a wrong one) and exits 0; a viewer restarted on the same address
receives the later records.
"""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from procs import INSTANCE, SUMMARY, Proc, Procs

from commviz.launch import launcher

pytestmark = pytest.mark.integration  # real ranks, sockets or apps

WORLD = 3
ITERS = 60  # 3 s of steps at 0.05 s: room to kill the viewer and start another one


def _start_watch(procs: Procs, bind: str) -> Proc:
    watch = procs.start("-m", "commviz", "watch", "--headless", "--bind", bind)
    watch.wait_for(lambda line: line.startswith(f"commviz watch: listening on {bind} "), 30)
    return watch


@pytest.mark.timeout(150)
def test_ranks_finish_correctly_when_the_viewer_is_killed(procs, tmp_path):
    bind = f"tcp://127.0.0.1:{launcher.free_port()}"
    master = launcher.free_port()
    logs = [tmp_path / f"rank{r}.log" for r in range(WORLD)]
    first = _start_watch(procs, bind)
    ranks = []
    for r in range(WORLD):
        with open(logs[r], "w") as log:
            ranks.append(procs.start(
                "-m", "commviz.launch.runner", "all_reduce", "--rank", str(r), "--world",
                str(WORLD), "--backend", "gloo", "--master-port", str(master), "--iters",
                str(ITERS), "--interval", "0.05", env={"COMMVIZ_ADDR": bind}, stderr=log))

    # The viewer shows the demo running, then dies without any chance to clean up.
    first.wait_for(lambda line: bool(INSTANCE.match(line)), 90, count=3)
    first.p.send_signal(signal.SIGKILL)
    assert first.p.wait(10) == -signal.SIGKILL
    seen_by_first = max(seq for _, _, seq in first.instances())
    assert all(p.p.poll() is None for p in ranks), "the ranks did not outlive the viewer"

    # A new viewer on the same address picks the running ranks up again.
    second = _start_watch(procs, bind)

    deadline = time.monotonic() + 60
    for r, rank in enumerate(ranks):
        try:
            rank.p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"rank {r} still running 60 s after the viewer was killed")
    codes = [rank.p.returncode for rank in ranks]
    errors = {r: logs[r].read_text() for r in range(WORLD) if codes[r] != 0}
    assert codes == [0] * WORLD, errors
    for log in logs:
        assert "commviz-rank-error" not in log.read_text()

    # Every rank ran its whole loop: the restarted viewer saw the last instance.
    second.wait_for(lambda line: bool(INSTANCE.match(line)
                                      and int(INSTANCE.match(line).group(3)) == ITERS), 10)
    time.sleep(0.3)  # the goodbyes follow the last records
    second.p.send_signal(signal.SIGINT)
    assert second.finish(15) == 0
    later = second.instances()
    assert later, "the restarted viewer received nothing"
    assert all(op == "all_reduce" and who == "0,1,2" for op, who, _ in later)
    seqs = [seq for _, _, seq in later]
    assert min(seqs) > seen_by_first and max(seqs) == ITERS
    assert len(set(seqs)) == len(seqs)
    assert SUMMARY.match(second.out[-1]), second.out[-5:]
    assert all(f"rank {r}/{WORLD} joined" in "\n".join(second.out) for r in range(WORLD))
