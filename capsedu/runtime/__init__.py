"""What the rest stands on: device and precision, checkpoints, stored results, the allocator, arguments,
and the chapters' training settings and stored times (``chapter_plan``).

Imports nothing of capsedu but the root's constants; ``arguments``, ``results``, ``stored`` (the one
stored-run format) and ``lock`` (one writer per output, only the run's own files deleted) need no torch.
"""
