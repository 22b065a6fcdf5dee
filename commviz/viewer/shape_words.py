"""A group family's layout in words (``knowledge/group_shapes``), for the statistics panel
and ``commviz stats``: the layout as a fact, what it is likely for as a question
("128 groups of 8 consecutive ranks (within a node: tensor parallel?)"); and one group's, for
its lane in the timeline by group ("TP? r8-r15")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from commviz.knowledge import group_shapes as gs
from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.viewer import plain_text
from commviz.viewer.model import Model

# From this many ranks the statistics are also shown by group shape, where some shape is not
# the world's: below, one host's few ranks need no naming (and small jobs keep their views)
SHAPES_MIN_RANKS = 8

_LAYOUT = {gs.BLOCK: N_("shape block"), gs.STRIDED: N_("shape strided"),
           gs.IRREGULAR: N_("shape irregular"), gs.P2P: N_("shape pairs")}
_WHERE = {gs.WITHIN: N_("where within"), gs.ACROSS: N_("where across"),
          gs.SPANNING: N_("where spanning")}
_GUESS = {gs.TENSOR: N_("guess tensor"), gs.DATA: N_("guess data"),
          gs.PIPELINE: N_("guess pipeline"), gs.STAGE: N_("guess stage")}


# a guess's few letters, before a single group's ranks (a lane of the timeline by group)
_GUESS_SHORT = {gs.TENSOR: N_("guess tensor short"), gs.DATA: N_("guess data short"),
                gs.PIPELINE: N_("guess pipeline short"), gs.STAGE: N_("guess stage short")}
GROUP_LABEL_MAX = 24  # cells of a group's name in its lane; an irregular list is cut


def group_label(members: Sequence[int], guessed: Mapping[gs.Shape, str] | None = None,
                lang: str = "en") -> str:
    """One group as its lane in the timeline names it: its ranks by its layout, compressed
    (``r8-r15``; ``r5-r1021 stride 8``; neither: as ``ranks_label`` lists them, cut to
    GROUP_LABEL_MAX), after what its shape's groups are likely for (``guessed``, of
    ``guesses``) in a few letters (``TP? r8-r15``)."""
    ranks = sorted(set(members))
    shape = gs.shape_of(ranks)
    guess = (guessed or {}).get(shape, "")
    if shape.kind == gs.STRIDED and shape.size > 2:  # (two ranks read better listed)
        said = i18n.ui("group strided", lang).format(first=ranks[0], last=ranks[-1],
                                                      stride=shape.stride)
    else:
        said = plain_text.ranks_label(ranks)
    if guess in _GUESS_SHORT:
        said = f"{i18n.ui(_GUESS_SHORT[guess], lang)} {said}"
    return said if len(said) <= GROUP_LABEL_MAX else said[:GROUP_LABEL_MAX - 1] + "…"


def guesses(families: Sequence[gs.Family]) -> dict[gs.Shape, str]:
    """What each shape's groups are likely for, by their family (``Model.group_families``),
    where there is a guess: the lanes by group say it of each group."""
    return {f.shape: f.guess for f in families if f.guess}


def family_label(family: gs.Family, lang: str = "en", room: int | None = None) -> str:
    """The family's count and layout, then where it lies and the guess, in brackets; in
    ``room`` columns, the guess alone in them, then the layout shortened before them."""
    shape = family.shape
    if family.world:
        said = i18n.ui("shape world", lang).format(size=shape.size)
    elif family.count == 0:  # transfers of pairs whose first one the viewer did not see
        said = i18n.ui("shape pairs uncounted", lang).format(stride=shape.stride)
    elif shape.kind == gs.BLOCK and shape.size == 1:
        said = i18n.ui_n("shape single", family.count, lang)
    else:
        said = i18n.ui_n(_LAYOUT[shape.kind], family.count, lang, size=shape.size,
                         stride=shape.stride)
    where = i18n.ui(_WHERE[family.placement], lang).format(nodes=family.nodes) \
        if family.placement in _WHERE else ""
    guess = i18n.ui(_GUESS[family.guess], lang) if family.guess else ""
    notes = [i18n.ui("shape note", lang).format(where=where, guess=guess) if where and guess
             else i18n.ui("shape aside", lang).format(where or guess) if where or guess
             else ""]
    if where and guess:
        notes.append(i18n.ui("shape aside", lang).format(guess))
    for note in notes:
        if room is None or len(said) + len(note) <= room:
            return said + note
    note = notes[-1] if len(notes[-1]) <= room - 8 else ""
    return said[:max(0, room - 1 - len(note))] + "…" + note


def sections(model: Model) -> list[tuple[gs.Family, list[dict]]]:
    """``Model.shape_stats_table``'s rows under the family of their shape, in the families'
    order (``group_shapes.families``); [] where the shapes say nothing the table by op does
    not (a small job, or only the world's group)."""
    groups, pairs = model.group_families()
    rows = model.shape_stats_table()
    shapes = [model.shapes[row["shape"]] for row in rows]
    world = {f.shape for f in groups if f.world}
    if model.world_size() < SHAPES_MIN_RANKS or not set(shapes) - world:
        return []
    by: dict[gs.Shape, list[dict]] = {}
    for shape, row in zip(shapes, rows):
        by.setdefault(shape, []).append(row)
    known = {f.shape: f for f in groups + pairs}
    # a pair whose first transfer was let go of (a viewer behind) is in no family: uncounted
    found = [known.get(s, gs.Family(s, 0, gs.UNKNOWN, 0, False, gs.guess(s, gs.UNKNOWN)))
             for s in by]
    order = {f.shape: i for i, f in enumerate(groups + pairs)}
    found.sort(key=lambda f: (order.get(f.shape, len(order)), f.shape))
    return [(f, by[f.shape]) for f in found]


def sections_text(found: list[tuple[gs.Family, list[dict]]], lang: str = "en") -> str:
    """``sections`` as ``commviz stats`` prints them: a heading that says what is inferred,
    then each family's name over its rows, in ``plain_text.stats_table``'s columns."""
    lines = [i18n.ui("stats by shape", lang)]
    for k, (family, rows) in enumerate(found):
        table = plain_text.stats_table(rows, lang).splitlines()
        lines += table[:2] if k == 0 else []
        lines += [family_label(family, lang), *table[2:]]
    return "\n".join(lines)


def sections_json(found: list[tuple[gs.Family, list[dict]]], lang: str = "en") -> list[dict]:
    """``sections`` for ``commviz stats --json``: each family's facts, its name, its rows."""
    return [{"label": family_label(f, lang), "kind": f.shape.kind, "size": f.shape.size,
             "stride": f.shape.stride, "groups": f.count, "placement": f.placement,
             "nodes": f.nodes, "guess": f.guess or None,
             "rows": [{k: v for k, v in row.items() if k != "shape"} for row in rows]}
            for f, rows in found]
