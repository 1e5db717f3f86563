"""The shipped, pretrained CapsNet (``load_capsnet``, ``weights_info``).

The weights: the paper's CapsNet trained by our own CLI on the embedded sample's 9,000 training
digits (2-px shifts), a checkpoint's config and state dict converted to fp16; the accuracy in its
JSON was measured after that conversion, and the file is checked against its sha256 before use.
"""
from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path
from typing import Dict, Optional

import torch

from capsedu.core.capsnet import CapsNet, CapsNetConfig
from capsedu.runtime.checkpoints import CheckpointError, check_integrity
from capsedu.runtime.device import resolve_device
from capsedu.runtime.files import sha256_of

__all__ = ["load_capsnet", "capsnet_from_state", "weights_info", "WEIGHTS_NAME"]

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

    ``path``: another weights file in the shipped format (``config`` + ``model``), or a training
    checkpoint of a CapsNet (``fit``'s or the CLI's). The shipped file must match the sha256 in its
    JSON; any file must pass the zip CRC-32 check of every record.
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
    if isinstance(state, dict) and "config" in state and "model" in state:       # the shipped format
        config, weights = state["config"], state["model"]
    elif isinstance(state, dict) and isinstance(state.get("meta"), dict) and "model" in state:  # a checkpoint
        if state["meta"].get("model") != "CapsNet":
            raise ValueError(f"{path} holds a {state['meta'].get('model')}, not a CapsNet")
        config, weights = state["meta"].get("model_config"), state["model"]
    else:
        raise ValueError(f"{path} is neither capsedu's pretrained weights (config + model) nor a training checkpoint")
    return capsnet_from_state(config, weights, str(path)).to(device).eval()
