"""Live diagnosis from the event stream: stragglers, hangs, failed collectives, lost ranks,
mismatches, slow links.

One module per detector (``stragglers``, ``hangs``, ``lost``, ``mismatch``, ``slow``), each
saying its thresholds and why; ``watch`` holds what they all read, ``diagnosis`` runs them.
A ``Finding`` holds facts (``facts``); ``wording`` makes its line when it is shown, in the
language asked for, from ``commviz/text/<lang>/findings.toml``.
"""

from commviz.viewer.diagnose.diagnosis import Diagnosis
from commviz.viewer.diagnose.finding import TYPES, Finding, by_cause, recorded_facts, recorded_text
from commviz.viewer.diagnose.hangs import HANG_AFTER_S
from commviz.viewer.diagnose.lost import LOST_AFTER_S, LOST_CONFIRM_S
from commviz.viewer.diagnose.mismatch import MISMATCH_HOLD_S, MISMATCH_WAIT_S
from commviz.viewer.diagnose.slow import SLOW_HOLD_S
from commviz.viewer.diagnose.stragglers import WINDOW, Lateness

__all__ = ["HANG_AFTER_S", "LOST_AFTER_S", "LOST_CONFIRM_S", "MISMATCH_HOLD_S", "MISMATCH_WAIT_S",
           "SLOW_HOLD_S", "TYPES", "WINDOW", "Diagnosis", "Finding", "Lateness", "by_cause",
           "recorded_facts", "recorded_text"]
