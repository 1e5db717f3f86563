"""Numbers that used to come out wrong without a word: huge and tiny squash inputs, NaN images,
non-finite hyperparameters and weights. Each case is either exact or one clear error."""
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from capsedu.core.capsnet import CapsNet
from capsedu.core.squashing import squash
from capsedu.training.evaluation import evaluate, predict_lengths
from capsedu.training.loop import fit

TINY = dict(conv_channels=8, primary_types=4, primary_dim=4, digit_dim=8, decoder_hidden=(32,))
FAST = dict(device="cpu", progress=False)
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def noise(n=32, seed=1):
    g = torch.Generator().manual_seed(seed)
    return SimpleNamespace(x_train=torch.rand(n, 1, 28, 28, generator=g), y_train=torch.randint(0, 10, (n,), generator=g),
                           x_test=torch.rand(8, 1, 28, 28, generator=g), y_test=torch.randint(0, 10, (8,), generator=g))


# ---------------------------------------------------------------- squash
@pytest.mark.parametrize("dtype", DTYPES)
def test_squash_length_below_one_with_finite_gradient_at_every_scale(dtype):
    """From the smallest normal number to the dtype's largest, in 16-D vectors of random direction."""
    info = torch.finfo(dtype)
    g = torch.Generator().manual_seed(0)
    directions = torch.randn(64, 16, generator=g, dtype=torch.float64)
    directions = directions / directions.abs().amax(dim=-1, keepdim=True)        # max |entry| = 1
    scales = torch.logspace(math.log10(info.tiny), math.log10(info.max), 64, dtype=torch.float64).clamp(max=info.max)
    s = (directions * scales[:, None]).to(dtype).requires_grad_(True)             # (64, 16)
    assert torch.isfinite(s).all()
    v = squash(s)
    v.float().pow(2).sum().backward()
    length = v.double().norm(dim=-1)
    assert v.dtype == dtype and torch.isfinite(v).all() and torch.isfinite(s.grad).all()
    assert (length >= 0).all() and (length < 1).all(), length.max().item()
    assert length[-1] > 1 - 6 * info.eps                                          # huge: as close to 1 as it can be


def test_squash_exact_for_the_lengths_that_used_to_overflow():
    for value in (7e12, 2e19, 3e38):
        v = squash(torch.full((16,), value))
        assert v.norm().item() == pytest.approx(1.0, abs=1e-6), value            # was 0.0, NaN, NaN
        assert torch.allclose(v / v.norm(), torch.full((16,), 0.25))              # direction kept
    s = torch.full((8,), 65504.0, dtype=torch.float16, requires_grad=True)        # fp16's largest
    squash(s).sum().backward()
    assert torch.isfinite(s.grad).all()


def test_squash_relative_error_against_float64_from_tiny_to_huge():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(200, 16, generator=g) * torch.logspace(-3, 30, 200)[:, None]  # float32
    n = s.double().norm(dim=-1, keepdim=True)
    for k in (1.0, 0.5):
        exact = s.double() * n / (k + n**2)
        assert ((squash(s, k=k).double() - exact).abs() / exact.abs().clamp(min=1e-300)).max() < 1e-5
    tiny = torch.full((16,), 1e-30)                                               # length 4e-30
    assert squash(tiny).norm().item() < 1e-36                                     # exact: 1.6e-59


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(eps=0.0), ValueError, "eps"), (dict(eps=-1e-8), ValueError, "eps"), (dict(eps=float("nan")), ValueError, "eps"),
    (dict(k=0), ValueError, "k must be"), (dict(k=-1.0), ValueError, "k must be"), (dict(k=float("inf")), ValueError, "k must be"),
    (dict(k="1"), TypeError, "k must be"), (dict(k=True), TypeError, "k must be"),
])
def test_squash_rejects_bad_k_and_eps(kwargs, error, match):
    with pytest.raises(error, match=match):
        squash(torch.ones(3), **kwargs)


# ---------------------------------------------------------------- NaN images
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_images_are_an_error_not_a_score(bad):
    torch.manual_seed(0)
    model = CapsNet(**TINY)
    x = torch.full((4, 1, 28, 28), bad)
    with pytest.raises(ValueError, match="4 of 4 images hold NaN or infinite"):
        evaluate(model, x, torch.zeros(4, dtype=torch.long))                     # was accuracy 0.75
    with pytest.raises(ValueError, match="NaN or infinite"):
        predict_lengths(model, torch.cat([torch.rand(2, 1, 28, 28), x[:1]]))
    data = noise()
    data.x_train[3, 0, 5, 5] = bad
    with pytest.raises(ValueError, match="x_train: 1 of 32 images"):
        fit(model, data, epochs=1, **FAST)


def test_fp16_and_fp64_images_match_float32_in_a_float32_model():
    torch.manual_seed(0)
    model = CapsNet(**TINY).eval()
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        ref = model(x)[1]
        assert torch.equal(model(x.double())[1], ref)
        assert torch.allclose(model(x.half())[1], model(x.half().float())[1])


# ---------------------------------------------------------------- hyperparameters and weights
@pytest.mark.parametrize("kwargs, match", [
    (dict(lr=float("inf")), "lr must be a finite"), (dict(lr=float("nan")), "lr must be"),
    (dict(lr_decay=float("inf")), "lr_decay"), (dict(margin_lam=float("nan")), "margin_lam"),
    (dict(recon_weight=-1.0), "recon_weight"), (dict(recon_weight=float("inf")), "recon_weight"),
])
def test_non_finite_hyperparameters_are_refused_before_training(kwargs, match):
    model = CapsNet(**TINY)
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=match):
        fit(model, noise(), epochs=1, **FAST, **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))   # nothing trained


class Periodic(nn.Module):
    """Scores in [0, 0.1] (so only the present class counts) scaled by 1 + sin(gate): finite for any finite
    gate, with a gradient of order 1 even at 3e38, where one large Adam step takes the gate to inf."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(784, 10).requires_grad_(False)
        start = next(g for g in torch.linspace(3.0e38, 3.2e38, 50) if torch.cos(g) > 0.5)  # loss falls as gate grows
        self.gate = nn.Parameter(start.clone())

    def forward(self, x):
        return 0.05 * torch.sigmoid(self.linear(x.flatten(1))) * (1 + torch.sin(self.gate))  # (B, 10)


def test_non_finite_parameters_after_a_step_stop_training():
    torch.manual_seed(0)
    model = Periodic()
    with pytest.raises(FloatingPointError, match=r"parameters became non-finite by epoch 1, step [12] .*loss was finite"):
        fit(model, noise(), epochs=1, batch_size=4, lr=3e37, loss="margin", shift=0, **FAST)
    assert torch.isinf(model.gate)
