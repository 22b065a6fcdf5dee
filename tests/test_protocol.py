"""Pure tests of the wire protocol: round trips and every kind of rejection."""

from array import array

import msgpack
import numpy as np
import pytest

from commviz.wire import protocol


def _cols(n=2, **over):
    cols = {
        "id": array("q", range(n)), "op": array("B", [protocol.OP_CODE["all_reduce"]] * n),
        "parent": array("B", [protocol.NO_CODE] * n), "gid": array("I", [7] * n),
        "seq": array("q", range(1, n + 1)), "peer": array("i", [-1] * n),
        "bytes_in": array("q", [16] * n), "bytes_out": array("q", [16] * n),
        "dtype": array("B", [0] * n), "flags": array("B", [0] * n),
        "t_start": array("q", [100] * n), "t_end": array("q", [200] * n),
        "site": array("I", [3] * n),
    }
    cols.update(over)
    return {k: v.tobytes() if isinstance(v, array) else v for k, v in cols.items()}


def _ops(**over):
    msg = {"v": 1, "k": "ops", "rank": 1, "cols": _cols(),
           "groups": [[7, "0", [0, 1]]], "sites": [[3, "train.py", 42]]}
    msg.update(over)
    return msgpack.packb(msg)


def test_ops_round_trip():
    data = protocol.encode_ops(1, _cols(), [[7, "0", [0, 1]]], [[3, "train.py", 42]])
    batch = protocol.decode(data)
    assert isinstance(batch, protocol.OpBatch)
    assert batch.rank == 1 and len(batch) == 2
    assert batch.cols["seq"].tolist() == [1, 2]
    assert batch.groups == {7: ("0", (0, 1))}
    assert batch.sites == {3: ("train.py", 42)}


def test_heartbeat_and_bye_round_trip():
    tel = {"cpu_pct": 12.5, "rss_bytes": 1e8, "gpu_util_pct": None, "gpu_mem_used": None,
           "gpu_mem_total": None, "gpu_power_w": None}
    hb = protocol.decode(protocol.pack({"v": 1, "k": "hb", "rank": 2, "world": 4, "host": "h",
                                        "pid": 9, "backend": "gloo", "device": "cpu",
                                        "t_ns": 5, "dropped": 3, "tel": tel}))
    assert isinstance(hb, protocol.Heartbeat)
    assert (hb.rank, hb.world, hb.dropped, hb.telemetry["cpu_pct"]) == (2, 4, 3, 12.5)
    bye = protocol.decode(protocol.pack({"v": 1, "k": "bye", "rank": 2, "t_ns": 1, "dropped": 0}))
    assert bye == protocol.Bye(2, 1, 0)


