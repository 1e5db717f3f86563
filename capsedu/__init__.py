"""capsedu: Capsule Networks, taught — the package behind the capsedu book.

Floors (each imports only from those below; ``data`` uses ``device``'s ``resolve_device``):

1. ``device`` (device and precision), ``functional``, ``data``, ``transforms`` (affine test sets),
   ``allocator``, ``checkpoints``, ``tables``, ``results`` (stored runs as JSON), ``two_digit_config``
2. ``routing`` (dynamic routing, the one loop), ``em_routing``, ``attention_routing``, ``bench`` (timing helpers)
3. ``layers``
4. ``models``, ``baseline_cnn``, ``matrix_capsnet``, ``efficient_capsnet``, ``naive`` (the tutorial-style
   network of chapter 8), ``fast`` (the fast path: compiles ``routing``'s loop)
5. ``params``, ``evaluation``, ``train``, ``plots``, ``widgets``, ``static``, ``diagrams``,
   ``routing_compare_widgets``
6. ``pretrained``; one module per experiment (``two_digits``, ``robustness``, ``ablation``, ``multimnist``,
   ``compare_routing``, with ``runs`` shared by chapter 9's three); the CLI (``cli`` and each
   experiment's ``*_cli`` module, which import no torch so that ``--help`` is instant)

The mode (``CAPSEDU_MODE``) sets how much each chapter trains, one code path for all:

| mode    | for                                   | data                          | each chapter |
| ---     | ---                                   | ---                           | ---          |
| "smoke" | the tests: every code path            | a few dozen sample digits     | seconds |
| "quick" | a 2-core CPU, no network (book build) | the embedded 10k sample       | <= 3 min |
| "gpu"   | a GPU runtime such as Colab's T4      | all of MNIST where it downloads | <= 5 min on a T4 |
| "full"  | the paper's budget, opt-in            | all of MNIST                  | 10-30 min on a T4 (estimated) |

Unset, the mode is "gpu" where a CUDA or MPS device is present and "quick" elsewhere.
Chapter 0 (``book/00_setup.ipynb``) tabulates what each chapter trains in each mode.
"""
import os

__version__ = "0.1.0"

# The one place for the repository and the revision the notebooks install in Colab (their
# first cell repeats both; tests/test_colab_install.py checks the copies, and
# scripts/colab_cell.py rewrites them). REVISION is the release tag of this version.
REPO_URL = "https://github.com/capsedu/capsedu"
REVISION = f"v{__version__}"

MODES = ("smoke", "quick", "gpu", "full")


def current_mode() -> str:
    """``CAPSEDU_MODE`` (smoke|quick|gpu|full); unset: "gpu" where CUDA or MPS is present, else "quick"."""
    mode = os.environ.get("CAPSEDU_MODE", "").strip().lower()
    if not mode:
        from .device import resolve_device
        return "quick" if resolve_device("auto").type == "cpu" else "gpu"
    if mode not in MODES:
        raise ValueError(f"CAPSEDU_MODE must be one of {MODES}, got {mode!r}")
    return mode


def by_mode(*, smoke, quick, gpu, full):
    """The value for the current mode, e.g. ``epochs = by_mode(smoke=1, quick=2, gpu=4, full=30)``."""
    return {"smoke": smoke, "quick": quick, "gpu": gpu, "full": full}[current_mode()]
