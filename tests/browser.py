"""A real browser for the tests of ``--share`` (and the pictures in docs/): headless Chromium
(Debian's ``chromium``) driven over its DevTools protocol, which it speaks itself (no driver
in between).

A page's terminal draws on a canvas, and the terminal object lives inside textual-serve's
script: what the page shows is read as the terminal is fed, from the websocket frames the
page receives (the follower's screen, as the bytes its terminal draws), escape sequences
taken out.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import itertools
import json
import re
import shutil
import subprocess
import tempfile

import aiohttp

# a terminal's control sequences: CSI (colours, moves), OSC, and single-character escapes
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium, its own profile, closed (and killed) by ``close``."""

    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="commviz-chromium-")
        self.proc = subprocess.Popen(
            [chromium() or "chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--remote-debugging-port=0", "--window-size=1800,1100",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.endpoint = self._endpoint()
        self._ids = itertools.count(1)

    def _endpoint(self) -> str:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/..."
            if line.startswith("DevTools listening on "):
                return line.split(" on ", 1)[1].strip()
        raise RuntimeError("chromium did not start its DevTools endpoint")

    async def visit(self, url: str, seconds: float, until: str | None = None) -> tuple[int, str]:
        """Open ``url`` in a new tab for up to ``seconds`` (less once ``until`` shows):
        the page's HTTP status, and the text its terminal was fed."""
        async with aiohttp.ClientSession() as http, http.ws_connect(self.endpoint,
                                                                   max_msg_size=0) as ws:
            early: list[dict] = []  # events that came while a command was answered
            target = await self._call(ws, early, "Target.createTarget", {"url": "about:blank"})
            session = (await self._call(ws, early, "Target.attachToTarget",
                                        {"targetId": target["targetId"], "flatten": True})
                       )["sessionId"]
            await self._call(ws, early, "Network.enable", {}, session)
            await self._call(ws, early, "Page.navigate", {"url": url}, session)
            status, text = 0, _Screen()
            loop = asyncio.get_running_loop()
            end = loop.time() + seconds
            while loop.time() < end and not (until and until in text.text):
                try:
                    msg = early.pop(0) if early else await asyncio.wait_for(
                        ws.receive_json(), end - loop.time())
                except asyncio.TimeoutError:
                    break
                method, params = msg.get("method"), msg.get("params", {})
                if method == "Network.responseReceived" and params.get("type") == "Document":
                    status = params["response"]["status"]
                elif method == "Network.webSocketFrameReceived":
                    frame = params["response"]
                    if frame["opcode"] == 2:  # binary: the terminal's bytes
                        text.feed(base64.b64decode(frame["payloadData"]))
            await self._call(ws, [], "Target.closeTarget", {"targetId": target["targetId"]})
            return status, text.text

    async def screenshot(self, url: str, out: str, ready: str, steps: list[str],
                         seconds: float, size: tuple[int, int] = (1600, 900)) -> None:
        """Open ``url``, wait up to ``seconds`` until the JavaScript ``ready`` is true, run each
        of ``steps`` (JavaScript; a promise is awaited), and write the page as a PNG to
        ``out``. Raises RuntimeError when the page is not ready in time or a step fails."""
        async with aiohttp.ClientSession() as http, http.ws_connect(self.endpoint,
                                                                   max_msg_size=0) as ws:
            early: list[dict] = []
            target = await self._call(ws, early, "Target.createTarget", {"url": "about:blank"})
            session = (await self._call(ws, early, "Target.attachToTarget",
                                        {"targetId": target["targetId"], "flatten": True})
                       )["sessionId"]
            width, height = size
            await self._call(ws, early, "Emulation.setDeviceMetricsOverride",
                             {"width": width, "height": height, "deviceScaleFactor": 1,
                              "mobile": False}, session)
            await self._call(ws, early, "Page.navigate", {"url": url}, session)

            async def run(expression: str) -> object:
                answer = await self._call(ws, early, "Runtime.evaluate", {
                    "expression": expression, "awaitPromise": True, "returnByValue": True},
                    session)
                if "exceptionDetails" in answer:
                    raise RuntimeError(f"{expression[:80]}: "
                                       f"{answer['exceptionDetails'].get('exception', {})}")
                return answer.get("result", {}).get("value")

            loop = asyncio.get_running_loop()
            end = loop.time() + seconds
            while not await run(f"Boolean((() => {{ try {{ return {ready}; }} "
                                f"catch (e) {{ return false; }} }})())"):
                if loop.time() > end:
                    raise RuntimeError(f"{url} was not ready within {seconds:.0f} s ({ready})")
                await asyncio.sleep(0.5)
            for step in steps:
                await run(step)
                await asyncio.sleep(1.5)  # let the page draw what the step changed
            shot = await self._call(ws, early, "Page.captureScreenshot", {"format": "png"},
                                    session)
            with open(out, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            await self._call(ws, [], "Target.closeTarget", {"targetId": target["targetId"]})

    async def _call(self, ws, early: list[dict], method: str, params: dict,
                    session: str | None = None) -> dict:
        """Send one command and wait for its answer; the events that come meanwhile are kept
        in ``early``, for the visit's loop."""
        number = next(self._ids)
        await ws.send_str(json.dumps({"id": number, "method": method, "params": params,
                                      **({"sessionId": session} if session else {})}))
        while True:
            msg = await ws.receive_json()
            if msg.get("id") == number:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                early.append(msg)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)


class _Screen:
    """The text a terminal was fed, its escape sequences taken out (UTF-8 split across
    frames is joined again)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._raw = ""

    def feed(self, data: bytes) -> None:
        self._raw += self._decoder.decode(data)

    @property
    def text(self) -> str:
        return _ESCAPES.sub(" ", self._raw)
