"""Experiment 3 of chapter 9, overlapping digits taken apart (the paper's MultiMNIST): top-2 accuracy
on pairs of test digits, after training on pairs drawn afresh every epoch.

The pairs have three channels: the overlay, then the lower-class and the higher-class digit alone.
``fit``'s reconstruction loss compares the decoder's output with the model's input, so ``PairCapsNet``
reads channel 0 and returns it unchanged beside one reconstruction per true digit, from that digit's
capsule alone: the loss is then exactly the paper's, the sum of the two digits' errors.

``STORED``, ``CLAIMS`` and ``frames`` as the other experiments of chapter 9 have them: one model and
no control trained on these pairs, so no claim is judged (``CLAIMS`` is empty).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from capsedu.core.capsnet import CapsNet
from capsedu.core.params import count_parameters
from capsedu.core.squashing import safe_norm
from capsedu.data.pairs import overlapping_pairs
from capsedu.runtime.arguments import MAX_INT, check_config
from capsedu.experiments.shared import tables
from capsedu.experiments.shared.runs import config_from_settings, start_experiment, train_epochs
from capsedu.runtime.files import sha256_of
from capsedu.runtime.results import results_dir
from capsedu.training.evaluation import count_correct, predict_lengths

__all__ = ["PairCapsNet", "MultiMNISTConfig", "PRESETS", "multimnist_experiment", "load_model",
           "PAPER_ERROR", "STORED", "CLAIMS", "frames"]

PAPER_ERROR = 5.2  # Sabour et al. (2017), Table 1: MultiMNIST test error %, 3 iterations with reconstruction
STORED = "multimnist"
CLAIMS: list = []   # a verdict needs a second model trained on the same pairs (the paper's CNN)


class PairCapsNet(nn.Module):
    """CapsNet on the overlay (channel 0); ``forward(x, labels)`` -> (capsules, lengths, reconstructions)."""

    def __init__(self, canvas: int = 36, **capsnet_options):
        super().__init__()
        self.capsnet = CapsNet(image_size=(canvas, canvas), **capsnet_options)
        self.config = self.capsnet.config

    def _decode(self, digit: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
        """One reconstruction per column of ``classes`` (B, K), each from that capsule alone: (B, K, H, W)."""
        k = classes.shape[1]
        masks = F.one_hot(classes, self.config.num_classes)             # (B, K, C)
        recon = [self.capsnet.decoder(digit, masks[:, c]) for c in range(k)]  # K x (B, 1, H, W)
        return torch.cat(recon, dim=1)                                   # (B, K, H, W)

    def forward(self, x: torch.Tensor, labels: Optional[torch.Tensor] = None):
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.shape[1] not in (1, 3):
            got = getattr(x, "shape", type(x))
            raise ValueError("PairCapsNet expects (batch, 1 or 3, H, W) images "
                             f"(overlay [, digit, digit]), got {got}")
        overlay = x[:, :1]                      # (B, 1, H, W)
        digit = self.capsnet.capsules(overlay)  # (B, 10, 16)
        lengths = safe_norm(digit, dim=-1)      # (B, 10)
        if labels is not None and (labels.dim() != 2 or not labels.is_floating_point()):
            raise ValueError("PairCapsNet trains on multi-hot float labels (B, 10) "
                             "with two ones per row")
        # inference: the two longest capsules; training: the two true classes; the lower
        # class first (as x's channels): (B, 2)
        scores = lengths if labels is None else labels
        classes = scores.topk(2, dim=1).indices.sort(dim=1).values
        recon = self._decode(digit, classes)    # (B, 2, H, W)
        # (B, 3, H, W)
        return digit, lengths, torch.cat([overlay.detach(), recon], dim=1)

    @torch.no_grad()
    def segment(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(the two longest capsules' classes (B, 2), lower first; their reconstructions (B, 2, H, W))."""
        was = self.training
        self.eval()
        try:
            digit = self.capsnet.capsules(x[:, :1])                      # (B, 10, 16)
            classes = safe_norm(digit, dim=-1).topk(2, dim=1).indices.sort(dim=1).values  # (B, 2)
            return classes, self._decode(digit, classes)
        finally:
            self.train(was)


