"""Votes and routing as one autograd function that never makes the votes.

Core computes the votes û_{j|i} = W_ij u_i (``DenseCapsules``; ``SharedCapsules``: W_j u_i)
and routes them with ``capsedu.core.routing.dynamic_routing``; autograd then keeps û and
every iteration's tensors. ``votes_and_routing`` gives the same capsules and gradients
without ever making û: routing only takes sums over û, and û is linear in u and in W, so
each sum is a sum over u and W (chapter 8 derives it):

    s_j = Σ_i c_ij û_j|i = Σ_{i,e} (c_ij u_ie) W_ij[:, e]    a matrix product of c*u with W
    <û_j|i, v_j> = Σ_e u_ie (W_ij^T v_j)_e                   a matrix product W^T v, then Σ_e

so routing's passes read c*u or W^T v (N_out x E x N_in x B: E/D of û's bytes, half for
the paper's 8-D and 16-D capsules), and the products are whole-batch matrix products.
The backward, r = R..1 (g^r = ∂L/∂b^r; Su's updates replace b, so they drop the + g^{r+1}):

    gv^r = ∂L/∂v^R if r = R, else Σ_{i,e} (g^{r+1} u)_ie W_ij[:, e]     (as s, g for c)
    gs^r = squash'(s^r) gv^r,   gc^r = Σ_e u_ie (W_ij^T gs^r)_e        (as the agreement)
    g^r  = c^r (gc^r - Σ_j c^r gc^r) [+ g^{r+1}, the paper's update]
    ∂L/∂u_i  = Σ_r Σ_j c^r_ij W_ij^T gs^r_j + Σ_{r<R} Σ_j g^{r+1}_ij W_ij^T v^r_j
    ∂L/∂W_ij = Σ_b [Σ_r c^r_ij gs^r_j + Σ_{r<R} g^{r+1}_ij v^r_j] u_i^T

It keeps u, W, each iteration's s_j (B x N_out x D) and couplings c_ij (1/(D E) of û).
Every mode of ``ROUTING_MODES`` is supported. Inside, tensors are laid out (J, E, I, B)
(j outermost for the products, the batch innermost for the elementwise passes), u as
(E, I, B) and W as Wt (J, E*I, D).
"""
from __future__ import annotations

import functools
import warnings
from types import SimpleNamespace

import torch

from capsedu.core.routing import ROUTING_MODES

__all__ = ["votes_and_routing", "weight_layout"]

EPS = 1e-8          # core's squash
NORM_EPS = 1e-12    # F.normalize's, Su's March update


def _at_least_float32(dtype):
    return torch.promote_types(dtype, torch.float32)


def _total(xs):
    return sum(xs[1:], xs[0])


def _sum(x, dim=0, dtype=None):
    """x summed over a short dim (the 10 outputs j, the 8 input dims e) as one elementwise
    sum of its slices: the compiler's CPU kernels for these sums were 5-200x slower."""
    return _total([a.to(dtype) for a in x.unbind(dim)])


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
    """F.normalize(s, dim=-1)."""
    return s / s.norm(dim=-1, keepdim=True).clamp_min(NORM_EPS)


def _unit_grad(s, gv):
    n = s.norm(dim=-1, keepdim=True)
    v, on = s / n.clamp_min(NORM_EPS), (n > NORM_EPS).to(s.dtype)   # on: the clamp is off
    return (gv - on * v * (v * gv).sum(-1, keepdim=True)) / n.clamp_min(NORM_EPS)


def _v(s, mode, k, last):
    return _unit(s) if mode == "su-march" and not last else _squash(s, k)[0]


# The elementwise passes over (J, E, I, B) tensors. Eager, each makes temporaries;
# compiled (``compile=True``), each is one kernel that reads or writes such a tensor once.
def _times_u(a, u):
    """a_ji u_ie (J, E, I, B) of a (J, I, B) and u (E, I, B)."""
    return a.to(u.dtype).unsqueeze(1) * u


def _dot_u(w, u):
    """Σ_e w_jie u_ie (J, I, B), float32, of w (J, E, I, B) and u (E, I, B)."""
    return _sum(w * u, 1, _at_least_float32(u.dtype))


def _sum_j_times(a, w, gu):
    """gu + Σ_j a_ji w_jie (E, I, B), float32, of a (J, I, B) and w (J, E, I, B)."""
    return gu + _sum(a.to(w.dtype).unsqueeze(1) * w, 0, _at_least_float32(w.dtype))


