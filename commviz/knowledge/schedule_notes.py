"""The one-line ``Schedule.note``, the algorithm's name and the step labels, in English or
Brazilian Portuguese.

``schedules`` writes each note in English, inline in its builders, and stays stdlib-only and
language-free. The teaching UI is bilingual, so this module keeps, next to each English note,
its Portuguese translation, and composes both from the same facts of the schedule: the
family (``canonical_op(s.op)``), the backend, the chunk count, ``n`` and the op name, exactly
as ``schedule()`` does. A test checks that the English it composes equals ``s.note`` for
every op, backend and group size; if a note changes in ``schedules`` without this table,
``note(s, "pt")`` falls back to the English note rather than show a stale translation.
"""

from __future__ import annotations

import re

from commviz.knowledge.schedules import (
    MONITORED_BARRIER_BYTES,
    NCCL_BARRIER_BYTES,
    Schedule,
    canonical_op,
)

LANGS = ("en", "pt")

# (family, backend) -> (English, Portuguese). Fields: {m} = s.chunks, {nb}/{mb} = the fixed
# barrier sizes. Point-to-point families share one note on both backends.
_P2P = ("point-to-point drawn as the pair 0 (sender) -> 1 (receiver); map to real ranks",
        "ponto a ponto desenhado como o par 0 (remetente) -> 1 (destinatário); "
        "associe aos ranks reais")
_NOTES: dict[tuple[str, str], tuple[str, str]] = {
    ("all_reduce", "gloo"): (
        "gloo ring all_reduce (sends to rank-1): each chunk is also pipelined in 2 segments, "
        "drawn as one",
        "all_reduce em anel do gloo (envia para rank-1): cada pedaço também vai em pipeline, "
        "em 2 segmentos, desenhados como um só"),
    ("all_reduce", "nccl"): (
        "NCCL ring all_reduce, one channel, ring 0->1->..->n-1 assumed (the real order is in "
        "NCCL's INIT log; NCCL may pick TREE/NVLS instead); slices drawn as one chunk",
        "all_reduce em anel do NCCL, um canal, supondo o anel 0->1->..->n-1 (a ordem real está "
        "no log INIT do NCCL; o NCCL pode escolher TREE/NVLS em vez dele); fatias desenhadas "
        "como um único pedaço"),
    ("all_gather", "gloo"): (
        "gloo ring all_gather (sends to rank+1): each block moves in 2 halves, drawn as one",
        "all_gather em anel do gloo (envia para rank+1): cada bloco viaja em 2 metades, "
        "desenhadas como uma só"),
    ("all_gather", "nccl"): (
        "NCCL ring all_gather, one channel, ring 0->1->..->n-1 assumed; slices drawn as one "
        "block",
        "all_gather em anel do NCCL, um canal, supondo o anel 0->1->..->n-1; fatias desenhadas "
        "como um único bloco"),
    ("reduce_scatter", "gloo"): (
        "gloo reduce_scatter runs the full ring all_reduce (2(n-1) steps) and each rank keeps "
        "chunk[rank]; segments drawn as one",
        "o reduce_scatter do gloo roda o all_reduce em anel completo (2(n-1) passos) e cada "
        "rank fica com chunk[rank]; segmentos desenhados como um só"),
    ("reduce_scatter", "nccl"): (
        "NCCL ring reduce_scatter, one channel, ring 0->1->..->n-1 assumed; slices drawn as "
        "one block",
        "reduce_scatter em anel do NCCL, um canal, supondo o anel 0->1->..->n-1; fatias "
        "desenhadas como um único bloco"),
    ("broadcast", "gloo"): (
        "gloo binomial-tree broadcast over vrank=(rank-root) mod n; the whole buffer moves at "
        "each hop",
        "broadcast do gloo em árvore binomial sobre vrank=(rank-root) mod n; o buffer inteiro "
        "viaja a cada salto"),
    ("broadcast", "nccl"): (
        "NCCL pipelined chain from the root along ring order, drawn with {m} chunk(s) (NCCL "
        "uses many slices)",
        "cadeia em pipeline do NCCL a partir do root, na ordem do anel, desenhada com {m} "
        "pedaço(s) (o NCCL usa muitas fatias)"),
    ("reduce", "gloo"): (
        "gloo reduce: ring reduce-scatter (sends to rank-1), then every rank sends its reduced "
        "chunk to the root; segments drawn as one",
        "reduce do gloo: reduce-scatter em anel (envia para rank-1), depois cada rank envia o "
        "seu pedaço reduzido ao root; segmentos desenhados como um só"),
    ("reduce", "nccl"): (
        "NCCL pipelined chain root+1 -> .. -> root along ring order, drawn with {m} chunk(s) "
        "(NCCL uses many slices)",
        "cadeia em pipeline do NCCL root+1 -> .. -> root, na ordem do anel, desenhada com {m} "
        "pedaço(s) (o NCCL usa muitas fatias)"),
    ("gather", "gloo"): (
        "gloo gather: the root posts all n-1 receives at once",
        "gather do gloo: o root posta os n-1 recebimentos de uma vez"),
    ("gather", "nccl"): (
        "NCCL has no gather kernel: PyTorch groups n-1 send/recv to the root",
        "o NCCL não tem kernel de gather: o PyTorch agrupa n-1 send/recv para o root"),
    ("scatter", "gloo"): (
        "gloo scatter: the root posts all n-1 sends at once",
        "scatter do gloo: o root posta os n-1 envios de uma vez"),
    ("scatter", "nccl"): (
        "NCCL has no scatter kernel: PyTorch groups n-1 send/recv from the root",
        "o NCCL não tem kernel de scatter: o PyTorch agrupa n-1 send/recv a partir do root"),
    ("all_to_all", "gloo"): (
        "gloo posts all n-1 sends (to r+i) at once; drawn as n-1 rounds; chunk s*n+d is the "
        "block s sends to d",
        "o gloo posta os n-1 envios (para r+i) de uma vez; desenhados como n-1 rodadas; o "
        "pedaço s*n+d é o bloco que s envia para d"),
    ("all_to_all", "nccl"): (
        "NCCL has no all_to_all kernel: PyTorch groups n-1 send/recv per rank, drawn as n-1 "
        "rounds; chunk s*n+d is the block s sends to d",
        "o NCCL não tem kernel de all_to_all: o PyTorch agrupa n-1 send/recv por rank, "
        "desenhados como n-1 rodadas; o pedaço s*n+d é o bloco que s envia para d"),
    ("barrier", "gloo"): (
        "gloo dissemination barrier: 0-byte notifications; holdings track who has arrived",
        "barrier de disseminação do gloo: notificações de 0 byte; o que cada rank guarda "
        "registra quem já chegou"),
    ("barrier", "nccl"): (
        "NCCL barrier = all_reduce of a {nb}-byte tensor, drawn as the ring all_reduce (NCCL "
        "likely picks TREE/LL for so few bytes)",
        "barrier do NCCL = all_reduce de um tensor de {nb} bytes, desenhado como o all_reduce "
        "em anel (com tão poucos bytes o NCCL provavelmente escolhe TREE/LL)"),
    ("monitored_barrier", "gloo"): (
        "gloo monitored_barrier: {mb}-byte send/recv to and from rank 0; holdings track who "
        "has arrived",
        "monitored_barrier do gloo: send/recv de {mb} bytes com o rank 0, na ida e na volta; "
        "o que cada rank guarda registra quem já chegou"),
    ("send", "gloo"): _P2P, ("send", "nccl"): _P2P,
    ("recv", "gloo"): _P2P, ("recv", "nccl"): _P2P,
}

