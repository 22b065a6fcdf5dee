"""The keys the app answers to, defined once: each one's binding, its row on the help screen
and its entry in the command palette. The App's BINDINGS, the footer's labels, the help
screen's rows and the palette's commands are all built from ``KEYS``, ``HELP`` and
``PALETTE``; their words are UI strings, each key's named in its table."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

from textual.binding import Binding

from commviz.text import i18n
from commviz.text.i18n import N_


@dataclass(frozen=True)
class Key:
    """One key. ``description``: Textual's words for it until the app names it in the
    language; ``words``: the UI string that names what it does; ``short``: shorter words for
    a tight footer; ``footer``: shown in the footer; ``shown``: the key as the help screen and
    the palette write it, where not its ``key_display`` or ``key``; ``checked``: on the help
    screen only where ``check_action`` says it works in this session (else it always does);
    ``more``: the UI string of what more the help screen says of it."""

    id: str
    key: str
    action: str
    description: str
    words: str
    short: str | None = None
    key_display: str | None = None
    footer: bool = True
    shown: str | None = None
    checked: bool = False
    more: str | None = None


# In the footer's order: `v` (narrow only) first, so that the footer has it
KEYS = (
    Key("quit", "q", "quit", "Quit", N_("key quit"), shown="q, ctrl+c"),
    Key("view", "v", "next_view", "View", N_("key view"), more=N_("help view")),
    Key("help", "question_mark", "help", "Help", N_("key help"), key_display="?"),
    Key("pause", "space", "toggle_play", "Pause/resume", N_("key pause"),
        N_("key pause short"), checked=True),
    Key("step", "n", "step", "Next iteration", N_("key step"), N_("key step short"),
        checked=True),
    Key("faster", "plus", "faster", "Faster", N_("key faster"), N_("key faster short"),
        key_display="+", more=N_("help faster")),
    Key("slower", "minus", "slower", "Slower", N_("key slower"), key_display="-"),
    Key("replay_pause", "p", "replay_pause", "Hold replay", N_("key replay_pause"),
        N_("key replay_pause short"), more=N_("help replay_pause")),
    Key("zoom_in", "z", "zoom_in", "Zoom", N_("key zoom_in"), more=N_("help zoom_in")),
    Key("zoom_out", "Z", "zoom_out", "Zoom out", N_("key zoom_out"), footer=False),
    # where a lane per rank does not fit: the timeline by node, or by process group
    Key("group_lanes", "g", "group_lanes", "Timeline by node / by group", N_("key group_lanes"),
        footer=False, more=N_("help group_lanes")),
    Key("restart", "r", "restart", "Restart", N_("key restart"), checked=True),
    # a recording's clock: the viewer panel's playback line says them
    Key("play_faster", "right_square_bracket", "play_faster", "Faster playback",
        N_("key play_faster"), key_display="]", footer=False, checked=True,
        more=N_("help play_faster")),
    Key("play_slower", "left_square_bracket", "play_slower", "Slower playback",
        N_("key play_slower"), key_display="[", footer=False),
    Key("next_finding", "f", "next_finding", "Next finding", N_("key next_finding"),
        footer=False, checked=True, more=N_("help next_finding")),
    # its help says the languages it goes through (i18n.language_cycle)
    Key("lang", "l", "switch_lang", "Language", N_("key lang"), footer=False),
    # the inside panel's `what if` line: the op on another fabric at 16 nodes (a model)
    Key("whatif", "w", "whatif", "What if: another fabric", N_("key whatif"), footer=False,
        more=N_("help whatif")),
    Key("read", "e", "read", "Explanation, full screen", N_("key read"), footer=False),
    # the ranks panel by node (a job with more ranks than the screen has rows)
    Key("find", "slash", "find", "Find a rank or node", N_("key find"), key_display="/",
        footer=False, checked=True, more=N_("help find")),
)
BY_ID = {key.id: key for key in KEYS}
# The help screen's rows, in its order: each lists these keys' ids, one row for a pair
HELP = (("pause",), ("step",), ("next_finding",), ("play_faster", "play_slower"),
        ("faster", "slower"), ("replay_pause",), ("zoom_in", "zoom_out"), ("group_lanes",),
        ("restart",), ("whatif",),
        ("read",), ("find",), ("lang",), ("view",), ("quit",), ("help",))
# The command palette's own entries, in its order
PALETTE = ("pause", "step", "next_finding", "play_faster", "play_slower", "faster", "slower",
           "replay_pause", "zoom_in", "zoom_out", "group_lanes", "restart", "whatif", "read",
           "find", "lang", "view", "help")
# What keys do when a recording is played back, where it differs: n steps from one operation
# to the next; p holds the replay while the recording plays on
PLAYBACK_WORDS = {"key step": N_("key step op"), "key step short": N_("key step op short"),
                  "help replay_pause": N_("help replay_pause playback")}
# what ctrl+c tells a job it was stopped by (Job.stop's reason)
CTRL_C = N_("stop ctrl+c")


def bindings() -> list[Binding]:
    """The App's BINDINGS: every key, then ctrl+c, which quits from any screen."""
    return [Binding(k.key, k.action, k.description, key_display=k.key_display, id=k.id,
                    show=k.footer) for k in KEYS] + \
        [Binding("ctrl+c", f"quit({CTRL_C!r})", "Quit", show=False, priority=True)]


