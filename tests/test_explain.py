"""The teaching texts: complete in both languages, true to the backends, in our own words."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from commviz.text import catalogue, i18n
from commviz.text import explain as ex
from commviz.text.i18n import LANGS
from commviz.wire import protocol

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"  # shared/ beside the repo
FIELDS = ("title", "what", "when")


def _texts(e: ex.Explanation) -> list[str]:
    return [e.title, e.what, e.when, *e.how.values(), *e.tips]


@pytest.mark.parametrize("op", protocol.OPS)
@pytest.mark.parametrize("lang", LANGS)
def test_every_op_is_explained_completely(op, lang):
    e = ex.explain(op, lang)
    assert e.op == op
    assert e.title.startswith(f"{op}: ") and len(e.title) > len(op) + 5
    for name in FIELDS:
        assert getattr(e, name).strip(), name
    assert set(e.how) == {"gloo", "nccl"}
    assert all(text.strip() for text in e.how.values())
    assert e.tips and all(tip.strip() for tip in e.tips)
    assert all("  " not in text for text in _texts(e))


@pytest.mark.parametrize("op", protocol.OPS)
def test_english_and_portuguese_differ_in_every_field(op):
    en, pt = ex.explain(op, "en"), ex.explain(op, "pt")
    for name in FIELDS:
        assert getattr(en, name) != getattr(pt, name), name
    for backend in ex.BACKENDS:
        assert en.how[backend] != pt.how[backend], backend
    assert len(en.tips) == len(pt.tips)
    for a, b in zip(en.tips, pt.tips):
        assert a != b


def test_explained_ops_are_exactly_the_protocol_ops():
    assert set(ex.EXPLAINED) == set(protocol.OPS)


def test_returned_how_is_a_copy():
    ex.explain("all_reduce").how["gloo"] = "mutated"
    assert ex.explain("all_reduce").how["gloo"] != "mutated"


def test_portuguese_has_accents_and_english_has_none():
    pt = " ".join(t for op in protocol.OPS for t in _texts(ex.explain(op, "pt")))
    en = " ".join(t for op in protocol.OPS for t in _texts(ex.explain(op, "en")))
    assert {"ç", "ã", "é", "á", "ó", "ú", "í", "ê"} <= set(pt)
    assert not re.search(r"[^\x00-\x7f]", en)


def test_unknown_op_and_lang():
    with pytest.raises(KeyError, match="no explanation for op 'allreduce'"):
        ex.explain("allreduce")
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        ex.explain("all_reduce", "fr")
    with pytest.raises(ValueError):
        i18n.ui("paused", "pt_BR")
    with pytest.raises(KeyError):
        i18n.ui("no such key", "en")


@pytest.mark.parametrize(("env", "lang"), [
    ({"LANG": "pt_BR.UTF-8"}, "pt"),
    ({"LANG": "pt_PT.UTF-8"}, "pt"),
    ({"LANG": "en_US.UTF-8"}, "en"),
    ({"LANG": "en_US"}, "en"),
    ({"LANG": "C"}, "en"),
    ({"LANG": "C.UTF-8"}, "en"),
    ({}, "en"),
    ({"LC_ALL": "en_US.UTF-8", "LANG": "pt_BR.UTF-8"}, "en"),
    ({"LC_ALL": "pt_BR.UTF-8", "LANG": "en_US.UTF-8"}, "pt"),
    ({"LC_MESSAGES": "pt_BR", "LANG": "en_US"}, "pt"),
    ({"LC_ALL": "C", "LC_MESSAGES": "pt_BR"}, "en"),
    ({"LC_ALL": "", "LANG": "pt_BR.UTF-8"}, "pt"),  # empty counts as unset
])
def test_default_lang(env, lang):
    assert i18n.default_lang(env) == lang


def test_default_lang_reads_os_environ(monkeypatch):
    for name in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "pt_BR.UTF-8")
    assert i18n.default_lang() == "pt"
    monkeypatch.setenv("LANG", "en_GB.UTF-8")
    assert i18n.default_lang() == "en"


REQUIRED_UI = ("paused", "key step", "speed", "waiting for peers", "legend transferring",
               "state idle", "state done", "schematic", "measured", "predicted", "help", "quit",
               "key restart", "ranks", "timeline", "buffers", "explanation", "source",
               "stats title", "log skew")


def _ui_texts(lang: str) -> dict[str, tuple[str, ...]]:
    """Every UI string of ``lang``'s catalogue: its one form, or its plural forms."""
    found = catalogue.messages(catalogue.read(lang))
    return {key: catalogue.forms(message) for key, message in found.items()}


def test_ui_strings_exist_in_both_languages():
    texts = {lang: _ui_texts(lang) for lang in LANGS}
    assert set(texts) == set(LANGS) >= {"en", "pt"}
    assert set(texts["en"]) == set(texts["pt"])
    assert len(texts["en"]) >= 20
    assert set(REQUIRED_UI) <= set(texts["en"])
    for key, en in texts["en"].items():
        for lang in LANGS:
            assert all(form.strip() for form in texts[lang][key]), (key, lang)
            if len(en) == 1:
                assert i18n.ui(key, lang) == texts[lang][key][0]
    assert i18n.ui("paused", "pt") == "Pausado"
    assert i18n.ui("waiting for peers") == "Waiting for peers"


