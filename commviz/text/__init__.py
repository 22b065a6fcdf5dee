"""The words commviz shows, kept as data: one folder per language (``commviz/text/<lang>/``).

Prose a teacher may edit (explanations, tips, notes, finding texts) lives there in TOML files;
:func:`prose` reads one, once. The screen's short strings are each language's gettext catalogue
(``<lang>/ui.po``, read by :mod:`commviz.text.i18n`). docs/i18n.md tells how to add a language.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent


@functools.cache
def prose(lang: str, name: str) -> dict[str, Any]:
    """The TOML file ``<lang>/<name>.toml`` as a dict; an empty one where the language lacks it,
    so that the caller falls back to English."""
    path = HERE / lang / f"{name}.toml"
    if not path.exists():
        return {}
    with path.open("rb") as f:
        return tomllib.load(f)


def flowing(text: str) -> str:
    """A text of a TOML file as the screen shows it: its line breaks and runs of spaces as one
    space, so that the file can wrap freely."""
    return " ".join(text.split())
