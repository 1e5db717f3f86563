"""capsedu.speed.gemm_conv: the convolution as matrix products gives F.conv2d's values and
gradients, and accelerate puts it into (and readable takes it out of) the primary capsules."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from capsedu.core.capsnet import CapsNet
from capsedu.speed.fast import accelerate, readable
from capsedu.speed.gemm_conv import GemmConv2d, gemm_conv2d


def _grads(conv, x, w, b, stride, g):
    y = conv(x, w, b, stride)
    return (y, *torch.autograd.grad((y * g).sum(), (x, w, b)))


# (H - k) % stride and (W - k) % stride: 0 and 0, 1 and 1 at stride 2; the kernel 2 < stride
# 3 leaves some parities without a tap, and their input positions without a gradient
@pytest.mark.parametrize("stride, size, k", [(1, (13, 11), 3), (2, (13, 11), 3), (2, (12, 10), 3),
                                             (3, (13, 11), 3), (3, (13, 11), 2), (1, (6, 9), 5)])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_values_and_gradients_match_conv2d(stride, size, k, dtype, tol):
    gen = torch.Generator().manual_seed(stride)
    x = torch.randn(3, 5, *size, dtype=dtype, generator=gen).requires_grad_()
    w = torch.randn(7, 5, k, k, dtype=dtype, generator=gen).requires_grad_()
    b = torch.randn(7, dtype=dtype, generator=gen).requires_grad_()
    g = torch.randn(F.conv2d(x, w, b, stride).shape, dtype=dtype, generator=gen)
    for ours, ref in zip(_grads(gemm_conv2d, x, w, b, stride, g), _grads(F.conv2d, x, w, b, stride, g)):
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        torch.testing.assert_close(ours, ref, atol=tol, rtol=tol)


def test_under_cpu_autocast_it_runs_in_bf16_as_accurately_as_conv2d():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 16, 20, 20, generator=gen).requires_grad_()
    w = (0.1 * torch.randn(32, 16, 9, 9, generator=gen)).requires_grad_()
    b = torch.randn(32, generator=gen).requires_grad_()
    g = torch.randn(2, 32, 6, 6, generator=gen)
    out = {}
    for name, conv in (("ours", gemm_conv2d), ("oneDNN", F.conv2d)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = conv(x, w, b, 2)
        assert y.dtype == torch.bfloat16
        out[name] = (y, *torch.autograd.grad((y.float() * g).sum(), (x, w, b)))
    # the truth: float64 on the bf16-rounded inputs
    x64, w64, b64 = (t.detach().bfloat16().double().requires_grad_() for t in (x, w, b))
    truth = _grads(F.conv2d, x64, w64, b64, 2, g.double())
    for ours, ref, true in zip(out["ours"], out["oneDNN"], truth):
        err = lambda t: (t.double() - true).abs().max().item()
        assert err(ours) <= 2 * err(ref) + 1e-3 * true.abs().max().item()


def test_accelerate_swaps_in_the_gemm_convolution_and_readable_takes_it_out():
    torch.manual_seed(0)
    model = CapsNet().eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        before = model(x)[1]
        accelerate(model, compile_routing=False)
        assert type(model.primary.conv) is GemmConv2d and type(model.conv1) is nn.Conv2d
        after = model(x)[1]
        model.apply(readable)
    assert type(model.primary.conv) is nn.Conv2d
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-4)
    assert type(accelerate(CapsNet(), compile_routing=False, gemm_conv=False).primary.conv) is nn.Conv2d


def test_a_padded_convolution_falls_back_to_conv2d():
    conv = GemmConv2d(4, 6, 3, stride=2, padding=1)
    x = torch.rand(2, 4, 9, 9)
    torch.testing.assert_close(conv(x), F.conv2d(x, conv.weight, conv.bias, 2, 1))
