"""The words of ``commviz whatif``: a recording's collectives, measured and fitted, beside what
NCCL's cost model predicts on another fabric and scale (``knowledge/whatif``), then per
training step and per day. Every figure the model makes is labelled a model's."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from commviz.knowledge import costmodel, whatif
from commviz.text import i18n


@dataclass(frozen=True)
class Row:
    """One ``stats`` row (op, ranks, size) with the fit's time and the model's."""

    stats: dict
    fitted_s: float | None
    model: whatif.Prediction | None
    extra: whatif.Prediction | None  # the model with --extra-latency-us on every network hop

    @property
    def key(self) -> tuple[str, int, int]:
        return self.stats["op"], self.stats["ranks"], self.stats["size"]

    @property
    def fit_error(self) -> float | None:
        """(fitted - measured) / measured."""
        if self.fitted_s is None or self.stats["time_p50_us"] <= 0:
            return None
        return self.fitted_s * 1e6 / self.stats["time_p50_us"] - 1


def rows(stats_rows: Sequence[dict], backend: str | None, fit: costmodel.Fit | None,
         scale: whatif.Scale, fabric: whatif.Fabric, extra_us: float) -> list[Row]:
    out = []
    for r in stats_rows:
        c = None if fit is None or backend is None or "object" in r["op"] else \
            costmodel.cost_of(r["op"], backend, r["ranks"], r["size"])
        model = whatif.predict(r["op"], r["size"], scale, fabric)
        extra = whatif.predict(r["op"], r["size"], scale, fabric, extra_us) \
            if extra_us and model is not None else None
        out.append(Row(r, fit.predict(c) if c is not None and fit is not None else None,
                       model, extra))
    return out


#: the fabrics the TUI's `w` key goes through, after none; the scale its line takes
TUI_FABRICS = ("ib-ndr", "ib-xdr", "roce")
TUI_SCALE = whatif.Scale(16, 8)


def next_fabric(current: str | None) -> str | None:
    """The fabric after ``current`` in ``TUI_FABRICS``, then None (the line hidden)."""
    order = (None, *TUI_FABRICS)
    return order[(order.index(current) + 1) % len(order)]


def inside_line(op: str, size: int, fabric_name: str, lang: str = "en") -> str | None:
    """The inside panel's `what if` line: the op replayed, S bytes, on ``fabric_name`` at
    ``TUI_SCALE``, a model's; None for an op the model has none of."""
    fabric = whatif.PRESETS[fabric_name]
    p = whatif.predict(op, size, TUI_SCALE, fabric)
    if p is None:
        return None
    time = f"{p.time_s * 1e6:.3g} us"
    if fabric.tail > 1:
        time += i18n.ui("whatif congested", lang).format(f"{p.congested_s * 1e6:.3g} us")
    return i18n.ui("whatif inside", lang).format(
        fabric=fabric_name, nodes=TUI_SCALE.nodes, per_node=TUI_SCALE.per_node,
        time=i18n.number(time, lang), algorithm=f"{p.algorithm}/{p.protocol}")


def header(lang: str = "en") -> str:
    return i18n.ui("whatif header", lang)


def fabric_line(fabric: whatif.Fabric, scale: whatif.Scale, lang: str = "en") -> str:
    ui = functools.partial(i18n.ui, lang=lang)
    num = functools.partial(i18n.number, lang=lang)
    if fabric.alpha_us is not None:
        link = ui("whatif custom").format(alpha=num(f"{fabric.alpha_us:g}"),
                                          beta=num(f"{fabric.intra.gbps:g}"))
    else:
        link = ui("whatif preset").format(name=fabric.name, intra=fabric.intra.kind,
                                          gbps=num(f"{fabric.intra.gbps:g}"))
        if fabric.inter is not None:
            link += ui("whatif network").format(gbps=num(f"{fabric.inter.gbps:g}"))
        if fabric.tail > 1:
            link += ui("whatif tail").format(tail=num(f"{fabric.tail:g}"))
    return i18n.ui_n("whatif scale", scale.nodes, lang, link=link, per_node=scale.per_node,
                     gpus=scale.n)


