"""commviz: see, live in the terminal, how the ranks of a torch.distributed job communicate.

In a rank process::

    import commviz
    commviz.instrument()   # reports to $COMMVIZ_ADDR (default tcp://127.0.0.1:5555)
    with commviz.phase("backward"):   # optional: compute phases shown beside the traffic
        loss.backward()

Importing this package is cheap: torch is imported only when ``instrument()`` runs.
"""

from __future__ import annotations

from commviz.rank.phases import phase

__version__ = "0.1.0"
__all__ = ["instrument", "phase", "uninstrument", "__version__"]


def instrument(addr: str | None = None) -> None:
    """Report every torch.distributed call of this process to the viewer at ``addr``."""
    from commviz.rank import hooks

    hooks.instrument(addr)


def uninstrument() -> None:
    """Restore torch.distributed exactly as it was before ``instrument()``."""
    from commviz.rank import hooks

    hooks.uninstrument()
