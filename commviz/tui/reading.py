"""A text read full screen: the explanation panel's, whole, where its box shows a few lines."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class ReadingScreen(ModalScreen[None]):
    """``text`` in a scrolling box over the app; escape, q or e closes it."""

    DEFAULT_CSS = """
    ReadingScreen {
        align: center middle;
    }
    ReadingScreen > VerticalScroll {
        width: 100%;
        max-width: 100;
        height: auto;
        max-height: 100%;
        border: round $accent;
        padding: 0 1;
        background: $surface;
    }
    """
    BINDINGS = [Binding("escape,q,e", "dismiss", "Close", show=False)]

    def __init__(self, text: Text, title: str, subtitle: str) -> None:
        super().__init__()
        self._text, self._title, self._subtitle = text, title, subtitle

    def compose(self) -> ComposeResult:
        box = VerticalScroll(Static(self._text))
        box.border_title, box.border_subtitle = self._title, self._subtitle
        yield box

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()  # ↑↓, PgUp/PgDn scroll it at once
