"""Nothing lost when a rank dies: real gloo jobs under ``commviz run --headless --record``
whose ranks are SIGKILLed (by themselves, or from outside while inside an op); the node's
harvester sends what their emitters had not, from their shared-memory rings, and leaves no
ring behind. Every test checks that no process is left (the ``procs`` fixture)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from procs import PY

from commviz.launch.launcher import free_port
from commviz.wire import protocol, ring

JOBS = Path(__file__).resolve().parent / "jobs"
TORCHRUN = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"]
K = 137
RECOVERED = protocol.FLAG_RECOVERED


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _all_reduces(lines: list[dict], kind: str) -> dict[int, list[dict]]:
    by_rank: dict[int, list[dict]] = {}
    for d in lines:
        if d.get("kind") == kind and d["op"] == "all_reduce":
            by_rank.setdefault(d["rank"], []).append(d)
    return by_rank


def _account(lines: list[dict]) -> dict:
    """How the run ended, as last told (told live as the harvester saw the first rank end,
    and again where the launcher said more), after checking that every telling is of the
    same rank and that the first came within 2 s of that rank's ``gone`` notice."""
    told = [d for d in lines
            if d.get("kind") == "diag" and d["facts"].get("shape") == "first_end"]
    assert told and len({tuple(d["ranks"]) for d in told}) == 1, told
    (gone,) = [d["t_ns"] for d in lines
               if d.get("kind") == "gone" and [d["rank"]] == told[0]["ranks"]]
    assert 0 <= told[0]["t_ns"] - gone < 2_000_000_000
    return told[-1]


def _rings_of(lines: list[dict]) -> list[Path]:
    """Rings left in /dev/shm by the recorded processes."""
    pids = {d["pid"] for d in lines if d.get("kind") == "rank"}
    return [p for p in ring.ring_files(ring.ring_dir()) if ring.pid_of(p) in pids]


