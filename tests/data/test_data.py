"""Tests for capsedu.data.mnist: loading (sample, torchvision offline, IDX), bad data files and arguments
(each one DataError or ValueError line naming what was expected), shifts, composites."""
import gzip
import struct
import sys
import urllib.error
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import capsedu
from capsedu import data
from capsedu.data import mnist
from capsedu.data.mnist import IDX_FILES, DataError, DownloadError, load_dataset, read_idx

ASSET = Path(capsedu.__file__).with_name("assets") / "mnist10k.npz"


@pytest.fixture(scope="module")
def npz():
    with np.load(ASSET) as f:
        return f["x"], f["y"]


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    """No test may download: torchvision's fetcher fails at once, and the default root is empty."""
    monkeypatch.setenv("CAPSEDU_DATA", str(tmp_path / "cache"))
    try:
        import torchvision.datasets.mnist as tv_mnist
    except ImportError:
        return

    def refuse(url, *args, **kwargs):
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(tv_mnist, "download_and_extract_archive", refuse)


def write_idx(path, arr, gz=False):
    """Write arr as an IDX file: magic 00 00 code ndim, big-endian uint32 dims, big-endian data."""
    code, dtype = {"uint8": (0x08, ">u1"), "int32": (0x0C, ">i4"), "float32": (0x0D, ">f4")}[arr.dtype.name]
    blob = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(dtype).tobytes()
    path.write_bytes(gzip.compress(blob) if gz else blob)
    return path


