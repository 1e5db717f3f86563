"""Dynamic routing by agreement (Sabour et al., 2017, Procedure 1), with Su Jianlin's two updates.

Indices: ``i`` input (lower) capsule, ``j`` output (upper) capsule.

- ``b_ij`` (logits) start at 0 for every example; ``c_ij = softmax_j(b_ij)``,
  so each lower capsule spreads one unit of vote over the upper capsules.
- ``s_j = sum_i c_ij u_hat_{j|i}`` and ``v_j = squash(s_j)``.
- ``mode="hinton"``: ``b_ij <- b_ij + <u_hat_{j|i}, v_j>`` (the paper's additive update).
- ``mode="su"``: ``b_ij <- <u_hat_{j|i}, v_j>`` (Su's replacing update of January 2018, the one
  his blog post describes: a fixed-point iteration for a cluster centre ``v_j``).
- ``mode="su-march"``: his repository's update of March 2018, ``b_ij <- <u_hat_{j|i}, s_j/|s_j|>``
  (agreement with the *direction* of ``s_j``), squashing only after the last iteration.

``capsedu.speed.fast`` compiles this same function: there is one routing loop in the package.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from capsedu.core.squashing import squash

__all__ = ["dynamic_routing", "ROUTING_MODES"]

ROUTING_MODES = ("hinton", "su", "su-march")


def dynamic_routing(u_hat: torch.Tensor, iterations: int = 3, mode: str = "hinton",
                    return_history: bool = False, squash_k: float = 1.0,
                    detach_inner: bool = False):
    """Route votes u_hat (B, N_in, N_out, D) to capsules v (B, N_out, D) [, each
    iteration's c (B, N_in, N_out)]. Gradients flow through every iteration, as in the
    official code; ``detach_inner`` stops them in all but the last."""
    if not (torch.is_tensor(u_hat) and u_hat.is_floating_point() and u_hat.dim() == 4
            and iterations >= 1 and mode in ROUTING_MODES):
        raise ValueError(f"dynamic_routing: expected float u_hat (B, N_in, N_out, D), "
                         f"iterations >= 1 and a mode in {ROUTING_MODES}; got "
                         f"{getattr(u_hat, 'shape', u_hat)!r}, {iterations}, {mode!r}")
    u = u_hat.transpose(1, 2)     # (B, N_out, N_in, D): sums over i are matmuls
    b, history = u.new_zeros(u.shape[:3]), []  # logits b_ij = 0: (B, N_out, N_in)
    for r in range(1, iterations + 1):
        last = r == iterations
        votes = u.detach() if detach_inner and not last else u  # the same, no gradient
        c = torch.softmax(b, dim=1)              # c_ij: softmax over the outputs j
        s = (c.unsqueeze(2) @ votes).squeeze(2)  # sum_i c_ij u_hat_j|i: (B, N_out, D)
        march = mode == "su-march" and not last  # Su's March: unit length until last
        v = F.normalize(s, dim=-1) if march else squash(s, k=squash_k)
        history.append(c.transpose(1, 2))        # (B, N_in, N_out)
        if not last:
            agreement = (votes @ v.unsqueeze(-1)).squeeze(-1)  # <u_hat_j|i, v_j>
            b = b + agreement if mode == "hinton" else agreement
    return (v, history) if return_history else v
