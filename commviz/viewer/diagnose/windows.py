"""Windows of samples per key, held so that a key is set against all the other keys at once.

The slow links compare each pair's (or group's) transfer times with those of every other
pair of the same op and size: thousands of pairs at 1,024 ranks. Concatenating the others'
samples for each pair costs (keys x samples held) a pass: 3 s for a 1,024-rank pipeline.
Here each key's last ``length`` samples are a row of one array, and the samples of every
window holding ``least`` or more are kept sorted in one pool, which follows them as they
come and leave (merged once a pass). An order statistic of the pool without one key's
samples (``rest_median``, ``rest_percentile``) is then read from the pool by the positions
of that key's samples, and a bound every key's rest is above (``rest_floor``) from the pool
alone: a pass costs a comparison per sample held and the pool's merge, not a scan of every
other key per key. The results are numpy's own (``np.median``, ``np.percentile``) over the
same samples, to the last bit.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Sequence

import numpy as np


class Windows:
    """The last ``length`` samples of each key, oldest forgotten first; the samples of the
    windows that hold ``least`` or more (``pooled``) in one sorted pool."""

    def __init__(self, length: int, least: int) -> None:
        self.length, self.least = length, least
        self._rows: dict[Hashable, int] = {}  # key -> its row, in the order the keys came
        self._free: list[int] = []
        self._samples = np.full((0, length), np.nan)  # a ring per row
        self._total = np.zeros(0, np.int64)  # samples given to each row, kept or not
        self._pool = np.empty(0)
        self._coming: list[np.ndarray] = []  # what the pool takes in and lets go at its merge
        self._leaving: list[np.ndarray] = []
        self._unmerged = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._rows)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._rows

    def extend(self, keys: Sequence[Hashable], which: np.ndarray, values: np.ndarray) -> None:
        """Append ``values`` in their order, each to the window of ``keys[which[i]]``; a key
        new here gets a window, after the others."""
        rows = np.fromiter((self._row(k) for k in keys), np.int64, len(keys))[which]
        if not len(rows):
            return
        order = np.argsort(rows, kind="stable")
        rows, values = rows[order], np.asarray(values, np.float64)[order]
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        counts = np.diff(np.r_[starts, len(rows)])
        nth = np.arange(len(rows)) - np.repeat(starts, counts)
        keep = nth >= np.repeat(counts, counts) - self.length  # a row's last LENGTH stay
        rows, values, nth = rows[keep], values[keep], nth[keep]
        before = self._total[rows]
        slot = (before + nth) % self.length
        pooled = np.minimum(before, self.length) >= self.least
        gone = pooled & (slot < before)  # a sample held before, overwritten
        self._leave(self._samples[rows[gone], slot[gone]])
        self._come(values[pooled])
        self._samples[rows, slot] = values
        touched = rows[np.r_[True, rows[1:] != rows[:-1]]]
        was = np.minimum(self._total[touched], self.length)
        self._total[touched] += counts
        now = np.minimum(self._total[touched], self.length)
        joins = (was < self.least) & (now >= self.least)
        for row, n in zip(touched[joins].tolist(), now[joins].tolist()):
            self._come(self._samples[row, :n])  # a window that joins the pool

    def append(self, key: Hashable, values: np.ndarray) -> None:
        """``extend`` with one key's values (a group's of a round: 5 times cheaper)."""
        row, n = self._row(key), len(values)
        old = int(self._total[row])
        values = np.asarray(values[-self.length:], np.float64)
        slot = np.arange(old + n - len(values), old + n) % self.length
        pooled = min(old, self.length) >= self.least
        if pooled:
            self._leave(self._samples[row, slot[slot < old]])
            self._come(values)
        self._samples[row, slot] = values
        self._total[row] = old + n
        held = min(old + n, self.length)
        if not pooled and held >= self.least:
            self._come(self._samples[row, :held])

    def drop(self, key: Hashable) -> None:
        """Forget a key and its samples."""
        row = self._rows.pop(key)
        held = min(int(self._total[row]), self.length)
        if held >= self.least:
            self._leave(self._samples[row, :held])
        self._samples[row] = np.nan
        self._total[row] = 0
        self._free.append(row)

    def window(self, key: Hashable) -> np.ndarray:
        """A key's samples, oldest first."""
        row = self._rows[key]
        total = int(self._total[row])
        held = min(total, self.length)
        return self._samples[row, np.arange(total - held, total) % self.length]

    def pooled(self) -> tuple[list[Hashable], np.ndarray]:
        """The keys whose windows are in the pool, in the order the keys came, and how many
        samples each holds."""
        keys = list(self._rows)
        rows = np.fromiter(self._rows.values(), np.int64, len(keys))
        held = np.minimum(self._total[rows], self.length)
        inside = held >= self.least
        return [k for k, i in zip(keys, inside.tolist()) if i], held[inside]

    def above(self, keys: Sequence[Hashable], bounds: np.ndarray) -> np.ndarray:
        """How many of each key's samples are above its bound."""
        rows = np.fromiter((self._rows[k] for k in keys), np.int64, len(keys))
        return (self._samples[rows] > np.asarray(bounds)[:, None]).sum(axis=1)  # NaN: never

    def rest_floor(self, held: np.ndarray, q: float) -> np.ndarray:
        """For keys in the pool holding ``held`` samples each: what the q-th percentile of
        the pool without a key's samples is at least (its median for q=50). The pool's
        order statistic at the rest's index: taking samples out moves none down."""
        pool = self._merged()
        n = len(pool) - np.asarray(held)
        return pool[np.minimum(np.floor((n - 1) * (q / 100)).astype(np.int64), n - 1)]

    def rest_median(self, key: Hashable) -> float:
        """``np.median`` of the pool without the key's samples."""
        n = len(self._merged()) - len(self.window(key))
        if n % 2:
            return float(self._rest_at(key, [(n - 1) // 2])[0])
        a, b = self._rest_at(key, [n // 2 - 1, n // 2]).tolist()
        return (a + b) / 2

    def rest_percentile(self, key: Hashable, q: float) -> float:
        """``np.percentile(..., q)`` (linear) of the pool without the key's samples."""
        n = len(self._merged()) - len(self.window(key))
        at = (n - 1) * (q / 100)
        if at >= n - 1:
            return float(self._rest_at(key, [n - 1])[0])
        low = math.floor(at)
        a, b = self._rest_at(key, [low, low + 1]).tolist()
        t = at - low
        diff = b - a  # numpy's lerp: from the nearer end
        return b - diff * (1 - t) if t >= 0.5 else a + diff * t

    # ---- inside ---------------------------------------------------------------------------
    def _row(self, key: Hashable) -> int:
        row = self._rows.get(key)
        if row is not None:
            return row
        if not self._free:
            grown = max(8, 2 * len(self._total))
            self._free = list(range(grown - 1, len(self._total) - 1, -1))
            self._samples = np.vstack([self._samples,
                                       np.full((grown - len(self._total), self.length), np.nan)])
            self._total = np.r_[self._total, np.zeros(grown - len(self._total), np.int64)]
        row = self._rows[key] = self._free.pop()
        return row

    def _come(self, values: np.ndarray) -> None:
        if len(values):
            self._coming.append(values.copy())
            self._pending(len(values))

    def _leave(self, values: np.ndarray) -> None:
        if len(values):
            self._leaving.append(values.copy())
            self._pending(len(values))

    def _pending(self, n: int) -> None:
        """Merged once a pass; sooner if it grows past the pool, so it stays bounded when
        nobody asks (a recording applied at once)."""
        self._unmerged += n
        if self._unmerged > max(len(self._pool), 4096):
            self._merged()

    def _merged(self) -> np.ndarray:
        """The pool, with what came and left since the last merge."""
        if self._coming:
            coming = np.sort(np.concatenate(self._coming))
            self._pool = np.sort(np.r_[self._pool, coming], kind="stable")  # two runs: merged
        if self._leaving:
            leaving = np.sort(np.concatenate(self._leaving))
            first = np.searchsorted(self._pool, leaving)
            # equal values leave from consecutive places: the k-th copy, k places on
            self._pool = np.delete(self._pool, first + np.arange(len(leaving))
                                   - np.searchsorted(leaving, leaving))
        self._coming, self._leaving, self._unmerged = [], [], 0
        return self._pool

    def _rest_at(self, key: Hashable, at: Sequence[int]) -> np.ndarray:
        """The pool without the key's samples, at sorted places ``at``: the j-th of the rest
        is the pool's (j + t)-th, t the key's samples at places before it."""
        pool, mine = self._merged(), np.sort(self.window(key))
        mine_at = (np.searchsorted(pool, mine) + np.arange(len(mine))
                   - np.searchsorted(mine, mine))
        at = np.asarray(at, np.int64)
        return pool[at + np.searchsorted(mine_at - np.arange(len(mine)), at, side="right")]


class Durations:
    """The groups' transfer times per (group, op, size): the stragglers' thresholds
    (``window``) and the slow links', which set a group against the others of its size
    (``kinds``): a ``Windows`` per (op, size, group size), keyed by group. A table for
    ``watch.make_room``: the keys in the order they came, ``del`` forgets one. ``groups``:
    the model's, by key (a playback's snapshot pickles it with the model)."""

    def __init__(self, length: int, least: int,
                 groups: Sequence[tuple[str, tuple[int, ...]]]) -> None:
        self.length, self.least, self.groups = length, least, groups
        self._kinds: dict[tuple[str, int, int], Windows] = {}
        self._keys: dict[tuple[int, str, int], tuple[tuple[str, int, int], int]] = {}
        self._serial = 0  # the keys' order

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[tuple[int, str, int]]:
        return iter(self._keys)

    def __contains__(self, key: tuple[int, str, int]) -> bool:
        return key in self._keys

    def __delitem__(self, key: tuple[int, str, int]) -> None:
        kind, _ = self._keys.pop(key)
        windows = self._kinds[kind]
        windows.drop(key[0])
        if not len(windows):
            del self._kinds[kind]

    def extend(self, key: tuple[int, str, int], values: np.ndarray) -> None:
        """A group's latest transfer times of one op and size, in order."""
        entry = self._keys.get(key)
        if entry is None:
            kind = (key[1], key[2], len(self.groups[key[0]][1]))
            entry = self._keys[key] = (kind, self._serial)
            self._serial += 1
            if kind not in self._kinds:
                self._kinds[kind] = Windows(self.length, self.least)
        self._kinds[entry[0]].append(key[0], values)

    def window(self, key: tuple[int, str, int]) -> np.ndarray:
        return self._kinds[self._keys[key][0]].window(key[0])

    def kinds(self) -> list[tuple[tuple[str, int, int], Windows]]:
        """Each (op, size, group size) with its groups' windows, in the order of their first
        key: as a walk over the keys in order meets them."""
        return sorted(self._kinds.items(),
                      key=lambda kw: self._keys[(next(iter(kw[1])), *kw[0][:2])][1])
