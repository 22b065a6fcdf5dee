"""The fault demos end to end: real gloo ranks, real faults, the viewer headless with --record.

Each test checks that the right finding names the right rank(s), group and sequence number,
soon enough after the condition became detectable (times from the recording: the ranks'
own wall clocks, the same host as the viewer's), that the demo ends by itself, and that no
process is left behind (the ``procs`` fixture).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from fakes import FakeClock

from commviz.viewer import diagnose
from commviz.viewer.playback import Playback
from commviz.wire.protocol import HEARTBEAT_S

pytestmark = pytest.mark.integration  # real ranks, sockets or apps

WORLD = 4
GROUP = [0, 1, 2, 3]
S = 1_000_000_000


def _run(procs, tmp_path: Path, demo: str, iters: int,
         *extra: str) -> tuple[int, str, list[dict]]:
    record = tmp_path / f"{demo}.jsonl"
    proc = procs.start("-m", "commviz", "demo", demo, "--ranks", str(WORLD), "--headless",
                       "--iters", str(iters), "--record", str(record), *extra)
    rc = proc.finish(100)
    kept = re.search(r"^rank logs kept in (\S+)$", proc.stdout, re.M)
    if kept and Path(kept.group(1)).name.startswith("commviz-"):
        shutil.rmtree(kept.group(1), ignore_errors=True)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    assert lines[-1]["kind"] == "summary", proc.stdout
    return rc, proc.stdout, lines


def _played_as_live(tmp_path: Path, demo: str, lines: list[dict]) -> None:
    """``commviz play``, on the demo's recording played to its end in the rounds of its
    collector, finds what the live diagnosis found: every finding's (type, ranks). If not,
    it says what each side said, and when each rank was last heard and how it ended."""
    real = FakeClock()
    playback = Playback(tmp_path / f"{demo}.jsonl", real=real)
    while not playback.clock.stopped("end"):
        real.advance(0.02)
        playback.advance()
    played = {(f.type, f.ranks) for f in playback.diagnosis.history if f.type != "resolved"}
    live = _live(lines)
    if played != live:
        at = lambda t: f"{(t - playback.origin_ns) / S:.3f} s"
        told = [f"played {f.type} at {at(f.t_ns)}: {f.message}"
                for f in playback.diagnosis.history] + [
            f"live {x['type']} at {at(x['t_ns'])}: {x['message']}" for x in _diags(lines)]
        ends = [f"{x['kind']} {x.get('rank')} at {at(x['t_ns'])} (received "
                f"{x.get('rx_ms', '?')} ms later): {x.get('code', '')}"
                for x in lines if x.get("kind") in ("bye", "gone")]
        last = {x["rank"]: at(x["t_ns"]) for x in lines if x.get("kind") == "tel"}
        pytest.fail("\n".join([f"played {sorted(played)} != live {sorted(live)}", *told,
                               *ends, f"last heartbeats: {last}"]))


def _f_shows_each_finding(tmp_path: Path, demo: str, lines: list[dict]) -> None:
    """`f` on the demo's recording: wherever it lands after a finding the live diagnosis
    made, this playback has made it too (a hang or a lost rank is judged on how long the
    ranks waited or went quiet: taken in at once, it was not there)."""
    playback = Playback(tmp_path / f"{demo}.jsonl", real=FakeClock())
    while playback.to_next_finding():
        now = playback.clock.wall_ns()
        made = {x["type"] for x in _diags(lines) if x["t_ns"] <= now} - {"resolved"}
        found = {f.type for f in playback.diagnosis.history}
        assert made <= found, (demo, (now - playback.start_ns) / S, made, found)


def _live(lines: list[dict]) -> set[tuple[str, tuple[int, ...]]]:
    """What the live diagnosis found: every recorded finding's (type, ranks)."""
    return {(x["type"], tuple(x["ranks"])) for x in _diags(lines) if x["type"] != "resolved"}


def _diags(lines: list[dict], kind: str | None = None) -> list[dict]:
    return [x for x in lines if x.get("kind") == "diag" and kind in (None, x["type"])]


def _line(demo: str, op: str) -> int:
    """The line of demo ``demo`` that calls ``dist.<op>``."""
    source = (Path(__file__).parents[1] / "demos" / f"{demo}.py").read_text().splitlines()
    (line,) = [i for i, text in enumerate(source, 1) if f"dist.{op}(" in text]
    return line


def _stalled_ns(lines: list[dict], t0: int, t1: int) -> int:
    """How long the viewer heard nothing between ``t0`` and ``t1``, beyond two heartbeat
    periods: the longest gap between the times it took messages off its socket (the ``rx``
    lines; the ranks' emitters beat every HEARTBEAT_S, hung or not) less 2 x HEARTBEAT_S. On
    a machine that stopped the viewer or the ranks for seconds that time is the machine's,
    not the diagnosis'; on one that ran them, it is 0."""
    taken = [x["t_ns"] for x in lines if x.get("kind") == "rx" and t0 < x["t_ns"] < t1]
    gaps = [b - a for a, b in zip([t0, *taken], [*taken, t1])]
    return max(0, max(gaps) - int(2 * HEARTBEAT_S * S))


