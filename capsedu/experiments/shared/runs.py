"""What every stored-run experiment shares (two-digits, robustness, ablation, multimnist, compare-routing).

- ``check_config``: the one-line checks each experiment's config dataclass runs on construction.
- ``run_header``: ``capsedu.runtime.results.provenance`` plus the device, preset and settings.
- ``start_experiment``: the preamble every experiment runs: check the config's type, where ``out``
  writes (before any training), the device, the ``ResultFile`` to resume, the data.
- ``ResultFile``: one record per model x seed, written to the JSON as soon as it finishes. The one
  resume rule: an existing file of the same settings resumes (its finished runs are skipped, and
  ``checkpoint`` gives each unfinished run a file to continue from); ``fresh`` starts over; other
  settings are a one-line error naming them (``resumable``; the command lines call ``check_out``
  first). ``todo`` lists the runs left, in the order of the grid. With a ``shard`` (``--devices``,
  ``--shard``, torchrun: ``capsedu.experiments.shared.grid``) the file is the shard's, beside
  ``out``, under the same rule; the runs ``out`` holds are skipped, and ``finish`` merges the
  shards into ``out`` once all are done.
  The file is the one stored-run format (``capsedu.runtime.stored``: version, schema, checksum);
  a damaged one is a one-line ``StoredRunError``. The file is locked (``OutputLock``) while the
  run writes it; its checkpoints folder has a manifest, and only the files it lists are deleted.
- ``train_epochs``: ``capsedu.training.loop``'s own steps (``start_run``, ``train_epoch``), with a test
  of the model after every epoch, an optional stop (early stopping on a validation split)
  and optional fresh training data each epoch (pairs generated on the fly).
- ``spread``: mean and sample standard deviation of a list; ``spread_table``: one row per group
  of runs with the mean and std of each field (the experiments' summaries).
"""
from __future__ import annotations

import json
import os
import statistics
import time
import weakref
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from tqdm.auto import tqdm

from capsedu.data.mnist import load_dataset
from capsedu.experiments.shared.grid import GridShard, check_split, differences, merge_shards, record_key, shard_path
from capsedu.runtime import results
from capsedu.runtime.arguments import MAX_INT, MAX_SEED
from capsedu.runtime.device import resolve_device
from capsedu.runtime.files import interrupted, remove_stale_tmp
from capsedu.runtime.lock import OutputLock, OwnedFolder
from capsedu.runtime.stored import StoredRunError, read_stored, write_stored
from capsedu.training.evaluation import float_targets
from capsedu.training.loop import epoch_record, start_run, train_epoch

__all__ = ["check_config", "settings", "run_header", "start_experiment", "resumable", "check_out", "ResultFile",
           "spread", "spread_table", "train_epochs"]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_config(config, name: str, counts: Sequence[str] = (), fractions: Sequence[str] = (),
                 positive: Sequence[str] = ()) -> None:
    """Positive ints up to ``MAX_INT`` (``counts``), numbers in [0, 1] (``fractions``), positive numbers
    (``positive``), distinct int ``seeds`` in [0, ``MAX_SEED``]; a ValueError naming ``name``'s field otherwise."""
    for f in counts:
        v = getattr(config, f)
        if not _is_int(v) or not 1 <= v <= MAX_INT:
            raise ValueError(f"{name}.{f} must be a positive int (at most {MAX_INT:,}), got {v!r}")
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
                              or any(not _is_int(s) or not 0 <= s <= MAX_SEED for s in seeds)):
        raise ValueError(f"{name}.seeds must be a non-empty tuple of distinct ints in [0, {MAX_SEED:,}], got {seeds!r}")


def settings(config) -> Dict:
    """A config dataclass as JSON-friendly settings (tuples become lists)."""
    return json.loads(json.dumps(asdict(config)))


def run_header(config, command: Optional[str], device, preset: Optional[str], settings_key: str = "settings") -> Dict:
    """``capsedu.runtime.results.provenance`` (command, date, hardware, versions) plus device, preset, settings."""
    return {**results.provenance(command, str(device)), "device": str(device), "preset": preset,
            settings_key: settings(config)}


