"""The fast path: the maths of ``routing.dynamic_routing``, arranged for speed.

``routing.py`` stays the readable reference; this module adds what chapter 8
measured to pay off, and a test checks that both give the same capsules and the
same gradients:

- ``fused_routing``: the routing loop compiled with ``torch.compile`` into a few
  fused kernels (the eager loop launches ~10 small operations per iteration), with
  the first iteration's uniform coupling taken as a plain sum.
  ``detach_inner=True`` stops gradients through all but the last iteration, as
  several public implementations do; that changes the gradients, so it is off
  by default and chapter 8 measures what it costs in accuracy.
- ``accelerate(model)``: puts ``fused_routing`` into a model's routed capsule
  layers and, on CUDA, stores convolutions channels-last.
- ``recommended_amp(device)``: bf16 autocast where the hardware does bf16 natively
  (recent NVIDIA GPUs; CPUs with AVX512-BF16 or AMX), else full precision.
"""
from __future__ import annotations

import functools
import warnings

import torch
from torch import nn

from .functional import squash
from .routing import _check_routing_args

__all__ = ["fused_routing", "accelerate", "recommended_amp", "cpu_has_native_bf16"]


def _routing_kernel(u: torch.Tensor, iterations: int, additive: bool, squash_k: float,
                    detach_inner: bool) -> torch.Tensor:
    """Routing on the (B, N_out, N_in, D) layout; returns v (B, N_out, D)."""
    inner = u.detach() if detach_inner else u
    logits = None
    for r in range(iterations):
        src = u if r == iterations - 1 else inner
        if logits is None:  # b = 0, so c_ij = 1/N_out for every pair: s_j is a plain sum
            s = src.sum(dim=2) / u.shape[1]
        else:
            c = torch.softmax(logits, dim=1)                        # over output capsules j
            s = (c.unsqueeze(2) @ src).squeeze(2)                   # (B, N_out, D)
        v = squash(s, dim=-1, k=squash_k)
        if r < iterations - 1:
            agreement = (src @ v.unsqueeze(-1)).squeeze(-1)         # (B, N_out, N_in)
            logits = agreement if logits is None or not additive else logits + agreement
    return v


@functools.lru_cache(maxsize=None)
def _compiled_kernel():
    # Each iteration count, mode, precision and grad mode is its own graph (the loop is
    # unrolled); dynamo's default of 8 graphs per function is too few for a notebook
    # that compares them, so allow more.
    config = torch._dynamo.config
    if getattr(config, "recompile_limit", 64) < 64:
        config.recompile_limit = 64
    return torch.compile(_routing_kernel, fullgraph=True)


def _dispatch_mode_active() -> bool:
    """True inside a torch dispatch mode (e.g. FlopCounterMode), which torch.compile does not support."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    return _get_current_dispatch_mode() is not None


_compile_failed = False


def fused_routing(u_hat: torch.Tensor, iterations: int = 3, mode: str = "hinton", squash_k: float = 1.0,
                  detach_inner: bool = False, compile: bool = True) -> torch.Tensor:
    """Same contract as ``dynamic_routing(u_hat, iterations, mode, squash_k=...)`` (no history).

    With ``compile=True`` the first call compiles the loop (seconds). It compiles again
    for a new number of capsules, mode, iteration count, precision or grad mode, but
    not for a new batch size. If compilation fails (no C++ compiler, an unsupported
    platform, too many variants) it warns once and from then on runs the loop eagerly.
    """
    global _compile_failed
    _check_routing_args(u_hat, iterations, mode)
    u = u_hat.transpose(1, 2).contiguous()                          # free when stored as capsedu's layers do
    # Without autograd, detaching changes nothing: one compiled variant fewer.
    detach = bool(detach_inner) and torch.is_grad_enabled()
    args = (u, iterations, mode == "hinton", float(squash_k), detach)
    if compile and not _compile_failed and not _dispatch_mode_active():
        # One kernel for every batch size (training batches, a smaller last batch,
        # evaluation batches) rather than one compilation per size.
        torch._dynamo.maybe_mark_dynamic(u, 0)
        try:
            return _compiled_kernel()(*args)
        except Exception as err:  # compilation problems surface at the first call
            _compile_failed = True
            warnings.warn(f"capsedu.fast: torch.compile failed ({type(err).__name__}: {err}); "
                          "routing runs eagerly instead", RuntimeWarning, stacklevel=2)
    return _routing_kernel(*args)


def cpu_has_native_bf16() -> bool:
    """True when the CPU has bf16 arithmetic instructions (AVX512-BF16 or AMX-BF16).

    Elsewhere PyTorch emulates bf16 on the CPU, which is often slower than float32.
    Reads /proc/cpuinfo, so it answers False off Linux.
    """
    from .bench import cpuinfo
    flags = (cpuinfo("flags") or "").split()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def recommended_amp(device) -> str:
    """"bf16" where the device does bf16 natively, else "off" (an ``amp`` value for ``train.fit``)."""
    device = torch.device(device)
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "off"
    if device.type == "cpu":
        return "bf16" if cpu_has_native_bf16() else "off"
    return "off"


def accelerate(model: nn.Module, compile_routing: bool = True, detach_inner: bool = False,
               channels_last="auto") -> nn.Module:
    """Switch ``model`` to the fast path in place and return it.

    Every routed capsule layer (``DenseCapsules``, ``SharedCapsules``) then routes with
    ``fused_routing``; ``channels_last="auto"`` stores 4-D weights channels-last when
    the model is on CUDA (cuDNN's fastest layout for bf16; on CPU it measured no gain).
    Undo with ``model.apply(capsedu.fast.readable)``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"accelerate expects a torch.nn.Module, got {type(model).__name__}")
    if channels_last not in ("auto", True, False):
        raise ValueError(f"channels_last must be 'auto', True or False, got {channels_last!r}")
    routed = [m for m in model.modules() if hasattr(m, "fast_routing")]
    if not routed:
        raise ValueError("accelerate: the model has no routed capsule layers (DenseCapsules/SharedCapsules)")
    router = functools.partial(fused_routing, detach_inner=detach_inner, compile=compile_routing)
    for m in routed:
        m.fast_routing = router
    param = next(model.parameters(), None)
    on_cuda = param is not None and param.device.type == "cuda"
    if channels_last is True or (channels_last == "auto" and on_cuda):
        model.to(memory_format=torch.channels_last)
    return model


def readable(module: nn.Module) -> None:
    """``model.apply(readable)`` puts the readable ``dynamic_routing`` back."""
    if hasattr(module, "fast_routing"):
        module.fast_routing = None
