"""What the widgets and their static twins show, computed (no drawing): squash curves, routing, perturbations.

``plots`` draws these; ``widgets`` (live, in a kernel) and ``static`` (kernel-free twins) both use them.
"""
from __future__ import annotations

import operator
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from capsedu.core.capsnet import CapsNet
from capsedu.core.checks import check_finite
from capsedu.core.routing import dynamic_routing
from capsedu.core.squashing import NORM_COMPRESSIONS, compress, safe_norm, squash

__all__ = ["SQUASH_VARIANTS", "PAPER_DELTAS", "squash_curves", "toy_predictions",
           "capsnet_predictions", "routing_frames", "perturb", "perturbation_grid", "check_capsnet",
           "capsnet_images", "check_deltas"]
SQUASH_VARIANTS = tuple(NORM_COMPRESSIONS)          # paper, su, tanh, exp, rational


PAPER_DELTAS = tuple(round(-0.25 + 0.05 * t, 2) for t in range(11))   # -0.25, -0.20, ..., 0.25


# ---------------------------------------------------------------- pure computations
def squash_curves(k: float = 1.0, names: Sequence[str] = SQUASH_VARIANTS, max_length: float = 4.0,
                  points: int = 161, example: Optional[float] = None) -> Dict[str, np.ndarray]:
    """Output length against input length for ``squash(., k)`` and the named variants.

    Returns {"n": input lengths, "squash": lengths of squash(s, k), name: lengths of compress(s, name)};
    with ``example``, the entries are the lengths for that single input length instead.
    """
    n = torch.tensor([float(example)]) if example is not None else torch.linspace(0, max_length, points)
    s = torch.stack([0.6 * n, -0.8 * n, 0 * n], dim=-1)                  # vectors of length n: (P, 3)
    out = {"n": n.numpy(), "squash": safe_norm(squash(s, k=k), eps=0.0).numpy()}
    for name in names:
        out[name] = safe_norm(compress(s, name), eps=0.0).numpy()
    return out


