"""An experiment's grid of (model, seed) runs spread over processes or devices (no torch at import).

The grid is every run of an experiment in the order one process trains them (seed by seed, the
models of a seed in turn); run i of it belongs to shard i mod N. Shard K of N ("K/N", 0 <= K < N,
counted as torchrun's RANK) writes its own stored file beside ``--out``, ``shard_path``:
``robustness.json`` -> ``robustness.shard-0-of-2.json``. A shard file follows every rule of ``--out``
itself (``capsedu.experiments.shared.runs.ResultFile``: the same header and settings plus "shard",
resume, a lock, checkpoints in ``<its stem>.ckpt/``), so no two shards share a lock and each one
resumes on its own. Every shard skips the runs ``--out`` already holds (same settings); with
``--fresh`` it ignores them and the merge replaces ``--out`` (the mark stays in the shard's file).

- ``choose(args)``: this process's shard: ``--shard K/N``, or torchrun's (RANK, WORLD_SIZE) when
  WORLD_SIZE > 1; None for a single process. Contradictory flags are one line.
- ``merge_shards``: a shard that finishes marks its file "done"; the shard that then finds all N
  files done merges them into ``--out`` (``merged``: the settings must agree, a run found twice must
  be the same record, the summary is recomputed by the experiment's own function, seconds are
  summed) and only then removes them. No process waits for another: under torchrun no process
  group is started (the training loop would see one and split every batch over the ranks,
  ``capsedu.training.distributed``), and a barrier would time out on a rank whose shard takes hours
  longer; the last to finish merges, the same rule as for shards started by hand on two machines.
- ``report``: what a command prints: the JSON on stdout, or for a shard whose split is not merged
  yet one line on stderr.
- ``launch``: ``--devices cpu,cpu`` (or ``cuda:0,cuda:1``): the same command once per entry as
  ``--shard K/N --device ENTRY`` (CPU entries share ``--threads``), waited for; a failed shard is
  one line naming it, its finished runs kept in its file for the rerun.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from capsedu.runtime.lock import LockError, OutputLock, OwnedFolder
from capsedu.runtime.results import utc_now
from capsedu.runtime.stored import NAME_KEYS, read_stored, write_stored

__all__ = ["GridShard", "parse_shard", "parse_devices", "add_grid_arguments", "choose", "shard_device", "shard_path",
           "shard_files", "check_split", "differences", "record_key", "merged", "merge_shards", "launch", "report"]

MERGE_WAIT = 120.0  # seconds a finished shard waits for --out's lock (another shard merging takes about one)
_HEADER_ONLY = ("runs", "seconds", "shard", "format", "checksum", "written", "resumed", "started", "edited")


class GridShard(NamedTuple):
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> GridShard:
    """``"K/N"`` -> GridShard(K, N); an argparse type (a bad value is one line)."""
    match = re.fullmatch(r"\s*(\d{1,6})\s*/\s*(\d{1,6})\s*", str(text))
    if match is None or not int(match[1]) < int(match[2]):
        raise argparse.ArgumentTypeError(f"expected K/N, shard K of N with 0 <= K < N (counted from 0, as "
                                         f"torchrun's RANK), got {text!r}")
    return GridShard(int(match[1]), int(match[2]))


def parse_devices(text: str) -> List[str]:
    """``"cpu,cpu"`` -> ["cpu", "cpu"]; an argparse type. Whether each exists is checked when the command runs."""
    entries = [e.strip() for e in str(text).split(",")]
    if not all(entries):
        raise argparse.ArgumentTypeError(f"expected a comma list of devices such as cpu,cpu or cuda:0,cuda:1, got {text!r}")
    return entries


def add_grid_arguments(parser: argparse.ArgumentParser) -> None:
    """``--devices`` and ``--shard``: every stored-run command with a grid of (model, seed) runs."""
    parser.add_argument("--devices", type=parse_devices, default=None, help="spread the grid of runs over these "
                        "devices, one process each (a comma list: cpu,cpu or cuda:0,cuda:1; needs --out): shard "
                        "files beside --out, merged into it at the end; rerun the same command to resume")
    parser.add_argument("--shard", type=parse_shard, default=None, help="run only shard K/N of the grid (run i "
                        "if i mod N = K), into a file beside --out; the last shard to finish merges them into --out "
                        "(torchrun sets it from RANK/WORLD_SIZE)")


def _world() -> Tuple[int, int]:
    try:
        world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    except ValueError:
        raise ValueError(f"WORLD_SIZE={os.environ.get('WORLD_SIZE')!r} and RANK={os.environ.get('RANK')!r} "
                         "must be integers (torchrun sets them)") from None
    if world > 1 and not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    return world, rank


def choose(args) -> Optional[GridShard]:
    """This process's shard (``--shard``, else torchrun's rank), or None; one line for flags that clash."""
    devices, shard, out = getattr(args, "devices", None), getattr(args, "shard", None), getattr(args, "out", None)
    world, rank = _world()
    if devices is not None and shard is not None:
        raise ValueError("--devices starts one process per device, each with its own --shard; pass one of the two")
    if world > 1 and (devices is not None or shard is not None):
        raise ValueError(f"under torchrun (WORLD_SIZE={world}) each process takes the shard of its RANK; "
                         f"drop --{'devices' if devices is not None else 'shard'}")
    if shard is None and world > 1:
        shard = GridShard(rank, world)
    if out is None and (devices is not None or shard is not None):
        how = "--devices" if devices is not None else "--shard" if world == 1 else f"torchrun (WORLD_SIZE={world})"
        raise ValueError(f"{how} splits the grid into files beside --out and merges them into it, so it needs --out")
    return shard


def shard_device(device: str, shard: Optional[GridShard]) -> str:
    """Under torchrun with ``device`` auto or cuda and a GPU: ``cuda:LOCAL_RANK`` (a GPU per process)."""
    if shard is None or _world()[0] <= 1 or device not in ("auto", "cuda"):
        return device
    import torch
    if not torch.cuda.is_available():
        return device
    local, count = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
    if local >= count:
        raise ValueError(f"process {local} on this machine has no GPU of its own ({count} visible); "
                         f"use --nproc_per_node {count} or fewer, or --device cpu")
    return f"cuda:{local}"


def shard_path(out: Path, shard: GridShard) -> Path:
    out = Path(out)
    return out.with_name(f"{out.stem}.shard-{shard.index}-of-{shard.count}{out.suffix}")


def shard_files(out: Path) -> Dict[int, List[Path]]:
    """N -> the shard files of a split of ``out`` into N that are there."""
    out, found = Path(out), {}
    pattern = re.compile(re.escape(out.stem) + r"\.shard-(\d+)-of-(\d+)" + re.escape(out.suffix))
    for p in sorted(out.parent.glob(f"{out.stem}.shard-*-of-*{out.suffix}")):
        match = pattern.fullmatch(p.name)
        if match and int(match[1]) < int(match[2]):
            found.setdefault(int(match[2]), []).append(p)
    return found


def check_split(out: Optional[Path], count: Optional[int]) -> None:
    """One line if shard files of ``out`` from a split into another number of shards are there
    (``count`` None: a single process, which would train their runs again)."""
    if out is None:
        return
    for n, files in shard_files(out).items():
        if n != count:
            raise ValueError(f"{', '.join(f.name for f in files)} beside {out} hold an unfinished split of this grid "
                             f"into {n} shards; finish it with {n} processes (--devices with {n} entries, or "
                             f"torchrun --nproc_per_node {n}), or move those files away")


def differences(old, new) -> str:
    """The settings that differ between two stored runs, one phrase."""
    if not isinstance(old, dict):
        return "it has no settings"
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return "; ".join(f"{k}: {old.get(k)!r} there, {new.get(k)!r} here" for k in keys)


def record_key(record: Dict) -> Tuple[Optional[str], object]:
    """(name, seed) of a run's record or of a grid key; the name is its model, method or variant."""
    return next((record[k] for k in NAME_KEYS if k in record), None), record.get("seed")


