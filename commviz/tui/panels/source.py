"""The source panel: the program's lines around the call of the operation shown."""

from __future__ import annotations

import linecache
import os

from rich.text import Text

from commviz.text import i18n
from commviz.viewer.model import Instance

SOURCE_CONTEXT = 4  # lines shown above and below the line that made the call


def source(inst: Instance | None, lang: str, context: int = SOURCE_CONTEXT) -> Text:
    """The program's own source around the line that issued an operation, ``context``
    lines above and below it."""
    if inst is None or inst.site is None:
        return Text(i18n.ui("no operation yet", lang), style="dim")
    path, line = inst.site  # type: ignore[misc]
    lines = linecache.getlines(path)
    if not lines or not 0 < line <= len(lines):
        return Text(f"{path}:{line} ({i18n.ui('source not here', lang)})", style="dim")
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(f"{os.path.basename(path)}:{line}  {inst.op}\n", style="bold")
    first = max(1, line - context)
    for number in range(first, min(len(lines), line + context) + 1):
        code = lines[number - 1].rstrip("\n")
        style = "bold reverse" if number == line else "dim"
        out.append(f"{number:4d} {code}\n", style=style)
    out.rstrip()  # no blank line under the last one
    return out