def start_experiment(config, kind: type, out, default_name: str, fresh: bool, device, command: Optional[str],
                     preset: Optional[str], summarise: Optional[Callable], data=None, progress: bool = True,
                     settings_key: str = "settings", summary_key: str = "summary", shard: Optional[GridShard] = None):
    """The preamble of every experiment: (path or None, device, ``ResultFile``, data).

    ``config`` must be a ``kind``; ``out`` (a file, or a folder for ``default_name``) is checked before
    any training; ``data`` defaults to ``load_dataset("mnist", config.source)`` on the CPU. The keys
    name the settings and the summary in the file (two-digits: "config" and "table"). With a ``shard``
    (it needs ``out``) the ``ResultFile`` writes the shard's file; path is still ``out``'s.
    """
    if not isinstance(config, kind):
        article = "an" if kind.__name__[0] in "AEIOU" else "a"
        raise TypeError(f"config must be {article} {kind.__name__}, got {type(config).__name__}")
    path = results.output_path(out, default_name) if out is not None else None
    if shard is not None and path is None:
        raise ValueError(f"shard {shard} of the grid is written beside out, so it needs out")
    device = resolve_device(device)
    header = run_header(config, command, device, preset, settings_key)
    check_out(path, header[settings_key], fresh, shard and shard.count, settings_key)  # a bad file: an error now
    if data is None:
        data = load_dataset("mnist", config.source, device="cpu", verbose=progress)
    if shard is None:
        return path, device, ResultFile(path, header, fresh, summarise, settings_key, summary_key), data
    header["shard"] = {"index": shard.index, "count": shard.count, "of": path.name,
                       "launcher": os.environ.get("CAPSEDU_GRID_LAUNCHER")}
    return path, device, ResultFile(shard_path(path, shard), header, fresh, summarise, settings_key, summary_key,
                                    main=path), data


def check_out(path, settings: Dict, fresh: bool = False, count: Optional[int] = None,
              settings_key: str = "settings") -> None:
    """What the command lines check before anything runs: ``resumable`` of ``path``, and with the grid
    split into ``count`` shards of each shard file there too; no unfinished split into another count."""
    if path is None:
        return
    resumable(path, settings, fresh, settings_key)
    for k in range(count or 0):
        resumable(shard_path(path, GridShard(k, count)), settings, fresh, settings_key)
    check_split(path, count)


def resumable(path, settings: Dict, fresh: bool = False, settings_key: str = "settings") -> Optional[Dict]:
    """The stored run at ``path`` to resume, or None (no file, or ``fresh``); a ValueError (one line)
    naming what differs when the file holds a run of other settings, a ``StoredRunError`` (one line
    naming the file) when it is damaged."""
    if path is None or fresh or not (Path(path).exists() or Path(path).is_symlink()):
        return None
    try:
        old = read_stored(path, settings_key, resuming=True)
    except StoredRunError as err:
        raise StoredRunError(err.path, f"{err.what}; pass --fresh to start over (it replaces the file), "
                             "or use another --out") from None
    if old.get(settings_key) != settings:
        raise ValueError(f"{path} holds a run with other settings ({differences(old.get(settings_key), settings)}); "
                         "pass --fresh to start over, or use another --out")
    return old


