"""GPU topology and link traffic through NVML (rank/gpu_topology.py, rank/telemetry.py), the
``topo`` message and the model's links between ranks. No GPU here: a fake ``pynvml`` module
stands for three machines, one without a driver, one with two GPUs joined by NVLink, one
with three GPUs on PCIe only."""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
import time
import types

import pytest
import torch  # noqa: F401  (the sampler asks NVML only in a process that has torch)
from fakes import fake_nvml, heartbeats, op_batch, topology

from commviz import cli
from commviz.launch import launcher
from commviz.rank import telemetry
from commviz.rank.emitter import Emitter
from commviz.rank.gpu_topology import read_topology
from commviz.rank.nvml import Nvml
from commviz.rank.telemetry import TelemetrySampler
from commviz.viewer import recording
from commviz.viewer.model import Model
from commviz.viewer.transport import Receiver
from commviz.wire import protocol


@pytest.fixture
def sampler(monkeypatch):
    """``sampler(nvml)``: a TelemetrySampler that finds ``nvml`` as pynvml, and torch's
    cuda:N as the fake GPU N."""

    def make(nv: types.ModuleType) -> TelemetrySampler:
        monkeypatch.setitem(__import__("sys").modules, "pynvml", nv)
        monkeypatch.setattr(telemetry, "_cuda_uuid", lambda i: f"GPU-fake-{i}")
        return TelemetrySampler()

    return make


def test_no_driver_is_a_note_not_an_error(sampler):
    s = sampler(fake_nvml(driver=False))
    tel = s.sample("cuda:0")
    assert tel["gpu_util_pct"] is None and tel["nvlink_tx_bps"] is None
    assert tel["cpu_pct"] is not None
    topo = s.topology("cuda:0")
    assert topo == {"gpu": -1, "gpus": [], "links": [],
                    "note": "no GPU: NVML unavailable (NVMLError_LibraryNotFound)"}


def test_cpu_ranks_say_so_without_asking_nvml(sampler):
    nv = fake_nvml(driver=False)
    nv.nvmlInit = None  # calling it would fail the test
    s = sampler(nv)
    assert s.topology("cpu")["note"] == "no GPU: CPU tensors"
    assert s.sample("cpu")["gpu_util_pct"] is None


def test_two_gpus_with_nvlink(sampler):
    nv = fake_nvml(gpus=2, nvlinks=4, levels={(0, 1): 40})
    s = sampler(nv)
    topo = s.topology("cuda:1")
    assert topo["gpu"] == 1 and topo["note"] == ""
    assert topo["gpus"] == [[0, "GPU-fake-0", "NVIDIA H200", "00000000:18:00.0"],
                            [1, "GPU-fake-1", "NVIDIA H200", "00000000:28:00.0"]]
    assert topo["links"] == [[0, 1, 4, "NODE"]]
    first = s.sample("cuda:1")
    assert first["gpu_util_pct"] == 87 and first["gpu_power_w"] == 412.0
    assert first["pcie_tx_bps"] == 250 * 1024 and first["pcie_rx_bps"] == 500 * 1024
    assert first["nvlink_tx_bps"] is None  # a rate needs two readings
    nv.counters[138] += 2_000_000  # KiB sent in the next half second
    nv.counters[139] += 1_000_000
    nv.t_us += 500_000
    second = s.sample("cuda:1")
    assert second["nvlink_tx_bps"] == 2_000_000 * 1024 / 0.5
    assert second["nvlink_rx_bps"] == 1_000_000 * 1024 / 0.5


def test_pcie_only(sampler):
    nv = fake_nvml(gpus=3, levels={(0, 1): 10, (0, 2): 50, (1, 2): 50})
    asked = []
    field_values = nv.nvmlDeviceGetFieldValues
    nv.nvmlDeviceGetFieldValues = lambda h, f: asked.append(1) or field_values(h, f)
    s = sampler(nv)
    topo = s.topology("cuda:0")
    assert topo["links"] == [[0, 1, 0, "PIX"], [0, 2, 0, "SYS"], [1, 2, 0, "SYS"]]
    for _ in range(3):
        tel = s.sample("cuda:0")
    assert tel["nvlink_tx_bps"] is None and tel["pcie_tx_bps"] == 250 * 1024
    assert len(asked) == 1  # NVLink counters not supported: not asked again
    assert read_topology(nv, None)["gpu"] == -1  # no UUID of ours: no GPU of ours