def _run_killed(procs, tmp_path: Path, mode: str) -> list[dict]:
    rec = tmp_path / "run.jsonl"
    proc = procs.start("-m", "commviz", "run", "--headless", "--record", str(rec), "--",
                       *TORCHRUN, str(JOBS / "killed_job.py"), mode, str(K), str(tmp_path))
    rc = proc.finish(120)
    assert rc != 0, proc.stdout  # the job failed, and commviz says so
    lines = _lines(rec)
    assert sorted({d["rank"] for d in lines if d.get("kind") == "rank"}) == [0, 1, 2]
    assert _rings_of(lines) == []
    return lines


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_a_rank_that_sigkills_itself_after_op_k_leaves_exactly_k_records(procs, tmp_path):
    lines = _run_killed(procs, tmp_path, "self")
    done = _all_reduces(lines, "op")
    # rank 1 died right after its 137th: all of them reach the recording, most of its last
    # tick's from its ring (its emitter had not sent them)
    assert sorted(d["seq"] for d in done[1]) == list(range(1, K + 1))
    for r in (0, 2):
        ok = [d["seq"] for d in done[r] if not d["flags"] & protocol.FLAG_FAILED]
        assert sorted(ok) == list(range(1, K + 1)), r
        # #138: failed on its own (gloo saw rank 1's socket close) or, when its launcher
        # stopped it first, recovered from its ring as in flight
        failed = [d["seq"] for d in done[r] if d["flags"] & protocol.FLAG_FAILED]
        running = [d["seq"] for d in _all_reduces(lines, "running").get(r, [])
                   if d["flags"] & RECOVERED]
        assert failed == [K + 1] or running == [K + 1], (r, failed, running)


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_a_rank_that_leaves_by_os_exit_is_told_first_with_its_code(procs, tmp_path):
    lines = _run_killed(procs, tmp_path, "exit")
    done = _all_reduces(lines, "op")
    assert sorted(d["seq"] for d in done[1]) == list(range(1, K + 1))  # no atexit, no loss
    account = _account(lines)
    assert account["ranks"] == [1]
    assert re.match(rf"rank 1 ended first \(exit 17\) [\d.]+ ms after all_reduce #{K} at "
                    r"killed_job\.py:\d+", account["message"]), account["message"]


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_ranks_killed_inside_an_op_have_it_recovered_as_in_flight(procs, tmp_path):
    """The issue's case as the OOM killer makes it: no rank says anything after op 137, yet
    the recording holds exactly 137 all_reduces for every rank and the #138 that ranks 0
    and 2 were inside, flagged recovered."""
    lines = _run_killed(procs, tmp_path, "all")
    done = _all_reduces(lines, "op")
    for r in (0, 1, 2):
        assert sorted(d["seq"] for d in done[r]) == list(range(1, K + 1)), r
        assert not any(d["flags"] & protocol.FLAG_FAILED for d in done[r])
    recovered = {(d["rank"], d["seq"]) for d in lines
                 if d.get("kind") == "running" and d["flags"] & RECOVERED}
    assert recovered == {(0, K + 1), (2, K + 1)}
    # the account begins with rank 0, the first rank 1 killed, inside #138 (as torchrun's
    # root cause says), then rank 2 in the same op
    account = _account(lines)
    assert account["message"].startswith(
        f"rank 0 ended first (killed by SIGKILL) inside all_reduce #{K + 1} at killed_job.py:")
    assert f"; rank 2 was in all_reduce #{K + 1} at killed_job.py:" in account["message"]


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_a_mismatch_that_made_gloo_abort_is_found_from_the_recovered_records(procs, tmp_path):
    rec = tmp_path / "run.jsonl"
    proc = procs.start("-m", "commviz", "run", "--headless", "--record", str(rec), "--",
                       *TORCHRUN[:-1], "4", str(JOBS / "mismatch_job.py"))
    assert proc.finish(120) != 0, proc.stdout
    lines = _lines(rec)
    assert _rings_of(lines) == []
    # gloo aborts at step 6: the ranks that abort send nothing of it; their rings do
    assert any(d.get("kind") == "running" and d["seq"] == 6 and d["flags"] & RECOVERED
               for d in lines)
    (mismatch,) = [d for d in lines if d.get("kind") == "diag" and d["type"] == "mismatch"]
    assert (mismatch["ranks"], mismatch["seq"]) == ([1], 6)
    # (a rank torchrun stopped before it came to #6 is said not to have reached it: CI,
    # loaded, once rank 3)
    assert re.match(
        r"ranks disagree at #6 in group 0-3: rank 1 called all_reduce \(256 B float32\) at "
        r"mismatch_job\.py:11, while ranks (0,2,3 called all_reduce \(64 B float32\) at "
        r"mismatch_job\.py:11|0,\d called all_reduce \(64 B float32\) at mismatch_job\.py:11 "
        r"\(rank \d has not reached it yet\))", mismatch["message"]), mismatch["message"]


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_rank_without_a_ring_says_so_once_and_still_reports(procs, tmp_path):
    rec = tmp_path / "run.jsonl"
    proc = procs.start("-m", "commviz", "run", "--headless", "--record", str(rec), "--",
                       *TORCHRUN[:-1], "2", str(JOBS / "allreduce_job.py"), "2",
                       env={ring.ENV_DIR: str(tmp_path / "no-such-dir")})
    assert proc.finish(90) == 0, proc.stdout
    said = [line for line in proc.err + proc.out if "no shared-memory ring" in line]
    assert len(said) == 2, said  # once per rank process, not per record or per emitter
    ranks = {d["rank"] for d in _lines(rec) if d.get("kind") == "op"}
    assert ranks == {0, 1}
    assert not os.path.exists(tmp_path / "no-such-dir")


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_ring_left_by_an_earlier_crashed_run_is_removed_at_the_next_start(procs, tmp_path):
    stale = ring.RingWriter("0", inc=5, directory=tmp_path, capacity=8, meta=64)
    stale.forget_after_fork()  # unlocked, left behind: as a process killed with no harvester
    proc = procs.start("-m", "commviz", "run", "--headless", "--", PY, "-c", "pass",
                       env={ring.ENV_DIR: str(tmp_path)})
    assert proc.finish(30) == 0, proc.stderr
    assert not stale.path.exists()
    said = [line for line in proc.err if "ring(s) left in" in line]
    assert said == [f"commviz: removed 1 shared-memory ring(s) left in {tmp_path} by processes "
                    "of an earlier run that died"], proc.err
    assert os.listdir(tmp_path) == []


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_a_rank_killed_under_multiprocessing_spawn_loses_nothing_and_is_told_first(procs,
                                                                                   tmp_path):
    """torch.multiprocessing.spawn's ranks are its children, not commviz's: their rings are
    harvested all the same (the harvester's tag is in their environment), though their exit
    codes are their parent's to read, so the account says "ended", not how."""
    rec = tmp_path / "run.jsonl"
    proc = procs.start("-m", "commviz", "run", "--headless", "--record", str(rec), "--",
                       PY, str(JOBS / "spawn_killed_job.py"), str(K), str(free_port()))
    assert proc.finish(120) != 0, proc.stdout
    lines = _lines(rec)
    assert _rings_of(lines) == []
    done = _all_reduces(lines, "op")
    for r in (0, 1, 2):
        ok = [d["seq"] for d in done[r] if not d["flags"] & protocol.FLAG_FAILED]
        assert sorted(ok) == list(range(1, K + 1)), r
    account = _account(lines)
    assert re.match(rf"rank 1 ended first [\d.]+ ms after all_reduce #{K} at "
                    r"spawn_killed_job\.py:\d+", account["message"]), account["message"]
    # the others, stopped by spawn or failed on their own, are no lost ranks of their own
    lost = [d for d in lines if d.get("kind") == "diag" and d["type"] == "lost_rank"]
    assert {d["facts"]["shape"] for d in lost} == {"first_end"}, lost
    assert "terminated with signal SIGKILL" in proc.stdout


