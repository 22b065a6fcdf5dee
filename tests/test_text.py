"""The text data: every language complete and consistent with English, compiled, and read
the way the runtime promises (English as every language's fallback, languages from the data).
"""

import io
import subprocess
import sys

import pytest
from babel.messages.catalog import Catalog

from commviz.text import HERE, catalogue, i18n
from commviz.text import explain as ex

OTHERS = [lang for lang in i18n.LANGS if lang != "en"]


EN = {"a": "A {n}", "b": "B", "c": ("{n} c", "{n} cs")}


def _catalog(lang: str, entries: dict, plural_forms: str = "nplurals=2; plural=(n != 1);"):
    """A catalogue made here: ``entries`` maps a key to its text, or to a tuple of forms;
    each entry's comment holds EN's text of its key."""
    catalog = Catalog(locale=lang, fuzzy=False)
    catalog.mime_headers = [("Plural-Forms", plural_forms)]
    for key, text in entries.items():
        english = EN.get(key, ())
        english = " | ".join(english) if isinstance(english, tuple) else english
        catalog.add((key, key) if isinstance(text, tuple) else key, text,
                    auto_comments=[f"English: {english}"] if english else [])
    return catalog


ENGLISH = _catalog("en", EN)


# --- the languages --------------------------------------------------------------------------

def test_the_languages_are_the_folders_with_a_catalogue_english_first():
    folders = {p.parent.name for p in HERE.glob("*/ui.po")}
    assert i18n.LANGS[0] == "en" and set(i18n.LANGS) == folders >= {"en", "pt"}
    assert len(set(i18n.LANGS)) == len(i18n.LANGS)


def test_each_language_names_itself():
    names = [i18n.ui("language name", lang) for lang in i18n.LANGS]
    assert i18n.ui("language name") == "English" and i18n.ui("language name", "pt") == \
        "Português"
    assert len(set(names)) == len(names)


def test_l_goes_through_every_language_and_back():
    seen, lang = [], "en"
    for _ in i18n.LANGS:
        seen.append(lang)
        lang = i18n.next_lang(lang)
    assert seen == list(i18n.LANGS) and lang == "en"


def test_two_languages_read_as_a_toggle(monkeypatch):
    monkeypatch.setattr(i18n, "LANGS", ("en", "pt"))
    assert i18n.language_cycle() == "English ↔ Português"  # as the help said of en and pt
    assert i18n.next_lang("pt") == "en"


def test_a_cycle_of_three_names_each_and_ends_where_it_began(monkeypatch):
    names = {"en": "English", "pt": "Português", "es": "Español"}
    monkeypatch.setattr(i18n, "LANGS", tuple(names))
    monkeypatch.setattr(i18n, "ui", lambda key, lang="en": names[lang])
    assert i18n.language_cycle() == "English → Português → Español → English"


def test_default_lang_takes_any_language_of_the_data(monkeypatch):
    monkeypatch.setattr(i18n, "LANGS", ("en", "pt", "es"))
    assert i18n.default_lang({"LANG": "es_ES.UTF-8"}) == "es"
    assert i18n.default_lang({"LC_ALL": "fr_FR.UTF-8", "LANG": "es_ES"}) == "en"
    assert i18n.next_lang("pt") == "es" and i18n.next_lang("es") == "en"


