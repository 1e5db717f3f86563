"""The widgets' logic without a browser: what a control changes, reset, routing history, and
that each static twin shows exactly what the live widget shows for the same settings."""
import ast
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from cli_helpers import decode_png

import capsedu
from capsedu.core.routing import dynamic_routing
from capsedu.core.squashing import NORM_COMPRESSIONS, squash
from capsedu.figures.frames import (PAPER_DELTAS, perturb, perturbation_grid, routing_frames, squash_curves,
    toy_predictions)
from capsedu.figures.static import (SQUASH_TWIN_K, SQUASH_TWIN_SETS, perturbation_twin, routing_twin,
    squash_twin)
from capsedu.figures.widgets import perturbation_explorer, routing_explorer, squash_explorer
from capsedu.training.pretrained import load_capsnet


@pytest.fixture(scope="module")
def model():
    return load_capsnet()


@pytest.fixture(scope="module")
def images(mnist_sample):
    return mnist_sample.x_test[:3]


@pytest.fixture(scope="module")
def explorer(model, images):
    return perturbation_explorer(model, images)


@pytest.fixture
def twin_resolution(monkeypatch):
    """Live widgets drawn at the twins' resolution (they draw at twice it), so pixels compare."""
    import capsedu.figures.plots as plots
    import capsedu.figures.widgets as widgets
    monkeypatch.setattr(widgets, "LIVE_DPI", plots.DPI)


def decoder_input(model, run):
    """The tensor the decoder's first layer receives while ``run()`` executes."""
    seen = []
    hook = model.decoder.net.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    try:
        run()
    finally:
        hook.remove()
    return seen[-1].reshape(-1, 10, 16)[0]


# ---------------------------------------------------------------- perturbation
def test_slider_changes_the_decoder_input_by_exactly_the_step(model, explorer):
    explorer.reset_sliders()
    before = decoder_input(model, explorer.redraw)
    after = decoder_input(model, lambda: setattr(explorer.sliders[5], "value", 0.05))
    diff = after - before
    label = explorer.label
    assert diff[label, 5].item() == pytest.approx(0.05, abs=1e-6)
    diff[label, 5] = 0
    assert torch.count_nonzero(diff) == 0                  # nothing else moved
    # the other capsules are masked to zero, the predicted one is the capsule itself
    assert torch.count_nonzero(before.sum(dim=1)) == 1 and torch.allclose(before[label], explorer.capsules[label])


def test_reset_restores_the_original_capsule_and_image(explorer):
    explorer.reset_sliders()
    original, image = explorer.capsule().clone(), explorer.image.value
    for d, v in ((0, 0.25), (7, -0.1), (15, 0.15)):
        explorer.sliders[d].value = v
    assert not torch.equal(explorer.capsule(), original) and explorer.image.value != image
    explorer.reset.click()
    assert torch.equal(explorer.capsule(), original)
    assert all(s.value == 0.0 for s in explorer.sliders)
    assert np.array_equal(decode_png(explorer.image.value), decode_png(image))


def test_wider_range_and_digit_picker(explorer, images):
    explorer.span.value = "±0.5"
    assert (explorer.sliders[0].min, explorer.sliders[0].max) == (-0.5, 0.5)
    explorer.sliders[0].value = 0.4
    explorer.span.value = "±0.25 (paper)"
    assert explorer.sliders[0].value == 0.25               # clamped into the paper's range
    explorer.digit.value = 2
    assert explorer.index == 2 and all(s.value == 0.0 for s in explorer.sliders)
    assert np.allclose(explorer.plot.state["recon"], perturb(explorer.model, explorer.capsules, explorer.label).numpy())


def test_perturb_matches_the_batched_grid(model, explorer):
    caps, label = explorer.capsules, explorer.label
    grid = perturbation_grid(model, caps, label)
    assert grid.shape == (16, 11, 28, 28) and PAPER_DELTAS[0] == -0.25 and PAPER_DELTAS[-1] == 0.25
    for d, t in ((0, 0), (3, 7), (15, 10)):
        assert torch.allclose(grid[d, t], perturb(model, caps, label, d, PAPER_DELTAS[t]), atol=1e-5)
    assert torch.allclose(grid[4, 5], perturb(model, caps, label), atol=1e-6)   # delta 0: unperturbed


# ---------------------------------------------------------------- routing
@pytest.mark.parametrize("mode", ["hinton", "su"])
@pytest.mark.parametrize("r", [1, 3, 7])
def test_routing_frames_are_r_iterations_ending_at_the_routing_output(mode, r):
    u_hat = toy_predictions()
    frames = routing_frames(u_hat, r, mode)
    assert len(frames) == r
    v, history = dynamic_routing(u_hat, r, mode, return_history=True)   # c sums to one: test_core
    assert all(torch.allclose(f["c"], c[0], atol=1e-6) for f, c in zip(frames, history))
    assert torch.allclose(frames[-1]["v"], v[0], atol=1e-6)   # the last frame is the routing output