def toy_predictions(seed: int = 0, n_in: int = 12) -> torch.Tensor:
    """A 2-D toy layer: ``n_in`` lower capsules predict 3 parents; (1, n_in, 3, 2).

    Half the lower capsules agree about parent 1, a third about parent 2, the rest about
    parent 3; every other prediction is scattered at random.
    """
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[0.6, 0.3], [-0.4, 0.6], [0.2, -0.7]])           # (3, 2)
    owner = torch.tensor([0] * (n_in // 2) + [1] * (n_in // 3) + [2] * (n_in - n_in // 2 - n_in // 3))
    u_hat = 0.6 * torch.randn(n_in, 3, 2, generator=g)                      # disagreeing votes
    u_hat[torch.arange(n_in), owner] = centres[owner] + 0.1 * torch.randn(n_in, 2, generator=g)
    return u_hat.unsqueeze(0)                                                # (1, N_in, N_out, D)


def check_capsnet(model, who: str) -> None:
    """The explorers and twins read a CapsNet's conv1, primary and digit capsules and decoder."""
    if not isinstance(model, CapsNet):
        raise TypeError(f"{who}: expected a capsedu CapsNet (e.g. capsedu.training.pretrained.load_capsnet()), "
                        f"got {type(model).__name__}")


def capsnet_images(model, images, who: str) -> torch.Tensor:
    """``images`` (N, C, H, W), or one image (C, H, W), checked against the CapsNet's config -> (N, C, H, W)."""
    check_capsnet(model, who)
    c = model.config
    want = (c.in_channels, *c.image_size)
    if want != (1, 28, 28):
        raise ValueError(f"{who}: the explorers draw 28x28 grey digits; this CapsNet takes images {want}")
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"{who}: expected a tensor of images (N, {', '.join(map(str, want))}), "
                        f"got {type(images).__name__}")
    x = images.unsqueeze(0) if images.dim() == 3 else images
    if x.dim() != 4 or tuple(x.shape[1:]) != want or len(x) == 0:
        raise ValueError(f"{who}: expected images of shape (N, {', '.join(map(str, want))}) with N >= 1, "
                         f"or one image {want}, got {tuple(images.shape)}")
    check_finite(x.float(), f"{who}: images")
    return x.float()


@torch.no_grad()
def capsnet_predictions(model, image: torch.Tensor):
    """One image (1, 28, 28) -> (u_hat (1, 1152, 10, 16), primary lengths (1152,), the image (28, 28))."""
    x = capsnet_images(model, image, "capsnet_predictions")
    if len(x) != 1:
        raise ValueError(f"capsnet_predictions: expected one image, got a batch of {len(x)}")
    x = x.to(next(model.parameters()).device)
    primary = model.primary(F.relu(model.conv1(x)))                          # (1, 1152, 8)
    return model.digits.predictions(primary).cpu(), safe_norm(primary[0]).cpu(), x[0, 0].cpu()


@torch.no_grad()
def routing_frames(u_hat: torch.Tensor, iterations: int = 3, mode: str = "hinton",
                   squash_k: float = 1.0) -> List[Dict[str, torch.Tensor]]:
    """Per iteration t = 1..r of ``dynamic_routing`` on example 0: {"c": (N_in, N_out), "s", "v": (N_out, D)}.

    ``c`` is the history that ``dynamic_routing(..., return_history=True)`` returns; ``s`` and
    ``v`` are recomputed from it (line 5 and 6 of Procedure 1), so the last ``v`` is the output.
    """
    _, history = dynamic_routing(u_hat[:1], iterations, mode, return_history=True, squash_k=squash_k)
    frames = []
    for c in history:
        s = torch.einsum("ij,ijd->jd", c[0], u_hat[0])                     # s_j = sum_i c_ij u_hat_j|i
        frames.append({"c": c[0], "s": s, "v": squash(s, k=squash_k)})
    return frames


def _check_capsule_choice(caps: torch.Tensor, label, dim) -> None:
    """``label`` indexes a digit capsule of ``caps`` (1, C, D) and ``dim`` (if given) one of its D numbers."""
    C, D = caps.shape[-2:]
    for value, name, size in ((label, "label", C), (dim, "dim", D)):
        if value is None and name == "dim":
            continue
        try:
            index = operator.index(value)  # ints, numpy ints, 0-d integer tensors
        except TypeError:
            index = None
        if isinstance(value, bool) or index is None or not 0 <= index < size:
            raise ValueError(f"{name} must be an int in [0, {size - 1}], got {value!r}")


def check_deltas(deltas, who: str):
    """A non-empty sequence of finite numbers (the perturbation values), returned as a tuple of floats."""
    try:
        values = tuple(float(v) for v in deltas)
    except (TypeError, ValueError):
        raise TypeError(f"{who}: deltas must be a sequence of numbers, got {deltas!r}") from None
    if not values or not all(np.isfinite(values)):
        raise ValueError(f"{who}: deltas must be a non-empty sequence of finite numbers, got {deltas!r}")
    return values


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _decode(model, capsules: torch.Tensor, label: int) -> torch.Tensor:
    """Decoder output (B, 28, 28) for digit capsules (B, 10, 16), masked by ``label``."""
    mask = F.one_hot(torch.full((capsules.shape[0],), int(label)), capsules.shape[1]).to(capsules.device)
    return model.decoder(capsules, mask)[:, 0]


@torch.no_grad()
def perturb(model, capsules: torch.Tensor, label: int, dim=None, delta=0.0) -> torch.Tensor:
    """Reconstruction (28, 28) after adding ``delta`` to dimension ``dim`` of capsule ``label``.

    ``capsules``: (10, 16) or (1, 10, 16). ``dim=None`` with ``delta`` a 16-vector adds the
    whole vector (the live widget's 16 sliders at once).
    """
    caps = capsules.reshape(1, *capsules.shape[-2:]).to(_device(model), copy=True)   # (1, 10, 16)
    _check_capsule_choice(caps, label, dim)
    if dim is None:
        caps[0, label] += torch.as_tensor(delta, dtype=caps.dtype, device=caps.device)
    else:
        caps[0, label, dim] += delta
    return _decode(model, caps, label)[0].cpu()


@torch.no_grad()
def perturbation_grid(model, capsules: torch.Tensor, label: int,
                      deltas: Sequence[float] = PAPER_DELTAS) -> torch.Tensor:
    """The paper's Figure 4 for one digit: reconstructions (16, len(deltas), 28, 28), one decoder call."""
    caps = capsules.reshape(1, *capsules.shape[-2:]).to(_device(model))        # (1, 10, 16)
    _check_capsule_choice(caps, label, None)
    deltas = check_deltas(deltas, "perturbation_grid")
    D, V = caps.shape[-1], len(deltas)
    batch = caps.repeat(D * V, 1, 1)                                          # (D*V, 10, 16)
    rows = torch.arange(D).repeat_interleave(V)
    batch[torch.arange(D * V), label, rows] += torch.tensor(deltas, dtype=caps.dtype).repeat(D).to(caps.device)
    recon = _decode(model, batch, label)                                      # (D*V, H, W)
    return recon.reshape(D, V, *recon.shape[-2:]).cpu()
