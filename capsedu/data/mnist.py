"""MNIST for the book: whole datasets as tensors on one device.

- `load_dataset`: MNIST or Fashion-MNIST as a `Dataset` of four tensors, from
  torchvision ("full"), the embedded 10k MNIST sample ("sample"), a folder of
  IDX files ("idx"), or "auto" (full where it can be had, else the sample).
- `read_idx`: a small parser for LeCun's IDX format (optionally gzipped).
"""
import gzip
import hashlib
import io
import os
import socket
import struct
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from capsedu import SOURCES
from capsedu.runtime.device import resolve_device

NAMES = ("mnist", "fashion-mnist")
SAMPLE_SHA256 = "c03d6af810269a0b25ef8e8971f521767d52b05849e4fd977d6ca9528003c0b3"
SAMPLE_TRAIN = 9000  # first 9,000 sample digits train, last 1,000 test
FASHION_IDX_DIR = "/usr/share/datasets/fashion-mnist"  # Debian: dataset-fashion-mnist
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
DOWNLOAD_TIMEOUT_S = 30  # per socket operation, so a silent network cannot hang us
_IDX_TYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_FALLBACK = {"mnist": "source='sample' (the embedded 10k MNIST digits)",
             "fashion-mnist": f"source='idx' with the IDX files (Debian: "
                              f"apt-get install dataset-fashion-mnist -> {FASHION_IDX_DIR})"}


class DataError(RuntimeError):
    """A data file is missing, corrupt or fails its checksum."""


class DownloadError(DataError):
    """torchvision could not load or download the full dataset."""


@dataclass
class Dataset:
    """Train and test tensors on one device: images (N,1,28,28) float32 in [0,1], labels int64."""
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    name: str
    source: str  # where the data actually came from: "sample", "full" or "idx"

    def __repr__(self):
        return (f"Dataset(name={self.name!r}, source={self.source!r}, train={len(self.y_train):,}, "
                f"test={len(self.y_test):,}, device={self.x_train.device})")


# ---------------------------------------------------------------- loading
def n_test_digits(settings) -> int:
    """How many test digits a stored run scored: its settings' ``n_test``, else the whole test set
    of its ``source`` (the sample's last 1,000; 10,000 from full MNIST or IDX files)."""
    sizes = {"sample": 10_000 - SAMPLE_TRAIN, "full": 10_000, "idx": 10_000}
    if not settings.get("n_test") and settings.get("source") not in sizes:
        raise ValueError(f"n_test is None and source {settings.get('source')!r} does not say how many "
                         "test digits the run scored")
    return settings.get("n_test") or sizes[settings["source"]]


def load_dataset(name="mnist", source="auto", device="cpu", root=None, verbose=True):
    """Load `name` from `source` as a `Dataset` on `device`; print one line saying which data when verbose."""
    if name not in NAMES:
        raise ValueError(f"unknown dataset name {name!r}; expected one of {NAMES}")
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r}; expected one of {SOURCES}")
    if source == "sample" and name != "mnist":
        raise ValueError(f"the embedded sample holds MNIST only; for {name!r} use source='full', 'idx' or 'auto'")
    device = resolve_device(device)
    if source == "idx":
        if root is None and name == "mnist":
            raise ValueError("source='idx' for mnist needs root=<folder with the four IDX files>")
        root = Path(root if root is not None else FASHION_IDX_DIR).expanduser()
        if not root.is_dir():
            raise DataError(f"IDX folder {root} not found; expected the files {', '.join(IDX_FILES)} (or .gz)")
    elif root is None:
        root = os.environ.get("CAPSEDU_DATA") or "~/.cache/capsedu"

    label = "MNIST" if name == "mnist" else "Fashion-MNIST"
    if source == "sample":
        arrays, what = _load_sample(), "MNIST: the embedded 10k sample"
    elif source == "idx":
        arrays, what = _load_idx_folder(root), f"{label}: IDX files in {root}"
    elif source == "full":
        arrays, what = _load_torchvision(name, root), f"{label}: full, via torchvision in {root}"
    else:  # auto: full, else the local fallback, said in the same one line
        try:
            arrays, source = _load_torchvision(name, root), "full"
            what = f"{label}: full, via torchvision in {root}"
        except DownloadError as err:
            if name == "mnist":
                arrays, source = _load_sample(), "sample"
                what = f"full MNIST unavailable ({err.reason}); using the embedded 10k sample"
            elif Path(FASHION_IDX_DIR).is_dir():
                arrays, source = _load_idx_folder(Path(FASHION_IDX_DIR)), "idx"
                what = f"full Fashion-MNIST unavailable ({err.reason}); using IDX files in {FASHION_IDX_DIR}"
            else:
                raise
    ds = Dataset(*_to_tensors(arrays, device), name=name, source=source)
    if verbose:
        print(f"capsedu data: {what} ({len(ds.y_train):,} train / {len(ds.y_test):,} test, on {device})")
    return ds