def _softmax_back(c, w, u, gu, g_next):
    """gu + Σ_j c_ji w_jie (E, I, B) and ∂L/∂b = c (gc - Σ_j c gc) [+ g_next] (J, I, B),
    float32, of gc = Σ_e w_jie u_ie: softmax's backward in the pass over w (J, E, I, B).
    Written per (i, b) slice, one kernel compiled; as sums over j and over e of whole tensors
    it compiled to two kernels and eager ops, 1.9x the time (thread CPU, batch 100, bf16)."""
    acc = _at_least_float32(w.dtype)
    ws, us, cs = [x.unbind(0) for x in w.unbind(0)], u.unbind(0), c.unbind(0)
    gc = [_total([(x * y).to(acc) for x, y in zip(wj, us)]) for wj in ws]
    gu = [g + _total([(cj.to(w.dtype) * wj[e]).to(acc) for cj, wj in zip(cs, ws)])
          for e, g in enumerate(gu.unbind(0))]
    mean = _total([cj * gj for cj, gj in zip(cs, gc)])
    g = [cj * (gj - mean) for cj, gj in zip(cs, gc)]
    if g_next is not None:
        g = [a + b for a, b in zip(g, g_next.unbind(0))]
    return torch.stack(gu), torch.stack(g)


def _sum_j(w, gu):
    return gu + _sum(w, 0, _at_least_float32(w.dtype))


def _sum_all(*xs):
    """Σ xs in float32 at least, one pass: an iteration's weight-gradient products at once."""
    return _total([x.to(_at_least_float32(x.dtype)) for x in xs])


PASSES = (_times_u, _dot_u, _sum_j, _sum_j_times, _softmax_back, _sum_all)


def _times_W(Wt, x):
    """Σ_{i,e} x_jie W_ij[:, e] (J, B, D) of x (J, E, I, B)."""
    return torch.bmm(Wt.transpose(1, 2), x.flatten(1, 2)).transpose(1, 2)


def _W_times(Wt, y, u):
    """W_ij^T y_j (J, E, I, B) of y (J, B, D)."""
    return torch.bmm(Wt, y.transpose(1, 2)).view(len(Wt), *u.shape)


def _route(ops, u, Wt, iterations, mode, k):
    """v^R (J, B, D), each s^r (float32) and each c^r, r >= 2 (J, I, B), of u (E, I, B)."""
    acc = _at_least_float32(u.dtype)
    ss, cs, b = [], [], None
    for r in range(1, iterations + 1):
        if r == 1:   # c^1 = 1/J for every j: one product for all j
            s = torch.einsum("kb,jkd->jbd", u.flatten(0, 1), Wt) / len(Wt)
        else:
            cs.append(torch.softmax(b, dim=0))
            s = _times_W(Wt, ops._times_u(cs[-1], u))                  # Σ_i c_ij û_j|i
        ss.append(s.to(acc))
        last = r == iterations
        v = _v(ss[-1], mode, k, last)
        if not last:
            a = ops._dot_u(_W_times(Wt, v.to(u.dtype), u), u)           # <û_j|i, v_j>
            b = b + a if mode == "hinton" and b is not None else a
    return v, ss, cs


def _route_backward(ops, u, Wt, gv, ss, cs, iterations, mode, k):
    """∂L/∂u (E, I, B) and ∂L/∂W as Wt, float32 at least, from gv = ∂L/∂v^R
    (J, B, D)."""
    t, acc, J = u.dtype, _at_least_float32(u.dtype), len(Wt)
    gu = u.new_zeros(u.shape, dtype=acc)
    gW = []                                # products in t, summed each iteration
    g_next = None                                      # ∂L/∂b^{r+1}
    for r in range(iterations, 0, -1):
        s, last = ss[r - 1], r == iterations
        if not last:   # v^r feeds only the agreement that makes b^{r+1}
            v, gx = _v(s, mode, k, False).to(t), ops._times_u(g_next, u)
            gv = _times_W(Wt, gx).to(acc)
            gW.append(torch.bmm(gx.flatten(1, 2), v))
            del gx      # each (J, E, I, B) tensor freed once read: the peak holds two
            gu = ops._sum_j_times(g_next, _W_times(Wt, v, u), gu)
        gs = (_unit_grad(s, gv) if mode == "su-march" and not last
              else _squash_grad(s, gv, k))
        if r > 1:
            c, gs = cs[r - 2], gs.to(t)
            hinton = g_next if mode == "hinton" and not last else None
            gu, g_next = ops._softmax_back(c, _W_times(Wt, gs, u), u, gu, hinton)
            gW.append(torch.bmm(ops._times_u(c, u).flatten(1, 2), gs))
        else:          # c^1 = 1/J
            gs = (gs / J).to(t)
            gu = ops._sum_j(_W_times(Wt, gs, u), gu)
            gW.append(torch.einsum("kb,jbd->jkd", u.flatten(0, 1), gs))
        if len(gW) > 1:
            gW = [ops._sum_all(*gW)]
    return gu, gW[0].to(acc)


