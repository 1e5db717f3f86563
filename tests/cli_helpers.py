"""Helpers shared by the tests (plain functions; pytest puts this folder on sys.path)."""
import importlib.util
import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from PIL import Image

from capsedu import cli

ROOT = Path(__file__).resolve().parent.parent
TINY = dict(conv_channels=8, primary_types=4, primary_dim=4, digit_dim=8, decoder_hidden=(32,))  # a CapsNet of a second


def tiny_cli_capsnet(monkeypatch):
    """The CLI builds the paper's CapsNet; a tiny one (TINY) keeps each run to a second or two."""
    import capsedu.core.capsnet as capsnet
    real = capsnet.CapsNet
    monkeypatch.setattr(capsnet, "CapsNet", lambda config=None, **kw: real(config) if config is not None
                        else real(**{**TINY, **kw}))


def subset(d, n_train, n_test):
    """The first ``n_train`` training and ``n_test`` test digits of a dataset (``mnist_sample``)."""
    return SimpleNamespace(x_train=d.x_train[:n_train], y_train=d.y_train[:n_train], x_test=d.x_test[:n_test],
                           y_test=d.y_test[:n_test], name=d.name, source=d.source)


def noise(n_train=32, n_test=8, seed=1):
    """Random images with random labels: enough to check bookkeeping and refusals, not learning."""
    g = torch.Generator().manual_seed(seed)
    return SimpleNamespace(x_train=torch.rand(n_train, 1, 28, 28, generator=g), y_train=torch.randint(0, 10, (n_train,), generator=g),
                           x_test=torch.rand(n_test, 1, 28, 28, generator=g), y_test=torch.randint(0, 10, (n_test,), generator=g))


def child(code: str, *argv):
    """A Python process running ``code`` in the repository (its stdin, stdout and stderr are pipes)."""
    return subprocess.Popen([sys.executable, "-c", code, *map(str, argv)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def no_preview():
    """The preview a reader of stored runs is given where a stored folder must be usable."""
    raise AssertionError("the stored run was usable: no preview should run")


def run(capsys, *argv):
    """cli.main in this process: (exit code, stdout, the stderr lines)."""
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


def measured(value):
    """A record without what timing changes (seconds, images per second)."""
    if isinstance(value, dict):
        return {k: measured(v) for k, v in value.items() if "seconds" not in k and k != "images_per_s"}
    if isinstance(value, list):
        return [measured(v) for v in value]
    return value


def snapshot(folder: Path):
    """Every path below ``folder`` with its bytes (None for a folder): to show a command changed nothing."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def load_script(relative: str):
    """A script of the repository (``scripts/word_count.py``) imported as a module, its folder on sys.path."""
    path = ROOT / relative
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.pop(0)


def decode_png(data: bytes) -> np.ndarray:
    """PNG bytes -> pixel array: to compare a static twin's frames with the live widget's."""
    return np.asarray(Image.open(io.BytesIO(data)))
