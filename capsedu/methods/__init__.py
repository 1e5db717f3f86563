"""The routing methods that came after the paper, and the paper's baseline CNN (chapters 9 and 10).

- ``em``, ``matrix_capsnet``: EM routing between matrix capsules (Hinton, Sabour & Frosst, 2018).
- ``attention``, ``efficient_capsnet``: self-attention routing (Mazzia et al., 2021).
- ``baseline_cnn``: the convolutional baseline of Sabour et al. (2017).
- ``catalogue``: every routing method chapter 10 compares, declared once (``ROUTING_METHODS``).
- ``tutorial_capsnet``: the tutorial code's CapsNet, pitfalls included (chapter 11's before/after run;
  not re-exported here, so that nobody picks it up by accident).

Imports the core only.
"""

from capsedu.methods.attention import self_attention_routing
from capsedu.methods.baseline_cnn import BaselineCNN, BaselineConfig
from capsedu.methods.efficient_capsnet import EfficientCapsNet
from capsedu.methods.em import em_routing
from capsedu.methods.matrix_capsnet import MatrixCapsNet, MatrixCapsNetConfig

__all__ = ["em_routing", "MatrixCapsNet", "MatrixCapsNetConfig", "self_attention_routing", "EfficientCapsNet", "BaselineCNN", "BaselineConfig"]
