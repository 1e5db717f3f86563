"""Bad data files: an IDX folder with no images, signed or float labels, labels out of range, a sample
that fails its checksum. Each is one DataError naming the folder and what was expected, at load time."""
import struct

import numpy as np
import pytest

import capsedu.data.mnist
from capsedu.data.mnist import IDX_FILES, DataError, load_dataset, sample_ok

CODES = {np.dtype("uint8"): 0x08, np.dtype("int8"): 0x09, np.dtype(">i4"): 0x0C, np.dtype(">f4"): 0x0D}


def idx_bytes(arr):
    arr = np.asarray(arr)
    dtype = arr.dtype.newbyteorder(">") if arr.dtype.itemsize > 1 else arr.dtype
    return bytes([0, 0, CODES[dtype], arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(dtype).tobytes()


def idx_folder(path, train_x=None, train_y=None, test_x=None, test_y=None):
    """Four small IDX files (5 train and 3 test digits), any of them replaced."""
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (5, 28, 28), dtype=np.uint8), np.arange(5, dtype=np.uint8),
              rng.integers(0, 256, (3, 28, 28), dtype=np.uint8), np.arange(3, dtype=np.uint8)]
    for i, a in enumerate((train_x, train_y, test_x, test_y)):
        if a is not None:
            arrays[i] = a
    path.mkdir()
    for name, a in zip(IDX_FILES, arrays):
        (path / name).write_bytes(idx_bytes(a))
    return path


@pytest.mark.parametrize("replace, match", [
    (dict(train_x=np.zeros((0, 28, 28), np.uint8), train_y=np.zeros(0, np.uint8)),
     "train images in .* hold no images; expected at least one 28x28 image"),
    (dict(test_y=np.array([0, -1, 2], np.int8)), "t10k labels in .* range from -1 to 2, expected values 0-9"),
    (dict(train_y=np.array([0, 1, 2, 3, 10], np.uint8)), "train labels in .* range from 0 to 10, expected values 0-9"),
    (dict(train_y=np.arange(5, dtype=np.float32)), "train labels in .* are float32 .* expected 5 integer labels"),
    (dict(test_y=np.arange(2, dtype=np.uint8)), r"t10k labels in .* expected 3 integer labels \(one per image\)"),
    (dict(test_x=np.zeros((3, 32, 32), np.uint8)), r"t10k images in .* expected uint8 \(N, 28, 28\)"),
])
def test_bad_idx_folders_are_named(tmp_path, replace, match):
    folder = idx_folder(tmp_path / "bad", **replace)
    with pytest.raises(DataError, match=match) as err:
        load_dataset("mnist", "idx", root=folder, verbose=False)
    assert "\n" not in str(err.value) and str(folder) in str(err.value)


def test_a_sample_that_fails_its_checksum_is_reported_and_refused(monkeypatch):
    assert sample_ok()
    monkeypatch.setattr(capsedu.data.mnist, "SAMPLE_SHA256", "0" * 64)
    assert not sample_ok()
    with pytest.raises(DataError, match="corrupt: sha256 [0-9a-f]{64}, expected 0{64}"):
        load_dataset("mnist", "sample", verbose=False)


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="kmnist"), "unknown dataset name 'kmnist'"),
    (dict(source="web"), "unknown source 'web'"),
    (dict(name="fashion-mnist", source="sample"), "holds MNIST only"),
    (dict(source="idx"), "needs root="),
    (dict(device="meta"), "device must be 'auto', 'cpu', 'cuda' or 'mps', got 'meta'"),
])
def test_bad_load_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_dataset(**{"verbose": False, **kwargs})
