"""The Textual TUI.

Textual paints the screen from a timer at TEXTUAL_FPS (60 by default), and after a paint
longer than its period it waits for the slot after next: under load (paints of ~15 ms) the
frames of ``app.FRAME_S`` would then come late, or two would merge into one. At 120 a paint
follows each frame within a few ms. Set here, before Textual is imported (it reads the
variable then); a TEXTUAL_FPS of the user's own wins.
"""

import os

os.environ.setdefault("TEXTUAL_FPS", "120")