def _ops(lines: list[dict], seq: int) -> list[dict]:
    return [x for x in lines if x.get("kind") == "op" and x["seq"] == seq
            and x["op"] != "recv"]


def test_straggler_named_within_five_instances(procs, tmp_path):
    rc, out, lines = _run(procs, tmp_path, "straggler", 7)
    assert rc == 0, out
    (f,) = _diags(lines)  # nothing else: no hang, no lost rank
    assert (f["type"], f["ranks"], f["group"]) == ("straggler", [WORLD - 1], GROUP)
    assert f["seq"] <= 5  # 3 late episodes over a second: 4 of 0.3 s, 5 with a slow start
    assert re.search(r"on average (29\d|3\d\d) ms after the others, who waited "
                     r"[\d.]+ s each for it in all \([\d.]+ s of rank time\)", f["message"]), f
    detectable = max(op["t_end_ns"] for op in _ops(lines, f["seq"]))
    assert 0 <= f["t_ns"] - detectable < 2 * S
    assert f"!! straggler: rank {WORLD - 1} arrived last" in out
    _played_as_live(tmp_path, "straggler", lines)  # commviz play finds the same
    _f_shows_each_finding(tmp_path, "straggler", lines)


def test_hang_names_the_collective_and_the_missing_rank(procs, tmp_path):
    rc, out, lines = _run(procs, tmp_path, "hang", 5)
    assert rc == 1, out  # the ranks fail at the process group's timeout, as a real job does
    hangs = [f for f in _diags(lines, "hang") if f["group"] == GROUP]
    assert [(f["ranks"], f["seq"]) for f in hangs] == [([WORLD - 1], 3)], lines
    f = hangs[0]
    assert f"ranks 0,1,2 inside, rank {WORLD - 1} missing ({WORLD - 1}: in recv from 0 #1" \
        in f["message"]
    assert f["message"].startswith(f"all_reduce #3 at hang.py:{_line('hang', 'all_reduce')} ")
    inside = _ops(lines, 3)
    assert sorted(op["rank"] for op in inside) == [0, 1, 2]
    assert all(op["flags"] & 8 for op in inside)  # they failed at the timeout
    detectable = min(op["t_start_ns"] for op in inside) + round(diagnose.HANG_AFTER_S * S)
    assert 0 <= f["t_ns"] - detectable < 2 * S
    assert f["t_ns"] < min(op["t_end_ns"] for op in inside)  # named while the job still hung
    p2p = [f for f in _diags(lines, "hang") if f["group"] == [0, WORLD - 1]]
    assert [(f["ranks"], f["seq"]) for f in p2p] == [([0], 1)]
    assert [f["ranks"] for f in _diags(lines, "hang") if f["group"] is None] == [[0, 3, 1, 2]]
    assert "deadlock: rank 0 (all_reduce #3) waits on 3 (recv from 0 #1), which waits on 0; " \
        "ranks 1,2 (all_reduce #3) wait on 3 too" in out
    _played_as_live(tmp_path, "hang", lines)  # commviz play finds the same
    _f_shows_each_finding(tmp_path, "hang", lines)
    # the timeout ends them all: each failure says so, and names the deadlock as the cause
    failed = _diags(lines, "failed")
    assert sorted(f["group"] or [] for f in failed) == [[], GROUP, [0, 3]], failed
    # (6 s, PG_TIMEOUT_S, as the ranks' own clocks measured it: a loaded machine adds a little)
    assert all(re.search(r"until a timeout ended it after 6\.\d s", f["message"])
               for f in failed), failed
    assert all("cause: the deadlock of ranks 0,3" in f["message"]
               for f in failed if f["group"]), failed
    assert "exited" not in "".join(f["message"] for f in failed)
    assert not _diags(lines, "resolved") and not _diags(lines, "lost_rank")


