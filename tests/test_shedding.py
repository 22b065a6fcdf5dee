"""Pure tests of what a viewer that is behind lets go of: telemetry first, then phases and
topologies, never an op record, and every one counted."""

from collections import Counter

import numpy as np

from commviz.viewer.shedding import KINDS, shed
from commviz.wire import protocol


def _hb(rank, t, clock=()):
    return protocol.Heartbeat(rank, 4, "h", 1, "gloo", "cpu", t, 0, {"cpu_pct": float(t)},
                              clock, 9)


def _batch(rank):
    cols = {name: np.zeros(1, dtype=dt) for name, dt in protocol.COLUMN_DTYPES.items()}
    return protocol.OpBatch(rank, cols, {0: ("0", (0, 1))}, {0: ("x.py", 1)}, 9)


def test_a_process_keeps_its_latest_heartbeat_with_every_clock_round_trip():
    counts = Counter()
    kept = shed([_hb(0, 1, ((1, 2, 3, 4),)), _hb(1, 1), _hb(0, 2, ((5, 6, 7, 8),)),
                 _hb(0, 3)], counts)
    assert [(h.rank, h.t_ns) for h in kept] == [(1, 1), (0, 3)]
    assert kept[1].clock == ((1, 2, 3, 4), (5, 6, 7, 8))
    assert counts == {"telemetry": 2}


def test_op_records_are_never_shed_and_keep_their_order():
    batches = [_batch(r) for r in (3, 1, 2)]
    phases = protocol.Phases(1, (protocol.PhaseSpan("fwd", 0, 1, 2),) * 3, 9)
    topo = protocol.GpuTopology(1, "h", -1, (), (), "no GPU: CPU tensors", 9)
    counts = Counter()
    kept = shed([batches[0], phases, batches[1], topo, batches[2]], counts)
    assert kept == batches
    assert counts == {"phases": 3, "topology": 1}
    assert set(counts) <= KINDS.keys()
