"""The in-page CapsNet's files and panel (capsedu/figures/inpage.py), without a browser.

The browser runs them in tests/book/test_browser_inpage.py; here: the decoder file is the shipped
weights exactly, the int8 encoder is within half a quantisation step of them, every tensor is
aligned for a typed array, and the panel carries the capsules PyTorch computes.
"""
import base64
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from capsedu.core.squashing import safe_norm
from capsedu.figures.inpage import (DECODER_FILE, ENCODER_FILE, INT8_GROUPS, SCRIPT, InPagePanel,
    inpage_panel, int8_error, read_weights, weight_files, write_weight_files)
from capsedu.training.pretrained import load_capsnet

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model():
    return load_capsnet()


@pytest.fixture(scope="module")
def files(model):
    return weight_files(model)


@pytest.fixture(scope="module")
def digits(mnist_sample):
    return mnist_sample.x_test[:20]


def _header(data):
    (length,) = struct.unpack_from("<I", data, 0)
    return 4 + length, json.loads(data[4:4 + length])


def test_decoder_file_is_the_shipped_float16_weights(model, files):
    weights = read_weights(files[DECODER_FILE])
    state = model.state_dict()
    assert set(weights) == {k for k in state if k.startswith("decoder.")}
    for name, w in weights.items():
        assert torch.equal(w, state[name]), name
    with pytest.raises(ValueError, match="capsedu-inpage-1"):      # another file
        read_weights(struct.pack("<I", 2) + b"{}")


def test_encoder_is_int8_within_half_a_step_and_aligned(model, files):
    data = files[ENCODER_FILE]
    base, header = _header(data)
    assert base % 4 == 0 and header["config"]["routing"] == "hinton" and header["config"]["iterations"] == 3
    weights, state = read_weights(data), model.state_dict()
    assert set(weights) == {k for k in state if not k.startswith("decoder.")}
    for name, entry in header["tensors"].items():
        assert entry["offset"] % 4 == 0 and entry.get("scale_offset", 0) % 4 == 0, name
        if name in INT8_GROUPS:
            assert entry["dtype"] == "int8"
            rows = state[name].reshape(int(np.prod(entry["shape"][:entry["scale_axes"]])), -1)
            step = rows.abs().amax(dim=1, keepdim=True) / 127
            err = (weights[name].reshape(rows.shape) - rows).abs()
            assert (err <= step / 2 * (1 + 1e-5) + 1e-12).all(), name
        else:
            assert torch.equal(weights[name], state[name]), name
    assert len(data) < 0.55 * sum(state[k].numel() * 2 for k in weights)      # about half of float16


def test_int8_costs_little_on_test_digits(model, digits):
    cost = int8_error(model, digits)
    assert cost["images"] == 20 and cost["same_prediction"] == 1.0
    assert 0 < cost["max_length_error"] < 0.01 and cost["max_pixel_error"] < 2 / 255


def test_panel_carries_the_predicted_capsules_the_images_and_the_files_sizes(model, digits, tmp_path):
    panel = inpage_panel(model, digits, digits[:3])
    sizes = write_weight_files(model, tmp_path)
    assert sizes == {p.name: p.stat().st_size for p in tmp_path.iterdir()} == panel.data["files"]
    with torch.no_grad():
        capsules = model.capsules(digits)
    labels = safe_norm(capsules, dim=-1).argmax(dim=1)
    assert panel.data["digits"]["labels"] == labels.tolist()
    stored = torch.tensor(panel.data["digits"]["capsules"], dtype=torch.float32)
    assert torch.equal(stored, capsules[torch.arange(20), labels])           # float32 values, exactly
    pixels = np.frombuffer(base64.b64decode(panel.data["digits"]["images"]), np.uint8).reshape(20, 28, 28)
    assert np.abs(pixels / 255 - digits[:, 0].numpy()).max() <= 0.5 / 255
    assert len(base64.b64decode(panel.data["samples"]["images"])) == 3 * 784
    assert panel.data["samples"]["predicted"] == labels[:3].tolist()        # the buttons' "label -> reading"
    named = inpage_panel(model, digits, digits[:3], sample_labels=torch.tensor([7, 1, 4]))
    assert named.data["samples"]["labels"] == [7, 1, 4] and panel.data["samples"]["labels"] is None
    with pytest.raises(ValueError, match="3 samples but 2 sample_labels"):
        inpage_panel(model, digits, digits[:3], sample_labels=[1, 2])


def test_panel_html_loads_the_script_from_the_book_only(model, digits):
    page = inpage_panel(model, digits, digits[:2]).html()
    assert isinstance(inpage_panel(model, digits[:1], digits[:1]), InPagePanel)
    assert "http" not in page and "data-content_root" in page and f"_static/{SCRIPT}" in page
    assert page.count("</script>") == 2                                       # data and loader only
    assert (ROOT / "book" / "_static" / SCRIPT).is_file()
    with pytest.raises(TypeError, match="CapsNet"):
        inpage_panel(torch.nn.Linear(2, 2), digits, digits)
