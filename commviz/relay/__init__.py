"""The per-node relay: the node's ranks report to it locally, it forwards to the viewer.

``relay`` merges what the ranks sent during one tick into one envelope
(``commviz/wire/relayed.py``) on one connection to the viewer (or to a relay above it);
``clockproxy`` passes the ranks' clock round trips on to the viewer's clock channel. It
imports only ``wire/``: it runs beside the ranks, under ``commviz run --no-viewer`` or
``commviz relay``, and never draws.
"""