def write_mnist_folder(folder, x, y, gz=False):
    """The four MNIST-layout IDX files: first 9,000 as train, the rest as t10k."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, a in zip(IDX_FILES, (x[:9000], y[:9000], x[9000:], y[9000:])):
        write_idx(folder / (name + ".gz" * gz), a, gz=gz)
    return folder


def assert_matches_npz(ds, x, y):
    for got, want in ((ds.y_train, y[:9000]), (ds.y_test, y[9000:])):
        assert torch.equal(got, torch.from_numpy(want).long())
    for got, want in ((ds.x_train, x[:9000]), (ds.x_test, x[9000:])):
        assert torch.equal(got, torch.from_numpy(want).float().div(255).unsqueeze(1))


# ---------------------------------------------------------------- the embedded sample
def test_sample_split_dtypes_and_order(mnist_sample, npz):
    ds = mnist_sample
    assert (ds.name, ds.source) == ("mnist", "sample")
    assert ds.x_train.shape == (9000, 1, 28, 28) and ds.x_test.shape == (1000, 1, 28, 28)
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert ds.x_train.min() == 0 and ds.x_train.max() == 1
    assert_matches_npz(ds, *npz)
    # class counts stated in the asset README
    counts = torch.bincount(torch.cat([ds.y_train, ds.y_test]), minlength=10).tolist()
    assert counts == [1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978]


def test_sample_prints_one_line(capsys):
    load_dataset(source="sample")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "sample" in out and "9,000 train / 1,000 test" in out


def test_sample_missing_is_clear(monkeypatch, tmp_path):
    monkeypatch.setattr(mnist, "resources", SimpleNamespace(files=lambda pkg: tmp_path))
    with pytest.raises(DataError, match="missing"):
        load_dataset(source="sample", verbose=False)


# ---------------------------------------------------------------- torchvision, offline
# torchvision is optional for readers (the `full` extra) but installed for the tests
# (requirements.txt, the `test` extra): these tests import it and fail without it.
@pytest.mark.parametrize("name, folder", [("mnist", "MNIST"), ("fashion-mnist", "FashionMNIST")])
def test_full_reads_torchvision_layout_offline_from_root_or_env(monkeypatch, tmp_path, npz, name, folder):
    import torchvision  # noqa: F401  (a test dependency: fail, never skip, without it)
    write_mnist_folder(tmp_path / folder / "raw", *npz)
    monkeypatch.setenv("CAPSEDU_DATA", str(tmp_path))
    ds = load_dataset(name, source="full", root=tmp_path if name == "mnist" else None, verbose=False)
    assert (ds.name, ds.source) == (name, "full")
    assert_matches_npz(ds, *npz)


def test_full_download_failure_is_short(tmp_path):
    import torchvision  # noqa: F401  (a test dependency: fail, never skip, without it)
    with pytest.raises(DownloadError) as info:
        load_dataset(source="full", root=tmp_path, verbose=False)
    msg = str(info.value)
    assert "source='sample'" in msg and "network disabled" in msg and "\n" not in msg
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no urllib trace


def test_auto_falls_back_to_sample_with_one_line(monkeypatch, tmp_path, capsys, npz):
    import torchvision as tv
    # the real urllib path, against a local port that refuses at once
    monkeypatch.undo()
    monkeypatch.setattr(tv.datasets.MNIST, "mirrors", ["http://127.0.0.1:9/"])
    ds = load_dataset("mnist", source="auto", root=tmp_path / "empty")
    out = capsys.readouterr().out
    assert ds.source == "sample" and out.count("\n") == 1
    assert "unavailable" in out and "embedded 10k sample" in out
    assert_matches_npz(ds, *npz)


def test_auto_without_torchvision_falls_back(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torchvision", None)   # import torchvision raises ImportError
    ds = load_dataset(source="auto")
    out = capsys.readouterr().out
    assert ds.source == "sample" and out.count("\n") == 1 and "not installed" in out


# ---------------------------------------------------------------- IDX files
@pytest.mark.parametrize("gz", [False, True])
def test_idx_folder(tmp_path, npz, gz):
    folder = write_mnist_folder(tmp_path / "idx", *npz, gz=gz)
    ds = load_dataset("mnist", source="idx", root=folder, verbose=False)
    assert ds.source == "idx"
    assert_matches_npz(ds, *npz)


def test_read_idx_other_types_and_corrupt_files(tmp_path):
    ints = np.arange(-6, 6, dtype=np.int32).reshape(3, 4) * 100_000
    floats = np.linspace(-1, 1, 5, dtype=np.float32)
    assert np.array_equal(read_idx(write_idx(tmp_path / "i", ints)), ints)
    assert np.array_equal(read_idx(write_idx(tmp_path / "f.gz", floats, gz=True)), floats)
    good = write_idx(tmp_path / "good", np.zeros((4, 28, 28), np.uint8)).read_bytes()
    for blob, match in ((b"\x12\x34\x08\x03" + good[4:], "not an IDX file"), (b"\0\0\x07\x03" + good[4:], "not an IDX"),
                        (good[:9], "header"), (good[:-10], "truncated"), (good + b"\0", "too long"), (b"", "not an IDX")):
        (tmp_path / "bad").write_bytes(blob)
        with pytest.raises(DataError, match=match):
            read_idx(tmp_path / "bad")
    (tmp_path / "cut.gz").write_bytes(gzip.compress(good)[:-20])
    with pytest.raises(DataError, match="cannot read"):
        read_idx(tmp_path / "cut.gz")


def small_idx_folder(path, **replace):
    """Four small IDX files (5 train and 3 test digits), any of them replaced."""
    rng = np.random.default_rng(0)
    arrays = {"train_x": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8), "train_y": np.arange(5, dtype=np.uint8),
              "test_x": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8), "test_y": np.arange(3, dtype=np.uint8),
              **replace}
    path.mkdir()
    for name, a in zip(IDX_FILES, arrays.values()):
        write_idx(path / name, a)
    return path


@pytest.mark.parametrize("replace, match", [
    (dict(train_x=np.zeros((0, 28, 28), np.uint8), train_y=np.zeros(0, np.uint8)),
     "train images in .* hold no images; expected at least one 28x28 image"),
    (dict(test_y=np.array([0, -1, 2], np.int32)), "t10k labels in .* range from -1 to 2, expected values 0-9"),
    (dict(train_y=np.array([0, 1, 2, 3, 10], np.uint8)), "train labels in .* range from 0 to 10, expected values 0-9"),
    (dict(train_y=np.arange(5, dtype=np.float32)), "train labels in .* are float32 .* expected 5 integer labels"),
    (dict(test_y=np.arange(2, dtype=np.uint8)), r"t10k labels in .* expected 3 integer labels \(one per image\)"),
    (dict(test_x=np.zeros((3, 32, 32), np.uint8)), r"t10k images in .* expected uint8 \(N, 28, 28\)"),
])
def test_bad_idx_folders_are_named(tmp_path, replace, match):
    folder = small_idx_folder(tmp_path / "bad", **replace)
    with pytest.raises(DataError, match=match) as err:
        load_dataset("mnist", "idx", root=folder, verbose=False)
    assert "\n" not in str(err.value) and str(folder) in str(err.value)


def test_a_sample_that_fails_its_checksum_is_reported_and_refused(monkeypatch):
    assert mnist.sample_ok()
    monkeypatch.setattr(mnist, "SAMPLE_SHA256", "0" * 64)
    assert not mnist.sample_ok()
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


def test_idx_folder_problems(tmp_path, npz):
    with pytest.raises(DataError, match="not found"):
        load_dataset("mnist", source="idx", root=tmp_path / "nowhere", verbose=False)
    folder = write_mnist_folder(tmp_path / "idx", *npz)
    (folder / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="lacks t10k-labels"):
        load_dataset("mnist", source="idx", root=folder, verbose=False)


# ---------------------------------------------------------------- random_shift
def shift_reference(img, dy, dx):
    """img (C,H,W) moved down by dy and right by dx, zero filled (slicing, for the test only)."""
    out = torch.zeros_like(img)
    H, W = img.shape[1:]
    if abs(dy) >= H or abs(dx) >= W:
        return out  # moved off the image entirely
    out[:, max(dy, 0):H + min(dy, 0), max(dx, 0):W + min(dx, 0)] = \
        img[:, max(-dy, 0):H + min(-dy, 0), max(-dx, 0):W + min(-dx, 0)]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.uint8])
def test_shift_images_is_the_one_shift(dtype):
    """shift_images moves each image by its own (dy, dx), any sign or size, zero filled, all channels alike."""
    x = (torch.rand(7, 2, 6, 9, generator=torch.Generator().manual_seed(0)) * 200 + 1).to(dtype)
    dy, dx = torch.tensor([0, 1, -2, 5, -6, 9, 3]), torch.tensor([0, -1, 3, -8, 9, 0, -12])
    out = data.shift_images(x, dy, dx)
    assert out.shape == x.shape and out.dtype == dtype
    for img, res, a, b in zip(x, out, dy.tolist(), dx.tolist()):
        assert torch.equal(res, shift_reference(img, a, b))


def test_random_shift_draws_two_rows_dy_then_dx():
    """The draw the stored runs used: one (2, B) tensor, first row dy, second dx (CPU generator or global seed);
    shift_images (below) shifts every channel alike."""
    x = torch.rand(50, 1, 12, 12)
    dy, dx = torch.randint(-3, 4, (2, 50), generator=torch.Generator().manual_seed(8))
    assert torch.equal(data.random_shift(x, 3, generator=torch.Generator().manual_seed(8)), data.shift_images(x, dy, dx))
    torch.manual_seed(9)
    out = data.random_shift(x, 3)
    torch.manual_seed(9)
    assert torch.equal(out, data.shift_images(x, *torch.randint(-3, 4, (2, 50))))
    assert torch.equal(data.random_shift(x, 0), x)   # a max_shift too big: test_api_errors
    with pytest.raises(ValueError, match="B, C, H, W"):
        data.random_shift(x[0], 2)


# ---------------------------------------------------------------- composites
# two_digit_pairs' halves, classes and targets: tests/experiments/test_two_digits.py (two_digit_test_set)
def test_pairs_need_two_classes_and_valid_layout(mnist_sample):
    x = mnist_sample.x_train[:20]
    with pytest.raises(ValueError, match="two different classes"):
        data.two_digit_pairs(x, torch.zeros(20, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="layout"):
        data.two_digit_pairs(x, mnist_sample.y_train[:20], 5, layout="diagonal")


def test_overlapping_pairs_separate_digits_and_overlay(mnist_sample):
    """separate=True (chapter 9's MultiMNIST): overlay, lower-class digit, higher-class digit; each digit
    centred, then shifted as pad_and_shift draws it, lower class first. The overlay alone (chapter 7):
    digits in draw order, each centred, then random_shift's draw."""
    from capsedu.data.pairs import distinct_pairs
    x, y = mnist_sample.x_test[:300], mnist_sample.y_test[:300]
    images, targets = data.overlapping_pairs(x, y, 80, 36, 4, torch.Generator().manual_seed(0), separate=True)
    assert images.shape == (80, 3, 36, 36) and targets.shape == (80, 10) and (targets.sum(1) == 2).all()
    assert torch.equal(images[:, 0], (images[:, 1] + images[:, 2]).clamp(max=1))
    g = torch.Generator().manual_seed(0)
    i, j, t = distinct_pairs(x, y, 80, g)
    lo, hi = torch.minimum(y[i], y[j]), torch.maximum(y[i], y[j])
    first = torch.where(y[i] < y[j], i, j)
    second = torch.where(y[i] < y[j], j, i)
    assert torch.equal(t, targets) and torch.equal(y[first], lo) and torch.equal(y[second], hi)
    assert torch.equal(targets, torch.nn.functional.one_hot(y[i], 10) + torch.nn.functional.one_hot(y[j], 10))
    assert torch.equal(images[:, 1:2], data.pad_and_shift(x[first], 36, 4, g))
    assert torch.equal(images[:, 2:3], data.pad_and_shift(x[second], 36, 4, g))
    again, _ = data.overlapping_pairs(x, y, 80, 36, 4, torch.Generator().manual_seed(0), separate=True)
    assert torch.equal(images, again)
    images, _ = data.overlapping_pairs(x, y, 80, 36, 4, torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)
    i, j, _ = distinct_pairs(x, y, 80, g)
    a = data.random_shift(data.center_on_canvas(x[i], 36), 4, g)
    b = data.random_shift(data.center_on_canvas(x[j], 36), 4, g)
    assert torch.equal(images, (a + b).clamp(max=1))
