"""Time from a rank's death (SIGKILL) to its recovered records at a viewer's socket.

A child process keeps a shared-memory ring (``commviz/wire/ring.py``) of 100 completed
records written by the hot path (``records.start``/``complete``), none shipped, notes the
wall clock and SIGKILLs itself; this process runs the node's harvester
(``commviz/launch/harvester.py``) and a PULL socket in its place of a viewer, and notes when
the recovered batch arrives.

    python bench/harvest_latency.py [N]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import zmq

from commviz.launch.harvester import Harvester
from commviz.wire import protocol

CHILD = r'''
import collections, os, signal, time, types
from commviz.rank import records
from commviz.wire import protocol, ring
w = ring.RingWriter(os.environ["COMMVIZ_RING_TAG"], 7, ring.ring_dir())
w.note_identity(0, 1, "gloo", "cpu", "h", "")
w.note_site(0, "x.py", 1)
w.note_group(0, "0", [0])
records.push = collections.deque(maxlen=10).append
records.use_ring(w)
G = types.SimpleNamespace(gid=0, ranks=(0,), seq=0, nccl=False, no_future=set())
for _ in range(100):
    rec = records.start(protocol.OP_CODE["all_reduce"], 0, 255, G, -1, 4, 4, None, False, 0)
    records.complete(rec)
time.sleep(0.3)  # the harvester has found the ring by now
print(time.time_ns(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
'''


def main(runs: int) -> None:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    h = Harvester(f"tcp://127.0.0.1:{port}")
    took = []
    for _ in range(runs):
        p = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, **h.env()})
        killed = int(p.stdout.readline())
        while True:
            msg = protocol.decode(pull.recv())
            if isinstance(msg, protocol.OpBatch):
                took.append((time.time_ns() - killed) / 1e6)
                if len(msg) != 100:
                    raise SystemExit(f"{len(msg)} records recovered, not 100")
            if isinstance(msg, protocol.Gone):
                break
        p.wait()
    h.close()
    pull.close()
    ctx.term()
    print(f"death -> recovered records at the socket, ms: median {statistics.median(took):.1f}, "
          f"max {max(took):.1f} (n={len(took)})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
