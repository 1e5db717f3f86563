"""Votes and routing as one autograd function that keeps little for its backward.

Core computes the votes û_{j|i} = W_ij u_i (``DenseCapsules``; ``SharedCapsules``: W_j u_i)
and routes them with ``capsedu.core.routing.dynamic_routing``; autograd then keeps û and
every iteration's tensors. ``votes_and_routing`` gives the same capsules and gradients but
keeps only u, W, each iteration's s_j (B x N_out x D, tiny) and logits b_ij (1/D of û each),
and recomputes û from u and W in the backward, which is derived by hand (chapter 8):

    forward, r = 1..R:  c^r = softmax_j(b^r),  s^r = Σ_i c^r û,  v^r = squash(s^r),
                        b^{r+1} = b^r + <û, v^r>       (Su: b^{r+1} = <û, v^r>)
    backward, r = R..1: gv^r = ∂L/∂v^R if r = R, else Σ_i g^{r+1} û
                        gs^r = squash'(s^r) gv^r,   gc^r = <û, gs^r>
                        g^r  = c^r (gc^r - Σ_j c^r gc^r) [+ g^{r+1}, the paper's update]
                        ∂L/∂û = Σ_r c^r gs^r + Σ_{r<R} g^{r+1} v^r

g^r is ∂L/∂b^r (Su's updates replace b, so they drop the + g^{r+1}; his March update
uses s/|s| for v^r, r < R). ∂L/∂û, made a few capsules at a time and never stored
whole, goes through the votes' product to ∂L/∂u and ∂L/∂W. Passes over û: the forward
writes it once and reads it 2R - 1 times, the backward writes it once and reads it
2(R - 1) times. Every mode of ``ROUTING_MODES`` is supported.
"""
from __future__ import annotations

import torch

from capsedu.core.routing import ROUTING_MODES

__all__ = ["votes_and_routing"]

EPS = 1e-8          # core's squash
NORM_EPS = 1e-12    # F.normalize's, Su's March update


def _at_least_float32(dtype):
    return torch.promote_types(dtype, torch.float32)


# û and its gradient are made a few input capsules at a time, a chunk small enough to
# stay in the cache: the product's output and its copy into routing's layout, and each
# chunk of ∂L/∂û between the product that makes it and the two that read it, never take
# a pass to memory.
CHUNK_BYTES = 4 << 20


