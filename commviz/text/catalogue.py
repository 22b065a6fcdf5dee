"""The maintainer's command for the text data: ``python -m commviz.text.catalogue COMMAND``.

  check       every check the tests make, listed: what each language lacks (UI strings and
              prose), unknown keys, placeholders, plural forms, stale ui.mo or English comments
  extract     the keys the sources name (Babel, keywords ui, ui_n, N_) against en/ui.po
  compile     each <lang>/ui.po into the ui.mo beside it, which the runtime reads
  new LANG    a new language's ui.po: every English entry, untranslated, its English as a
              comment, the language's plural rule (--plural-forms to give another); compiled

Babel is needed here only (the ``test`` extra): the runtime reads ui.mo with ``gettext``.
docs/i18n.md tells the whole way of adding a language.
"""

from __future__ import annotations

import argparse
import ast
import copy
import datetime
import io
import re
import string
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from babel import Locale
from babel.messages.catalog import Catalog, Message
from babel.messages.extract import extract
from babel.messages.mofile import read_mo, write_mo
from babel.messages.plurals import get_plural
from babel.messages.pofile import read_po, write_po

from commviz.text import HERE, prose
from commviz.text.i18n import LANGS

PACKAGE = HERE.parent  # commviz/
KEYWORDS = {"ui": None, "ui_n": None, "N_": None}  # each takes its key first
ENGLISH = "English: "  # how a translation's comment starts: the English text it translates
# the prose files checked here, and the fields that are structure (the same in every
# language, read from English's), not text to translate
PROSE = ("explain/*.toml", "tips.toml", "schedules.toml")
STRUCTURE = frozenset({"extends", "tips", "extra_tips", "nccl_only"})


# --- reading ---------------------------------------------------------------------------------

def po_path(lang: str) -> Path:
    return HERE / lang / "ui.po"


def read(lang: str) -> Catalog:
    with po_path(lang).open("rb") as f:
        return read_po(f, locale=lang)


def messages(catalog: Catalog) -> dict[str, Message]:
    """A catalogue's entries by key, its header left out."""
    return {key_of(m): m for m in catalog if m.id}


def key_of(message: Message) -> str:
    return message.id[0] if isinstance(message.id, (list, tuple)) else message.id


def forms(message: Message) -> tuple[str, ...]:
    """A message's text: one form, or its plural forms in order."""
    return tuple(message.string) if message.pluralizable else (message.string,)


def translated(message: Message) -> bool:
    return all(forms(message)) and not message.fuzzy


def english_comment(english: Message) -> str:
    """The comment a translation keeps of the English it translates."""
    return ENGLISH + " | ".join(dict.fromkeys(forms(english)))


def compiled(catalog: Catalog) -> bytes:
    """``catalog`` as the ui.mo the runtime reads: its translated entries only, so that one
    untranslated (a plural form too) reads in English, not as its key."""
    kept = copy.deepcopy(catalog)
    for message in list(kept):
        if message.id and not translated(message):
            del kept[message.id]
    # Babel dates the header it writes (no one reads it): a fixed date makes the same ui.po
    # compile to the same ui.mo
    kept.creation_date = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    out = io.BytesIO()
    write_mo(out, kept)
    return out.getvalue()


# --- the checks (each a list of problems; none when all is well) -----------------------------

def missing(english: Catalog, other: Catalog) -> list[str]:
    """The English keys ``other`` lacks or leaves untranslated (or fuzzy)."""
    found = messages(other)
    return [key for key in messages(english)
            if key not in found or not translated(found[key])]


def unknown(english: Catalog, other: Catalog) -> list[str]:
    """The keys of ``other`` that English does not have."""
    known = messages(english)
    return [key for key in messages(other) if key not in known]


def _fields(texts: Iterable[str]) -> tuple[frozenset[str], int]:
    """The named fields of ``texts`` and the most positional ones ("{}") any of them has."""
    names: set[str] = set()
    positional = 0
    for text in texts:
        count = 0
        for _, name, _, _ in string.Formatter().parse(text):
            if name == "":
                count += 1
            elif name is not None:
                names.add(name)
        positional = max(positional, count)
    return frozenset(names), positional


def _same_fields(text: str, english: str) -> bool:
    try:
        return _fields([text]) == _fields([english])
    except ValueError:  # an unmatched brace
        return False


def placeholders(english: Catalog, other: Catalog) -> list[str]:
    """The keys whose text in ``other`` has other placeholders than English's."""
    found = messages(other)
    wrong = []
    for key, en in messages(english).items():
        m = found.get(key)
        if m is None or not translated(m):
            continue
        try:
            if _fields(forms(m)) != _fields(forms(en)):
                wrong.append(key)
        except ValueError:  # an unmatched brace
            wrong.append(key)
    return wrong