class ResultFile:
    """The JSON of one experiment: its header, one record per finished model x seed, a summary.

    With ``path=None`` nothing is written (the book's previews). An existing file of the same
    settings (``header[settings_key]``) is resumed: its finished records are kept (``find``), and it
    is stamped ``started`` (the first run's date) and ``resumed`` (how many times). ``fresh=True``
    starts over. ``summarise(runs)`` -> the ``summary_key`` entry, recomputed after every run.
    ``replaced``: the records of the file a ``fresh`` run replaces (readable ones; else []).
    A shard's file (``header["shard"]``: index, count) also skips the runs of ``main`` (the
    ``--out`` file), unless it started ``fresh`` (a mark kept until the merge replaces ``main``).
    """

    def __init__(self, path: Optional[Path], header: Dict, fresh: bool = False,
                 summarise: Optional[Callable[[List[Dict]], object]] = None,
                 settings_key: str = "settings", summary_key: str = "summary", main: Optional[Path] = None):
        self.path, self.summarise, self.summary_key, self.fresh = path, summarise, summary_key, fresh
        self.settings_key, self.main, self.grid, self.skip = settings_key, main, None, []
        self.data = {**header, "runs": [], summary_key: None, "seconds": 0.0}
        self.replaced, self.lock = [], None
        if path is None:
            return
        old = resumable(path, header[settings_key], fresh, settings_key)  # checked before the lock is taken
        if main is not None:
            shard = self.data["shard"] = dict(self.data["shard"])
            shard["fresh"] = bool(fresh or (old or {}).get("shard", {}).get("fresh"))
            skipped = None if shard["fresh"] else resumable(main, header[settings_key], False, settings_key)
            self.skip = [record_key(r) for r in (skipped or {}).get("runs", [])]
            if shard["fresh"] and main.is_file():  # what the merge will replace (multimnist's weights are ours)
                try:
                    self.replaced = read_stored(main, settings_key, resuming=True).get("runs", [])
                except StoredRunError:
                    pass
        self.lock = OutputLock(path).acquire()
        weakref.finalize(self, self.lock.release)  # an interrupted run (API use) lets go when it is dropped
        try:
            remove_stale_tmp(path)  # left by a killed writer (the lock says none is running)
            if fresh and path.is_file():
                try:
                    self.replaced += read_stored(path, settings_key, resuming=True).get("runs", [])
                except StoredRunError:
                    self.replaced = []
            if fresh:
                self._owned().clear()
        except BaseException:
            self.lock.release()
            raise
        if old is not None:
            if old.get("edited"):
                import sys
                print(f"capsedu: {path} was changed after it was written (its checksum fails); resuming keeps its "
                      "records, and the file stays marked as edited (readers will not show it as measured)",
                      file=sys.stderr)
                self.data["edited"] = old["edited"]
            self.data["runs"] = old.get("runs", [])
            self.data["seconds"] = old.get("seconds", 0.0)
            self.data["started"] = old.get("started", old.get("date"))
            self.data["resumed"] = old.get("resumed", 0) + 1

    def find(self, **key) -> Optional[Dict]:
        """The finished record whose fields equal ``key`` (e.g. model="cnn", seed=0), or None."""
        return next((r for r in self.data["runs"] if all(r.get(k) == v for k, v in key.items())), None)

    def todo(self, seeds: Sequence[int], names: Optional[Sequence[str]] = None,
             key: str = "model") -> List[Tuple[int, Optional[str]]]:
        """The (seed, name) runs to train here, in the grid's order (seed by seed, then ``names``; None:
        one run per seed): not finished, and for a shard its own (run i if i mod N = K) not in ``main``."""
        self.grid = [{"seed": s, **({} if n is None else {key: n})} for s in seeds for n in (names or [None])]
        keys = self.grid
        if self.main is not None:
            index, count = self.data["shard"]["index"], self.data["shard"]["count"]
            keys = [k for k in keys[index::count] if record_key(k) not in self.skip]
        return [(k["seed"], k.get(key)) for k in keys if self.find(**k) is None]

    def _owned(self) -> OwnedFolder:
        return OwnedFolder(self.path.with_name(self.path.stem + ".ckpt"))

    def checkpoint(self, name: str) -> Optional[str]:
        """The checkpoint file of the unfinished run ``name`` (in ``<out stem>.ckpt/``, listed in its
        manifest and removed by ``finish``), so that an interrupted run continues from its last epoch;
        None without a path. A file of that name the run did not write is never replaced by a fresh run."""
        if self.path is None:
            return None
        owned, file = self._owned(), f"{name}.pt"
        target = owned.folder / file
        if self.fresh and file not in owned.files() and (target.exists() or target.is_symlink()):
            raise ValueError(f"{target} exists and was not written by this run; move it away "
                             "(capsedu never replaces a file it did not write)")
        return str(owned.hand_out(file))

    def add(self, record: Dict, seconds: float) -> None:
        """Keep a finished run and write the file, its summary brought up to date (so a partial file reads).
        After a Ctrl-C that something swallowed, the run is kept and the interrupt goes on."""
        self.data["runs"].append(record)
        self.data["seconds"] = round(self.data["seconds"] + seconds, 2)
        if self.summarise is not None:
            self.data[self.summary_key] = self.summarise(self.data["runs"])
        self.save()
        if interrupted():
            raise KeyboardInterrupt

    def finish(self) -> Dict:
        """The summary of every run, written; the per-run checkpoints the run wrote go (every run is in
        the JSON); the lock is released. A shard's file is marked done (its checkpoints gone first, so
        a merger never meets them), and the merged run is returned if this shard was the last."""
        if self.summarise is not None and self.data["runs"]:
            self.data[self.summary_key] = self.summarise(self.data["runs"])
        if self.main is None:
            self.save()
            if self.path is not None:
                self._owned().clear()
                self.release()
            return self.data
        self._owned().clear()
        self.data["shard"]["done"] = True
        if self.data["runs"] or self.path.is_file():  # else --out holds all its runs: no file needed
            self.save()
        self.release()
        return merge_shards(self.main, self.data["shard"]["count"], self.settings_key, self.summary_key,
                            self.summarise, self.grid) or self.data

    def release(self) -> None:
        """Let another writer have the file (``finish`` does it; an interrupted run's lock goes on exit)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def save(self) -> None:
        if self.path is not None:
            self.data["written"] = results.utc_now()
            sealed = write_stored(self.data, self.path)
            self.data["format"], self.data["checksum"] = sealed["format"], sealed["checksum"]


def spread(values: List[float]) -> Tuple[float, Optional[float]]:
    """(mean, sample std) of a list; the std is None for a single value."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def spread_table(runs: List[Dict], key: str, names: Sequence[str], fields: Sequence[str],
                 head: Callable[[str, List[Dict]], Dict],
                 value: Callable[[Dict, str], float] = lambda r, f: r[f]) -> List[Dict]:
    """One row per name of ``names`` that has runs (``r[key] == name``): ``head(name, its runs)``, then
    for each field ``f`` the mean (``f``) and sample std (``f + "_std"``) of ``value(run, f)``."""
    table = []
    for name in names:
        mine = [r for r in runs if r[key] == name]
        if not mine:
            continue
        row = head(name, mine)
        for f in fields:
            row[f], row[f + "_std"] = spread([value(r, f) for r in mine])
        table.append(row)
    return table


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
    run = start_run(model, data, epochs=epochs, seed=seed, **fit_options)
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