def test_nvml_failing_midway_degrades_field_by_field():
    nv = fake_nvml(gpus=2, nvlinks=2, levels={})  # no level known for the pair
    nv.nvmlDeviceGetName = None  # a missing function
    topo = read_topology(nv, "GPU-fake-0")
    assert topo["gpus"][0][2] == "?" and topo["links"] == [[0, 1, 2, ""]]
    nv.nvmlDeviceGetCount = lambda: 1 / 0
    assert read_topology(nv, None)["note"] == "no GPU: NVML cannot list the GPUs " \
                                             "(ZeroDivisionError)"


def counted(nv: types.ModuleType) -> list[str]:
    """The calls of nvmlInit and nvmlShutdown ``nv`` gets, in order."""
    calls: list[str] = []
    init = nv.nvmlInit
    nv.nvmlInit = lambda: calls.append("init") or init()
    nv.nvmlShutdown = lambda: calls.append("shutdown")
    return calls


def test_nvml_is_initialised_once_and_shut_down_once(monkeypatch):
    nv = fake_nvml(gpus=1)
    calls = counted(nv)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    nvml = Nvml()
    assert nvml.open() is nv and nvml.open() is nv and nvml.module is nv
    nvml.close()
    nvml.close()
    assert calls == ["init", "shutdown"] and nvml.module is None
    assert nvml.open() is nv and calls == ["init", "shutdown", "init"]  # opened again


@pytest.mark.parametrize("missing", ["module", "driver"])
def test_nvml_that_cannot_start_says_why_and_is_not_asked_again(monkeypatch, missing):
    nv = fake_nvml(driver=False)
    calls = counted(nv)
    monkeypatch.setitem(sys.modules, "pynvml", None if missing == "module" else nv)
    nvml = Nvml()
    assert nvml.open() is None and nvml.open() is None
    nvml.close()
    assert nvml.why == ("nvidia-ml-py (pynvml) is not installed" if missing == "module"
                        else "NVML unavailable (NVMLError_LibraryNotFound)")
    assert calls == ([] if missing == "module" else ["init"])  # never shut down: not up


def test_the_sampler_releases_nvml_when_closed_or_when_its_gpu_is_unknown(sampler):
    nv = fake_nvml(gpus=2)
    calls = counted(nv)
    s = sampler(nv)
    assert s.sample("cuda:1")["gpu_util_pct"] == 87
    s.sample("cuda:1")
    assert calls == ["init"]
    s.close()
    assert calls == ["init", "shutdown"]
    lost = sampler(nv)
    assert lost.topology("cuda:5")["note"] == "no GPU: NVML does not know cuda:5 (NVMLError)"
    assert calls == ["init", "shutdown", "init", "shutdown"]
    assert lost.sample("cuda:5")["gpu_util_pct"] is None and len(calls) == 4


def test_the_launcher_counts_visible_gpus_and_releases_nvml(monkeypatch):
    nv = fake_nvml(gpus=4)
    calls = counted(nv)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert launcher.gpu_count() == 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert launcher.gpu_count() == 2
    assert calls == ["init", "shutdown"] * 2
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(driver=False))
    assert launcher.gpu_count() == 0


def _topo(rank: int, host: str, topo: dict) -> protocol.GpuTopology:
    msg = protocol.decode(protocol.encode_topology(rank, host, topo))
    assert isinstance(msg, protocol.GpuTopology)
    return msg


def test_model_labels_links_between_ranks():
    nvlink = read_topology(fake_nvml(gpus=2, nvlinks=18, levels={(0, 1): 30}), None)
    pcie = read_topology(fake_nvml(gpus=3, levels={(0, 1): 10, (0, 2): 50, (1, 2): 50}), None)
    m = Model(clock=lambda: 0.0)
    m.apply([_topo(0, "a", {**nvlink, "gpu": 0}), _topo(1, "a", {**nvlink, "gpu": 1}),
             _topo(2, "b", {**pcie, "gpu": 2}), _topo(3, "b", {**pcie, "gpu": 0}),
             _topo(4, "b", {**pcie, "gpu": 0}),
             _topo(5, "c", {"gpu": -1, "gpus": [], "links": [], "note": "no GPU: x"})])
    assert m.gpu_links() == {(0, 1): "NV18", (2, 3): "SYS", (2, 4): "SYS",
                             (3, 4): "same GPU"}
    assert m.gpu_notes() == {"no GPU: x": [5]}


