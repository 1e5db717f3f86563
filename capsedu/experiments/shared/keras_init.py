"""Keras's default initialisation, which Su Jianlin's two-digit script relies on: Glorot-uniform weights, zero biases."""
from __future__ import annotations

import math

import torch
from torch import nn

from capsedu.core.layers import SharedCapsules

__all__ = ["keras_init_"]


@torch.no_grad()
def keras_init_(model: nn.Module) -> nn.Module:
    """Re-initialise in place as Keras does by default: Glorot-uniform weights, zero biases."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, SharedCapsules):  # Su's W is a (1, in_dim, n_out * out_dim) conv1d kernel
            n_out, out_dim, in_dim = m.weight.shape
            bound = math.sqrt(6.0 / (in_dim + n_out * out_dim))
            m.weight.uniform_(-bound, bound)
    return model
