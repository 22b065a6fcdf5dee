"""How fast the viewer takes in records: real sockets, real decoding, the real model.

Sender processes replay the batches a rank's emitter would send (a 4-rank all_reduce job,
every rank's records) as fast as they can; the viewer process drains, validates, decodes
and applies them to the model, then reports events/s. Every record must be applied and
every collective instance matched for the figure to count.

    python bench/ingest.py [--events 2000000] [--batch 1024] [--ranks 4] [--diagnose]

``--diagnose`` attaches the live diagnosis to the model and runs it every 0.25 s, as a
viewing session does.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from array import array

import zmq

from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.model import Model
from commviz.viewer.transport import Receiver
from commviz.wire import protocol


def encode_all_reduce(rank: int, world: int, seq: range, t_start: list[int],
                      t_end: list[int]) -> bytes:
    """One ops batch of 4 KiB all_reduce records, as a rank's emitter would send it."""
    n = len(seq)
    cols = {
        "id": array("q", seq), "op": array("B", [protocol.OP_CODE["all_reduce"]] * n),
        "parent": array("B", [protocol.NO_CODE] * n), "gid": array("I", [0] * n),
        "seq": array("q", seq), "peer": array("i", [-1] * n),
        "bytes_in": array("q", [4096] * n), "bytes_out": array("q", [4096] * n),
        "dtype": array("B", [0] * n), "flags": array("B", [0] * n),
        "t_start": array("q", t_start), "t_end": array("q", t_end), "site": array("I", [0] * n),
    }
    return protocol.encode_ops(rank, {k: v.tobytes() for k, v in cols.items()},
                               [[0, "0", list(range(world))]], [[0, "train.py", 42]])


def make_batches(rank: int, world: int, events: int, batch: int) -> list[bytes]:
    """Encoded op batches of one rank: all_reduce seq 1..events/world."""
    per_rank = events // world
    t = 1_700_000_000_000_000_000
    out = []
    for first in range(0, per_rank, batch):
        seq = range(first + 1, min(first + batch, per_rank) + 1)
        # rank r arrives r ns into its slot; every rank's op ends after the last arrival
        slot = 10 * (world + 500)
        out.append(encode_all_reduce(rank, world, seq, [t + s * slot + rank for s in seq],
                                     [t + s * slot + world + 500 for s in seq]))
    return out


def sender(addr: str, rank: int, world: int, events: int, batch: int, go: mp.Event) -> None:
    batches = make_batches(rank, world, events, batch)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 100_000)
    sock.connect(addr)
    go.wait()
    for data in batches:
        sock.send(data)  # blocking: the benchmark measures the receiver, so nothing is dropped
    sock.close(linger=-1)
    ctx.term()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=2_000_000)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--diagnose", action="store_true", help="with the live diagnosis")
    args = p.parse_args()
    receiver = Receiver("tcp://127.0.0.1:*")
    model = Model()
    diagnosis = Diagnosis(model) if args.diagnose else None
    next_diagnosis = 0.0
    findings = 0
    ctx = mp.get_context("fork")
    go = ctx.Event()
    procs = [ctx.Process(target=sender, args=(receiver.addr, r, args.ranks, args.events,
                                              args.batch, go)) for r in range(args.ranks)]
    for proc in procs:
        proc.start()
    time.sleep(1.0)  # senders encode their batches before the clock starts
    expected = (args.events // args.ranks) * args.ranks
    go.set()
    t0 = time.perf_counter()
    decode_s = 0.0
    while model.records < expected:
        d0 = time.perf_counter()
        messages = receiver.drain(1000, max_messages=64)
        d1 = time.perf_counter()
        model.apply(messages)
        decode_s += d1 - d0
        if diagnosis is not None and d1 >= next_diagnosis:
            findings += len(diagnosis.update())
            next_diagnosis = d1 + 0.25
        if not messages and time.perf_counter() - t0 > 60:
            break
    elapsed = time.perf_counter() - t0
    for proc in procs:
        proc.join(10)
    receiver.close()
    ok = model.records == expected and model.instances == expected // args.ranks
    print(f"{model.records} records from {args.ranks} ranks in batches of {args.batch}: "
          f"{elapsed:.2f} s, {model.records / elapsed / 1e6:.2f} M events/s "
          f"(receive+decode {decode_s / elapsed:.0%} of the time); "
          f"{model.instances} instances matched; rejected {receiver.rejected}; "
          + (f"diagnosis on, {findings} findings; " if diagnosis is not None else "")
          + f"{'complete' if ok else 'INCOMPLETE'}")


if __name__ == "__main__":
    main()
