"""Dynamic routing by agreement (Sabour et al., 2017, Procedure 1).

Indices: ``i`` input (lower) capsule, ``j`` output (upper) capsule.

- ``b_ij`` (logits) start at 0 for every example; ``c_ij = softmax_j(b_ij)``,
  so each lower capsule spreads one unit of vote over the upper capsules.
- ``s_j = sum_i c_ij u_hat_{j|i}`` and ``v_j = squash(s_j)``.
- ``mode="hinton"``: ``b_ij <- b_ij + <u_hat_{j|i}, v_j>`` (the paper's additive update).
- ``mode="su"``: ``b_ij <- <u_hat_{j|i}, v_j>`` (Su Jianlin's replacing update of January
  2018, the one his blog post describes: a fixed-point iteration for a cluster centre ``v_j``).
- ``mode="su-march"``: his repository's update from March 2018: ``b_ij <- <u_hat_{j|i}, s_j/|s_j|>``
  (agreement with the *direction* of ``s_j``), and the squash only once, after the last iteration.

``routing_loop`` is the loop itself; ``dynamic_routing`` checks its input and calls it, and
``capsedu.speed.fast`` compiles the same function (so there is one routing loop in the package).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from capsedu.core.squashing import squash

__all__ = ["dynamic_routing", "routing_loop", "check_routing_args", "check_routing_options", "ROUTING_MODES"]

ROUTING_MODES = ("hinton", "su", "su-march")


def check_routing_args(u_hat, iterations, mode) -> None:
    """One clear error for a bad ``u_hat`` (B, N_in, N_out, D), ``iterations`` or ``mode``."""
    if not isinstance(u_hat, torch.Tensor):
        raise TypeError(f"u_hat must be a torch.Tensor, got {type(u_hat).__name__}")
    if u_hat.dim() != 4:
        raise ValueError(
            f"u_hat must have shape (batch, n_in, n_out, dim), got {u_hat.dim()}-D shape {tuple(u_hat.shape)}"
        )
    if not u_hat.is_floating_point():
        raise TypeError(f"u_hat must be floating point, got dtype {u_hat.dtype}")
    if any(n == 0 for n in u_hat.shape):
        raise ValueError(f"u_hat must have no empty dimension, got shape {tuple(u_hat.shape)}")
    check_routing_options(iterations, mode)


def check_routing_options(iterations, mode) -> None:
    """``iterations`` a positive int and ``mode`` one of ROUTING_MODES (the routed layers check these at construction)."""
    if mode not in ROUTING_MODES:
        raise ValueError(f"unknown routing mode {mode!r}; expected one of {ROUTING_MODES}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be a positive int, got {iterations!r}")


def routing_loop(u: torch.Tensor, iterations: int, mode: str, squash_k: float = 1.0,
                 detach_inner: bool = False, history=None) -> torch.Tensor:
    """The loop on the (B, N_out, N_in, D) layout; returns ``v`` (B, N_out, D).

    ``detach_inner=True`` stops gradients through every iteration but the last (an option
    some implementations take; chapter 8 measures it). ``history``: a list that receives
    each iteration's coupling coefficients, (B, N_in, N_out).
    """
    inner = u.detach() if detach_inner else u
    logits = None                                                   # b_ij = 0 for every example
    for r in range(iterations):
        last = r == iterations - 1
        src = u if last else inner
        if logits is None:  # softmax of zeros: c_ij = 1/N_out, so s_j is a plain mean over j's share
            s = src.sum(dim=2) / u.shape[1]                         # (B, N_out, D)
            if history is not None:
                history.append(u.new_full((u.shape[0], u.shape[2], u.shape[1]), 1.0 / u.shape[1]))
        else:
            c = torch.softmax(logits, dim=1)                        # over output capsules j: (B, N_out, N_in)
            if history is not None:
                history.append(c.transpose(1, 2))                   # (B, N_in, N_out)
            s = (c.unsqueeze(2) @ src).squeeze(2)                   # s_j = sum_i c_ij u_hat_j|i: (B, N_out, D)
        if mode == "su-march" and not last:
            v = F.normalize(s, dim=-1)                              # the direction of s_j only
        else:
            v = squash(s, dim=-1, k=squash_k)                       # (B, N_out, D)
        if not last:                                                # the last update would be unused
            agreement = (src @ v.unsqueeze(-1)).squeeze(-1)         # <u_hat_j|i, v_j>: (B, N_out, N_in)
            logits = logits + agreement if mode == "hinton" and logits is not None else agreement
    return v


def dynamic_routing(u_hat: torch.Tensor, iterations: int = 3, mode: str = "hinton",
                    return_history: bool = False, squash_k: float = 1.0, detach_inner: bool = False):
    """Route predictions ``u_hat`` (B, N_in, N_out, D) to output capsules ``v`` (B, N_out, D).

    Returns ``v``, or ``(v, history)`` where ``history[r]`` is the coupling coefficients
    ``c`` (B, N_in, N_out) used in iteration ``r + 1``. The logits are per example, and
    the softmax runs over the output capsules, so ``c[b, i, :]`` sums to 1.

    Gradients flow through every iteration, as in the official implementation: the
    unrolled loop is part of the network. The only Python loop is over iterations.
    float16 input is routed in float32 (its sums over 1,152 predictions overflow
    float16's range of 65,504 easily) and ``v`` comes back in float16.
    """
    check_routing_args(u_hat, iterations, mode)
    # Work on the (B, N_out, N_in, D) view: both sums over i are then batched
    # matrix products over contiguous memory. The capsule layers already store
    # u_hat in this order, so the transpose and .contiguous() copy nothing.
    u = u_hat.transpose(1, 2).contiguous()                          # (B, N_out, N_in, D)
    history = [] if return_history else None
    with full_range(u) as u32:
        v = routing_loop(u32, iterations, mode, float(squash_k), bool(detach_inner), history)
    v = v.to(u_hat.dtype)
    if return_history:
        return v, [c.to(u_hat.dtype) for c in history]
    return v


@contextlib.contextmanager
def full_range(u: torch.Tensor):
    """Yield ``u`` in a dtype whose sums cannot overflow: float16 becomes float32, with autocast off."""
    if u.dtype != torch.float16:
        yield u
        return
    with torch.autocast(u.device.type, enabled=False):
        yield u.float()
