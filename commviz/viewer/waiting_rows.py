"""The completed collective records still waiting for the other ranks of their instance.

Their columns are kept in an append-only store, and the waiting rows as an index of their
places in it, sorted by (group, seq) key. A matching round (``Model._match_collectives``)
adds its own rows to the store, merges their places into the index and takes out the
instances it completed: it touches the store only for the rows it adds and those it emits,
and the index, two arrays, for what waits. Merging every waiting row's columns into each
round instead cost a pass over all fourteen of them per round, and a viewer fed unevenly by
a thousand ranks has hundreds of thousands of rows waiting for the slowest. Places of rows
that left the index are reclaimed when the store is full (compacted in index order).

Pure numpy: no Textual, no sockets.
"""

from __future__ import annotations

import numpy as np

MIN_ROWS = 1024  # the store's smallest size


class WaitingRows:
    """``at``: the waiting rows' places in the store, in key order; ``key``: their keys."""

    def __init__(self, empty: dict[str, np.ndarray]) -> None:
        self._store = {name: np.empty(MIN_ROWS, col.dtype) for name, col in empty.items()}
        self._fill = 0  # places used, by waiting rows and by rows gone since the last compaction
        self.at = np.zeros(0, np.int64)
        self.key = np.zeros(0, np.int64)
        self._rows: dict[str, np.ndarray] | None = None  # rows(), until the index changes

    def add(self, rows: dict[str, np.ndarray]) -> np.ndarray:
        """Store ``rows`` (not yet in the index) and return their places, in their order.
        May compact the store, which renumbers ``at``: read it after."""
        n = len(rows["rank"])
        if self._fill + n > len(self._store["rank"]):
            self._compact(n)
        lo = self._fill
        for name, col in self._store.items():
            col[lo:lo + n] = rows[name]
        self._fill = lo + n
        return np.arange(lo, lo + n)

    def take(self, at: np.ndarray) -> dict[str, np.ndarray]:
        """The stored rows at places ``at``, as columns."""
        return {name: col[at] for name, col in self._store.items()}

    def column(self, name: str, at: np.ndarray) -> np.ndarray:
        return self._store[name][at]

    def keep(self, at: np.ndarray, key: np.ndarray) -> None:
        """From now on the rows at places ``at`` (keys ``key``, sorted) are those waiting."""
        self.at, self.key, self._rows = at, key, None

    def rows(self) -> dict[str, np.ndarray]:
        """The waiting rows as columns, in key order (made once per change of the index)."""
        if self._rows is None:
            self._rows = self.take(self.at)
        return self._rows

    def _compact(self, more: int) -> None:
        """Keep only the waiting rows, in index order, with room for ``more`` and as many again
        as will then be stored: each place is copied at most once per doubling."""
        live = len(self.at)
        size = max(MIN_ROWS, 2 * (live + more))
        store = {name: np.empty(size, col.dtype) for name, col in self._store.items()}
        for name, col in store.items():
            col[:live] = self._store[name][self.at]
        self._store, self._fill = store, live
        self.at = np.arange(live)
        self._rows = None
