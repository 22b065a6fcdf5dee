"""How a run ended, as the TUI and the headless viewer both tell it: each rank's end as
torchrun's summary gives it, the line that says why the job failed, the findings that still
held. Pure: facts in, events and lines out; each viewer places them among its own lines."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from commviz.launch.launcher import telling_line, torchrun_exit_codes
from commviz.text.i18n import N_
from commviz.viewer import plain_text as text
from commviz.viewer.diagnose import Finding, by_cause

Event = tuple[str, dict[str, Any]]  # (UI string key, its fields): Session.note_event's


def rank_ends(output: Sequence[str]) -> list[Event]:
    """Each rank's end as torchrun's failure summary in ``output`` (the job's last lines)
    gives it: its exit code, or the signal that ended it; [] without a summary."""
    return [(N_("rank ended"), {"who": f"rank {rank}", "code": code, "rank": rank})
            for rank, code in torchrun_exit_codes(list(output)).items()]


def job_end(output: Sequence[str], exit_code: int | None, described: str) -> list[Event]:
    """How a job that ended by itself ended: ``rank_ends``, then its failure with the line
    of ``output`` that says why (else ``described``, how it ended), or "job ended"."""
    events = rank_ends(output)
    if exit_code:
        line = telling_line(list(output), whose=True) or described
        events.append((N_("rank failed"), {"who": "the job", "code": exit_code, "line": line}))
    else:
        events.append((N_("job ended"), {}))
    return events


def event_lines(events: Iterable[Event], lang: str) -> list[str]:
    """The events' lines in ``lang``, as the viewer panel says them."""
    return [text.event_line(key, fields, lang) for key, fields in events]


def findings_lines(findings: Iterable[Finding], lang: str) -> list[str]:
    """The findings that still held, causes first, as the findings panel has them (a
    deadlock before the failures it ended in): a line each."""
    return [text.finding_line(f, lang) for f in by_cause(findings)]
