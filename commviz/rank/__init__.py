"""Rank-side code, in the order of the flow: the hooks around torch.distributed (hooks.py;
ddp.py and funcol.py for DDP's and DTensor's communication; describe.py says what a call
means), the records they make (records.py; cuda_timing.py ends those of NCCL ops by GPU
time), the phases a program marks (phases.py), the emitter thread that sends them all
(emitter.py) and the local telemetry it adds (telemetry.py, gpu_topology.py, nvml.py).

Nothing here imports Textual or Rich: this code runs inside the user's training processes.
"""
