"""Where a process runs: its host name, its clock, and whether an address stays on this host.

Shared by the rank side and the viewer (stdlib only). Two environment variables exist for
tests and containers: ``COMMVIZ_HOST`` replaces the host name a process reports (containers
often all call themselves ``localhost``; tests simulate several nodes on one machine), and
``COMMVIZ_CLOCK_SHIFT_NS`` shifts every time a rank reports by that many nanoseconds, so a
test can give a simulated node a clock that disagrees with the viewer's by a known amount.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping

ENV_HOST = "COMMVIZ_HOST"
ENV_CLOCK_SHIFT = "COMMVIZ_CLOCK_SHIFT_NS"


def hostname(environ: Mapping[str, str] = os.environ) -> str:
    return environ.get(ENV_HOST) or socket.gethostname()


def clock_shift_ns(environ: Mapping[str, str] = os.environ) -> int:
    """The test-only shift of this rank's reported clock (0 unless ``COMMVIZ_CLOCK_SHIFT_NS``)."""
    value = environ.get(ENV_CLOCK_SHIFT, "").strip()
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


def split_tcp(addr: str) -> tuple[str, int] | None:
    """(host, port) of ``tcp://host:port``; None for other transports or a wildcard port."""
    if not addr.startswith("tcp://"):
        return None
    host, _, port = addr[len("tcp://"):].rpartition(":")
    if not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def is_loopback(addr: str) -> bool:
    """Whether a ZeroMQ address can only be reached from this host.

    ``ipc://`` and ``inproc://`` are local; ``tcp://`` is local when its host is a loopback
    address or a name that resolves only to loopback addresses. Wildcards (``*``,
    ``0.0.0.0``), interface names and other hosts are not.
    """
    if addr.startswith(("ipc://", "inproc://")):
        return True
    if not addr.startswith("tcp://"):
        return False
    host = addr[len("tcp://"):].rpartition(":")[0].strip("[]")
    if ";" in host:  # tcp://source;dest: the bound side is the destination
        host = host.rpartition(";")[2]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if not host or host == "*":
        return False
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback
                               for info in infos)
