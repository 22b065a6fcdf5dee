"""The style of a widget that draws its own lines, worked out once per paint.

``Widget.rich_style`` walks the styles of every ancestor. A widget whose ``render_line`` keys
its cached strips on that style asks for it once per line: at 1,024 ranks, with the timeline,
replay and log redrawn in turns, that was 1-2 ms of a frame's budget.
"""

from __future__ import annotations

from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget


class LineStyled(Widget):
    """A widget whose lines read ``line_style``: its ``rich_style``, computed once for all
    the lines of one ``render_lines`` (and afresh outside one)."""

    _paint_style: Style | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        self._paint_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._paint_style = None

    @property
    def line_style(self) -> Style:
        style = self._paint_style
        return self.rich_style if style is None else style
