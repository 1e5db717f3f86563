"""EM routing between matrix capsules (Hinton, Sabour & Frosst, ICLR 2018, Procedure 1).

Indices: ``i`` input (lower) capsule, ``j`` output (upper) capsule, ``h`` one of the
``P = 16`` entries of a 4x4 pose matrix.

- Each input capsule has a pose ``M_i`` (4x4) and an activation ``a_i`` in (0, 1); its vote
  for output ``j`` is ``V_ij = M_i W_ij``, flattened to ``P`` numbers.
- Each output capsule is a Gaussian cluster of the votes it receives: a mean ``mu_j``
  (its pose), a variance ``sigma_j^2`` per entry, and an activation ``a_j``.
- **M step** (``m_step``): with responsibilities ``R_ij``, weight every vote by
  ``R_ij a_i``, fit ``mu_j`` and ``sigma_j^2``, and switch ``a_j`` on when the cluster is
  tight: ``a_j = logistic(lambda (beta_a - cost_j))``, ``cost_j = sum_h (beta_u + log sigma_jh) r_j``
  with ``r_j`` the amount of data assigned to ``j`` (we standardise the costs over ``j``).
- **E step** (``e_step``): ``R_ij`` is proportional to ``a_j N(V_ij; mu_j, sigma_j^2)``,
  normalised over the outputs ``j``, so each input again spreads one unit over the outputs.
"""
from __future__ import annotations

import math
from typing import List, Tuple

import torch
import torch.nn.functional as F

__all__ = ["em_routing", "m_step", "e_step", "inverse_temperature", "em_cluster_toy", "FINAL_LAMBDA", "STD_EPS"]

# Hinton (OpenReview reply): lambda_t = final_lambda * (1 - 0.95^t), t = 1..T, final_lambda = 0.01.
# That 0.01 goes with raw costs, whose size grows with the number of votes an output gets.
# We standardise the costs over the outputs (see m_step), which makes them O(1) in every
# layer; the same schedule then needs a larger final_lambda. We tried 3 and 10 in a short run
# (2,000 sample digits, 2 epochs) and kept 3, which learned faster: lambda = 0.15, 0.29, 0.43.
FINAL_LAMBDA = 3.0
STD_EPS = 1e-6   # added to the costs' variance: finite (and differentiable) when all outputs cost the same


def inverse_temperature(t: int, final_lambda: float = FINAL_LAMBDA) -> float:
    """lambda for iteration t = 1, 2, ...: rises towards ``final_lambda`` as routing proceeds."""
    return final_lambda * (1.0 - 0.95 ** t)


def _check_em_args(votes, activations, beta_u, beta_a, iterations) -> None:
    if not isinstance(votes, torch.Tensor) or votes.dim() != 4 or not votes.is_floating_point():
        got = tuple(votes.shape) if isinstance(votes, torch.Tensor) else type(votes).__name__
        raise ValueError(f"votes must be a float tensor of shape (batch, n_in, n_out, pose), got {got}")
    B, n_in, n_out, _ = votes.shape
    if not isinstance(activations, torch.Tensor) or tuple(activations.shape) != (B, n_in):
        got = tuple(activations.shape) if isinstance(activations, torch.Tensor) else type(activations).__name__
        raise ValueError(f"activations must have shape (batch, n_in) = {(B, n_in)}, got {got}")
    for name, beta in (("beta_u", beta_u), ("beta_a", beta_a)):
        if not isinstance(beta, torch.Tensor) or beta.numel() not in (1, n_out):
            raise ValueError(f"{name} must be a tensor with 1 or n_out = {n_out} entries")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be a positive int, got {iterations!r}")


def m_step(R: torch.Tensor, activations: torch.Tensor, u: torch.Tensor,
           beta_u: torch.Tensor, beta_a: torch.Tensor, lam: float, eps: float = 1e-6,
           u_sq=None, standardise: bool = True):
    """Fit one Gaussian per output to the votes; returns (mu, var, logit of a_j).

    Works on the (B, N_out, N_in) order, as ``dynamic_routing`` does: ``R`` (B, N_out,
    N_in), ``activations`` (B, N_in), votes ``u`` (B, N_out, N_in, P) (``u_sq``: ``u **
    2`` if at hand); returns ``mu``, ``var`` (B, N_out, P) and the logit ``lambda
    (beta_a - cost_j)`` (B, N_out). ``standardise=False`` keeps the paper's raw costs.
    """
    P = u.shape[-1]
    u_sq = u * u if u_sq is None else u_sq
    weight = R * activations.unsqueeze(1)  # R_ij a_i: (B, N_out, N_in)
    r = weight.sum(dim=2)  # data assigned to j: (B, N_out)
    # sums to ~1 over i: (B, N_out, 1, N_in)
    share = (weight / (r.unsqueeze(-1) + eps)).unsqueeze(2)
    mu = (share @ u).squeeze(2)  # sum_i share_ij V_ij: (B, N_out, P)
    # sum_i share_ij (V_ij - mu_j)^2 = E[V^2] - mu^2: two matrix products, no (B, N_out,
    # N_in, P) temporary
    var = ((share @ u_sq).squeeze(2) - mu * mu).clamp(min=0) + eps  # (B, N_out, P)
    # sum_h (beta_u + log sigma_jh) r_j: (B, N_out)
    cost = (P * beta_u + 0.5 * torch.log(var).sum(dim=-1)) * r
    if not standardise:
        return mu, var, lam * (beta_a - cost)
    # Our choice: standardise the costs over the outputs j, so that a_j says how cheap
    # j's cluster is *compared with the other outputs'*. Raw costs saturate the logistic
    # at the start of training (all a_j near 1 or 0) and learn far more slowly on our
    # small network.
    centred = cost - cost.mean(dim=1, keepdim=True)  # (B, N_out)
    # mean 0, std 1 over j
    cost = centred / torch.sqrt(centred.pow(2).mean(dim=1, keepdim=True) + STD_EPS)
    return mu, var, lam * (beta_a - cost)  # logit of a_j: (B, N_out)