def test_crash_names_the_lost_rank(procs, tmp_path):
    # headless, the demo's iterations are HEADLESS_INTERVAL_S (0.5 s) apart, so the victim dies
    # (at iteration 4) in the middle of the run, as the demo means it, rather than before its first
    # heartbeat, which waits up to 1 s for a clock round trip (0.2 s apart, under load, it did)
    rc, out, lines = _run(procs, tmp_path, "crash", 8)
    victim = WORLD // 2
    assert rc == 1, out
    assert re.search(rf"^rank {victim} failed \(exit -9\): killed by SIGKILL, no error written$",
                     out, re.M), out
    # the victim is told to have ended first, killed, after its last all_reduce (#3), as soon
    # as the launcher's harvester saw it die (no second of silence waited for), and nothing
    # else calls it, or another rank, lost
    lost = _diags(lines, "lost_rank")
    assert {f["facts"]["shape"] for f in lost} == {"first_end"}, lost
    assert {tuple(f["ranks"]) for f in lost} == {(victim,)}
    first = lost[-1]  # (told again when the launcher said how it ended)
    assert first["message"].startswith(
        f"rank {victim} ended first (killed by SIGKILL) "), first["message"]
    assert f"after all_reduce #3 at crash.py:{_line('crash', 'all_reduce')}" in first["message"]
    (gone,) = [x["t_ns"] for x in lines if x.get("kind") == "gone" and x["rank"] == victim]
    assert 0 <= lost[0]["t_ns"] - gone < 2 * S
    assert f"!! lost_rank: rank {victim}" in out
    # where: the all_reduce the others failed in without it, after its last record
    (failed,) = _diags(lines, "failed")
    assert (failed["ranks"], failed["seq"]) == ([victim], 4), failed
    # failed at once, or found hung first (gloo took longer to see the dead peer than the
    # diagnosis to take it as never coming, ENDED_GRACE_S after its end): the others, or
    # those already inside (a loaded machine: one may come in after the others failed)
    at = f"all_reduce #4 at crash.py:{_line('crash', 'all_reduce')} in group 0-3 "
    inside = failed["facts"]["failed"]
    assert inside and set(inside) <= {0, 1, 3}, failed
    ranks = ",".join(map(str, inside))
    assert failed["message"].startswith(f"rank{'s' * (len(inside) > 1)} {ranks} failed in {at}") \
        or (failed["message"].startswith(f"{at}hung until a timeout ended it after ")
            and f" {ranks} failed in it waiting for rank 2 (" in failed["message"]), failed
    # (its end told by the harvester by then, "ended (killed by SIGKILL)", or else found lost
    # or still confirming: "silent for 1.1 s, no goodbye: it may have...")
    assert re.search(rf"\({victim}: (ended|lost|silent).*; its last record: all_reduce #3\)$",
                     failed["message"]), failed
    # the line of kept logs is the last of the end lines, after the findings
    assert out.index("!! failed: ") < out.index("rank logs kept in ")
    assert out.index("!! lost_rank: ") < out.index("rank logs kept in ")
    # the steps before the crash are whole: every rank's records reached the viewer
    assert re.search(r"^all_reduce\s+4\s+\d+\s+3\s", out, re.M), out
    _played_as_live(tmp_path, "crash", lines)  # commviz play finds the same
    _f_shows_each_finding(tmp_path, "crash", lines)
    # and tells how each rank's process ended, as the screen did
    events = [(x["key"], x["fields"]["who"], x["fields"].get("code"))
              for x in lines if x.get("kind") == "event"]
    assert ("rank failed", f"rank {victim}", -9) in events, events


def test_mismatch_named_with_both_sides_before_the_job_fails(procs, tmp_path):
    rc, out, lines = _run(procs, tmp_path, "mismatch", 5)
    assert rc == 1, out
    (f,) = _diags(lines, "mismatch")
    assert (f["ranks"], f["group"], f["seq"]) == ([WORLD - 1], GROUP, 3)
    # named once the others are in, or 0.5 s after the first (a loaded machine) saying who
    # had not come in
    # each side at its line of the demo
    odd, common = _line("mismatch", "broadcast"), _line("mismatch", "all_reduce")
    sides = re.search(rf"rank {WORLD - 1} called broadcast \(4096 B float32\) at mismatch.py:"
                      rf"{odd}, while ranks ([\d,]+) called all_reduce \(4096 B float32\) at "
                      rf"mismatch.py:{common}(?: \((.+)\))?$", f["message"])
    assert sides, f["message"]
    came = [int(r) for r in sides.group(1).split(",")]
    late = [r for r in range(WORLD - 1) if r not in came]
    said = (None if not late else f"rank {late[0]} has" if len(late) == 1
            else "ranks " + ",".join(map(str, late)) + " have")
    assert came and sides.group(2) == (said and f"{said} not reached it yet")
    entered = _ops(lines, 3)
    assert sorted(op["rank"] for op in entered) == GROUP
    decidable = max(op["t_start_ns"] for op in entered)
    assert 0 <= f["t_ns"] - decidable < 2 * S + _stalled_ns(lines, decidable, f["t_ns"])
    assert f["t_ns"] < min(op["t_end_ns"] for op in entered)  # before the timeout failed them
    assert not _diags(lines, "hang")
    _played_as_live(tmp_path, "mismatch", lines)  # commviz play finds the same
    _f_shows_each_finding(tmp_path, "mismatch", lines)


@pytest.mark.parametrize("demo", ["straggler", "hang", "crash", "mismatch"])
def test_fault_demos_are_listed(procs, demo):
    listed = procs.commviz("demo", "--list").stdout
    assert re.search(rf"^{demo}\s+\S", listed, re.M), listed
