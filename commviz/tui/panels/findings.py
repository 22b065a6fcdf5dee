"""The findings panel: the live diagnosis, its lead finding first, and the last that ended."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.text import Text

from commviz.text import i18n
from commviz.tui.panels.words import finding_name
from commviz.viewer import findings_text
from commviz.viewer.diagnose import Finding, by_cause

FINDINGS_HISTORY = 3  # ended findings listed under the live ones


def findings_lead(held: Sequence[Finding], lang: str) -> Text:
    """Of the findings that hold now (``held``, as ``Diagnosis.findings`` gives them), the
    one that explains the others (``diagnose.by_cause``: a deadlock before the hangs and
    failures it makes, a lost rank before what its peers fail in) and what to check for it,
    whole: the panel grows to show this much at least (the most important text on screen
    while a job is in trouble)."""
    live = by_cause(held)
    out = Text()
    if live:
        _finding(out, live[0], lang)
        out.append(f"{i18n.ui('check', lang)}: ", style="bold")
        out.append(findings_text.advice(live[0].topic, lang)[2] + "\n", style="italic")
    return out


def findings(held: Sequence[Finding], lang: str, history: Iterable[Finding] = ()) -> Text:
    """The live diagnosis: ``findings_lead``, then the other findings that hold now (in the
    same order), what the lead means, and the last few that ended (of the diagnosis'
    ``history``)."""
    live = by_cause(held)
    out = findings_lead(held, lang)
    for f in live[1:]:
        _finding(out, f, lang)
    if live:
        title, means, _ = findings_text.advice(live[0].topic, lang)
        out.append(f"{title}: ", style="bold")
        out.append(means + "\n", style="italic")
    for f in [f for f in history if f.type == "resolved"][-FINDINGS_HISTORY:]:
        if f.unresolved:  # the job ended with it: no tick, it never cleared
            out.append(f"✗ {f.text(lang)}\n", style="red")
        else:
            out.append(f"✓ {f.text(lang)}\n", style="dim")
    out.rstrip()
    return out


def _finding(out: Text, f: Finding, lang: str) -> None:
    out.append(f"⚠ {finding_name(f.type, lang)}  ", style="bold red")
    out.append(f.text(lang) + "\n")
