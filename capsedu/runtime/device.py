"""The one place where capsedu chooses a device and a numeric precision.

- ``resolve_device("auto")``: a CUDA GPU, else Apple's MPS, else the CPU; any other
  value is checked, so a missing GPU is one clear error rather than a deep one.
- ``resolve_amp("auto", device)``: the one meaning of ``amp="auto"`` for ``fit``, the
  CLI, the benchmarks and the book. Low precision only where the hardware computes
  it natively:

  | device                          | "auto" | why |
  | ---                             | ---    | --- |
  | CUDA, compute capability >= 8.0 | bf16   | native bf16 tensor cores (A100, L4, H100, RTX 30xx and later) |
  | CUDA, capability 7.x            | fp16   | fp16 tensor cores but no bf16 (V100, T4); with a ``GradScaler`` |
  | CUDA, below 7.0                 | off    | no tensor cores: float32 |
  | CPU with AVX512-BF16 or AMX     | bf16   | native bf16 instructions |
  | other CPUs                      | off    | PyTorch would emulate bf16, slower than float32 |
  | MPS (Apple)                     | off    | float32: MPS autocast is recent and its bf16 depends on the |
  |                                 |        | macOS version; an explicit "fp16" or "bf16" is passed to torch |

- ``autocast(amp, device)`` and ``grad_scaler(amp, device)``: what a training step needs for
  that choice (a ``GradScaler`` exactly when the precision is fp16).
- ``cpuinfo(field)`` and ``hardware(device)``: the CPU-feature reader and the hardware
  string stored in every result file.
"""
from __future__ import annotations

import contextlib
import platform
from typing import Optional

import torch

from capsedu import AMP_CHOICES

__all__ = ["resolve_device", "resolve_amp", "auto_amp", "amp_dtype", "autocast", "grad_scaler", "adam",
           "cpuinfo", "hardware", "one_thread"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# ---------------------------------------------------------------- the device
def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(device="auto") -> torch.device:
    """"auto" -> cuda if available, else mps, else cpu; "cpu", "cuda", "cuda:1", "mps" are checked."""
    if isinstance(device, str) and device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps" if _mps_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'mps', got {device!r}") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'mps', got {str(device)!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' asked for, but torch sees no CUDA GPU; use device='auto' or 'cpu'")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device={str(device)!r} asked for, but torch sees {torch.cuda.device_count()} CUDA GPU(s)")
    if device.type == "mps" and not _mps_available():
        raise ValueError("device='mps' asked for, but torch sees no Apple MPS device; use device='auto' or 'cpu'")
    return device


# ---------------------------------------------------------------- the CPU and the GPU
def cpuinfo(field: str) -> Optional[str]:
    """The first value of ``field`` in /proc/cpuinfo ("model name", "flags", ...); None off Linux."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f
                         if line.split(":", 1)[0].strip() == field), None)
    except OSError:
        return None


def hardware(device="cpu") -> str:
    """A short description of the device, for result files: the GPU's name or the CPU's and its threads."""
    device = torch.device(device)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"
    if device.type == "mps":
        return f"Apple MPS ({platform.machine()})"
    name = cpuinfo("model name") or platform.processor() or platform.machine()
    return f"{name} ({torch.get_num_threads()} threads)"


# ---------------------------------------------------------------- the precision
def auto_amp(device) -> str:
    """What ``amp="auto"`` means on ``device`` (the table in this module's docstring)."""
    device = torch.device(device)
    if device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        return "bf16" if major >= 8 else "fp16" if major == 7 else "off"
    if device.type == "cpu":  # native bf16 instructions: AVX512-BF16 or AMX-BF16
        flags = (cpuinfo("flags") or "").split()
        return "bf16" if "avx512_bf16" in flags or "amx_bf16" in flags else "off"
    return "off"


def resolve_amp(amp, device) -> str:
    """"auto" -> ``auto_amp(device)``; "bf16", "fp16" and "off" are checked against the device and kept."""
    if not isinstance(amp, str) or amp not in AMP_CHOICES:
        raise ValueError(f"amp must be one of {AMP_CHOICES}, got {amp!r}")
    device = torch.device(device)
    if amp == "auto":
        return auto_amp(device)
    if amp == "bf16" and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] < 8:
        major, minor = torch.cuda.get_device_capability(device)
        raise ValueError(f"amp='bf16' needs a GPU with native bf16 (compute capability 8.0 or more); this one "
                         f"has {major}.{minor}: use amp='fp16' or 'auto'")
    return amp


def amp_dtype(amp: str) -> torch.dtype:
    """The dtype a resolved precision ("off", "bf16", "fp16") computes in."""
    return torch.float32 if amp == "off" else _DTYPES[amp]


def autocast(amp: str, device):
    """``torch.autocast`` in bf16 or fp16 for ``amp`` "bf16"/"fp16", a no-op context for "off"."""
    if amp not in ("off", "bf16", "fp16"):
        raise ValueError(f"amp must be 'off', 'bf16' or 'fp16' (resolve 'auto' first), got {amp!r}")
    if amp == "off":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=_DTYPES[amp])


def grad_scaler(amp: str, device) -> Optional["torch.amp.GradScaler"]:
    """A ``GradScaler`` for fp16 (whose range is too narrow for small gradients), else None."""
    return torch.amp.GradScaler(torch.device(device).type) if amp == "fp16" else None


def adam(params, lr: float, device) -> torch.optim.Adam:
    """Adam, fused where torch has the kernel (CPU, CUDA): the same update in one pass over each
    tensor instead of one per operation (``capsedu.speed.bench.stage_times`` times it)."""
    return torch.optim.Adam(params, lr=lr, fused=torch.device(device).type in ("cpu", "cuda"))


@contextlib.contextmanager
def one_thread(device="cpu"):
    """Run torch on one CPU thread inside the block (on another device: unchanged), its old count
    after it. Small tensors on a busy 2-core machine: the thread pool's hand-offs cost 100x the
    arithmetic (180 ms instead of 1 ms for one routing), and a second thread mostly waits."""
    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
