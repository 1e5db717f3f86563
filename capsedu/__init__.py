"""Capsedu: Capsule Networks, taught — the package behind the capsedu book.

The layout (each folder imports only what its row allows; tests/test_layout.py checks it):

| folder         | holds                                                                      | may import |
| ---            | ---                                                                        | ---        |
| ``core``       | squash, the losses, dynamic routing, capsule layers, CapsNet, parameter counts | torch only |
| ``methods``    | EM routing and matrix capsules, self-attention routing, the paper's CNN    | core |
| ``runtime``    | device and precision, atomic files, checkpoints, stored results, arguments | nothing |
| ``data``       | MNIST, two-digit pairs, shifts and affine test sets                        | runtime |
| ``training``   | ``fit``, ``evaluate``, the pretrained CapsNet, training across processes   | core, data, runtime |
| ``speed``      | the fast path, the tutorial-style network, timing helpers                  | core, runtime |
| ``figures``    | plots, live widgets, static twins, diagrams, tables                        | core, methods, runtime |
| ``experiments``| each experiment and its shared part (tables, verdicts); the CLI's commands | all above, never another experiment |

This root (``__init__``, ``__main__``, ``cli``) holds the modes and the constants every folder
may read; it imports no torch, so that ``python -m capsedu --help`` is instant. ``cli``
dispatches to the commands; nothing imports it.

The mode (``CAPSEDU_MODE``: smoke, quick, gpu or full) sets how much each chapter trains, one
code path for all; unset, it is "gpu" where a CUDA or MPS device is present and "quick"
elsewhere. book/intro.md's table says what each mode is for.
The appendix ``book/appendix_build.ipynb`` gives each chapter's stored time in quick mode,
``book/appendix_scale.ipynb`` what each trains in every mode (``capsedu.runtime.chapter_plan``).
"""
import os

__version__ = "0.2.0"

# The one place for the version (pyproject.toml reads it), the repository, and the release the
# notebooks install in Colab (their first cell repeats the URL and the version;
# tests/book/test_colab_install.py checks the copies, scripts/colab_cell.py rewrites them).
# REVISION is the release tag of this version, the first cell's fallback to the package index.
REPO_URL = "https://github.com/capsedu/capsedu"
REVISION = f"v{__version__}"

MODES = ("smoke", "quick", "gpu", "full")
PRESET_NAMES = (*MODES, "long")             # every stored-run experiment's presets (long: the stored CPU run)
SOURCES = ("auto", "sample", "full", "idx")  # where MNIST comes from (capsedu.data.mnist.load_dataset)
AMP_CHOICES = ("auto", "bf16", "fp16", "off")  # mixed precision (capsedu.runtime.device.resolve_amp)
LR_SCHEDULES = ("step", "constant", "cosine")  # the learning rate over a run (capsedu.training.config.TrainConfig)
LOSSES = ("capsnet", "margin", "cross_entropy", "spread")  # what fit trains with (capsedu.training.objectives)


def current_mode() -> str:
    """``CAPSEDU_MODE`` (smoke|quick|gpu|full); unset: "gpu" where CUDA or MPS is present, else "quick"."""
    mode = os.environ.get("CAPSEDU_MODE", "").strip().lower()
    if not mode:
        import torch  # only here: the root imports no torch, and nothing of capsedu
        mps = getattr(torch.backends, "mps", None)
        return "gpu" if torch.cuda.is_available() or (mps is not None and mps.is_available()) else "quick"
    if mode not in MODES:
        raise ValueError(f"CAPSEDU_MODE must be one of {MODES}, got {mode!r}")
    return mode


def glue(name: str, value, display: bool = True) -> None:
    """myst_nb's ``glue`` in the book build, which pastes ``value`` into the prose; elsewhere (Colab,
    plain Jupyter) there is no prose to paste into, and it does nothing."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    if getattr(value, "ndim", None) == 0:       # numpy 2's repr "np.float64(0.5)" defeats the formats
        value = value.item()
    myst_glue(name, value, display=display)


def glue_all(values) -> None:
    """``glue`` each name -> value of ``values`` without showing it: the numbers a reader hands the prose."""
    for name, value in values.items():
        glue(name, value, display=False)


def by_mode(*, smoke, quick, gpu, full):
    """The value for the current mode, e.g. ``epochs = by_mode(smoke=1, quick=2, gpu=4, full=30)``."""
    return {"smoke": smoke, "quick": quick, "gpu": gpu, "full": full}[current_mode()]
