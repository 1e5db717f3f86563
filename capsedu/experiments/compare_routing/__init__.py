"""Chapter 10's comparison of routing methods on one budget: ``run`` and ``cli``."""
