"""Learning core: algorithms, models, filters, replay buffers, schedules.

Importing this package must stay light (no torch): the spec imports `rl.config`.
"""
