"""The data: MNIST as tensors on one device, two-digit pairs, shifts and affine test sets.

- ``mnist``: the embedded 10k sample, torchvision's MNIST and Fashion-MNIST, IDX folders.
- ``pairs``: two distinct digits stacked or overlaid (chapters 7 and 9).
- ``transforms``: one whole-pixel shift behind the paper's random shift and digits placed on a
  larger canvas; affNIST-style test sets.
"""

from capsedu.data.mnist import DataError, Dataset, DownloadError, load_dataset
from capsedu.data.pairs import distinct_pairs, overlapping_pairs, two_digit_pairs
from capsedu.data.transforms import (
    affine_test_set,
    center_on_canvas,
    pad_and_shift,
    random_affine,
    random_shift,
    shift_images,
)

__all__ = ["load_dataset", "Dataset", "DataError", "DownloadError", "distinct_pairs", "two_digit_pairs", "overlapping_pairs", "random_shift", "shift_images", "center_on_canvas", "pad_and_shift", "random_affine", "affine_test_set"]
