"""Prints a recorded NCCL log as a job would (stdout, one write per line), one line of its own
on stderr, and exits with the code given: ``python nccl_replay_job.py LOG CODE``. No torch,
no GPU: what `commviz run` does with NCCL's lines is tested with it."""

import sys

log, code = sys.argv[1], int(sys.argv[2])
with open(log, encoding="utf-8") as f:
    for line in f:
        sys.stdout.write(line)
        sys.stdout.flush()
sys.stderr.write("replay: done\n")
sys.exit(code)
