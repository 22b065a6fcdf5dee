"""How the screen's rows and columns are shared out between the panels: pure functions of
sizes (cells, rows), so that each rule is tested without an app. The app reads the sizes
from its widgets and applies what these return."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size

# The findings panel's least height, border included (wide, narrow): more where its lead
# finding and what to check for it need it, up to half the screen
FINDINGS_ROWS = (8, 7)
EVENT_ROWS = 2  # at most, of an event in the viewer panel (a rank's error): cut after them
STATUS_LEAST_ROWS = 5  # the viewer panel's on a wide terminal: the inside panel leaves them
NARROW_STATUS_ROWS = 6  # the viewer panel on a narrow terminal: its newest rows, if it has more
SOURCE_LEAST_ROWS = 2  # the source panel's title and the call's line: kept on a full screen
LEAST_LANES_ROWS = 6  # the ranks' and the timeline's panels, borders included, when capped
MIN_TITLE_SHOWN = 16  # cells of a cut header title, at least: what the run is stays readable
LEFT_SHARE = (3, 5)  # the left column's share of a wide screen's width (app.tcss: 3fr, 2fr)
TITLE_FRAME = 6  # the cells a border title's frame takes: "╭─ " and " ─╮"


def fit_header(head: str, title: str, live: str, width: int) -> str:
    """``head + title + live`` in ``width`` cells (0: not laid out yet): the run's title is
    cut down to MIN_TITLE_SHOWN cells before the live state after it (paused, the replay
    held, its speed); what the caller adds after that (the replay's lag) is the first to go,
    by the header's own ellipsis."""
    room = max(width - cell_len(head) - cell_len(live), MIN_TITLE_SHOWN)
    if width <= 0 or cell_len(title) <= room:
        return head + title + live
    return head + set_cell_size(title, room - 1).rstrip(" ·") + "…" + live


def title_room(screen_width: int, narrow: bool) -> int | None:
    """The cells a left-column panel's border title has (the replay's, the timeline's);
    None before the first resize."""
    width = screen_width if narrow else screen_width * LEFT_SHARE[0] // LEFT_SHARE[1]
    return (width - TITLE_FRAME) if width else None


def fits(text: str, room: int | None) -> bool:
    """Whether ``text`` fits ``room`` cells (None: any)."""
    return room is None or cell_len(text) <= room


def footer_width(keys: Iterable[tuple[str, str]], palette: str) -> int:
    """The cells the footer takes for ``keys`` (each key as shown, its words): the key, a
    space, its words and two spaces; then the command palette's words on the right."""
    return sum(cell_len(key) + cell_len(words) + 3 for key, words in keys) \
        + cell_len(palette) + 4


def ranks_rows(rows: int, height: int, most: float) -> int | None:
    """The rows to draw the ranks panel's table in: its ``height`` when the table's ``rows``
    are more than that and than the panel may grow to (``most``), so that its last row names
    the ranks left out; None: every row (it grows to them, or is not laid out)."""
    return height if 0 < height < rows and rows > most else None


@dataclass(frozen=True)
class LeftFit:
    """How the left column gives way to many ranks: ``tight`` hides the operations log
    (None: leave it as it is); the timeline's and the ranks' height caps, borders included
    (None: the stylesheet's)."""

    tight: bool | None
    timeline_cap: int | None
    ranks_cap: int | None


def fit_left(column: int, ranks: int, timeline: int, least_replay: int, least_log: int,
             source_gutter: int, output: int, narrow: bool) -> LeftFit:
    """Many ranks on a wide terminal: when the left column's panels (``ranks`` and
    ``timeline``: the rows they want, borders included) need more rows than the ``column``
    has, the operations log gives way first, then the timeline and the ranks give up rows,
    to LEAST_LANES_ROWS each, so that the replay keeps its least rows and the source the
    call's line. ``output``: the job output panel's rows (0: hidden)."""
    over, tight = -1, None
    if not narrow and column > 0:
        need = ranks + timeline + least_replay + SOURCE_LEAST_ROWS + source_gutter + output
        over = need + least_log - column
        tight = over > 0
        over -= least_log
    caps = []
    for wanted in (timeline, ranks):  # the timeline gives first: the ranks name who
        cap = max(LEAST_LANES_ROWS, wanted - over) if over > 0 else None
        over -= wanted - (cap or wanted)
        caps.append(cap)
    return LeftFit(tight, *caps)


def source_context(column: int, taken: int, least_replay: int, source_gutter: int,
                   most: int, narrow: bool) -> int:
    """Lines of the program to show around its call: ``most``, or fewer where the left
    column leaves the source panel less room once the others have ``taken`` theirs, the
    replay at its least."""
    if narrow or column <= 0:
        return most
    rows = column - taken - least_replay - source_gutter - SOURCE_LEAST_ROWS
    return max(0, min(most, rows // 2))


def right_rows_left(column: int, taken: int, least_explanation: int) -> int | None:
    """The right column's rows less those ``taken`` by panels above and the explanation's
    least; None before the screen is laid out."""
    if column <= 0:
        return None
    return column - taken - least_explanation


def inside_rows(left: int | None, status_gutter: int, inside_gutter: int) -> int | None:
    """The rows the inside panel may take of the ``left`` rows (``right_rows_left``; None:
    it has the screen, or no layout yet), so that the viewer panel below keeps
    STATUS_LEAST_ROWS."""
    if left is None:
        return None
    return max(1, left - STATUS_LEAST_ROWS - status_gutter - inside_gutter)


def inside_width(content: int, column: int, gutter: int) -> int | None:
    """The inside panel's inner width: its own, or while it gives way (no region) the right
    ``column``'s less its ``gutter``; None before a layout."""
    width = content or (column - gutter)
    return width if width > 0 else None


def status_room(narrow: bool, left: int | None, gutter: int) -> int | None:
    """The viewer panel's rows: NARROW_STATUS_ROWS on a narrow terminal; on a wide one the
    ``left`` rows of the right column (``right_rows_left``); None before a layout."""
    if narrow:
        return NARROW_STATUS_ROWS
    if left is None:
        return None
    return max(1, left - gutter)


def status_dropped(rows: int, control: int, room: int | None) -> int:
    """How many of the viewer panel's first ``rows`` go so that they and the ``control``
    line's rows fit ``room`` (None: any): the oldest go, the control line stays."""
    return rows + control - room if room is not None and rows + control > room else 0


def findings_rows(lead: int, gutter: int, screen: int, narrow: bool, kept: int = 0) -> int:
    """The findings panel's height, border included: enough for its ``lead`` rows (the
    finding that explains the others and what to check for it), at least FINDINGS_ROWS, at
    most half the ``screen``; narrow (panels stacked), at most what the panels that keep
    their rows (``kept``: the viewer panel's and the ranks') and the header and footer leave
    it."""
    cap = screen // 2
    if narrow:
        cap = min(cap, max(FINDINGS_ROWS[True], screen - 2 - kept))
    return min(max(FINDINGS_ROWS[narrow], lead + gutter), cap)