@dataclass(frozen=True)
class MultiMNISTConfig:
    """Experiment 3's settings: pairs per epoch (new ones each epoch), model widths, budget."""
    seeds: Tuple[int, ...] = (0,)
    epochs: int = 10
    pairs_per_epoch: int = 9000
    n_test_pairs: int = 2000
    n_train: Optional[int] = None     # training digits the pairs are drawn from (None: all)
    n_test: Optional[int] = None      # test digits the test pairs are drawn from
    canvas: int = 36
    max_shift: int = 4
    batch_size: int = 64
    lr: float = 1e-3
    capsnet_conv: int = 256
    capsnet_types: int = 32
    capsnet_decoder: Tuple[int, ...] = (512, 1024)
    recon_weight: float = 0.0005
    test_seed: int = 4321
    source: str = "sample"
    amp: str = "auto"
    save_weights: bool = True         # fp16 weights next to the JSON (``out`` only), with their sha256

    def __post_init__(self):
        room = (self.canvas - 28) // 2 if isinstance(self.canvas, int) else 0   # both digits stay on the canvas
        check_config(self, bounds={"n_train": (2, MAX_INT), "n_test": (2, MAX_INT), "canvas": (28, MAX_INT),
                                   "max_shift": (0, room)})


PRESETS = {
    "smoke": MultiMNISTConfig(epochs=1, pairs_per_epoch=64, n_test_pairs=40, batch_size=32, capsnet_conv=8,
                              capsnet_types=2, capsnet_decoder=(16,)),
    # the chapter's live preview (about 40 s on a 2-core CPU): a small CapsNet, 4 x 6,000 pairs
    "quick": MultiMNISTConfig(epochs=3, pairs_per_epoch=4000, n_test_pairs=300, batch_size=16, capsnet_conv=16,
                              capsnet_types=4, capsnet_decoder=(256, 512)),
    # the stored run on a 2-core CPU: a quarter of the paper's width
    "long": MultiMNISTConfig(epochs=12, pairs_per_epoch=6000, capsnet_conv=64, capsnet_types=8),
    "gpu": MultiMNISTConfig(epochs=20, pairs_per_epoch=60000, batch_size=128),
    "full": MultiMNISTConfig(epochs=50, pairs_per_epoch=300000, n_test_pairs=10000, batch_size=128, source="auto"),
}


def build_model(config: MultiMNISTConfig) -> PairCapsNet:
    return PairCapsNet(config.canvas, conv_channels=config.capsnet_conv, primary_types=config.capsnet_types,
                       decoder_hidden=config.capsnet_decoder)


def multimnist_experiment(config: MultiMNISTConfig, out=None, fresh: bool = False, device="auto", data=None,
                          command: Optional[str] = None, preset: Optional[str] = None, progress: bool = True,
                          return_model: bool = False, shard=None) -> Dict:
    """Train one PairCapsNet per seed (skipping finished seeds, unless ``fresh``); top-2 accuracy after each epoch.
    ``return_model``: also "model", the last one trained, and "test" (the test pairs and targets)."""
    path, device, result, data = start_experiment(config, MultiMNISTConfig, out, fresh, device,
                                                  command, preset, data, progress, shard)
    todo = [seed for seed, _ in result.todo(config.seeds)]
    x_digits, y_digits = data.x_train[:config.n_train], data.y_train[:config.n_train]
    test_x, test_t = overlapping_pairs(data.x_test[:config.n_test], data.y_test[:config.n_test], config.n_test_pairs,
                                       config.canvas, config.max_shift, torch.Generator().manual_seed(config.test_seed),
                                       separate=True)
    test_x, test_t = test_x.to(device), test_t.to(device)
    for record in result.done.values():  # the resumed seeds' weights pass their sha256, before any training
        if "weights" in record:
            _verify_weights(path / str(record["weights"]), record)
    for seed in todo if path is not None and config.save_weights and not fresh else ():
        file = _weights_path(path, seed)  # no run file records it: the user's (never overwritten), or left by a kill
        if (file.exists() or file.is_symlink()) and not _left_by_a_kill(file, config):
            raise ValueError(f"{file} exists and no run in {path} records it; capsedu never overwrites weights it "
                             "did not write: move it away, or pass --fresh")

    def test(model) -> Dict:
        return {"top2": count_correct(predict_lengths(model, test_x), test_t).item() / len(test_t)}

    model = None
    for seed in todo:
        def fresh_pairs(epoch, seed=seed):  # new pairs every epoch, reproducible from (seed, epoch)
            return overlapping_pairs(x_digits, y_digits, config.pairs_per_epoch, config.canvas, config.max_shift,
                                     torch.Generator().manual_seed(10_000 * seed + epoch), separate=True)
        torch.manual_seed(seed)
        model = build_model(config)
        records, seconds = train_epochs(
            model, fresh_pairs(0), config.epochs, seed, test, fresh_data=fresh_pairs, progress=progress,
            desc=f"multimnist seed {seed}", batch_size=config.batch_size, lr=config.lr, device=device,
            amp=config.amp, shift=0, loss="capsnet", recon_weight=config.recon_weight)
        record = {"seed": seed, "params": count_parameters(model), "seconds": round(seconds, 2), "epochs": records,
                  "top2": records[-1]["top2"], "error": 100 * (1 - records[-1]["top2"])}
        if path is not None and config.save_weights:
            record.update(_save_weights(model, _weights_path(path, seed)))
        result.add(record, seconds)
    output = result.finish()
    if return_model:
        output = {**output, "model": model, "test": (test_x, test_t)}
    return output


