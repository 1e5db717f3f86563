"""Chapter 10's comparison of routing methods on one budget: every method gets the same data, epochs,
batch and optimiser, is tested after every epoch on the test digits and an affine copy of them, and
has its routing step timed alone (forward, forward + backward).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch

from capsedu.core.heads import CapsuleClassifier
from capsedu.experiments.shared.keras_init import keras_init_
from capsedu.core.params import count_parameters
from capsedu.core.routing import dynamic_routing
from capsedu.data.transforms import affine_test_set
from capsedu.runtime.arguments import check_config
from capsedu.runtime.device import one_thread
from capsedu.experiments.shared.runs import Tester, start_experiment, train_epochs
from capsedu.methods.attention import self_attention_routing
from capsedu.methods.catalogue import LOSS, METHODS
from capsedu.methods.efficient_capsnet import EfficientCapsNet
from capsedu.methods.matrix_capsnet import MatrixCapsNet, MatrixCapsNetConfig
from capsedu.speed.bench import estimate_fit_seconds, median_seconds

__all__ = ["EM_SPREAD_CONFIG", "CompareConfig", "PRESETS", "make_model",
           "routing_step", "estimate_seconds", "compare_routing"]

# EM's fair control: matrix capsules (B = C = 8 types, one 3x3 stride-2 layer: 8x8 -> 3x3) on the
# conv stack of the dynamic-routing network (A = 128 channels), 287,084 parameters (dynamic: 279,488;
# "em": 15,852). Wider capsule layers would cost far more: each W_ij is applied at every position,
# and the paper's A = B = C = D = 32 (318,964 parameters) took ~60x as long per step as "em" here.
# final_lambda 15, not 3: the costs are standardised over the 10 classes, so the last iteration's
# logit gap a_t vs any a_i is at most lambda_3 * 10 / 3 and the activation gap tanh(lambda_3 * 10 / 12):
# 0.34 with lambda_3 = 0.43 (final 3), below the spread loss's final margin 0.9 (reached after 20% of
# the run); 0.945 with lambda_3 = 2.14 (final 15; the margin needs >= 12.4).
EM_SPREAD_CONFIG = MatrixCapsNetConfig(A=128, B=8, conv_caps=((8, 3, 2),), stem="su", final_lambda=15.0)


@dataclass(frozen=True)
class CompareConfig:
    """The comparison's settings; every method gets the same data, epochs, batch and optimiser."""
    methods: Tuple[str, ...] = tuple(METHODS)
    seeds: Tuple[int, ...] = (0, 1, 2)
    epochs: int = 10
    batch_size: int = 32
    lr: float = 1e-3
    n_train: Optional[int] = None     # None: all training digits of the source
    n_test: Optional[int] = None      # None: all test digits (the sample's 1,000)
    shift: int = 2                    # random shift augmentation in training, pixels
    affine_strength: float = 0.5      # chapter 9's affine test set, on a 28x28 canvas
    test_seed: int = 1234
    cost_repeats: int = 5             # timing calls of the routing step
    source: str = "sample"
    amp: str = "off"                  # EM's log-variances want float32

    def __post_init__(self):
        check_config(self, tuple(METHODS), {"shift": (0, 4)}, ("affine_strength",))


PRESETS = {
    # every code path in seconds (the tests)
    "smoke": CompareConfig(seeds=(0,), epochs=1, batch_size=16, n_train=32, n_test=32, cost_repeats=1),
    # the chapter's live preview on a 2-core CPU (about 60 s), without "em-spread", which would take it past that
    "quick": CompareConfig(methods=("dynamic", "none", "em", "attention"), seeds=(0,), epochs=2, batch_size=16,
                           n_train=1500, n_test=300, cost_repeats=3),
    # the stored run on a 2-core CPU (hours, EM most of them: the CLI prints its estimate before it starts)
    "long": CompareConfig(epochs=15),
    # a GPU: the sample with more epochs, and full MNIST
    "gpu": CompareConfig(epochs=15, batch_size=64),
    "full": CompareConfig(epochs=30, batch_size=64, source="auto"),
}


def make_model(name: str) -> torch.nn.Module:
    """The network of one of ``METHODS`` for 28x28 digits, returning class scores (B, 10)."""
    if name in ("dynamic", "none"):  # Su's conv stack + shared capsules, as in chapter 7, paper's squash
        return keras_init_(CapsuleClassifier(routing="hinton", squash_k=1.0, iterations=3 if name == "dynamic" else 1))
    if name == "em":
        return MatrixCapsNet()
    if name == "em-spread":  # the trunk initialised as dynamic's (Keras's Glorot), the capsules as "em"'s
        model = MatrixCapsNet(EM_SPREAD_CONFIG)
        keras_init_(model.conv1)
        return model
    if name == "attention":
        return EfficientCapsNet()
    raise ValueError(f"unknown method {name!r}; expected one of {tuple(METHODS)}")