def plurals(english: Catalog, other: Catalog) -> list[str]:
    """Entries whose plural forms do not fit: not plural where English's is (or the other
    way), or not as many forms as the catalogue's Plural-Forms says."""
    found = messages(other)
    wrong = []
    for key, en in messages(english).items():
        m = found.get(key)
        if m is None:
            continue
        if m.pluralizable != en.pluralizable:
            wrong.append(f"{key}: {'' if en.pluralizable else 'not '}plural in English")
        elif m.pluralizable and len(m.string) != other.num_plurals:
            wrong.append(f"{key}: {len(m.string)} forms, Plural-Forms says "
                         f"{other.num_plurals}")
    return wrong


def comments(english: Catalog, other: Catalog) -> list[str]:
    """The translations whose comment no longer holds their English text: it changed since,
    so the translation needs a look (then the comment is updated)."""
    found = messages(other)
    stale = []
    for key, en in messages(english).items():
        m = found.get(key)
        said = " ".join(" ".join(m.auto_comments).split()) if m is not None else ""
        if m is not None and said != " ".join(english_comment(en).split()):
            stale.append(key)
    return stale


def stale_mo(lang: str) -> bool:
    """Whether the committed ui.mo says other than its ui.po compiled now."""
    path = HERE / lang / "ui.mo"
    if not path.exists():
        return True

    def said(data: bytes) -> tuple[list[Any], list[tuple[str, str]]]:
        catalog = read_mo(io.BytesIO(data))
        return ([(m.id, m.string, m.context) for m in catalog if m.id],
                [(k, v) for k, v in catalog.mime_headers if k == "Plural-Forms"])
    return said(path.read_bytes()) != said(compiled(read(lang)))


