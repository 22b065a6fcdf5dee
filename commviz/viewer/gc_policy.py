"""How often the cyclic garbage collector does a full collection while a viewer runs.

A full collection holds the GIL while it runs: at 1,024 ranks, 70-170 ms with no frame drawn,
no key handled and nothing taken off the socket. Python starts one after every 10
collections of the middle generation, which there made one a second; after every 100 they
come about every 6 s, each longer (more garbage waits for it), 3-4 times less of it in all
(docs/performance.md, "The garbage collector's full collections").
"""

from __future__ import annotations

import gc

FULL_COLLECTION_EVERY = 100


class RareFullCollections:
    """Full collections after every FULL_COLLECTION_EVERY middle ones from ``start`` until
    ``stop``, which puts the thresholds back as they were."""

    def __init__(self) -> None:
        self._saved: tuple[int, int, int] | None = None

    def start(self) -> None:
        if self._saved is None:
            self._saved = gc.get_threshold()
            gc.set_threshold(*self._saved[:2], FULL_COLLECTION_EVERY)

    def stop(self) -> None:
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None

    def __enter__(self) -> RareFullCollections:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
