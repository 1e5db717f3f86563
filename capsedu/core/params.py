"""Parameter counts: what ``count_parameters`` reads off a model (``capsedu.figures.parameters``
derives the same numbers from the hyperparameters, layer by layer, for chapter 4's table)."""
from __future__ import annotations

from torch import nn

__all__ = ["count_parameters"]


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters (``requires_grad``) of ``module``."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"count_parameters expects an nn.Module, got {type(module).__name__}")
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
