"""Chapter 10's comparison of routing methods on one budget: ``run`` and ``cli``; what the chapter
judges, in ``claims`` (the ledger's contract: ``STORED``, ``CLAIMS``, ``frames``; ``COST_CLAIMS``,
``cost_frames``)."""
from capsedu.experiments.compare_routing.claims import CLAIMS, COST_CLAIMS, KEY, STORED, cost_frames, frames  # noqa: F401
