"""The live widgets in a notebook's output area (~950 px in Colab and Jupyter): every row of
controls fits, labels are not cut, and the plot is drawn at twice the pixels it is shown at."""
import io

import pytest
from PIL import Image

from capsedu.figures import widgets
from capsedu.figures.plots import DPI
from capsedu.training.pretrained import load_capsnet


def px(value: str) -> int:
    assert value.endswith("px"), value
    return int(value[:-2])


@pytest.fixture(scope="module")
def explorers(mnist_sample):
    model, images = load_capsnet(), mnist_sample.x_test[:2]
    return [widgets.squash_explorer(), widgets.routing_explorer(model, images),
            widgets.perturbation_explorer(model, images)]


def test_the_plot_is_sharp_and_not_wider_than_the_output_area(explorers):
    for w in explorers:
        shown = px(w.image.layout.width)
        width, _ = Image.open(io.BytesIO(w.image.value)).size
        assert shown <= widgets.OUTPUT_PX < 950 and px(w.layout.max_width) <= widgets.OUTPUT_PX
        assert widgets.LIVE_DPI == 2 * DPI and width >= 2 * shown - 2, (type(w).__name__, width, shown)


def test_the_perturbation_sliders_fit_in_four_columns(explorers):
    grid = explorers[2].children[1]
    columns = grid.layout.grid_template_columns                           # "repeat(4, 230px)"
    count, size = columns[len("repeat("):-1].split(", ")
    assert int(count) * px(size) <= widgets.OUTPUT_PX
    assert all(px(s.layout.width) <= px(size) for s in grid.children) and len(grid.children) == 16


def test_the_routing_labels_get_the_93_px_they_need(explorers):
    routing = explorers[1]
    for control in (routing.mode, routing.r, routing.t, routing.digit):
        assert px(control.style.description_width) >= 93, control.description
