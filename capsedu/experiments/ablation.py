"""Experiment 2 of chapter 9, what routing and reconstruction each buy (the paper's Table 1).

Every variant x seed trains on one budget and is tested once, after its last epoch (nothing is
chosen on the test set). 1 routing iteration is no routing (every coupling stays uniform);
"-detach" stops the gradients through the inner iterations.

Chapter 9 and the claim ledger judge the stored run ``STORED`` with ``frames`` and ``CLAIMS``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from capsedu.core.capsnet import CapsNet
from capsedu.core.params import count_parameters
from capsedu.data.mnist import n_test_digits
from capsedu.data.transforms import affine_test_set, center_on_canvas, pad_and_shift
from capsedu.runtime.arguments import MAX_INT, check_config
from capsedu.experiments.shared import tables, verdicts
from capsedu.experiments.shared.runs import scored, start_experiment, train_epochs
from capsedu.speed.fast import fused_routing

__all__ = ["VARIANTS", "PAPER_TABLE1", "AblationConfig", "PRESETS", "make_variant", "ablation_experiment",
           "STORED", "AFFINE_DELTA", "CLEAN_DELTA", "CLAIMS", "frames"]

# name -> (routing iterations, reconstruction loss, detach_inner)
VARIANTS = {
    "r1": (1, False, False),
    "r1+recon": (1, True, False),
    "r3": (3, False, False),
    "r3+recon": (3, True, False),
    "r3-detach": (3, False, True),
    "r3-detach+recon": (3, True, True),
}
SHIFT_OFF_CANVAS = 2  # pixels a shifted digit's 28x28 box may leave the canvas by (the paper: 2, on 28x28)
# Sabour et al. (2017), Table 1: MNIST test error in %, mean and std over 3 trials.
PAPER_TABLE1 = {"r1": (0.34, 0.032), "r1+recon": (0.29, 0.011), "r3": (0.35, 0.036), "r3+recon": (0.25, 0.005)}

STORED = "ablation"
# "matches": the book's one rule (verdicts.margin), on affine and on clean digits
AFFINE_DELTA, CLEAN_DELTA = verdicts.DELTA["affine"], verdicts.DELTA["clean"]
# The claims chapter 9 judges (its wording is on the page), a minus b after the last epoch;
# "clean" is the shifted test set, "affine" the strength-``affine_strength`` one
CLAIMS = [
    {"id": "9.3", "a": "r3+recon", "b": "r1+recon", "test": "clean", "primary": True},
    {"id": "9.4", "a": "r3+recon", "b": "r3", "test": "clean"},
    {"id": "9.5", "a": "r3+recon", "b": "r1+recon", "test": "affine", "kind": "matches", "delta": AFFINE_DELTA},
    {"id": "9.9", "a": "r3+recon", "b": "r1+recon", "test": "clean", "kind": "matches", "delta": CLEAN_DELTA},
    {"id": "9.10", "a": "r3-detach", "b": "r3", "test": "clean", "kind": "matches", "delta": CLEAN_DELTA},
    {"id": "9.11", "a": "r3-detach+recon", "b": "r3+recon", "test": "clean", "kind": "matches",
     "delta": CLEAN_DELTA},
]


@dataclass(frozen=True)
class AblationConfig:
    """Experiment 2's settings: the variants, seeds and one training budget shared by all."""
    variants: Tuple[str, ...] = tuple(VARIANTS)
    seeds: Tuple[int, ...] = (0, 1, 2)
    epochs: int = 5
    batch_size: int = 64
    lr: float = 1e-3
    n_train: Optional[int] = None     # None: all training digits
    n_test: Optional[int] = None
    canvas: int = 40
    max_shift: int = 6
    affine_strength: float = 1.0      # experiment 1's strongest affine test set
    test_seed: int = 1234             # the same seed as experiment 1: the same test images
    capsnet_conv: int = 256
    capsnet_types: int = 32
    capsnet_decoder: Tuple[int, ...] = (512, 1024)
    recon_weight: float = 0.0005
    source: str = "sample"
    amp: str = "auto"

    def __post_init__(self):
        # the 28x28 box may leave the canvas by 2 pixels of MNIST's blank border, as the paper's
        # "shifted by up to 2 pixels in each direction with zero padding" does on 28x28
        room = (self.canvas - 28) // 2 + SHIFT_OFF_CANVAS if isinstance(self.canvas, int) else 0
        check_config(self, tuple(VARIANTS), {"canvas": (28, MAX_INT), "max_shift": (0, room)}, ("affine_strength",))


