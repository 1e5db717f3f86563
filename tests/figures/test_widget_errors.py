"""The live widgets and their static twins given the wrong model, wrong images or wrong settings:
one TypeError/ValueError naming what was expected, before any control or frame is built."""
import pytest
import torch

from capsedu.core.capsnet import CapsNet
from capsedu.core.heads import PoolingClassifier
from capsedu.figures.frames import perturb, perturbation_grid
from capsedu.figures.static import perturbation_twin, routing_twin, squash_twin
from capsedu.figures.widgets import perturbation_explorer, routing_explorer

SMALL = dict(conv_channels=16, primary_types=4, decoder_hidden=(32,))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return CapsNet(**SMALL).eval()


@pytest.fixture(scope="module")
def images():
    return torch.rand(2, 1, 28, 28, generator=torch.Generator().manual_seed(0))


BUILDERS = {
    "perturbation_explorer": lambda m, x: perturbation_explorer(m, x),
    "routing_explorer": lambda m, x: routing_explorer(m, x),
    "routing_twin": lambda m, x: routing_twin(m, x[:1], iterations=2),
    "perturbation_twin": lambda m, x: perturbation_twin(m, x[:1], deltas=(0.0,)),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("wrong", ["pooling", "string"])
def test_builders_name_the_model_they_need(name, wrong, images):
    other = PoolingClassifier() if wrong == "pooling" else "capsnet"
    with pytest.raises(TypeError, match=rf"{name}: expected a capsedu CapsNet .*got {type(other).__name__}"):
        BUILDERS[name](other, images)


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("bad", ["32x32", "empty", "3 channels", "list", "nan"])
def test_builders_name_the_images_they_need(name, bad, model):
    x = {"32x32": torch.rand(2, 1, 32, 32), "empty": torch.rand(0, 1, 28, 28), "3 channels": torch.rand(2, 3, 28, 28),
         "list": [[0.0] * 28] * 28, "nan": torch.full((2, 1, 28, 28), float("nan"))}[bad]
    error = TypeError if bad == "list" else ValueError
    match = "NaN or infinite" if bad == "nan" else r"\(N, 1, 28, 28\)"
    with pytest.raises(error, match=rf"{name}: .*{match}") as err:
        BUILDERS[name](model, x)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value, error", [(0, ValueError), (-1, ValueError), (2.5, TypeError), ("3", TypeError)])
def test_iteration_counts(model, images, value, error):
    with pytest.raises(error, match="routing_explorer: max_iterations must be an int >= 1"):
        routing_explorer(model, images, max_iterations=value)
    with pytest.raises(error, match="routing_twin: iterations must be an int >= 1"):
        routing_twin(model, images[0], iterations=value)


def test_show_iteration_never_passes_the_iteration_count(model, images):
    w = routing_explorer(model, images, max_iterations=2)
    assert w.r.value == 2 and w.t.max == 2                           # was max 3, then IndexError at 3
    w.t.value = 2
    assert w.plot.state is not None
    w = routing_explorer(max_iterations=1)
    assert (w.r.value, w.t.max) == (1, 1)


def test_twin_settings(model, images):
    for call, match in ((lambda: routing_twin(model, None), "pass both model and image"),
                        (lambda: routing_twin(None, images[0]), "pass both model and image"),
                        (lambda: routing_twin(model, images), "expected one image"),
                        (lambda: squash_twin(ks=[]), "non-empty sequence"),
                        (lambda: squash_twin(ks=[1.0, 0.0]), "each k must be a finite number > 0"),
                        (lambda: perturbation_twin(model, images[:1], deltas=[]), "non-empty sequence of finite"),
                        (lambda: perturbation_twin(model, images[:1], deltas=[0.1, float("inf")]), "finite")):
        with pytest.raises(ValueError, match=match):
            call()


def test_other_capsule_sizes_and_capsule_indices(images):
    torch.manual_seed(0)
    eight = CapsNet(**SMALL, digit_dim=8).eval()                     # was a size mismatch in the explorer
    w = perturbation_explorer(eight, images)
    assert len(w.sliders) == 8
    w.sliders[7].value = 0.2
    assert w.plot.state is not None and w.deltas()[7] == pytest.approx(0.2)
    caps = eight.capsules(images[:1])[0].detach()                     # (10, 8)
    assert perturbation_grid(eight, caps, torch.tensor(3), (-0.1, 0.1)).shape == (8, 2, 28, 28)
    for kwargs, match in ((dict(dim=-1), r"dim must be an int in \[0, 7\], got -1"), (dict(dim=8), "dim must be"),
                          (dict(dim=1.0), "dim must be"), (dict(label=10), r"label must be an int in \[0, 9\]")):
        with pytest.raises(ValueError, match=match):
            perturb(eight, caps, **{"label": 3, "delta": 0.1, **kwargs})
