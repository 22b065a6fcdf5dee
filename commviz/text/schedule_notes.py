"""The one-line ``Schedule.note``, the algorithm's name and the step labels, in every language.

``knowledge.schedules`` writes each note in English, inline in its builders, and stays
stdlib-only and language-free. The words of each language are data
(``commviz/text/<lang>/schedules.toml``), composed from the same facts of the schedule as
``schedule()`` does: the family (``canonical_op(s.op)``), the backend, the chunk count, ``n``
and the op name. A test checks that the English composed equals ``s.note`` for every op,
backend and group size; if a note changes in ``schedules`` without the data,
``note(s, lang)`` falls back to the English note rather than show a stale translation.
"""

from __future__ import annotations

import re

from commviz.knowledge.hierarchy import Scaled
from commviz.knowledge.schedules import (
    BACKENDS,
    MONITORED_BARRIER_BYTES,
    NCCL_BARRIER_BYTES,
    P2P,
    Schedule,
    canonical_op,
)
from commviz.text import flowing, prose
from commviz.text.i18n import check_lang

_EN = prose("en", "schedules")

# Where each note is in the data: (family, backend) and, looked up first, (op, backend) for
# the ops ``schedules._OP_BUILDERS`` draws apart from their family; point-to-point families
# share one note on both backends.
_NOTES: dict[tuple[str, str], tuple[str, ...]] = {
    **{(family, backend): ("family", family, backend)
       for family, by_backend in _EN["family"].items() for backend in by_backend},
    **{(family, backend): ("point_to_point",) for family in P2P for backend in BACKENDS},
}
_OP_NOTES: dict[tuple[str, str], tuple[str, ...]] = {
    (op, backend): ("op", op, backend)
    for op, by_backend in _EN["op"].items() for backend in by_backend}
_OBJECT: dict[str, tuple[str, ...]] = {family: ("object", family) for family in _EN["object"]}


def _text(lang: str, *path: str) -> str:
    """The words at ``path`` in ``lang``'s schedules.toml, or English's where it lacks them."""
    for source in (lang, "en"):
        found = prose(source, "schedules")
        for key in path:
            found = found.get(key, {})
        if isinstance(found, str):
            return flowing(found)
    raise KeyError(f"no schedule words at {'.'.join(path)}")


def _compose(s: Schedule, lang: str) -> str:
    """The note of ``s`` in ``lang``, built from its facts as ``schedules.schedule()`` does."""
    family = canonical_op(s.op)
    where = _OP_NOTES.get((s.op, s.backend)) or _NOTES[(family, s.backend)]
    parts = [_text(lang, *where).format(
        m=s.chunks, nb=NCCL_BARRIER_BYTES, mb=MONITORED_BARRIER_BYTES)]
    if s.n == 1:
        parts.append(_text(lang, "one_rank"))
    if "object" in s.op:
        parts.append(_text(lang, *_OBJECT[family]))
    return "; ".join(parts)


def note(s: Schedule, lang: str) -> str:
    """What the drawing of ``s`` simplifies, in ``lang``.

    English is ``s.note`` itself. Another language is given only while the data's English
    for the same facts still matches ``s.note``; otherwise the English note is returned.
    """
    check_lang(lang)
    if lang == "en":
        return s.note
    try:
        if _compose(s, "en") == s.note:
            return _compose(s, lang)
    except (KeyError, ValueError):  # a family or backend the data does not know yet
        pass
    return s.note


def _word(lang: str, table: str, english: str) -> str:
    """``english`` from the data's ``table`` (algorithm, step_word) in ``lang``; as it is
    where no language has it."""
    for source in (lang, "en"):
        found = prose(source, "schedules").get(table, {}).get(english)
        if found is not None:
            return found
    return english


# the words of Step.label (a word, then a number: "tree 0", "pair +1"); ring labels such as
# RS1 and AG2 and block prefixes such as "b0 " read the same in every language
_STEP_WORD = re.compile(r"^(b\d+ )?([a-z][a-z ]*?)( [+]?\d+)?$")


def algorithm(s: Schedule | Scaled, lang: str) -> str:
    """The name of the algorithm ``s`` draws, in ``lang``."""
    check_lang(lang)
    return _word(lang, "algorithm", s.algorithm)


def step_label(label: str, lang: str) -> str:
    """A ``Step.label`` in ``lang``: its word translated, its numbers kept."""
    check_lang(lang)
    found = _STEP_WORD.match(label)
    if lang == "en" or found is None:
        return label
    block, word, number = found.groups()
    return f"{block or ''}{_word(lang, 'step_word', word)}{number or ''}"
