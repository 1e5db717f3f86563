"""The primary capsules' convolution as three matrix products, for the CPU fast path.

On a 2-core CPU, oneDNN ran the primary convolution (256 -> 256 channels, 9x9, stride 2)
at about a fifth of the speed of one bf16 matrix product of the same FLOPs. Here each pass
is one large matrix product over a patch matrix built once per step:

- forward: patches (B*Ho*Wo, k*k*C) from the input stored channels-last, where the
  k*C numbers of one patch row are adjacent in memory; then ``patches @ W^T + bias``;
- weight gradient: ``grad_out^T @ patches``, with the patches kept from the forward pass;
  it comes out (O, ky, kx, C), the channels-last layout ``accelerate`` stores the weight in;
- input gradient: ``grad_out @ W``, then each patch row added back where it came from
  (k * Wo additions of contiguous blocks, summed in float32 a few images at a time, so that
  the sums stay in the core's cache; the rows too are made a few images at a time).

The arithmetic is the convolution's, so values agree with ``torch.nn.functional.conv2d`` to
rounding; ``tests/speed/test_gemm_conv.py`` checks them and the gradients. The price is memory: the
patch matrix (B*Ho*Wo x k*k*C, about 150 MB in bf16 for a batch of 100) is kept for the
weight gradient; at a batch of 128 it is the largest tensor of a fast CPU step
(``benchmarks/memory.py`` compares the step with oneDNN's convolution). On CUDA, cuDNN is faster, so ``GemmConv2d`` only takes over on the CPU.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["gemm_conv2d", "GemmConv2d"]

# float32 sums of the input gradient per chunk of images, a few MB, so that they stay in cache
# (on a 2-core Xeon, 10 images of 20x20x256 at a time folded in 26 ms against 33 for all 100).
FOLD_CHUNK_BYTES = 4 << 20


def _patches(x_nhwc: torch.Tensor, k: int, s: int) -> torch.Tensor:
    """(B, H, W, C) -> (B*Ho*Wo, k*k*C), each row ordered (ky, kx, c)."""
    B, H, W, C = x_nhwc.shape
    Ho, Wo = (H - k) // s + 1, (W - k) // s + 1
    sb, sh, sw, _ = x_nhwc.stride()
    rows = x_nhwc.as_strided((B, Ho, Wo, k, k * C), (sb, s * sh, s * sw, sh, 1))
    return rows.reshape(B * Ho * Wo, k * k * C)


def _fold(g: torch.Tensor, w: torch.Tensor, shape, s: int, dtype) -> torch.Tensor:
    """Each patch's gradient, rows of ``g @ w`` (B*Ho*Wo, k*k*C), added back where it came
    from: (B, H, W, C). The rows are made for a few images at a time, as they are folded, so
    that they never take a patch matrix's memory."""
    B, C, H, W, k, Ho, Wo = shape
    out = torch.empty(B, H, W * C, dtype=dtype, device=g.device)
    wide = torch.promote_types(g.dtype, torch.float32)
    n = max(1, FOLD_CHUNK_BYTES // (H * W * C * 4))
    for b in range(0, B, n):
        m = min(n, B - b)
        rows = (g[b * Ho * Wo:(b + m) * Ho * Wo] @ w).view(m, Ho, Wo, k, k * C)
        acc = torch.zeros(m, H, W * C, dtype=wide, device=g.device)
        for ky in range(k):
            for xo in range(Wo):                 # k*C adjacent numbers of one image row
                acc[:, ky:ky + s * (Ho - 1) + 1:s, s * xo * C:(s * xo + k) * C].add_(
                    rows[:, :, xo, ky])
        out[b:b + m] = acc
    return out.view(B, H, W, C)


class _GemmConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, stride, dtype):
        O, C, k, _ = weight.shape
        B, _, H, W = x.shape
        Ho, Wo = (H - k) // stride + 1, (W - k) // stride + 1
        patches = _patches(x.permute(0, 2, 3, 1).contiguous(), k, stride)
        w = weight.permute(0, 2, 3, 1).to(dtype).reshape(O, k * k * C)  # rows ordered like a patch
        y = torch.addmm(bias.to(dtype), patches, w.t()) if bias is not None else patches @ w.t()
        ctx.save_for_backward(patches, w)
        ctx.shape, ctx.stride = (B, C, H, W, k, Ho, Wo), stride
        ctx.dtypes = x.dtype, weight.dtype, None if bias is None else bias.dtype
        return y.view(B, Ho, Wo, O).permute(0, 3, 1, 2)             # NCHW view, channels-last data

    @staticmethod
    def backward(ctx, grad_y):
        patches, w = ctx.saved_tensors
        B, C, H, W, k, Ho, Wo = ctx.shape
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        g = grad_y.permute(0, 2, 3, 1).reshape(B * Ho * Wo, -1).to(patches.dtype)   # (B*Ho*Wo, O)
        grad_w = (g.t().contiguous() @ patches).view(-1, k, k, C).permute(0, 3, 1, 2).to(w_dtype)
        wide = torch.promote_types(g.dtype, torch.float32)           # sums in float32 at least
        grad_b = None if b_dtype is None else g.sum(0, dtype=wide).to(b_dtype)
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = _fold(g, w, ctx.shape, ctx.stride, x_dtype).permute(0, 3, 1, 2)
        return grad_x, grad_w, grad_b, None, None


def gemm_conv2d(x: torch.Tensor, weight: torch.Tensor, bias=None, stride: int = 1) -> torch.Tensor:
    """``torch.nn.functional.conv2d(x, weight, bias, stride)`` as matrix products.

    No padding, dilation or groups. Under CPU autocast it runs in the autocast precision, as
    ``torch.nn.functional.conv2d`` would; the weight's gradient comes back in its own dtype."""
    dtype = x.dtype
    if torch.is_autocast_enabled("cpu") and x.device.type == "cpu":
        dtype = torch.get_autocast_dtype("cpu")
        x = x.to(dtype)
    with torch.autocast("cpu", enabled=False):
        return _GemmConv.apply(x, weight, bias, stride, dtype)


class GemmConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` (same parameters and state dict) that runs ``gemm_conv2d`` on the CPU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        plain = (self.padding == (0, 0) and self.dilation == (1, 1) and self.groups == 1
                 and self.stride[0] == self.stride[1] and self.kernel_size[0] == self.kernel_size[1])
        if x.device.type != "cpu" or not plain or x.dim() != 4:
            return super().forward(x)
        return gemm_conv2d(x, self.weight, self.bias, self.stride[0])