@pytest.mark.integration
@pytest.mark.timeout(30)
def test_the_ring_says_the_viewer_knows_the_rank_only_once_a_second_heartbeat_went_out(
        tmp_path, monkeypatch):
    """A heartbeat handed to ZeroMQ has not left the process yet: one killed a moment after
    its first (a short job its launcher stops) took it along, and the harvester, told by the
    ring that the viewer knew the rank, never said who it was (its records then waited for
    an identity that never came). The ring notes the heartbeat at the second one."""
    import time

    from commviz.rank.emitter import Emitter
    from commviz.viewer.transport import Receiver

    monkeypatch.setenv(ring.ENV_DIR, str(tmp_path))
    receiver = Receiver("tcp://127.0.0.1:*")
    em = Emitter(receiver.addr, lambda: (0, 1, "gloo", "cpu"))
    beats: list[protocol.Heartbeat] = []
    noted = []  # (the ring's mark, then how many heartbeats the emitter had sent by then)
    try:
        path = em.ring.path
        deadline = time.monotonic() + 10
        while len(beats) < 2 and time.monotonic() < deadline:
            beats += [m for m in receiver.drain(10) if isinstance(m, protocol.Heartbeat)]
            if len(beats) == 1:  # (the second may be on its way: the emitter's count says)
                noted.append((ring.read(path).heartbeat_sent, em._beats))
        time.sleep(0.1)  # (the ring is noted just after the socket takes the second)
        second = ring.read(path).heartbeat_sent
    finally:
        em.close()
        receiver.close()
    assert len(beats) >= 2 and noted
    # the first in the viewer's hands, and not yet noted in the ring: never before a second
    assert (False, 1) in noted and all(sent >= 2 for mark, sent in noted if mark), noted
    assert second  # noted once the second was handed over


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_with_no_viewer_alive_the_nodes_relay_keeps_the_dead_ranks_last_records(procs, tmp_path):
    """``commviz run --no-viewer`` whose viewer is gone (none listens at COMMVIZ_ADDR: killed
    with the job, or never started): rank 1, SIGKILLed right after its K-th all_reduce, and
    the ranks torchrun then stopped, leave what they had not sent, and how each ended, in the
    node's black box, a recording that ``commviz stats`` reads and tells the end of. No ring
    is left."""
    proc = procs.start("-m", "commviz", "run", "--no-viewer", "--", *TORCHRUN,
                       str(JOBS / "killed_job.py"), "self", str(K), str(tmp_path),
                       env={"COMMVIZ_ADDR": f"tcp://127.0.0.1:{free_port()}",
                            "TMPDIR": str(tmp_path)})
    assert proc.finish(120) != 0
    said = re.search(r"had not sent when their processes ended.*: kept in (\S+) \(",
                     proc.stderr)
    assert said, proc.stderr
    box = Path(said.group(1))
    assert box.parent == tmp_path
    lines = _lines(box)
    assert {d["rank"] for d in lines if d.get("kind") == "rank"} == {0, 1, 2}
    gone = {d["rank"]: d for d in lines if d.get("kind") == "gone"}
    assert sorted(gone) == [0, 1, 2] and gone[1]["order"] == 1  # (torchrun's children: no code)
    ended = _all_reduces(lines, "op")[1]
    assert max(d["seq"] for d in ended) == K and all(d["flags"] & RECOVERED for d in ended)
    assert _rings_of(lines) == []
    # how the job ended, as a diagnosis of the box alone finds it, told by stats
    stats = procs.commviz("stats", str(box))
    assert stats.returncode == 0, stats.stderr
    assert re.search(rf"rank 1 ended first [\d.]+ ms after all_reduce #{K} at killed_job\.py",
                     stats.stdout), stats.stdout


