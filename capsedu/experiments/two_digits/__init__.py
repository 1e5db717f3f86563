"""Su Jianlin's two-digit experiment (chapter 7): ``config`` (settings, presets), ``run``, ``cli``."""