def test_links_are_looked_for_within_each_host_of_a_1024_rank_job():
    """128 nodes of 8 GPUs, NVLinked in pairs: the 28 pairs of each node, none across nodes
    (every pair of the job is half a million: only those of one host are looked at)."""
    levels = {(a, b): 50 for a in range(8) for b in range(a + 1, 8)}
    topo = read_topology(fake_nvml(gpus=8, nvlinks=18, levels=levels), None)
    m = Model(clock=lambda: 0.0)
    m.apply([_topo(r, f"node{r // 8:03d}", {**topo, "gpu": r % 8}) for r in range(1024)])
    links = m.gpu_links()
    assert len(links) == 128 * 28
    assert sorted(kind for (r, s), kind in links.items() if r < 8) == ["NV18"] * 4 + ["SYS"] * 24
    assert all(r // 8 == s // 8 for r, s in links)
    assert m.gpu_notes() == {}


@pytest.mark.parametrize("bad", [
    {"gpu": 2, "gpus": [[0, "u", "n", "b"]], "links": [], "note": ""},  # no GPU 2
    {"gpu": 0, "gpus": [[0, "u", "n", "b"], [1, "u", "n", "b"]], "links": [[1, 0, 1, "SYS"]],
     "note": ""},  # a > b
    {"gpu": 0, "gpus": [[0, "u", "n", "b"], [1, "u", "n", "b"]], "links": [[0, 1, 1, "NV9"]],
     "note": ""},  # not a level
    {"gpu": 0, "gpus": [[0, "u", "n"]], "links": [], "note": ""},
    {"gpu": -1, "gpus": [], "links": [], "note": 5},
    {"gpu": -1, "gpus": "none", "links": [], "note": ""},
])
def test_bad_topology_messages_are_rejected(bad):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(protocol.encode_topology(0, "h", bad))


@pytest.mark.integration
def test_a_cpu_rank_reports_no_gpu_to_the_viewer():
    receiver = Receiver("tcp://127.0.0.1:*")
    em = Emitter(receiver.addr, lambda: (0, 1, "gloo", "cpu"))
    try:
        found = None
        deadline = time.monotonic() + 10
        while found is None and time.monotonic() < deadline:
            found = next((m for m in receiver.drain(50)
                          if isinstance(m, protocol.GpuTopology)), None)
        assert found is not None
        assert (found.rank, found.host, found.gpu) == (0, socket.gethostname(), -1)
        assert found.note == "no GPU: CPU tensors"
    finally:
        em.close()
        receiver.close()


def test_a_recording_holds_each_ranks_topology_once_and_reads_it_back(tmp_path, capsys):
    nv = fake_nvml(gpus=2, nvlinks=18, levels={(0, 1): 30})
    first = [topology(0, "a", nv, 0), topology(1, "a", nv, 1)]
    moved = dataclasses.replace(first[1], gpu=0)  # rank 1 now on rank 0's GPU
    path = tmp_path / "run.jsonl"
    rec = recording.Recorder(path)
    rec.write([*heartbeats(2), *first])
    rec.write([op_batch(r, [{"id": 1, "op": "all_reduce", "seq": 1, "t_start": 10,
                             "bytes_in": 8, "bytes_out": 8}], groups={0: ("0", (0, 1))})
               for r in range(2)])
    rec.write(first)  # ranks repeat it every 10 s: not recorded again
    rec.write([moved])
    rec.close({"records": 2})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    topo = [line for line in lines if line.get("kind") == "topo"]
    assert topo == [
        {"kind": "topo", "rank": 0, "host": "a", "gpu": 0,
         "gpus": [[0, "GPU-fake-0", "NVIDIA H200", "00000000:18:00.0"],
                  [1, "GPU-fake-1", "NVIDIA H200", "00000000:28:00.0"]],
         "links": [[0, 1, 18, "PHB"]], "note": ""},
        {"kind": "topo", "rank": 1, "host": "a", "gpu": 1, "gpus": topo[0]["gpus"],
         "links": [[0, 1, 18, "PHB"]], "note": ""},
        {"kind": "topo", "rank": 1, "host": "a", "gpu": 0, "gpus": topo[0]["gpus"],
         "links": [[0, 1, 18, "PHB"]], "note": ""}]
    back = [m for m in recording.read(path) if isinstance(m, protocol.GpuTopology)]
    assert back == [*first, moved]
    model = Model(clock=lambda: 0.0)
    model.apply(back[:2])
    assert model.gpu_links() == {(0, 1): "NV18"}
    model.apply(back[2:])
    assert model.gpu_links() == {(0, 1): "same GPU"}  # a change is seen, not the old links
    assert cli.main(["stats", str(path)]) == 0  # stats reads past them
    assert "2 op records, 1 collective instance, 0 transfers" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text().replace('"links":[[0,1,18,"PHB"]]',
                                            '"links":[[1,0,18,"PHB"]]', 1))
    assert cli.main(["stats", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"commviz: error: {bad}:") and "malformed topo line" in err
    assert err.count("\n") == 1
