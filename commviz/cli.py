"""The ``commviz`` command: demo, watch, run, relay, keys, play, stats, whatif, export."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from types import ModuleType
from typing import TYPE_CHECKING

from commviz import __version__
from commviz.knowledge import sweep
from commviz.text import i18n

if TYPE_CHECKING:
    from collections.abc import Callable

    from commviz.viewer.model import Model
    from commviz.viewer.playback import Playback
    from commviz.viewer.session import Session

DEFAULT_SIZE = 4096  # --size: bytes per rank per op
BIG_RECORDING_BYTES = 20_000_000  # commviz play says it is reading one larger than this
STATS_ROUND_RECORDS = 65_536  # commviz stats applies up to this many op records a round
RECORD_HELP = ("write every event to FILE: JSON Lines, or the compact format (some 20 times "
               "smaller, for large jobs) when FILE ends in .cvz")
METRICS_HELP = ("serve Prometheus metrics at http://[HOST:]PORT/metrics (HOST: 127.0.0.1 unless "
                "given; docs/metrics.md)")
# commviz export --format: the suffix it writes (trace: a Chrome trace, for Perfetto)
FORMATS = {"jsonl": ".jsonl", "cvz": ".cvz", "trace": ".json"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="commviz", description=(
        "See, live in the terminal, how torch.distributed ranks communicate."))
    p.add_argument("--version", action="version", version=f"commviz {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    share = argparse.ArgumentParser(add_help=False)
    share.add_argument("--share", metavar="[HOST:]PORT", type=_share_address, default=None,
                       help="a live, read-only copy of the screen for each student who opens "
                       "the URL printed at start (its token included); HOST: 127.0.0.1 unless "
                       "given")
    share.add_argument("--share-max", type=int, default=None, metavar="N",
                       help="students who may follow at once (default 60)")
    d = sub.add_parser("demo", help="run a demo program on real rank processes and watch it",
                       parents=[share])
    d.add_argument("op", nargs="?", help="the demo to run (see --list)")
    d.add_argument("--list", action="store_true", help="list the demos and exit")
    d.add_argument("--ranks", type=int, default=4, help="number of rank processes (default 4)")
    d.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="auto: nccl with one GPU per rank, else gloo on CPU tensors")
    d.add_argument("--size", type=int, default=None,
                   help=f"bytes per rank per op (default {DEFAULT_SIZE}), in whole float32 "
                   "elements (or blocks, one per rank): the demo says when it rounds")
    d.add_argument("--iters", type=int, default=None,
                   help="iterations of the demo's loop to run (default: 20 headless, until "
                   "quit with the TUI)")
    d.add_argument("--interval", type=float, default=None,
                   help="seconds between iterations (default: 2 with the TUI, time to replay "
                   "each one; 0 headless)")
    d.add_argument("--headless", action="store_true", help="print lines instead of the TUI")
    d.add_argument("--paused", action="store_true",
                   help="start paused: each iteration waits for `n` (space plays)")
    sw = d.add_argument_group("the sweep demo (nccl-tests' options; --iters: timed calls per "
                              f"size, default {sweep.DEFAULT_ITERS})")
    sw.add_argument("--op", dest="sweep_op", default=None, choices=tuple(sweep.OPS),
                    help="the collective to sweep (default all_reduce)")
    sw.add_argument("--min", dest="sweep_min", type=_bytes, default=None, metavar="BYTES",
                    help=f"smallest size, e.g. 8, 64K (default {sweep.DEFAULT_MIN})")
    sw.add_argument("--max", dest="sweep_max", type=_bytes, default=None, metavar="BYTES",
                    help="largest size, doubling from --min (default 64M)")
    sw.add_argument("--warmup", dest="sweep_warmup", type=int, default=None, metavar="N",
                    help=f"calls before each size's timing (default {sweep.DEFAULT_WARMUP})")
    d.add_argument("--record", metavar="FILE", help=RECORD_HELP)
    d.add_argument("--metrics", metavar="[HOST:]PORT", type=_metrics_address, help=METRICS_HELP)
    d.add_argument("--lang", choices=i18n.LANGS, default=None,
                   help="language of the explanations (default: from the locale)")

    w = sub.add_parser("watch", help="run the viewer alone; ranks connect with COMMVIZ_ADDR",
                       parents=[share])
    w.add_argument("--bind", default=None, help="address to listen on "
                   "(default tcp://127.0.0.1:5555)")
    w.add_argument("--record", metavar="FILE", help=RECORD_HELP)
    w.add_argument("--metrics", metavar="[HOST:]PORT", type=_metrics_address, help=METRICS_HELP)
    w.add_argument("--keys", metavar="DIR", default=None, help="CURVE keys from `commviz "
                   "keys` (default $COMMVIZ_KEYS); needed to bind a non-loopback address")
    w.add_argument("--headless", action="store_true", help="print lines instead of the TUI")
    w.add_argument("--lang", choices=i18n.LANGS, default=None,
                   help="language of the explanations (default: from the locale)")

    r = sub.add_parser("run", help="run a command (torchrun ..., python ...) and watch its "
                       "ranks, with no change to its code",
                       usage="commviz run [--headless] [--record FILE] [--metrics [HOST:]PORT] "
                       "[--bind ADDR] "
                       f"[--keys DIR] [--no-viewer] [--lang {{{','.join(i18n.LANGS)}}}] "
                       "-- CMD [ARG ...]")
    r.add_argument("--headless", action="store_true",
                   help="print lines (prefixed [commviz]) beside the job's own output")
    r.add_argument("--record", metavar="FILE", help=RECORD_HELP)
    r.add_argument("--metrics", metavar="[HOST:]PORT", type=_metrics_address, help=METRICS_HELP)
    r.add_argument("--bind", default=None, help="address the viewer listens on "
                   "(default: a free port on 127.0.0.1, passed to the job)")
    r.add_argument("--keys", metavar="DIR", default=None, help="CURVE keys from `commviz "
                   "keys` (default $COMMVIZ_KEYS), given to the job's ranks too; needed to "
                   "bind a non-loopback address")
    r.add_argument("--no-viewer", action="store_true", help="run CMD instrumented, reporting "
                   "to a viewer started elsewhere at $COMMVIZ_ADDR (default "
                   "tcp://127.0.0.1:5555)")
    r.add_argument("--lang", choices=i18n.LANGS, default=None,
                   help="language of the explanations (default: from the locale)")
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD",
                   help="the command, run as given (no shell)")

    rl = sub.add_parser("relay", help="forward this node's ranks to a viewer elsewhere, in "
                        "one connection (for programs that call commviz.instrument())")
    rl.add_argument("--to", required=True, metavar="ADDR",
                    help="the viewer's address (or an upper relay's), e.g. tcp://HOST:5555")
    rl.add_argument("--bind", default=None, metavar="LOCAL", help="where this node's ranks "
                    "report (their COMMVIZ_ADDR; default tcp://127.0.0.1:5555, instrument()'s "
                    "default), loopback or ipc://PATH")
    rl.add_argument("--keys", metavar="DIR", default=None, help="CURVE keys from `commviz "
                    "keys` (default $COMMVIZ_KEYS): server.key and client.key_secret to reach "
                    "an off-host viewer; the whole folder to bind an off-host address")

    k = sub.add_parser("keys", help="create the CURVE keys a viewer reachable from other "
                       "hosts needs (see docs/nodes.md)")
    k.add_argument("dir", nargs="?", default=None,
                   help="folder to write them in (default ~/.config/commviz/keys)")
    k.add_argument("--force", action="store_true", help="replace keys already there")

    fo = sub.add_parser("follow", help="a student's view of a shared class (what --share "
                        "runs for each browser)")
    fo.add_argument("addr", help="the teacher's republisher (tcp://127.0.0.1:PORT)")
    fo.add_argument("--title", default="", help="the class's title")
    fo.add_argument("--recording", default=None, metavar="FILE",
                    help="the recording the teacher plays (play --share): this viewer plays "
                    "it too, where the teacher's is")
    fo.add_argument("--lang", choices=i18n.LANGS, default=None,
                    help="language of the explanations (default: from the locale)")
    pl = sub.add_parser("play", help="play a recording back in the TUI, as it was seen live",
                        parents=[share])
    pl.add_argument("file", help="a recording: JSON Lines or compact (.cvz)")
    pl.add_argument("--speed", type=float, default=1.0,
                    help="how many times as fast as it was recorded (default 1; ] and [ "
                    "change it while playing)")
    pl.add_argument("--from", dest="start", type=float, default=0.0, metavar="SECONDS",
                    help="start this many seconds into the recording (what came before is "
                    "taken in first, at about 1 M op records a second)")
    pl.add_argument("--paused", action="store_true",
                    help="start paused: n steps from one operation to the next")
    pl.add_argument("--lang", choices=i18n.LANGS, default=None,
                    help="language of the explanations (default: from the locale)")

    s = sub.add_parser("stats", help="nccl-tests-like table of a recording")
    s.add_argument("file", help="a recording: JSON Lines or compact (.cvz)")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--plot", action="store_true", help="draw busbw and time against size for "
                   "each op recorded at two sizes or more (a sweep's: its timed loops)")
    s.add_argument("--lang", choices=i18n.LANGS, default=None,
                   help="language of the table's words and the findings (default: from the "
                   "locale; --json is always English)")

    wi = sub.add_parser("whatif", help="a model's time for a recording's collectives on "
                        "another fabric and scale, per op, per step and per day")
    wi.add_argument("file", help="a recording: JSON Lines or compact (.cvz)")
    wi.add_argument("--fabric", choices=tuple(whatif_presets()), default=None,
                    help="a preset (figures and sources in docs/network.md; default ib-ndr)")
    wi.add_argument("--alpha-us", type=float, default=None,
                    help="a custom fabric instead: microseconds a step on every hop")
    wi.add_argument("--beta-gbps", type=float, default=None,
                    help="with --alpha-us: GB/s (1e9 B/s) each GPU sends at")
    wi.add_argument("--nodes", type=int, default=None,
                    help="nodes (default 16 with a network, 1 for nvlink and pcie)")
    wi.add_argument("--gpus-per-node", type=int, default=8, help="GPUs a node (default 8)")
    wi.add_argument("--extra-latency-us", type=float, default=0.0, metavar="X",
                    help="what X more microseconds on every network hop cost per op, per "
                    "step and per day")
    wi.add_argument("--step-s", type=float, default=None, metavar="SECONDS",
                    help="the training step's wall time (default: inferred from the "
                    "recording's repeating collectives)")
    wi.add_argument("--lang", choices=i18n.LANGS, default=None,
                    help="language of the report's words (default: from the locale)")

    e = sub.add_parser("export", help="write a recording again in the other format "
                       "(JSON Lines or compact .cvz), or as a Chrome trace for Perfetto")
    e.add_argument("file", help="a recording: JSON Lines or compact (.cvz)")
    e.add_argument("--format", choices=tuple(FORMATS), default=None,
                   help="jsonl: JSON Lines, one line per event; cvz: compact; trace: Chrome "
                   "trace event JSON, which Perfetto and chrome://tracing open (docs/export.md)"
                   "; default: trace when OUT ends in .json")
    e.add_argument("-o", "--output", metavar="OUT", default=None,
                   help="where to write it (default: FILE with the format's suffix)")
    e.add_argument("--force", action="store_true", help="replace OUT if it exists")
    e.add_argument("--from", dest="start", type=float, default=None, metavar="SECONDS",
                   help="trace: leave out what ended before this many seconds from the "
                   "recording's first time")
    e.add_argument("--to", dest="end", type=float, default=None, metavar="SECONDS",
                   help="trace: leave out what began after this many seconds from it")
    e.add_argument("--ranks", default=None, metavar="LIST",
                   help="trace: only these ranks, e.g. 0-7 or 0,4,8-11")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from commviz.launch.job import JobError
    from commviz.launch.launcher import LaunchError
    from commviz.relay.relay import RelayError
    from commviz.viewer.recording import RecordingError
    from commviz.viewer.transport import BindError
    from commviz.wire.keys import KeysError

    args.no_terminal = _no_terminal_for_the_tui(args)
    if args.no_terminal:
        args.headless = True
    commands = {"demo": _demo, "watch": _watch, "run": _run, "relay": _relay, "keys": _keys,
                "stats": _stats, "play": _play, "export": _export, "whatif": _whatif,
                "follow": _follow}
    try:
        code = commands[args.command](args)
        sys.stdout.flush()  # a reader that went away (`| head`) shows here, not at exit
        return code
    except (LaunchError, BindError, RecordingError, JobError, KeysError, RelayError,
            WhatIfError) as exc:
        print(f"commviz: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:  # Ctrl-C before the viewer handles it (while starting up)
        print("commviz: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


def _no_terminal_for_the_tui(args: argparse.Namespace) -> bool:
    """The command would draw the TUI, but stdin or stdout is not a terminal (`| tee`, CI)."""
    tui = args.command == "play" or not (getattr(args, "headless", True)
                                         or getattr(args, "no_viewer", False)
                                         or getattr(args, "list", False))
    return tui and not (sys.stdin.isatty() and sys.stdout.isatty())


def _headless_module(args: argparse.Namespace) -> ModuleType:
    """commviz.headless, once the command is about to print lines rather than draw."""
    from commviz import headless

    if args.no_terminal:
        print("commviz: stdin or stdout is not a terminal: printing lines instead of the TUI "
              "(as with --headless)", file=sys.stderr, flush=True)
    return headless


def _demo(args: argparse.Namespace) -> int:
    from commviz.launch import launcher

    if args.list:
        for info in launcher.demos().values():
            print(f"{info.name:<24} {info.summary}")
        return 0
    if not args.op:
        raise launcher.LaunchError("name a demo, e.g. `commviz demo all_gather --ranks 4` "
                                   "(commviz demo --list shows them all)")
    if args.paused and args.headless:
        raise launcher.LaunchError("--paused needs the TUI: headless runs are never paused")
    swept = _sweep(args)
    iters = args.iters if args.iters is not None else (20 if args.headless else None)
    size = args.size if args.size is not None else DEFAULT_SIZE
    if swept is not None:  # an iteration per size; buffers of the largest, two of each
        iters, size = len(swept.sizes()), 2 * swept.max_bytes
    info = launcher.validate(args.op, args.ranks, iters, size, args.interval or 0.0)
    interval = args.interval if args.interval is not None else (
        info.headless_interval if args.headless else 2.0)
    backend, why = launcher.choose_backend(args.backend, args.ranks, _lang(args))
    launcher.check_backend(args.op, backend)
    launcher.check_memory(size, args.ranks, backend)
    from commviz.viewer.session import Session

    titles = {lang: _demo_title(args, size, lang) for lang in i18n.LANGS}
    session = Session("tcp://127.0.0.1:*", args.record, collect_instances=args.headless,
                      about={"title": titles, "demo": args.op}, share=args.share is not None)
    _serve_metrics(args, session)  # before the ranks: a port in use starts none
    shared = _start_share(args, session, titles[_lang(args)])
    controller = None  # play / pause / next iteration: the TUI only; headless, never gated
    try:
        if not args.headless:
            from commviz.wire.control import Controller

            controller = Controller(paused=args.paused)

        def start_ranks() -> launcher.Ranks:
            env = {**(controller.env() if controller else {}),
                   **(swept.env() if swept else {})}
            return launcher.Ranks(args.op, args.ranks, backend, session.addr, size, iters,
                                  interval, extra_env=env)

        ranks = start_ranks()
    except BaseException:
        if controller is not None:
            controller.close()
        session.close()
        raise
    if args.headless:
        headless = _headless_module(args)
        banner = i18n.ui("banner demo", _lang(args)).format(
            op=args.op, n=args.ranks, why=why, addr=session.addr)
        note = _size_note(args, size, _lang(args))
        return headless.run(session, ranks, lang=_lang(args),
                            banner=banner if note is None else f"{banner}\n{note}",
                            sweep_backend=None if swept is None else backend)
    from commviz.tui.app import run_app

    try:
        return run_app(session, ranks=ranks, title=lambda lang: titles[lang],
                       lang=_lang(args), controller=controller, restart=start_ranks,
                       demo=args.op, events=shared)
    finally:
        controller.close()  # after run_app stopped the ranks: none is left waiting


def _bytes(text: str) -> int:
    """``--min``/``--max``: bytes, or with K, M or G (nccl-tests' -b and -e)."""
    try:
        return sweep.parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _sweep(args: argparse.Namespace) -> sweep.Sweep | None:
    """The sweep asked for, checked (the sweep demo), else None; the sweep's options given to
    another demo are an error."""
    from commviz.launch.launcher import LaunchError

    given = {"--op": args.sweep_op, "--min": args.sweep_min, "--max": args.sweep_max,
             "--warmup": args.sweep_warmup}
    if args.op != "sweep":
        if any(v is not None for v in given.values()):
            raise LaunchError(f"{', '.join(k for k, v in given.items() if v is not None)}: "
                              "options of the sweep demo (commviz demo sweep --op all_reduce)")
        return None
    spec = sweep.Sweep(args.sweep_op or "all_reduce",
                       sweep.DEFAULT_MIN if args.sweep_min is None else args.sweep_min,
                       sweep.DEFAULT_MAX if args.sweep_max is None else args.sweep_max,
                       sweep.DEFAULT_ITERS if args.iters is None else args.iters,
                       sweep.DEFAULT_WARMUP if args.sweep_warmup is None else args.sweep_warmup)
    try:
        spec.check()
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    return spec


def _share_address(spec: str) -> tuple[str, int]:
    """``--share [HOST:]PORT``, as (host, port)."""
    from commviz.tui.share_server import parse_address

    try:
        return parse_address(spec)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _start_share(args: argparse.Namespace, session: Session | Playback, title: str,
                 recording: str | None = None) -> list:
    """With ``--share``, serve the class until the session closes; returns the viewer panel's
    line of it (none without). A port that cannot be had closes the session and raises
    BindError (nothing else is started yet). A playback's followers play its ``recording``."""
    from commviz.viewer.transport import BindError

    if args.share is None:
        if args.share_max is not None:
            session.close()
            raise BindError("--share-max caps the followers of --share: give --share too")
        return []
    from commviz.tui.share_server import DEFAULT_FOLLOWERS, ShareServer, follower_command

    most = DEFAULT_FOLLOWERS if args.share_max is None else args.share_max
    if most < 1:
        session.close()
        raise BindError("--share-max must be at least 1")
    server = ShareServer(follower_command(session.share.addr, title, recording),
                         *args.share, title, _lang(args), most)
    try:
        server.start()
    except OSError as exc:
        session.close()
        raise BindError(f"--share {args.share[0]}:{args.share[1]}: cannot serve there "
                        f"({exc.strerror or exc})") from None
    # the followers are told the class ended as the session closes, then their pages close
    session.on_close.append(server.close)
    print(f"commviz: the class follows at {server.url}", file=sys.stderr, flush=True)
    return [(i18n.N_("sharing"), {"url": server.url, "n": most})]


def _follow(args: argparse.Namespace) -> int:
    """A student's viewer: the teacher's messages, its own model, never a word to the ranks."""
    from commviz.tui.app import run_app
    from commviz.viewer.session import Session
    from commviz.viewer.share import Subscriber

    def title(lang: str) -> str:
        return i18n.ui("following", lang).format(args.title)

    if args.recording is not None:
        return _follow_playback(args, title)
    intake = Subscriber(args.addr)
    session = Session(intake=intake)
    return run_app(session, ranks=None, title=title, lang=_lang(args),
                   class_ended=lambda: intake.ended)


def _follow_playback(args: argparse.Namespace, title: Callable[[str], str]) -> int:
    """A student's playback of the teacher's recording, going where the teacher's goes."""
    from commviz.tui.app import run_app
    from commviz.viewer.playback import Playback, PlaybackControl
    from commviz.viewer.share import ClockFollower

    playback = _read_recording(args.recording, lambda: Playback(args.recording))
    teacher = ClockFollower(args.addr)
    playback.follow_class(teacher)
    return run_app(playback, ranks=None, title=title, lang=_lang(args),
                   controller=PlaybackControl(playback), demo=playback.demo,
                   wall_ns=playback.clock.wall_ns, output=playback.output,
                   class_ended=lambda: teacher.ended)


def _metrics_address(spec: str) -> tuple[str, int]:
    """``--metrics [HOST:]PORT``, as (host, port)."""
    from commviz.viewer.metrics import parse_address

    try:
        return parse_address(spec)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _serve_metrics(args: argparse.Namespace, session: Session) -> None:
    """With ``--metrics``, serve the session's metrics until it closes; a port that cannot be
    had closes the session and raises BindError (nothing else is started yet)."""
    if args.metrics is None:
        return
    from commviz.viewer.metrics import MetricsServer

    try:
        server = MetricsServer(session, *args.metrics)
    except BaseException:
        session.close()
        raise
    session.on_close.append(server.close)
    print(f"commviz: Prometheus metrics at {server.url}", file=sys.stderr, flush=True)


def _size_note(args: argparse.Namespace, size: int, lang: str) -> str | None:
    """What the demo makes of --size, when not exactly the bytes asked (launcher.size_note)."""
    from commviz.launch import launcher

    return launcher.size_note(args.op, size, args.ranks, args.size is not None, lang)


def _demo_title(args: argparse.Namespace, size: int, lang: str) -> str:
    """The TUI's header for a demo: its name, its ranks, the size note when there is one,
    the backend and why (last: a narrow header cuts it, which the viewer panel says too)."""
    from commviz.launch import launcher

    why = launcher.choose_backend(args.backend, args.ranks, lang)[1]
    parts = (args.op, f"{args.ranks} ranks", _size_note(args, size, lang), why)
    return " · ".join(part for part in parts if part)


def _watch(args: argparse.Namespace) -> int:
    from commviz.viewer.session import Session
    from commviz.viewer.transport import DEFAULT_BIND, AddressInUse, BindError

    try:
        session = Session(args.bind or DEFAULT_BIND, args.record,
                          collect_instances=args.headless, keys=_keys_dir(args),
                          about={"title": {lang: i18n.ui("watching", lang).format(
                              args.bind or DEFAULT_BIND) for lang in i18n.LANGS}},
                          share=args.share is not None)
    except AddressInUse as exc:
        raise BindError(f"{exc}. Pick another with --bind tcp://127.0.0.1:PORT, and point the "
                        "ranks at it with COMMVIZ_ADDR.") from None
    _serve_metrics(args, session)
    shared = _start_share(args, session, i18n.ui("watching", _lang(args)).format(session.addr))
    if args.headless:
        headless = _headless_module(args)
        return headless.run(session, lang=_lang(args), banner=i18n.ui(
            "banner watch", _lang(args)).format(
                addr=session.addr, keys=", COMMVIZ_KEYS=DIR" if session.receiver.secure else ""))
    from commviz.tui.app import run_app

    return run_app(session, ranks=None,
                   title=lambda lang: i18n.ui("watching", lang).format(session.addr),
                   lang=_lang(args), events=shared)


def _run(args: argparse.Namespace) -> int:
    import os
    import shlex

    from commviz.launch.job import Job, JobAsRanks, JobError, resolve, run_plain
    from commviz.wire.keys import ENV_KEYS

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    resolve(cmd, dict(os.environ))  # a command that cannot run is an error before anything starts
    if args.no_viewer:
        given = [opt for opt, on in (("--headless", args.headless), ("--record", args.record),
                                     ("--bind", args.bind), ("--keys", args.keys),
                                     ("--metrics", args.metrics)) if on]
        if given:
            raise JobError(f"--no-viewer starts no viewer: {', '.join(given)} needs one "
                           "(run `commviz watch` elsewhere, or leave out --no-viewer)")
        from commviz.viewer.black_box import BlackBox

        box = BlackBox()  # the viewer is elsewhere: what it may not have got stays here too
        try:
            return run_plain(cmd, keep=box.keep, keep_unforwarded=box.keep_unforwarded)
        finally:
            line = box.close()
            if line is not None:
                print(line, file=sys.stderr, flush=True)
    from commviz.viewer.session import Session
    from commviz.viewer.transport import AddressInUse, BindError

    keys = _keys_dir(args)
    try:
        session = Session(args.bind or "tcp://127.0.0.1:*", args.record,
                          collect_instances=args.headless, keys=keys,
                          about={"title": {lang: f"run · {shlex.join(cmd)}"[:80]
                                           for lang in i18n.LANGS}})
    except AddressInUse as exc:
        raise BindError(f"{exc}. Pick another with --bind tcp://127.0.0.1:PORT, or leave out "
                        "--bind: a free port is then taken, and the job is told where.") from None
    _serve_metrics(args, session)  # before the job: a port in use starts none
    env = {**os.environ, ENV_KEYS: str(keys)} if keys else None  # this node's ranks
    if args.headless:
        headless = _headless_module(args)
        # the job's lines are read only when NCCL was asked for its own or the run is
        # recorded: the output then goes through commviz (a tee) rather than straight to the
        # terminal
        reader = session.job_line if os.environ.get("NCCL_DEBUG") or args.record else None
        return headless.run_job(session, lambda: Job(cmd, session.addr, env=env, on_line=reader),
                                lang=_lang(args),
                                banner=i18n.ui("banner run", _lang(args)).format(
                                    addr=session.addr, cmd=shlex.join(cmd)))
    try:
        job = Job(cmd, session.addr, capture=True, env=env, on_line=session.job_line)
    except BaseException:
        session.close()
        raise
    from commviz.headless import PREFIX, Prefixed
    from commviz.tui.app import run_app

    ours = Prefixed(sys.stdout, PREFIX)  # commviz's lines, beside the job's last ones
    try:
        run_app(session, ranks=JobAsRanks(job), title=f"run · {shlex.join(cmd)}"[:80],
                lang=_lang(args), output=job.output, out=ours)
    finally:
        job.stop()  # done by run_app already, unless it failed to start
    assert job.exit_code is not None
    return job.exit_code


def _relay(args: argparse.Namespace) -> int:
    from commviz.launch.job import Interrupts
    from commviz.relay.relay import DEFAULT_ADDR, Relay

    relay = Relay(args.to, args.bind or DEFAULT_ADDR, keys=args.keys)
    with Interrupts() as interrupts:
        print(f"commviz relay: node {relay.node}: its ranks report to COMMVIZ_ADDR="
              f"{relay.addr}, forwarded to {relay.to} (Ctrl-C stops it)", flush=True)
        try:
            while not interrupts.event.wait(0.5):
                pass
        finally:
            relay.close()
    line = relay.end_line()
    if line is not None:
        print(line, file=sys.stderr)
    return 0


def _keys_dir(args: argparse.Namespace) -> str | None:
    import os

    from commviz.wire.keys import ENV_KEYS

    return args.keys or os.environ.get(ENV_KEYS) or None


def _keys(args: argparse.Namespace) -> int:
    from commviz.wire import keys

    folder = args.dir or keys.default_dir()
    keys.generate(folder, force=args.force)
    print(f"commviz: wrote CURVE keys in {folder}\n"
          f"  viewer: commviz watch --bind tcp://0.0.0.0:5555 --keys {folder}\n"
          f"  every node: copy server.key and client.key_secret (keep it secret) to a "
          f"folder DIR there,\n  and run the job with {keys.ENV_KEYS}=DIR (or "
          f"{keys.ENV_SERVER_KEY}=DIR/server.key {keys.ENV_CLIENT_KEY}=DIR/client.key_secret)")
    return 0


def _lang(args: argparse.Namespace) -> str:
    return args.lang or i18n.default_lang()


def _play(args: argparse.Namespace) -> int:
    from commviz.viewer import recording
    from commviz.viewer.playback import SPEEDS, Playback, PlaybackControl
    from commviz.viewer.recording import RecordingError

    if not SPEEDS[0] <= args.speed <= SPEEDS[-1]:
        raise RecordingError(f"--speed {args.speed:g}: it must lie between {SPEEDS[0]:g} and "
                             f"{SPEEDS[-1]:g}")
    size = os.path.getsize(args.file) if os.path.isfile(args.file) else 0
    from commviz.viewer import compact

    streamed = size and compact.is_compact(args.file)  # read as it plays, chunk by chunk
    if size > BIG_RECORDING_BYTES and not streamed:  # JSON Lines, read whole: ~30 MB/s
        print(f"commviz: reading {args.file} ({size / 1e6:.0f} MB)…", file=sys.stderr,
              flush=True)
    playback = _read_recording(args.file, lambda: Playback(args.file, args.speed))
    if not 0 <= args.start <= playback.duration_s:
        raise RecordingError(f"--from {args.start:g}: it must lie between 0 and "
                             f"{playback.duration_s:.1f} s, the recording's length")
    if args.no_terminal:
        raise RecordingError("commviz play draws the TUI: run it in a terminal (`commviz stats "
                             f"{args.file}` prints a recording's numbers)")
    if args.start and size > BIG_RECORDING_BYTES:  # no snapshot yet: all before, first
        print(f"commviz: taking in the first {args.start:g} s of {args.file}…",
              file=sys.stderr, flush=True)
    playback.seek(args.start)
    # a demo's recording is held after each operation until the replay has shown it, as the
    # live demo held its ranks; a job's runs on at its own pace, the replay showing the latest
    control = PlaybackControl(playback, paused=args.paused, each_op=playback.demo is not None)
    name = os.path.basename(args.file)
    # the machine it was recorded on: its title's "here" is that machine
    host = playback.host if isinstance(playback.host, str) and playback.host else None
    titles = {lang: " · ".join(part for part in (
        i18n.ui("play title host" if host else "play title", lang).format(file=name,
                                                                            host=host),
        playback.title.get(lang)) if part) for lang in i18n.LANGS}
    if playback.cut:
        print(f"commviz: note: {recording.cut_note(args.file, playback.cut)}", file=sys.stderr)
    if args.share is not None:
        playback.share_class()
    shared = _start_share(args, playback, titles[_lang(args)], recording=args.file)
    from commviz.tui.app import run_app

    return run_app(playback, ranks=None, title=lambda lang: titles[lang], lang=_lang(args),
                   controller=control, restart=lambda: None, demo=playback.demo,
                   wall_ns=playback.clock.wall_ns, output=playback.output, events=shared)


def _read_recording(path: str, read):
    """``read()``, a reader of the recording at ``path``, with what can go wrong as a
    RecordingError that says what it is."""
    from commviz.viewer import recording

    try:
        return read()
    except FileNotFoundError:
        raise recording.RecordingError(f"{path}: no such file") from None
    except OSError as exc:  # a directory, no permission...
        raise recording.RecordingError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise recording.RecordingError(
            f"{path} is not a commviz recording (not UTF-8 text)") from None
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        if isinstance(exc, recording.RecordingError):
            raise
        raise recording.RecordingError(f"{path}: malformed line ({exc!r})") from None


def _stats(args: argparse.Namespace) -> int:
    from commviz.viewer import plain_text as text
    from commviz.viewer import recording, shape_words
    from commviz.viewer.diagnose import Diagnosis, recorded_text

    model = stats_model()
    diagnosis = Diagnosis(model)  # finds on replay whom the others waited for
    findings: list[dict] = []
    cut: list[int] = []
    extra: dict[str, list[dict]] = {"summary": []}

    def read() -> None:
        for batch in _rounds(recording.read(args.file, findings, cut, lines=extra,
                                            records=True)):
            model.apply(batch)

    _read_recording(args.file, read)
    rows, late = model.stats_table(), diagnosis.late_arrivals()
    failed, unmatched = model.incomplete()  # the recording is over: they will not complete
    failed += model.failed
    if cut:  # what a killed viewer leaves: everything before it is whole
        print(f"commviz: note: {recording.cut_note(args.file, cut)}", file=sys.stderr)
    elif not extra["summary"]:
        print(f"commviz: note: {args.file} has no closing summary line: its viewer did not "
              "close it (killed?); what it recorded is all here", file=sys.stderr)
    # what the live viewer let go of while it was behind (its summary says; none: older files)
    said = extra["summary"][-1].get("shed") if extra["summary"] else None
    shed = {k: n for k, n in said.items() if type(n) is int} if isinstance(said, dict) else {}
    shapes = shape_words.sections(model)  # the statistics by group layout, at scale
    if args.json:
        print(json.dumps({"file": args.file, "records": model.records,
                          "instances": model.instances, "transfers": model.transfers,
                          "failed": failed, "unmatched": unmatched, "shed": shed, "rows": rows,
                          "shapes": shape_words.sections_json(shapes, _lang(args)),
                          "late_arrivals": [{"rank": r, "count": t.count,
                                             "waited_us": t.waited_ns / 1e3,
                                             "longest_us": t.longest_ns / 1e3,
                                             "longest_at": {"op": t.op, "seq": t.seq,
                                                            "group": list(t.group) or None}}
                                            for r, t in late],
                          "findings": findings},
                         indent=2))
    else:
        lang = _lang(args)
        print(text.stats_table(rows, lang))
        if shapes:
            print("\n" + shape_words.sections_text(shapes, lang))
        print("\n" + text.counts_line(model.records, model.instances, model.transfers,
                                      failed, unmatched, lang))
        if shed:
            print(i18n.ui_n("shed", sum(shed.values()), lang))
        if late:
            print(text.late_line(late, lang))
        if findings:
            print("\n" + i18n.ui("recorded findings", lang).format(len(findings)))
            for f in findings:
                print(f"  {'  ' if f['type'] == 'resolved' else '!!'} {f['type']}: "
                      f"{recorded_text(f, lang)}")
        if args.plot:
            _plot(model, rows, lang)
    return 0


def _plot(model: Model, rows: list[dict], lang: str) -> None:
    """``commviz stats --plot``: the sweep's curves (its timed loops, where the recording is
    one), else those of each op recorded at two sizes or more (their median call)."""
    import shutil

    from commviz.tui.sweep_plot import figure_text

    swept = sweep.points(model.phases(0), model.world_size())
    curves = [swept] if len(swept) >= 2 else sweep.from_stats(rows)
    if not curves:
        print("\n" + i18n.ui("plot nothing", lang))
        return
    backend = model.backend() or "gloo"
    width = min(shutil.get_terminal_size((120, 40)).columns, 160)
    for points in curves:
        print(f"\n{points[0].op} · {points[0].world} ranks")
        print(figure_text(points, backend, lang, width, 24, color=sys.stdout.isatty()))


def stats_model() -> Model:
    """The model ``commviz stats`` reads a recording into: without the timeline's lanes,
    which it never shows (at 1,024 ranks, a tenth of its time)."""
    from commviz.viewer.model import Model

    return Model(lanes=False)


class WhatIfError(Exception):
    """A ``commviz whatif`` option the model cannot take, in one sentence."""


def whatif_presets() -> dict:
    from commviz.knowledge import whatif

    return whatif.PRESETS


def _whatif(args: argparse.Namespace) -> int:
    from commviz.knowledge import costmodel, whatif
    from commviz.viewer import recording
    from commviz.viewer import whatif_report as report
    from commviz.wire import protocol

    fabric, scale = _whatif_fabric(args)
    model = stats_model()
    model.new_instances = []
    seen: list[tuple[int, tuple[str, int, int]]] = []  # (first start, stats key) a collective
    cut: list[int] = []

    def read() -> None:
        for batch in _rounds(recording.read(args.file, [], cut, records=True)):
            model.apply(batch)
            for inst in model.new_instances:
                if inst.op not in protocol.P2P:
                    seen.append((inst.t_first_start, (inst.op, len(inst.group), inst.size)))
            model.new_instances.clear()

    _read_recording(args.file, read)
    if cut:  # what a killed viewer leaves: everything before it is whole
        print(f"commviz: note: {recording.cut_note(args.file, cut)}", file=sys.stderr)
    rows = [r for r in model.stats_table() if r["op"] not in protocol.P2P]
    if not rows:
        raise WhatIfError(f"{args.file} has no collectives: nothing to model")
    backend = model.backend()
    fit = costmodel.fit_stats(rows, backend) if backend is not None else None
    try:
        made = report.rows(rows, backend, fit, scale, fabric, args.extra_latency_us)
    except ValueError as exc:
        raise WhatIfError(str(exc)) from None
    seen.sort(key=lambda s: s[0])
    step = None if args.step_s is not None else whatif.infer_step(
        [k for _, k in seen], [t for t, _ in seen])
    lang = _lang(args)
    print(report.header(lang))
    print(report.fabric_line(fabric, scale, lang))
    print()
    print(report.table(made, scale, args.extra_latency_us, fabric.tail > 1, lang))
    print()
    print(report.fit_line(fit, backend, made, lang))
    for line in report.step_lines(made, step, args.step_s, fabric, args.extra_latency_us,
                                  lang):
        print(line)
    return 0


def _whatif_fabric(args: argparse.Namespace):
    """The fabric and scale the options name, or a WhatIfError that says what is wrong."""
    from commviz.knowledge import whatif

    custom = (args.alpha_us, args.beta_gbps)
    if any(v is not None for v in custom):
        if args.fabric is not None or None in custom:
            raise WhatIfError("a custom fabric takes both --alpha-us and --beta-gbps, and no "
                              "--fabric")
        try:
            fabric = whatif.custom(*custom)
        except ValueError as exc:
            raise WhatIfError(str(exc)) from None
    else:
        fabric = whatif.PRESETS[args.fabric or "ib-ndr"]
    nodes = args.nodes if args.nodes is not None else 1 if fabric.inter is None else 16
    if nodes < 1 or args.gpus_per_node < 1:
        raise WhatIfError(f"--nodes {nodes} --gpus-per-node {args.gpus_per_node}: both must "
                          "be at least 1")
    if not args.extra_latency_us >= 0:
        raise WhatIfError(f"--extra-latency-us {args.extra_latency_us:g}: a latency cannot be "
                          "negative")
    if args.step_s is not None and not args.step_s > 0:
        raise WhatIfError(f"--step-s {args.step_s:g}: a step lasts more than 0 seconds")
    return fabric, whatif.Scale(nodes, args.gpus_per_node)


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from commviz.viewer import recording

    fmt = args.format
    if fmt is None:
        if not (args.output and args.output.lower().endswith(FORMATS["trace"])):
            raise recording.RecordingError(
                "name the format: --format jsonl, cvz or trace (or -o a name ending in "
                f"{FORMATS['trace']}, for a trace)")
        fmt = "trace"
    src, suffix = Path(args.file), FORMATS[fmt]
    out = Path(args.output) if args.output else src.with_suffix(suffix)
    if (out.suffix.lower() == FORMATS["cvz"]) != (fmt == "cvz"):
        raise recording.RecordingError(
            f"{out}: a recording is compact when its name ends in {FORMATS['cvz']}, and only "
            f"then: --format {fmt} writes {suffix} (or -o another name)")
    cut = _trace_cut(args, fmt)
    if out.exists() and src.exists() and out.resolve() == src.resolve():
        raise recording.RecordingError(f"{out} is the recording itself: name another output")
    if out.exists() and not args.force:
        raise recording.RecordingError(f"{out} exists: --force replaces it")
    cut_short: list[int] = []
    if fmt == "trace":
        from commviz.viewer import trace_export

        written = _read_recording(args.file, lambda: trace_export.export(src, out, cut,
                                                                         cut_short))
    else:
        cut_short = _read_recording(args.file,
                                    lambda: recording.export(src, out, fmt == "cvz"))
    if cut_short:
        print(f"commviz: note: {recording.cut_note(args.file, cut_short)}", file=sys.stderr)
    if fmt == "trace":
        print(f"commviz: wrote {out} (trace: {written.events:,} events, {written.slices:,} op "
              f"slices of {len(written.ranks)} ranks ({written.async_events:,} of them async "
              f"pairs), {written.transfer_flows:,} transfer and "
              f"{written.collective_flows:,} collective flows"
              + (f", {written.never_ended:,} {'op' if written.never_ended == 1 else 'ops'} "
                 "running when it ended" if written.never_ended else "")
              + f"; {out.stat().st_size:,} bytes); open it in https://ui.perfetto.dev or "
              "chrome://tracing")
    else:
        print(f"commviz: wrote {out} ({fmt}, {out.stat().st_size:,} bytes; "
              f"{src.stat().st_size:,} before)")
    return 0


def _trace_cut(args: argparse.Namespace, fmt: str):
    """What of the recording a trace holds (``--from``, ``--to``, ``--ranks``), checked;
    None for the other formats, which take none of them."""
    from commviz.viewer import trace_export
    from commviz.viewer.recording import RecordingError

    given = [name for name, value in (("--from", args.start), ("--to", args.end),
                                      ("--ranks", args.ranks)) if value is not None]
    if fmt != "trace":
        if given:
            raise RecordingError(f"{given[0]} cuts a trace: it needs --format trace")
        return None
    start = 0.0 if args.start is None else args.start
    end = float("inf") if args.end is None else args.end
    if not 0 <= start < end:
        raise RecordingError(f"--from {start:g} --to {end:g}: they must be seconds with "
                             "0 <= --from < --to")
    try:
        ranks = None if args.ranks is None else trace_export.parse_ranks(args.ranks)
    except ValueError as exc:
        raise RecordingError(str(exc)) from None
    return trace_export.Cut(start, end, ranks)


def _rounds(messages, records: int = STATS_ROUND_RECORDS, size: int = 4096):
    """The model's rounds of a recording's messages: up to ``records`` op records (in
    ``Records``: a batch of all ranks) or ``size`` messages."""
    from commviz.viewer.model import Records

    chunk, held = [], 0
    for msg in messages:
        chunk.append(msg)
        if isinstance(msg, Records):
            held += len(msg)
        if held >= records or len(chunk) >= size:
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk
