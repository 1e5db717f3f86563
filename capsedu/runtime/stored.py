"""The one stored-run format: every experiment writes it; resume, ``stored_run`` and the chapters read it.

A stored run is one JSON file per finished (name, seed) run, ``<name>-seed<k>.json``: a header
(provenance, ``"settings"``), the record ``"run"``, ``"format"`` (``FORMAT``) and ``"checksum"``
(``"sha256:"`` + the sha256 of ``canonical(data)``: a changed digit fails it). Every problem is one
``StoredRunError`` line naming the file. Files without a checksum (before format 1) are resumed as
runs done but never shown as measured; the repository's ``results/`` files are all sealed.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Dict, Optional

from capsedu.runtime.files import plain, write_json

__all__ = ["FORMAT", "NAME_KEYS", "GRID_FIELDS", "RUN_FILE", "StoredRunError", "canonical", "checksum", "seal",
           "check_schema", "parse_stored", "read_stored", "write_stored", "differences", "run_stem", "run_settings",
           "run_files", "read_runs"]

FORMAT = 1
NAME_KEYS = ("model", "method", "variant")  # what a record is a run of (with its seed)
GRID_FIELDS = ("seeds", "models", "variants", "methods")  # the grid's own settings: its run files may differ in them
RUN_FILE = re.compile(r"(?:.+-)?seed\d+\.(?:json|ckpt\.pt)")  # the files a run writes (``run_stem``)
_RUN_ONLY = ("run", "seconds", "written", "format", "checksum", "edited")
# header key -> the types it may have (when present)
HEADER_TYPES = {"command": (str,), "date": (str,), "preset": (str, type(None)), "seconds": (int, float),
                "resumed": (int,), "started": (str, type(None)), "written": (str,), "device": (str,)}


class StoredRunError(ValueError):
    """A stored run that cannot be used: ``str(err)`` is one line naming the file and what is wrong."""

    def __init__(self, path, what: str):
        self.path, self.what = str(path), " ".join(str(what).split())
        super().__init__(f"stored run {self.path}: {self.what}")


def canonical(data: Dict) -> bytes:
    """The bytes the checksum covers: the object without ``"checksum"``, keys sorted."""
    return json.dumps({k: v for k, v in data.items() if k != "checksum"}, sort_keys=True).encode()


def checksum(data: Dict) -> str:
    return "sha256:" + hashlib.sha256(canonical(data)).hexdigest()


def seal(data: Dict) -> Dict:
    """A copy of ``data`` with ``"format"`` and ``"checksum"`` (JSON-normalised first, so what is
    read back hashes to the same value)."""
    sealed = {**plain({k: v for k, v in data.items() if k not in ("format", "checksum")}), "format": FORMAT}
    sealed["checksum"] = checksum(sealed)
    return sealed


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_schema(data) -> Optional[str]:
    """What is wrong with ``data`` as a stored run (one phrase), or None if nothing is."""
    if not isinstance(data, dict):
        return f"holds a JSON {type(data).__name__}, expected an object with a header and \"run\""
    if "settings" not in data:
        return "has no settings (expected a \"settings\" object)"
    if not isinstance(data["settings"], dict):
        return f"its \"settings\" is a {type(data['settings']).__name__}, expected an object"
    for key, types in HEADER_TYPES.items():
        if key in data and (not isinstance(data[key], types) or isinstance(data[key], bool)):
            return f"its \"{key}\" is a {type(data[key]).__name__} ({data[key]!r:.40}), expected {types[0].__name__}"
    record = data.get("run")
    if not isinstance(record, dict):
        what = f"is a {type(record).__name__}, expected an object"
        return "lacks its \"run\"" if record is None else f"its \"run\" {what}"
    for k in NAME_KEYS:
        if k in record and not isinstance(record[k], str):
            return f"its run's {k} is {record[k]!r}, expected a name (a string)"
    seed = record.get("seed")
    if not _is_int(seed) or seed < 0:
        return f"its run's seed is {seed!r}, expected an int >= 0"
    return None


def parse_stored(text, path, require_checksum: bool = False, resuming: bool = False) -> Dict:
    """``text`` (bytes or str, the content of ``path``) as a checked stored run; else ``StoredRunError``.

    ``resuming``: a file that fails its checksum (edited by hand) is still resumed, its records
    kept, but it comes back marked ``"edited"``; the mark is sealed into the file the run writes,
    so readers (``require_checksum``) keep refusing it: an edited number is never shown as measured."""
    try:
        data = json.loads(text)
    except UnicodeDecodeError as err:
        raise StoredRunError(path, f"is not text (byte {err.start} is not UTF-8); expected a JSON file") from None
    except json.JSONDecodeError as err:
        size = len(text)
        what = "is truncated" if err.pos >= size - 1 else "is not valid JSON"
        raise StoredRunError(path, f"{what} ({err.msg} at line {err.lineno} column {err.colno})") from None
    if isinstance(data, dict) and ("format" in data or "checksum" in data):
        version = data.get("format")
        if not _is_int(version) or version > FORMAT or version < 1:
            raise StoredRunError(path, f"has format {version!r}; this capsedu reads format {FORMAT}")
        if data.get("checksum") != checksum(data):
            if not resuming:
                raise StoredRunError(path, "fails its checksum: its content changed after it was written "
                                           "(rerun the experiment with --fresh, or restore the file)")
            data["edited"] = "its checksum failed when it was resumed: changed after it was written"
    elif require_checksum:
        raise StoredRunError(path, "has no checksum (written before stored-run format 1), so its numbers "
                                   "cannot be verified: rerun the command that wrote it with --fresh")
    if require_checksum and isinstance(data, dict) and data.get("edited"):
        raise StoredRunError(path, f"was edited after it was written ({data['edited']}); not shown as measured: "
                                   "rerun the experiment with --fresh")
    problem = check_schema(data)
    if problem is not None:
        raise StoredRunError(path, problem)
    return data


def read_stored(path, require_checksum: bool = False, resuming: bool = False) -> Dict:
    """The stored run at ``path``, checked (format, checksum, schema); else one ``StoredRunError`` line."""
    path = Path(path)
    if path.is_dir():
        raise StoredRunError(path, "is a folder; expected a stored-run JSON file")
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise StoredRunError(path, "not found") from None
    except OSError as err:
        raise StoredRunError(path, f"cannot be read ({err.strerror or type(err).__name__})") from None
    return parse_stored(text, path, require_checksum, resuming)


def write_stored(data: Dict, path) -> Dict:
    """``seal(data)`` written atomically to ``path`` (readers see the old file or the new one); returns it."""
    sealed = seal(data)
    write_json(sealed, os.fspath(path))
    return sealed


def differences(old, new) -> str:
    """The settings that differ between two stored runs, one phrase."""
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return "; ".join(f"{k}: {old.get(k)!r} there, {new.get(k)!r} here" for k in keys)


def _holds_a_run(path: Path) -> bool:
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, OSError):
        return False
    return isinstance(data, dict) and "run" in data


def run_stem(seed: int, name: Optional[str] = None) -> str:
    """The name of a run's file without ``.json``: ``<name>-seed<k>``, or ``seed<k>`` for a grid of one model."""
    return f"seed{seed}" if name is None else f"{name}-seed{seed}"


