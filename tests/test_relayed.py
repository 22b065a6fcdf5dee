"""The relay's envelope (commviz/wire/relayed.py), pure: what it holds, its bounds, and how
records are counted when a relay drops one."""

from __future__ import annotations

import msgpack
import pytest

from commviz.rank.emitter import encode_batch
from commviz.wire import protocol, relayed


def _ops(rank: int, n: int) -> bytes:
    recs = [[i, protocol.OP_CODE["all_reduce"], protocol.NO_CODE, 0, i, -1, 16, 16, 0, 0,
             1_000 + i, 2_000 + i, 0] for i in range(n)]
    return encode_batch(rank, recs, {0: ("x.py", 1)}, inc=5, groups={0: ("0", [0, 1])})


def test_an_envelope_carries_the_messages_unchanged_and_in_order():
    msgs = [_ops(0, 3), protocol.encode_bye(1, 9, 10, 0), _ops(0, 2)]
    data = relayed.encode("node-a", msgs, dropped=4, lost=2)
    assert relayed.is_envelope(data)
    env = relayed.decode(data)
    assert env == relayed.Envelope("node-a", msgs, 4, 2)
    assert [protocol.decode(m).rank for m in env.msgs] == [0, 1, 0]


def test_an_empty_envelope_is_a_relays_heartbeat():
    env = relayed.decode(relayed.encode("n", [], 0, 0))
    assert env.msgs == [] and env.node == "n"


def test_other_messages_are_not_envelopes():
    for data in (_ops(0, 1), protocol.encode_bye(0, 1, 1, 0), b"", b"\x85", b"garbage"):
        assert not relayed.is_envelope(data)


@pytest.mark.parametrize("msg, why", [
    ({"v": 1, "k": "fwd", "node": "", "msgs": [], "dropped": 0, "lost": 0}, "'node'"),
    ({"v": 1, "k": "fwd", "node": "x" * 257, "msgs": [], "dropped": 0, "lost": 0}, "'node'"),
    ({"v": 1, "k": "fwd", "node": "n", "msgs": ["text"], "dropped": 0, "lost": 0}, "'msgs'"),
    ({"v": 1, "k": "fwd", "node": "n", "msgs": {}, "dropped": 0, "lost": 0}, "'msgs'"),
    ({"v": 1, "k": "fwd", "node": "n", "msgs": [], "dropped": -1, "lost": 0}, "'dropped'"),
    ({"v": 1, "k": "fwd", "node": "n", "msgs": [], "lost": 0}, "'dropped'"),
    ({"v": 2, "k": "fwd", "node": "n", "msgs": [], "dropped": 0, "lost": 0}, "version 1"),
])
def test_a_malformed_envelope_is_refused_whole(msg, why):
    data = msgpack.packb(msg, use_bin_type=True)
    assert relayed.is_envelope(data) == (msg["v"] == 1)
    with pytest.raises(protocol.ProtocolError, match=why):
        relayed.decode(data)


def test_an_envelope_is_bounded_in_size_and_count():
    too_many = msgpack.packb({"v": 1, "k": "fwd", "node": "n",
                              "msgs": [b"x"] * (relayed.MAX_MSGS + 1), "dropped": 0,
                              "lost": 0}, use_bin_type=True)
    with pytest.raises(protocol.ProtocolError, match="undecodable"):
        relayed.decode(too_many)
    with pytest.raises(protocol.ProtocolError, match="exceeds"):
        relayed.decode(relayed.encode("n", [], 0, 0) + b"\0" * relayed.MAX_ENVELOPE_BYTES)
    cut = relayed.encode("n", [_ops(0, 4)], 0, 0)[:-20]
    with pytest.raises(protocol.ProtocolError, match="undecodable"):
        relayed.decode(cut)


def test_the_packer_keeps_the_order_and_the_bounds():
    packer = relayed.Packer()
    assert packer.take() == [[]]
    small = [i.to_bytes(4, "little") * 3 for i in range(relayed.MAX_MSGS + 5)]
    for m in small:
        packer.add(m)
    batches = packer.take()
    assert [len(b) for b in batches] == [relayed.MAX_MSGS, 5]
    assert [m for b in batches for m in b] == small
    big = b"x" * (relayed.PACK_BYTES // 2)
    for m in (big, big, b"tail"):  # two halves do not fit beside the envelope's own bytes
        packer.add(m)
    batches = packer.take()
    assert [len(b) for b in batches] == [1, 2]
    assert all(len(relayed.encode("n", b, 0, 0)) <= relayed.PACK_BYTES for b in batches)


def test_a_message_too_large_to_share_goes_alone_and_still_fits_an_envelope():
    packer = relayed.Packer()
    packer.add(b"a")
    packer.add(b"y" * relayed.MAX_INNER_BYTES)
    batches = packer.take()
    assert [len(b) for b in batches] == [1, 1]
    assert len(relayed.encode("n" * relayed.NODE_MAX, batches[1], 1 << 62, 1 << 62)) \
        <= relayed.MAX_ENVELOPE_BYTES


def test_records_are_counted_inside_envelopes_within_envelopes():
    inner = relayed.encode("a", [_ops(0, 3), protocol.encode_bye(0, 1, 1, 0)], 0, 0)
    outer = relayed.encode("top", [inner, _ops(1, 5)], 0, 0)
    assert relayed.records_in(_ops(2, 7)) == 7
    assert relayed.records_in(outer) == 8
    assert relayed.records_in(b"garbage") == 0
