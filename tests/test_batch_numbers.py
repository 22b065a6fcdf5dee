"""A dead process' last batches, sent again by its harvester, are taken once
(commviz/viewer/batch_numbers.py): whether the viewer got them from the process before it
died, or they died in its socket with it, and whichever copy comes first. Pure: a ring in a
temporary folder, messages decoded as the viewer decodes them, no socket."""

from __future__ import annotations

import numpy as np
import pytest
from test_ring import GROUP, writer  # noqa: F401  (the fixture: a ring of 8 slots)

from commviz.launch.harvester import recovered_messages
from commviz.rank import records
from commviz.rank.emitter import encode_batch
from commviz.viewer.batch_numbers import BatchNumbers
from commviz.wire import protocol, ring


def _batch(rank: int, n: int, ids: list[int], inc: int = 7) -> protocol.OpBatch:
    cols = {name: np.zeros(len(ids), dt) for name, dt in protocol.COLUMN_DTYPES.items()}
    cols["id"] = np.array(ids, np.int64)
    return protocol.OpBatch(rank, cols, {}, {}, inc, n)


def _ids(messages) -> list[int]:
    return [i for m in messages if type(m) is protocol.OpBatch for i in m.cols["id"].tolist()]


def test_a_copy_of_a_batch_the_viewer_has_is_dropped_and_counted():
    seen = BatchNumbers()
    assert _ids(seen.taken([_batch(1, 1, [0]), _batch(1, 2, [1, 2])])) == [0, 1, 2]
    again = seen.taken([_batch(1, 2, [1, 2]), _batch(1, 3, [3]), _batch(2, 2, [1])])
    assert [(m.rank, m.n) for m in again] == [(1, 3), (2, 2)]  # rank 2's own batch 2
    assert seen.dropped == 1


def test_the_harvesters_copy_first_drops_the_processs_own_late_one():
    seen = BatchNumbers()
    seen.taken([_batch(1, 1, [0])])
    assert _ids(seen.taken([_batch(1, 2, [1]), _batch(1, 3, [2])])) == [1, 2]  # copies
    assert seen.taken([_batch(1, 2, [1])]) == []  # the process' own, late from its socket
    assert seen.dropped == 1


def test_unnumbered_batches_and_other_processes_pass_untouched():
    seen = BatchNumbers()
    msgs = [_batch(1, 0, [5]), _batch(1, 0, [5]), _batch(1, 1, [0], inc=8), _batch(1, 1, [0])]
    assert seen.taken(msgs) == msgs  # no number (older ranks, never shipped), another inc
    assert seen.dropped == 0


@pytest.mark.parametrize("got_last", [True, False], ids=["it-arrived", "it-died-in-the-socket"])
def test_every_record_of_a_process_that_died_after_a_send_is_taken_exactly_once(
        writer, got_last):  # noqa: F811  (test_ring's fixture)
    """The emitter's way: 3 batches of 2 records shipped, 2 records ended after; the process
    dies with batch 3 handed to its socket. Whether or not batch 3 reached the viewer, the
    viewer ends with each of the 8 records once."""
    writer.note_site(0, "train.py", 31)
    writer.note_group(0, "0", [0, 1, 2])
    writer.note_identity(1, 3, "gloo", "cpu", "node-a", "job")
    recs = [records.start(protocol.OP_CODE["all_reduce"], records.COLLECTIVE,
                          protocol.NO_CODE, GROUP, -1, 16, 16, None, False, 0)
            for _ in range(8)]
    for rec in recs:
        records.complete(rec)
    sent = []
    for n in (1, 2, 3):
        chunk = recs[2 * (n - 1):2 * n]
        writer.mark_shipped([r[records.ID] for r in chunk], n)
        sent.append(encode_batch(1, chunk, {0: ("train.py", 31)}, 77, n=n))
    viewer = BatchNumbers()
    arrived = sent if got_last else sent[:2]
    took = viewer.taken([protocol.decode(d) for d in arrived])
    messages, recovered, running = recovered_messages(ring.read(writer.path), 0)
    took += viewer.taken([protocol.decode(d) for d in messages])
    assert sorted(_ids(took)) == list(range(8))
    assert (recovered, running) == (2, 0)
