"""What each torch.distributed operation does, in every language commviz speaks.

The teaching screen shows, next to the animation, what the selected op means, how the
backend that ran it really moves the data (true to ``knowledge/collectives.md``: gloo's
ring toward rank - 1, its binomial-tree broadcast, NCCL's rings and chains), when to use
it and practical tips. The words are data, one file per op and language
(``commviz/text/<lang>/explain/<op>.toml``, tips several ops share in ``<lang>/tips.toml``):
a teacher edits them without reading Python. Cheap to import: no Textual, no torch.

A variant (a deprecated name, a single-tensor form) ``extends`` the op it forwards to and says
only what differs, at least the title, which always names the actual function. The structure
(``extends``, the tips' names and order, which tips are NCCL-only) is English's; a language
gives the texts, and where it lacks one, English's is shown.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from commviz.text import HERE, flowing, prose
from commviz.text.i18n import check_lang

BACKENDS: tuple[str, ...] = ("gloo", "nccl")


@dataclass(frozen=True)
class Explanation:
    op: str
    title: str
    what: str
    how: dict[str, str]
    when: str
    tips: tuple[str, ...]
    nccl_tips: frozenset[str] = frozenset()  # those of ``tips`` that only NCCL users can act on


EXPLAINED: tuple[str, ...] = tuple(sorted(p.stem for p in (HERE / "en" / "explain").glob("*.toml")))


def _text(lang: str, name: str, *path: str) -> str | None:
    """The text at ``path`` in ``<lang>/<name>.toml``, or English's where that lacks it."""
    for source in dict.fromkeys((lang, "en")):
        found: Any = prose(source, name)
        for key in path:
            found = found.get(key) if isinstance(found, dict) else None
        if isinstance(found, str):
            return flowing(found)
    return None


def _tip(op: str, lang: str, name: str) -> tuple[str, bool]:
    """(text, NCCL-only) of the tip ``name`` of ``op``: one of its file's own, or shared."""
    own = prose("en", f"explain/{op}").get("tip", {})
    where, path = (f"explain/{op}", ("tip", name)) if name in own else ("tips", (name,))
    spec = own.get(name) or prose("en", "tips").get(name)
    text = _text(lang, where, *path, "text")
    if spec is None or text is None:
        raise KeyError(f"{op}: no tip {name!r} in its file or in tips.toml")
    return text, bool(spec.get("nccl_only", False))


def _fields(op: str, lang: str) -> dict[str, Any]:
    """The explanation of ``op`` as a dict, a variant's merged over the op it extends."""
    spec = prose("en", f"explain/{op}")
    parent = spec.get("extends")
    fields = dict(_fields(parent, lang)) if parent else {"how": {}, "tips": ()}
    name = f"explain/{op}"
    for field in ("title", "what", "when"):
        if field in spec:
            fields[field] = _text(lang, name, field)
    fields["how"] = {**fields["how"], **{backend: _text(lang, name, "how", backend)
                                         for backend in spec.get("how", {})}}
    if "tips" in spec:
        fields["tips"] = tuple(_tip(op, lang, tip) for tip in spec["tips"])
    fields["tips"] = tuple(_tip(op, lang, tip) for tip in spec.get("extra_tips", ())) \
        + fields["tips"]
    return fields


@functools.cache
def _build(op: str, lang: str) -> Explanation:
    fields = _fields(op, lang)
    return Explanation(op=op, title=fields["title"], what=fields["what"], how=fields["how"],
                       when=fields["when"], tips=tuple(text for text, _ in fields["tips"]),
                       nccl_tips=frozenset(text for text, nccl in fields["tips"] if nccl))


def explain(op: str, lang: str = "en") -> Explanation:
    """The explanation of ``op`` (a protocol op name) in ``lang``."""
    check_lang(lang)
    if op not in EXPLAINED:
        raise KeyError(f"no explanation for op {op!r}; known ops: {', '.join(EXPLAINED)}")
    found = _build(op, lang)
    return replace(found, how=dict(found.how))  # a fresh dict: the shared one stays intact


__all__ = ["BACKENDS", "EXPLAINED", "Explanation", "explain"]