# (op, backend) -> (English, Portuguese) for the ops ``schedules._OP_BUILDERS`` draws apart
# from their family; looked up before ``_NOTES``.
_OP_NOTES: dict[tuple[str, str], tuple[str, str]] = {
    ("reduce_scatter", "gloo"): (
        "gloo reduce_scatter (list form) runs n ring all_reduces, one per block (2(n-1) steps "
        "each), drawn one after another, and each rank r keeps block r; chunk b*n+c is part "
        "c of block b; segments drawn as one",
        "o reduce_scatter do gloo (forma com lista) roda n all_reduces em anel, um por bloco "
        "(2(n-1) passos cada), desenhados um depois do outro, e cada rank r fica com "
        "o bloco r; o pedaço b*n+c é a parte c do bloco b; segmentos desenhados como um só"),
}

_ONE_RANK = ("one rank: nothing moves", "um rank só: nada se move")

# Family -> suffix for the object collectives (ops whose name contains "object").
_OBJECT: dict[str, tuple[str, str]] = {
    "send": (
        "send_object_list also sends the pickled sizes first; only the payload is drawn",
        "send_object_list também envia antes os tamanhos dos objetos serializados; só o "
        "conteúdo é desenhado"),
    "recv": (
        "recv_object_list also receives the pickled sizes first; only the payload is drawn",
        "recv_object_list também recebe antes os tamanhos dos objetos serializados; só o "
        "conteúdo é desenhado"),
    "broadcast": (
        "broadcast_object_list first broadcasts the pickled sizes; only the payload broadcast "
        "is drawn",
        "broadcast_object_list primeiro faz broadcast dos tamanhos dos objetos serializados; "
        "só o broadcast do conteúdo é desenhado"),
    "all_gather": (
        "all_gather_object first all-gathers the pickled sizes, then padded payloads; only the "
        "payload all_gather is drawn",
        "all_gather_object primeiro faz all-gather dos tamanhos dos objetos serializados, "
        "depois dos conteúdos completados até o maior tamanho; só o all_gather do conteúdo é "
        "desenhado"),
    "gather": (
        "gather_object first all-gathers the pickled sizes; only the payload gather is drawn",
        "gather_object primeiro faz all-gather dos tamanhos dos objetos serializados; só o "
        "gather do conteúdo é desenhado"),
    "scatter": (
        "scatter_object_list also broadcasts the largest size and scatters the sizes; only the "
        "payload scatter is drawn",
        "scatter_object_list também faz broadcast do maior tamanho e scatter dos tamanhos; só "
        "o scatter do conteúdo é desenhado"),
}