def test_routing_explorer_controls(model, images):
    w = routing_explorer(model, images)
    assert len(w.frames("hinton", 3)[1]) == 3
    w.r.value = 2
    assert w.t.max == 2 and w.t.value <= 2
    w.t.value = 2
    before = w.plot.state["toy"]["c"].clone()
    w.mode.value = "su"
    assert w.plot.state["mode"] == "su" and w.plot.state["iteration"] == 2
    assert torch.equal(w.plot.state["toy"]["c"], before)      # iteration 2 is the same under both updates
    w.r.value = 4
    w.t.value = 4
    hinton = routing_frames(toy_predictions(), 4, "hinton")[3]["c"]
    assert not torch.allclose(w.plot.state["toy"]["c"], hinton)   # from iteration 3 on, Su differs
    w.digit.value = 1
    assert w.plot.state["net"]["c"].shape == (1152, 10)


# ---------------------------------------------------------------- squash
def test_squash_curves_are_the_package_functions_and_the_explorer_draws_them():
    c = squash_curves(0.5, example=None)
    n = torch.tensor(c["n"])
    assert np.allclose(c["su"], NORM_COMPRESSIONS["su"](n).numpy(), atol=1e-6)
    assert np.allclose(c["squash"], n**2 / (0.5 + n**2), atol=1e-6)
    assert np.allclose(c["tanh"], np.tanh(c["n"]), atol=1e-6)
    one = squash_curves(0.5, example=1.3)
    assert one["squash"][0] == pytest.approx(squash(torch.tensor([1.3, 0.0]), k=0.5).norm().item(), abs=1e-6)
    w = squash_explorer()                                           # its slider and checkboxes
    w.k.value = 0.5
    assert np.allclose(w.plot.state["curves"]["squash"], squash_curves(0.5)["squash"])
    w.boxes["tanh"].value = True
    assert w.plot.lines["tanh"].get_visible() and "tanh" in w.plot.state["names"]


# ---------------------------------------------------------------- twins vs live
def test_squash_twin_frames_are_the_live_widget_pixels(twin_resolution):
    twin, live = squash_twin(), squash_explorer()
    sets = list(SQUASH_TWIN_SETS)
    for ki, si in ((0, 0), (3, 1), (6, 2)):
        live.k.value = SQUASH_TWIN_K[ki]
        for name, box in live.boxes.items():
            box.value = name in SQUASH_TWIN_SETS[sets[si]]
        assert np.array_equal(decode_png(twin.frames[(ki, si)]), live.plot.pixels())
        assert np.allclose(twin.data[(ki, si)]["curves"]["squash"], live.plot.state["curves"]["squash"])


def test_routing_twin_frames_are_the_live_widget_pixels(model, images, twin_resolution):
    twin, live = routing_twin(model, images[0], iterations=4), routing_explorer(model, images)
    live.r.value = 4
    for m, mode in enumerate(("hinton", "su")):
        live.mode.value = mode
        for t in (1, 4):
            live.t.value = t
            assert np.array_equal(decode_png(twin.frames[(m, t - 1)]), live.plot.pixels()), (mode, t)
            assert torch.equal(twin.data[(m, t - 1)]["net"]["c"], live.plot.state["net"]["c"])


def test_perturbation_twin_frames_are_the_live_widget_output(model, images, explorer):
    twin = perturbation_twin(model, images)
    assert len(twin.frames) == 3 * 16 * 11
    explorer.span.value = "±0.25 (paper)"
    for i, d, t in ((0, 0, 0), (1, 9, 7), (2, 15, 10)):
        explorer.digit.value = i
        explorer.sliders[d].value = PAPER_DELTAS[t]
        live = explorer.plot.state["recon"]
        assert np.allclose(twin.data[(i, d, t)].numpy(), live, atol=1e-5)
        pixels = decode_png(twin.frames[(i, d, t)]).astype(int)
        assert np.abs(pixels - np.round(live * 255)).max() <= 1


def test_twin_html_is_self_contained_and_degrades(model, images):
    for twin in (squash_twin(ks=(0.5, 1.0)), routing_twin(iterations=2), perturbation_twin(model, images[:1])):
        page = twin.html()
        assert f'data-twin="{twin.kind}"' in page and 'class="capsedu-twin-controls" hidden' in page
        assert not re.search(r'(src|href)="(https?:)?//', page)          # nothing from a CDN or the network
        assert '<img class="capsedu-twin-frame' in page and "<noscript>" in page
        assert twin.nbytes < 2_000_000


# JavaScript (a function with a body, a DOM call), a CSS rule, or a <style>/<script> with text in it
# (a tag whose body is a placeholder, filled from a file, is fine).
PAGE_CODE = re.compile(r"function\s*\w*\s*\([^)]*\)\s*\{|addEventListener|querySelector|document\.\w+\(|"
                       r"[\w.#-]+\s*\{\s*[\w-]+\s*:[^{};]+;|<(style|script)[^>]*>[^<$]")


def test_no_javascript_or_css_in_a_python_string():
    """The pages' JavaScript, CSS and HTML templates are files of capsedu/figures/page/, not Python strings."""
    found = [f"{path.name}:{node.lineno}: {node.value[:50]!r}" for path in Path(capsedu.__file__).parent.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and PAGE_CODE.search(node.value)]
    assert not found, found


def test_no_figure_is_created_per_event(explorer):
    before = plt.get_fignums()
    fig = explorer.plot.fig
    for v in PAPER_DELTAS:
        explorer.sliders[2].value = v
    assert plt.get_fignums() == before and explorer.plot.fig is fig
