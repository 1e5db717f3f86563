"""Helpers shared by the tests (plain functions; pytest puts this folder on sys.path)."""
import io
from pathlib import Path

import numpy as np
from PIL import Image

from capsedu import cli


def run(capsys, *argv):
    """cli.main in this process: (exit code, stdout, the stderr lines)."""
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


def snapshot(folder: Path):
    """Every path below ``folder`` with its bytes (None for a folder): to show a command changed nothing."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def decode_png(data: bytes) -> np.ndarray:
    """PNG bytes -> pixel array: to compare a static twin's frames with the live widget's."""
    return np.asarray(Image.open(io.BytesIO(data)))
