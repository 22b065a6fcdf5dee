"""A job that ignores Ctrl-C, with a child in a session of its own (as torchrun starts its
workers) that ignores SIGINT and SIGTERM: only SIGTERM, then SIGKILL, to each stop them."""

import signal
import subprocess
import sys
import time

CHILD = ("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('child up', flush=True); "
         "time.sleep(120)")

signal.signal(signal.SIGINT, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", CHILD], start_new_session=True)
print("parent up", flush=True)
time.sleep(120)
