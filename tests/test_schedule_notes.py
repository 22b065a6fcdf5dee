"""The Portuguese schedule notes stay in step with the English ones in ``schedules``."""

import dataclasses
import re

import pytest

from commviz.knowledge import schedules
from commviz.knowledge.schedules import BACKENDS, canonical_op, schedule
from commviz.text import prose, schedule_notes
from commviz.text.schedule_notes import note

PT = prose("pt", "schedules")  # the Portuguese words, each language's in its schedules.toml

CASES = [(op, backend) for op in sorted(schedules._FAMILY) for backend in BACKENDS
         if (canonical_op(op), backend) in schedules._BUILDERS]


def _numbers(text: str) -> list[str]:
    return sorted(re.findall(r"\d+", text))


def test_tables_cover_every_builder_and_object_note():
    assert set(schedule_notes._NOTES) == set(schedules._BUILDERS)
    assert set(schedule_notes._OP_NOTES) == set(schedules._OP_BUILDERS)
    assert set(schedule_notes._OBJECT) == set(schedules._OBJECT_NOTE)


@pytest.mark.parametrize("size", [2, 1000])
@pytest.mark.parametrize("n", [1, 2, 4, 5])
@pytest.mark.parametrize(("op", "backend"), CASES)
def test_every_note_in_both_languages(op, backend, n, size):
    s = schedule(op, backend, n, size)
    assert note(s, "en") == s.note
    assert schedule_notes._compose(s, "en") == s.note  # the table still matches schedules
    pt = note(s, "pt")
    assert pt and pt != s.note
    assert _numbers(pt) == _numbers(s.note)


def test_pt_gloo_all_reduce():
    assert note(schedule("all_reduce", "gloo", 4, 1000), "pt") == (
        "all_reduce em anel do gloo (envia para rank-1): cada pedaço também vai em pipeline, "
        "em 2 segmentos, desenhados como um só")


def test_pt_nccl_broadcast_uses_the_chunk_count():
    s = schedule("broadcast", "nccl", 4, 1000, root=2)
    assert s.chunks == 4
    assert note(s, "pt") == ("cadeia em pipeline do NCCL a partir do root, na ordem do anel, "
                             "desenhada com 4 pedaço(s) (o NCCL usa muitas fatias)")
    assert "com 2 pedaço(s)" in note(schedule("broadcast", "nccl", 4, 2), "pt")


def test_pt_all_gather_object_and_one_rank():
    assert note(schedule("all_gather_object", "nccl", 1, 30), "pt") == (
        "all_gather em anel do NCCL, um canal, supondo o anel 0->1->..->n-1; fatias desenhadas "
        "como um único bloco; um rank só: nada se move; all_gather_object primeiro faz "
        "all-gather dos tamanhos dos objetos serializados, depois dos conteúdos completados "
        "até o maior tamanho; só o all_gather do conteúdo é desenhado")


def test_a_changed_english_note_falls_back_to_english():
    s = dataclasses.replace(schedule("all_reduce", "gloo", 4, 1000), note="something new")
    assert note(s, "pt") == "something new"


def test_unknown_lang():
    with pytest.raises(ValueError, match="lang"):
        note(schedule("all_reduce", "gloo", 4, 1000), "fr")


@pytest.mark.parametrize("n", [2, 4, 5])
@pytest.mark.parametrize(("op", "backend"), CASES)
def test_every_algorithm_and_step_word_has_its_portuguese(op, backend, n):
    s = schedule(op, backend, n, 1000, root=0)
    assert s.algorithm in PT["algorithm"]
    for step in s.steps:
        word = schedule_notes._STEP_WORD.match(step.label)
        assert word is None or word.group(2) in PT["step_word"], step.label
        assert _numbers(schedule_notes.step_label(step.label, "pt")) == _numbers(step.label)


def test_step_labels_in_portuguese_keep_their_numbers_and_ring_names():
    words = {label: schedule_notes.step_label(label, "pt")
             for label in ("tree 0", "pair +2", "round 1", "to root", "check in", "RS1",
                           "b3 AG0", "pipe 12")}
    assert words == {"tree 0": "árvore 0", "pair +2": "par +2", "round 1": "rodada 1",
                     "to root": "à raiz", "check in": "chegada", "RS1": "RS1",
                     "b3 AG0": "b3 AG0", "pipe 12": "etapa 12"}
    assert schedule_notes.step_label("tree 0", "en") == "tree 0"
    assert schedule_notes.algorithm(schedule("broadcast", "gloo", 4, 8, root=0), "pt") \
        == "árvore binomial"
    with pytest.raises(ValueError, match="lang"):
        schedule_notes.step_label("tree 0", "fr")
