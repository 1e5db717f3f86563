"""What the build appendix and chapters 4 and 5 state about stored facts: the shipped weights' two commands, the
stored chapter timings, and the reshape diagram's sizes."""
import json
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RENAMED = {"00_setup.ipynb": "appendix_build.ipynb"}   # chapter 0 became an appendix (issue 50)


def test_weights_metadata_says_how_the_run_was_launched_and_stopped():
    from capsedu.training.pretrained import weights_info
    info = weights_info()
    launched, equivalent = shlex.split(info["launched_as"]), shlex.split(info["command"])
    epochs_at = launched.index("--epochs") + 1
    assert int(launched[epochs_at]) > info["stopped_after_epoch"] == info["epochs"]
    assert int(equivalent[epochs_at]) == info["epochs"] == len(info["test_accuracy_per_epoch"])
    # apart from --epochs the two commands agree: same data, batch size, seed
    assert launched[:epochs_at] + launched[epochs_at + 1:] == equivalent[:epochs_at] + equivalent[epochs_at + 1:]


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks" / "results").glob("chapters-cpu-*.json")),
                         ids=lambda p: p.name)
def test_stored_chapter_times_say_when_where_and_under_what_load(path):
    run = json.loads(path.read_text())
    assert run["benchmark"] == "chapters" and run["mode"] in ("smoke", "quick", "gpu", "full")
    assert run["hardware"] and run["date"][:4].isdigit()
    names = [c["notebook"] for c in run["chapters"]]
    assert len(names) == len(set(names)) and all((ROOT / "book" / RENAMED.get(n, n)).exists() for n in names)
    assert all(c["seconds"] > 0 and len(c["load_average_1min_before_after"]) == 2 for c in run["chapters"])
    assert run["total_seconds"] == pytest.approx(sum(c["seconds"] for c in run["chapters"]), abs=0.2)


def test_reshape_diagram_reads_its_sizes_from_the_config():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from capsedu.core.capsnet import CapsNetConfig
    from capsedu.figures.reshape import primary_reshape_figure
    for config, capsules in ((CapsNetConfig(), "1,152 capsules"), (CapsNetConfig(image_size=36), "3,200 capsules")):
        ax = primary_reshape_figure(config)
        texts = " ".join(t.get_text() for t in ax.texts)
        assert capsules in texts and f"{config.primary_grid[0]}×{config.primary_grid[1]}" in texts
        plt.close(ax.figure)
