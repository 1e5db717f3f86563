"""Numbers that used to come out wrong without a word: huge and tiny squash inputs, NaN images,
non-finite hyperparameters and weights. Each case is either exact or one clear error."""
import pytest
import torch
from cli_helpers import TINY, noise
from torch import nn

from capsedu.core.capsnet import CapsNet
from capsedu.core.squashing import squash
from capsedu.training.evaluation import evaluate, predict_lengths
from capsedu.training.loop import fit

FAST = dict(device="cpu", progress=False)
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


# ---------------------------------------------------------------- squash
def test_squash_is_exact_in_the_range_its_docstring_states():
    """Relative error below 1e-6 against float64 for 1e-5 < |s| < 1e18; length 1 to one float32 step above."""
    g = torch.Generator().manual_seed(0)
    s = torch.randn(2000, 16, generator=g) * torch.logspace(-5, 18, 2000)[:, None] / 4     # |s| ~ 1e-5 .. 1e18
    n = s.double().norm(dim=-1, keepdim=True)
    for k in (1.0, 0.5):
        exact = s.double() * n / (k + n**2)
        v = squash(s, k=k).double()
        assert ((v - exact).norm(dim=-1) / exact.norm(dim=-1)).max() < 1e-6
        assert (v.norm(dim=-1) < 1 + 2 * torch.finfo(torch.float32).eps).all()
    assert squash(torch.full((16,), 5000.0 / 4)).norm().item() == pytest.approx(1.0, abs=1.2e-7)


def test_squash_sums_squares_in_float32_which_half_precision_needs():
    """The one numerical guard: float16's sum of squares overflows at |s| = 256, bfloat16's loses 3 digits."""
    s = torch.full((16,), 75.0, dtype=torch.float16, requires_grad=True)                # |s| = 300
    assert torch.isinf(s.detach().pow(2).sum())                                          # what a float16 sum gives
    v = squash(s)
    v.float().sum().backward()
    assert v.dtype == torch.float16 and v.float().norm().item() == pytest.approx(300**2 / (1 + 300**2), abs=1e-3)
    assert torch.isfinite(s.grad).all()
    b = (torch.randn(100, 16, generator=torch.Generator().manual_seed(1)) * 3).bfloat16()
    n = b.double().norm(dim=-1, keepdim=True)
    exact = b.double() * n / (1 + n**2)
    rel = lambda v: ((v.double() - exact).norm(dim=-1) / exact.norm(dim=-1)).max().item()  # noqa: E731
    naive = b * b.pow(2).sum(-1, keepdim=True).sqrt() / (1 + b.pow(2).sum(-1, keepdim=True))
    assert rel(squash(b)) < 2 ** -8 < rel(naive)                                         # bf16 output rounding only


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
