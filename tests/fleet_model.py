"""A viewer's model of a SIMULATED fleet (bench/fleet.py), built in process: the wire bytes its
ranks would send, decoded and resolved as the receiver does, applied slot by slot on a virtual
clock. For pure tests of the screen and the diagnosis at a thousand ranks (no sockets, no
waiting); integration tests play fleets over real sockets (tests/test_fleet.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import fleet  # noqa: E402  (bench/ is no package)

from commviz.viewer.diagnose import Diagnosis  # noqa: E402
from commviz.viewer.groups import GroupTables  # noqa: E402
from commviz.viewer.model import Model  # noqa: E402
from commviz.wire import protocol  # noqa: E402

DIAGNOSE_EVERY_NS = 250_000_000  # as the live session's DIAGNOSE_EVERY_S


class VirtualClock:
    """The viewer's clock, set by the fleet's slots: seconds for the model, ns for the
    diagnosis."""

    def __init__(self, t_ns: int) -> None:
        self.t_ns = t_ns

    def seconds(self) -> float:
        return self.t_ns / 1e9

    def wall_ns(self) -> int:
        return self.t_ns


@dataclass
class FleetView:
    model: Model
    diagnosis: Diagnosis
    clock: VirtualClock
    rejected: int


def fleet_view(ranks: int = 1024, seconds: float = 3.0, shape: str = "ddp",
               faults: tuple[str, ...] = (), fault_at: float = 1.0,
               local_host: str | None = None, **job: object) -> FleetView:
    """The model and diagnosis of ``ranks`` simulated ranks after ``seconds`` of ``shape``,
    diagnosed every 0.25 s as live; ``faults`` as bench/fleet.py's ``--fault`` takes them."""
    spec = fleet.Job(ranks, shape, faults=tuple(fleet.Fault.parse(f) for f in faults),
                     fault_at=fault_at, **job)  # type: ignore[arg-type]
    clock = VirtualClock(fleet.OFFLINE_T0_NS)
    model = Model(clock.seconds, local_host)
    diagnosis = Diagnosis(model, wall_ns=clock.wall_ns)
    rejected = [0]

    def reject(_reason: str, n: int) -> None:
        rejected[0] += n

    tables = GroupTables(reject)
    next_diagnosis = clock.t_ns
    for t_ns, datas in fleet.offline(spec, seconds):
        clock.t_ns = t_ns
        if datas:
            model.apply(tables.resolve([protocol.decode(d) for d in datas]))
        if t_ns >= next_diagnosis:
            diagnosis.update()
            next_diagnosis = t_ns + DIAGNOSE_EVERY_NS
    return FleetView(model, diagnosis, clock, rejected[0])
