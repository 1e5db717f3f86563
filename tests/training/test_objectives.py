"""The losses fit trains with besides the paper's: cross-entropy and the spread loss, by hand."""
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from capsedu.training.loop import fit
from capsedu.training.objectives import cross_entropy_loss, spread_loss, spread_margin


def test_spread_loss_by_hand():
    a = torch.tensor([[0.9, 0.5, 0.1], [0.2, 0.3, 0.4]])
    t = torch.tensor([[1.0, 0, 0], [0, 0, 1.0]])
    m = 0.5
    # row 0: a_t = 0.9; wrong 0.5 -> max(0, 0.5 - 0.4)^2 = 0.01; 0.1 -> max(0, 0.5 - 0.8) = 0
    # row 1: a_t = 0.4; wrong 0.2 -> (0.5 - 0.2)^2 = 0.09; 0.3 -> (0.5 - 0.1)^2 = 0.16
    assert spread_loss(a, t, m).item() == pytest.approx((0.01 + 0.25) / 2)


def test_spread_margin_grows_from_0_2_to_0_9():
    assert [spread_margin(p) for p in (0, 0.5, 1, 2)] == pytest.approx([0.2, 0.55, 0.9, 0.9])


def test_cross_entropy_matches_torch_and_refuses_multi_hot():
    logits = torch.randn(5, 10)
    labels = torch.tensor([0, 3, 9, 2, 2])
    assert cross_entropy_loss(logits, F.one_hot(labels, 10).float()).item() == pytest.approx(
        F.cross_entropy(logits, labels).item())
    assert cross_entropy_loss(torch.zeros(1, 10), F.one_hot(torch.tensor([4]), 10).float()).item() == \
        pytest.approx(math.log(10))
    with pytest.raises(ValueError, match="one class per image"):
        cross_entropy_loss(logits[:1], torch.tensor([[1.0, 1.0] + [0.0] * 8]))


@pytest.mark.parametrize("loss", ["cross_entropy", "spread"])
def test_fit_trains_a_classifier_with_each_loss(loss):
    torch.manual_seed(0)
    y = torch.arange(64) % 2                                 # class 1: a bright top half; class 0: a bright bottom
    x = 0.2 * torch.rand(64, 1, 28, 28)
    x[y == 1, :, :14] += 0.8
    x[y == 0, :, 14:] += 0.8
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    if loss == "spread":
        net.append(torch.nn.Sigmoid())
    data = SimpleNamespace(x_train=x, y_train=y, x_test=x, y_test=y)
    history = fit(net, data, epochs=15, batch_size=16, lr=1e-2, loss=loss, shift=0, device="cpu", progress=False)
    assert history[-1]["train_acc"] > 0.7
    if loss == "cross_entropy":                                   # the spread loss's margin grows, so may its value
        assert history[-1]["loss"] < history[0]["loss"]
