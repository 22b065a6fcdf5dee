"""The screen's arithmetic (commviz.tui.layout) as functions of sizes: no app, no Pilot."""

from __future__ import annotations

import pytest

from commviz.tui import layout
from commviz.tui.layout import LeftFit


def test_a_header_cuts_the_runs_title_before_its_live_state() -> None:
    head, title, live = "commviz — ", "run · python train.py --epochs 3", " · ▶ replaying"
    assert layout.fit_header(head, title, live, 0) == head + title + live  # not laid out
    assert layout.fit_header(head, title, live, 200) == head + title + live
    cut = layout.fit_header(head, title, live, 40)
    assert cut.startswith(head) and cut.endswith("…" + live) and len(cut) <= 40
    # however narrow, the title keeps MIN_TITLE_SHOWN cells (its ellipsis one of them)
    least = layout.fit_header(head, title, live, 10)
    assert least == head + title[:layout.MIN_TITLE_SHOWN - 1].rstrip(" ·") + "…" + live


def test_a_left_column_title_has_the_columns_share_less_its_frame() -> None:
    assert layout.title_room(0, narrow=False) is None
    assert layout.title_room(100, narrow=True) == 100 - layout.TITLE_FRAME
    assert layout.title_room(160, narrow=False) == 160 * 3 // 5 - layout.TITLE_FRAME
    assert layout.fits("passos", None) and layout.fits("passos", 6)
    assert not layout.fits("passos", 5)
    assert not layout.fits("漢字漢", 5)  # wide characters take two cells each


def test_the_footer_counts_each_key_its_words_and_their_gaps() -> None:
    keys = [("q", "Quit"), ("space", "Pause/resume")]
    assert layout.footer_width(keys, "Palette") == (1 + 4 + 3) + (5 + 12 + 3) + 7 + 4
    assert layout.footer_width([], "") == 4


@pytest.mark.parametrize(("rows", "height", "most", "cut"), [
    (12, 8, 8, 8),       # more rows than it has and may grow to: its last row names the rest
    (12, 8, 20, None),   # it may grow to them
    (6, 8, 8, None),     # they fit
    (12, 0, 8, None),    # not laid out yet
])
def test_the_ranks_table_is_cut_only_where_the_panel_cannot_grow(rows, height, most,
                                                                 cut) -> None:
    assert layout.ranks_rows(rows, height, most) == cut


@pytest.mark.parametrize(("column", "fit"), [
    (50, LeftFit(False, None, None)),  # everything fits
    (40, LeftFit(True, None, None)),   # the log gives way, and that is enough
    (30, LeftFit(True, 6, 8)),         # then the timeline gives first, the ranks the rest
    (20, LeftFit(True, 6, 6)),         # never under LEAST_LANES_ROWS
])
def test_the_left_column_gives_way_log_first_then_timeline_then_ranks(column, fit) -> None:
    # ranks 10 rows, timeline 8, the replay's least 12, the log's 8, the source's border 2
    assert layout.fit_left(column, 10, 8, 12, 8, 2, 0, narrow=False) == fit
    assert layout.LEAST_LANES_ROWS == 6


def test_the_left_column_is_left_alone_narrow_or_before_a_layout() -> None:
    assert layout.fit_left(20, 10, 8, 12, 8, 2, 0, narrow=True) == LeftFit(None, None, None)
    assert layout.fit_left(0, 10, 8, 12, 8, 2, 0, narrow=False) == LeftFit(None, None, None)


def test_a_jobs_output_panel_takes_its_rows_from_the_others() -> None:
    assert layout.fit_left(45, 10, 8, 12, 8, 2, 0, narrow=False) == LeftFit(False, None, None)
    assert layout.fit_left(45, 10, 8, 12, 8, 2, 8, narrow=False) == LeftFit(True, None, None)


def test_the_source_shows_fewer_lines_where_the_column_leaves_it_less() -> None:
    assert layout.source_context(0, 0, 12, 2, 4, narrow=False) == 4  # not laid out
    assert layout.source_context(30, 10, 12, 2, 4, narrow=True) == 4  # it has the screen
    assert layout.source_context(60, 10, 12, 2, 4, narrow=False) == 4
    assert layout.source_context(30, 10, 12, 2, 4, narrow=False) == 2  # 4 rows: 2 each side
    assert layout.source_context(20, 10, 12, 2, 4, narrow=False) == 0


def test_the_right_column_shares_its_rows_down_to_the_viewer_panel() -> None:
    assert layout.right_rows_left(0, 0, 5) is None
    left = layout.right_rows_left(40, 20, 5)
    assert left == 15
    # the inside panel leaves the viewer panel STATUS_LEAST_ROWS and both their borders
    assert layout.inside_rows(left, 2, 2) == 15 - layout.STATUS_LEAST_ROWS - 4
    assert layout.inside_rows(2, 2, 2) == 1
    assert layout.inside_rows(None, 2, 2) is None
    assert layout.status_room(False, left, 2) == 13
    assert layout.status_room(True, left, 2) == layout.NARROW_STATUS_ROWS
    assert layout.status_room(False, None, 2) is None


def test_the_inside_panel_knows_its_width_while_hidden() -> None:
    assert layout.inside_width(58, 64, 4) == 58
    assert layout.inside_width(0, 64, 4) == 60  # giving way: no region of its own
    assert layout.inside_width(0, 0, 4) is None


def test_the_viewer_panel_drops_its_oldest_rows_never_the_control_line() -> None:
    assert layout.status_dropped(8, 1, 6) == 3
    assert layout.status_dropped(5, 1, 6) == 0
    assert layout.status_dropped(8, 1, None) == 0


def test_the_findings_panel_grows_to_its_lead_up_to_half_the_screen() -> None:
    wide, narrow = layout.FINDINGS_ROWS
    assert layout.findings_rows(2, 2, 48, narrow=False) == wide  # at least its least
    assert layout.findings_rows(10, 2, 48, narrow=False) == 12
    assert layout.findings_rows(40, 2, 48, narrow=False) == 24  # half the screen
    # stacked: what the viewer panel and the ranks keep is not given to it
    assert layout.findings_rows(40, 2, 48, narrow=True, kept=30) == 16
    assert layout.findings_rows(40, 2, 24, narrow=True, kept=30) == narrow
