"""``play --share`` at scale: a student's playback following a teacher's that jumps 300 s
into a recording, then plays 5 s.

    python bench/share_playback.py REC    # e.g. bench/fleet.py --watch's 10-minute .cvz
"""
import sys
import time

from commviz.viewer.playback import Playback, PlaybackControl
from commviz.viewer.share import ClockFollower

path = sys.argv[1]
teacher = Playback(path)
control = PlaybackControl(teacher, paused=True)
share = teacher.share_class()
teacher.start()
student = Playback(path)
told = ClockFollower(share.addr)
student.follow_class(told)
student.start()
t0 = time.monotonic()
while not share.followers:
    time.sleep(0.01)
print(f"the student's hello answered in {time.monotonic() - t0:.2f} s")
t0 = time.monotonic()
teacher.seek(300)
print(f"teacher's seek to 300 s: {time.monotonic() - t0:.1f} s")
t0 = time.monotonic()
while student.at_s < 299.9:
    time.sleep(0.05)
print(f"student there {time.monotonic() - t0:.1f} s later; records: teacher "
      f"{teacher.model.records:,}, student {student.model.records:,}")
control.toggle()
time.sleep(5)
print(f"after 5 s of play: teacher at {teacher.at_s:.1f} s, student at {student.at_s:.1f} s; "
      f"instances {teacher.model.instances} / {student.model.instances}")
teacher.close()
t0 = time.monotonic()
while not told.ended:  # the student's collector reads the teacher's last word
    time.sleep(0.02)
print(f"the student heard the class ended {time.monotonic() - t0:.2f} s after")
student.close()
