"""Training and evaluation: ``fit`` with checkpoints, ``evaluate``, and the shipped pretrained CapsNet."""

from capsedu.training.evaluation import evaluate, predict_lengths
from capsedu.training.loop import fit
from capsedu.training.pretrained import load_capsnet, weights_info

__all__ = ["fit", "evaluate", "predict_lengths", "load_capsnet", "weights_info"]
