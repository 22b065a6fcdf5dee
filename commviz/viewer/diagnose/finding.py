"""A finding: what the diagnosis found, as facts; its words are made when it is shown."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from commviz.viewer.diagnose import facts as fx
from commviz.viewer.diagnose import wording

TYPES = ("straggler", "hang", "failed", "lost_rank", "mismatch", "slow", "resolved")
# the version of a recording's ``diag`` line: 1 (no ``version``) held the line's words,
# ``message`` and ``message_pt``; 2 holds its ``facts``, and ``message`` for a person
# reading the file
DIAG_VERSION = 2


@dataclass(frozen=True)
class Finding:
    """One diagnosis, as the recording, the headless printer and the findings panel show it."""

    type: str                        # one of TYPES
    ranks: tuple[int, ...]           # the cause: late, missing, lost or differing rank(s)
    group: tuple[int, ...] | None    # global ranks of the group; (src, dst) for p2p
    seq: int | None                  # the instance's sequence number, if one
    facts: fx.Facts                  # what its line says (``text``)
    key: tuple                       # identity of the condition across updates
    since: float                     # model clock (s) when first found
    t_ns: int                        # wall clock (ns) when reported
    links: tuple[tuple[int, int], ...] = ()  # rank pairs to highlight: waits, slow links
    about: str | None = None         # resolved: the type of the finding that ended
    duration_s: float | None = None  # resolved: how long the condition held
    unresolved: bool = False         # resolved: it did not clear, its job ended with it
    op: str | None = None            # hang, failed: the op its ranks are missing from
    hung: bool = False               # failed: found hung (or deadlocked) first, ended by a timeout

    @property
    def topic(self) -> str:
        """Its entry in ``findings_text.advice``: its type, or ``timeout`` for a failed op
        that hung first (the failure is the timeout ending the hang, the hang's advice
        holds)."""
        return "timeout" if self.hung else self.type

    def text(self, lang: str = "en") -> str:
        """Its line in ``lang``."""
        return wording.say(self.facts, lang)

    @property
    def message(self) -> str:
        """Its line in English."""
        return self.text("en")

    def record(self) -> dict[str, Any]:
        """The recording line (``kind: "diag"``)."""
        rec = {"kind": "diag", "version": DIAG_VERSION, "type": self.type,
               "ranks": list(self.ranks), "group": None if self.group is None else list(self.group),
               "seq": self.seq, "facts": fx.to_json(self.facts), "message": self.message,
               "t_ns": self.t_ns}
        if self.type == "resolved":
            rec.update(about=self.about, duration_s=self.duration_s)
        return rec


def recorded_text(rec: dict[str, Any], lang: str = "en") -> str:
    """A recorded finding's line (``Finding.record``, without its kind) in ``lang``."""
    return wording.say(recorded_facts(rec), lang)


def recorded_facts(rec: dict[str, Any]) -> fx.Facts:
    """What a recorded finding says: its facts, or the words of a version 1 line."""
    if rec.get("version") == DIAG_VERSION:
        return fx.from_json(rec["facts"])
    pt = rec.get("message_pt")
    return fx.Words(str(rec.get("message", "")), pt if isinstance(pt, str) else None)


# what explains what: a deadlock makes the hangs in it (and their failures at the timeout), a
# lost rank the ops its peers wait or fail in, a mismatch the hang that follows; hangs and
# failures cost the job more than a slow link or a straggler
_CAUSES = ("deadlock", "lost_rank", "mismatch", "hang", "failed", "slow", "straggler")


def by_cause(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in the order a reader should take them: causes before what they cause (see
    ``_CAUSES``), and among findings of one kind the newest first."""
    def kind(f: Finding) -> int:
        if type(f.facts) is fx.FirstEnd:  # how the job ended: the account begins with it
            return -1
        return _CAUSES.index("deadlock" if f.key[0] == "deadlock" else f.type)
    return sorted(findings, key=lambda f: (kind(f), -f.since))


def resolved(old: Finding, now: float, wall: int, job: int | None = None) -> Finding:
    """The end of a finding: resolved, or, with ``job``, ended because that job ended."""
    took = now - old.since
    return Finding("resolved", old.ranks, old.group, old.seq, fx.Resolved(took, job, old.facts),
                   ("resolved",) + old.key, now, wall, old.links, old.type, round(took, 3),
                   unresolved=job is not None)
