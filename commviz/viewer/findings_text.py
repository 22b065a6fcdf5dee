"""What each kind of finding means and what to check, in the language asked for.

The findings panel shows these next to a finding's line. The texts are data,
``commviz/text/<lang>/advice.toml``; a language lacking one shows it in English.
"""

from __future__ import annotations

from commviz import text
from commviz.text.i18n import LANGS


def _field(kind: str, name: str, lang: str) -> str:
    """One text, whitespace collapsed so that the data can wrap freely."""
    found = text.prose(lang, "advice").get(kind, {}).get(name)
    return " ".join((found or text.prose("en", "advice")[kind][name]).split())


# each finding type's, and ``timeout``'s (``Finding.topic``)
TITLES: dict[str, dict[str, str]] = {kind: {lang: _field(kind, "title", lang) for lang in LANGS}
                                     for kind in text.prose("en", "advice")}


def advice(kind: str, lang: str = "en") -> tuple[str, str, str]:
    """(title, what it means, what to check) for a finding type or topic (``Finding.topic``),
    in ``lang``."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; available: {', '.join(LANGS)}")
    return tuple(_field(kind, name, lang) for name in ("title", "means", "check"))
