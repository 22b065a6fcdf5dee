"""Check commviz's NCCL path end to end on a machine with one GPU (or more); one line per check.

    python bench/gpu_check.py

Runs one rank under ``commviz run``'s machinery (auto-instrumented, no commviz import in the
job) with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,TUNING: NCCL with one rank and CUDA
tensors, an all_reduce queued behind about 30 ms of matrix products (its GPU-timed end must
come after them, not when the host call returned), an async all_reduce and a broadcast, then
gloo with CUDA tensors (host-timed). The viewer side checks the records' flags and times,
NCCL's lines, the NVML topology and telemetry. Prints PASS / FAIL / INFO lines and exits 1
if any check failed; without a GPU it prints SKIP and exits 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = r"""
import os, time, torch, torch.distributed as dist
dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
dist.init_process_group("nccl", rank=0, world_size=1)
x = torch.ones(1 << 20, device=dev)  # 4 MiB of float32
dist.all_reduce(x)
torch.cuda.synchronize()
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(20):
    a = (a @ a).clamp_(-1, 1)
t0 = time.time_ns()
dist.all_reduce(x)  # queued behind the products: returns at once on the host
host_ms = (time.time_ns() - t0) / 1e6
end.record()
torch.cuda.synchronize()
print(f"CHECK busy_ms={start.elapsed_time(end):.3f} host_call_ms={host_ms:.3f}", flush=True)
dist.all_reduce(x, async_op=True).wait()
dist.broadcast(x, 0)
torch.cuda.synchronize()
assert x[0].item() == 1.0
g = dist.new_group(backend="gloo")
y = torch.ones(1024, device=dev)
dist.all_reduce(y, group=g)
print(f"CHECK gloo_value={y[0].item()}", flush=True)
time.sleep(1.5)  # heartbeats with the GPU's telemetry
dist.destroy_process_group()
"""

failures = 0


def say(status: str, what: str) -> None:
    global failures
    failures += status == "FAIL"
    print(f"{status:<5} {what}", flush=True)


def check(ok: bool, what: str) -> None:
    say("PASS" if ok else "FAIL", what)


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        say("SKIP", "no GPU: torch.cuda.is_available() is False (torch "
            f"{torch.__version__}); nothing to check on this machine")
        return 0
    import torch.distributed as dist

    if not dist.is_nccl_available():
        say("SKIP", f"torch {torch.__version__} has a GPU but no NCCL backend")
        return 0
    from commviz.launch.job import Job
    from commviz.launch.launcher import free_port
    from commviz.viewer.session import Session
    from commviz.wire import protocol

    try:
        nccl_version = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # an int in older torch, or no NCCL library found
        nccl_version = f"? ({exc})"
    say("INFO", f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
        f"NCCL {nccl_version}")
    rec_path = Path(tempfile.mkdtemp(prefix="commviz-gpu-check-")) / "run.jsonl"
    session = Session("tcp://127.0.0.1:*", rec_path)
    session.start()
    env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL,TUNING",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    job = Job([sys.executable, "-c", JOB], session.addr, capture=True, env=env,
              on_line=session.nccl.feed)
    try:
        job.wait(180)
    except subprocess.TimeoutExpired:
        say("FAIL", "the job did not end within 180 s")
    finally:
        job.stop()
        time.sleep(1.0)
        session.close()
    assert job.output is not None
    lines = [ln.text for ln in job.output.since(0)]
    check(job.exit_code == 0, f"the job ran ({job.describe_end()})")
    if job.exit_code != 0:
        print("\n".join(lines[-30:]))
    checks = dict(kv.split("=") for ln in lines if ln.startswith("CHECK ")
                  for kv in ln.split()[1:])
    recorded = [json.loads(ln) for ln in rec_path.read_text().splitlines()[1:]]
    groups = {o["g"]: o["ranks"] for o in recorded if o.get("kind") == "group"}
    ops = [o for o in recorded if o.get("kind") == "op"]
    if not ops:
        said = " | ".join(ln for ln in lines if "commviz" in ln)
        say("FAIL", f"no op recorded; the job's lines from commviz: {said or 'none'}")
        return 1
    nccl_ops = [o for o in ops if len(groups[o["g"]]) == 1 and o["pg"] == ops[0]["pg"]]
    gpu_timed = [o for o in nccl_ops if o["flags"] & protocol.FLAG_GPU_TIME]
    check(len(gpu_timed) >= 4, f"NCCL ops on CUDA tensors GPU-timed: {len(gpu_timed)} of "
          f"{len(nccl_ops)} records of the default group carry flag bit 5")
    behind = next((o for o in nccl_ops if o["op"] == "all_reduce" and o["seq"] == 2), None)
    if behind is not None and "busy_ms" in checks:
        rec_ms = (behind["t_end_ns"] - behind["t_start_ns"]) / 1e6
        busy, host = float(checks["busy_ms"]), float(checks["host_call_ms"])
        check(rec_ms >= 0.5 * busy and rec_ms > 3 * host,
              f"all_reduce queued behind {busy:.1f} ms of GPU work: recorded {rec_ms:.1f} ms "
              f"(the host call took {host:.2f} ms)")
    else:
        say("FAIL", "the all_reduce behind the matrix products was not recorded")
    gloo = [o for o in ops if o["pg"] != ops[0]["pg"]]
    check(bool(gloo) and all(o["flags"] & protocol.FLAG_CUDA
                             and not o["flags"] & protocol.FLAG_GPU_TIME for o in gloo)
          and checks.get("gloo_value") == "1.0",
          f"gloo with CUDA tensors: {len(gloo)} record(s), host-timed, result "
          f"{checks.get('gloo_value')}")
    nccl = session.nccl
    check(nccl.version is not None, f"NCCL's log read: version {nccl.version}, "
          f"{nccl.lines} INFO lines")
    say("INFO", f"NCCL at init: {nccl.init_summary(final=True)}")
    say("INFO", f"4 MiB all_reduce: {nccl.algorithm_text('all_reduce', 4 << 20, 1)} (one "
        "rank: NCCL may copy without choosing an algorithm)")
    topo = session.model.gpu_topology.get(0)
    check(topo is not None and topo.gpu >= 0 and not topo.note,
          f"NVML topology: {topo and len(topo.gpus)} GPU(s), this rank's is #{topo and topo.gpu}"
          f"{' (' + topo.note + ')' if topo and topo.note else ''}")
    if topo is not None and topo.links:
        say("INFO", f"GPU links: {topo.links[:4]}")
    tel = [t for _, t in session.model.ranks[0].telemetry] if 0 in session.model.ranks else []
    check(any(t.get("gpu_util_pct") is not None for t in tel),
          f"NVML telemetry in {len(tel)} heartbeats")
    last = tel[-1] if tel else {}
    say("INFO", "link throughput (bytes/s, None where NVML gives none): " + ", ".join(
        f"{k}={last.get(k)}" for k in ("nvlink_tx_bps", "nvlink_rx_bps", "pcie_tx_bps",
                                       "pcie_rx_bps")))
    say("INFO", f"recording kept: {rec_path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