def _readable(path: Path) -> list[dict]:
    """The lines of a recording whose writer was killed: a last line cut short is left out."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_a_viewer_killed_with_the_job_leaves_the_ranks_last_records_in_the_black_box(
        procs, tmp_path):
    """The viewer (``commviz watch --record``, another process) and rank 1 are SIGKILLed
    at once, right after rank 1's K-th all_reduce, under ``commviz run --no-viewer``: what
    the viewer's recording lacks of rank 1's K, the node's black box has, from its ring; with
    the last messages the relay could not forward (the others' goodbyes, the harvester's own
    messages), each record once. (What the relay handed to the dying connection before it
    knew is lost: ZeroMQ says nothing of it.)"""
    port = free_port()
    viewer = procs.start("-m", "commviz", "watch", "--headless", "--bind",
                         f"tcp://127.0.0.1:{port}", "--record", str(tmp_path / "viewer.jsonl"))
    viewer.wait_for(lambda line: "listening on" in line, 30)
    (tmp_path / "viewer.pid").write_text(str(viewer.p.pid))
    proc = procs.start("-m", "commviz", "run", "--no-viewer", "--", *TORCHRUN,
                       str(JOBS / "killed_job.py"), "viewer", str(K), str(tmp_path),
                       env={"COMMVIZ_ADDR": f"tcp://127.0.0.1:{port}", "TMPDIR": str(tmp_path)})
    assert proc.finish(120) != 0
    assert viewer.finish(30) == -9
    said = re.search(r": kept in (\S+) \(", proc.stderr)
    assert said, proc.stderr
    box = _lines(Path(said.group(1)))
    assert "messages the relay could not forward to the viewer" in proc.stderr
    seen = _all_reduces(_readable(tmp_path / "viewer.jsonl"), "op")
    kept = _all_reduces(box, "op")
    assert max(d["seq"] for d in kept[1]) == K
    assert {d["seq"] for d in seen.get(1, [])} | {d["seq"] for d in kept[1]} == \
        set(range(1, K + 1))
    for r, records_ in kept.items():  # each record once
        assert len(records_) == len({d["seq"] for d in records_}), r
    assert len([d for d in box if d.get("kind") == "gone"]) == 3
    assert _rings_of(box) == []
