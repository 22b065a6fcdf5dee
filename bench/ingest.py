"""How fast the viewer takes in records: real sockets, real decoding, the real model.

Sender processes replay the batches a rank's emitter would send (an all_reduce job, every
rank's records, each rank on its own socket) as fast as they can; the viewer process drains,
validates, decodes and applies them to the model (in the slices a viewing session applies
under its lock), then reports events/s and the records per second of the viewer process' own
CPU (what it would take in on a machine where the senders do not share its cores, as ranks
on other nodes do not). Every record must be applied and every collective instance matched
for the figures to count.

    python bench/ingest.py [--events 2000000] [--batch 1024] [--ranks 4] [--diagnose]
                           [--groups-in-batches] [--round N] [--in-process]

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
from commviz.viewer.groups import GroupTables
from commviz.viewer.model import Model
from commviz.viewer.session import APPLY_SLICE
from commviz.viewer.transport import Receiver
from commviz.wire import protocol


def encode_all_reduce(rank: int, world: int, seq: range, t_start: list[int],
                      t_end: list[int], groups_in_batches: bool) -> bytes:
    """One ops batch of 4 KiB all_reduce records, as a rank's emitter would send it: naming
    the world group by id (announced before), or listing its members as older ranks did."""
    n = len(seq)
    cols = {
        "id": array("q", seq), "op": array("B", [protocol.OP_CODE["all_reduce"]] * n),
        "parent": array("B", [protocol.NO_CODE] * n), "gid": array("I", [0] * n),
        "seq": array("q", seq), "peer": array("i", [-1] * n),
        "bytes_in": array("q", [4096] * n), "bytes_out": array("q", [4096] * n),
        "dtype": array("B", [0] * n), "flags": array("B", [0] * n),
        "t_start": array("q", t_start), "t_end": array("q", t_end), "site": array("I", [0] * n),
    }
    groups = [[0, "0", list(range(world))]] if groups_in_batches else []
    return protocol.encode_ops(rank, {k: v.tobytes() for k, v in cols.items()}, groups,
                               [[0, "train.py", 42]])


def make_batches(rank: int, world: int, events: int, batch: int,
                 groups_in_batches: bool = False) -> list[bytes]:
    """Encoded messages of one rank: the world group's ``grp`` (unless every batch lists it),
    then op batches of all_reduce seq 1..events/world."""
    per_rank = events // world
    t = 1_700_000_000_000_000_000
    out = [] if groups_in_batches else [
        protocol.encode_groups(rank, [[0, "0", list(range(world))]])]
    for first in range(0, per_rank, batch):
        seq = range(first + 1, min(first + batch, per_rank) + 1)
        # rank r arrives r ns into its slot; every rank's op ends after the last arrival
        slot = 10 * (world + 500)
        out.append(encode_all_reduce(rank, world, seq, [t + s * slot + rank for s in seq],
                                     [t + s * slot + world + 500 for s in seq],
                                     groups_in_batches))
    return out


def sender(addr: str, ranks: range, world: int, events: int, batch: int,
           groups_in_batches: bool, ready: mp.Semaphore, go: mp.Event) -> None:
    """Plays ``ranks``, each on its own socket as a rank's emitter is: their messages are
    sent in turn (every rank's first, then every rank's second...), as ranks that wait for
    one another in their collectives send them."""
    per_rank = [make_batches(r, world, events, batch, groups_in_batches) for r in ranks]
    ctx = zmq.Context()
    socks = []
    for _ in ranks:
        sock = ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.connect(addr)
        socks.append(sock)
    ready.release()
    go.wait()
    for i in range(max(map(len, per_rank))):
        for sock, messages in zip(socks, per_rank):
            if i < len(messages):
                sock.send(messages[i])  # blocking: the benchmark measures the receiver
    for sock in socks:
        sock.close(linger=-1)
    ctx.term()


def in_process(args: argparse.Namespace) -> None:
    """The viewer's own work on the same messages, without sockets or sender processes (which
    share this machine's cores): decoding, the column checks, the groups' resolution and the
    model, in rounds of ``--round`` messages, the ranks' messages interleaved as they arrive."""
    per_rank = [make_batches(r, args.ranks, args.events, args.batch, args.groups_in_batches)
                for r in range(args.ranks)]
    messages = [m[i] for i in range(max(map(len, per_rank))) for m in per_rank if i < len(m)]
    receiver_groups = GroupTables(lambda reason, n: None)
    model = Model()
    t0 = time.perf_counter()
    for i in range(0, len(messages), args.round):
        decoded = [protocol.decode(data, columns=False) for data in messages[i:i + args.round]]
        protocol.check_columns([m for m in decoded if type(m) is protocol.OpBatch])
        model.apply(receiver_groups.resolve(decoded))
    elapsed = time.perf_counter() - t0
    print(f"{model.records} records from {args.ranks} ranks in batches of {args.batch}, in "
          f"process, rounds of {args.round} messages: {elapsed:.2f} s, "
          f"{model.records / elapsed / 1e6:.2f} M events/s; {model.instances} instances "
          f"matched")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=2_000_000)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--diagnose", action="store_true", help="with the live diagnosis")
    p.add_argument("--in-process", action="store_true",
                   help="the viewer's own work alone: no sockets, no sender processes")
    p.add_argument("--procs", type=int, default=8,
                   help="sender processes, each playing every PROCS-th rank (default 8)")
    p.add_argument("--round", type=int, default=20_000, metavar="N",
                   help="messages taken in per round at most (default: as a viewing session, "
                        "whose rounds grow with what waited while it was busy)")
    p.add_argument("--groups-in-batches", action="store_true",
                   help="every batch lists its group's members (ranks before ``grp`` did)")
    args = p.parse_args()
    if args.in_process:
        in_process(args)
        return
    receiver = Receiver("tcp://127.0.0.1:*")
    model = Model()
    diagnosis = Diagnosis(model) if args.diagnose else None
    next_diagnosis = 0.0
    findings = 0
    ctx = mp.get_context("fork")
    go, ready = ctx.Event(), ctx.Semaphore(0)
    procs = [ctx.Process(target=sender, args=(receiver.addr, range(i, args.ranks, args.procs),
                                              args.ranks, args.events, args.batch,
                                              args.groups_in_batches, ready, go))
             for i in range(min(args.procs, args.ranks))]
    for proc in procs:
        proc.start()
    for _ in procs:  # every sender has encoded its messages and connected: start the clock
        ready.acquire()
    expected = (args.events // args.ranks) * args.ranks
    go.set()
    t0, cpu0 = time.perf_counter(), time.process_time()  # the viewer's own CPU (ZeroMQ's too)
    decode_s = 0.0
    while model.records < expected:
        d0 = time.perf_counter()
        messages = receiver.drain(1000, max_messages=args.round)
        d1 = time.perf_counter()
        for i in range(0, len(messages), APPLY_SLICE):  # as a viewing session applies them
            model.apply(messages[i:i + APPLY_SLICE])
        decode_s += d1 - d0
        if diagnosis is not None and d1 >= next_diagnosis:
            findings += len(diagnosis.update())
            next_diagnosis = d1 + 0.25
        if not messages and time.perf_counter() - t0 > 60:
            break
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    for proc in procs:
        proc.join(10)
    receiver.close()
    ok = model.records == expected and model.instances == expected // args.ranks
    print(f"{model.records} records from {args.ranks} ranks in batches of {args.batch}: "
          f"{elapsed:.2f} s, {model.records / elapsed / 1e6:.2f} M events/s "
          f"(receive+decode {decode_s / elapsed:.0%} of the time); viewer CPU {cpu:.2f} s, "
          f"{model.records / cpu / 1e6:.2f} M records per CPU second; "
          f"{model.instances} instances matched; rejected {receiver.rejected}; "
          + (f"diagnosis on, {findings} findings; " if diagnosis is not None else "")
          + f"{'complete' if ok else 'INCOMPLETE'}")


if __name__ == "__main__":
    main()
