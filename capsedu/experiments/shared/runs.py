"""What chapter 9's three experiments share (robustness, ablation, multimnist).

- ``check_config``: the one-line checks each experiment's config dataclass runs on construction.
- ``provenance``: command, date, hardware, versions and settings for a result file.
- ``output_path`` (from ``capsedu.runtime.results``): where ``--out`` writes, checked before training.
- ``ResultFile``: one record per model x seed, written to the JSON as soon as it finishes,
  so that rerunning the same command with ``resume`` skips the finished ones.
- ``train_epochs``: ``capsedu.training.loop``'s own steps (``start_run``, ``train_epoch``), with a test
  of the model after every epoch, an optional stop (early stopping on a validation split)
  and optional fresh training data each epoch (pairs generated on the fly).
- ``spread``: mean and sample standard deviation of a list.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from tqdm.auto import tqdm

from capsedu import __version__
from capsedu.runtime import results
from capsedu.runtime.files import write_json
from capsedu.training.evaluation import float_targets
from capsedu.training.loop import epoch_record, start_run, train_epoch

__all__ = ["check_config", "provenance", "ResultFile", "spread", "train_epochs"]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_config(config, name: str, counts: Sequence[str] = (), fractions: Sequence[str] = (),
                 positive: Sequence[str] = ()) -> None:
    """Positive ints (``counts``), numbers in [0, 1] (``fractions``), positive numbers (``positive``),
    distinct non-negative int ``seeds``; a ValueError naming ``name``'s field otherwise."""
    for f in counts:
        v = getattr(config, f)
        if not _is_int(v) or v < 1:
            raise ValueError(f"{name}.{f} must be a positive int, got {v!r}")
    for f in fractions:
        vs = getattr(config, f)
        for v in (vs if isinstance(vs, tuple) else (vs,)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise ValueError(f"{name}.{f} must hold numbers in [0, 1], got {vs!r}")
    for f in positive:
        v = getattr(config, f)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name}.{f} must be a positive number, got {v!r}")
    seeds = getattr(config, "seeds", None)
    if seeds is not None and (not isinstance(seeds, tuple) or not seeds or len(set(seeds)) != len(seeds)
                              or any(not _is_int(s) or s < 0 for s in seeds)):
        raise ValueError(f"{name}.seeds must be a non-empty tuple of distinct ints >= 0, got {seeds!r}")


def settings(config) -> Dict:
    """A config dataclass as JSON-friendly settings (tuples become lists)."""
    return json.loads(json.dumps(asdict(config)))


def provenance(config, command: Optional[str], device, preset: Optional[str]) -> Dict:
    """``capsedu.runtime.results.provenance`` (date, hardware, versions) plus the command, preset and settings."""
    header = results.provenance(None, str(device))
    header["command"] = command or " ".join([os.path.basename(sys.executable), *sys.argv])
    return {**header, "device": str(device), "capsedu": __version__, "preset": preset, "settings": settings(config)}


class ResultFile:
    """The JSON of one experiment: its provenance, one record per finished model x seed, a summary.

    With ``path=None`` nothing is written (the book's previews). With ``resume=True`` and an
    existing file made with the same settings, its finished records are kept and skipped;
    different settings are an error rather than a silent mix of two experiments.
    """

    def __init__(self, path: Optional[Path], header: Dict, resume: bool = True,
                 summarise: Optional[Callable[[List[Dict]], Dict]] = None):
        self.path, self.data = path, {**header, "runs": [], "summary": None, "seconds": 0.0}
        self.summarise = summarise  # runs -> summary, recomputed after every finished run
        if path is not None and resume and Path(path).is_file():
            old = results.read_json(path)
            if old.get("settings") != header["settings"]:
                raise ValueError(f"{path} holds a run with other settings; use another --out, "
                                 f"or run without --resume to start it afresh")
            self.data["runs"] = old.get("runs", [])
            self.data["seconds"] = old.get("seconds", 0.0)
            self.data["resumed_from"] = old.get("date")

    def find(self, **key) -> Optional[Dict]:
        """The finished record whose fields equal ``key`` (e.g. model="cnn", seed=0), or None."""
        return next((r for r in self.data["runs"] if all(r.get(k) == v for k, v in key.items())), None)

    def add(self, record: Dict, seconds: float) -> None:
        """Keep a finished run and write the file, its summary brought up to date (so a partial file reads)."""
        self.data["runs"].append(record)
        self.data["seconds"] = round(self.data["seconds"] + seconds, 2)
        if self.summarise is not None:
            self.data["summary"] = self.summarise(self.data["runs"])
        self.save()

    def finish(self) -> Dict:
        if self.summarise is not None and self.data["runs"]:
            self.data["summary"] = self.summarise(self.data["runs"])
        self.save()
        return self.data

    def save(self) -> None:
        if self.path is not None:
            self.data["written"] = results.utc_now()
            write_json(self.data, self.path)


def spread(values: List[float]) -> Tuple[float, Optional[float]]:
    """(mean, sample std) of a list; the std is None for a single value."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def train_epochs(model, data, epochs: int, seed: int, test: Callable[[torch.nn.Module], Dict],
                 stop: Optional[Callable[[List[Dict]], bool]] = None,
                 fresh_data: Optional[Callable[[int], Tuple[torch.Tensor, torch.Tensor]]] = None,
                 progress: bool = True, desc: str = "train", **fit_options) -> Tuple[List[Dict], float]:
    """Train as ``fit`` does (same steps, same options), calling ``test(model)`` after each epoch.

    Returns (one record per epoch: ``fit``'s fields plus ``test``'s, seconds). ``stop(records)``
    True ends training after that epoch. ``fresh_data(epoch)`` -> (x_train, y_train) replaces the
    training set before each epoch. ``data.x_test`` is not used here: ``test`` does the testing.
    """
    t0 = time.perf_counter()
    run = start_run(model, data, epochs, seed=seed, **fit_options)
    records = []
    for epoch in tqdm(range(1, epochs + 1), desc=desc, unit="epoch", disable=not progress, leave=False):
        if fresh_data is not None:
            x, y = fresh_data(epoch)
            run.x_train, run.y_train = x.to(run.device), y.to(run.device)
            run.t_train = float_targets(run.y_train, run.t_train.shape[1])  # (N, C)
        e0 = time.perf_counter()
        sums = train_epoch(run, epoch)
        record = epoch_record(run, epoch, sums, None, time.perf_counter() - e0)
        del record["test_acc"]  # the tests below say which set they use
        record.update(test(model))
        model.train()
        records.append(record)
        if stop is not None and stop(records):
            break
    return records, time.perf_counter() - t0
