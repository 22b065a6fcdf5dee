"""What the group ids of each rank process' batches mean, from the ``grp`` messages it sent.

A rank announces a process group's members once (and again every GROUPS_EVERY_S, and when it
reconnects), then names the group by id in its batches: at 1,024 ranks the member list was
most of every batch. Here the ids are resolved back, so that everything after the transport
sees batches as complete as before. A batch whose groups are not known yet (a viewer started
late, a ``grp`` lost) waits, with that process' later batches so that their order is kept,
until its ``grp`` comes; one that waited HOLD_S, or beyond the bounds on what waits, is
dropped and counted. Member lists are shared: a thousand ranks announcing the world group
hold one tuple, and a process whose tables pass PEER_MEMBERS_MAX is refused (counted) rather
than allowed to take the viewer's memory.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from typing import Any

from commviz.wire import protocol

HOLD_S = protocol.GROUPS_EVERY_S + 2.0  # a late viewer hears every group within GROUPS_EVERY_S
HOLD_BATCHES = 256      # batches of one process waiting for its groups (~10 s of them)
HOLD_RECORDS = 1 << 20  # records waiting, of all processes together
PEER_MEMBERS_MAX = 1 << 21  # member entries of one process' groups (a world of 2^20, twice)
IDENTITIES_MAX = 4096  # member tuples GroupNumbers remembers by identity

Peer = tuple[int, int]  # (rank, incarnation id)
Group = tuple[str, tuple[int, ...]]

NEVER_ANNOUNCED = "op refers to a group never announced"
OVER_HOLD = "too many batches waiting for their groups"
TABLE_TOO_LARGE = "group tables larger than a rank may send"


class GroupTables:
    """``reject(reason, messages)``: told of every batch dropped here, and why."""

    def __init__(self, reject: Callable[[str, int], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._reject = reject
        self._clock = clock
        self._tables: dict[Peer, dict[int, Group]] = {}
        self._sizes: dict[Peer, int] = collections.Counter()  # member entries per process
        self._shared: dict[Group, Group] = {}  # one tuple per distinct (name, members)
        self._held: dict[Peer, collections.deque[tuple[float, protocol.OpBatch]]] = {}
        self.held_records = 0

    def resolve(self, messages: Iterable[protocol.Message]) -> list[protocol.Message]:
        """``messages`` in order, with ``grp`` messages taken in (not passed on) and each
        batch given the groups its ids name, or held until they are known."""
        out: list[protocol.Message] = []
        for msg in messages:
            if isinstance(msg, protocol.OpBatch):
                peer = (msg.rank, msg.inc)
                complete = None if peer in self._held else self._complete(msg)
                if complete is not None:
                    out.append(complete)
                else:
                    self._hold(peer, msg)
            elif isinstance(msg, protocol.Groups):
                self._learn(msg)
                out += self._release((msg.rank, msg.inc))
            else:
                out.append(msg)
                if isinstance(msg, protocol.Bye):
                    self.forget((msg.rank, msg.inc))
        if self._held:
            self._expire()
        return out

    def forget(self, peer: Peer) -> None:
        """A process said goodbye: its tables and what waits are let go."""
        self._tables.pop(peer, None)
        self._sizes.pop(peer, None)
        for _, batch in self._held.pop(peer, ()):
            self.held_records -= len(batch)
            self._reject(NEVER_ANNOUNCED, 1)

    def _complete(self, batch: protocol.OpBatch) -> protocol.OpBatch | None:
        gids = protocol.distinct(batch.cols, "gid")
        if gids <= batch.groups.keys():  # a batch that carries its groups (older ranks)
            return batch
        table = self._tables.get((batch.rank, batch.inc))
        if table is None or not gids <= table.keys():
            return None
        return protocol.OpBatch(batch.rank, batch.cols, {g: table[g] for g in gids},
                                batch.sites, batch.inc, batch.n)

    def _learn(self, msg: protocol.Groups) -> None:
        peer = (msg.rank, msg.inc)
        table = self._tables.setdefault(peer, {})
        size = self._sizes[peer] + sum(len(ranks) for gid, (_, ranks) in msg.groups.items()
                                       if gid not in table)
        if size > PEER_MEMBERS_MAX:
            self._reject(TABLE_TOO_LARGE, 1)
            return
        self._sizes[peer] = size
        shared = self._shared
        for gid, group in msg.groups.items():
            old = table.get(gid)
            if old is None or old != group:  # a repeat is the usual case: nothing to do
                table[gid] = shared.setdefault(group, group)

    def _hold(self, peer: Peer, batch: protocol.OpBatch) -> None:
        held = self._held.setdefault(peer, collections.deque())
        held.append((self._clock(), batch))
        self.held_records += len(batch)
        while len(held) > HOLD_BATCHES or self.held_records > HOLD_RECORDS:
            self._drop_oldest(peer if len(held) > HOLD_BATCHES else self._longest_held(),
                              OVER_HOLD)

    def _release(self, peer: Peer) -> list[protocol.OpBatch]:
        """The waiting batches of ``peer`` that can now be completed, oldest first, up to
        the first that still cannot: the rest wait on, in order."""
        held = self._held.get(peer)
        out: list[protocol.OpBatch] = []
        while held:
            complete = self._complete(held[0][1])
            if complete is None:
                return out
            held.popleft()
            self.held_records -= len(complete)
            out.append(complete)
        self._held.pop(peer, None)
        return out

    def _expire(self) -> None:
        limit = self._clock() - HOLD_S
        for peer in list(self._held):
            held = self._held[peer]
            while held and held[0][0] < limit:
                self._drop_oldest(peer, NEVER_ANNOUNCED)

    def _drop_oldest(self, peer: Peer, reason: str) -> None:
        held = self._held[peer]
        _, batch = held.popleft()
        self.held_records -= len(batch)
        if not held:
            del self._held[peer]
        self._reject(reason, 1)

    def _longest_held(self) -> Peer:
        return min(self._held, key=lambda p: self._held[p][0][0])


class GroupNumbers:
    """A number for each distinct (``key``, members), in the order first seen: the model's
    group keys, a recording's group lines. Found by the members' tuple itself before it is
    hashed: GroupTables hands every batch of a group the one tuple its ``grp`` gave, and
    hashing a thousand ranks a batch was most of intake. Batches that carry their own tuples
    (older ranks) are found by value; the memo of tuples, which holds each one so that its
    id stays its own, is bounded for them (IDENTITIES_MAX)."""

    def __init__(self) -> None:
        self._by_value: dict[tuple[Any, tuple[int, ...]], int] = {}
        self._by_id: dict[tuple[Any, int], tuple[tuple[int, ...], int]] = {}

    def number(self, key: Any, members: tuple[int, ...]) -> tuple[int, bool]:
        """The number of (``key``, ``members``), and whether it is new."""
        seen = self._by_id.get((key, id(members)))
        if seen is not None and seen[0] is members:
            return seen[1], False
        n = self._by_value.get((key, members))
        new = n is None
        if n is None:
            n = self._by_value[(key, members)] = len(self._by_value)
        if len(self._by_id) >= IDENTITIES_MAX:
            self._by_id.clear()
        self._by_id[(key, id(members))] = (members, n)
        return n, new
