"""The primary capsules' convolution as matrix products, for the CPU fast path.

On a 2-core CPU, oneDNN ran the primary convolution (256 -> 256 channels, 9x9, stride 2)
at about a fifth of the speed of one bf16 matrix product of the same FLOPs. Here every pass
is a few large matrix products over views of the input stored channels-last, where the k*C
numbers of one kernel row of a patch are adjacent in memory:

- forward: for each kernel row ky, rows (B*Ho*Wo, k*C) @ W[:, ky]^T, summed in float32;
- weight gradient: for each ky, ``grad_out^T @ rows``, the block W[:, ky] of the gradient,
  which comes out (O, ky, kx, C), the channels-last layout ``accelerate`` stores the weight in;
- input gradient: one parity (y mod s, x mod s) of the input positions at a time, where the
  transposed convolution is a stride-1 correlation; the kernel's columns of that parity are
  summed inside one product over a column-padded copy of grad_out, its rows in float32.
  It replaced ``grad_out @ W[:, ky, kx]`` for each kernel position, added in float32 to a
  strided slice of the gradient (k*k float32 adds, which dominated): on a loaded 2-core
  Xeon with AMX (bf16, batch 100, one thread, thread CPU time, median ratio of 11
  interleaved rounds), the input gradient ran 1.37 times as fast, forward and backward 1.13.

No patch matrix (B*Ho*Wo x k*k*C, 150 MB in bf16 at a batch of 100) is ever made: each kernel
row's rows are copied from the input as a product reads them, and the backward reads the
input again. On a quiet 2-core Xeon with AMX (bf16, batch 100, the input's gradient included),
forward and backward took 206 ms this way against 246 ms with the patch matrix built once and
kept (one process timing both, best of 5, with the input gradient of 81 strided adds).
The arithmetic is the convolution's, so values agree with ``torch.nn.functional.conv2d`` to
rounding; ``tests/speed/test_gemm_conv.py`` checks them and the gradients. On CUDA, cuDNN is
faster, so ``GemmConv2d`` only takes over on the CPU.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["gemm_conv2d", "GemmConv2d"]


def _rows(x: torch.Tensor, ky: int, k: int, s: int, Ho: int, Wo: int) -> torch.Tensor:
    """Kernel row ky of every patch of x (B, H, W, C) stored contiguously: (B*Ho*Wo, k*C)."""
    sb, sh, sw, _ = x.stride()
    rows = x[:, ky:].as_strided((x.shape[0], Ho, Wo, k * x.shape[3]), (sb, s * sh, s * sw, 1))
    return rows.reshape(-1, k * x.shape[3])


def _input_grad(g, w, s: int, H: int, W: int, wide: torch.dtype) -> torch.Tensor:
    """The input's gradient (B, H, W, C) from grad_out g (B, Ho, Wo, O), one parity at a time.

    Input column s*n + px meets only kernel columns px + s*j, at output column n - j: for each
    parity px a stride-1 correlation, whose nb taps lie side by side in a column-padded copy
    of g, so that one product sums them (K = nb*O) where nb float32 adds did. Kernel row
    py + s*a lands on input row s*(oy + a) + py: a row offset into one contiguous float32
    buffer per parity (py, px), written into the input's gradient once.
    """
    (B, Ho, Wo, O), k, C = g.shape, w.shape[1], w.shape[3]
    P = -(-k // s) - 1                                    # the most taps of a parity, minus one
    gp = g.new_zeros(B, Ho, P + -(-W // s), O)            # zeros past the edges: full windows
    gp[:, :, P:P + Wo] = g
    sb, sh, sw, _ = gp.stride()
    grad_x = g.new_empty(B, H, W, C)
    buf = g.new_empty(B * -(-H // s) * -(-W // s) * C, dtype=wide)  # one for all parities
    for px in range(s):
        nb, N = len(range(px, k, s)), len(range(px, W, s))
        # row (b, oy, n) holds output columns n-nb+1..n, so the kernel columns go in reverse
        cols = gp[:, :, P - nb + 1:].as_strided((B, Ho, N, nb * O), (sb, sh, sw, 1))
        cols = cols.reshape(B * Ho * N, nb * O)
        wx = w[:, :, px::s].flip(2).permute(1, 2, 0, 3).reshape(k, nb * O, C)
        for py in range(s):
            M = len(range(py, H, s))
            acc = buf[:B * M * N * C].view(B, M, N, C)
            acc[:, Ho if py < k else 0:] = 0                  # the rows a = 0 does not write
            for a, ky in enumerate(range(py, k, s)):
                part = (cols @ wx[ky]).view(B, Ho, N, C)
                if a:
                    acc[:, a:a + Ho] += part
                else:
                    acc[:, :Ho] = part
            grad_x[:, py::s, px::s] = acc
        cols = part = None                # freed before the next parity's copy is made
    return grad_x


class _GemmConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, stride, dtype):
        O, C, k, _ = weight.shape
        B, _, H, W = x.shape
        Ho, Wo = (H - k) // stride + 1, (W - k) // stride + 1
        x = x.permute(0, 2, 3, 1).contiguous()                          # (B, H, W, C)
        w = weight.permute(0, 2, 3, 1).to(dtype).contiguous()          # (O, k, k, C)
        wide = torch.promote_types(dtype, torch.float32)
        y = x.new_zeros(B * Ho * Wo, O, dtype=wide) if bias is None else bias.to(wide).repeat(B * Ho * Wo, 1)
        for ky in range(k):
            y += _rows(x, ky, k, stride, Ho, Wo) @ w[:, ky].reshape(O, k * C).t()
        ctx.save_for_backward(x, w)
        ctx.stride, ctx.dtypes = stride, (weight.dtype, None if bias is None else bias.dtype)
        return y.to(dtype).view(B, Ho, Wo, O).permute(0, 3, 1, 2)     # NCHW view, channels-last data

    @staticmethod
    def backward(ctx, grad_y):
        x, w = ctx.saved_tensors
        (B, H, W, C), (O, k), s = x.shape, w.shape[:2], ctx.stride
        Ho, Wo = grad_y.shape[2:]
        w_dtype, b_dtype = ctx.dtypes
        g = grad_y.permute(0, 2, 3, 1).reshape(B * Ho * Wo, O).to(x.dtype)
        gt = g.t().contiguous()
        grad_w = torch.stack([(gt @ _rows(x, ky, k, s, Ho, Wo)).view(O, k, C) for ky in range(k)], 1)
        wide = torch.promote_types(g.dtype, torch.float32)             # sums in float32 at least
        grad_b = None if b_dtype is None else g.sum(0, dtype=wide).to(b_dtype)
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = _input_grad(g.view(B, Ho, Wo, O), w, s, H, W, wide).permute(0, 3, 1, 2)
        return grad_x, grad_w.permute(0, 3, 1, 2).to(w_dtype), grad_b, None, None


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
