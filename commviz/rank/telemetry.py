"""Local telemetry of one rank: its GPU through NVML when it has one, its process otherwise.

Sampled on the emitter thread at about 2 Hz. Every reading degrades to ``None`` when the
driver, the device or the function is missing: telemetry must never break a rank.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import psutil


class TelemetrySampler:
    """Reads CPU%/RSS of this process and, once the rank uses a GPU, that GPU's NVML counters."""

    def __init__(self) -> None:
        self._proc = psutil.Process(os.getpid())
        self._proc.cpu_percent(None)  # the first reading primes the counter
        self._nvml: Any = None        # the pynvml module once initialised, False if unusable
        self._handle: Any = None

    def sample(self, device: str) -> dict[str, float | None]:
        out: dict[str, float | None] = dict.fromkeys(
            ("cpu_pct", "rss_bytes", "gpu_util_pct", "gpu_mem_used", "gpu_mem_total",
             "gpu_power_w"))
        try:
            out["cpu_pct"] = float(self._proc.cpu_percent(None))
            out["rss_bytes"] = float(self._proc.memory_info().rss)
        except psutil.Error:
            pass
        handle = self._gpu_handle(device)
        if handle is not None:
            nv = self._nvml
            out["gpu_util_pct"] = _try(lambda: float(nv.nvmlDeviceGetUtilizationRates(handle).gpu))
            mem = _try(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
            if mem is not None:
                out["gpu_mem_used"], out["gpu_mem_total"] = float(mem.used), float(mem.total)
            out["gpu_power_w"] = _try(lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        return out

    def _gpu_handle(self, device: str) -> Any:
        """The NVML handle of ``device`` ("cuda:N" as torch numbers it), found once."""
        if self._handle is not None or self._nvml is False or not device.startswith("cuda:"):
            return self._handle
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
            index = int(device.removeprefix("cuda:"))
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
            self._handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            self._nvml = pynvml
        except Exception:  # no driver, no NVML, an unknown device: stay on CPU readings
            self._nvml = False
        return self._handle


def _try(read: Any) -> Any:
    try:
        return read()
    except Exception:
        return None
