"""Making capsules fast (chapter 8): the fast path, the tutorial-style network, timing helpers."""

from capsedu.speed.fast import accelerate, fused_routing, readable
from capsedu.speed.naive import NaiveCapsNet
from capsedu.speed.routing import votes_and_routing

__all__ = ["accelerate", "readable", "fused_routing", "votes_and_routing", "NaiveCapsNet"]
