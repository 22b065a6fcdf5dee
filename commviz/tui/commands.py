"""The keys the app answers to, defined once: each one's binding, its row on the help screen
and its entry in the command palette. The App's BINDINGS, the footer's labels, the help
screen's rows and the palette's commands are all built from ``KEYS``, ``HELP`` and
``PALETTE``; their words are UI strings named after the key's id ("key <id>", "help <id>")."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

from textual.binding import Binding

from commviz.text import explain


@dataclass(frozen=True)
class Key:
    """One key. ``description``: Textual's words for it until the app names it in the
    language; ``footer``: shown in the footer; ``shown``: the key as the help screen and the
    palette write it, where not its ``key_display`` or ``key``; ``checked``: on the help
    screen only where ``check_action`` says it works in this session (else it always does);
    ``more``: the help screen says more of it ("help <id>")."""

    id: str
    key: str
    action: str
    description: str
    key_display: str | None = None
    footer: bool = True
    shown: str | None = None
    checked: bool = False
    more: bool = False


# In the footer's order: `v` (narrow only) first, so that the footer has it
KEYS = (
    Key("quit", "q", "quit", "Quit", shown="q, ctrl+c"),
    Key("view", "v", "next_view", "View", more=True),
    Key("help", "question_mark", "help", "Help", key_display="?"),
    Key("pause", "space", "toggle_play", "Pause/resume", checked=True),
    Key("step", "n", "step", "Next iteration", checked=True),
    Key("faster", "plus", "faster", "Faster", key_display="+", more=True),
    Key("slower", "minus", "slower", "Slower", key_display="-"),
    Key("replay_pause", "p", "replay_pause", "Hold replay", more=True),
    Key("zoom_in", "z", "zoom_in", "Zoom", more=True),
    Key("zoom_out", "Z", "zoom_out", "Zoom out", footer=False),
    Key("restart", "r", "restart", "Restart", checked=True),
    # a recording's clock: the viewer panel's playback line says them
    Key("play_faster", "right_square_bracket", "play_faster", "Faster playback",
        key_display="]", footer=False, checked=True, more=True),
    Key("play_slower", "left_square_bracket", "play_slower", "Slower playback",
        key_display="[", footer=False),
    Key("next_finding", "f", "next_finding", "Next finding", footer=False, checked=True,
        more=True),
    Key("lang", "l", "switch_lang", "Language", footer=False, more=True),
    Key("read", "e", "read", "Explanation, full screen", footer=False),
)
BY_ID = {key.id: key for key in KEYS}
# The help screen's rows, in its order: each lists these keys' ids, one row for a pair
HELP = (("pause",), ("step",), ("next_finding",), ("play_faster", "play_slower"),
        ("faster", "slower"), ("replay_pause",), ("zoom_in", "zoom_out"), ("restart",),
        ("read",), ("lang",), ("view",), ("quit",), ("help",))
# The command palette's own entries, in its order
PALETTE = ("pause", "step", "next_finding", "play_faster", "play_slower", "faster", "slower",
           "replay_pause", "zoom_in", "zoom_out", "restart", "read", "lang", "view", "help")
SHORT_KEYS = ("pause", "step", "faster", "replay_pause")  # "key <id> short": a tight footer
# What keys do when a recording is played back, where it differs: n steps from one operation
# to the next; p holds the replay while the recording plays on
PLAYBACK_WORDS = {"key step": "key step op", "help replay_pause": "help replay_pause playback"}


def bindings() -> list[Binding]:
    """The App's BINDINGS: every key, then ctrl+c, which quits from any screen."""
    return [Binding(k.key, k.action, k.description, key_display=k.key_display, id=k.id,
                    show=k.footer) for k in KEYS] + \
        [Binding("ctrl+c", "quit('stop ctrl+c')", "Quit", show=False, priority=True)]


def key_words(key_id: str, playback: bool, kind: str = "key") -> str:
    """The UI string that names (``kind`` "key") or explains ("help") what a key does in
    this session (``playback``: a recording's)."""
    words = f"{kind} {key_id}"
    return PLAYBACK_WORDS.get(words, words) if playback else words


def key_shown(key_id: str, lang: str) -> str:
    """A key as the help screen and the palette show it, in the language."""
    if key_id == "pause":
        return explain.ui("space", lang)
    key = BY_ID[key_id]
    return key.shown or key.key_display or key.key


def footer_label(b: Binding, tight: bool, lang: str, playback: bool) -> Binding:
    """A binding as the footer shows it in the language: shorter words where the whole ones
    do not fit (``tight``), where `+` stands for `+/-`; the palette's key named too."""
    ui = functools.partial(explain.ui, lang=lang)
    if b.action == "command_palette":
        return dataclasses.replace(b, description=ui("key palette"))
    if not b.id:
        return b
    short = tight and b.id in SHORT_KEYS
    display = {"faster": "+/-" if tight else "+", "pause": ui("space")}
    key = key_words(b.id, playback)
    return dataclasses.replace(
        b, description=ui(f"{key} short" if short else key),
        key_display=display.get(b.id, b.key_display),
        # z/Z: the timeline's subtitle says them
        show=not tight if b.id in ("slower", "zoom_in") else b.show)


def footer_keys(lang: str, playback: bool,
                works: Callable[[str], bool | None]) -> list[tuple[str, str]]:
    """The footer's keys with their whole words (each key as shown, its words), of those
    that work in this session (``works``: the app's check_action of an action)."""
    ui = functools.partial(explain.ui, lang=lang)
    keys = {"pause": ui("space")}
    return [(keys.get(k.id, k.key_display or k.key), ui(key_words(k.id, playback)))
            for k in KEYS if k.footer and works(k.action) is not False]


def help_rows(lang: str, playback: bool,
              works: Callable[[str], bool | None]) -> list[tuple[str, str]]:
    """The help screen's rows: the keys that work in this session, in the footer's words,
    then what more there is to say of them."""
    ui = functools.partial(explain.ui, lang=lang)
    rows = []
    for ids in HELP:
        first = BY_ID[ids[0]]
        if first.checked and not works(first.action):
            continue
        words = " / ".join(ui(key_words(key_id, playback)) for key_id in ids)
        if first.more:
            words += f" ({ui(key_words(ids[0], playback, 'help'))})"
        rows.append((" / ".join(key_shown(key_id, lang) for key_id in ids), words))
    rows.append(("tab, ↑↓", ui("help scroll")))
    palette = ui("key palette")
    rows.append(("ctrl+p", f"{palette[:1].upper()}{palette[1:]} ({ui('help palette')})"))
    return rows


def palette(lang: str, playback: bool,
            works: Callable[[str], bool | None]) -> list[tuple[str, str, str]]:
    """The command palette's commviz entries that work in this session: (title, help,
    action)."""
    out = []
    for key_id in PALETTE:
        action = BY_ID[key_id].action
        if works(action):
            title = explain.ui(key_words(key_id, playback), lang)
            help_text = f"{explain.ui('key', lang)}: {key_shown(key_id, lang)}"
            if key_id == "lang":
                title = f"{title}: {'Português' if lang == 'en' else 'English'}"
                help_text += f" · {explain.ui('language help', lang)}"
            out.append((title, help_text, action))
    return out
