"""What the rest stands on: device and precision, checkpoints, stored results, the allocator, arguments.

Imports nothing of capsedu but the root's constants; ``arguments`` and ``results`` need no torch.
"""
