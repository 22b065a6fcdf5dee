"""The viewer panel: where the messages come from and how many, how the ranks' GPUs are
joined, what the launcher told of the ranks' processes, and what the keys do now; fitted
to the rows the panel has."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from rich.text import Text

from commviz.text import i18n
from commviz.text.i18n import N_
from commviz.tui import layout
from commviz.viewer import plain_text as text
from commviz.viewer.model import Model
from commviz.viewer.playback import PlaybackControl
from commviz.wire.control import ControlState

EVENTS_SHOWN = 8  # the launcher's latest events listed
EVENT_STYLES = {"rank failed": "bold red"}  # the events of the ranks that stand out


def counts(model: Model, addr: str, rejected: int, held: int, unresolved: int, ended: bool,
           playback: bool, lang: str, shed: int = 0, relays: int = 0,
           following: bool = False) -> str:
    """Where the messages come from (``addr``; ``playback``: a recording's file;
    ``following``: a shared class's teacher's viewer), the
    operations and messages counted (``shed``: let go of while the viewer was behind;
    ``relays``: records the relays dropped), the findings (``held``: that hold now; ``unresolved``:
    that ended with their job), the GPUs' links; before any rank, that the panel waits for
    them (``ended``: the job has, so it does not)."""
    ui, ui_n = functools.partial(i18n.ui, lang=lang), functools.partial(i18n.ui_n, lang=lang)
    dropped = sum(s.dropped for s in model.ranks.values())
    failed, unmatched = model.incomplete()
    failed += model.failed
    # as the summaries: a failed one at once (it cannot succeed now), an incomplete one
    # once the job has ended (before, its records may still come); a line only then
    left = " · ".join(ui_n(key, n) for key, n in (
        (N_("failed ops"), failed), (N_("incomplete ops"), unmatched if ended else 0)) if n)
    source = N_("playing file") if playback else N_("following from") if following \
        else N_("listening on")
    status = (f"{ui(source).format(addr)}\n"
              f"{ui_n('op records', model.records)} · "
              f"{ui_n('collectives', model.instances)} · "
              f"{ui_n('transfers', model.transfers)}\n"
              + (f"{left}\n" if left else "") +
              f"{ui_n('rejected', rejected)} · "
              f"{ui_n('dropped', dropped)}"
              + (f" · {ui_n('dropped by relays', relays)}" if relays else "")
              + (f" · {ui_n('shed', shed)}" if shed else "") + "\n")
    status += ui_n("findings now", held) if held else \
        ui_n("findings unresolved", unresolved) if unresolved else ui("no findings short")
    gpus = gpu_links_line(model, lang)  # NVML's links (drawn in the replay) or no GPU
    if gpus:
        status += "\n" + gpus
    # a recording's ranks come at their time
    if not model.ranks and not playback:
        status += "\n" + ui("no rank connected" if ended else "waiting ranks")
    return status


def events(told: Sequence[tuple[str, dict[str, Any]]], lang: str) -> list[Text]:
    """The launcher's latest events, each a Text (not markup: an error may hold brackets)."""
    return [Text(text.event_line(key, fields, lang), style=EVENT_STYLES.get(key, ""))
            for key, fields in told[-EVENTS_SHOWN:]]


def demo_line(state: ControlState, ended: bool, can_restart: bool, held: str,
              lang: str) -> str:
    """A demo's ranks: playing or paused, what the keys do; ``held``: what says that the
    replay is held apart ("" if it is not)."""
    if ended:
        again = f" · r: {i18n.ui('key restart', lang)}" if can_restart else ""
        return f"■ {i18n.ui('demo ended', lang)}{again} · q: " \
            f"{i18n.ui('quit', lang)}"
    if state.mode == "play":
        waits = f" · {i18n.ui('waiting for replay', lang)}" if state.held else ""
        return f"▶ {i18n.ui('playing', lang)} · {i18n.ui('space', lang)}: " \
            f"{i18n.ui('pause', lang)}{waits}{held}"
    waiting = f" · n: {i18n.ui('next step', lang)} ({state.allow + 2})" \
        if state.reached >= state.allow else ""
    return f"⏸ {i18n.ui('paused', lang)}{waiting}{held}"


