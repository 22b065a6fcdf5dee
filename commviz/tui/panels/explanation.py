"""The explanation panel: plain words on the operation the replay shows."""

from __future__ import annotations

from rich.text import Text

from commviz.knowledge import schedules
from commviz.text import explain, i18n
from commviz.text.i18n import N_
from commviz.tui.panels.words import op_described
from commviz.tui.rank_facts import backend_of
from commviz.viewer.model import Instance, Model
from commviz.wire import protocol


def explanation(model: Model, inst: Instance | None, lang: str,
                demo: str | None = None) -> Text:
    """Plain words on an operation: what it does, how its backend does it, when to use it,
    and the practical points that apply; in the ``ring_allreduce`` demo, the ring its
    transfers make first."""
    if inst is None:
        return Text(i18n.ui("waiting for peers", lang), style="dim")
    try:
        ex = explain.explain(inst.op, lang)
    except KeyError:
        return Text(inst.op, style="dim")
    out = Text()
    if demo == "ring_allreduce" and inst.op in protocol.P2P:
        out.append(i18n.ui("ring demo title", lang) + "\n", style="bold")
        out.append(i18n.ui("ring demo", lang) + "\n")
    if demo == "sweep":  # how to read its curves, before the op's own words
        out.append(i18n.ui("sweep demo title", lang) + "\n", style="bold")
        out.append(i18n.ui("sweep demo", lang) + "\n")
    described = op_described(inst, lang)
    _explained(out, ex, backend_of(model, inst.group), lang,
               described if described != inst.op else "")
    return out


def before_first(model: Model, demo: str, paused: bool, lang: str,
                 playback: bool = False, following: bool = False) -> Text:
    """The explanation panel before a demo's first operation is done: which key steps or
    plays it (``playback``: its recording; ``following``: the teacher's, a class's), and
    what its operation is about to do (a demo named after one)."""
    out = Text()
    if following:
        words = N_("before following playback")
    elif playback:  # which key starts it, in the words of this session
        words = N_("before paused playback") if paused else N_("before playing playback")
    else:
        words = N_("before paused") if paused else N_("before playing")
    out.append(i18n.ui(words, lang) + "\n", style="bold yellow")
    if demo not in explain.EXPLAINED:  # straggler, ddp...: which op comes first is theirs
        out.append(i18n.ui("demo starts", lang).format(demo=demo) + "\n", style="italic")
        return out
    out.append(i18n.ui("next op", lang).format(op=demo) + "\n", style="bold cyan")
    backends = {s.backend for s in model.ranks.values()} & set(schedules.BACKENDS)
    _explained(out, explain.explain(demo, lang), backends.pop() if len(backends) == 1 else None,
               lang)
    return out


def _explained(out: Text, ex: explain.Explanation, backend: str | None, lang: str,
               call: str = "") -> None:
    """An operation's explanation: how ``backend`` does it (None: every backend); ``call``,
    what this call does that the op's name does not say (its root), under the title."""
    out.append(ex.title + "\n", style="bold")
    if call:
        out.append(f"{i18n.ui('this call', lang)}: {call}\n", style="bold cyan")
    out.append(ex.what + "\n")
    for name, how in ex.how.items():
        if backend is None or name == backend:
            out.append(f"{i18n.ui('how', lang)} ({name}): ", style="bold cyan")
            out.append(how + "\n")
    out.append(f"{i18n.ui('when', lang)}: ", style="bold cyan")
    out.append(ex.when + "\n")
    for tip in ex.tips:
        if backend in (None, "nccl") or tip not in ex.nccl_tips:
            out.append("• " + tip + "\n", style="italic")
