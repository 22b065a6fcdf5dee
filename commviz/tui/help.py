"""The help screen: every key the app answers to, in the user's language."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static


class HelpScreen(ModalScreen[None]):
    """Lists the app's bindings; any of escape, q or ? closes it."""

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > Static {
        width: auto;
        max-width: 96%;  /* 80 columns: fewer wrapped lines, so that every key fits 24 rows */
        height: auto;
        border: round $accent;
        padding: 0 2;
        background: $surface;
    }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", show=False)]

    def __init__(self, keys: list[tuple[str, str]], title: str, subtitle: str = "") -> None:
        super().__init__()
        self._keys, self._title, self._subtitle = keys, title, subtitle

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, description in self._keys:
            table.add_row(key, description)
        panel = Static(table)
        panel.border_title, panel.border_subtitle = self._title, self._subtitle
        yield panel
