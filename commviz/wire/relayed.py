"""The relay's envelope: the messages a node's ranks sent during one tick, in one message.

A per-node relay (``commviz/relay/``) receives its ranks' messages and forwards them as one
``fwd`` message per tick, additive in protocol version 1::

    {"v": 1, "k": "fwd", "node": HOST, "msgs": [<bin>, ...], "dropped": N, "lost": M}

``msgs`` are the ranks' own messages, byte for byte, in the order the relay received them
(so each rank's stay in its order), or envelopes of relays below (relays compose: a tree).
``dropped`` and ``lost`` are what this relay has dropped since it started, op records and
messages of any kind: they go up with every envelope, as a rank's ``dropped`` goes with its
heartbeats. An envelope may hold no message: a relay sends one at least every
``protocol.HEARTBEAT_S``, so that its counts arrive while its ranks are quiet.

The viewer tells an envelope from the other messages by its first bytes (``is_envelope``):
``v`` then ``k`` are its map's first two keys, as ``encode`` writes them. This module never
decodes the messages inside: whoever receives an envelope decodes each one as if it had come
directly (``commviz/viewer/transport.py``). No Textual, Rich or torch: the relay imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from commviz.wire import protocol

KIND = "fwd"
MAX_ENVELOPE_BYTES = 4 * protocol.MAX_MESSAGE_BYTES  # the viewer's socket limit (MAXMSGSIZE)
# a relay fills its envelopes up to half that, so that one fits whole in the envelope of a
# relay above it; a larger message (at most MAX_INNER_BYTES) goes alone in one
PACK_BYTES = MAX_ENVELOPE_BYTES // 2
MAX_MSGS = protocol.MAX_BATCH  # messages in one envelope
MAX_DEPTH = 4                  # envelopes inside envelopes: a two-level tree needs 2
NODE_MAX = 256                 # characters of ``node``
_HEAD = protocol.kind_head(KIND)  # what encode() writes after the map's header
_OVERHEAD = 512    # bytes of an envelope beside its messages (node, counts, headers)
_PER_MSG = 5       # msgpack's header of a bin of up to 4 GiB
MAX_INNER_BYTES = MAX_ENVELOPE_BYTES - _OVERHEAD - _PER_MSG  # what a relay accepts


@dataclass(frozen=True)
class Envelope:
    node: str
    msgs: list[bytes]
    dropped: int  # op records this relay dropped since it started
    lost: int     # messages of any kind it dropped


def is_envelope(data: bytes) -> bool:
    return protocol.has_head(data, _HEAD)


def encode(node: str, msgs: list[bytes], dropped: int, lost: int) -> bytes:
    return protocol.pack({"v": protocol.VERSION, "k": KIND, "node": node[:NODE_MAX],
                          "msgs": msgs, "dropped": dropped, "lost": lost})


def decode(data: bytes) -> Envelope:
    """Validate an envelope (not the messages inside), or raise protocol.ProtocolError."""
    if len(data) > MAX_ENVELOPE_BYTES:
        raise protocol.ProtocolError(f"envelope of {len(data)} bytes exceeds "
                                     f"{MAX_ENVELOPE_BYTES}")
    try:
        msg = msgpack.unpackb(data, raw=False, strict_map_key=True,
                              max_bin_len=MAX_ENVELOPE_BYTES, max_str_len=NODE_MAX * 4,
                              max_array_len=MAX_MSGS, max_map_len=8, max_ext_len=0)
    except Exception as exc:  # msgpack raises many types on garbage
        raise protocol.ProtocolError(f"undecodable envelope: {type(exc).__name__}") from None
    if not isinstance(msg, dict) or msg.get("v") != protocol.VERSION or msg.get("k") != KIND:
        raise protocol.ProtocolError("envelope: not a version 1 fwd map")
    node, msgs = msg.get("node"), msg.get("msgs")
    if not isinstance(node, str) or not 0 < len(node) <= NODE_MAX:
        raise protocol.ProtocolError(f"envelope: field 'node' must be 1..{NODE_MAX} characters")
    if not isinstance(msgs, list) or not all(type(m) is bytes for m in msgs):
        raise protocol.ProtocolError("envelope: field 'msgs' must be a list of bin")
    counts = [msg.get(key) for key in ("dropped", "lost")]
    if not all(type(n) is int and 0 <= n < 1 << 63 for n in counts):
        raise protocol.ProtocolError("envelope: 'dropped' and 'lost' must be ints >= 0")
    return Envelope(node, msgs, counts[0], counts[1])


def records_in(data: bytes) -> int:
    """The op records a message holds (inside envelopes too): what a relay counts as dropped
    when it drops it. Only read on that path; 0 for what it cannot read."""
    try:
        if is_envelope(data):
            return sum(records_in(m) for m in decode(data).msgs)
        msg = msgpack.unpackb(data, raw=False, max_map_len=64, max_array_len=protocol.MAX_BATCH
                              * 4, max_bin_len=protocol.MAX_MESSAGE_BYTES, max_ext_len=0)
        if isinstance(msg, dict) and msg.get("k") == "ops":
            ids = msg["cols"]["id"]
            return len(ids) // 8 if isinstance(ids, bytes) else 0
    except Exception:  # not ours to judge: the viewer rejects it, if it ever gets it
        pass
    return 0


class Packer:
    """Cuts one tick's messages into as few envelopes as the bounds allow, in order."""

    def __init__(self) -> None:
        self._batches: list[list[bytes]] = [[]]
        self._bytes = _OVERHEAD

    def add(self, data: bytes) -> None:
        size = len(data) + _PER_MSG
        batch = self._batches[-1]
        if batch and (len(batch) >= MAX_MSGS or self._bytes + size > PACK_BYTES):
            batch = []
            self._batches.append(batch)
            self._bytes = _OVERHEAD
        batch.append(data)
        self._bytes += size

    def take(self) -> list[list[bytes]]:
        """The messages added since the last take, one list an envelope (at least one list,
        empty when nothing was added)."""
        out, self._batches, self._bytes = self._batches, [[]], _OVERHEAD
        return out