def playback_line(control: PlaybackControl, held: str, lang: str,
                  following: bool = False) -> str:
    """Where the playback is in the recording, at what speed, and what the keys do (a
    class's student's: none, the teacher's drive it)."""
    ui = functools.partial(i18n.ui, lang=lang)
    playback = control.playback
    at, total = playback.at_s, playback.duration_s
    where = ui("playback at").format(at=i18n.number(f"{at:.1f}", lang),
                                     total=i18n.number(f"{total:.1f}", lang))
    if following:
        if control.ended:
            return f"■ {ui('playback ended')} · {where}"
        if playback.clock.stopped("teacher"):
            return f"⏸ {ui('teacher holds')} · {where}{held}"
        speed = _speed(playback.clock.speed, lang)
        return f"▶ {ui('playing')} ×{speed} · {where} · {ui('teacher drives')}{held}"
    if control.ended:
        return f"■ {ui('playback ended')} · {where} · r: {ui('key restart')} · q: " \
            f"{ui('quit')}"
    ahead = f" · f: {ui('key next_finding').lower()}" \
        if playback.next_finding_ns() is not None else ""
    if control.paused:
        return f"⏸ {ui('paused')} · {where} · n: {ui('next operation')}{ahead}{held}"
    waits = f" · {ui('playback waits')}" if control.state.held else ""
    speed = _speed(playback.clock.speed, lang)
    return f"▶ {ui('playing')} ×{speed} · {where} · {ui('space')}: {ui('pause')} · ]/[: " \
        f"{ui('speed').lower()}{ahead}{waits}{held}"


def _speed(speed: float, lang: str) -> str:
    """A playback speed as the keys step it: 4, 1/16 (a power of two), else its value."""
    if 0 < speed < 1 and (1 / speed).is_integer():
        return f"1/{1 / speed:.0f}"
    return i18n.number(f"{speed:g}", lang)


def fitted(status: str, told: list[Text], control: str, width: int, room: int | None,
           console: Any) -> Text:
    """The panel in ``room`` rows of ``width`` (``layout.status_room``; None: any): each
    event in EVENT_ROWS at most, cut with an ellipsis (a failed rank's whole error is in a
    toast, and printed when the screen closes); with more rows than the room, the newest,
    the first marked "…", above the ``control`` line, which is always shown."""
    rows = Text(status).wrap(console, width)
    for event in told:
        wrapped = event.wrap(console, width)
        if len(wrapped) > layout.EVENT_ROWS:
            last = wrapped[layout.EVENT_ROWS - 1]
            last.rstrip()
            last.append("…")
            last.truncate(width, overflow="ellipsis")
        rows.extend(wrapped[:layout.EVENT_ROWS])
    last = Text(control).wrap(console, width) if control else []
    dropped = layout.status_dropped(len(rows), len(last), room)
    if dropped:
        rows = rows[dropped:]
        if rows:
            rows[0] = Text("… ") + rows[0]
            rows[0].truncate(width, overflow="ellipsis")
    return Text("\n").join([*rows, *last])


def gpu_links_line(model: Model, lang: str = "en") -> str:
    """One line on how the ranks' GPUs are joined (NVML, ``nvidia-smi topo -m``'s labels),
    by kind: the pairs, or how many; without a GPU, why (the ranks' own note); "" before any
    rank has said."""
    by_kind = model.gpu_link_kinds()
    if by_kind:
        return i18n.ui("gpu links", lang) + " · ".join(
            f"{kind} {' '.join(f'{a}↔{b}' for a, b in pairs)}" if len(pairs) <= 3 else
            f"{kind} {i18n.ui('pairs', lang).format(n=len(pairs))}"
            for kind, pairs in by_kind.items())
    notes = model.gpu_notes()
    if not notes:
        return ""
    note, ranks = max(notes.items(), key=lambda kv: len(kv[1]))
    if len(ranks) > 2 and ranks[-1] - ranks[0] == len(ranks) - 1:
        who = i18n.ui("on ranks", lang).format(f"{ranks[0]}-{ranks[-1]}")
    else:
        who = i18n.ui("on ranks" if len(ranks) > 1 else "on rank", lang).format(
            ", ".join(map(str, ranks)))
    more = i18n.ui_n("other reasons", len(notes) - 1, lang) if len(notes) > 1 else ""
    why = i18n.gpu_note(note.removeprefix("no GPU: "), lang)
    return i18n.ui("no gpu on", lang).format(who=who, note=why, more=more)
