"""What each chapter trains in each mode, and how long the stored benchmark run took.

Chapter 0 prints the quick-mode plan with the measured CPU times; the appendix on running the
book at scale prints the ``gpu`` and ``full`` plans with estimated times on a T4.
"""
from __future__ import annotations

import json

from capsedu import MODES
from capsedu.runtime.results import benchmarks_dir

NOTHING = "nothing trained"
# chapter -> mode -> (what it trains, images it trains on: epochs x digits); "all": every mode.
# Chapter 7's entry is filled in by chapter_plan from its presets.
_PLAN = {
    "00_setup": {"all": (NOTHING + ": the device and mode check", 0)},
    "01_intuition": {"all": (NOTHING + ": small tensors, a few sample digits", 0)},
    "02_capsule": {"all": (NOTHING + ": a capsule layer on small tensors", 0)},
    "03_routing": {"all": (NOTHING + ": routing by hand; the shipped weights", 0)},
    "04_architecture": {"all": (NOTHING + ": shapes and parameter counts", 0)},
    "05_training": {"smoke": ("CapsNet, 64 sample digits x 2 epochs", 2 * 64),
                    "quick": ("CapsNet, 3,000 sample digits x 2 epochs", 2 * 3000),
                    "gpu": ("CapsNet (fast path), 60,000 MNIST digits x 5 epochs", 5 * 60000),
                    "full": ("CapsNet (fast path), 60,000 MNIST digits x 30 epochs", 30 * 60000)},
    "06_learned": {"all": (NOTHING + ": the shipped weights, decoded and perturbed", 0)},
    "07_two_digits": {},
    "08_fast": {"smoke": ("timings at batch 4; 2 x 64 digits x 1 epoch", 2 * 64),
                "quick": ("timings at batch 32; 2 x 1,024 sample digits x 1 epoch", 2 * 1024),
                "gpu": ("timings at batch 128; 2 x 60,000 digits x 1 epoch", 2 * 60000),
                "full": ("timings at batch 128; 2 x 60,000 digits x 3 epochs", 2 * 3 * 60000)},
    "09_paper_experiments": {"all": ("three previews (affine robustness, ablation, MultiMNIST): "
                                     "the chapter prints its settings and estimate", None)},
    "10_after_routing": {"all": ("four routing methods on one budget: the chapter prints its "
                                 "settings and estimate", None)},
    "11_tutorial_code": {
        "smoke": ("the tutorial code and the fixed one, 2 x 48 sample digits x 1 epoch", 2 * 48),
        "quick": ("the tutorial code and the fixed one, 2 x 500 sample digits x 1 epoch", 2 * 500),
        "gpu": ("the tutorial code and the fixed one, 2 x 9,000 sample digits x 2 epochs",
                2 * 2 * 9000),
        "full": ("the tutorial code and the fixed one, 2 x 9,000 sample digits x 2 epochs",
                 2 * 2 * 9000)},
}


def chapter_plan(mode: str, two_digit_scale: float = 1.0) -> dict:
    """chapter -> (what it trains in ``mode``, training images, or None where the chapter says).

    Chapter 7's networks are smaller than CapsNet: its images are multiplied by
    ``two_digit_scale`` (a two-digit network's training FLOP over CapsNet's) to count them in
    CapsNet-sized steps; 1.0 counts them as they are."""
    from capsedu.experiments.two_digits.config import PRESETS

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    c = PRESETS[mode]
    n = c.n_train or (9000 if c.source == "sample" else 60000)
    low, high = min(c.epochs.values()), max(c.epochs.values())
    epochs = f"{low}" if low == high else f"{low}-{high}"
    two_digits = (f"{len(c.models)} nets x {len(c.seeds)} seed(s), {n:,} digits x {epochs} epochs",
                  sum(c.epochs.values()) * len(c.seeds) * n * two_digit_scale)
    return {chapter: two_digits if chapter == "07_two_digits" else plan.get(mode, plan.get("all"))
            for chapter, plan in _PLAN.items()}


def stored_cpu_times(mode: str = "quick"):
    """(notebook name -> seconds, or None where it failed; one line per stored run read).

    Every stored ``chapters-cpu-*.json`` run of ``mode``, by date, the newest winning; each line
    names the file, its hardware, date, the machine's 1-minute load over the run and its note."""
    seconds, sources = {}, []
    for path in sorted(benchmarks_dir().glob("chapters-cpu-*.json")):
        run = json.loads(path.read_text())
        if run.get("mode") != mode:
            continue
        seconds.update({c["notebook"]: c["seconds"] if c["ok"] else None for c in run["chapters"]})
        loads = [x for c in run["chapters"] for x in c.get("load_average_1min_before_after", [])]
        load = f", 1-min load {min(loads):.1f} to {max(loads):.1f}" if loads else ""
        incomplete = "" if run.get("complete", True) else ", incomplete"
        note = f"; {run['note']}" if run.get("note") else ""
        sources.append(f"{path.name} ({run['hardware']}, {run['date'][:10]}{load}{incomplete}{note})")
    return seconds, sources


def chapter_seconds(times: dict, chapter: str):
    """The stored seconds of ``chapter`` (e.g. "05_training"), None if it failed, "not stored"."""
    return next((s for name, s in times.items() if name.startswith(chapter)), "not stored")
