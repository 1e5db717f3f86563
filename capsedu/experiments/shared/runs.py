"""What every stored-run experiment shares: its folder of runs with the resume rule, training epoch by epoch.

An experiment is a grid of (name, seed) runs. Each finished run is one sealed JSON file
(``capsedu.runtime.stored``), ``<name>-seed<k>.json`` (``seed<k>.json`` for a grid of one model),
written atomically by the process that trained it: nothing is merged and no two processes write
one file, so the grid can be split any way (``Shard``). ``RunFolder`` is the resume rule: a run
stored with the same settings is skipped, other settings are a one-line error, ``fresh`` clears.
The runs are read back and summarised as tables (``capsedu.experiments.shared.tables``).
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from tqdm.auto import tqdm

from capsedu.data.mnist import load_dataset
from capsedu.runtime import results
from capsedu.runtime.device import resolve_device
from capsedu.runtime.files import interrupted, plain
from capsedu.runtime.stored import RUN_FILE, StoredRunError, run_files, run_settings, run_stem, write_stored
from capsedu.training.evaluation import float_targets, predict_lengths
from capsedu.training.loop import epoch_record, start_run, train_epoch

__all__ = ["Shard", "run_folder", "clear_runs", "start_experiment", "RunFolder", "config_from_settings",
           "scored", "Tester", "train_epochs"]

class Shard(NamedTuple):
    """Shard ``index`` of ``count``: the runs i of the grid with i mod count = index."""
    index: int
    count: int


def run_folder(out) -> Path:
    """The folder ``--out`` names, created if missing (its parent must exist); a ValueError (one line) if it cannot be."""
    text = os.fspath(out)
    if not text.strip():
        raise ValueError(f"--out {text!r}: expected the folder of the experiment's runs")
    path = Path(text).expanduser()
    if path.suffix == ".json":
        raise ValueError(f"--out names the folder of the experiment's runs (one JSON file per run), "
                         f"e.g. {path.with_suffix('')}; got the file name {out}")
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out} is a file; expected the folder of the experiment's runs")
    if not path.parent.is_dir():
        raise ValueError(f"--out {out}: the folder {path.parent} does not exist")
    try:  # a real probe: os.access says yes to root where a write still fails
        path.mkdir(exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        raise ValueError(f"--out {out}: {path} is not writable") from None
    return path


def clear_runs(folder: Path) -> None:
    """``--fresh``: the files runs write go (``[<name>-]seed<k>.json``, their checkpoints and the weights a
    run file names); a file of any other name is the user's and stays."""
    for path in [p for p in folder.iterdir() if RUN_FILE.fullmatch(p.name) and p.is_file()]:
        if path.suffix == ".json":
            with contextlib.suppress(ValueError, AttributeError, TypeError, OSError):  # a damaged one names none
                weights = json.loads(path.read_bytes())["run"].get("weights")
                if isinstance(weights, str) and weights == Path(weights).name:
                    (folder / weights).unlink(missing_ok=True)
        path.unlink()


def start_experiment(config, kind: type, out, fresh: bool, device, command: Optional[str],
                     preset: Optional[str], data=None, progress: bool = True, shard: Optional[Shard] = None):
    """(folder or None, device, ``RunFolder``, data), ``out`` and its runs checked before any training."""
    if not isinstance(config, kind):
        article = "an" if kind.__name__[0] in "AEIOU" else "a"
        raise TypeError(f"config must be {article} {kind.__name__}, got {type(config).__name__}")
    folder = run_folder(out) if out is not None else None
    device = resolve_device(device)
    header = {**results.provenance(command, str(device)), "device": str(device), "preset": preset,
              "settings": plain(config)}
    runs = RunFolder(folder, header, fresh, shard)
    if data is None:
        data = load_dataset("mnist", config.source, device="cpu", verbose=progress)
    return folder, device, runs, data


