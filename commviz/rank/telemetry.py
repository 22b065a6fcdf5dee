"""Local telemetry of one rank: its GPU through NVML when it has one, its process otherwise.

Sampled on the emitter thread at about 2 Hz. Every reading degrades to ``None`` when the
driver, the device or the function is missing: telemetry must never break a rank. The local
GPUs' topology (gpu_topology.py) is read here too, once per device the rank uses.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import psutil

from commviz.rank.gpu_topology import LinkRates, no_gpu, read_topology
from commviz.rank.nvml import Nvml


class TelemetrySampler:
    """Reads CPU%/RSS of this process and, once the rank uses a GPU, that GPU's NVML counters."""

    def __init__(self) -> None:
        self._proc = psutil.Process(os.getpid())
        self._proc.cpu_percent(None)  # the first reading primes the counter
        self._nvml = Nvml()           # opened once the rank uses a GPU
        self._handle: Any = None
        self._uuid: str | None = None
        self._why = ""                # why NVML is unusable, for the "no GPU" note
        self._rates = LinkRates()
        self._topology: tuple[str, dict[str, Any]] | None = None  # (device, what was read)

    def sample(self, device: str) -> dict[str, float | None]:
        out: dict[str, float | None] = dict.fromkeys(
            ("cpu_pct", "rss_bytes", "gpu_util_pct", "gpu_mem_used", "gpu_mem_total",
             "gpu_power_w", *LinkRates.KEYS))
        try:
            out["cpu_pct"] = float(self._proc.cpu_percent(None))
            out["rss_bytes"] = float(self._proc.memory_info().rss)
        except psutil.Error:
            pass
        handle = self._gpu_handle(device)
        if handle is not None:
            nv = self._nvml.module
            out["gpu_util_pct"] = _try(lambda: float(nv.nvmlDeviceGetUtilizationRates(handle).gpu))
            mem = _try(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
            if mem is not None:
                out["gpu_mem_used"], out["gpu_mem_total"] = float(mem.used), float(mem.total)
            out["gpu_power_w"] = _try(lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            out.update(self._rates.sample(nv, handle))
        return out

    def topology(self, device: str) -> dict[str, Any]:
        """The local GPUs and their links (gpu_topology.read_topology), or a "no GPU" note;
        read once per device the rank uses."""
        if self._topology is not None and self._topology[0] == device:
            return self._topology[1]
        if not device.startswith("cuda:"):
            topo = no_gpu("CPU tensors")
        elif self._gpu_handle(device) is None:
            topo = no_gpu(self._why or "NVML has no handle for this rank's GPU")
        else:
            topo = read_topology(self._nvml.module, self._uuid)
        self._topology = (device, topo)
        return topo

    def _gpu_handle(self, device: str) -> Any:
        """The NVML handle of ``device`` ("cuda:N" as torch numbers it), found once."""
        if self._handle is not None or self._why or not device.startswith("cuda:"):
            return self._handle
        if "torch" not in sys.modules:
            return None
        nv = self._nvml.open()
        if nv is None:
            self._why = self._nvml.why
            return None
        try:
            uuid = _cuda_uuid(int(device.removeprefix("cuda:")))
            self._handle = nv.nvmlDeviceGetHandleByUUID(uuid)
            self._uuid = uuid
        except Exception as exc:  # an unknown device: stay on CPU readings
            self._why = f"NVML does not know {device} ({type(exc).__name__})"
            self._nvml.close()
        return self._handle

    def close(self) -> None:
        """Release NVML (the emitter thread's last act)."""
        self._handle = None
        self._nvml.close()


def _cuda_uuid(index: int) -> str:
    """The UUID of torch's CUDA device ``index`` as NVML writes it (``GPU-...``)."""
    torch = sys.modules["torch"]
    uuid = str(torch.cuda.get_device_properties(index).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def _try(read: Any) -> Any:
    try:
        return read()
    except Exception:
        return None