def routing_step(name: str, model: torch.nn.Module, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """A function of no arguments that runs only the routing of ``model`` on the inputs it gets from
    images ``x`` (those inputs are leaves, so a backward pass stops at the routing)."""
    with torch.no_grad():
        if name in ("dynamic", "none"):
            u = model.features(x).flatten(2).transpose(1, 2)        # (B, 64, 128)
            u_hat = model.capsules.predictions(u).requires_grad_()  # (B, 64, 10, 16)
            caps = model.capsules
            return lambda: dynamic_routing(u_hat, caps.iterations, caps.routing, squash_k=caps.squash_k)
        if name == "attention":
            u_hat = model.digits.predictions(model.primary_capsules(x)).requires_grad_()  # (B, 16, 10, 16)
            bias = model.digits.bias.detach()
            return lambda: self_attention_routing(u_hat, bias)
        if name in ("em", "em-spread"):
            inputs = [(layer, V.requires_grad_(), a.requires_grad_()) for layer, V, a in model.routing_inputs(x)]
            return lambda: sum(layer.route(V, a)[1].sum() for layer, V, a in inputs)
    raise ValueError(f"unknown method {name!r}; expected one of {tuple(METHODS)}")


def _per_call_seconds(fn: Callable[[], object], repeats: int, device) -> float:
    """Per call, the fastest of ``repeats`` rounds of ~50 ms of calls: a sub-millisecond step timed one call at
    a time measures the scheduler, and on a shared machine other programs only ever add time."""
    once = min(median_seconds(fn, 1, warmup=0, device=device) for _ in range(3))   # the first is a warm-up
    calls = max(1, min(1000, int(0.05 / max(once, 1e-6))))

    def batch():
        for _ in range(calls):
            fn()
    return min(median_seconds(batch, 1, warmup=0, device=device) for _ in range(repeats)) / calls


def routing_cost(name: str, model: torch.nn.Module, x: torch.Tensor, repeats: int) -> Dict[str, float]:
    """Milliseconds of the routing step alone at batch len(x), forward and forward + backward; on a CPU on one
    thread, since a second one on a shared machine mostly adds waiting (100x the one-thread time, once)."""
    step = routing_step(name, model, x)

    def both():
        step().float().sum().backward()
    with one_thread(x.device):
        return {"routing_fwd_ms": 1e3 * _per_call_seconds(step, repeats, x.device),
                "routing_fwd_bwd_ms": 1e3 * _per_call_seconds(both, repeats, x.device),
                "routing_threads": torch.get_num_threads() if x.device.type == "cpu" else None}


def estimate_seconds(config: CompareConfig, data, device="auto") -> Dict[str, float]:
    """Seconds each method's training should take on this device, all seeds (``speed.bench.estimate_fit_seconds``
    with the margin loss, which costs what the spread loss does)."""
    n_test = 2 * len(data.x_test[:config.n_test])                    # the test digits and their affine copies
    return {name: len(config.seeds) * estimate_fit_seconds(make_model(name), data, config.epochs, config.batch_size,
                                                           device, amp="off", loss="margin", n_train=config.n_train,
                                                           test_images=n_test)
            for name in config.methods}


def test_sets(data, config: CompareConfig, device) -> Dict[str, Tuple[torch.Tensor, torch.Tensor]]:
    """"test": the first n_test test digits; "affine": the same digits, each affinely transformed once."""
    x, y = data.x_test[:config.n_test], data.y_test[:config.n_test]
    affine = affine_test_set(x.cpu(), y.cpu(), float(config.affine_strength), canvas=28, seed=config.test_seed)
    return {"test": (x.to(device), y.to(device)), "affine": (affine[0].to(device), affine[1].to(device))}


def compare_routing(config: CompareConfig, out=None, fresh: bool = False, device="auto", data=None,
                    command: Optional[str] = None, preset: Optional[str] = None, progress: bool = True,
                    return_models: bool = False, shard=None) -> Dict:
    """Train each method once per seed (skipping those ``out`` holds, unless ``fresh``).
    ``return_models``: also "models", {method: its model trained with the first seed}."""
    _, device, result, data = start_experiment(config, CompareConfig, out, fresh, device, command,
                                               preset, data, progress, shard)
    sets = test_sets(data, config, device)
    train = data.x_train[:config.n_train].to(device), data.y_train[:config.n_train].to(device)
    models = {}
    for seed, name in result.todo(config.seeds, config.methods, "method"):
        torch.manual_seed(seed)  # the initial weights
        model = make_model(name)
        tester = Tester(sets)
        records, seconds = train_epochs(model, train, config.epochs, seed, tester, progress=progress,
                                        desc=f"{name} seed {seed}", batch_size=config.batch_size, lr=config.lr,
                                        lr_schedule="constant", device=device, amp=config.amp,
                                        shift=config.shift, loss=LOSS.get(name, "margin"))
        model.eval()
        record = {"method": name, "seed": seed, "params": count_parameters(model), "seconds": round(seconds, 2),
                  "epoch_seconds": [round(r["seconds"], 2) for r in records],
                  "loss": LOSS.get(name, "margin"), "test": records[-1]["test"], "affine": records[-1]["affine"],
                  "misses": tester.misses, **routing_cost(name, model, sets["test"][0][:config.batch_size],
                                                          config.cost_repeats), "epochs": records}
        result.add(record, seconds)
        if seed == config.seeds[0]:
            models[name] = model
    output = result.finish()
    return {**output, "models": models} if return_models else output

