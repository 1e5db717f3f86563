"""Floor 6: the shipped, pretrained CapsNet.

- ``load_capsnet(device)``: the paper's CapsNet with weights trained by our own CLI
  on the embedded sample's 9,000 training digits (with 2-px shifts), in eval mode.
- ``weights_info()``: the JSON beside the weights (command, epochs, seconds,
  hardware, date and accuracy on the sample's 1,000 test digits).
- ``export_weights(checkpoint)``: how those two files were made from a training
  checkpoint (fp16 state dict, accuracy measured after the conversion).
"""
from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Dict, Optional

import torch

from .models import CapsNet, CapsNetConfig

__all__ = ["load_capsnet", "weights_info", "export_weights", "WEIGHTS_NAME"]

WEIGHTS_NAME = "capsnet_mnist_sample"


def _weights_dir() -> Path:
    return Path(str(resources.files("capsedu") / "weights"))


def weights_info() -> Dict:
    """The metadata stored beside the shipped weights."""
    path = _weights_dir() / f"{WEIGHTS_NAME}.json"
    if not path.exists():
        raise FileNotFoundError(f"pretrained metadata {path} is missing; reinstall capsedu")
    return json.loads(path.read_text())


def load_capsnet(device="cpu", path: Optional[str] = None) -> CapsNet:
    """The pretrained paper CapsNet on ``device``, in eval mode, float32."""
    path = Path(path) if path is not None else _weights_dir() / f"{WEIGHTS_NAME}.pt"
    if not path.exists():
        raise FileNotFoundError(f"pretrained weights {path} not found; reinstall capsedu or pass path=")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file
        raise RuntimeError(f"pretrained weights {path} are unreadable ({str(err).splitlines()[0][:120]})") from None
    model = CapsNet(CapsNetConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in state["config"].items()}))
    model.load_state_dict({k: v.float() for k, v in state["model"].items()})
    return model.to(device).eval()


def _hardware() -> str:
    from .bench import cpuinfo
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    name = cpuinfo("model name")
    return f"{name}, {os.cpu_count()} CPU threads" if name else platform.machine()


def export_weights(checkpoint: str, command: str, out_dir: Optional[str] = None) -> Dict:
    """Write ``{WEIGHTS_NAME}.pt`` (fp16) and ``.json`` from a ``fit`` checkpoint; return the JSON."""
    from .data import load_dataset
    from .train import evaluate, load_checkpoint

    ckpt = load_checkpoint(checkpoint)
    config = ckpt["meta"]["model_config"]
    half = {k: v.half() if v.is_floating_point() else v for k, v in ckpt["model"].items()}
    out = Path(out_dir) if out_dir else _weights_dir()
    out.mkdir(parents=True, exist_ok=True)
    pt = out / f"{WEIGHTS_NAME}.pt"
    torch.save({"config": config, "model": half}, pt)
    data = load_dataset("mnist", source="sample", verbose=False)
    model = load_capsnet(path=str(pt))
    test = evaluate(model, data.x_test, data.y_test)
    history = ckpt["history"]
    info = {
        "weights": pt.name, "bytes": pt.stat().st_size, "dtype": "float16",
        "command": command, "epochs": ckpt["epoch"], "batch_size": ckpt["meta"]["batch_size"],
        "train_images": ckpt["meta"]["n_train"], "shift_px": ckpt["meta"]["shift"], "seed": ckpt["meta"]["seed"],
        "train_seconds": round(sum(e["seconds"] for e in history), 1),
        "hardware": _hardware(), "device": ckpt["meta"]["device"], "torch": ckpt["meta"]["torch"],
        "date": datetime.now(timezone.utc).date().isoformat(),
        "test_images": test["count"], "test_accuracy": test["accuracy"],
        "test_accuracy_fp32_checkpoint": history[-1]["test_acc"],
        "data": "capsedu embedded MNIST sample: train = first 9,000, test = last 1,000",
    }
    (out / f"{WEIGHTS_NAME}.json").write_text(json.dumps(info, indent=2) + "\n")
    return info
