"""The words of ``commviz whatif``: a recording's collectives, measured and fitted, beside what
NCCL's cost model predicts on another fabric and scale (``knowledge/whatif``), then per
training step and per day. Every figure the model makes is labelled a model's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from commviz.knowledge import costmodel, whatif

HEADER = ("commviz whatif: a MODEL's prediction, not a measurement (NCCL's cost model with "
          "the figures and sources of docs/network.md); measured: the recording's own times")


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


def fabric_line(fabric: whatif.Fabric, scale: whatif.Scale) -> str:
    if fabric.alpha_us is not None:
        link = (f"custom: alpha {fabric.alpha_us:g} us a step on every hop, beta "
                f"{fabric.intra.gbps:g} GB/s a GPU (textbook ring, no NCCL tables)")
    else:
        link = f"{fabric.name}: {fabric.intra.kind} {fabric.intra.gbps:g} GB/s a GPU inside a node"
        if fabric.inter is not None:
            link += (f", network {fabric.inter.gbps:g} GB/s a GPU (one NIC a GPU), NCCL's "
                     "per-hop latencies")
        if fabric.tail > 1:
            link += f", tail x{fabric.tail:g} on the network's share under congestion"
    return (f"fabric {link}; scale {scale.nodes} node{'s' if scale.nodes > 1 else ''} x "
            f"{scale.per_node} GPUs = {scale.n}: every collective taken over all {scale.n} GPUs "
            "with its recorded size")


def table(report: Sequence[Row], scale: whatif.Scale, extra_us: float, tail: bool) -> str:
    head = (f"{'op':<22} {'ranks':>5} {'size':>12} {'count':>7} {'measured p50 (us)':>17} "
            f"{'fit (us)':>9} {'fit err':>8} {f'model@{scale.n} (us)':>15} {'algo/proto':>13}")
    if tail:
        head += f" {'congested (us)':>14}"
    if extra_us:
        head += f" {f'+{extra_us:g}us/hop (us)':>17}"
    lines = [head, "-" * len(head)]
    for r in report:
        s = r.stats
        err = r.fit_error
        line = (f"{s['op']:<22} {s['ranks']:>5} {s['size']:>12} {s['count']:>7} "
                f"{s['time_p50_us']:>17.1f} "
                f"{'-' if r.fitted_s is None else f'{r.fitted_s * 1e6:.1f}':>9} "
                f"{'-' if err is None else f'{err:+.0%}':>8} ")
        if r.model is None:
            line += f"{'no model':>15} {'-':>13}"
        else:
            line += (f"{r.model.time_s * 1e6:>15.1f} "
                     f"{f'{r.model.algorithm}/{r.model.protocol}':>13}")
        if tail:
            line += f" {'-' if r.model is None else f'{r.model.congested_s * 1e6:.1f}':>14}"
        if extra_us:
            delta = None if r.extra is None or r.model is None else \
                (r.extra.time_s - r.model.time_s) * 1e6
            line += f" {'-' if delta is None else f'+{delta:.1f}':>17}"
        lines.append(line)
    return "\n".join(lines)


def fit_line(fit: costmodel.Fit | None, backend: str | None, report: Sequence[Row]) -> str:
    errors = sorted(abs(e) for e in (r.fit_error for r in report) if e is not None)
    if fit is None or not errors:
        why = "its ranks ran more than one backend, or none said which" if backend is None \
            else "it needs two shapes (sizes or group sizes) of an op with a schedule"
        return f"fit on the recording: none made ({why}), so no error to report"
    beta = "inf" if fit.beta_bps == float("inf") else f"{fit.beta_bps / 1e9:.3g} GB/s"
    return (f"fit on the recording ({backend}, costmodel's alpha-beta over its own schedules): "
            f"alpha {fit.alpha_s * 1e6:.3g} us a step, beta {beta}; its error on the "
            f"recording's own {len(errors)} rows: median {errors[len(errors) // 2]:.0%}, "
            f"largest {errors[-1]:.0%}")


def step_lines(report: Sequence[Row], step: whatif.Step | None, step_s: float | None,
               fabric: whatif.Fabric, extra_us: float) -> list[str]:
    """How the step was taken, and the collectives' time per step and per day: recorded,
    modelled, under congestion, and what --extra-latency-us adds."""
    if step_s is not None:
        how = f"step: {step_s:g} s, as --step-s gave it"
    elif step is None:
        return ["step: not found (no sequence of collectives repeats twice in the recording); "
                "--step-s SECONDS gives it, for the figures per step and per day"]
    else:
        step_s = step.seconds
        how = (f"step: {step_s * 1e3:.4g} ms, the recorded wall time per repetition of its "
               f"most frequent sequence of collectives ({len(step.pattern)} "
               f"collective{'s' if len(step.pattern) > 1 else ''}, {step.repeats} repetitions; "
               "--step-s sets it)")
    by_key = {r.key: r for r in report}
    pattern = step.pattern if step is not None else tuple(by_key)
    if step is None:  # a step given, none found: one of each recorded row a step
        how += "; taken as one of each row above a step"
    recorded = model = congested = extra = 0.0
    unmodelled = 0
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
        if r.extra is not None:
            extra += r.extra.time_s - r.model.time_s
    steps_a_day = whatif.DAY_S / step_s
    lines = [how,
             f"per step: recorded {recorded * 1e3:.4g} ms of collectives; model "
             f"{model * 1e3:.4g} ms" + (f" ({congested * 1e3:.4g} ms congested)"
                                        if fabric.tail > 1 else "")
             + (f"; {unmodelled} collective{'s' if unmodelled > 1 else ''} of the step "
                "without a model left out of it" if unmodelled else ""),
             f"per day at the recorded rate ({steps_a_day:,.0f} steps): recorded "
             f"{_hours(whatif.per_day(recorded, step_s))} of collectives; model "
             f"{_hours(whatif.per_day(model, step_s))}"
             + (f" ({_hours(whatif.per_day(congested, step_s))} congested)"
                if fabric.tail > 1 else "")]
    if extra_us:
        lines.append(f"+{extra_us:g} us on every network hop (model): +{extra * 1e6:.4g} us a "
                     f"step, +{_hours(whatif.per_day(extra, step_s))} a day"
                     + ("" if extra else " (no collective crosses a network at this scale)"))
    return lines


def _hours(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"
