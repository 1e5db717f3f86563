"""Tests for capsedu.data.transforms: digits stay inside the canvas, seeds reproduce, strength 0 is the identity."""
import re

import pytest
import torch

from capsedu.data.transforms import (AFFINE_RANGES, INK, affine_test_set, center_on_canvas, pad_and_shift,
    random_affine, shift_images)


@pytest.fixture(scope="module")
def digits(mnist_sample):
    return mnist_sample.x_test[:300], mnist_sample.y_test[:300]


def _border(images, width=1):
    """Brightest pixel in the outer ``width`` rings of each image (B,)."""
    inner = torch.zeros_like(images, dtype=torch.bool)
    inner[..., width:-width, width:-width] = True
    return images.masked_fill(inner, 0).amax(dim=(1, 2, 3))


def _generator(seed):
    return torch.Generator().manual_seed(seed)


def test_center_on_canvas_shape_and_position(digits):
    x, _ = digits
    out = center_on_canvas(x, 40)
    assert out.shape == (len(x), 1, 40, 40)
    assert torch.equal(out[:, :, 6:34, 6:34], x)
    assert out.sum() == pytest.approx(x.sum().item(), rel=1e-6)


@pytest.mark.parametrize("strength", [0.25, 1.0])
def test_random_affine_keeps_the_digit_inside(digits, strength):
    x, _ = digits
    out, p = random_affine(x, strength, 40, _generator(0), return_params=True)
    assert out.shape == (len(x), 1, 40, 40)
    assert _border(out).max() < INK            # no ink reaches the outermost ring
    # the ink is all there: an affine map scales areas by det(A) = scale_x * scale_y
    ratio = out.sum(dim=(1, 2, 3)) / (x.sum(dim=(1, 2, 3)) * p["scale_x"] * p["scale_y"])
    assert ratio.min() > 0.95 and ratio.max() < 1.05


def test_random_affine_ranges_scale_with_strength(digits):
    x, _ = digits
    for strength in (0.5, 1.0):
        _, p = random_affine(x, strength, 40, _generator(1), return_params=True)
        assert p["rotation_deg"].abs().max() <= AFFINE_RANGES["rotation_deg"] * strength + 1e-4
        assert p["rotation_deg"].abs().max() > 0.8 * AFFINE_RANGES["rotation_deg"] * strength  # the range is used
        assert p["shear"].abs().max() <= AFFINE_RANGES["shear"] * strength + 1e-6
        for axis in ("scale_x", "scale_y"):
            assert (p[axis] - 1).abs().max() <= AFFINE_RANGES["scale"] * strength + 1e-6
    _, p = random_affine(x, 1.0, 40, _generator(1), return_params=True)
    assert p["shift_x"].abs().max() > 6  # translations go well beyond the training shifts


def test_strength_zero_is_the_centred_original(digits):
    x, _ = digits
    out = random_affine(x, 0.0, 40, _generator(2))
    assert torch.allclose(out, center_on_canvas(x, 40), atol=1e-5)


def test_seed_reproduces_and_differs(digits):
    x, y = digits
    a, ya = affine_test_set(x, y, 1.0, 40, seed=5)
    b, yb = affine_test_set(x, y, 1.0, 40, seed=5)
    c, _ = affine_test_set(x, y, 1.0, 40, seed=6)
    assert torch.equal(a, b) and torch.equal(ya, y) and torch.equal(yb, y)
    assert not torch.equal(a, c)
    assert torch.equal(pad_and_shift(x, 40, 6, _generator(3)), pad_and_shift(x, 40, 6, _generator(3)))


@pytest.mark.parametrize("canvas, max_shift", [(28, 0), (36, 4), (40, 6), (41, 12), (64, 63)])
def test_pad_and_shift_is_a_whole_pixel_shift_drawn_as_x_y_pairs(digits, canvas, max_shift):
    """pad_and_shift = centre, then shift_images by one (B, 2) draw of (x, y) offsets; the same pixels
    as sampling the shifted grid with affine_grid + grid_sample (nearest), as it did before."""
    x = digits[0][:60]
    out = pad_and_shift(x, canvas, max_shift, _generator(11))
    offsets = torch.randint(-max_shift, max_shift + 1, (60, 2), generator=_generator(11))  # (B, 2): x, y
    centred = center_on_canvas(x, canvas)
    assert torch.equal(out, shift_images(centred, offsets[:, 1], offsets[:, 0]))
    theta = torch.eye(2, 3).repeat(60, 1, 1)
    theta[:, :, 2] = -offsets.float() * (2 / canvas)
    grid = torch.nn.functional.affine_grid(theta, list(centred.shape), align_corners=False)
    sampled = torch.nn.functional.grid_sample(centred, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    assert torch.equal(out, sampled)


@pytest.mark.parametrize("call, message", [
    (lambda x: random_affine(x, 1.0, generator=0), "generator must be a torch.Generator"),
    (lambda x: random_affine(x, 1.5), "strength must be a number in [0, 1]"),
    (lambda x: random_affine(x, "1"), "strength must be a number in [0, 1]"),
    (lambda x: random_affine(x, 1.0, canvas=20), "canvas must be an int of at least 28"),
    (lambda x: random_affine(x[0], 1.0), "images must be float images of shape (B, C, H, W)"),
    (lambda x: random_affine((x * 255).byte(), 1.0), "images must be float images"),
    (lambda x: pad_and_shift(x, 40, max_shift=40), "max_shift must be an int in [0, 39]"),
    (lambda x: affine_test_set(x, torch.zeros(3), 1.0), "y must be a tensor of"),
    (lambda x: affine_test_set(x, torch.zeros(len(x)), 1.0, seed=-1), "seed must be an int >= 0"),
])
def test_bad_arguments(digits, call, message):
    x, _ = digits
    with pytest.raises(TypeError if "generator" in message else ValueError, match=re.escape(message)):
        call(x[:4])