BAD = {
    "garbage": b"\xc1\xff\x00garbage",
    "not a map": msgpack.packb([1, 2, 3]),
    "no version": msgpack.packb({"k": "ops"}),
    "future version": _ops(v=2),
    "unknown kind": msgpack.packb({"v": 1, "k": "nope"}),
    "rank not int": _ops(rank="0"),
    "negative rank": _ops(rank=-1),
    "missing column": _ops(cols={k: v for k, v in _cols().items() if k != "seq"}),
    "column not bytes": _ops(cols=_cols(seq=[1, 2])),
    "ragged columns": _ops(cols=_cols(seq=array("q", [1]).tobytes())),
    "odd column bytes": _ops(cols=_cols(seq=b"\x00" * 15)),
    "unknown op code": _ops(cols=_cols(op=array("B", [200, 200]))),
    "unknown dtype": _ops(cols=_cols(dtype=array("B", [99, 99]))),
    "group missing from its table": _ops(groups=[[8, "0", [0, 1]]]),
    "empty group": _ops(groups=[[7, "0", []]]),
    "group of a negative rank": _ops(groups=[[7, "0", [0, -1]]]),
    "group table without members": protocol.pack({"v": 1, "k": "grp", "rank": 0,
                                                  "groups": []}),
    "group members not ints": protocol.pack({"v": 1, "k": "grp", "rank": 0,
                                             "groups": [[0, "0", ["a"]]]}),
    "group table too large": protocol.pack({"v": 1, "k": "grp", "rank": 0, "groups": [
        [0, "0", [0] * (1 << 19)], [1, "1", [0] * ((1 << 19) + 1)]]}),
    "unknown site": _ops(sites=[]),
    "bad group row": _ops(groups=[[7, "0", "01"]]),
    "ends before start": _ops(cols=_cols(t_end=array("q", [50, 50]))),
    "negative bytes": _ops(cols=_cols(bytes_in=array("q", [-1, 1]))),
    "empty batch": _ops(cols=_cols(n=0)),
    "bad telemetry": protocol.pack({"v": 1, "k": "hb", "rank": 0, "world": 1, "host": "h",
                                    "pid": 1, "backend": "gloo", "device": "cpu", "t_ns": 1,
                                    "dropped": 0, "tel": {"cpu_pct": "lots"}}),
    "rank above world": protocol.pack({"v": 1, "k": "hb", "rank": 4, "world": 4, "host": "h",
                                       "pid": 1, "backend": "g", "device": "cpu", "t_ns": 1,
                                       "dropped": 0, "tel": {}}),
    "oversized": b"\x00" * (protocol.MAX_MESSAGE_BYTES + 1),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_rejects(name):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(BAD[name])


@pytest.mark.parametrize("column", list(protocol.COLUMNS))
def test_a_column_one_item_short_is_rejected_after_a_whole_batch_of_that_size(column):
    """Valid column lengths are remembered per batch size: what is remembered must be every
    column's length, not the batch's size alone."""
    assert len(protocol.decode(_ops(cols=_cols(n=3), groups=[[7, "0", [0, 1]]]))) == 3
    short = _cols(n=3)
    short[column] = short[column][:-protocol.COLUMN_DTYPES[column].itemsize]
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(_ops(cols=short))


def test_a_batchs_distinct_ids_are_those_numpy_reads():
    rng = np.random.default_rng(1)
    for n in (1, 2, 50, 1000):
        gids = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        sites = rng.integers(0, 4, n).astype(np.uint32)
        batch = protocol.decode(protocol.encode_ops(
            1, _cols(n=n, gid=gids.astype("<u4").tobytes(), site=sites.astype("<u4").tobytes()),
            [[int(g), "0", [0, 1]] for g in set(gids.tolist())],
            [[int(s), "train.py", 42] for s in set(sites.tolist())]))
        assert protocol.distinct(batch.cols, "gid") == set(gids.tolist())
        assert protocol.distinct(batch.cols, "site") == set(sites.tolist())
        assert protocol.distinct({"gid": gids}, "gid") == set(gids.tolist())
        assert len(batch) == n


def test_random_bytes_never_escape_as_other_errors():
    rng = np.random.default_rng(0)
    good = _ops()
    for i in range(3000):
        if i % 2:
            data = rng.integers(0, 256, rng.integers(0, 300), dtype=np.uint8).tobytes()
        else:  # flip bytes of a valid message
            buf = bytearray(good)
            for pos in rng.integers(0, len(buf), 3):
                buf[pos] = int(rng.integers(0, 256))
            data = bytes(buf)
        try:
            protocol.decode(data)
        except protocol.ProtocolError:
            pass


def test_a_simulators_heartbeat_says_so_and_a_rank_s_does_not():
    kw = dict(world=4, host="h", pid=1, backend="nccl", device="cuda:0", t_ns=5, dropped=0,
              tel={}, inc=3, job="j")
    assert protocol.decode(protocol.encode_heartbeat(0, **kw, simulated=True)).simulated
    plain = protocol.encode_heartbeat(0, **kw)
    assert b"sim" not in plain and not protocol.decode(plain).simulated
