"""A straggler in an ordinary training loop, end to end: ``commviz run`` on a real
torch.multiprocessing job whose rank 2 is late at every step's first collective (user
trial: never named, because the step's next collectives are on time)."""

from __future__ import annotations

import json
import re

import pytest
from procs import PY
from test_run import JOBS, run  # noqa: F401  (the fixture)

from commviz.launch.launcher import free_port

pytestmark = pytest.mark.integration  # real ranks, sockets or apps


@pytest.mark.timeout(150)
def test_a_rank_late_at_every_steps_first_collective_is_named(run, tmp_path):  # noqa: F811
    rec = tmp_path / "run.jsonl"
    rc, out, err = run("--headless", "--record", str(rec), "--", PY,
                       str(JOBS / "step_straggler_job.py"), str(free_port()), "6", timeout=120)
    assert rc == 0, "\n".join(out + err)
    diags = [d for d in map(json.loads, rec.read_text().splitlines()) if d.get("kind") == "diag"]
    (f,) = [d for d in diags if d["type"] == "straggler"]
    assert (f["ranks"], f["group"]) == ([2], [0, 1, 2]), diags
    assert f["message"].startswith("rank 2 arrived last at all_reduce in group 0-2 "), f
    # the others waited about 0.2 s each, at 3 or more steps, once per step (a union)
    waited = float(re.search(r"\(([\d.]+) s of rank time\)", f["message"]).group(1))
    late = int(re.search(r" (\d+) times in a row", f["message"]).group(1))
    assert 3 <= late <= 6 and 0.3 * late <= waited <= 0.5 * late, f
    assert not [d for d in diags if d["type"] in ("hang", "lost_rank", "failed")], diags
