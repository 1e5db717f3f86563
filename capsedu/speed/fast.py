"""The fast path: the maths of ``routing.dynamic_routing``, arranged for speed.

``routing.py`` stays the readable reference; this module adds what chapter 8
measured to pay off, and a test checks that both give the same capsules and the
same gradients:

- ``fused_routing``: ``capsedu.core.routing.dynamic_routing`` itself, compiled with ``torch.compile``
  into a few fused kernels (the eager loop launches ~10 small operations per
  iteration); compiled on the CPU, it first copies the votes with ``i`` innermost, the order of
  routing's sums. ``detach_inner=True`` stops gradients through all but the last
  iteration, as several public implementations do; that changes the gradients, so
  it is off by default and chapter 8 measures what it costs in accuracy.
- ``accelerate(model)``: runs each routed capsule layer's votes and routing as one
  function with a hand-derived backward (``capsedu.speed.routing.votes_and_routing``:
  it never makes û; its elementwise passes compiled with ``compile_routing``), ``fused_routing`` where the layer is asked for
  its history or for ``detach_inner``, runs the primary capsules' convolution as matrix products on the CPU
  (``capsedu.speed.gemm_conv``) and, on CUDA, stores convolutions channels-last.

The precision to run it in is ``capsedu.runtime.device.resolve_amp("auto", device)``'s choice.
"""
from __future__ import annotations

import functools

import torch
from torch import nn

from capsedu.core.layers import DenseCapsules, PrimaryCapsules, SharedCapsules
from capsedu.core.routing import dynamic_routing
from capsedu.speed.gemm_conv import GemmConv2d
from capsedu.speed.routing import compiled_or_eager, votes_and_routing, weight_layout

__all__ = ["fused_routing", "accelerate"]


_compiled_loop = compiled_or_eager(dynamic_routing, fullgraph=True)


def fused_routing(u_hat: torch.Tensor, iterations: int = 3, mode: str = "hinton", return_history: bool = False,
                  squash_k: float = 1.0, detach_inner: bool = False, compile: bool = True) -> torch.Tensor:
    """``dynamic_routing(u_hat, iterations, mode, squash_k=...)``, compiled (it keeps no history).

    With ``compile=True`` the first call compiles ``dynamic_routing`` (seconds). It compiles
    again for a new number of capsules, mode, iteration count, precision or grad mode, but
    not for a new batch size. If compilation fails (no C++ compiler, an unsupported
    platform, too many variants) it warns once and runs the loop eagerly.
    """
    if return_history:
        raise ValueError("fused_routing keeps no history; call capsedu.core.routing.dynamic_routing for it")
    dynamic_routing(u_hat[:0], iterations, mode)  # its argument check, eagerly, on an empty batch (no work)
    # Without autograd, detaching changes nothing: one compiled variant fewer.
    args = (iterations, mode, False, float(squash_k), bool(detach_inner) and torch.is_grad_enabled())
    if not compile:
        return dynamic_routing(u_hat, *args)
    if u_hat.device.type == "cpu":
        # The votes copied with i innermost: the compiled CPU kernels then vectorise routing's
        # sums over i, where with core's layout they sum 16 numbers per vote (the whole step
        # a few percent faster, copy included). Core keeps its layout: with i innermost, its
        # einsum's backward is slow for a gradient laid out like the votes.
        u_hat = u_hat.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    # One kernel for every batch size (training batches, a smaller last batch,
    # evaluation batches) rather than one compilation per size.
    torch._dynamo.maybe_mark_dynamic(u_hat, 0)
    return _compiled_loop(u_hat, *args)


class _VotesAndRouting:
    """A routed capsule layer whose forward is ``votes_and_routing`` (one autograd function);
    a call for the routing history goes through core's layer as before."""

    def forward(self, u, return_history=False):
        if return_history:
            return super().forward(u, return_history)
        return votes_and_routing(u, self.weight, self.iterations, self.routing, self.squash_k,
                                 compile=self.compile_routing)


class FastDenseCapsules(_VotesAndRouting, DenseCapsules):
    pass


class FastSharedCapsules(_VotesAndRouting, SharedCapsules):
    pass


FAST_LAYERS = {DenseCapsules: FastDenseCapsules, SharedCapsules: FastSharedCapsules}


def accelerate(model: nn.Module, compile_routing: bool = True, detach_inner: bool = False,
               channels_last="auto", gemm_conv: bool = True, fuse_votes: bool = True) -> nn.Module:
    """Switch ``model`` to the fast path in place and return it.

    Every routed capsule layer (``DenseCapsules``, ``SharedCapsules``) then computes its votes
    and routing with ``votes_and_routing`` (``fuse_votes``; with ``detach_inner``, which it does
    not do, the layer keeps core's votes), and routes with ``fused_routing`` when called for
    its history or with ``fuse_votes=False``. ``gemm_conv`` makes each ``PrimaryCapsules`` convolution a
    ``GemmConv2d`` (the same parameters), which on the CPU runs as three matrix products.
    The routed layers' weights are stored in the order ``votes_and_routing`` reads them
    (``weight_layout``: same shape and values; no copy of W or of its gradient per step).
    ``channels_last="auto"`` stores 4-D weights channels-last on CUDA (cuDNN's fastest
    layout for bf16) and, with ``gemm_conv``, on the CPU: conv1 then hands over features
    laid out as the matrix products read them, which saves a copy and a strided ReLU
    backward (with oneDNN's convolution alone it measured no gain). Undo with
    ``model.apply(capsedu.speed.fast.readable)``.
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
        if fuse_votes and not detach_inner and type(m) in FAST_LAYERS:
            m.__class__, m.compile_routing = FAST_LAYERS[type(m)], compile_routing
    if gemm_conv:
        for m in model.modules():
            if isinstance(m, PrimaryCapsules) and type(m.conv) is nn.Conv2d:
                m.conv.__class__ = GemmConv2d
    param = next(model.parameters(), None)
    on_cuda = param is not None and param.device.type == "cuda"
    if channels_last is True or (channels_last == "auto" and (on_cuda or gemm_conv)):
        model.to(memory_format=torch.channels_last)
    for m in model.modules():   # after channels_last, which would store W as (I, D, E, J)
        if isinstance(m, _VotesAndRouting):
            m.weight.data = weight_layout(m.weight.data)
    return model


def readable(module: nn.Module) -> None:
    """``model.apply(readable)`` puts the readable ``dynamic_routing`` and ``nn.Conv2d`` back."""
    if hasattr(module, "fast_routing"):
        module.fast_routing = None
    core = {fast: layer for layer, fast in FAST_LAYERS.items()}
    if type(module) in core:
        module.__class__ = core[type(module)]
    if type(module) is GemmConv2d:
        module.__class__ = nn.Conv2d
