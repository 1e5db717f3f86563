"""Training and evaluation: ``fit`` with checkpoints, ``evaluate``, and the shipped pretrained CapsNet.

Names are imported when first used, so that the command line can read ``TrainConfig``'s fields
(``capsedu.training.config``) without importing torch.
"""
import importlib

_HOME = {"fit": "loop", "TrainConfig": "config", "evaluate": "evaluation", "predict_lengths": "evaluation",
         "load_capsnet": "pretrained", "weights_info": "pretrained"}
__all__ = list(_HOME)


def __getattr__(name):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
