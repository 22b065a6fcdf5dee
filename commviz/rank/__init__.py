"""Rank-side code: hooks around torch.distributed, the emitter thread, local telemetry.

Nothing here imports Textual or Rich: this code runs inside the user's training processes.
"""
