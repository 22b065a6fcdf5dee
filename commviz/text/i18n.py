"""The languages and the screen's short strings, read from each language's gettext catalogue.

A language is a folder of ``commviz/text/`` holding a ``ui.po``: the set of languages comes
from the data alone. Its compiled ``ui.mo`` is read with the standard library's
``gettext``, so the runtime needs no Babel; Babel only extracts and compiles
(``python -m commviz.text.catalogue``). Message ids are short keys ("completed operations"),
not English sentences, so that English can be reworded without touching the code. English is
the fallback of every other language: a key a translation lacks reads in English, never as its
key.
"""

from __future__ import annotations

import functools
import gettext
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from commviz.text import HERE


def N_(key: str) -> str:
    """A message key kept in a table and looked up later: marked so that extraction sees it."""
    return key


def _languages() -> tuple[str, ...]:
    found = sorted(p.parent.name for p in HERE.glob("*/ui.po"))
    return ("en", *(lang for lang in found if lang != "en"))


LANGS: tuple[str, ...] = _languages()
"""The languages commviz speaks: English, then the others by their codes (the order of `l`)."""


class _Missing(gettext.NullTranslations):
    """The end of every fallback chain: a key no catalogue holds is a bug, said as one."""

    def gettext(self, message: str) -> str:
        raise KeyError(f"no UI string {message!r}")

    def ngettext(self, msgid1: str, msgid2: str, n: int) -> str:
        raise KeyError(f"no plural UI string {msgid1!r}")


def check_lang(lang: str) -> None:
    """ValueError unless commviz speaks ``lang``."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; expected one of {', '.join(LANGS)}")


@functools.cache
def _catalogue(lang: str) -> gettext.NullTranslations:
    check_lang(lang)
    with (HERE / lang / "ui.mo").open("rb") as f:
        found = gettext.GNUTranslations(f)
    found.add_fallback(_catalogue("en") if lang != "en" else _Missing())
    return found


def ui(key: str, lang: str = "en") -> str:
    """The UI string ``key`` in ``lang``; KeyError for an unknown key."""
    return _catalogue(lang).gettext(key)


def ui_n(key: str, n: int, lang: str = "en", **fields: Any) -> str:
    """The UI string ``key`` for a count ``n`` in the plural form ``lang`` gives ``n``, its
    fields filled (``{n}`` and ``fields``)."""
    return _catalogue(lang).ngettext(key, key, n).format(n=n, **fields)


def default_lang(environ: Mapping[str, str] | None = None) -> str:
    """The language of the first set of LC_ALL, LC_MESSAGES, LANG ("pt_BR.UTF-8": pt) where
    commviz speaks it, else English."""
    env = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name)
        if value:  # POSIX: an empty variable counts as unset
            code = re.match(r"[A-Za-z]*", value).group(0).lower()
            return code if code in LANGS else "en"
    return "en"


def next_lang(lang: str) -> str:
    """The language after ``lang``, round to English again: what the ``l`` key switches to."""
    return LANGS[(LANGS.index(lang) + 1) % len(LANGS)]


def language_cycle() -> str:
    """The languages ``l`` goes through, each named in itself, in LANGS' order: "English ↔
    Português" for two, "English → Español → Português → English" for more."""
    names = [ui("language name", lang) for lang in LANGS]
    return " ↔ ".join(names) if len(names) <= 2 else " → ".join([*names, names[0]])


def number(text: str, lang: str = "en") -> str:
    """A number the screen wrote, as ``lang`` writes it: a decimal comma in Portuguese
    (0,53 s). Only for text that holds numbers and units, never an address."""
    separator = ui("decimal separator", lang)
    return text if separator == "." else text.replace(".", separator)


# What the launcher writes in English of a rank that wrote no error (launch/launcher.py)
_SAID_IN_ENGLISH = (N_("killed no error"), N_("no error written"), N_("root cause killed"),
                    N_("root cause exited"))


def in_language(line: str, lang: str) -> str:
    """A line commviz wrote in English from one of its UI strings ("killed by SIGKILL, no
    error written"), in ``lang``; any other line (a program's own error) as it is."""
    if lang == "en":
        return line
    for key in _SAID_IN_ENGLISH:
        pattern = re.escape(ui(key)).replace(re.escape("{}"), r"(\S+)")
        match = re.fullmatch(pattern, line)
        if match:
            return ui(key, lang).format(*match.groups())
    return line


# Why a rank has no GPU, as the rank says it (rank/telemetry.py, rank/gpu_topology.py): the
# beginnings the catalogues translate; a reason not listed is shown as the rank wrote it
GPU_NOTES = (N_("CPU tensors"), N_("NVML has no handle for this rank's GPU"),
             N_("nvidia-ml-py (pynvml) is not installed"), N_("NVML unavailable"),
             N_("NVML does not know"), N_("NVML cannot list the GPUs"), N_("NVML sees none"))


def gpu_note(note: str, lang: str = "en") -> str:
    """A rank's reason for having no GPU, in ``lang`` where its beginning is known."""
    for beginning in GPU_NOTES:
        if note.startswith(beginning):
            return ui(beginning, lang) + note[len(beginning):]
    return note


# NCCL's algorithm as its log said it (knowledge/nccl_log.NcclLog.algorithm_text)
NCCL_TEXTS = (
    N_("algorithm unknown (run with NCCL_DEBUG=INFO to see NCCL's choice)"),
    N_("algorithm unknown (NCCL printed no choice for it: add "
       "NCCL_DEBUG_SUBSYS=INIT,COLL,TUNING)"),
    N_("algorithm unknown (NCCL prints no choice for this op)"),
)


def nccl_text(said: str, lang: str = "en") -> str:
    """What NCCL's log gave of an op's algorithm, in ``lang``; a text not listed as it is."""
    return ui(said, lang) if said in NCCL_TEXTS else said


# Textual's own commands in the palette: their English title, by their English help
TEXTUAL_COMMANDS = {
    N_("Change the current theme"): N_("Theme"),
    N_("Quit the application as soon as possible"): N_("Quit"),
    N_("Hide the keys and widget help panel"): N_("Keys"),
    N_("Show help for the focused widget and a summary of available keys"): N_("Keys"),
    N_("Minimize the widget and restore to normal size"): N_("Minimize"),
    N_("Maximize the focused widget"): N_("Maximize"),
    N_("Save an SVG 'screenshot' of the current screen"): N_("Screenshot"),
}


def textual_command(help_text: str, lang: str = "en") -> tuple[str, str] | None:
    """(title, help) of one of Textual's palette commands in ``lang``, by its English help;
    None for a command this table does not know (shown as Textual wrote it)."""
    title = TEXTUAL_COMMANDS.get(help_text)
    return None if title is None else (ui(title, lang), ui(help_text, lang))


LISTED_RANKS = 8  # ranks listed one by one; in longer lists, runs of 3 or more are written a-b
RUN_ALWAYS = 5  # a run this long is written a-b in any list (a node's 8 ranks: 24-31)


def rank_list(ranks: Sequence[int]) -> str:
    """Ranks as a list that fits a line at any size: ``0,2,5``; ``24-31`` (a run of
    RUN_ALWAYS or more); in a list of more than LISTED_RANKS, every run of 3 or more:
    ``0-23,32-1023``, so that a thousand ranks never run off the line."""
    shortest = 3 if len(ranks) > LISTED_RANKS else RUN_ALWAYS
    runs, start = [], 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            run = ranks[start:i]
            runs.append(f"{run[0]}-{run[-1]}" if len(run) >= shortest else
                        ",".join(map(str, run)))
            start = i
    return ",".join(runs)
