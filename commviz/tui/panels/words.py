"""How the panels name what several of them show: a byte count, an operation with its
root, a finding's type."""

from __future__ import annotations

from commviz.text import explain
from commviz.viewer import findings_text
from commviz.viewer import plain_text as text
from commviz.viewer.model import Instance
from commviz.wire import protocol

# a finding's type in Portuguese where a rank's state or a ring label shows it: within
# topology.STATE_W with its "⚠ "
_SHORT_PT = {"straggler": "atrasado", "failed": "falha"}


def finding_name(kind: str, lang: str) -> str:
    """A finding's type as the screen names it: its own name in English (``hang``, ``lost
    rank``), its title in Portuguese (``travamento``), shortened where it is long."""
    if lang == "en":
        return kind.replace("_", " ")
    return _SHORT_PT.get(kind) or findings_text.TITLES[kind][lang].lower()


def bytes_text(n: float, lang: str) -> str:
    """A byte count as the panels write it ("1.5 MiB"), with the language's decimal mark."""
    return explain.number(text.human_bytes(n), lang)


ROOT_GIVES = frozenset({"broadcast", "scatter", "broadcast_object_list", "scatter_object_list"})


def op_described(inst: Instance, lang: str) -> str:
    """The op's name, and for a rooted one its root: "broadcast from rank 0", "reduce to
    rank 3"."""
    if inst.op not in protocol.ROOTED or inst.root is None:
        return inst.op
    key = "op from root" if inst.op in ROOT_GIVES else "op to root"
    return explain.ui(key, lang).format(op=inst.op, root=inst.root)