PRESETS = {
    "smoke": AblationConfig(seeds=(0,), epochs=1, batch_size=32, n_train=48, n_test=40, capsnet_conv=8,
                            capsnet_types=2, capsnet_decoder=(16,)),
    # the chapter's live preview (about 25 s on a 2-core CPU): routing or not, one seed, a small CapsNet
    "quick": AblationConfig(variants=("r1+recon", "r3+recon"), seeds=(0,), epochs=3, batch_size=16, n_train=3000,
                            n_test=300, capsnet_conv=16, capsnet_types=4, capsnet_decoder=(256, 512)),
    # the stored run on a 2-core CPU, on the paper's setting for Table 1 (the other presets: experiment 1's canvas)
    "long": AblationConfig(epochs=4, canvas=28, max_shift=2, capsnet_conv=64, capsnet_types=8),
    "gpu": AblationConfig(epochs=10, batch_size=128),
    "full": AblationConfig(epochs=30, batch_size=128, source="auto"),
}


def make_variant(name: str, config: AblationConfig) -> Tuple[torch.nn.Module, float]:
    """(CapsNet for the canvas with the variant's routing, its reconstruction-loss
    weight)."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; expected one of {tuple(VARIANTS)}")
    iterations, recon, detach = VARIANTS[name]
    model = CapsNet(image_size=(config.canvas, config.canvas),
                    conv_channels=config.capsnet_conv,
                    primary_types=config.capsnet_types,
                    decoder_hidden=config.capsnet_decoder, iterations=iterations)
    if detach:  # the same routing, with gradients through the last iteration only
        model.digits.fast_routing = functools.partial(fused_routing, detach_inner=True,
                                                      compile=False)
    return model, (config.recon_weight if recon else 0.0)


def _test_sets(data, config: AblationConfig, device) -> Dict[str, Tuple[torch.Tensor, torch.Tensor]]:
    x_test, y_test = data.x_test[:config.n_test], data.y_test[:config.n_test]
    shifts = torch.Generator().manual_seed(config.test_seed)
    affine = affine_test_set(x_test, y_test, float(config.affine_strength), config.canvas, config.test_seed)
    sets = {"clean": (pad_and_shift(x_test, config.canvas, config.max_shift, shifts), y_test), "affine": affine}
    return {k: (x.to(device), y.to(device)) for k, (x, y) in sets.items()}


def ablation_experiment(config: AblationConfig, out=None, fresh: bool = False, device="auto", data=None,
                        command: Optional[str] = None, preset: Optional[str] = None, progress: bool = True,
                        shard=None) -> Dict:
    """Train every variant once per seed (skipping finished ones, unless ``fresh``); test after the last epoch."""
    _, device, result, data = start_experiment(config, AblationConfig, out, fresh, device, command,
                                               preset, data, progress, shard)
    sets = _test_sets(data, config, device)
    train = (center_on_canvas(data.x_train[:config.n_train], config.canvas).to(device),
             data.y_train[:config.n_train].to(device))

    for seed, name in result.todo(config.seeds, config.variants, "variant"):
        torch.manual_seed(seed)  # the same initial weights for every variant of a seed
        model, recon_weight = make_variant(name, config)
        records, seconds = train_epochs(
            model, train, config.epochs, seed, lambda m: {}, progress=progress, desc=f"{name} seed {seed}",
            batch_size=config.batch_size, lr=config.lr, device=device, amp=config.amp,
            shift=config.max_shift, loss="capsnet", recon_weight=recon_weight)
        accuracy, misses, _ = scored(model, sets)
        records[-1].update(accuracy)
        result.add({"variant": name, "seed": seed, "params": count_parameters(model), "seconds": round(seconds, 2),
                    "epochs": records, "clean_error": 100 * (1 - accuracy["clean"]), "affine_acc": accuracy["affine"],
                    "misses": misses}, seconds)
    return result.finish()


def frames(data: Dict) -> Dict:
    """The tables of a stored run or preview ("runs", "items", "epochs"), each variant's name also
    under ``model``, the name ``verdict_table`` pairs on by default."""
    out = {"runs": tables.runs_table(data), "epochs": tables.epochs_table(data),
           "items": tables.items_table(data, n_test_digits(data["settings"]))}
    return {k: df.assign(model=df["variant"]) if "variant" in df else df for k, df in out.items()}
