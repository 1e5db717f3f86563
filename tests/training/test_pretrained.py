"""The shipped weights: small enough, described by their JSON, and accurate."""
import json
from pathlib import Path

import pytest
import torch

from capsedu.core.capsnet import CapsNet
from capsedu.core.params import count_parameters
from capsedu.training.evaluation import evaluate
from capsedu.training.pretrained import WEIGHTS_NAME, load_capsnet, weights_info

WEIGHTS = Path(__file__).resolve().parents[2] / "capsedu" / "weights"


def test_weights_are_fp16_and_at_most_16_mib():
    pt = WEIGHTS / f"{WEIGHTS_NAME}.pt"
    assert pt.stat().st_size <= 16 * 2**20
    state = torch.load(pt, weights_only=True)
    assert all(v.dtype == torch.float16 for v in state["model"].values())


def test_json_describes_the_run():
    info = weights_info()
    assert {"command", "epochs", "train_seconds", "hardware", "date", "test_accuracy", "test_images"} <= set(info)
    assert info["command"].startswith("python -m capsedu train")
    assert info["test_images"] == 1000 and info["test_accuracy"] >= 0.985
    assert json.loads((WEIGHTS / f"{WEIGHTS_NAME}.json").read_text()) == info


def test_load_capsnet_is_the_paper_model_in_eval_mode():
    model = load_capsnet()
    assert isinstance(model, CapsNet) and not model.training and next(model.parameters()).dtype == torch.float32
    assert count_parameters(model) == 8_215_568


def test_pretrained_accuracy_on_200_test_digits(mnist_sample):
    result = evaluate(load_capsnet(), mnist_sample.x_test[:200], mnist_sample.y_test[:200])
    print(f"pretrained accuracy on the first 200 test digits: {result['accuracy']:.3f}")
    assert result["accuracy"] > 0.97


def test_missing_weights_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_capsnet(path=str(tmp_path / "nope.pt"))
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a torch file")
    with pytest.raises(RuntimeError, match="unreadable"):
        load_capsnet(path=str(bad))
