"""``--share``: a class follows the teacher's viewer.

The republisher and its followers over real sockets (every message to each, history first for
a late joiner, the class's end told, nothing sent back); the page's server (its token, its
cap); then the demo with real gloo ranks, headless, and headless Chromium at the URL: refused
without the token, and with it each browser's own follower, in its own language, showing the
op, the four ranks and the replay's steps, until the class ends.
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import time

import aiohttp
import pytest
import zmq
from browser import Browser, chromium
from fakes import T0_NS, FakeClock, bye, scripted_all_reduce
from test_tui import frame, panel, sync

from commviz.tui.app import CommvizApp
from commviz.tui.share_server import (
    REFUSED_FULL,
    REFUSED_TOKEN,
    ShareServer,
    follower_command,
    parse_address,
)
from commviz.viewer import recording
from commviz.viewer.playback import Playback, PlaybackControl
from commviz.viewer.session import Session
from commviz.viewer.share import HELLO, ClockFollower, Subscriber
from commviz.wire import protocol

pytestmark = pytest.mark.integration  # real sockets, processes, a browser


def _heartbeat(rank: int) -> bytes:
    return protocol.encode_heartbeat(
        rank, world=2, host="h", pid=100 + rank, backend="gloo", device="cpu",
        t_ns=time.time_ns(), dropped=0, inc=1, job="j",
        tel={"cpu_pct": 1.0, "rss_bytes": 1.0, "gpu_util_pct": None, "gpu_mem_used": None,
             "gpu_mem_total": None, "gpu_power_w": None})


def _drain(sub: Subscriber, want: int, seconds: float = 5.0) -> list[protocol.Message]:
    got: list[protocol.Message] = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        got += sub.drain(50)
    return got


def _pump(session: Session, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        session.poll(20)


def test_every_follower_gets_every_message_a_late_one_the_history_first():
    teacher = Session("tcp://127.0.0.1:*", share=True)
    ctx = zmq.Context()
    rank = ctx.socket(zmq.PUSH)
    rank.connect(teacher.addr)
    early = Subscriber(teacher.share.addr)
    try:
        _pump(teacher, 0.3)  # the early one's hello answered
        rank.send(_heartbeat(0))
        rank.send(b"\x92not a message")  # malformed: rejected by the teacher and the class
        _pump(teacher, 0.3)
        late = Subscriber(teacher.share.addr)
        rank.send(_heartbeat(1))
        _pump(teacher, 0.3)
        for sub in (early, late):
            got = _drain(sub, 2)
            assert [m.rank for m in got] == [0, 1]  # the late one: rank 0's from the history
            assert sub.rejected == teacher.rejected == 1
        assert teacher.share.followers and len(teacher.share.followers) == 2
    finally:
        teacher.close()
        rank.close(0)
        ctx.term()
    for sub in (early, late):  # told the class ended as the teacher's viewer closed
        deadline = time.monotonic() + 5
        while not sub.ended and time.monotonic() < deadline:
            sub.drain(50)
        assert sub.ended
        sub.close()


def test_a_follower_can_send_nothing_but_its_hello():
    """What a follower sends goes nowhere but the republisher, which reads hellos only: a
    larger message drops that connection; the ranks' receiver is never reached."""
    teacher = Session("tcp://127.0.0.1:*", share=True)
    ctx = zmq.Context()
    rogue = ctx.socket(zmq.DEALER)
    rogue.connect(teacher.share.addr)
    try:
        rogue.send(_heartbeat(0))  # a message of the wire, sent the wrong way
        rogue.send(b"x" * 4096)
        rogue.send(HELLO + b"!")
        _pump(teacher, 0.5)
        assert teacher.receiver.received == 0 and not teacher.share.followers
    finally:
        rogue.close(0)
        ctx.term()
        teacher.close()


# ---- a playback shared (play --share): its clock, which each student's playback follows --------
S = 1_000_000_000


def _ten_seconds(path, demo: str | None = None):
    """Two ranks, an all_reduce at each whole second of ten, then goodbyes (a recording of
    the ``demo`` if one is named)."""
    messages = [m for i in range(10)
                for m in scripted_all_reduce(world=2, steps=1, t0_ns=T0_NS + i * S, first=i)]
    rec = recording.Recorder(path, {"demo": demo})
    rec.write([*messages, *(bye(r, T0_NS + 10 * S) for r in range(2))])
    rec.close({"t_ns": T0_NS + 10 * S})
    return path