def e_step(u: torch.Tensor, mu: torch.Tensor, var: torch.Tensor, logit_a: torch.Tensor,
           u_sq=None) -> torch.Tensor:
    """Responsibilities R (B, N_out, N_in): a_j times the Gaussian density of V_ij,
    normalised over j."""
    P = u.shape[-1]
    u_sq = u * u if u_sq is None else u_sq
    inv = 1.0 / var                              # (B, N_out, P)
    # sum_h (V_ijh - mu_jh)^2 / var_jh, expanded into matrix-vector products over h
    z = ((u_sq @ inv.unsqueeze(-1)) - 2 * (u @ (mu * inv).unsqueeze(-1))).squeeze(-1) \
        + (mu * mu * inv).sum(-1, keepdim=True)  # (B, N_out, N_in)
    # log p_ij: (B, N_out, N_in)
    log_det = torch.log(var).sum(-1, keepdim=True)
    log_p = -0.5 * (z + log_det + P * math.log(2 * math.pi))
    # over output capsules j
    return torch.softmax(F.logsigmoid(logit_a).unsqueeze(-1) + log_p, dim=1)


def em_routing(votes: torch.Tensor, activations: torch.Tensor, beta_u: torch.Tensor,
               beta_a: torch.Tensor, iterations: int = 3,
               final_lambda: float = FINAL_LAMBDA, return_history: bool = False,
               eps: float = 1e-6, standardise: bool = True):
    """Route votes (B, N_in, N_out, P) of inputs with activations (B, N_in) to output
    capsules.

    Returns ``(poses, a)``: poses (B, N_out, P) (the means ``mu_j``) and activations
    (B, N_out), or ``(poses, a, history)`` where ``history[t]`` is the ``R``
    (B, N_in, N_out) used by the M step of iteration ``t + 1``; ``R`` starts uniform,
    1 / N_out. The last iteration ends with its M step (an E step after it would be
    unused). Loops over iterations only."""
    _check_em_args(votes, activations, beta_u, beta_a, iterations)
    u = votes.transpose(1, 2).contiguous()         # (B, N_out, N_in, P)
    u_sq = u * u                                   # used by every step
    B, n_out, n_in, _ = u.shape
    R = u.new_full((B, n_out, n_in), 1.0 / n_out)  # (B, N_out, N_in)
    history: List[torch.Tensor] = []
    for t in range(1, iterations + 1):
        if return_history:
            history.append(R.transpose(1, 2))      # (B, N_in, N_out)
        lam = inverse_temperature(t, final_lambda)
        mu, var, logit_a = m_step(R, activations, u, beta_u.view(-1), beta_a.view(-1),
                                  lam, eps, u_sq, standardise)
        if t < iterations:
            R = e_step(u, mu, var, logit_a, u_sq)  # (B, N_out, N_in)
    a = torch.sigmoid(logit_a)                     # (B, N_out)
    return (mu, a, history) if return_history else (mu, a)


def em_cluster_toy(u_hat: torch.Tensor, iterations: int = 5, beta_u: float = 0.0, beta_a: float = 0.0,
                   final_lambda: float = FINAL_LAMBDA) -> Tuple[List[torch.Tensor], torch.Tensor, torch.Tensor]:
    """EM routing of plain vectors (B, N_in, N_out, D) with all input activations 1 (the book's toy).

    Returns (history of R, output activations (B, N_out), poses (B, N_out, D)).
    """
    ones = u_hat.new_ones(u_hat.shape[:2])                          # (B, N_in)
    mu, a, history = em_routing(u_hat, ones, torch.tensor(beta_u), torch.tensor(beta_a), iterations,
                                final_lambda, return_history=True)
    return history, a, mu
