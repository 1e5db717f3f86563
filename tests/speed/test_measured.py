"""Chapters 3 and 6's measurements on a trained CapsNet: routing statistics and equivariance curves."""
import math

import numpy as np
import pytest
import torch

from capsedu.core.capsnet import CapsNet
from capsedu.data.transforms import shift_images
from capsedu.figures.equivariance import CNN_CURVES, equivariance_curves, transform_digits
from capsedu.methods.baseline_cnn import BaselineCNN, BaselineConfig
from capsedu.figures.routing_stats import routing_statistics


def small_capsnet(**overrides):
    torch.manual_seed(0)
    return CapsNet(conv_channels=16, primary_types=4, **overrides).eval()    # 144 primary capsules


def blobs(n=6, seed=1):
    """Random 'digits' whose ink lies in rows and columns 9..18, away from every border."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, 1, 28, 28)
    x[:, :, 9:19, 9:19] = torch.rand(n, 1, 10, 10, generator=g)
    return x, torch.arange(n) % 10


def test_no_shift_is_exact_and_no_rotation_is_no_scaling():
    x, _ = blobs()
    assert torch.allclose(transform_digits(x, "shift", 0), x, atol=1e-5)
    still = transform_digits(x, "rotate", 0.0)                          # resampled finely: softened, not moved
    assert torch.allclose(still, transform_digits(x, "scale", 1.0), atol=1e-6)
    assert torch.allclose(still.sum(dim=(-2, -1)), x.sum(dim=(-2, -1)), rtol=1e-4)  # no ink lost
    assert 0 < (still - x).abs().max() < 0.5
    # a quarter turn is anticlockwise and exact
    assert torch.allclose(transform_digits(x, "rotate", 90), torch.rot90(still, 1, dims=(-2, -1)), atol=1e-5)


def test_whole_pixel_shifts_copy_pixels_like_the_data_shift():
    x, _ = blobs()
    for px in (-3, 2):
        want = shift_images(x, torch.zeros(len(x), dtype=torch.long), torch.full((len(x),), px))
        assert torch.allclose(transform_digits(x, "shift", px), want, atol=1e-5)


def test_rotations_soften_the_strokes_as_much_as_no_rotation():
    x, _ = blobs()
    sharpness = lambda im: im.pow(2).sum(dim=(-2, -1)).flatten()       # falls as interpolation blurs
    still = sharpness(transform_digits(x, "rotate", 0.0))
    for degrees in (5, 10, 30):
        assert torch.allclose(sharpness(transform_digits(x, "rotate", degrees)), still, rtol=0.06)


def test_scaling_up_spreads_the_ink_away_from_the_centre():
    x, _ = blobs()
    coords = torch.arange(28.0) - 13.5
    spread = lambda im: ((im.sum(dim=-1) * coords ** 2).sum(dim=-1) / im.sum(dim=(-2, -1))).flatten()
    assert (spread(transform_digits(x, "scale", 1.2)) > spread(x)).all()
    assert (spread(transform_digits(x, "scale", 0.8)) < spread(x)).all()


@pytest.mark.parametrize("kind, amount", [("skew", 1.0), ("scale", 0.0), ("shift", math.nan), ("rotate", True)])
def test_bad_transformations_are_refused(kind, amount):
    with pytest.raises(ValueError):
        transform_digits(blobs()[0], kind, amount)


def test_equivariance_curves_at_zero_and_under_whole_pixel_shifts():
    model, (x, y) = small_capsnet(), blobs()
    amounts = [-1, 0, 1, 2]
    curves = equivariance_curves(model, x, y, "shift", amounts, batch_size=4)
    assert all(v.shape == (len(amounts), len(x)) for v in curves.values())
    at_zero = amounts.index(0)
    with torch.no_grad():
        own = model(x)[1][torch.arange(len(x)), y].numpy()             # CapsNet's own lengths
    np.testing.assert_allclose(curves["length"][at_zero], own, rtol=1e-5)
    for name in ("cosine", "map_cosine"):
        np.testing.assert_allclose(curves[name][at_zero], 1.0, atol=1e-5)
    assert np.isnan(curves["drift"][at_zero]).all()
    np.testing.assert_allclose(curves["drift"][amounts.index(1)], 1.0, atol=1e-5)
    # conv1 is equivariant to whole-pixel shifts: the same strokes light other units
    assert (curves["map_cosine"][[0, 2]] < 0.99).all()
    with pytest.raises(ValueError, match="above"):                     # the reference step must be positive
        equivariance_curves(model, x, y, "rotate", [-10, 0])


def test_a_trained_cnn_adds_its_last_hidden_layer_curves():
    model, (x, y) = small_capsnet(), blobs()
    torch.manual_seed(0)
    cnn = BaselineCNN(BaselineConfig(channels=(4, 4), hidden=(8,), pool_after=(1, 2)))
    with pytest.raises(ValueError, match="eval mode"):
        equivariance_curves(model, x, y, "shift", [0, 1], cnn=cnn)       # dropout on: not a measurement
    curves = equivariance_curves(model, x, y, "rotate", [0, 10], cnn=cnn.eval())
    assert set(CNN_CURVES) <= set(curves) and curves["cnn_cosine"].shape == (2, len(x))
    np.testing.assert_allclose(curves["cnn_ratio"][0], 1.0, atol=1e-5)
    np.testing.assert_allclose(curves["cnn_cosine"][0], 1.0, atol=1e-5)
    np.testing.assert_allclose(curves["cnn_drift"][1], 1.0, atol=1e-5)   # the reference step itself
    with torch.no_grad():
        still = transform_digits(x, "rotate", 0)
        want = (cnn(still).argmax(dim=1) == y).float().numpy()
    np.testing.assert_array_equal(curves["cnn_correct"][0], want)
    assert not set(CNN_CURVES) & set(equivariance_curves(model, x, y, "rotate", [0, 10]))


def test_first_iteration_is_uniform_and_accuracy_matches_the_model_routed_that_long():
    model, (x, y) = small_capsnet(), blobs(8)
    stats = routing_statistics(model, x, y, iterations=(1, 2, 3), batch_size=3)
    one = stats[1]
    np.testing.assert_allclose(one["max_c"], 0.1, rtol=1e-5)
    np.testing.assert_allclose(one["true_c"], 0.1, rtol=1e-5)
    np.testing.assert_allclose(one["entropy"], math.log(10), rtol=1e-5)
    for r in (1, 2, 3):
        routed = small_capsnet(iterations=r)
        routed.load_state_dict(model.state_dict())
        with torch.no_grad():
            want = (routed(x)[1].argmax(dim=1) == y).numpy()
        np.testing.assert_array_equal(stats[r]["correct"], want)
        assert (stats[r]["max_c"] >= stats[r]["true_c"] - 1e-7).all()               # the true class is one j
        assert (stats[r]["entropy"] <= math.log(10) + 1e-5).all()
    with pytest.raises(ValueError, match="labels"):
        routing_statistics(model, x, y[:3])
    with pytest.raises(ValueError, match="iterations"):
        routing_statistics(model, x, y, iterations=(0,))