def _votes(u, W):
    """û (B, N_out, N_in, D) of u (B, I, E) and W (I, J, D, E) or (J, D, E), both in the
    votes' dtype: j-major as core stores it, the order routing's sums read."""
    B, I, E = u.shape
    J, D = W.shape[-3:-1]
    out = u.new_empty(B, J, I, D)
    w = W.reshape(-1, J * D, E).transpose(1, 2)                 # (I or 1, E, J*D)
    ut = u.transpose(0, 1)                                      # (I, B, E)
    n = max(1, CHUNK_BYTES // (B * J * D * u.dtype.itemsize))
    for i in (slice(i, min(i + n, I)) for i in range(0, I, n)):
        y = ut[i] @ (w[i] if W.dim() == 4 else w)               # (n, B, J*D)
        out[:, :, i] = y.view(-1, B, J, D).permute(1, 2, 0, 3)
    return out


def _squash(s, k):
    """core's squash of a float32 s, with what its derivative needs: (v, |s|, |s|^2)."""
    n2 = s.pow(2).sum(-1, keepdim=True)
    n = torch.sqrt(n2 + EPS * EPS)
    return s * n / (k + n2), n, n2


def _squash_grad(s, gv, k):
    """∂L/∂s of v = s f(|s|^2), f = n / (k + |s|^2), n = sqrt(|s|^2 + eps^2):
    gs = f gv + 2 f'(|s|^2) <s, gv> s."""
    _, n, n2 = _squash(s, k)
    f = n / (k + n2)
    df = (k - n2 - 2 * EPS * EPS) / (2 * n * (k + n2) ** 2)
    return f * gv + 2 * df * (s * gv).sum(-1, keepdim=True) * s


def _unit(s):
    """F.normalize(s, dim=-1) and the length it divided by."""
    d = s.norm(dim=-1, keepdim=True).clamp_min(NORM_EPS)
    return s / d, d


def _unit_grad(s, gv):
    v, d = _unit(s)
    on = (s.norm(dim=-1, keepdim=True) > NORM_EPS).to(s.dtype)  # where the clamp is off
    return (gv - on * v * (v * gv).sum(-1, keepdim=True)) / d


def _route(u_hat, iterations, mode, k):
    """Forward routing of û (B, J, I, D): v^R, each s^r (float32) and each logits b^r, r >= 2."""
    t, acc = u_hat.dtype, _at_least_float32(u_hat.dtype)
    b = u_hat.new_zeros(u_hat.shape[:3], dtype=acc)               # (B, J, I)
    ss, bs = [], []
    for r in range(1, iterations + 1):
        c = torch.softmax(b, dim=1)
        s = (c.to(t).unsqueeze(2) @ u_hat).squeeze(2).to(acc)    # Σ_i c_ij û: (B, J, D)
        ss.append(s)
        last = r == iterations
        v = _unit(s)[0] if mode == "su-march" and not last else _squash(s, k)[0]
        if not last:
            a = (u_hat @ v.to(t).unsqueeze(-1)).squeeze(-1).to(acc)  # <û, v_j>: (B, J, I)
            b = b + a if mode == "hinton" else a
            bs.append(b)
    return v, ss, bs


def _route_backward(u_hat, gv_out, ss, bs, iterations, mode, k):
    """∂L/∂û from ∂L/∂v^R, differentiating through every iteration, as the terms of
    Σ_m alpha[..., m] (B, J, I) ⊗ x[:, :, m] (B, J, D): ∂L/∂û itself is never stored."""
    t, acc = u_hat.dtype, _at_least_float32(u_hat.dtype)
    alpha = u_hat.new_empty(*u_hat.shape[:3], 2 * iterations - 1)   # (B, J, I, M)
    vectors = []
    g_next = None                  # ∂L/∂b^{r+1}
    for r in range(iterations, 0, -1):
        s, last = ss[r - 1], r == iterations
        if last:
            gv = gv_out
        else:   # v^r feeds only the agreement <û, v^r> that makes b^{r+1}
            v = _unit(s)[0] if mode == "su-march" else _squash(s, k)[0]
            alpha[..., len(vectors)] = g_next
            vectors.append(v)
            gv = (g_next.to(t).unsqueeze(2) @ u_hat).squeeze(2).to(acc)  # Σ_i g û
        march = mode == "su-march" and not last
        gs = _unit_grad(s, gv) if march else _squash_grad(s, gv, k)
        if r > 1:
            c = torch.softmax(bs[r - 2], dim=1)
            alpha[..., len(vectors)] = c
            gc = (u_hat @ gs.to(t).unsqueeze(-1)).squeeze(-1).to(acc)  # <û, gs_j>
            g = c * (gc - (c * gc).sum(1, keepdim=True))               # softmax over j
            g_next = g + g_next if mode == "hinton" and not last else g
        else:
            alpha[..., len(vectors)] = 1.0 / u_hat.shape[1]            # c^1: uniform
        vectors.append(gs)
    return alpha, torch.stack(vectors, -2).to(t)                       # x: (B, J, M, D)


def _votes_backward(u, W, alpha, x, need_u, need_W):
    """∂L/∂u and ∂L/∂W from ∂L/∂û = alpha @ x, a few input capsules i at a time: each
    chunk of ∂L/∂û gives its rows of ∂L/∂u and, for a dense W, of ∂L/∂W whole. u and W
    come in the votes' dtype; ∂L/∂W is summed in float32 at least."""
    B, J, I, _ = alpha.shape
    D, E = W.shape[-2:]
    dense = W.dim() == 4
    w = W.reshape(-1, J * D, E)                # (I, J*D, E), or (1, J*D, E) shared
    ut = u.transpose(0, 1)                     # (I, B, E)
    gu = torch.empty_like(u) if need_u else None
    gW = w.new_zeros(w.shape, dtype=_at_least_float32(W.dtype)) if need_W else None
    n = max(1, CHUNK_BYTES // (B * J * D * u.dtype.itemsize))
    for i in (slice(i, min(i + n, I)) for i in range(0, I, n)):
        g_hat = alpha[:, :, i] @ x                                   # ∂L/∂û: (B, J, n, D)
        g_hat = g_hat.permute(2, 0, 1, 3).reshape(-1, B, J * D)     # (n, B, J*D), in cache
        if need_u:
            gu[:, i] = (g_hat @ (w[i] if dense else w)).transpose(0, 1)  # Σ_jd W ∂L/∂û
        if need_W and dense:
            gW[i] = g_hat.transpose(1, 2) @ ut[i]                   # Σ_b ∂L/∂û u_i^T
        elif need_W:   # W shared by every i: a small sum over the chunks
            gW[0] += (g_hat.transpose(1, 2) @ ut[i]).sum(0)
    return gu, None if gW is None else gW.view(W.shape)


def _amp_dtype(u, W):
    dev = u.device.type
    if torch.is_autocast_enabled(dev) and u.dtype != torch.float64:
        return torch.get_autocast_dtype(dev)
    return torch.promote_types(u.dtype, W.dtype)


class VotesAndRouting(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, W, iterations, mode, k):
        t = _amp_dtype(u, W)
        with torch.autocast(u.device.type, enabled=False):
            v, ss, bs = _route(_votes(u.to(t), W.to(t)), iterations, mode, k)
        ctx.save_for_backward(u, W, *ss, *bs)
        ctx.setup = (iterations, mode, k, t)
        return v.to(t)

    @staticmethod
    def backward(ctx, gv):
        iterations, mode, k, t = ctx.setup
        u, W, *rest = ctx.saved_tensors
        ss, bs = rest[:iterations], rest[iterations:]
        with torch.autocast(u.device.type, enabled=False):
            ut, Wt = u.to(t), W.to(t)
            terms = _route_backward(_votes(ut, Wt), gv.to(_at_least_float32(t)), ss, bs,
                                    iterations, mode, k)   # û is freed when this returns
            gu, gW = _votes_backward(ut, Wt, *terms, *ctx.needs_input_grad[:2])
            gu = None if gu is None else gu.to(u.dtype)
            gW = None if gW is None else gW.to(W.dtype)
        return gu, gW, None, None, None


def votes_and_routing(u: torch.Tensor, W: torch.Tensor, iterations: int = 3,
                      mode: str = "hinton", squash_k: float = 1.0) -> torch.Tensor:
    """Capsules v (B, N_out, D) of primary capsules u (B, N_in, E) voting through W
    (N_in, N_out, D, E), or W (N_out, D, E) shared by every input: what
    ``dynamic_routing(layer.predictions(u), iterations, mode, squash_k=squash_k)`` gives."""
    if mode not in ROUTING_MODES or iterations < 1 or u.dim() != 3 or W.dim() not in (3, 4):
        raise ValueError(f"votes_and_routing: expected u (B, N_in, E), W of 3 or 4 dims, "
                         f"iterations >= 1 and a mode in {ROUTING_MODES}; got "
                         f"{tuple(u.shape)}, {tuple(W.shape)}, {iterations}, {mode!r}")
    return VotesAndRouting.apply(u, W, int(iterations), mode, float(squash_k))
