"""Files that are never half-written: atomic writes with Ctrl-C held back, stale temp files, sha256.

No torch: the JSON of stored runs, checkpoints and weights all go through ``write_atomic``.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import signal
import tempfile
import threading
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Callable

__all__ = ["plain", "write_atomic", "write_json", "to_json", "remove_stale_tmp", "sha256_of", "ctrl_c_deferred", "interrupted",
           "catch_ctrl_c"]
_INTERRUPTED = []  # one entry per SIGINT this process received (``interrupted``)


def interrupted() -> bool:
    """True once this process has received a SIGINT (even one that something swallowed)."""
    return bool(_INTERRUPTED)


def _raise_interrupt(signum, frame):
    _INTERRUPTED.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def catch_ctrl_c():
    """While the block runs, Ctrl-C (SIGINT) raises KeyboardInterrupt, even where the process inherited
    it ignored (a job started with ``&`` by a script), and is remembered (``interrupted``), so that
    one that something swallowed still ends the run. The command line runs every command in it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _INTERRUPTED.clear()
    old = signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        _INTERRUPTED.clear()

# ---------------------------------------------------------------- writing
@contextlib.contextmanager
def ctrl_c_deferred():
    """Hold SIGINT back while the block runs, then deliver it (as KeyboardInterrupt) once it is done."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives signals
        return
    caught = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if caught and old is not signal.SIG_IGN:
        if callable(old):
            old(signal.SIGINT, None)  # Python's default handler raises KeyboardInterrupt
        else:
            raise KeyboardInterrupt


def write_atomic(path: str, write: Callable) -> None:
    """``write(file)`` into a temporary file of its own beside ``path`` (``path.<random>.tmp``), fsync,
    ``os.replace`` over ``path``: a crash leaves the old file, an error leaves no ``.tmp``, two
    writers of one file never share a temporary one, and Ctrl-C waits until the new file is complete."""
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    with ctrl_c_deferred():
        try:
            f = tempfile.NamedTemporaryFile(delete=False, dir=folder, prefix=name + ".", suffix=".tmp")
        except OSError as err:
            raise OSError(err.errno, f"cannot write {path}: {err.strerror or err}") from None
        try:
            with f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(f.name, 0o644)  # tempfile makes it 0600; a result or checkpoint is for others to read too
            os.replace(f.name, path)
        except BaseException as err:
            with contextlib.suppress(OSError):
                os.remove(f.name)
            if isinstance(err, OSError) and getattr(err, "filename", None) in (f.name, path):
                raise OSError(err.errno, f"cannot write {path}: {err.strerror or err}") from None
            raise


def remove_stale_tmp(path: str) -> bool:
    """Remove the ``path.*.tmp`` files that a killed writer left behind; True if there was one. Called
    by the one writer of ``path`` (it holds the folder's lock, or the run is its share of the grid)."""
    stale = glob.glob(glob.escape(os.fspath(path)) + ".*.tmp")
    for tmp in stale:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
    return bool(stale)


def sha256_of(path: Path) -> str:
    """The file's sha256 as hex (what the weights' JSON stores)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def to_json(obj, indent: int = 2, level: int = 0) -> str:
    """Indented JSON, except that a list of plain numbers or strings stays on one line (the per-item
    misses of a stored run would otherwise take a line per index). Parses to the same object."""
    if isinstance(obj, list) and all(isinstance(v, (int, float, str, bool)) or v is None for v in obj):
        return json.dumps(obj)
    pad, inner = " " * (indent * level), " " * (indent * (level + 1))
    if isinstance(obj, dict) and obj:
        items = (f"{inner}{json.dumps(str(k))}: {to_json(v, indent, level + 1)}" for k, v in obj.items())
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(obj, list) and obj:
        return "[\n" + ",\n".join(f"{inner}{to_json(v, indent, level + 1)}" for v in obj) + f"\n{pad}]"
    return json.dumps(obj)


def plain(value):
    """A dataclass or other JSON-able value in plain JSON types (tuples become lists, keys strings):
    what json and torch.load(weights_only=True) both read back as it was written."""
    return json.loads(json.dumps(asdict(value) if is_dataclass(value) else value))


def write_json(obj, path) -> None:
    """``obj`` as JSON (``to_json``), through ``write_atomic``: readers see the old file or the new one."""
    write_atomic(path, lambda f: f.write((to_json(obj) + "\n").encode()))
