"""NVML through nvidia-ml-py (``pynvml``), opened once by each of its users and closed by it.

Used by a rank's telemetry (telemetry.py, which hands the module to gpu_topology.py) and by
the launcher counting GPUs. ``pynvml`` is imported only when NVML is first wanted: most
processes never need it, and it may be missing. NVML counts its initialisations, so each
``nvmlInit`` here is paired with the ``nvmlShutdown`` of ``close()``. Failing never raises:
``why`` says what went wrong, in words the viewer shows (and translates) as they are.
"""

from __future__ import annotations

from typing import Any


class Nvml:
    """One user's NVML: ``open()`` returns the initialised ``pynvml`` module, or None."""

    def __init__(self) -> None:
        self.module: Any = None  # pynvml, once initialised
        self.why = ""            # why NVML is unusable, once open() has failed
        self._tried = False

    def open(self) -> Any:
        """``pynvml``, initialised on the first call; None (``why`` set) if it cannot be."""
        if self._tried:
            return self.module
        self._tried, self.why = True, ""
        try:
            import pynvml
        except ImportError:
            self.why = "nvidia-ml-py (pynvml) is not installed"
            return None
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # no driver, no NVML library
            self.why = f"NVML unavailable ({type(exc).__name__})"
            return None
        self.module = pynvml
        return pynvml

    def close(self) -> None:
        """Release NVML if open() initialised it; a later open() initialises it again."""
        module, self.module, self._tried = self.module, None, False
        if module is not None:
            try:
                module.nvmlShutdown()
            except Exception:  # a driver gone meanwhile: nothing left to release
                pass