def merged(main: Optional[Dict], shards: Sequence[Tuple[Path, Dict]], settings_key: str = "settings",
           summary_key: str = "summary", summarise: Optional[Callable[[List[Dict]], object]] = None,
           order: Optional[Sequence[Dict]] = None) -> Dict:
    """One stored run of ``main`` (the ``--out`` run to extend, or None) and the shards' (file, data):
    every run once, in the grid's ``order`` where given; the header of the first shard, its device the
    shards' devices, "shards" the provenance of each; seconds summed; ``summarise(runs)`` recomputed.
    A ValueError (one line) when the settings differ or a run comes twice with different records."""
    first = shards[0][1]
    sources = [("--out", main)] if main is not None else []
    sources += [(path.name, data) for path, data in shards]
    runs, where = {}, {}
    for name, data in sources:
        if data.get(settings_key) != first.get(settings_key):
            raise ValueError(f"{name} holds runs of other settings than {shards[0][0].name} "
                             f"({differences(data.get(settings_key), first.get(settings_key))}); move it away")
        for record in data.get("runs", []):
            key = record_key(record)
            if key in runs and runs[key] != record:
                raise ValueError(f"{key[0] or 'the run'} seed {key[1]} is in {where[key]} and in {name} with different "
                                 "records; keep one (move the other file away) and rerun")
            runs.setdefault(key, record)
            where.setdefault(key, name)
    rank = {record_key(k): i for i, k in enumerate(order or [])}
    ordered = sorted(runs.values(), key=lambda r: rank.get(record_key(r), len(rank)))  # stable: others keep theirs
    data = {k: v for k, v in first.items() if k not in _HEADER_ONLY}
    devices = ",".join(dict.fromkeys(d["device"] for _, d in shards if isinstance(d.get("device"), str)))
    if devices:
        data["device"] = devices
    launcher = first.get("shard", {}).get("launcher")
    if launcher:  # --devices: the command typed, not a shard's
        data["command"] = launcher
    data["runs"], data["seconds"] = ordered, round(sum(d.get("seconds", 0.0) for _, d in sources), 2)
    data["shards"] = [{"file": path.name, **{k: d.get(k) for k in ("command", "device", "hardware", "threads", "date")},
                       "seconds": d.get("seconds", 0.0), "runs": len(d.get("runs", []))} for path, d in shards]
    dates = [d.get("started") or d.get("date") for _, d in sources if d.get("started") or d.get("date")]
    if dates:
        data["started"] = min(dates)
    if any(d.get("resumed") for _, d in sources):
        data["resumed"] = sum(d.get("resumed", 0) for _, d in sources)
    edited = next((d["edited"] for _, d in sources if d.get("edited")), None)
    if edited:
        data["edited"] = edited
    data[summary_key] = summarise(ordered) if summarise is not None and ordered else None
    return data