def _leaves(tree: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    if isinstance(tree, dict):
        return {found: leaf for key, value in tree.items()
                for found, leaf in _leaves(value, (*path, key)).items()}
    return {path: tree}


def prose_names() -> list[str]:
    """The prose files English has (``explain/send``, ``tips``...): the checked ones."""
    en = HERE / "en"
    return sorted(str(p.relative_to(en).with_suffix("")) for pattern in PROSE
                  for p in en.glob(pattern))


def prose_problems(lang: str) -> list[str]:
    """What ``lang``'s prose lacks, has in excess, or says otherwise than English's structure
    ("explain/send.toml: how.nccl missing")."""
    problems = []
    for name in prose_names():
        en, other = _leaves(prose("en", name)), _leaves(prose(lang, name))
        if not other:
            problems.append(f"{name}.toml missing")
            continue
        for path, value in en.items():
            where = f"{name}.toml: {'.'.join(path)}"
            if path[-1] in STRUCTURE:
                if path in other and other[path] != value:
                    problems.append(f"{where} is not English's {value!r}")
            elif not isinstance(other.get(path), str) or not other[path].strip():
                problems.append(f"{where} missing")
            elif not _same_fields(other[path], value):
                problems.append(f"{where}: other placeholders than English's")
        problems += [f"{name}.toml: {'.'.join(path)} unknown" for path in other
                     if path not in en]
    return problems


def _literals(node: ast.expr) -> list[str]:
    """The keys an argument can be: a string, or each string branch of ``a if c else b``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    return []


def extract_keys(fileobj: IO[bytes], keywords: Iterable[str], comment_tags: Any,
                 options: Any) -> Iterator[tuple[int, str, str, list[str]]]:
    """A Babel extraction method for commviz's keys: the first argument of each call of a
    keyword, found with ``ast``, which also sees the calls inside f-strings (Babel's own
    Python method does not before Python 3.12) and both keys of ``ui("a" if c else "b")``."""
    calls = []
    for node in ast.walk(ast.parse(fileobj.read())):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else \
                func.attr if isinstance(func, ast.Attribute) else None
            if name in keywords:
                calls += [(node.lineno, node.col_offset, name, key)
                          for key in _literals(node.args[0])]
    for lineno, _, name, key in sorted(calls):
        yield lineno, name, key, []


def source_keys(root: Path = PACKAGE) -> dict[str, list[str]]:
    """The keys the sources under ``root`` name in ui(), ui_n() and N_(), with where
    ("commviz/cli.py:195"). A key built at run time (an f-string, a variable) is not seen."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root.parent)
        with path.open("rb") as f:
            for lineno, key, _, _ in extract(extract_keys, f, keywords=KEYWORDS):
                found.setdefault(key, []).append(f"{where}:{lineno}")
    return found


def problems() -> dict[str, list[str]]:
    """Every problem of the text data, by what it is about."""
    english = read("en")
    out: dict[str, list[str]] = {}
    for lang in LANGS:
        other = read(lang)
        if lang != "en":
            out[f"{lang}: UI strings missing or untranslated"] = missing(english, other)
            out[f"{lang}: keys English does not have"] = unknown(english, other)
            out[f"{lang}: placeholders unlike English's"] = placeholders(english, other)
            out[f"{lang}: English changed since translated (comment)"] = \
                comments(english, other)
            out[f"{lang}: prose"] = prose_problems(lang)
        out[f"{lang}: plural forms"] = plurals(english, other)
        out[f"{lang}: ui.mo"] = ["older than ui.po: compile"] if stale_mo(lang) else []
    used = source_keys()
    known = messages(english)
    out["keys the sources name that en/ui.po lacks"] = [
        f"{key} ({', '.join(where)})" for key, where in used.items() if key not in known]
    return {what: found for what, found in out.items() if found}


# --- the commands ----------------------------------------------------------------------------

def _check(_: argparse.Namespace) -> int:
    found = problems()
    for what, items in found.items():
        print(f"{what}:")
        print("".join(f"  {item}\n" for item in items), end="")
    if not found:
        print(f"the text data is complete and compiled ({', '.join(LANGS)})")
    return 1 if found else 0


def _extract(_: argparse.Namespace) -> int:
    used, known = source_keys(), messages(read("en"))
    lacking = {key: where for key, where in used.items() if key not in known}
    unnamed = [key for key in known if key not in used]
    for key, where in lacking.items():
        print(f"not in en/ui.po: {key!r} ({', '.join(where)})")
    for key in unnamed:
        print(f"named by no source (built at run time, or unused): {key!r}")
    return 1 if lacking else 0


def _compile(_: argparse.Namespace) -> int:
    for lang in LANGS:
        (HERE / lang / "ui.mo").write_bytes(compiled(read(lang)))
        print(f"{lang}/ui.mo")
    return 0


# the header fields a .po keeps; the others are a translation team's workflow
HEADER = ("Project-Id-Version", "Language", "Plural-Forms", "MIME-Version", "Content-Type",
          "Content-Transfer-Encoding")


def write(catalog: Catalog, path: Path) -> None:
    """A catalogue as commviz keeps its .po files: Babel's layout, no source lines, a short
    header."""
    out = io.BytesIO()
    write_po(out, catalog, include_lineno=False)
    header, rest = out.getvalue().decode().split("\n\n", 1)
    kept = [line for line in header.split("\n")
            if not re.match(r'"([A-Za-z-]+): ', line)
            or re.match(r'"([A-Za-z-]+): ', line).group(1) in HEADER]
    text = re.sub(r'"Project-Id-Version: .*\\n"', r'"Project-Id-Version: commviz\\n"',
                  "\n".join(kept), count=1) + "\n\n" + rest
    path.write_text(text, encoding="utf-8")


def _new(args: argparse.Namespace) -> int:
    lang = args.lang
    if po_path(lang).exists():
        print(f"{po_path(lang)} exists", file=sys.stderr)
        return 1
    rule = args.plural_forms or get_plural(lang).plural_forms
    catalog = Catalog(locale=lang, project="commviz", fuzzy=False,
                      header_comment=f"# commviz's screen in {Locale.parse(lang).english_name}"
                                     " (docs/i18n.md).\n"
                                     "# Each entry's comment holds the English text it "
                                     "translates.")
    catalog.mime_headers = [("Plural-Forms", rule)]  # sets this header only
    for en in messages(read("en")).values():
        empty: Any = ("",) * catalog.num_plurals if en.pluralizable else ""
        catalog.add(en.id, empty, user_comments=en.user_comments,
                    auto_comments=[english_comment(en)])
    po_path(lang).parent.mkdir(exist_ok=True)
    write(catalog, po_path(lang))
    (HERE / lang / "ui.mo").write_bytes(compiled(read(lang)))
    print(f"{po_path(lang)}: {len(catalog)} entries to translate; Plural-Forms: {rule}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m commviz.text.catalogue",
                                     description="commviz's text data: check, extract, "
                                                 "compile, start a language")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="every check of the text data").set_defaults(run=_check)
    commands.add_parser("extract", help="the sources' keys against en/ui.po") \
        .set_defaults(run=_extract)
    commands.add_parser("compile", help="each ui.po into its ui.mo").set_defaults(run=_compile)
    new = commands.add_parser("new", help="start a language's ui.po")
    new.add_argument("lang", help="the language's code, the folder's name (es)")
    new.add_argument("--plural-forms", help='the header\'s rule, e.g. '
                                            '"nplurals=2; plural=(n != 1);"')
    new.set_defaults(run=_new)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
