"""The newest lines of a log, drawn on the line API.

A ``RichLog`` grows its virtual size with every line it is given, and each growth lays the
whole screen out again: under a training job's event rate that is most of the TUI's time.
This widget only ever shows the tail that fits, so adding lines repaints it alone.
A line may be a function of the width that writes it to fit (the operations log's): it is
written when drawn, so a narrow or resized panel gets lines made for its width. Focused
(tab), ↑↓, PgUp/PgDn, Home and End scroll back through the lines kept and to the newest
again; scrolled back, the view stays put as lines come.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from rich.text import Text
from textual.binding import Binding
from textual.strip import Strip

from commviz.tui.line_style import LineStyled

MAX_LINES = 500

Line = str | Callable[[int | None], str]  # text, or text written for a width (None: any)


def line_text(line: Line, width: int | None = None) -> str:
    return line if isinstance(line, str) else line(width)


class OpLog(LineStyled, can_focus=True):
    DEFAULT_CSS = """
    OpLog {
        height: 8;
    }
    """
    BINDINGS = [Binding("up", "back(1)", show=False), Binding("down", "back(-1)", show=False),
                Binding("pageup", "page(1)", show=False),
                Binding("pagedown", "page(-1)", show=False),
                Binding("home", "back(1_000_000)", show=False),
                Binding("end", "back(-1_000_000)", show=False)]

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.lines: collections.deque[Line] = collections.deque(maxlen=MAX_LINES)
        self.back = 0  # lines scrolled back from the newest (0: it follows them)
        self._version = 0
        self._cached: tuple[tuple, list[Strip]] | None = None

    def write(self, *lines: Line) -> None:
        if lines:
            self.lines.extend(lines)
            if self.back:  # scrolled back: the lines shown stay
                self._scroll_to(self.back + len(lines))
            self._version += 1
            self.refresh()

    def action_back(self, lines: int) -> None:
        self._scroll_to(self.back + lines)

    def action_page(self, pages: int) -> None:
        self._scroll_to(self.back + pages * max(1, self.size.height - 1))

    def _scroll_to(self, back: int) -> None:
        back = max(0, min(back, len(self.lines) - self.size.height))
        if back != self.back:
            self.back = back
            self.border_subtitle = f"↑ {back} · End ↓" if back else ""  # the way back down
            self._version += 1
            self.refresh()

    def redraw(self) -> None:
        """Write every line again (those written when drawn follow the screen's language)."""
        self._version += 1
        self.refresh()

    def clear(self) -> None:
        self.lines.clear()
        self.back = 0
        self._version += 1
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        strips = self._strips(width, height)
        return strips[y] if y < len(strips) else Strip.blank(width, self.line_style)

    def _strips(self, width: int, height: int) -> list[Strip]:
        key = (self._version, width, height, self.line_style)  # a new theme: redraw
        if self._cached is None or self._cached[0] != key:
            end = len(self.lines) - self.back
            tail = list(self.lines)[max(0, end - height):end] if height > 0 else []
            console, style = self.app.console, self.line_style
            strips = [Strip(_fitted(line_text(line, width), width).render(console))
                      .crop_extend(0, width, style).apply_style(style) for line in tail]
            self._cached = (key, strips)
        return self._cached[1]


def _fitted(line: str, width: int) -> Text:
    """A line cut to the widget's width with an ellipsis (Text.render alone would not cut
    it: the strip's crop then cut it at the edge, without one)."""
    text = Text(line, no_wrap=True)
    text.truncate(width, overflow="ellipsis")
    return text
