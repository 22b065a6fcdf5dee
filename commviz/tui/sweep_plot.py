"""The sweep demo's curves, drawn as they grow: busbw and time against size (log sizes), the
measured points with the alpha-beta line fitted to them over, its alpha and beta named.

Drawn with plotext through textual-plotext; it takes the replay's place in the sweep demo,
whose hundreds of calls a size no replay at human speed could follow.
"""

from __future__ import annotations

import math

import plotext
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot as Figure

from commviz.knowledge import sweep
from commviz.knowledge.costmodel import Fit
from commviz.text import i18n
from commviz.viewer import plain_text as text
from commviz.viewer.model import Model

MEASURED, MODEL = "cyan", "orange"
LOG_TICKS_MOST = 5  # ticks on a log axis at most


def _size_label(size: int) -> str:
    """8, 1K, 64M: nccl-tests' way of naming sizes."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def _log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Ticks for a log10 axis from ``lo`` to ``hi`` (> 0), few enough that no two share a
    row (plotext keeps one of them, which one unsaid): the decades within it, every other one
    past LOG_TICKS_MOST; under two decades, 1, 2 and 5 of each; else its two ends."""
    values = [10.0 ** d for d in range(math.ceil(math.log10(lo)),
                                       math.floor(math.log10(hi)) + 1)]
    if len(values) < 2:
        values = [m * 10.0 ** d for d in range(math.floor(math.log10(lo)),
                                               math.ceil(math.log10(hi)) + 1)
                  for m in (1, 2, 5) if lo <= m * 10.0 ** d <= hi]
    if len(values) < 2:
        values = sorted({lo, hi})
    values = values[::math.ceil(len(values) / LOG_TICKS_MOST)]
    return [math.log10(v) for v in values], [f"{v:.3g}" for v in values]


class SweepPlot(PlotextPlot):
    """busbw (GB/s) and time (µs) against size, for the sizes every rank has timed."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.lang = "en"
        self._shown: tuple | None = None
        self.points: list[sweep.Point] = []

    def update_from(self, model: Model, lang: str) -> None:
        """Take the sizes timed so far; redraw only when they, or the language, changed."""
        points = sweep.points(model.phases(0), model.world_size())
        backend = model.backend() or "gloo"
        key = (tuple(points), backend, lang)
        if key == self._shown:
            return
        self._shown, self.points, self.lang = key, points, lang
        self._draw(points, backend)
        self.refresh()

    def _draw(self, points: list[sweep.Point], backend: str) -> None:
        fit = draw(self.plt, points, backend, self.lang)
        self.border_subtitle = (text.sweep_fit_line(points, backend, self.lang) if fit is None
                                else _named(fit, self.lang))


def _named(fit: Fit, lang: str) -> str:
    """The fit's alpha and beta, short enough for the panel's bottom border."""
    beta = "∞" if not math.isfinite(fit.beta_bps) else f"{fit.beta_bps / 1e9:.3g} GB/s"
    return i18n.number(i18n.ui("sweep fit short", lang).format(
        alpha=text.duration(fit.alpha_s * 1e9), beta=beta), lang)


def draw(plt: Figure, points: list[sweep.Point], backend: str, lang: str) -> Fit | None:
    """busbw and time against size on ``plt`` (a plotext figure, cleared first), the line
    fitted to the points over them; returns the fit (None: none could be made)."""
    ui = i18n.ui
    plt.clear_figure()
    if not points:
        plt.title(ui("sweep waiting", lang))
        return None
    fit = sweep.fitted(points, backend)
    model = [sweep.predicted_s(fit, p, backend) for p in points] if fit else []
    # log axes drawn by hand: sizes as log2 (doubling: evenly spaced), busbw and times as
    # log10, each labelled in its own unit (plotext's own log scale takes no hand-made ticks)
    xs = [math.log2(p.size) for p in points]
    step = max(1, math.ceil(len(xs) / 6))
    xticks = (xs[::step], [_size_label(p.size) for p in points[::step]])
    busbw_model = [p.busbw * p.time_s / t for p, t in zip(points, model) if t]
    time_model = [t * 1e6 for t in model if t]
    plt.subplots(1, 2)
    for col, (label, measured, predicted) in enumerate((
            (ui("sweep busbw axis", lang), [p.busbw for p in points], busbw_model),
            (ui("sweep time axis", lang), [p.time_s * 1e6 for p in points], time_model)),
            start=1):
        ax = plt.subplot(1, col)  # (drawn on the subplot itself: plt is the figure)
        ax.title(label)
        ax.xticks(*xticks)
        shown = measured + (predicted if len(predicted) == len(xs) else [])
        if min(shown) > 0:  # (a busbw of 0: a group of one rank, moving nothing)
            ax.yticks(*_log_ticks(min(shown), max(shown)))
            measured, predicted = ([math.log10(v) for v in vs] for vs in (measured, predicted))
        ax.scatter(xs, measured, marker="dot", color=MEASURED,
                   label=ui("sweep measured", lang))
        if len(predicted) == len(xs):
            ax.plot(xs, predicted, marker="braille", color=MODEL,
                    label=ui("sweep model", lang))
    return fit


def figure_text(points: list[sweep.Point], backend: str, lang: str, width: int,
                height: int, color: bool = True) -> str:
    """The same curves as text, for a terminal (``commviz stats --plot``), their fit named
    under them; ``color`` False: no escape codes (a file, a pipe)."""
    plt = Figure()
    fit = draw(plt, points, backend, lang)
    plt.plotsize(width, height)
    named = text.sweep_fit_line(points, backend, lang) if fit is None else _named(fit, lang)
    drawn = plt.build()
    return f"{drawn if color else plotext.uncolorize(drawn)}\n{named}"