@pytest.mark.integration  # a fresh interpreter
def test_the_runtime_needs_no_babel():
    code = ("import sys, commviz.text.explain, commviz.text.i18n, "
            "commviz.text.schedule_notes; print(' '.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert "commviz.text.i18n" in out and "babel" not in out


# --- the UI catalogues ------------------------------------------------------------------------

@pytest.mark.parametrize("lang", OTHERS)
def test_every_language_has_every_english_key(lang):
    assert catalogue.missing(catalogue.read("en"), catalogue.read(lang)) == [], \
        f"{lang}/ui.po lacks these keys (or leaves them untranslated)"


@pytest.mark.parametrize("lang", OTHERS)
def test_no_language_has_a_key_english_lacks(lang):
    assert catalogue.unknown(catalogue.read("en"), catalogue.read(lang)) == []


@pytest.mark.parametrize("lang", OTHERS)
def test_placeholders_are_english_ones(lang):
    assert catalogue.placeholders(catalogue.read("en"), catalogue.read(lang)) == []


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_plural_entries_have_the_forms_of_their_language(lang):
    found = catalogue.read(lang)
    assert catalogue.plurals(catalogue.read("en"), found) == []
    assert found.num_plurals == 2  # English and Portuguese: one, many
    assert sum(m.pluralizable for m in found if m.id) >= 20


@pytest.mark.parametrize("lang", OTHERS)
def test_each_translation_holds_the_english_it_translates(lang):
    assert catalogue.comments(catalogue.read("en"), catalogue.read(lang)) == [], \
        "English changed since: look at the translation, then its comment"


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_each_committed_ui_mo_is_its_ui_po_compiled(lang):
    assert not catalogue.stale_mo(lang), \
        f"{lang}/ui.mo is older than ui.po: python -m commviz.text.catalogue compile"


def test_the_checks_catch_what_they_check():
    other = _catalog("xx", {"a": "A {m}", "c": ("{n} c",), "d": "D"})
    other.add("b", "", auto_comments=["English: an older B"])
    assert catalogue.missing(ENGLISH, other) == ["b"]
    assert catalogue.unknown(ENGLISH, other) == ["d"]
    assert catalogue.placeholders(ENGLISH, other) == ["a"]
    assert catalogue.plurals(ENGLISH, other) == ["c: 1 forms, Plural-Forms says 2"]
    assert catalogue.comments(ENGLISH, other) == ["b"]
    assert catalogue.missing(ENGLISH, ENGLISH) == catalogue.unknown(ENGLISH, ENGLISH) == []
    three = _catalog("xx", {"a": "A {n}", "b": "B", "c": ("{n} c", "{n} cs", "{n} cz")},
                     "nplurals=3; plural=(n == 1 ? 0 : n == 2 ? 1 : 2);")
    assert catalogue.plurals(ENGLISH, three) == [] and catalogue.placeholders(ENGLISH, three) == []


def test_a_stale_mo_is_seen(tmp_path, monkeypatch):
    for name in ("ui.po", "ui.mo"):
        (tmp_path / "pt").mkdir(exist_ok=True)
        (tmp_path / "pt" / name).write_bytes((HERE / "pt" / name).read_bytes())
    monkeypatch.setattr(catalogue, "HERE", tmp_path)
    assert not catalogue.stale_mo("pt")
    po = tmp_path / "pt" / "ui.po"
    po.write_text(po.read_text().replace('msgstr "Pausado"', 'msgstr "Em pausa"'))
    assert catalogue.stale_mo("pt")


def test_a_key_a_language_lacks_reads_in_english(tmp_path, monkeypatch):
    """English is every catalogue's fallback: never a key name on the screen."""
    (tmp_path / "en").mkdir()
    (tmp_path / "en" / "ui.mo").write_bytes((HERE / "en" / "ui.mo").read_bytes())
    pt = catalogue.read("pt")
    del pt["paused"]
    pt[("transfers", "transfers")].string = ("{n} transferência", "")  # half translated
    (tmp_path / "pt").mkdir()
    (tmp_path / "pt" / "ui.mo").write_bytes(catalogue.compiled(pt))
    monkeypatch.setattr(i18n, "HERE", tmp_path)
    i18n._catalogue.cache_clear()
    try:
        assert i18n.ui("paused", "pt") == "Paused"
        assert i18n.ui("playing", "pt") == "Reproduzindo"
        assert i18n.ui_n("transfers", 2, "pt") == "2 transfers"
        assert i18n.ui_n("op records", 2, "pt") == "2 registros de op"
        with pytest.raises(KeyError, match="no UI string 'no such key'"):
            i18n.ui("no such key", "pt")
    finally:
        i18n._catalogue.cache_clear()


def test_plurals_follow_the_language_rule():
    assert [i18n.ui_n("transfers", n, "pt") for n in (0, 1, 2)] == \
        ["0 transferências", "1 transferência", "2 transferências"]
    assert i18n.ui_n("nccl on gpus", 1) == "nccl on 1 GPU(s)"  # one form said twice in English
    assert i18n.ui_n("nccl on gpus", 1, "pt") == "nccl em 1 GPU"
    with pytest.raises(KeyError):
        i18n.ui_n("paused", 2)  # not a plural entry


def test_numbers_and_the_words_of_others_in_the_language():
    assert i18n.number("1.5 MiB", "pt") == "1,5 MiB" and i18n.number("1.5 MiB") == "1.5 MiB"
    assert i18n.nccl_text("algorithm unknown (NCCL prints no choice for this op)", "pt") == \
        "algoritmo desconhecido (o NCCL não imprime escolha para esta op)"
    assert i18n.nccl_text("Ring/LL", "pt") == "Ring/LL"
    assert i18n.textual_command("Change the current theme", "pt") == \
        ("Tema", "Trocar o tema atual")
    assert i18n.textual_command("Change the current theme") == \
        ("Theme", "Change the current theme")
    assert i18n.textual_command("Something Textual adds one day", "pt") is None


# --- the sources' keys ------------------------------------------------------------------------

def test_every_key_the_sources_name_is_in_the_catalogue():
    known = catalogue.messages(catalogue.read("en"))
    assert {key: where for key, where in catalogue.source_keys().items()
            if key not in known} == {}


def test_the_catalogue_holds_only_keys_the_sources_name():
    """A key built at run time (ui(f"view {x}"), ui(key)) is invisible to extraction: such a
    call names its keys with N_ where they are kept, so that every key is seen."""
    assert set(catalogue.messages(catalogue.read("en"))) - set(catalogue.source_keys()) == set()


def test_extraction_sees_keys_in_f_strings_and_in_both_branches():
    source = io.BytesIO(b'x = f"{ui(\'head end\'):>9}"\ny = ui("a" if c else "b", lang)\n'
                        b'z = ui(key)\nw = explain.ui_n(N_("t"), 2)\n')
    found = [(line, key) for line, _, key, _ in
             catalogue.extract_keys(source, catalogue.KEYWORDS, (), {})]
    assert found == [(1, "head end"), (2, "a"), (2, "b"), (4, "t")]


# --- the prose ----------------------------------------------------------------------------

@pytest.mark.parametrize("lang", OTHERS)
def test_every_language_has_all_the_prose_of_english(lang):
    assert catalogue.prose_problems(lang) == [], f"{lang}'s prose lacks or differs"


def test_prose_problems_are_listed(monkeypatch):
    real = catalogue.prose

    def lacking(lang, name):
        found = real(lang, name)
        if lang == "pt" and name == "explain/send":
            found = {k: v for k, v in found.items() if k != "when"}
            found["how"] = {"gloo": found["how"]["gloo"]}
            found["tips"] = ["network"]
        if lang == "pt" and name == "tips":
            return {}
        return found
    monkeypatch.setattr(catalogue, "prose", lacking)
    problems = catalogue.prose_problems("pt")
    assert "explain/send.toml: how.nccl missing" in problems
    assert "explain/send.toml: when missing" in problems
    assert "tips.toml missing" in problems
    assert any(p.startswith("explain/send.toml: tips is not English's") for p in problems)


def test_prose_a_language_lacks_reads_in_english(monkeypatch):
    real = ex.prose

    def lacking(lang, name):
        found = real(lang, name)
        if lang == "pt" and name == "explain/broadcast":
            return {k: v for k, v in found.items() if k != "when"}
        return found
    monkeypatch.setattr(ex, "prose", lacking)
    ex._build.cache_clear()
    try:
        pt, en = ex.explain("broadcast", "pt"), ex.explain("broadcast", "en")
        assert pt.when == en.when and pt.what != en.what
    finally:
        ex._build.cache_clear()


def test_a_variant_extends_what_it_forwards_to():
    tensor, single = ex.explain("reduce_scatter_tensor"), ex.explain("reduce_scatter_single")
    assert tensor.how == single.how != ex.explain("reduce_scatter").how
    assert tensor.tips[1:] == single.tips == ex.explain("reduce_scatter").tips
    assert "_single name" in tensor.tips[0]


def test_nccl_only_tips_are_marked_in_the_data():
    shared = catalogue.prose("en", "tips")
    assert sorted(name for name, tip in shared.items() if tip.get("nccl_only")) == \
        ["nccl_debug", "wait_sync"]
    for lang in i18n.LANGS:
        recv = ex.explain("recv", lang)
        assert len(recv.nccl_tips) == 2 and recv.nccl_tips < set(recv.tips)


def test_every_language_is_packaged():
    """A language's folders hold no code, so setuptools packages them only where
    pyproject.toml lists them with their files: a language added without its entries would
    work from a checkout and be missing from every installed wheel."""
    import tomllib

    config = tomllib.loads((HERE.parent.parent / "pyproject.toml").read_text())["tool"]
    packages, data = config["setuptools"]["packages"], config["setuptools"]["package-data"]
    for lang in i18n.LANGS:
        for package, files in ((f"commviz.text.{lang}", ["ui.po", "ui.mo", "*.toml"]),
                               (f"commviz.text.{lang}.explain", ["*.toml"])):
            assert package in packages, package
            assert data.get(package) == files, package
