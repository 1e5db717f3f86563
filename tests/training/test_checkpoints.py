"""Damaged, incomplete, foreign and oversized checkpoints and weights: refused with one line naming
the file, never loaded silently, never able to make capsedu allocate what their config asks for."""
import copy
import json
import random
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from cli_helpers import TINY, noise

import capsedu
import capsedu.training.pretrained as pretrained
from capsedu.core.capsnet import CapsNet
from capsedu.runtime.checkpoints import (REQUIRED_KEYS, CheckpointError, lay_out_like_parameters,
                                        load_checkpoint, save_atomic)
from capsedu.training.loop import fit
from capsedu.training.pretrained import WEIGHTS_NAME, capsnet_from_state, load_capsnet

PACKAGE = Path(capsedu.__file__).parent


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A real one-epoch checkpoint of a tiny CapsNet, and the model that wrote it."""
    data = noise(32, 8)
    torch.manual_seed(0)
    model = CapsNet(**TINY)
    path = tmp_path_factory.mktemp("ckpt") / "checkpoint.pt"
    fit(model, data, epochs=1, batch_size=16, checkpoint=str(path), device="cpu", progress=False)
    return SimpleNamespace(path=path, model=model, data=data)


def copy_to(src: Path, dst: Path, flip: int = None) -> Path:
    blob = bytearray(src.read_bytes())
    if flip is not None:
        blob[flip // 8] ^= 1 << (flip % 8)
    dst.write_bytes(bytes(blob))
    return dst


def test_flipped_bits_are_refused_or_harmless(ckpt, tmp_path):
    """40 random single-bit flips: each is refused naming the file, or the file loads bit-identical."""
    ref = load_checkpoint(str(ckpt.path))
    rng, size, refused = random.Random(0), ckpt.path.stat().st_size, 0
    for _ in range(40):
        bad = copy_to(ckpt.path, tmp_path / "bad.pt", rng.randrange(size * 8))
        try:
            got = load_checkpoint(str(bad))
        except CheckpointError as err:
            assert str(bad) in str(err) and "\n" not in str(err)
            refused += 1
            continue
        assert all(torch.equal(got["model"][k], v) for k, v in ref["model"].items()) and got["meta"] == ref["meta"]
    assert refused >= 30                        # nearly all of the file is CRC-protected tensor and pickle data


@pytest.mark.parametrize("key", sorted(REQUIRED_KEYS))
def test_incomplete_checkpoints_name_the_missing_key(ckpt, tmp_path, key):
    state = torch.load(ckpt.path, weights_only=True)
    del state[key]
    save_atomic(state, str(tmp_path / "partial.pt"))
    with pytest.raises(CheckpointError, match=rf"partial\.pt is incomplete: it lacks {key}$"):
        load_checkpoint(str(tmp_path / "partial.pt"))


def test_malformed_folder_and_pickle_payloads(ckpt, tmp_path):
    state = torch.load(ckpt.path, weights_only=True)
    save_atomic({**state, "epoch": "1"}, str(tmp_path / "typed.pt"))
    with pytest.raises(CheckpointError, match="epoch is a str, expected int"):
        load_checkpoint(str(tmp_path / "typed.pt"))
    with pytest.raises(CheckpointError, match="is a folder; expected a checkpoint file") as err:
        load_checkpoint(str(tmp_path))
    assert "delete" not in str(err.value)                  # never advise deleting a folder
    torch.save({"format": 1, "payload": SimpleNamespace(a=1)}, tmp_path / "pickle.pt")  # arbitrary objects
    with pytest.raises(CheckpointError, match="unreadable or corrupt .*delete the file"):
        load_checkpoint(str(tmp_path / "pickle.pt"))


def test_every_torch_load_in_the_package_is_weights_only():
    calls = [(f.name, line) for f in PACKAGE.rglob("*.py") for line in f.read_text().splitlines()
             if re.search(r"torch\.load\(", line) and not line.lstrip().startswith(("#", '"', "-"))]
    assert calls and all("weights_only=True" in line for _, line in calls), calls


# ---------------------------------------------------------------- configs vs weights
def test_stored_configs_must_match_the_weights_and_stay_small(ckpt):
    weights = torch.load(ckpt.path, weights_only=True)["model"]
    config = {**torch.load(ckpt.path, weights_only=True)["meta"]["model_config"]}
    assert isinstance(capsnet_from_state(config, weights, "ok.pt"), CapsNet)
    with pytest.raises(ValueError, match=r"x\.pt: the weights do not match the stored config .*conv1"):
        capsnet_from_state({**config, "conv_channels": 16}, weights, "x.pt")
    with pytest.raises(ValueError, match=r"conv1\.weight: config expects \(200000, 1, 9, 9\), file has \(8, 1, 9, 9\)"):
        capsnet_from_state({**config, "conv_channels": 200_000}, weights, "x.pt")   # checked on the meta device
    paper = {**config, "conv_channels": 200_000, "primary_types": 32, "primary_dim": 8}
    with pytest.raises(ValueError, match="parameters, more than"):            # was a 16.6 GB allocation
        capsnet_from_state(paper, weights, "x.pt")
    with pytest.raises(ValueError, match="invalid CapsNet config: unknown CapsNetConfig field"):
        capsnet_from_state({**config, "colour": 1}, weights, "x.pt")


def test_load_capsnet_reads_training_checkpoints_and_checks_devices(ckpt):
    model = load_capsnet(path=str(ckpt.path))
    assert not model.training and torch.equal(model.conv1.weight, ckpt.model.conv1.weight)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda' asked for, but torch sees no CUDA GPU"):
            load_capsnet(device="cuda", path=str(ckpt.path))


def test_shipped_weights_carry_a_sha256_that_is_checked(tmp_path, monkeypatch):
    shipped = PACKAGE / "weights"
    info = json.loads((shipped / f"{WEIGHTS_NAME}.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{64}", info["sha256"])
    for name in (f"{WEIGHTS_NAME}.json", f"{WEIGHTS_NAME}.pt"):
        shutil.copy(shipped / name, tmp_path / name)
    copy_to(shipped / f"{WEIGHTS_NAME}.pt", tmp_path / f"{WEIGHTS_NAME}.pt", flip=8 * 5_000_000 + 6)
    monkeypatch.setattr(pretrained, "_weights_dir", lambda: tmp_path)
    with pytest.raises(RuntimeError, match=rf"{WEIGHTS_NAME}\.pt are damaged: sha256 [0-9a-f]{{64}}, expected"):
        load_capsnet()
    with pytest.raises(RuntimeError, match="fails the CRC-32 check"):       # the same copy by path: the zip CRC
        load_capsnet(path=str(tmp_path / f"{WEIGHTS_NAME}.pt"))


def test_resumed_adam_state_takes_its_parameters_layout():
    """A checkpoint of one layout resumed on the other (fast path vs readable model) steps as if
    never interrupted: fused Adam reads state laid out unlike its parameter wrongly."""
    torch.manual_seed(0)
    w, g1, g2 = torch.randn(3, 4, 5, 6)
    a = torch.nn.Parameter(w.clone())
    opt_a = torch.optim.Adam([a], lr=1e-2, fused=True)
    a.grad = g1
    opt_a.step()
    state = copy.deepcopy(opt_a.state_dict())   # as a checkpoint holds it
    b = torch.nn.Parameter(a.detach().permute(2, 0, 1).contiguous().permute(1, 2, 0))  # other strides
    opt_b = torch.optim.Adam([b], lr=1e-2, fused=True)
    opt_b.load_state_dict(state)
    lay_out_like_parameters(opt_b)
    for p, opt in ((a, opt_a), (b, opt_b)):
        p.grad = torch.empty_like(p).copy_(g2)   # autograd's gradients take the parameter's strides
        opt.step()
    assert torch.equal(a, b)