# --- Facts that must stay true to knowledge/collectives.md and the seeds ---------------------

def test_gloo_all_reduce_is_a_ring_toward_the_previous_rank():
    en = ex.explain("all_reduce", "en").how["gloo"]
    pt = ex.explain("all_reduce", "pt").how["gloo"]
    assert "ring" in en and "previous" in en and "rank-1" in en and "2(n-1)" in en
    assert "anel" in pt and "anterior" in pt and "rank-1" in pt and "2(n-1)" in pt
    # and the opposite direction is not claimed for gloo's all_reduce
    assert "sends to rank+1" not in en


def test_gloo_all_gather_goes_the_other_way():
    assert "rank+1" in ex.explain("all_gather", "en").how["gloo"]
    assert "rank+1" in ex.explain("all_gather", "pt").how["gloo"]


def test_broadcast_gloo_tree_nccl_chain():
    assert "binomial tree" in ex.explain("broadcast", "en").how["gloo"]
    assert "árvore binomial" in ex.explain("broadcast", "pt").how["gloo"]
    assert "chain" in ex.explain("broadcast", "en").how["nccl"]
    assert "cadeia" in ex.explain("broadcast", "pt").how["nccl"]


def test_reduce_scatter_single_on_gloo_is_an_all_reduce():
    for op in ("reduce_scatter_single", "reduce_scatter_tensor", "reduce_scatter"):
        for lang in LANGS:
            assert "all_reduce" in ex.explain(op, lang).how["gloo"]
    assert "6" in ex.explain("reduce_scatter_single").how["gloo"]


def test_reduce_scatter_list_form_on_gloo_is_one_all_reduce_per_block():
    """ProcessGroupGloo::reduce_scatter all-reduces each block apart: n rings, 24 steps at 4."""
    en, pt = (ex.explain("reduce_scatter", lang).how["gloo"] for lang in ("en", "pt"))
    assert "one all_reduce per block" in en and "24 steps at n=4" in en
    assert "um all_reduce por bloco" in pt and "24 passos com n=4" in pt
    for op in ("reduce_scatter_single", "reduce_scatter_tensor"):
        assert "per block" not in ex.explain(op).how["gloo"]


@pytest.mark.parametrize("op", ["send", "recv", "isend", "irecv", "send_object_list",
                                "recv_object_list"])
def test_point_to_point_tips_mention_the_lazy_first_transfer(op):
    en = " ".join(ex.explain(op, "en").tips)
    pt = " ".join(ex.explain(op, "pt").tips)
    assert "first" in en and "lazily" in en
    assert "primeir" in pt and "sob demanda" in pt


def test_seed_tips_are_taught():
    def tips(op, lang="en"):
        return " ".join(ex.explain(op, lang).tips)
    assert "torch.cuda.synchronize()" in tips("isend") and "request.wait()" in tips("isend")
    assert "overlap" in " ".join([tips("irecv"), ex.explain("irecv").when])
    assert "del" in tips("scatter") and "None" in tips("scatter")
    assert "NCCL_DEBUG=INFO" in tips("all_reduce")
    assert all(w in tips("all_reduce") for w in ("InfiniBand", "RoCE", "RDMA", "GPUDirect"))
    assert "NCCL_DEBUG=INFO" in tips("all_reduce", "pt")


def test_variants_name_the_real_function():
    en = ex.explain("all_gather_into_tensor", "en")
    pt = ex.explain("all_gather_into_tensor", "pt")
    assert "deprecated" in en.title and "all_gather_single" in en.title
    assert "obsoleto" in pt.title and "all_gather_single" in pt.title
    assert "deprecated" in ex.explain("reduce_scatter_tensor").title
    assert "reduce_scatter_single" in ex.explain("reduce_scatter_tensor").title
    assert "deprecated" not in ex.explain("all_gather_single").title
    # a variant keeps its family's backend text
    assert ex.explain("all_gather_single").how == ex.explain("all_gather").how


@pytest.mark.parametrize("op", sorted(protocol.OBJECT_OPS))
def test_object_collectives_explain_pickling_in_two_steps(op):
    en, pt = ex.explain(op, "en"), ex.explain(op, "pt")
    assert "pickle" in en.what and "size" in en.what
    assert "pickle" in " ".join([pt.what, *pt.tips]) and "tamanho" in pt.what
    if op == "scatter_object_list":  # the one with a third collective (the true sizes)
        assert "three collectives" in en.what and "três coletivas" in pt.what
    else:
        assert "first" in en.what and "primeiro" in pt.what


def test_monitored_barrier_is_gloo_only():
    assert "Not supported" in ex.explain("monitored_barrier").how["nccl"]
    assert 'backend="gloo"' in ex.explain("monitored_barrier", "pt").how["nccl"]


