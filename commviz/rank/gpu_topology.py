"""The local GPUs' topology and link traffic through NVML, as ``nvidia-smi topo -m`` shows it.

Per pair of local GPUs: how many NVLinks join them (``NV#``) and, always, the PCIe path
between them, from ``nvmlDeviceGetTopologyCommonAncestor``: PIX (one PCIe switch), PXB
(several switches), PHB (a host bridge), NODE (within a NUMA node), SYS (across NUMA nodes,
through the SMP interconnect). Per GPU, the NVLink and PCIe throughput when NVML provides it.

``nvml`` is the ``pynvml`` module (tests give a fake). Every call is guarded: a missing
driver, GPU or function gives a "no GPU" note or a missing value, never an exception.
"""

from __future__ import annotations

from typing import Any

# nvmlGpuTopologyLevel_t -> nvidia-smi's legend; INTERNAL (two GPUs on one board) has no
# letter there, so it keeps NVML's word
LEVELS = {0: "INTERNAL", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVLINK_TX, NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/_RX, KiB counters
ALL_LINKS = 0xFFFFFFFF           # scopeId: summed over every link
MAX_GPUS = 64
NOTE_MAX = 200


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bus(pci: Any) -> str:
    """A PCI bus id as NVML writes it, normalised (``00000000:18:00.0``, any case)."""
    return _text(getattr(pci, "busIdLegacy", None) or pci.busId).lower()


def no_gpu(why: str) -> dict[str, Any]:
    return {"gpu": -1, "gpus": [], "links": [], "note": f"no GPU: {why}"[:NOTE_MAX]}


def read_topology(nvml: Any, my_uuid: str | None) -> dict[str, Any]:
    """``gpus``: [index, uuid, name, bus id] per local GPU; ``links``: [a, b, nvlinks, level]
    per pair a < b (level "" when NVML cannot say); ``gpu``: the index of the GPU whose UUID is
    ``my_uuid`` (-1: none); ``note``: "" or why there is nothing."""
    try:
        count = min(int(nvml.nvmlDeviceGetCount()), MAX_GPUS)
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    except Exception as exc:
        return no_gpu(f"NVML cannot list the GPUs ({type(exc).__name__})")
    if not handles:
        return no_gpu("NVML sees none")
    gpus, buses = [], []
    for i, h in enumerate(handles):
        uuid = _guard(lambda h=h: _text(nvml.nvmlDeviceGetUUID(h))) or ""
        name = _guard(lambda h=h: _text(nvml.nvmlDeviceGetName(h))) or "?"
        bus = _guard(lambda h=h: _bus(nvml.nvmlDeviceGetPciInfo(h))) or ""
        gpus.append([i, uuid, name, bus])
        buses.append(bus)
    links = []
    for a in range(count):
        peers = _nvlink_peers(nvml, handles[a])
        for b in range(a + 1, count):
            level = _guard(lambda a=a, b=b: LEVELS.get(
                int(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b])), ""))
            links.append([a, b, peers.get(buses[b], 0) if buses[b] else 0, level or ""])
    mine = next((g[0] for g in gpus if my_uuid and g[1] == my_uuid), -1)
    return {"gpu": mine, "gpus": gpus, "links": links, "note": ""}


def _nvlink_peers(nvml: Any, handle: Any) -> dict[str, int]:
    """Active NVLinks of one GPU, counted by the bus id at their other end."""
    peers: dict[str, int] = {}
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            bus = _bus(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link))
        except Exception:  # NotSupported (no NVLink at all), InvalidArgument (no such link)
            if link == 0:
                return peers
            continue
        peers[bus] = peers.get(bus, 0) + 1
    return peers


class LinkRates:
    """NVLink and PCIe throughput of one GPU in bytes/s: NVLink from the KiB counters (rate =
    change of value over change of NVML's timestamp, so the first reading gives none), PCIe
    from nvmlDeviceGetPcieThroughput (KB/s over NVML's last 20 ms)."""

    KEYS = ("nvlink_tx_bps", "nvlink_rx_bps", "pcie_tx_bps", "pcie_rx_bps")

    def __init__(self) -> None:
        self._last: dict[int, tuple[int, int]] = {}  # field -> (value KiB, timestamp us)
        self._no_nvlink = False

    def sample(self, nvml: Any, handle: Any) -> dict[str, float | None]:
        out: dict[str, float | None] = dict.fromkeys(self.KEYS)
        for key, counter in (("pcie_tx_bps", "NVML_PCIE_UTIL_TX_BYTES"),
                             ("pcie_rx_bps", "NVML_PCIE_UTIL_RX_BYTES")):
            kbs = _guard(lambda c=counter: nvml.nvmlDeviceGetPcieThroughput(
                handle, getattr(nvml, c)))
            out[key] = float(kbs) * 1024 if kbs is not None else None
        if not self._no_nvlink:
            values = _guard(lambda: nvml.nvmlDeviceGetFieldValues(
                handle, [(NVLINK_TX, ALL_LINKS), (NVLINK_RX, ALL_LINKS)]))
            if values is None:
                self._no_nvlink = True  # not on this GPU or driver: not asked again
            else:
                for key, v in zip(("nvlink_tx_bps", "nvlink_rx_bps"), values):
                    out[key] = self._rate(v)
        return out

    def _rate(self, v: Any) -> float | None:
        if getattr(v, "nvmlReturn", 1) != 0:
            return None
        now = (int(v.value.ullVal), int(v.timestamp))
        last, self._last[v.fieldId] = self._last.get(v.fieldId), now
        if last is None or now[1] <= last[1] or now[0] < last[0]:
            return None
        return (now[0] - last[0]) * 1024 / ((now[1] - last[1]) / 1e6)


def _guard(read: Any) -> Any:
    try:
        return read()
    except Exception:
        return None
