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


# û and its gradient are made a few images at a time, a chunk small enough to stay in the
# cache: the einsum's own output and its copy into routing's layout, and each chunk of ∂L/∂û
# between the product that makes it and the two that read it, never take a pass to memory.
CHUNK_BYTES = 4 << 20


def _chunks(u, W, dtype):
    """Slices of the batch, each image's votes u.shape[1] x J x D numbers of ``dtype``."""
    B, I = u.shape[:2]
    n = max(1, CHUNK_BYTES // (I * W.shape[-3] * W.shape[-2] * dtype.itemsize))
    return [slice(b, min(b + n, B)) for b in range(0, B, n)]


def _votes(u, W, dtype):
    """û (B, N_out, N_in, D), j-major as core stores it: the order routing's sums read."""
    spec = "ijde,bie->bjid" if W.dim() == 4 else "jde,bie->bjid"
    B, I = u.shape[:2]
    J, D = W.shape[-3:-1]
    out = torch.empty(B, J, I, D, dtype=dtype, device=u.device)
    W = W.to(dtype)
    for c in _chunks(u, W, dtype):
        out[c] = torch.einsum(spec, W, u[c].to(dtype))
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
    Σ_m coeffs[m] (B, J, I) ⊗ vectors[m] (B, J, D): ∂L/∂û itself is never stored."""
    t, acc = u_hat.dtype, _at_least_float32(u_hat.dtype)
    coeffs, vectors = [], []       # ∂L/∂û = Σ coeffs[m] (B,J,I) ⊗ vectors[m] (B,J,D)
    g_next = None                  # ∂L/∂b^{r+1}
    for r in range(iterations, 0, -1):
        s, last = ss[r - 1], r == iterations
        if last:
            gv = gv_out
        else:   # v^r feeds only the agreement <û, v^r> that makes b^{r+1}
            v = _unit(s)[0] if mode == "su-march" else _squash(s, k)[0]
            coeffs.append(g_next)
            vectors.append(v)
            gv = (g_next.to(t).unsqueeze(2) @ u_hat).squeeze(2).to(acc)  # Σ_i g û
        gs = _unit_grad(s, gv) if mode == "su-march" and not last else _squash_grad(s, gv, k)
        c = torch.softmax(bs[r - 2], dim=1) if r > 1 else torch.full_like(
            u_hat[..., 0], 1.0 / u_hat.shape[1], dtype=acc)
        coeffs.append(c)
        vectors.append(gs)
        if r > 1:
            gc = (u_hat @ gs.to(t).unsqueeze(-1)).squeeze(-1).to(acc)    # <û, gs_j>
            g = c * (gc - (c * gc).sum(1, keepdim=True))                 # softmax over j
            g_next = g + g_next if mode == "hinton" and not last else g
    return coeffs, vectors


def _votes_backward(u, W, coeffs, vectors, t, need_u, need_W):
    """∂L/∂u and ∂L/∂W from ∂L/∂û = Σ coeffs[m] ⊗ vectors[m], a few input capsules i at a
    time: each chunk of ∂L/∂û gives its rows of ∂L/∂u and, for a dense W, of ∂L/∂W whole."""
    dense = W.dim() == 4
    B, I = u.shape[:2]
    Wt = W.to(t)
    x = torch.stack(vectors, -2).to(t)                           # (B, J, M, D)
    gu = torch.empty_like(u) if need_u else None
    gW = torch.zeros_like(W, dtype=_at_least_float32(W.dtype)) if need_W else None
    n = max(1, CHUNK_BYTES // (B * W.shape[-3] * W.shape[-2] * t.itemsize))
    for i in (slice(i, min(i + n, I)) for i in range(0, I, n)):
        alpha = torch.stack([a[:, :, i] for a in coeffs], -1).to(t)  # (B, J, n, M)
        g_hat = alpha @ x                                            # ∂L/∂û for these i
        if need_u:
            gu[:, i] = torch.einsum("bjid,ijde->bie" if dense else "bjid,jde->bie", g_hat,
                                    Wt[i] if dense else Wt)
        if need_W and dense:
            gW[i] = torch.einsum("bjid,bie->ijde", g_hat, u[:, i].to(t))
        elif need_W:   # W shared by every i: a small sum over the chunks
            gW += torch.einsum("bjid,bie->jde", g_hat, u[:, i].to(t))
    return gu, None if gW is None else gW.to(W.dtype)


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
            v, ss, bs = _route(_votes(u, W, t), iterations, mode, k)
        ctx.save_for_backward(u, W, *ss, *bs)
        ctx.setup = (iterations, mode, k, t)
        return v.to(t)

    @staticmethod
    def backward(ctx, gv):
        iterations, mode, k, t = ctx.setup
        u, W, *rest = ctx.saved_tensors
        ss, bs = rest[:iterations], rest[iterations:]
        with torch.autocast(u.device.type, enabled=False):
            terms = _route_backward(_votes(u, W, t), gv.to(_at_least_float32(t)), ss, bs,
                                    iterations, mode, k)   # û is freed when this returns
            gu, gW = _votes_backward(u, W, *terms, t, *ctx.needs_input_grad[:2])
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