# --- Our own words: nothing lifted from the seed articles -----------------------------------

def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _seed_windows(size: int = 8) -> set[tuple[str, ...]]:
    windows: set[tuple[str, ...]] = set()
    for path in sorted(SEEDS.glob("*.txt")):
        words = _words(path.read_text(encoding="utf-8"))
        windows.update(tuple(words[i:i + size]) for i in range(len(words) - size + 1))
    return windows


@pytest.mark.skipif(not SEEDS.is_dir(), reason="seed articles not available")
@pytest.mark.parametrize("lang", LANGS)
def test_no_eight_word_window_of_a_seed_is_copied(lang):
    windows = _seed_windows()
    assert len(windows) > 500
    texts = [t for op in protocol.OPS for t in _texts(ex.explain(op, lang))]
    texts += [form for forms in _ui_texts(lang).values() for form in forms]
    for text in texts:
        words = _words(text)
        copied = [" ".join(words[i:i + 8]) for i in range(len(words) - 7)
                  if tuple(words[i:i + 8]) in windows]
        assert not copied, f"seed text copied: {copied[0]!r} in {text!r}"


def test_window_check_would_catch_a_copy():
    path = sorted(SEEDS.glob("*.txt"))[0] if SEEDS.is_dir() else None
    if path is None:
        pytest.skip("seed articles not available")
    words = _words(path.read_text(encoding="utf-8"))
    assert tuple(words[100:108]) in _seed_windows()


@pytest.mark.integration  # a fresh interpreter
def test_imports_neither_textual_nor_torch():
    code = "import sys, commviz.text.explain; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert "textual" not in out and "torch" not in out and "rich" not in out


def test_counts_take_the_singular_or_the_plural_and_portuguese_numbers_a_decimal_comma() -> None:
    assert i18n.ui_n("transfers", 1) == "1 transfer" and i18n.ui_n("transfers", 3) == "3 transfers"
    assert i18n.ui_n("each rank sends", 1, "pt", bytes="4 KiB") == \
        "cada rank envia até 4 KiB em 1 passo"
    assert i18n.ui_n("each rank sends", 6, "pt", bytes="4 KiB").endswith("em 6 passos")
    assert i18n.ui_n("findings now", 1, "pt") == "diagnóstico: 1 problema, no painel acima"
    assert i18n.ui_n("findings now", 2) == "diagnosis: 2 findings, in the panel above"
    assert i18n.number("0.53 s", "pt") == "0,53 s" and i18n.number("0.53 s") == "0.53 s"
    assert i18n.gpu_note("NVML unavailable (OSError)", "pt") == "NVML indisponível (OSError)"
    assert i18n.gpu_note("something new", "pt") == "something new"


def test_nccl_only_tips_are_left_out_beside_a_gloo_demo():
    """'Run with NCCL_DEBUG=INFO ...' under a gloo broadcast: nothing a student can do with it
    (user trial). Shown for NCCL, and when the backend is not known."""
    from rich.text import Text

    from commviz.tui.panels.explanation import _explained

    broadcast = ex.explain("broadcast", "pt")
    assert any("NCCL_DEBUG" in tip for tip in broadcast.nccl_tips)
    assert all(tip in broadcast.tips for tip in broadcast.nccl_tips)
    shown = {}
    for backend in ("gloo", "nccl", None):
        out = Text()
        _explained(out, broadcast, backend, "pt")
        shown[backend] = out.plain
    assert "NCCL_DEBUG" not in shown["gloo"] and "árvore binomial" in shown["gloo"]
    assert "NCCL_DEBUG" in shown["nccl"] and "NCCL_DEBUG" in shown[None]


@pytest.mark.parametrize("lang", LANGS)
def test_no_formula_has_a_space_the_panel_could_wrap_at(lang):
    """'n -⏎1' and 'rank⏎+ i' were wrapped across lines (user trial): a formula is one word."""
    spaced = re.compile(r"\b(n|rank|r|t|m|2\(n) [-+=] (1|i|h|n|src|\d)")
    found = [m.group(0) for op in protocol.OPS for text in _texts(ex.explain(op, lang))
             for m in spaced.finditer(text)]
    assert not found, found


def test_commviz_own_words_in_a_rank_failure_follow_the_language():
    """--lang pt read 'rank 1 falhou (saída -9): killed by SIGKILL, no error written'."""
    from commviz.launch import launcher

    said = launcher._without_words(-9)
    assert said == "killed by SIGKILL, no error written"
    assert i18n.in_language(said, "pt") == "morto por SIGKILL, sem erro escrito"
    assert i18n.in_language(launcher._without_words(1), "pt") == \
        "nenhum erro escrito no seu log"
    assert i18n.in_language(said, "en") == said
    assert i18n.in_language("ValueError: killed by SIGKILL", "pt") == \
        "ValueError: killed by SIGKILL"  # a program's own words stay as written