def dispatch_mode_active() -> bool:
    """True inside a torch dispatch mode (e.g. FlopCounterMode), which torch.compile does not support."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    return _get_current_dispatch_mode() is not None


# Each shape, dtype, mode, iteration count and grad mode is its own graph; dynamo's default
# of 8 per function is too few for a notebook that compares them (raised only while we run).
RECOMPILE_LIMIT = 64
_compile_failed = False


def compiled_or_eager(fn, **options):
    """``fn`` run as ``torch.compile(fn, **options)`` (compiled at the first call); eager inside a
    dispatch mode, and for good, with one warning, once a compilation failed (no C++ compiler,
    an unsupported platform)."""
    compiled = None

    @functools.wraps(fn)
    def run(*args):
        nonlocal compiled
        global _compile_failed
        if not _compile_failed and not dispatch_mode_active():
            compiled = compiled or torch.compile(fn, **options)
            limit = max(RECOMPILE_LIMIT, torch._dynamo.config.recompile_limit)
            try:
                with torch._dynamo.config.patch(recompile_limit=limit):
                    return compiled(*args)
            except Exception as err:  # compilation problems surface at the first call
                _compile_failed = True
                warnings.warn(f"capsedu.speed: torch.compile failed ({type(err).__name__}: {err});"
                              " routing runs eagerly instead", RuntimeWarning, stacklevel=2)
        return fn(*args)
    return run


@functools.lru_cache(maxsize=None)
def _passes(compile):
    """PASSES as attributes, each compiled (``compiled_or_eager``) or eager."""
    return SimpleNamespace(**{fn.__name__: compiled_or_eager(fn) if compile else fn for fn in PASSES})


def _inside(u, W):
    """u (B, I, E) as (E, I, B); W (I, J, D, E), or (J, D, E) shared by every i, as (J, E*I, D)."""
    n_in = u.shape[1]
    W = W.expand(n_in, *W.shape) if W.dim() == 3 else W
    J, D, E = W.shape[1:]
    return u.permute(2, 1, 0).contiguous(), W.permute(1, 3, 0, 2).reshape(J, E * n_in, D)


def weight_layout(W: torch.Tensor) -> torch.Tensor:
    """W (N_in, N_out, D, E), same shape and values, stored in the order ``_inside`` reads it
    (N_out, E, N_in, D): its layout copy and its gradient's become views."""
    return W.permute(1, 3, 0, 2).contiguous().permute(2, 0, 3, 1) if W.dim() == 4 else W


def _amp_dtype(u, W):
    dev = u.device.type
    if torch.is_autocast_enabled(dev) and u.dtype != torch.float64:
        return torch.get_autocast_dtype(dev)
    return torch.promote_types(u.dtype, W.dtype)


class VotesAndRouting(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, W, iterations, mode, k, compile):
        t = _amp_dtype(u, W)
        with torch.autocast(u.device.type, enabled=False):
            ut, Wt = _inside(u.to(t), W.to(t))
            v, ss, cs = _route(_passes(compile), ut, Wt, iterations, mode, k)
        ctx.save_for_backward(ut, Wt, *ss, *cs)      # u and W as laid out, as small as u, W
        ctx.setup = (iterations, mode, k, compile, u.dtype, W.dtype, W.shape)
        return v.transpose(0, 1).to(t)

    @staticmethod
    def backward(ctx, gv):
        iterations, mode, k, compile, u_dtype, W_dtype, W_shape = ctx.setup
        ut, Wt, *rest = ctx.saved_tensors
        with torch.autocast(ut.device.type, enabled=False):
            gu, gW = _route_backward(_passes(compile), ut, Wt,
                                     gv.transpose(0, 1).to(_at_least_float32(ut.dtype)),
                                     rest[:iterations], rest[iterations:], iterations, mode, k)
        (E, I, _), (J, D) = ut.shape, W_shape[-3:-1]
        gW = gW.view(J, E, I, D).permute(2, 0, 3, 1)                     # (I, J, D, E)
        gW = gW.sum(0) if len(W_shape) == 3 else gW
        return gu.permute(2, 1, 0).to(u_dtype), gW.to(W_dtype), None, None, None, None


def votes_and_routing(u: torch.Tensor, W: torch.Tensor, iterations: int = 3,
                      mode: str = "hinton", squash_k: float = 1.0,
                      compile: bool = False) -> torch.Tensor:
    """Capsules v (B, N_out, D) of primary capsules u (B, N_in, E) voting through W
    (N_in, N_out, D, E), or W (N_out, D, E) shared by every input: what
    ``dynamic_routing(layer.predictions(u), iterations, mode, squash_k=squash_k)`` gives.
    ``compile=True`` runs its elementwise passes as ``torch.compile`` kernels (the first call
    compiles, seconds; if compilation fails it warns once and runs them eagerly)."""
    if mode not in ROUTING_MODES or iterations < 1 or u.dim() != 3 or W.dim() not in (3, 4):
        raise ValueError(f"votes_and_routing: expected u (B, N_in, E), W of 3 or 4 dims, "
                         f"iterations >= 1 and a mode in {ROUTING_MODES}; got "
                         f"{tuple(u.shape)}, {tuple(W.shape)}, {iterations}, {mode!r}")
    return VotesAndRouting.apply(u, W, int(iterations), mode, float(squash_k), bool(compile))
