"""The in-flight index (viewer/inflight.py): whatever records come, end or come again, its
indexes say what a scan of every record in flight, in the order they came, would say."""

from __future__ import annotations

import collections
import random

import pytest

from commviz.viewer.inflight import Flying, InFlight, kind_of
from commviz.wire import protocol

OPS = ("all_reduce", "broadcast", "send", "recv")


def _record(flying: Flying, rank: int, op_id: int, seen: float, rng: random.Random) -> InFlight:
    return InFlight(rank, rng.choice(OPS), (0, 1, 2, 3), rng.choice((1, 2)), -1, 0,
                    rng.choice((-1, 0, 1)), rng.choice((4096, 8192)), "float32", op_id, seen,
                    None, flying.noted)


def _scan(records: dict[tuple[int, int], InFlight]) -> tuple:
    """The indexes as a walk over every record makes them (the diagnosis' way before)."""
    instances: dict[tuple[int, int], dict[int, InFlight]] = {}
    by_rank: dict[int, dict[int, InFlight]] = {}
    for (rank, op_id), f in records.items():
        by_rank.setdefault(rank, {})[op_id] = f
        if f.op not in protocol.P2P and f.gkey >= 0:
            instances.setdefault((f.gkey, f.seq), {})[rank] = f  # a later one stands for it
    kinds = {k: dict(collections.Counter(map(kind_of, inst.values())))
             for k, inst in instances.items()}
    transfers = {k: f for k, f in records.items() if f.op in protocol.P2P}
    return instances, kinds, transfers, by_rank


@pytest.mark.parametrize("seed", range(20))
def test_the_indexes_say_what_a_scan_would(seed):
    rng = random.Random(seed)
    flying, first_seen = Flying(), {}
    for step in range(400):
        key = (rng.randrange(4), rng.randrange(6))
        if rng.random() < 0.55:  # a record comes: new, or sent again (other fields may change)
            flying.add(_record(flying, *key, float(step), rng))
            first_seen.setdefault(key, float(step))
        else:
            f = flying.pop(key)
            assert (f is None) == (first_seen.pop(key, None) is None)
        instances, kinds, transfers, by_rank = _scan(flying.records)
        assert flying.instances == instances and flying.kinds == kinds
        assert flying.transfers == transfers
        assert {r: list(m.items()) for r, m in flying.by_rank.items()} == \
            {r: list(m.items()) for r, m in by_rank.items()}
        # known since it first came, however often it came again
        assert {k: f.seen for k, f in flying.records.items()} == first_seen
        for rank, mine in by_rank.items():
            assert flying.busy(rank)
            assert flying.first_of(rank) is min(mine.values(), key=lambda f: f.seen)
    assert not flying.busy(99) and flying.first_of(99) is None


def test_a_record_noted_again_keeps_when_it_came_and_its_place():
    flying = Flying()
    a = InFlight(0, "all_reduce", (0, 1), 1, -1, 0, 0, 4096, "float32", 7, 1.0, None, 0)
    flying.add(a)
    flying.add(InFlight(1, "all_reduce", (0, 1), 1, -1, 0, 0, 4096, "float32", 7, 1.5, None,
                        flying.noted))
    flying.add(InFlight(0, "all_reduce", (0, 1), 1, -1, 0, 0, 8192, "float32", 7, 3.0, None,
                        flying.noted))  # the harvester's copy, its size read later
    again = flying.records[(0, 7)]
    assert (again.seen, again.noted, again.size) == (1.0, 0, 8192)
    assert list(flying.records) == [(0, 7), (1, 7)] and flying.noted == 2
    assert flying.kinds[(0, 1)] == {("all_reduce", "float32", 8192): 1,
                                    ("all_reduce", "float32", 4096): 1}
