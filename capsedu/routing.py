"""Floor 2: dynamic routing by agreement (Sabour et al., 2017, Procedure 1).

Indices: ``i`` input (lower) capsule, ``j`` output (upper) capsule.

- ``b_ij`` (logits) start at 0 for every example; ``c_ij = softmax_j(b_ij)``,
  so each lower capsule spreads one unit of vote over the upper capsules.
- ``s_j = sum_i c_ij u_hat_{j|i}`` and ``v_j = squash(s_j)``.
- ``mode="hinton"``: ``b_ij <- b_ij + <u_hat_{j|i}, v_j>`` (the paper's additive update).
- ``mode="su"``: ``b_ij <- <u_hat_{j|i}, v_j>`` (Su Jianlin's replacing update:
  a fixed-point iteration for ``v_j``, a cluster centre of the predictions).
"""
from __future__ import annotations

import torch

from .functional import squash

__all__ = ["dynamic_routing", "ROUTING_MODES"]

ROUTING_MODES = ("hinton", "su")


def _check_routing_args(u_hat, iterations, mode) -> None:
    if not isinstance(u_hat, torch.Tensor):
        raise TypeError(f"u_hat must be a torch.Tensor, got {type(u_hat).__name__}")
    if u_hat.dim() != 4:
        raise ValueError(
            f"u_hat must have shape (batch, n_in, n_out, dim), got {u_hat.dim()}-D shape {tuple(u_hat.shape)}"
        )
    if not u_hat.is_floating_point():
        raise TypeError(f"u_hat must be floating point, got dtype {u_hat.dtype}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be a positive int, got {iterations!r}")
    if mode not in ROUTING_MODES:
        raise ValueError(f"unknown routing mode {mode!r}; expected one of {ROUTING_MODES}")


def dynamic_routing(u_hat: torch.Tensor, iterations: int = 3, mode: str = "hinton",
                    return_history: bool = False, squash_k: float = 1.0):
    """Route predictions ``u_hat`` (B, N_in, N_out, D) to output capsules ``v`` (B, N_out, D).

    Returns ``v``, or ``(v, history)`` where ``history[r]`` is the coupling coefficients
    ``c`` (B, N_in, N_out) used in iteration ``r + 1``. The logits are per example, and
    the softmax runs over the output capsules (dim 2), so ``c[b, i, :]`` sums to 1.

    Gradients flow through every iteration, as in the official implementation: the
    unrolled loop is part of the network. The only Python loop is over iterations.
    """
    _check_routing_args(u_hat, iterations, mode)
    # Work on the (B, N_out, N_in, D) view: both sums over i are then batched
    # matrix products over contiguous memory. The capsule layers already store
    # u_hat in this order, so the transpose and .contiguous() copy nothing.
    u = u_hat.transpose(1, 2).contiguous()                          # (B, N_out, N_in, D)
    logits = u.new_zeros(u.shape[:3])                               # (B, N_out, N_in): b_ij
    history = []
    for r in range(iterations):
        c = torch.softmax(logits, dim=1)                            # over output capsules j
        if return_history:
            history.append(c.transpose(1, 2))                       # (B, N_in, N_out)
        s = (c.unsqueeze(2) @ u).squeeze(2)                         # s_j = sum_i c_ij u_hat_j|i: (B, N_out, D)
        v = squash(s, dim=-1, k=squash_k)                           # (B, N_out, D)
        if r < iterations - 1:                                      # the last update would be unused
            agreement = (u @ v.unsqueeze(-1)).squeeze(-1)           # <u_hat_j|i, v_j>: (B, N_out, N_in)
            logits = logits + agreement if mode == "hinton" else agreement
    return (v, history) if return_history else v
