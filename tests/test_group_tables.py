"""Pure tests of the viewer's group tables: batches that name their groups by id get them back
from the ``grp`` messages of their process, in order, or wait for them within bounds."""

from collections import Counter

import numpy as np
import pytest

from commviz.viewer import groups as groups_
from commviz.viewer.groups import GroupTables
from commviz.wire import protocol

WORLD = ("0", (0, 1, 2, 3))


def _batch(rank=1, inc=7, gids=(0,), groups=None, first_id=0):
    n = len(gids)
    cols = {name: np.zeros(n, dtype=dt) for name, dt in protocol.COLUMN_DTYPES.items()}
    cols["gid"] = np.array(gids, dtype=protocol.COLUMN_DTYPES["gid"])
    cols["id"] = np.arange(first_id, first_id + n, dtype=np.int64)
    return protocol.OpBatch(rank, cols, groups or {}, {0: ("x.py", 1)}, inc)


class _Clock:
    now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def tables():
    rejected: Counter = Counter()
    clock = _Clock()
    t = GroupTables(lambda why, n: rejected.update({why: n}), clock)
    t.rejected, t.clock = rejected, clock
    return t


def test_a_batch_gets_the_groups_its_process_announced(tables):
    out = tables.resolve([protocol.Groups(1, {0: WORLD, 5: ("5", (1, 3))}, 7),
                          _batch(gids=(0, 5, 0))])
    assert len(out) == 1 and out[0].groups == {0: WORLD, 5: ("5", (1, 3))}
    assert not tables.rejected


def test_a_batch_that_carries_its_groups_passes_as_it_is(tables):
    batch = _batch(inc=0, groups={0: WORLD})
    assert tables.resolve([batch]) == [batch]


def test_announcements_are_per_incarnation(tables):
    tables.resolve([protocol.Groups(1, {0: WORLD}, 7)])
    assert tables.resolve([_batch(inc=8)]) == []  # another process of rank 1: waits
    assert tables.held_records == 1


def test_batches_wait_for_their_groups_and_keep_their_order(tables):
    first, second = _batch(first_id=0), _batch(first_id=1, gids=(3,))
    assert tables.resolve([first]) == []
    # the second's group is known, but it may not overtake the first
    assert tables.resolve([protocol.Groups(1, {3: ("3", (1,))}, 7), second]) == []
    out = tables.resolve([protocol.Groups(1, {0: WORLD}, 7)])
    assert [b.cols["id"][0] for b in out] == [0, 1] and tables.held_records == 0


def test_a_batch_whose_groups_never_come_is_dropped_and_counted(tables):
    tables.resolve([_batch()])
    tables.clock.now = groups_.HOLD_S + 1
    assert tables.resolve([]) == [] and tables.held_records == 0
    assert tables.rejected == {groups_.NEVER_ANNOUNCED: 1}


def test_what_waits_is_bounded_per_process(tables):
    tables.resolve([_batch(first_id=i) for i in range(groups_.HOLD_BATCHES + 5)])
    assert tables.held_records == groups_.HOLD_BATCHES
    assert tables.rejected == {groups_.OVER_HOLD: 5}
    out = tables.resolve([protocol.Groups(1, {0: WORLD}, 7)])
    assert out[0].cols["id"][0] == 5  # the oldest went first


def test_members_are_shared_between_processes(tables):
    tables.resolve([protocol.Groups(r, {0: ("0", tuple(range(1024)))}, r + 1)
                    for r in range(3)])
    out = tables.resolve([_batch(rank=r, inc=r + 1) for r in range(3)])
    assert out[0].groups[0][1] is out[1].groups[0][1] is out[2].groups[0][1]


def test_a_process_cannot_announce_more_than_its_share(tables, monkeypatch):
    monkeypatch.setattr(groups_, "PEER_MEMBERS_MAX", 10)
    tables.resolve([protocol.Groups(1, {0: ("0", tuple(range(8)))}, 7),
                    protocol.Groups(1, {1: ("1", tuple(range(8)))}, 7),
                    protocol.Groups(2, {0: ("0", tuple(range(8)))}, 9)])
    assert tables.rejected == {groups_.TABLE_TOO_LARGE: 1}
    assert len(tables.resolve([_batch(gids=(0,)), _batch(rank=2, inc=9)])) == 2


def test_a_goodbye_lets_go_of_a_process(tables):
    tables.resolve([protocol.Groups(1, {0: WORLD}, 7)])
    tables.resolve([_batch(inc=7, gids=(4,)), protocol.Bye(1, 5, 0, 7)])
    assert tables.held_records == 0 and tables.rejected == {groups_.NEVER_ANNOUNCED: 1}
    assert tables.resolve([_batch()]) == []  # its tables are gone too