def _locked(path: Path) -> OutputLock:
    """``path``'s lock, waiting up to ``MERGE_WAIT`` for another writer (a shard merging) to finish."""
    deadline = time.monotonic() + MERGE_WAIT
    while True:
        try:
            return OutputLock(path).acquire()
        except LockError as err:
            if time.monotonic() > deadline:
                raise LockError(f"{err}; every shard is done: rerun the same command to merge them") from None
            time.sleep(0.2)


def merge_shards(out: Path, count: int, settings_key: str = "settings", summary_key: str = "summary",
                 summarise: Optional[Callable] = None, order: Optional[Sequence[Dict]] = None) -> Optional[Dict]:
    """If every shard of the split of ``out`` into ``count`` is done: merge their files into ``out`` (it
    is locked meanwhile), remove them and their checkpoint folders, and return the merged stored run;
    else (a shard still running, or no file left to merge) None. A shard without a file is done when
    ``out`` holds all its runs of the grid's ``order`` (one with nothing to train writes none)."""
    lock = _locked(out)
    try:
        files = [shard_path(out, GridShard(k, count)) for k in range(count)]
        shards = [(f, read_stored(f, settings_key, resuming=True)) for f in files if f.is_file()]
        if not shards or not all(isinstance(d.get("shard"), dict) and d["shard"].get("done") for _, d in shards):
            return None
        fresh = any(d["shard"].get("fresh") for _, d in shards)
        main = read_stored(out, settings_key, resuming=True) if out.is_file() and not fresh else None
        held = {record_key(r) for r in (main or {}).get("runs", [])}
        for k, f in enumerate(files):
            if not f.is_file() and (order is None or any(record_key(x) not in held for x in order[k::count])):
                return None  # shard k has not run yet
        data = merged(main, shards, settings_key, summary_key, summarise, order)
        data["written"] = utc_now()
        data = write_stored(data, out)
        for f, _ in shards:  # only now that --out holds every run
            f.unlink()
            OwnedFolder(f.with_name(f.stem + ".ckpt")).clear()
        OwnedFolder(out.with_name(out.stem + ".ckpt")).clear()  # an interrupted single run's: its runs are merged
        return data
    finally:
        lock.release()


