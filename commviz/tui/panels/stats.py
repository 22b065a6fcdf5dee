"""The statistics panel: the latest shapes in nccl-tests' columns; at scale, under the layout
of their groups (``viewer/shape_words``), each layout a line before its rows."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from commviz.knowledge.bandwidth import gbps_text
from commviz.knowledge.group_shapes import Family
from commviz.text import i18n
from commviz.tui.panels.words import bytes_text
from commviz.viewer import plain_text as text
from commviz.viewer import shape_words
from commviz.viewer.model import Model

STATS_ROWS = 6  # the shapes that completed most recently: the teaching panels need the room


def stats_table(model: Model, lang: str = "en") -> StatsTable:
    size, count = i18n.ui("col size", lang), i18n.ui("col count", lang)
    heads = ("op", "n", size, count, "p50 µs", "algbw", "busbw")
    found = shape_words.sections(model)
    if found:
        rows, labels = [], {}
        for family, chosen in _latest_by_shape(model, found):
            labels[len(rows)] = family
            rows += [_cells(row, lang) for row in chosen]
        return StatsTable(heads, rows, labels, lang)
    return StatsTable(heads, [_cells(row, lang) for row in model.latest_stats(STATS_ROWS)])


def _cells(row: dict, lang: str) -> tuple[str, ...]:
    return (row["op"], str(row["ranks"]), bytes_text(row["size"], lang), str(row["count"]),
            f"{row['time_p50_us']:.0f}", i18n.number(gbps_text(row["algbw_gbps"]), lang),
            i18n.number(gbps_text(row["busbw_gbps"]), lang))


def _latest_by_shape(model: Model, found: list[tuple[Family, list[dict]]]
                     ) -> list[tuple[Family, list[dict]]]:
    """The rows that completed most recently, in STATS_ROWS lines with their families' (a
    line each), in the families' order."""
    updated = {key: row.updated for key, row in model.shape_stats.items()}
    newest = sorted(((updated[(row["op"], row["shape"], row["size"])], i, j)
                     for i, (_, rows) in enumerate(found) for j, row in enumerate(rows)),
                    reverse=True)
    kept: dict[int, set[int]] = {}
    lines = 0
    for _, i, j in newest:
        lines += 1 + (i not in kept)
        if lines > STATS_ROWS:
            break
        kept.setdefault(i, set()).add(j)
    return [(found[i][0], [row for j, row in enumerate(found[i][1]) if j in kept[i]])
            for i in sorted(kept)]


OP_MIN = 14  # "reduce_scatter" whole; a longer name shortened to it still reads: reduce_…tensor
# How the statistics fit a panel, tried in turn: (columns' gap, columns left out, by index).
# Two spaces only where every name fits whole; then one, then algbw (busbw is what
# nccl-tests' users compare), the group size and the calls go before the name is cut
# under OP_MIN. The numbers themselves are never cut.
STATS_LAYOUTS = ((2, ()), (1, ()), (1, (5,)), (1, (5, 1)), (1, (5, 1, 3)))


class StatsTable:
    """The statistics in nccl-tests' columns, laid out for the width they are drawn at: the
    op name comes before the less important numbers (``STATS_LAYOUTS``); one still too
    long is shortened in its middle, so that its end, which tells ``reduce_scatter_tensor``
    from ``reduce_scatter_single``, stays. ``labels``: a line across the columns before the
    row of that index (a group family, named as ``shape_words.family_label`` fits it)."""

    def __init__(self, heads: tuple[str, ...], rows: list[tuple[str, ...]],
                 labels: dict[int, Family] | None = None, lang: str = "en") -> None:
        self.heads, self.rows, self.labels, self.lang = heads, rows, labels or {}, lang

    @property
    def row_count(self) -> int:
        return len(self.rows) + len(self.labels)

    def layout(self, width: int) -> tuple[int, list[int], list[int]]:
        """The gap, the columns shown after the op's (indices) and every column's width at
        ``width``, the op name's its room."""
        widths = [max([len(head), *(len(row[i]) for row in self.rows)])
                  for i, head in enumerate(self.heads)]
        for gap, dropped in STATS_LAYOUTS:
            shown = [i for i in range(1, len(widths)) if i not in dropped]
            room = width - sum(widths[i] + gap for i in shown)
            if room >= (widths[0] if gap > 1 else min(widths[0], OP_MIN)):
                break
        return gap, shown, [max(len("op"), room), *widths[1:]]

    def __rich_console__(self, console: Any, options: Any) -> Any:
        gap, shown, widths = self.layout(options.max_width)
        room = widths[0]
        out = Text(no_wrap=True, overflow="crop")
        for k, row in enumerate([self.heads, *self.rows]):
            if k - 1 in self.labels:
                out.append(shape_words.family_label(self.labels[k - 1], self.lang,
                                                    options.max_width) + "\n", style="italic")
            line = f"{text.shorten_middle(row[0], room):<{room}}" + "".join(
                " " * gap + f"{row[i]:>{widths[i]}}" for i in shown)
            out.append(line + ("\n" if k < len(self.rows) else ""),
                       style="bold" if k == 0 else "")
        yield out