def frames(data: Dict) -> Dict:
    """"runs" and "epochs" of a stored run or preview; "items" is empty (no per-pair outcomes stored)."""
    return {"runs": tables.runs_table(data), "epochs": tables.epochs_table(data),
            "items": tables.items_table(data, 0)}


def _weights_path(folder: Path, seed: int) -> Path:
    return folder / f"multimnist_seed{seed}.pt"


def _verify_weights(file: Path, record: Dict) -> None:
    """The weights file of ``record`` is there and has the sha256 it records; else one line."""
    if not file.is_file():
        raise ValueError(f"weights {file} of seed {record.get('seed')} are missing"
                         f"{' (a folder is in their place)' if file.is_dir() else ''}; restore them, "
                         "or pass --fresh to retrain")
    digest = sha256_of(file)
    if digest != record.get("weights_sha256"):
        raise ValueError(f"weights {file} have sha256 {digest[:16]}..., expected {str(record.get('weights_sha256'))[:16]}..."
                         f" (recorded in the JSON): the file is damaged or was replaced; restore it, or pass --fresh")


def _left_by_a_kill(file: Path, config: MultiMNISTConfig) -> bool:
    """``file`` holds this config's fp16 weights: a run killed between them and its run file wrote it."""
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception:  # unreadable, foreign: not ours
        return False
    want = build_model(config).state_dict()
    return isinstance(state, dict) and state.keys() == want.keys() and all(
        isinstance(v, torch.Tensor) and v.dtype == torch.float16 and v.shape == want[k].shape for k, v in state.items())


def _save_weights(model: nn.Module, path: Path) -> Dict:
    """fp16 weights (half the bytes; the figure does not need more), written atomically, and their sha256."""
    from capsedu.runtime.checkpoints import save_atomic
    state = {k: v.detach().to("cpu", torch.float16) for k, v in model.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)  # removed while training: the run is kept
    save_atomic(state, str(path))
    return {"weights": path.name, "weights_sha256": sha256_of(path),
            "weights_bytes": path.stat().st_size}


def load_model(result: Dict, folder=None, seed: Optional[int] = None) -> PairCapsNet:
    """The stored model of ``result`` from ``folder`` (default: the stored runs'), sha256-checked, in float32."""
    if folder is None:
        folder = results_dir() / "multimnist"
    record = next((r for r in result["runs"] if seed is None or r["seed"] == seed), None)
    if record is None or "weights" not in record:
        raise ValueError(f"the multimnist result holds no stored weights{'' if seed is None else f' of seed {seed}'}")
    path = Path(folder) / record["weights"]
    _verify_weights(path, record)
    model = build_model(config_from_settings(MultiMNISTConfig, result["settings"]))
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval()