def launch(args, out: Path, command: str, settings_key: str = "settings") -> Dict:
    """Run the command of ``args`` (its ``argv``) once per entry of ``args.devices`` as shard K of N,
    each on its device, and wait for them; the last to finish merges: the merged run is returned. A
    failed shard: a RuntimeError naming it (the others finish; every finished run is kept for the rerun)."""
    import signal
    import subprocess

    from capsedu.runtime.device import resolve_device
    devices = []
    for entry in args.devices:
        try:
            devices.append(str(resolve_device(entry)))
        except ValueError as err:
            raise ValueError(f"--devices {','.join(args.devices)}: {err}") from None
    n = len(devices)
    check_split(out, n)
    argv, skip = [], False
    for a in args.argv:  # the command without --devices (no shorter prefix of it is unambiguous)
        if skip or a == "--devices" or a.startswith("--devices="):
            skip = a == "--devices"
            continue
        argv.append(a)
    threads = getattr(args, "threads", None) or os.cpu_count() or 1
    cpus = max(1, sum(d == "cpu" for d in devices))
    procs = []
    for k, device in enumerate(devices):
        share = max(1, threads // cpus) if device == "cpu" else threads
        extra = ["--threads", str(share)] if getattr(args, "threads", None) else []
        env = {**os.environ, "OMP_NUM_THREADS": str(share), "CAPSEDU_GRID_LAUNCHER": command}
        procs.append(subprocess.Popen([sys.executable, "-m", "capsedu", *argv, "--shard", f"{k}/{n}", "--device",
                                       device, *extra], stdout=subprocess.DEVNULL, env=env, start_new_session=True))
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:  # the children are in their own session: Ctrl-C reaches them once, from here
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait()
        raise
    failed = [k for k, code in enumerate(codes) if code != 0]
    if failed:
        which = ", ".join(f"{k}/{n} (--device {devices[k]}, exit code {codes[k]})" for k in failed)
        raise RuntimeError(f"shard{'s' if len(failed) > 1 else ''} {which} failed (the error is above); every finished "
                           f"run is kept in the shard files beside {out}: rerun the same command to resume")
    left = shard_files(out).get(n)
    if left:
        raise RuntimeError(f"every shard finished, but {', '.join(f.name for f in left)} were not merged into {out}; "
                           "rerun the same command to merge them")
    return read_stored(out, settings_key)


def report(result: Dict, out: Optional[Path], command: str, indent: int = 1) -> int:
    """Print ``result`` as JSON on stdout and where it went on stderr; a shard whose split is not
    merged yet: one line on stderr only (its file is not the experiment's result). Returns 0."""
    import json
    shard = result.get("shard")
    if isinstance(shard, dict):
        name = shard_path(out, GridShard(shard["index"], shard["count"])).name
        held = f"{len(result['runs'])} runs in {name}" if result["runs"] else f"{out.name} holds all its runs"
        print(f"capsedu {command}: shard {shard['index']}/{shard['count']} is done ({held}); the last shard to "
              f"finish merges the split into {out}", file=sys.stderr)
        return 0
    print(json.dumps(result, indent=indent))
    if out is not None and not os.environ.get("CAPSEDU_GRID_LAUNCHER"):  # a shard of --devices: the launcher says it
        merged_from = f" (merged from {len(result['shards'])} shards)" if "shards" in result else ""
        print(f"capsedu {command}: wrote {out}{merged_from}", file=sys.stderr)
    return 0
