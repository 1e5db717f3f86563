"""The shipped, pretrained CapsNet.

- ``load_capsnet(device)``: the paper's CapsNet with weights trained by our own CLI
  on the embedded sample's 9,000 training digits (with 2-px shifts), in eval mode;
  the file is checked against the sha256 in its JSON before it is read.
- ``capsnet_from_state(config, state)``: a CapsNet rebuilt from a stored config and weights
  (here and in the CLI), the shapes checked against the config before anything is allocated.
- ``weights_info()``: the JSON beside the weights (command, epochs, seconds,
  hardware, date and accuracy on the sample's 1,000 test digits).
- ``export_weights(checkpoint)``: how those two files were made from a training
  checkpoint (fp16 state dict, accuracy measured after the conversion).
"""
from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path
from typing import Dict, Optional

import torch

from capsedu.core.capsnet import CapsNet, CapsNetConfig
from capsedu.runtime.checkpoints import CheckpointError, check_integrity, save_atomic
from capsedu.runtime.device import resolve_device
from capsedu.runtime.files import sha256_of, write_atomic
from capsedu.runtime.results import provenance

__all__ = ["load_capsnet", "capsnet_from_state", "weights_info", "export_weights", "WEIGHTS_NAME"]

WEIGHTS_NAME = "capsnet_mnist_sample"


def _weights_dir() -> Path:
    return Path(str(resources.files("capsedu") / "weights"))


def weights_info() -> Dict:
    """The metadata stored beside the shipped weights."""
    path = _weights_dir() / f"{WEIGHTS_NAME}.json"
    if not path.exists():
        raise FileNotFoundError(f"pretrained metadata {path} is missing; reinstall capsedu")
    return json.loads(path.read_text())




def config_from_dict(values) -> CapsNetConfig:
    """The CapsNetConfig stored in a checkpoint or in the pretrained weights' file; unknown keys are an error."""
    if not isinstance(values, dict):
        raise TypeError(f"a CapsNet config must be a dict of CapsNetConfig fields, got {type(values).__name__}")
    unknown = set(values) - {f.name for f in dataclasses.fields(CapsNetConfig)}
    if unknown:
        raise ValueError(f"unknown CapsNetConfig field(s) {sorted(unknown)}")
    return CapsNetConfig(**values)


def capsnet_from_state(config, state, source: str) -> CapsNet:
    """A CapsNet built from a stored config (dict) and loaded with ``state``; ``source`` names the file.

    The weights' shapes are compared with those the config implies (on the meta device, where
    nothing is allocated) before anything is built, so a damaged or hand-edited config cannot
    make capsedu allocate gigabytes.
    """
    try:
        config = config_from_dict(config)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{source} holds an invalid CapsNet config: {err}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{source} holds no model state (a dict of tensors)")
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in CapsNet(config).state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if got != expected:
        wrong = sorted(set(expected) ^ set(got)) or [k for k in expected if expected[k] != got[k]]
        name = wrong[0]
        raise ValueError(f"{source}: the weights do not match the stored config ({len(wrong)} tensor(s) differ, "
                         f"e.g. {name}: config expects {expected.get(name)}, file has {got.get(name)})")
    model = CapsNet(config)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model


def load_capsnet(device="cpu", path: Optional[str] = None) -> CapsNet:
    """The pretrained paper CapsNet on ``device``, in eval mode, float32.

    ``path``: another weights file written by ``export_weights``, or a training checkpoint of a
    CapsNet (``fit``'s or the CLI's). The shipped file must match the sha256 in its JSON; any
    file must pass the zip CRC-32 check of every record.
    """
    device = resolve_device(device)
    shipped = path is None
    path = Path(path) if path is not None else _weights_dir() / f"{WEIGHTS_NAME}.pt"
    if not path.is_file():
        raise FileNotFoundError(f"pretrained weights {path} not found" + (" (it is a folder)" if path.is_dir() else "")
                                + "; reinstall capsedu or pass path=")
    if shipped:
        expected, actual = weights_info().get("sha256"), sha256_of(path)
        if actual != expected:
            raise RuntimeError(f"pretrained weights {path} are damaged: sha256 {actual}, expected {expected} "
                               "(from their JSON); reinstall capsedu")
    try:
        check_integrity(str(path), "pretrained weights")
        state = torch.load(path, map_location="cpu", weights_only=True)
    except CheckpointError as err:
        raise RuntimeError(f"{err}; the file is unreadable") from None
    except Exception as err:  # a foreign pickle, an unreadable file
        raise RuntimeError(f"pretrained weights {path} are unreadable ({str(err).splitlines()[0][:120]})") from None
    if isinstance(state, dict) and "config" in state and "model" in state:       # export_weights' file
        config, weights = state["config"], state["model"]
    elif isinstance(state, dict) and isinstance(state.get("meta"), dict) and "model" in state:  # a checkpoint
        if state["meta"].get("model") != "CapsNet":
            raise ValueError(f"{path} holds a {state['meta'].get('model')}, not a CapsNet")
        config, weights = state["meta"].get("model_config"), state["model"]
    else:
        raise ValueError(f"{path} is neither capsedu's pretrained weights (config + model) nor a training checkpoint")
    return capsnet_from_state(config, weights, str(path)).to(device).eval()


def export_weights(checkpoint: str, command: str, out_dir: Optional[str] = None) -> Dict:
    """Write ``{WEIGHTS_NAME}.pt`` (fp16) and ``.json`` from a ``fit`` checkpoint; return the JSON."""
    from capsedu.data.mnist import load_dataset
    from capsedu.runtime.checkpoints import load_checkpoint
    from capsedu.training.evaluation import evaluate

    ckpt = load_checkpoint(checkpoint)
    config = ckpt["meta"].get("model_config")
    if ckpt["meta"].get("model") != "CapsNet" or not isinstance(config, dict):
        raise ValueError(f"{checkpoint} holds a {ckpt['meta'].get('model')}; export_weights exports CapsNets only")
    capsnet_from_state(config, ckpt["model"], checkpoint)  # the config and weights fit together
    half = {k: v.half() if v.is_floating_point() else v for k, v in ckpt["model"].items()}
    out = Path(out_dir) if out_dir else _weights_dir()
    out.mkdir(parents=True, exist_ok=True)
    pt = out / f"{WEIGHTS_NAME}.pt"
    save_atomic({"config": config, "model": half}, str(pt))
    data = load_dataset("mnist", source="sample", verbose=False)
    model = load_capsnet(path=str(pt))
    test = evaluate(model, data.x_test, data.y_test)
    history = ckpt["history"]
    info = {  # the one provenance header (command, date, hardware, versions); torch: the training's
        **provenance(command, str(resolve_device("auto"))),
        "weights": pt.name, "bytes": pt.stat().st_size, "sha256": sha256_of(pt), "dtype": "float16",
        "epochs": ckpt["epoch"], "batch_size": ckpt["meta"]["batch_size"],
        "train_images": ckpt["meta"]["n_train"], "shift_px": ckpt["meta"]["shift"], "seed": ckpt["meta"]["seed"],
        "train_seconds": round(sum(e["seconds"] for e in history), 1),
        "device": ckpt["meta"]["device"], "torch": ckpt["meta"]["torch"],
        "test_images": test["count"], "test_accuracy": test["accuracy"],
        "test_accuracy_fp32_checkpoint": history[-1]["test_acc"],
        "data": "capsedu embedded MNIST sample: train = first 9,000, test = last 1,000",
    }
    write_atomic(str(out / f"{WEIGHTS_NAME}.json"), lambda f: f.write((json.dumps(info, indent=2) + "\n").encode()))
    return info
