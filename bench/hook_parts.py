"""Where the all_reduce hook's cost goes inside a real loop, part by part.

One gloo rank runs a 4-byte ``all_reduce`` loop, instrumented; between blocks of ops the
closure cell inside torch's ``@_exception_logger`` wrapper is pointed at one variant after
another (their order rotates every round): torch's own function ("raw"), a hook that only
adds a Python frame ("frame"), one that also finds the call site and describes the call
("site+describe": the group, the bytes, an end time), and commviz's whole hook ("full": the
record, its queueing, the flags, its ring slot; "full, no ring": the same without the slot),
and torch's function after the ring's two writes alone, each on its own ("slot pack": one
``pack_into`` of a slot; "one word": one int64 store through the ring's ``words``).
Per variant: the calling thread's CPU per op (median of blocks) and the median paired
difference with the raw block of the same round.

    python bench/hook_parts.py [--rounds 60] [--ops 300]

In a tight loop (``bench/overhead.py``'s "hook alone") the hook costs about 2 us; inside a
real loop, with the caches cooled by torch, gloo and the kernel between calls, several
times that. This shows which part grows.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time

import torch
import torch.distributed as dist

import commviz
from commviz.launch.launcher import free_port
from commviz.rank import describe, hooks, records
from commviz.wire import ring as ring_


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--ops", type=int, default=300, help="ops per block")
    args = p.parse_args()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=60))
    commviz.instrument(f"tcp://127.0.0.1:{free_port()}")  # nobody listens: nothing queues
    cell = (dist.all_reduce.__closure__ or [None])[0]
    if getattr(getattr(cell, "cell_contents", None), "__code__", None) is not hooks._HOOK_CODE:
        raise SystemExit("this torch is not hooked in place: nothing to compare here")
    full = cell.cell_contents
    real = full.__wrapped__
    getframe, sites, direct_site = sys._getframe, hooks._direct_sites, hooks._direct_site
    extract, torch_files = describe.EXTRACTORS["all_reduce"], hooks._TORCH_FILES

    def frame(*a, **kw):
        if hooks._ACTIVE is None:
            return real(*a, **kw)
        return real(*a, **kw)

    def site_describe(*a, **kw):
        if hooks._ACTIVE is None:
            return real(*a, **kw)
        caller = getframe(2)
        if sites.get((id(caller.f_code), caller.f_lasti)) is None:
            if caller.f_code.co_filename in torch_files:
                return real(*a, **kw)
            direct_site(caller)
        info, peer, b_in, b_out, tensor, async_op = extract(*a, **kw)
        if info is None or not info.member:
            return real(*a, **kw)
        result = real(*a, **kw)
        hooks._time_ns()
        return result

    ring = hooks._EMITTER.ring
    pack, slots_at, words, first = ring_.SLOT.pack_into, ring_.HEADER_BYTES, ring.words, \
        ring_.FIRST_WORD
    fields = (0,) * len(ring_.SLOT_FIELDS)

    def slot_pack(*a, **kw):  # the ring's start alone: one slot packed, into slot 0
        pack(ring.buf, slots_at, *fields)
        return real(*a, **kw)

    def one_word(*a, **kw):  # the ring's end alone: one int64 store, into slot 0's first word
        words[first] = 0
        return real(*a, **kw)

    variants = {"raw": real, "frame": frame, "site+describe": site_describe,
                "full, no ring": full, "full": full, "slot pack": slot_pack,
                "one word": one_word}
    names = list(variants)
    t = torch.zeros(1)
    for _ in range(200):
        dist.all_reduce(t)
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            cell.cell_contents = variants[name]
            records.use_ring(None if name == "full, no ring" else ring)
            c0 = time.thread_time_ns()
            for _ in range(args.ops):
                dist.all_reduce(t)
            cpu[name].append((time.thread_time_ns() - c0) / args.ops / 1e3)
    cell.cell_contents = full
    records.use_ring(ring)
    dist.destroy_process_group()
    print(f"4-byte all_reduce, 1 gloo rank, {args.rounds} rounds of {args.ops}-op blocks; "
          "thread CPU per op, us")
    print(f"{'variant':<15} {'median':>8} {'added vs raw (paired median)':>30}")
    for name in names:
        added = statistics.median(a - b for a, b in zip(cpu[name], cpu["raw"]))
        print(f"{name:<15} {statistics.median(cpu[name]):8.2f} {added:+30.2f}")


if __name__ == "__main__":
    main()