def _compose(s: Schedule, lang: str) -> str:
    """The note of ``s`` in ``lang``, built from its facts as ``schedules.schedule()`` does."""
    i = LANGS.index(lang)
    family = canonical_op(s.op)
    texts = _OP_NOTES.get((s.op, s.backend)) or _NOTES[(family, s.backend)]
    parts = [texts[i].format(
        m=s.chunks, nb=NCCL_BARRIER_BYTES, mb=MONITORED_BARRIER_BYTES)]
    if s.n == 1:
        parts.append(_ONE_RANK[i])
    if "object" in s.op:
        parts.append(_OBJECT[family][i])
    return "; ".join(parts)


def note(s: Schedule, lang: str) -> str:
    """What the drawing of ``s`` simplifies, in ``lang`` ("en" or "pt").

    English is ``s.note`` itself. Portuguese is given only while this module's English for the
    same facts still matches ``s.note``; otherwise the English note is returned.
    """
    _check(lang)
    if lang == "en":
        return s.note
    try:
        if _compose(s, "en") == s.note:
            return _compose(s, lang)
    except (KeyError, ValueError):  # a family or backend this table does not know yet
        pass
    return s.note


# Schedule.algorithm -> Portuguese; an algorithm missing here is shown in English
_ALGORITHMS_PT = {
    "ring": "anel",
    "all_reduce + slice": "all_reduce + recorte",
    "all_reduce per block": "um all_reduce por bloco",
    "binomial tree": "árvore binomial",
    "chain": "cadeia",
    "ring reduce-scatter + gather": "reduce-scatter em anel + gather",
    "flat": "direto à raiz",
    "grouped send/recv": "send/recv agrupados",
    "pairwise": "aos pares",
    "dissemination": "disseminação",
    "ring all_reduce": "all_reduce em anel",
    "flat (rank 0 coordinates)": "direto (o rank 0 coordena)",
    "direct": "direto",
}

# the words of Step.label (a word, then a number: "tree 0", "pair +1"); ring labels such as
# RS1 and AG2 and block prefixes such as "b0 " read the same in both languages
_STEP_WORDS_PT = {
    "tree": "árvore",
    "pipe": "etapa",
    "to root": "à raiz",
    "pair": "par",
    "round": "rodada",
    "check in": "chegada",
    "release": "liberação",
    "send": "envio",
    "gather": "gather",
    "scatter": "scatter",
}
_STEP_WORD = re.compile(r"^(b\d+ )?([a-z][a-z ]*?)( [+]?\d+)?$")


def algorithm(s: Schedule, lang: str) -> str:
    """The name of the algorithm ``s`` draws, in ``lang``."""
    _check(lang)
    return s.algorithm if lang == "en" else _ALGORITHMS_PT.get(s.algorithm, s.algorithm)


def step_label(label: str, lang: str) -> str:
    """A ``Step.label`` in ``lang``: its word translated, its numbers kept."""
    _check(lang)
    found = _STEP_WORD.match(label)
    if lang == "en" or found is None:
        return label
    block, word, number = found.groups()
    return f"{block or ''}{_STEP_WORDS_PT.get(word, word)}{number or ''}"


def _check(lang: str) -> None:
    if lang not in LANGS:
        raise ValueError(f"unknown lang {lang!r}; known: {', '.join(LANGS)}")
