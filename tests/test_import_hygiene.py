"""The core and the rank side must not drag in the UI: checked in fresh interpreters."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # real ranks, sockets or apps

CORE = ["commviz", "commviz.wire.protocol", "commviz.knowledge.bandwidth",
        "commviz.knowledge.nccl_log", "commviz.knowledge.schedules", "commviz.viewer.recording",
        "commviz.viewer.trace_export",
        "commviz.viewer.model", "commviz.viewer.diagnose", "commviz.viewer.findings_text",
        "commviz.viewer.transport", "commviz.viewer.session",
        "commviz.headless", "commviz.launch.launcher", "commviz.launch.job"]
RANK_SIDE = ["commviz.rank.hooks", "commviz.rank.emitter", "commviz.rank.telemetry",
             "commviz.rank.cuda_timing", "commviz.rank.gpu_topology",
             "commviz.rank.ddp", "commviz.rank.funcol", "commviz.rank.phases",
             "commviz.launch.runner", "commviz.wire.nodes", "commviz.wire.keys",
             "commviz.wire.clocksync", "commviz.wire.relayed", "commviz.wire.link",
             "commviz.relay.relay"]


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", CORE)
def test_core_imports_without_textual(module):
    assert "textual" not in _loaded_after_import(module)


@pytest.mark.parametrize("module", RANK_SIDE)
def test_rank_side_imports_neither_textual_nor_rich(module):
    loaded = _loaded_after_import(module)
    assert "textual" not in loaded and "rich" not in loaded


def test_plain_import_does_not_load_torch():
    assert "torch" not in _loaded_after_import("commviz")