def in_session(words: str, playback: bool) -> str:
    """A key's UI string (its ``words``, ``short`` or ``more``) as it says what the key does
    in this session (``playback``: a recording's)."""
    return PLAYBACK_WORDS.get(words, words) if playback else words


def key_shown(key_id: str, lang: str) -> str:
    """A key as the help screen and the palette show it, in the language."""
    if key_id == "pause":
        return i18n.ui("space", lang)
    key = BY_ID[key_id]
    return key.shown or key.key_display or key.key


def footer_label(b: Binding, tight: bool, lang: str, playback: bool) -> Binding:
    """A binding as the footer shows it in the language: shorter words where the whole ones
    do not fit (``tight``), where `+` stands for `+/-`; the palette's key named too."""
    ui = functools.partial(i18n.ui, lang=lang)
    if b.action == "command_palette":
        return dataclasses.replace(b, description=ui("key palette"))
    if not b.id:
        return b
    key = BY_ID[b.id]
    display = {"faster": "+/-" if tight else "+", "pause": ui("space")}
    words = key.short if tight and key.short else key.words
    return dataclasses.replace(
        b, description=ui(in_session(words, playback)),
        key_display=display.get(b.id, b.key_display),
        # z/Z: the timeline's subtitle says them
        show=not tight if b.id in ("slower", "zoom_in") else b.show)


def footer_keys(lang: str, playback: bool,
                works: Callable[[str], bool | None]) -> list[tuple[str, str]]:
    """The footer's keys with their whole words (each key as shown, its words), of those
    that work in this session (``works``: the app's check_action of an action)."""
    ui = functools.partial(i18n.ui, lang=lang)
    keys = {"pause": ui("space")}
    return [(keys.get(k.id, k.key_display or k.key), ui(in_session(k.words, playback)))
            for k in KEYS if k.footer and works(k.action) is not False]


def help_rows(lang: str, playback: bool,
              works: Callable[[str], bool | None]) -> list[tuple[str, str]]:
    """The help screen's rows: the keys that work in this session, in the footer's words,
    then what more there is to say of them."""
    ui = functools.partial(i18n.ui, lang=lang)
    rows = []
    for ids in HELP:
        first = BY_ID[ids[0]]
        if first.checked and not works(first.action):
            continue
        words = " / ".join(ui(in_session(BY_ID[key_id].words, playback)) for key_id in ids)
        if first.more:
            words += f" ({ui(in_session(first.more, playback))})"
        elif first.id == "lang":
            words += f" ({i18n.language_cycle()})"
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
            title = i18n.ui(in_session(BY_ID[key_id].words, playback), lang)
            help_text = f"{i18n.ui('key', lang)}: {key_shown(key_id, lang)}"
            if key_id == "lang":  # to which language
                name = i18n.ui("language name", i18n.next_lang(lang))
                title = f"{title}: {name}"
                help_text += f" · {i18n.ui('language help', lang).format(name)}"
            out.append((title, help_text, action))
    return out