class RunFolder:
    """An experiment's runs: those its folder holds (same settings) and those trained now (``folder=None``:
    nothing is written, the book's previews). ``shard``: this process trains only its share of the grid."""

    stem = staticmethod(run_stem)

    def __init__(self, folder: Optional[Path], header: Dict, fresh: bool = False, shard: Optional[Shard] = None):
        self.folder, self.header, self.shard = folder, header, shard
        self.done: Dict[str, Dict] = {}   # stem -> the run's record
        self.seconds: Dict[str, float] = {}
        self.grid, self.key = [], "model"
        if folder is None:
            return
        if fresh:
            clear_runs(folder)
        for stem, data in run_files(folder, True, run_settings(header)):
            if data.get("edited"):
                raise StoredRunError(folder / f"{stem}.json", "fails its checksum: it changed after it was written; "
                                     "move it away to train that run again, or pass --fresh")
            self.done[stem], self.seconds[stem] = data["run"], data.get("seconds", 0.0)

    def stems(self) -> List[str]:
        """The finished runs, in the grid's order (before ``todo``: as found)."""
        ordered = [self.stem(s, n) for s, n in self.grid if self.stem(s, n) in self.done]
        return ordered if self.grid else list(self.done)

    def todo(self, seeds: Sequence[int], names: Optional[Sequence[str]] = None,
             key: str = "model") -> List[Tuple[int, Optional[str]]]:
        """This process's share of the (seed, name) runs the folder lacks, seed by seed (``names`` None: one each)."""
        self.grid, self.key = [(s, n) for s in seeds for n in (names or [None])], key
        mine = self.grid if self.shard is None else self.grid[self.shard.index::self.shard.count]
        return [(s, n) for s, n in mine if self.stem(s, n) not in self.done]

    def checkpoint(self, stem: str) -> Optional[str]:
        """The file the unfinished run ``stem`` checkpoints into, until its run file is written (None: no folder)."""
        return None if self.folder is None else str(self.folder / f"{stem}.ckpt.pt")

    def add(self, record: Dict, seconds: float) -> None:
        """A finished run: its sealed file written, its checkpoint removed; then a swallowed Ctrl-C goes on."""
        stem = self.stem(record["seed"], record.get(self.key))
        self.done[stem], self.seconds[stem] = record, round(seconds, 2)
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)  # removed while training: the finished run is kept
            write_stored({**self.header, "run": record, "seconds": self.seconds[stem], "written": results.utc_now()},
                         self.folder / f"{stem}.json")
            Path(self.checkpoint(stem)).unlink(missing_ok=True)
        if interrupted():
            raise KeyboardInterrupt

    def finish(self) -> Dict:
        """The experiment so far: the header, the grid's finished runs in order, their seconds."""
        stems = self.stems()
        return {**self.header, "runs": [self.done[stem] for stem in stems],
                "seconds": round(sum(self.seconds[stem] for stem in stems), 2)}


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def config_from_settings(kind: type, stored: Dict):
    """The config dataclass ``kind`` of stored settings (their JSON lists back to tuples)."""
    return kind(**{k: _tuples(v) for k, v in stored.items()})


def scored(model, sets: Dict[str, Tuple[torch.Tensor, torch.Tensor]]):
    """(accuracy, sorted indices missed, predictions), each per name of ``sets`` (name -> images, labels):
    the misses let two runs be compared item by item (McNemar's test)."""
    accuracy, misses, predictions = {}, {}, {}
    for name, (x, y) in sets.items():
        predictions[name] = predict_lengths(model, x).argmax(dim=1)        # (N,)
        right = predictions[name] == y
        accuracy[name] = right.float().mean().item()
        misses[name] = (~right).nonzero().flatten().tolist()             # ascending
    return accuracy, misses, predictions


class Tester:
    """``tester(model)`` -> ``scored``'s accuracies (a ``train_epochs`` test); then ``misses``: that call's."""

    def __init__(self, sets):
        self.sets, self.misses = sets, {}

    def __call__(self, model) -> Dict[str, float]:
        accuracy, self.misses, _ = scored(model, self.sets)
        return accuracy


def train_epochs(model, train: Tuple[torch.Tensor, torch.Tensor], epochs: int, seed: int, test: Callable[..., Dict],
                 stop: Optional[Callable[[List[Dict]], bool]] = None,
                 fresh_data: Optional[Callable[[int], Tuple[torch.Tensor, torch.Tensor]]] = None,
                 progress: bool = True, desc: str = "train", **fit_options) -> Tuple[List[Dict], float]:
    """Train on ``train`` (images, labels) as ``fit`` does, with ``test(model)``'s numbers in each epoch's record:
    (records, seconds). ``stop(records)`` True ends training; ``fresh_data(epoch)`` replaces ``train``."""
    t0 = time.perf_counter()
    x, y = train  # fit's test split goes unused: ``test`` does the testing
    run = start_run(model, SimpleNamespace(x_train=x, y_train=y, x_test=x[:1], y_test=y[:1]), epochs=epochs,
                    seed=seed, **fit_options)
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
