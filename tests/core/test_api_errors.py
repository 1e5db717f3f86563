"""Bad input to the Python API: each case is refused up front, by a ValueError or TypeError whose one
line names what was expected, and nothing is trained or changed on the way."""
import pytest
import torch
from cli_helpers import TINY, noise

from capsedu.core.capsnet import CapsNet
from capsedu.core.heads import CapsuleClassifier, PoolingClassifier
from capsedu.core.layers import DenseCapsules, PrimaryCapsules, SharedCapsules
from capsedu.core.losses import margin_loss
from capsedu.data.transforms import random_shift
from capsedu.training.evaluation import evaluate, predict_lengths
from capsedu.training.loop import fit
from capsedu.training.pretrained import config_from_dict

FAST = dict(device="cpu", progress=False)


def one_line(err):
    text = str(err.value)
    assert "\n" not in text and len(text) < 400, text
    return text


# ---------------------------------------------------------------- construction
@pytest.mark.parametrize("args, kwargs, error, match", [
    (("x",), {}, TypeError, "config must be a CapsNetConfig"),
    ((), dict(image_size=(28,)), ValueError, r"image_size must be \(height, width\)"),
    ((), dict(image_size=(28, 0)), ValueError, "image_size"),
    ((), dict(num_classes=0), ValueError, "num_classes must be an int >= 1"),
    ((), dict(digit_dim=0), ValueError, "digit_dim"),
    ((), dict(primary_dim=2.5), TypeError, "primary_dim must be an int"),
    ((), dict(iterations=True), TypeError, "iterations"),
    ((), dict(squash_k=0), ValueError, "squash_k must be a finite number > 0"),
    ((), dict(squash_k="1"), TypeError, "squash_k"),
    ((), dict(squash_k=float("nan")), ValueError, "squash_k"),
    ((), dict(routing="em"), ValueError, "unknown routing mode"),
    ((), dict(decoder_hidden=(512, -1)), ValueError, "decoder_hidden"),
    ((), dict(conv_channels=200_000), ValueError, "parameters, more than"),
    ((), dict(colour=3), TypeError, "unknown option"),
])
def test_capsnet_rejects_bad_settings_at_construction(args, kwargs, error, match):
    with pytest.raises(error, match=match) as err:
        CapsNet(*args, **kwargs)
    one_line(err)


def test_config_from_dict_and_the_other_models():
    assert config_from_dict({"image_size": [28, 28], "decoder_hidden": [32]}).image_size == (28, 28)
    with pytest.raises(ValueError, match="unknown CapsNetConfig field"):
        config_from_dict({"conv_channel": 8})
    for build, match in ((lambda: PoolingClassifier(num_classes=0), "num_classes"),
                         (lambda: CapsuleClassifier(squash_k=-1.0), "squash_k"),
                         (lambda: PrimaryCapsules(capsule_dim=0), "capsule_dim"),
                         (lambda: DenseCapsules(out_dim=0), "out_dim"),
                         (lambda: SharedCapsules(in_dim="128"), "in_dim"),
                         (lambda: SharedCapsules(routing="dynamic"), "unknown routing mode"),
                         (lambda: DenseCapsules(iterations=0), "DenseCapsules: iterations must be an int >= 1"),
                         (lambda: SharedCapsules(squash_k=0), "SharedCapsules: squash_k must be a finite number > 0"),
                         (lambda: CapsNet(image_size=12), "too small")):
        with pytest.raises((ValueError, TypeError), match=match) as err:
            build()
        one_line(err)
    with pytest.raises(TypeError, match="PrimaryCapsules: capsule_dim must be an int"):
        PrimaryCapsules(capsule_dim=8.0)


# ---------------------------------------------------------------- forward, losses, evaluation
def test_empty_batches_and_bad_images_are_named():
    torch.manual_seed(0)
    model = CapsNet(**TINY)
    cases = [(lambda: model(torch.rand(0, 1, 28, 28)), "N >= 1"),
             (lambda: model(torch.rand(2, 1, 32, 32)),
              r"float images \(N, 1, 28, 28\) with N >= 1, got shape \(2, 1, 32, 32\)"),
             (lambda: model(torch.rand(1, 28, 28)), r"\(N, 1, 28, 28\)"),
             (lambda: model(torch.zeros(2, 1, 28, 28, dtype=torch.uint8)), "dtype torch.uint8"),
             (lambda: predict_lengths(model, torch.rand(0, 1, 28, 28)), "N >= 1"),
             (lambda: margin_loss(torch.rand(0, 10), torch.zeros(0, dtype=torch.long)), "at least one example"),
             (lambda: predict_lengths(model, torch.rand(2, 1, 28, 28), batch_size=0), "batch_size")]
    for call, match in cases:
        with pytest.raises(ValueError, match=match) as err:
            call()
        one_line(err)
    with pytest.raises(TypeError, match="torch.Tensor of images"):
        model.capsules([[0.0]])


@pytest.mark.parametrize("labels, error, match", [
    (torch.tensor([True, False]), TypeError, "dtype torch.bool"),
    (torch.tensor([0.0, 3.0]), ValueError, r"integer labels of shape \(2,\)"),          # float labels (N,)
    (torch.tensor([0, 1, 2]), ValueError, r"of shape \(2,\)|as many labels as images"),  # one too many
    (torch.tensor([0, 12]), ValueError, r"labels must lie in \[0, 9\], got values from 0 to 12"),
    (torch.tensor([-1, 3]), ValueError, r"labels must lie in \[0, 9\]"),
    (torch.full((2, 10), 5.0), ValueError, "multi-hot targets must be 0 or 1, got 5.0"),
    (torch.full((2, 10), float("nan")), ValueError, "must be 0 or 1"),
    ([0, 1], TypeError, "must be a torch.Tensor"),
])
def test_bad_labels_in_losses_evaluate_and_forward(labels, error, match):
    torch.manual_seed(0)
    model = CapsNet(**TINY)
    x = torch.rand(2, 1, 28, 28)
    for call in (lambda: margin_loss(torch.rand(2, 10), labels), lambda: evaluate(model, x, labels),
                 lambda: model(x, labels)):
        with pytest.raises(error, match=match) as err:
            call()
        one_line(err)


@pytest.mark.parametrize("change, match", [
    (dict(y_train=lambda y: torch.nn.functional.one_hot(y, 10).float() * 7), "y_train: multi-hot targets must be 0 or 1"),
    (dict(y_test=lambda y: y.clone().fill_(12)), r"y_test: labels must lie in \[0, 9\]"),
    (dict(y_train=lambda y: y.bool()), "dtype torch.bool"),
    (dict(y_train=lambda y: y[:-1]), "x_train must be float images"),
])
def test_fit_checks_labels_before_the_first_step(change, match):
    data = noise(16, 8)
    for name, f in change.items():
        setattr(data, name, f(getattr(data, name)))
    torch.manual_seed(0)
    model = CapsNet(**TINY)
    before = model.conv1.weight.clone()
    with pytest.raises((ValueError, TypeError), match=match) as err:
        fit(model, data, epochs=1, **FAST)
    one_line(err)
    assert torch.equal(model.conv1.weight, before)


@pytest.mark.parametrize("max_shift, error", [(True, ValueError), (2.0, ValueError), (-1, ValueError), (28, ValueError)])
def test_random_shift_takes_an_int_shift(max_shift, error):
    with pytest.raises(error, match="max_shift must be an int") as err:
        random_shift(torch.rand(2, 1, 28, 28), max_shift)
    one_line(err)
