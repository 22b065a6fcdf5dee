"""What the viewer panel says beside its counts: how the ranks' GPUs are joined."""

from __future__ import annotations

from commviz.text import explain
from commviz.viewer.model import Model


def gpu_links_line(model: Model, lang: str = "en") -> str:
    """One line on how the ranks' GPUs are joined (NVML, ``nvidia-smi topo -m``'s labels),
    by kind: the pairs, or how many; without a GPU, why (the ranks' own note); "" before any
    rank has said."""
    links = model.gpu_links()
    if links:
        by_kind: dict[str, list[str]] = {}
        for (a, b), kind in sorted(links.items()):
            by_kind.setdefault(kind, []).append(f"{a}↔{b}")
        return explain.ui("gpu links", lang) + " · ".join(
            f"{kind} {' '.join(pairs)}" if len(pairs) <= 3 else
            f"{kind} {explain.ui('pairs', lang).format(n=len(pairs))}"
            for kind, pairs in by_kind.items())
    notes: dict[str, list[int]] = {}
    for rank in sorted(model.gpu_topology):
        note = model.gpu_note(rank)
        if note:
            notes.setdefault(note, []).append(rank)
    if not notes:
        return ""
    note, ranks = max(notes.items(), key=lambda kv: len(kv[1]))
    if len(ranks) > 2 and ranks[-1] - ranks[0] == len(ranks) - 1:
        who = explain.ui("on ranks", lang).format(f"{ranks[0]}-{ranks[-1]}")
    else:
        who = explain.ui("on ranks" if len(ranks) > 1 else "on rank", lang).format(
            ", ".join(map(str, ranks)))
    more = explain.ui_n("other reasons", len(notes) - 1, lang) if len(notes) > 1 else ""
    why = explain.gpu_note(note.removeprefix("no GPU: "), lang)
    return explain.ui("no gpu on", lang).format(who=who, note=why, more=more)