def run_settings(data: Dict) -> Dict:
    return {k: v for k, v in data["settings"].items() if k not in GRID_FIELDS}


def run_files(folder: Path, resuming: bool = False, expected: Optional[Dict] = None):
    """(stem, stored data) of every run file in ``folder``, each checked (a ``StoredRunError`` for a damaged
    one). A file whose settings (grid fields aside) differ from ``expected`` or from the first file's: a
    ValueError saying how to start over when ``resuming``, else a ``StoredRunError``."""
    found = []
    for path in sorted(Path(folder).glob("*.json")):
        if not RUN_FILE.fullmatch(path.name) and not _holds_a_run(path):
            continue  # the user's own JSON: not a run (a copy of one holds a run, and is named below)
        data = read_stored(path, require_checksum=not resuming, resuming=resuming)
        own = run_stem(data["run"]["seed"], next((data["run"][k] for k in NAME_KEYS if k in data["run"]), None))
        if path.stem != own:  # a copy (``x (1).json``) or a renamed file: never counted twice, never in another's place
            raise StoredRunError(path, f"holds the run {own}, whose file is {own}.json (a copy, or a renamed "
                                       "file?); move it out of the folder")
        mine = run_settings(data)
        want = expected if expected is not None else run_settings(found[0][1]) if found else mine
        if mine != want:
            what = f"holds a run with other settings ({differences(mine, want)})"
            if resuming:
                raise ValueError(f"{path} {what}; pass --fresh to start over (it removes the folder's runs), "
                                 "or use another --out")
            raise StoredRunError(path, f"{what} than the other runs of its folder")
        found.append((path.stem, data))
    _check_fields(Path(folder), found)
    return found


def _check_fields(folder: Path, found) -> None:
    """A run lacking a field that another run of its name holds (a hand-edited or older file): one
    ``StoredRunError`` naming its file and the field, before it is resumed from or read."""
    def name(data):
        return next((data["run"][k] for k in NAME_KEYS if k in data["run"]), None)
    fields = {}
    for _, data in found:
        fields.setdefault(name(data), set()).update(data["run"])
    for stem, data in found:
        missing = sorted(fields[name(data)] - set(data["run"]))
        if missing:
            raise StoredRunError(folder / f"{stem}.json", f"its run has no {missing[0]!r}, which the other runs of "
                                 "its name hold; move the file away to train that run again, or pass --fresh")


def read_runs(folder) -> Optional[Dict]:
    """The experiment stored in ``folder`` as one object: the first run's header (its settings), ``"runs"``
    ordered by the settings' seeds and names, ``"seconds"`` summed. None when the folder holds no run; a
    damaged or edited file, or runs of other settings: one ``StoredRunError`` line naming the file."""
    files = run_files(folder)
    if not files:
        return None
    data = {k: v for k, v in files[0][1].items() if k not in _RUN_ONLY}
    grid = data["settings"]
    names = next((grid[k] for k in GRID_FIELDS[1:] if k in grid), [None])
    rank = {key: i for i, key in enumerate((s, n) for s in grid.get("seeds", []) for n in names)}

    def place(run):
        key = (run.get("seed"), next((run[k] for k in NAME_KEYS if k in run), None))
        return rank.get(key, len(rank)), key[0], str(key[1])
    data["runs"] = sorted((d["run"] for _, d in files), key=place)
    data["seconds"] = round(sum(d.get("seconds", 0.0) for _, d in files), 2)
    return data
