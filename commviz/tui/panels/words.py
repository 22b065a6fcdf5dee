"""How the panels name what several of them show: a byte count, an operation with its
root, a finding's type."""

from __future__ import annotations

from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.viewer import findings_text
from commviz.viewer import plain_text as text
from commviz.viewer.model import Instance
from commviz.wire import protocol

# the finding types whose title is too long for a rank's state or a ring label: shorter
# names, within topology.STATE_W with their "⚠ "
SHORT_NAMES = {"straggler": N_("finding straggler"), "failed": N_("finding failed"),
               "slow": N_("finding slow")}


def finding_name(kind: str, lang: str) -> str:
    """A finding's type as the screen names it: its title in lower case (``hang``, ``lost
    rank``, ``travamento``), or a shorter name where the title is long."""
    short = SHORT_NAMES.get(kind)
    return i18n.ui(short, lang) if short else findings_text.TITLES[kind][lang].lower()


def bytes_text(n: float, lang: str) -> str:
    """A byte count as the panels write it ("1.5 MiB"), with the language's decimal mark."""
    return i18n.number(text.human_bytes(n), lang)


ROOT_GIVES = frozenset({"broadcast", "scatter", "broadcast_object_list", "scatter_object_list"})


def op_described(inst: Instance, lang: str) -> str:
    """The op's name, and for a rooted one its root: "broadcast from rank 0", "reduce to
    rank 3"."""
    if inst.op not in protocol.ROOTED or inst.root is None:
        return inst.op
    said = i18n.ui("op from root" if inst.op in ROOT_GIVES else "op to root", lang)
    return said.format(op=inst.op, root=inst.root)
