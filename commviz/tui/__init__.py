"""The Textual TUI.

Textual paints the screen from a timer at TEXTUAL_FPS (60 by default), and after a paint
longer than its period it waits for the slot after next: under load (paints of ~15 ms) the
frames of ``app.FRAME_S`` would then come late, or two would merge into one. At 120 a paint
follows each frame within a few ms. Textual reads the variable when its screen module is
imported, so it is set around that import only (the ranks and the job started from here do
not inherit it); a TEXTUAL_FPS of the user's own wins.
"""

import os

if "TEXTUAL_FPS" in os.environ:
    import textual.screen  # noqa: F401
else:
    os.environ["TEXTUAL_FPS"] = "120"
    try:
        import textual.screen  # noqa: F401  (reads it now)
    finally:
        del os.environ["TEXTUAL_FPS"]