def table(report: Sequence[Row], scale: whatif.Scale, extra_us: float, tail: bool,
          lang: str = "en") -> str:
    """The rows, their numbers with a decimal point in every language, as ``stats_table``'s
    (programs read them too)."""
    ui = functools.partial(i18n.ui, lang=lang)
    size, count = ui("stats size"), ui("col count")
    measured, fitted, err_head = ui("whatif measured"), ui("whatif fit"), ui("whatif fit err")
    model_head = ui("whatif model").format(gpus=scale.n)
    widths = [max(w, len(h)) for w, h in ((12, size), (7, count), (17, measured), (9, fitted),
                                          (8, err_head), (15, model_head))]
    head = (f"{'op':<22} {'ranks':>5} " + " ".join(
        f"{h:>{w}}" for h, w in zip((size, count, measured, fitted, err_head, model_head),
                                    widths)) + f" {'algo/proto':>13}")
    congested = ui("whatif congested col")
    extra_head = ui("whatif extra col").format(x=f"{extra_us:g}")
    if tail:
        head += f" {congested:>14}"
    if extra_us:
        head += f" {extra_head:>17}"
    lines = [head, "-" * len(head)]
    no_model = ui("whatif no model")
    for r in report:
        s = r.stats
        err = r.fit_error
        cells = (s["size"], s["count"], f"{s['time_p50_us']:.1f}",
                 "-" if r.fitted_s is None else f"{r.fitted_s * 1e6:.1f}",
                 "-" if err is None else f"{err:+.0%}",
                 no_model if r.model is None else f"{r.model.time_s * 1e6:.1f}")
        line = f"{s['op']:<22} {s['ranks']:>5} " + " ".join(
            f"{c:>{w}}" for c, w in zip(cells, widths))
        line += " " + f"{'-' if r.model is None else f'{r.model.algorithm}/{r.model.protocol}':>13}"
        if tail:
            line += f" {'-' if r.model is None else f'{r.model.congested_s * 1e6:.1f}':>14}"
        if extra_us:
            delta = None if r.extra is None or r.model is None else \
                (r.extra.time_s - r.model.time_s) * 1e6
            line += f" {'-' if delta is None else f'+{delta:.1f}':>17}"
        lines.append(line)
    return "\n".join(lines)


def fit_line(fit: costmodel.Fit | None, backend: str | None, report: Sequence[Row],
             lang: str = "en") -> str:
    ui = functools.partial(i18n.ui, lang=lang)
    num = functools.partial(i18n.number, lang=lang)
    errors = sorted(abs(e) for e in (r.fit_error for r in report) if e is not None)
    if fit is None or not errors:
        return ui("whatif fit none backends" if backend is None else "whatif fit none shapes")
    beta = "inf" if fit.beta_bps == float("inf") else num(f"{fit.beta_bps / 1e9:.3g}")
    return ui("whatif fit line").format(
        backend=backend, alpha=num(f"{fit.alpha_s * 1e6:.3g}"), beta=beta, rows=len(errors),
        median=f"{errors[len(errors) // 2]:.0%}", largest=f"{errors[-1]:.0%}")


def step_lines(report: Sequence[Row], step: whatif.Step | None, step_s: float | None,
               fabric: whatif.Fabric, extra_us: float, lang: str = "en") -> list[str]:
    """How the step was taken, and the collectives' time per step and per day: recorded,
    modelled, under congestion, and what --extra-latency-us adds."""
    ui = functools.partial(i18n.ui, lang=lang)
    num = functools.partial(i18n.number, lang=lang)
    if step_s is not None:
        how = ui("whatif step given").format(s=num(f"{step_s:g}"))
    elif step is None:
        return [ui("whatif step none")]
    else:
        step_s = step.seconds
        how = i18n.ui_n("whatif step found", len(step.pattern), lang,
                        ms=num(f"{step_s * 1e3:.4g}"), repeats=step.repeats)
    by_key = {r.key: r for r in report}
    if step is None:  # a step given, none found: one of each recorded row a step
        how += ui("whatif step rows")
    pattern = step.pattern if step is not None else tuple(by_key)
    recorded = model = congested = extra = 0.0
    unmodelled = hops = 0
    for key in pattern:
        r = by_key.get(key)
        if r is None:
            continue
        recorded += r.stats["time_p50_us"] / 1e6
        if r.model is None:
            unmodelled += 1
            continue
        model += r.model.time_s
        congested += r.model.congested_s
        hops += r.model.inter_steps
        if r.extra is not None:
            extra += r.extra.time_s - r.model.time_s
    tail = fabric.tail > 1

    def day(seconds: float) -> str:
        return num(_duration(whatif.per_day(seconds, step_s)))

    per_step = ui("whatif per step").format(recorded=num(f"{recorded * 1e3:.4g}"),
                                            model=num(f"{model * 1e3:.4g}"))
    if tail:
        per_step += ui("whatif congested").format(num(f"{congested * 1e3:.4g} ms"))
    if unmodelled:
        per_step += i18n.ui_n("whatif unmodelled", unmodelled, lang)
    steps_a_day = whatif.DAY_S / step_s
    per_day = ui("whatif per day").format(steps=_count(steps_a_day, lang),
                                          recorded=day(recorded), model=day(model))
    if tail:
        per_day += ui("whatif congested").format(day(congested))
    lines = [how, per_step, per_day]
    if extra_us:
        lines.append(ui("whatif extra").format(x=num(f"{extra_us:g}"),
                                               step=num(f"{extra * 1e6:.4g}"), day=day(extra))
                     + ("" if extra else ui("whatif no network")))
    if hops:  # the seed article's point, in this job's numbers
        lines.append(ui("whatif teach").format(hops=hops, steps=_count(steps_a_day, lang),
                                               day=day(hops * 1e-6)))
    return lines


def _count(n: float, lang: str) -> str:
    """A whole count with its thousands grouped, by a dot where the decimal mark is a comma."""
    text = f"{n:,.0f}"
    return text.replace(",", ".") if i18n.ui("decimal separator", lang) == "," else text


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"
