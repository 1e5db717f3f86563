"""capsedu.figures.diagrams: the architecture figure reads its shapes and counts from the model."""
import matplotlib

matplotlib.use("Agg")

from capsedu.core.capsnet import CapsNet, CapsNetConfig  # noqa: E402
from capsedu.core.params import count_parameters  # noqa: E402
from capsedu.figures.diagrams import architecture_figure, architecture_stages, neuron_vs_capsule_figure  # noqa: E402


def test_stages_add_up_to_the_model_and_follow_the_config():
    stages = architecture_stages()
    assert sum(p for *_, p in stages) == count_parameters(CapsNet()) == 8_215_568
    assert [s[0] for s in stages] == ["input", "Conv1", "PrimaryCaps", "DigitCaps", "Decoder"]
    assert "1,152 capsules of 8-D" in stages[2][2] and "256×20×20" == stages[1][2]
    wide = CapsNetConfig(image_size=(36, 36))
    stages36 = architecture_stages(wide)
    assert sum(p for *_, p in stages36) == count_parameters(CapsNet(wide)) == wide.parameter_count
    assert "3,200 capsules" in stages36[2][2]                          # 32 types x 10 x 10


def test_figures_draw_the_numbers():
    fig = architecture_figure()
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "1,474,560 parameters" in texts and "8,215,568" in fig.axes[0].get_title()
    assert len(neuron_vs_capsule_figure().axes) == 2


def test_architecture_labels_stay_inside_their_boxes():
    fig = architecture_figure()
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    boxes = [patch.get_window_extent(renderer) for patch in ax.patches if hasattr(patch, "get_boxstyle")]
    inside = [t for t in ax.texts if 0 < ax.transData.inverted().transform(
        t.get_window_extent(renderer).get_points().mean(axis=0))[1] < 1.6]   # drawn on a box, not below it
    assert len(boxes) == 5 and len(inside) == 15                            # name, what, shape per stage
    for text in inside:
        extent = text.get_window_extent(renderer)
        assert any(b.x0 <= extent.x0 and extent.x1 <= b.x1 for b in boxes), text.get_text()
