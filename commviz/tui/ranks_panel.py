"""The ranks panel's widget: by rank it only shows text; by node (``panels/nodes.py``) it
takes the focus (tab, a click or `/`), ↑↓ choose a line, enter opens or closes a node (or the
fold of the healthy), escape closes what is open; `/` finds a rank or a node."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.tui.panels.nodes import Entry


class RanksPanel(Static):
    BINDINGS = [Binding("up", "move(-1)", show=False), Binding("down", "move(1)", show=False),
                Binding("enter", "toggle", show=False), Binding("escape", "back", show=False)]

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.can_focus = False  # by rank: nothing to choose
        self.opened: list[str] = []  # nodes opened, the last one last
        self.fold_open = False
        self.selected: Entry | None = None  # the line chosen (kept by what it is: rows move)
        self.every: list[Entry] = []  # the lines by node, as last drawn
        self.shown: list[Entry | None] = []  # the entry of each line drawn under the header

    def by_node(self, on: bool) -> None:
        """Whether the panel shows nodes: only then does it take the focus."""
        self.can_focus = on
        if not on:
            self.opened, self.fold_open, self.selected = [], False, None

    def cursor(self) -> int:
        """The index in ``every`` of the line chosen (the first if none is, or it is gone)."""
        if self.selected is not None and self.selected in self.every:
            return self.every.index(self.selected)
        return 0

    def action_move(self, by: int) -> None:
        if self.every:
            self.selected = self.every[max(0, min(len(self.every) - 1, self.cursor() + by))]
            self.app.refresh_view()

    def action_toggle(self) -> None:
        """Open or close the node chosen (a rank chosen: its node), or the fold."""
        if not self.every:
            return
        entry = self.every[self.cursor()]
        if entry.kind == "fold":
            self.fold_open = not self.fold_open
        elif entry.host in self.opened:
            self.opened.remove(entry.host)
            self.selected = Entry("node", entry.host)
        else:
            self.opened.append(entry.host)
        self.app.refresh_view()

    def action_back(self) -> None:
        """Close the node opened last, else the fold."""
        if self.opened:
            host = self.opened.pop()
            self.selected = Entry("node", host)
        elif self.fold_open:
            self.fold_open = False
        self.app.refresh_view()

    def jump(self, entry: Entry) -> None:
        """Show ``entry``: its node opened (a rank's), the fold too if it is healthy."""
        if entry.kind == "rank" and entry.host not in self.opened:
            self.opened.append(entry.host)
        if all(e.host != entry.host for e in self.every if e.kind == "node"):
            self.fold_open = True  # a healthy node, folded
        self.selected = entry
        self.focus()
        self.app.refresh_view()

    def on_click(self, event: events.Click) -> None:
        """A click on a line chooses it and opens or closes it."""
        if not self.can_focus:
            return
        line = event.y - self.styles.gutter.top - 1  # the border, then the header
        if 0 <= line < len(self.shown) and self.shown[line] is not None:
            self.selected = self.shown[line]
            self.action_toggle()


def find(query: str, nodes: dict[str, list[int]]) -> Entry | str:
    """What `/` asked for: a rank (``728``, ``r728``, ``rank 728``) or a node (its name, or a
    part of it that names one node only). Else the UI string key of why not."""
    q = query.strip().lower()
    for prefix in ("rank ", "rank", "r"):
        if q.startswith(prefix) and q[len(prefix):].strip().isdigit():
            q = q[len(prefix):].strip()
            break
    if q.isdigit():
        rank = int(q)
        host = next((h for h, ranks in nodes.items() if rank in ranks), None)
        return Entry("rank", host, rank) if host is not None else N_("find no rank")
    if not q:
        return N_("find empty")
    exact = [h for h in nodes if h.lower() == q]
    if exact:
        return Entry("node", exact[0])
    some = [h for h in nodes if q in h.lower()]
    if len(some) == 1:
        return Entry("node", some[0])
    return N_("find many nodes") if some else N_("find no node")


class FindScreen(ModalScreen[Entry | None]):
    """`/`: a line to type a rank or a node in; enter jumps there, escape goes back."""

    DEFAULT_CSS = """
    FindScreen {
        align: center bottom;
    }
    FindScreen > Input {
        width: 60;
        margin-bottom: 3;
    }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", show=False)]

    def __init__(self, nodes: dict[str, list[int]], lang: str) -> None:
        super().__init__()
        self._hosts, self._lang = nodes, lang

    def compose(self) -> ComposeResult:
        box = Input(placeholder=i18n.ui("find placeholder", self._lang))
        box.border_title = i18n.ui("find title", self._lang)
        yield box

    def on_input_submitted(self, event: Input.Submitted) -> None:
        found = find(event.value, self._hosts)
        if isinstance(found, Entry):
            self.dismiss(found)
            return
        box = self.query_one(Input)
        box.border_subtitle = i18n.ui(found, self._lang).format(event.value.strip())

