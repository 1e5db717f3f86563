"""Where stored runs come from and where they are read: provenance, the shipped copies, the chapters' choice.

``provenance`` is the one header every stored run, benchmark and weight file carries.
``results_dir``/``benchmarks_dir`` find the copies an installed package ships (``capsedu/shipped/``,
written by ``setup.py``), else the checkout's, never relative to the working directory.
``stored_or_preview`` is what a chapter calls: a notebook never stops on a stored file.
"""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

from capsedu.runtime.stored import StoredRunError, read_runs

__all__ = ["results_dir", "benchmarks_dir", "utc_now", "command_line", "provenance", "stored_run",
           "stored_or_preview"]


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


# An installed package (a wheel, Colab) carries the stored runs here; a checkout has no such folder.
SHIPPED = Path(__file__).resolve().parents[1] / "shipped"
CHECKOUT = Path(__file__).resolve().parents[2]


def results_dir() -> Path:
    """The stored runs: the installed package's copy, else the checkout's ``results/`` (it may not exist)."""
    shipped = SHIPPED / "results"
    return shipped if shipped.is_dir() else CHECKOUT / "results"


def benchmarks_dir() -> Path:
    """The benchmark results (JSON): the installed package's copy, else the checkout's ``benchmarks/results/``."""
    shipped = SHIPPED / "benchmarks"
    return shipped if shipped.is_dir() else CHECKOUT / "benchmarks" / "results"


def stored_run(name: str) -> Optional[Dict]:
    """The stored run ``name`` of ``results_dir()``, checked; None only if it is not there. Its folder (an
    experiment, one file per run) reads as one object (``capsedu.runtime.stored.read_runs``); a damaged
    file, one without a checksum, or a folder of runs of other settings is a ``StoredRunError`` (one line
    naming it). The wheel ships every stored run (``setup.py``), so Colab reads them from the package."""
    folder = results_dir() / name
    return read_runs(folder) if folder.is_dir() else None


def stored_or_preview(name: str, check=None):
    """(the stored run ``name``, None), or (None, the one line a chapter prints before it shows its
    live preview instead, labelled as such). ``check(data)`` may raise (KeyError, IndexError,
    TypeError, ValueError) when the file lacks what the chapter reads; that too is a fallback."""
    where = f"results/{name}"
    try:
        data = stored_run(name)
    except StoredRunError as err:
        return None, f"{err}; showing the live preview instead (not the stored run)"
    if data is None:
        return None, f"{where} is not there; showing the live preview instead (not the stored run)"
    if not data.get("runs"):
        return None, f"stored run {where} holds no runs; showing the live preview instead (not the stored run)"
    if check is not None:
        try:
            check(data)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
            what = " ".join(f"{type(err).__name__}: {err}".split())[:160]
            return None, (f"stored run {where} lacks what this chapter reads ({what}); "
                          "showing the live preview instead (not the stored run)")
    return data, None
