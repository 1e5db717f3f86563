"""capsedu: Capsule Networks, taught — the package behind the capsedu book.

Floors (each imports only from those below): ``functional`` and ``data``;
``routing``; ``layers``; ``models``; ``params`` and ``train``; ``pretrained`` and the CLI.
"""
import os

__version__ = "0.1.0"

# smoke: every code path, a handful of steps (the notebook tests); quick: a 2-core CPU
# without network (the book build); full: the paper's settings on a GPU.
MODES = ("smoke", "quick", "full")


def current_mode() -> str:
    """``CAPSEDU_MODE`` (smoke|quick|full); unset: "full" where a CUDA GPU is present, else "quick"."""
    mode = os.environ.get("CAPSEDU_MODE", "").strip().lower()
    if not mode:
        import torch
        return "full" if torch.cuda.is_available() else "quick"
    if mode not in MODES:
        raise ValueError(f"CAPSEDU_MODE must be one of {MODES}, got {mode!r}")
    return mode


def by_mode(smoke, quick, full):
    """The value for the current mode, e.g. ``epochs = by_mode(smoke=1, quick=3, full=30)``."""
    return {"smoke": smoke, "quick": quick, "full": full}[current_mode()]
