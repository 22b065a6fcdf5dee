"""``--share [HOST:]PORT``: the class in the browser. textual-serve runs one follower process
(``commviz follow``) per browser connection, each a read-only viewer of its own, fed by the
teacher's republisher (``viewer/share.py``).

Served on a thread of the teacher's process, beside its TUI. The page and its websocket need
the token printed at start (``secrets.token_urlsafe``); loopback unless a host is given;
followers are capped, and one more is refused with a sentence. A student picks a language
with ``&lang=pt`` in the URL, or ``l`` in the page.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shlex
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from commviz.text import i18n

DEFAULT_FOLLOWERS = 60
START_TIMEOUT_S = 10.0
STOP_S = 3.0  # a follower asked to quit has this long before it is killed
# followers told the class ended quit on their own (tui/app.py's CLASS_END_S later): the
# teacher's commviz waits this long for them before it stops the rest
LEAVE_S = 6.0
REFUSED_TOKEN = ("this class needs the address the teacher's commviz printed, with its "
                 "token (…/?token=…)")
REFUSED_FULL = ("this class is full: {n} students follow it already (the teacher can allow "
                "more with --share-max)")


def parse_address(spec: str) -> tuple[str, int]:
    """``[HOST:]PORT`` (HOST: 127.0.0.1 unless given)."""
    host, _, port = spec.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--share takes [HOST:]PORT, e.g. 8000 or 0.0.0.0:8000, not {spec!r}")
    return host or "127.0.0.1", int(port)


class ShareServer(Server):
    """Serves the follower command ``follow(addr, lang)`` to every browser with the token."""

    def __init__(self, follow: Callable[[str], list[str]], host: str, port: int,
                 title: str, lang: str, most: int = DEFAULT_FOLLOWERS) -> None:
        super().__init__(command="", host=host, port=port, title=title)
        self.token = secrets.token_urlsafe(16)
        self.follow, self.lang, self.most = follow, lang, most
        self.followers = 0
        self.refused = 0
        self.url = f"{self.public_url}/?token={self.token}"
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # ---- the routes ------------------------------------------------------------------
    async def _make_app(self) -> web.Application:
        app = web.Application()
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes([web.get("/", self.handle_index, name="index"),
                        web.get("/ws/{token}/{lang}", self.handle_websocket, name="websocket"),
                        web.static("/static", self.statics_path, name="static")])
        return app

    def _allowed(self, token: str) -> bool:
        return secrets.compare_digest(token.encode(), self.token.encode())

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        if not self._allowed(request.query.get("token", "")):
            self.refused += 1
            return web.Response(status=403, text=REFUSED_TOKEN)
        lang = request.query.get("lang", self.lang)
        if lang not in i18n.LANGS:
            lang = self.lang
        ws = f"ws:{self.public_url.split(':', 1)[1]}/ws/{self.token}/{lang}"
        context = {"font_size": to_int(request.query.get("fontsize", "16"), 16),
                   "app_websocket_url": ws,
                   "config": {"static": {"url": f"{self.public_url}/static/"}},
                   "application": {"name": self.title}}
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def handle_websocket(self, request: web.Request) -> web.StreamResponse:
        if not self._allowed(request.match_info["token"]):
            self.refused += 1
            return web.Response(status=403, text=REFUSED_TOKEN)
        if self.followers >= self.most:
            self.refused += 1
            return web.Response(status=503, text=REFUSED_FULL.format(n=self.followers))
        lang = request.match_info["lang"]
        websocket = web.WebSocketResponse(heartbeat=15)
        await websocket.prepare(request)
        self.followers += 1
        # exec: the shell textual-serve starts it with becomes the follower, so that what
        # stops or kills it reaches the follower itself
        command = "exec " + shlex.join(self.follow(lang if lang in i18n.LANGS else self.lang))
        service = AppService(command,
                             write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                             close=websocket.close, download_manager=self.download_manager,
                             debug=False)
        try:
            await service.start(to_int(request.query.get("width", "80"), 80),
                                to_int(request.query.get("height", "24"), 24))
            await self._process_messages(websocket, service)
        except asyncio.CancelledError:
            await websocket.close()
        finally:
            try:
                await _stop(service)  # a follower that leaves costs nothing more
            finally:
                self.followers -= 1
        return websocket

    # ---- on a thread of its own --------------------------------------------------------
    def start(self) -> None:
        """Bind and serve; an address that cannot be had raises OSError here, before the
        teacher's screen starts."""
        self._runner = web.AppRunner(self._loop.run_until_complete(self._make_app()),
                                     handle_signals=False)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, self.host, self.port)
        self._loop.run_until_complete(site.start())
        self._thread = threading.Thread(target=self._loop.run_forever, name="commviz-share",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving, once the followers have said the class ended and left (at most
        LEAVE_S): every follower process left is stopped with its page."""
        if self._runner is None:
            return
        deadline = time.monotonic() + LEAVE_S
        while self.followers and time.monotonic() < deadline:
            time.sleep(0.1)

        async def stop() -> Any:
            await self._runner.cleanup()  # type: ignore[union-attr]

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(
            timeout=START_TIMEOUT_S + STOP_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=START_TIMEOUT_S)
        self._runner = None


async def _stop(service: AppService) -> None:
    """Ask a follower to quit; one that has not within STOP_S, or whose page is closed
    meanwhile (the server stopping), is killed."""
    try:
        await asyncio.wait_for(service.stop(), STOP_S)
        if service._process is not None:  # (stop may return before the process has ended)
            await asyncio.wait_for(service._process.wait(), STOP_S)
    except (asyncio.TimeoutError, OSError):
        _kill(service)
    except asyncio.CancelledError:
        _kill(service)
        raise


def _kill(service: AppService) -> None:
    process = service._process  # (textual-serve keeps no other handle on it)
    if process is not None and process.returncode is None:
        process.kill()


def follower_command(addr: str, title: str,
                     recording: str | None = None) -> Callable[[str], list[str]]:
    """The command a browser's follower runs: ``commviz follow`` of ``addr`` in a language
    (playing ``recording`` too, where the teacher plays it)."""
    played = [] if recording is None else ["--recording", os.path.abspath(recording)]
    return lambda lang: [sys.executable, "-m", "commviz", "follow", addr, "--lang", lang,
                         "--title", title, *played]
