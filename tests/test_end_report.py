"""How a run ended (commviz.viewer.end_report), as the TUI and the headless viewer tell it."""

from __future__ import annotations

from pathlib import Path

from commviz.viewer import end_report

CRASH = (Path(__file__).parent / "data" / "torchrun_crash.log").read_text().splitlines()


def test_a_failed_jobs_end_gives_each_ranks_end_then_why_it_failed() -> None:
    events = end_report.job_end(CRASH, 1, "ended, exit 1")
    assert events == [
        ("rank ended", {"who": "rank 0", "code": -15, "rank": 0}),
        ("rank ended", {"who": "rank 1", "code": 1, "rank": 1}),
        ("rank failed", {"who": "the job", "code": 1,
                         "line": "rank 1: RuntimeError: boom on rank 1 at step 3"})]
    assert end_report.event_lines(events, "en") == [
        "rank 0: stopped (SIGTERM), says torchrun's summary",
        "rank 1: ended, exit 1, says torchrun's summary",
        "the job failed (exit 1): rank 1: RuntimeError: boom on rank 1 at step 3"]
    assert end_report.event_lines(events[:1], "pt") == [
        "rank 0: parado (SIGTERM), diz o resumo do torchrun"]


def test_without_its_output_a_failure_says_how_the_job_ended() -> None:
    assert end_report.job_end([], 3, "ended, exit 3") == [
        ("rank failed", {"who": "the job", "code": 3, "line": "ended, exit 3"})]


def test_a_job_that_succeeded_just_ended() -> None:
    assert end_report.job_end(["step 10 loss 0.1"], 0, "ended, exit 0") == [("job ended", {})]
    assert end_report.rank_ends(CRASH[:40]) == []  # no summary: nothing said of the ranks