def _to_tensors(arrays, device):
    """uint8 (N,28,28) images and labels -> float32 (N,1,28,28) in [0,1] and int64, converted on `device`."""
    out = []
    for i, a in enumerate(arrays):
        t = torch.as_tensor(a).to(device)  # move as uint8: 4x less to copy
        out.append(t.unsqueeze(1).float().div_(255) if i % 2 == 0 else t.long())
    return out


def _sample_bytes():
    """The embedded sample file and its bytes (None if it cannot be read)."""
    res = resources.files("capsedu") / "assets" / "mnist10k.npz"
    try:
        return res, res.read_bytes()
    except (FileNotFoundError, OSError):
        return res, None


def sample_ok() -> bool:
    """True when the embedded sample is present and matches its sha256 (what ``info`` reports)."""
    blob = _sample_bytes()[1]
    return blob is not None and hashlib.sha256(blob).hexdigest() == SAMPLE_SHA256


def _load_sample():
    """The shipped 10k MNIST digits, sha256-checked, split 9,000 / 1,000 in stored order."""
    res, blob = _sample_bytes()
    if blob is None:
        raise DataError(f"the embedded MNIST sample {res} is missing; reinstall capsedu")
    digest = hashlib.sha256(blob).hexdigest()
    if digest != SAMPLE_SHA256:
        raise DataError(f"the embedded MNIST sample {res} is corrupt: sha256 {digest}, expected {SAMPLE_SHA256}")
    with np.load(io.BytesIO(blob)) as npz:
        x, y = npz["x"], npz["y"]
    return x[:SAMPLE_TRAIN], y[:SAMPLE_TRAIN], x[SAMPLE_TRAIN:], y[SAMPLE_TRAIN:]


def _load_torchvision(name, root):
    """Full train/test sets through torchvision (download=True), as raw uint8 tensors."""
    fallback = _FALLBACK[name]
    try:
        from torchvision import datasets
    except ImportError:
        raise _download_error("torchvision is not installed (pip install 'capsedu[full]')", fallback) from None
    cls = datasets.MNIST if name == "mnist" else datasets.FashionMNIST
    root = str(Path(root).expanduser())
    old_timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        train, test = (cls(root, train=t, download=True) for t in (True, False))
        return train.data, train.targets, test.data, test.targets
    except Exception as err:  # noqa: BLE001 -- urllib, http, socket, checksum, file: all mean "not available"
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        reason = (lines[-1] if lines else type(err).__name__)[:120]
        raise _download_error(reason, fallback, f"could not load or download {name} into {root}") from None
    finally:
        socket.setdefaulttimeout(old_timeout)


def _download_error(reason, fallback, what="cannot load the full dataset"):
    err = DownloadError(f"{what}: {reason}. Use {fallback}.")
    err.reason = reason
    return err


# ---------------------------------------------------------------- IDX files
def read_idx(path):
    """Read one IDX file (LeCun's format, optionally .gz) into a native-endian numpy array."""
    path = Path(path)
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as err:  # missing file, bad or truncated gzip stream
        raise DataError(f"cannot read IDX file {path}: {err}") from None
    # magic: two zero bytes, a type code, the number of dimensions
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES or data[3] == 0:
        raise DataError(f"{path} is not an IDX file: magic bytes {data[:4].hex()!r}, "
                        f"expected 0000 + type code (08 to 0e) + number of dims")
    ndim, dtype = data[3], np.dtype(_IDX_TYPES[data[2]])
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path} is truncated: {len(data)} bytes, shorter than its {header}-byte header")
    dims = struct.unpack(f">{ndim}I", data[4:header])  # big-endian uint32 sizes
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        problem = "truncated" if len(data) < expected else "too long"
        raise DataError(f"{path} is {problem}: {len(data):,} bytes, its header {dims} says {expected:,}")
    return np.frombuffer(data, dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def _load_idx_folder(folder):
    """The four MNIST-layout IDX files (each plain or .gz) of `folder`, checked for shape and labels."""
    arrays = []
    for stem in IDX_FILES:
        path = next((folder / f for f in (stem, stem + ".gz") if (folder / f).is_file()), None)
        if path is None:
            raise DataError(f"{folder} lacks {stem} (or {stem}.gz); expected {', '.join(IDX_FILES)}")
        arrays.append(read_idx(path))
    for x, y, split in ((arrays[0], arrays[1], "train"), (arrays[2], arrays[3], "t10k")):
        if x.ndim != 3 or x.shape[1:] != (28, 28) or x.dtype != np.uint8:
            raise DataError(f"{split} images in {folder} are {x.dtype} {x.shape}, expected uint8 (N, 28, 28)")
        if len(x) == 0:
            raise DataError(f"{split} images in {folder} hold no images; expected at least one 28x28 image")
        if y.shape != (len(x),) or y.dtype.kind not in "iu":
            raise DataError(f"{split} labels in {folder} are {y.dtype} of shape {y.shape}, "
                            f"expected {len(x)} integer labels (one per image)")
        if y.min() < 0 or y.max() > 9:
            raise DataError(f"{split} labels in {folder} range from {y.min()} to {y.max()}, expected values 0-9")
    return arrays