def _until(check, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the student never got there"
        time.sleep(0.02)


def _student(path, addr: str, real) -> tuple[Playback, ClockFollower]:
    student, teacher = Playback(path, real=real), ClockFollower(addr)
    student.follow_class(teacher)
    student.start()
    return student, teacher


def test_a_students_playback_goes_where_the_teachers_goes(tmp_path):
    """Each student's own playback of the file: it stands still until the teacher's clock is
    told, seeks to a teacher far ahead (a late joiner too), pauses and speeds up with it,
    starts again with it, and hears that the class ended."""
    path = _ten_seconds(tmp_path / "r.jsonl")
    t_real, s_real = FakeClock(), FakeClock()
    teacher = Playback(path, real=t_real)
    control = PlaybackControl(teacher, paused=True)
    share = teacher.share_class()
    student, told = _student(path, share.addr, s_real)
    assert student.clock.stopped("teacher")  # until the teacher's clock is heard
    teacher.start()
    try:
        _until(lambda: share.followers)
        control.toggle()  # plays: 2.5 s later, three all_reduces done
        t_real.advance(2.5)
        _until(lambda: student.model.instances == 3 == teacher.model.instances)
        assert abs(student.clock.wall_ns() - teacher.clock.wall_ns()) < S
        control.toggle()  # paused: the student's clock stops where the teacher's did
        _until(lambda: student.clock.stopped("teacher"))
        s_real.advance(3.0)  # (its own time passing moves nothing)
        assert student.clock.wall_ns() == teacher.clock.wall_ns()
        control.toggle()
        control.faster()
        _until(lambda: student.clock.speed == 2.0 and not student.clock.stopped("teacher"))
        t_real.advance(1.0)  # two seconds of the recording at twice the speed: 4.5 s in
        _until(lambda: student.model.instances == 5 == teacher.model.instances)
        late, late_told = _student(path, share.addr, FakeClock())  # joins 4.5 s in
        try:
            _until(lambda: late.model.instances == 5)
        finally:
            late.close()
            late_told.close()
        teacher.reset()  # `r`: from the start again, for everyone
        _until(lambda: student.model.instances == 0 and student.epoch == 1)
    finally:
        teacher.close()
    _until(lambda: (told.take(), told.ended)[1])
    student.close()


@sync
async def test_a_students_playback_has_no_keys_of_its_own_for_the_clock(tmp_path):
    """Pause, step, speed and `f` are the teacher's: the student's screen offers none of
    them, a key pressed there moves nothing, and it says who drives the playback."""
    path = _ten_seconds(tmp_path / "r.jsonl", demo="all_reduce")
    teacher = Playback(path)
    PlaybackControl(teacher, paused=True)
    share = teacher.share_class()
    teacher.start()
    student, told = _student(path, share.addr, time.monotonic)
    app = CommvizApp(student, None, "class", wall_ns=student.clock.wall_ns, demo=student.demo,
                     controller=PlaybackControl(student), class_ended=lambda: told.ended)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            for action in ("toggle_play", "step", "play_faster", "play_slower",
                           "next_finding", "restart"):
                assert not app.check_action(action, ()), action
            await pilot.press("space", "n", "]", "f")
            await frame(pilot)
            assert teacher.clock.stopped("paused") and student.clock.stopped("teacher")
            assert student.at_s == 0 and student.model.instances == 0
            assert "held by the teacher · 0.0 of " in panel(app, "#status")
            assert "The teacher plays the recording" in panel(app, "#explain")
    finally:
        teacher.close()
        student.close()


@pytest.mark.parametrize("args, said", [
    (["--share", "nope"], "--share takes [HOST:]PORT"),
    (["--share-max", "3"], "--share-max caps the followers of --share: give --share too"),
    (["--share", "8123", "--share-max", "0"], "--share-max must be at least 1"),
])
def test_bad_share_options_get_one_sentence_and_exit_2(procs, args, said):
    proc = procs.start("-m", "commviz", "demo", "all_gather", "--headless", *args)
    assert proc.finish(60) == 2
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_share_addresses():
    assert parse_address("8000") == ("127.0.0.1", 8000)
    assert parse_address("0.0.0.0:8000") == ("0.0.0.0", 8000)
    with pytest.raises(ValueError, match=r"\[HOST:\]PORT"):
        parse_address("localhost")


def test_the_page_needs_the_token_and_one_follower_too_many_is_told_why(procs, tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    server = ShareServer(lambda lang: sleeper, "127.0.0.1", _free_port(), "class", "en", most=1)
    server.start()

    async def visit() -> None:
        base = server.public_url
        async with aiohttp.ClientSession() as http:
            for url in (f"{base}/", f"{base}/?token=wrong", f"{base}/ws/wrong/en"):
                async with http.get(url) as r:
                    assert (r.status, await r.text()) == (403, REFUSED_TOKEN)
            async with http.get(server.url + "&lang=pt") as r:
                page = await r.text()
                assert r.status == 200 and f"/ws/{server.token}/pt" in page
            async with http.ws_connect(f"{base.replace('http', 'ws')}/ws/{server.token}/en"):
                for _ in range(50):  # the first follower is in
                    if server.followers:
                        break
                    await asyncio.sleep(0.1)
                async with http.get(f"{base}/ws/{server.token}/en") as r:
                    assert (r.status, await r.text()) == (503, REFUSED_FULL.format(n=1))

    try:
        asyncio.run(visit())
    finally:
        server.close()
    assert server.refused == 4


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _url(proc, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = re.search(r"the class follows at (\S+)", proc.stderr)
        if found:
            return found.group(1)
        time.sleep(0.1)
    pytest.fail(f"no share URL printed\n{proc.stderr}")


@pytest.mark.skipif(chromium() is None, reason="needs Chromium (Debian: apt-get install "
                    "chromium); .ci/run installs it")
@pytest.mark.timeout(240)
def test_students_follow_the_class_in_a_real_browser_each_in_their_language(procs):
    port = _free_port()
    # 12 iterations 1 s apart: the class runs while the browsers join and watch
    teacher = procs.start("-m", "commviz", "demo", "all_gather", "--ranks", "4", "--headless",
                          "--iters", "12", "--interval", "1", "--share", str(port))
    url = _url(teacher)
    assert url.startswith(f"http://127.0.0.1:{port}/?token=")
    browser, other = Browser(), Browser()
    try:
        async def two_students():
            return await asyncio.gather(
                browser.visit(url, 60, until="the class ended"),
                other.visit(url + "&lang=pt", 60, until="a aula terminou"),
                browser.visit(url.split("?")[0], 10))

        (code, en), (code_pt, pt), (refused, nothing) = asyncio.run(two_students())
    finally:
        browser.close()
        other.close()
    assert teacher.finish(60) == 0, teacher.stderr
    assert refused == 403 and "all_gather" not in nothing
    assert code == code_pt == 200
    for seen in (en, pt):  # the op, every rank's row, the replay's steps of the ring
        assert "all_gather" in seen
        assert all(re.search(rf"\b{r} +vm|\b{r} +\S+ +cpu", seen) for r in range(4)), seen[-3000:]
        assert re.search(r"step \w*\d+ \(\d+ of \d+\)|passo \w*\d+ \(\d+ de \d+\)", seen), \
            seen[-3000:]
    assert "Timeline" in en and "Linha do tempo" in pt  # each student's own language
    assert "following the teacher's viewer at tcp://127.0.0.1:" in en
    assert "the class ended" in en and "a aula terminou" in pt


@pytest.mark.skipif(chromium() is None, reason="needs Chromium (Debian: apt-get install "
                    "chromium); .ci/run installs it")
@pytest.mark.timeout(180)
def test_a_student_in_a_real_browser_follows_the_teachers_playback(tmp_path):
    """What ``commviz play --share`` serves, its teacher in this process: the student's page
    runs ``commviz follow --recording``, held while the teacher's playback is paused, then
    playing the same all_reduces as the teacher's, until the class ends."""
    path = _ten_seconds(tmp_path / "r.jsonl")
    teacher = Playback(path)
    control = PlaybackControl(teacher, paused=True)
    share = teacher.share_class()
    teacher.start()
    server = ShareServer(follower_command(share.addr, "a recording", str(path)), "127.0.0.1",
                         _free_port(), "a recording", "en")
    server.start()
    browser = Browser()

    def drive() -> None:  # the teacher's keys: play once the student's follower is there
        _until(lambda: share.followers, 60)
        time.sleep(3)  # the student sees the playback held
        control.toggle()
        _until(lambda: teacher.model.instances >= 2, 30)
        time.sleep(2)
        teacher.close()  # the teacher quits: the class ends

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    try:
        code, seen = asyncio.run(browser.visit(server.url, 90, until="the class ended"))
    finally:
        browser.close()
        driver.join(60)
        teacher.close()
        server.close()
    assert code == 200
    assert "following the class · a recording" in seen
    assert "held by the teacher" in seen and "the teacher's keys drive it" in seen, seen[-3000:]
    assert "all_reduce" in seen and "the class ended" in seen
