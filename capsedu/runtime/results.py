"""Stored runs as JSON files, written so that nothing is lost (no torch needed).

- ``output_path(out, default_name)``: where a command will write, checked *before* it runs:
  a folder means "a file called ``default_name`` inside it"; the folder must exist and be
  writable, and an existing path must be a file.
- ``write_json(obj, path)``: atomic (a temporary file in the same folder, then a rename),
  with the temporary file removed on any failure.
- ``read_json(path)``: a stored run, or one clear error naming the file.
- ``command_line(argv)``: ``python -m capsedu ...`` as a shell would take it.
- ``provenance(command, device)``: command, date, hardware, threads, versions: the one header every
  stored run, benchmark and exported weight file carries (the experiments add their settings to it).
- ``stored_run(name)``: a JSON of the repository's ``results/`` folder, wherever the book runs.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

__all__ = ["output_path", "results_dir", "read_json", "utc_now", "command_line", "provenance", "stored_run"]


def output_path(out, default_name: str) -> Path:
    """The file a command will write for ``--out out``; raises ValueError (one line) if it cannot."""
    path = Path(out).expanduser()
    if path.is_dir():
        path = path / default_name
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"--out {out}: folder {folder} does not exist; create it first")
    if path.exists() and not path.is_file():
        raise ValueError(f"--out {out}: {path} exists and is not a file")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"--out {out}: {path} is not writable")
    return path


def read_json(path) -> Dict:
    """A stored run; a missing, unreadable or damaged file is one ValueError that names it."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read stored run {path}: {err}") from None


def utc_now() -> str:
    """The current time in UTC, ISO 8601 to the second: the stamp every stored run carries."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def command_line(argv: Sequence[str]) -> str:
    """``python -m capsedu`` followed by ``argv``, quoted as a shell would need it."""
    return shlex.join(["python", "-m", "capsedu", *argv])


def provenance(command: Optional[str] = None, device: str = "cpu") -> Dict:
    """Where a result came from: the command (default: this process's own command line), when,
    on what hardware, with how many threads and which versions (torch, python, capsedu)."""
    import torch

    from capsedu import __version__
    from capsedu.runtime.device import hardware
    if command is None:
        command = shlex.join([os.path.basename(sys.executable), *sys.argv])
    return {"command": command, "date": utc_now(),
            "hardware": hardware(device), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "argv_python": sys.executable, "capsedu": __version__}


def results_dir() -> Path:
    """The repository's ``results/`` folder, beside the package in a checkout (it may not exist elsewhere)."""
    return Path(__file__).resolve().parents[2] / "results"


def stored_run(name: str) -> Optional[Dict]:
    """A stored run from the repository's ``results/`` folder, or None if it is not there (yet).

    A checkout (the book build, a local Jupyter) reads the file next to the package; an
    installed package (Colab) fetches it from the repository at ``capsedu.REVISION``.
    """
    from capsedu import REPO_URL, REVISION
    local = results_dir() / name
    if local.is_file():
        return read_json(local)
    if "github.com" not in REPO_URL:
        return None
    import urllib.error
    import urllib.request
    url = REPO_URL.replace("github.com", "raw.githubusercontent.com") + f"/{REVISION}/results/{name}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return None
